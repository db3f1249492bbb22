// Training data: the byte-level vocabulary's metadata, text windows, text corpora.
#include "train/data.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "io/gguf.h"
#include "io/input_file.h"
#include "io/tokenizer.h"

namespace canvas::train {

std::vector<std::pair<std::string, GgufValue>> byte_tokenizer_metadata(bool with_mask_token) {
  // GPT-2's byte-to-unicode alphabet, then the two specials.
  const auto& alphabet = gpt2_byte_to_unicode();
  std::vector<std::string> tokens(alphabet.begin(), alphabet.end());
  tokens.push_back("<|endoftext|>");
  tokens.push_back("<|mdm_mask|>");
  std::vector<int64_t> types(256, 1);
  types.push_back(3);
  types.push_back(3);
  std::vector<std::pair<std::string, GgufValue>> metadata = {
      {"tokenizer.ggml.model", GgufValue::string("gpt2")},
      {"tokenizer.ggml.pre", GgufValue::string("gpt-2")},  // llama.cpp's name ("gpt2" is refused there)
      {"tokenizer.ggml.tokens", GgufValue::string_array(tokens)},
      {"tokenizer.ggml.token_type", GgufValue::int_array(GgufType::Int32, types)},
      {"tokenizer.ggml.merges", GgufValue::string_array({})},
      {"tokenizer.ggml.eos_token_id", GgufValue::u32(uint32_t(kByteEos))},
      {"tokenizer.ggml.add_bos_token", GgufValue::boolean(false)},
  };
  if (with_mask_token) metadata.emplace_back("tokenizer.ggml.mask_token_id", GgufValue::u32(uint32_t(kByteMask)));
  return metadata;
}

namespace {

class TextSource : public DataSource {
 public:
  TextSource(const std::string& text, int64_t seq_len, double val_fraction, int64_t n_val) : seq_len_(seq_len) {
    check(seq_len >= 2, "sequence length must be at least 2");
    check(val_fraction >= 0 && val_fraction < 1, "the validation fraction must be in [0, 1)");
    const size_t split = size_t(double(text.size()) * (1.0 - val_fraction));
    check(split > size_t(seq_len) * 2 && text.size() - split >= size_t(seq_len),
          "text corpus of " + std::to_string(text.size()) + " bytes is too small for sequences of " +
              std::to_string(seq_len));
    for (size_t i = 0; i < split; ++i) train_.push_back(int32_t(static_cast<unsigned char>(text[i])));
    for (size_t at = split; at + size_t(seq_len) <= text.size() && int64_t(validation_.size()) < n_val; at += size_t(seq_len)) {
      Example e;
      for (size_t i = at; i < at + size_t(seq_len); ++i) e.tokens.push_back(int32_t(static_cast<unsigned char>(text[i])));
      validation_.push_back(std::move(e));
    }
  }
  Example sample(Rng& rng) const override {
    const size_t start = size_t(rng.below(uint64_t(train_.size() - size_t(seq_len_))));
    Example e;
    e.tokens.assign(train_.begin() + int64_t(start), train_.begin() + int64_t(start) + seq_len_);
    return e;
  }
  const std::vector<Example>& validation() const override { return validation_; }
  int64_t sequence_length() const override { return seq_len_; }

 private:
  int64_t seq_len_;
  std::vector<int32_t> train_;
  std::vector<Example> validation_;
};

}  // namespace

std::unique_ptr<DataSource> make_text_source(const std::string& text, int64_t seq_len, double val_fraction,
                                             int64_t n_val) {
  return std::make_unique<TextSource>(text, seq_len, val_fraction, n_val);
}

std::string load_text_corpus(const std::string& name) {
  if (name == "bible") {
    FILE* pipe = popen("bible -f 'Gen1:1-Rev22:21' 2>/dev/null", "r");
    check(pipe != nullptr, "cannot run `bible` (install Debian's bible-kjv package)");
    std::string text;
    char buf[8192];
    while (std::fgets(buf, sizeof buf, pipe)) {
      std::string line(buf);
      const size_t space = line.find(' ');  // drop the "Gen1:1 " reference
      if (space != std::string::npos) text += line.substr(space + 1);
    }
    const int status = pclose(pipe);
    check(status == 0 && text.size() > 1000000, "`bible` printed too little text (is bible-kjv installed?)");
    return text;
  }
  return read_file_bounded(name, kMaxCorpusBytes, "text corpus", "kMaxCorpusBytes");
}

}  // namespace canvas::train
