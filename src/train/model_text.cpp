// A model's tokenizer for training text, and token windows.
#include "train/model_text.h"

#include <cstdio>
#include <filesystem>
#include <unistd.h>

#include "core/error.h"
#include "io/hf_tokenizer.h"
#include "io/tokenizer.h"

namespace canvas::train {
namespace {

class TokenTextSource : public DataSource {
 public:
  TokenTextSource(std::vector<int32_t> ids, int64_t seq_len, double val_fraction, int64_t n_val, TokenVocabulary v)
      : seq_len_(seq_len), vocabulary_(std::move(v)) {
    check(seq_len > 1, "text source: seq_len must be above 1");
    const size_t held = size_t(double(ids.size()) * val_fraction);
    check(ids.size() > held + size_t(seq_len) && held >= size_t(seq_len),
          "text source: " + std::to_string(ids.size()) + " tokens are too few for windows of " +
              std::to_string(seq_len) + " and a validation part");
    train_.assign(ids.begin(), ids.end() - int64_t(held));
    for (size_t at = train_.size(); at + size_t(seq_len) <= ids.size() && int64_t(validation_.size()) < n_val;
         at += size_t(seq_len)) {
      Example e;
      e.tokens.assign(ids.begin() + int64_t(at), ids.begin() + int64_t(at) + seq_len);
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
  int32_t vocab_size() const override { return vocabulary_.vocab; }
  int32_t mask_token() const override { return vocabulary_.mask_token; }
  int32_t eos_token() const override { return vocabulary_.eos_token; }
  std::vector<std::pair<std::string, GgufValue>> tokenizer_metadata(bool with_mask_token) const override {
    if (vocabulary_.bytes) return byte_tokenizer_metadata(with_mask_token);
    return vocabulary_.metadata;
  }

 private:
  int64_t seq_len_;
  TokenVocabulary vocabulary_;
  std::vector<int32_t> train_;
  std::vector<Example> validation_;
};

}  // namespace

ModelTokenizer load_model_tokenizer(const std::string& path) {
  ModelTokenizer t;
  std::error_code ec;
  const std::filesystem::path p(path);
  if (std::filesystem::is_directory(p, ec) || p.filename() == "config.json") {
    const std::filesystem::path dir = std::filesystem::is_directory(p, ec) ? p : p.parent_path();
    const std::string json = (dir / "tokenizer.json").string();
    check(std::filesystem::exists(json, ec), path + ": no tokenizer.json to tokenize the training text with");
    const HfVocab vocab = HfTokenizer::vocab_from_json(json);
    auto tokenizer = std::make_shared<const HfTokenizer>(HfTokenizer::from_vocab(vocab));
    t.encode = [tokenizer](std::string_view text) { return tokenizer->encode(text, false, false); };
    t.tokens = tokenizer->vocab_size();
    if (HfTokenizer::gguf_problem(vocab).empty()) {
      // The GGUF form of the tokenizer, read back from a scratch file (GgufWriter keeps its keys private).
      GgufWriter w;
      HfTokenizer::write_gguf(vocab, w);
      const std::string scratch = (std::filesystem::temp_directory_path() /
                                   ("canvas_tokenizer_" + std::to_string(::getpid()) + ".gguf")).string();
      w.write(scratch);
      const std::shared_ptr<GgufFile> file = GgufFile::open(scratch);
      for (const auto& kv : file->metadata()) t.gguf_metadata.push_back(kv);
      std::remove(scratch.c_str());
    } else {
      std::fprintf(stderr, "notice: %s cannot be stored in a GGUF; exported models need --tokenizer %s\n",
                   json.c_str(), json.c_str());
    }
    return t;
  }
  auto file = GgufFile::open(path);
  const std::string model = file->get_string("tokenizer.ggml.model", "");
  check(!model.empty(), path + ": no tokenizer (tokenizer.ggml.model) to tokenize the training text with");
  if (model == "gemma4") {
    auto tokenizer = std::make_shared<const HfTokenizer>(HfTokenizer::from_gguf(*file));
    t.encode = [tokenizer](std::string_view text) { return tokenizer->encode(text, false, false); };
    t.tokens = tokenizer->vocab_size();
  } else {
    auto tokenizer = std::make_shared<const Tokenizer>(Tokenizer::from_gguf(*file));
    t.encode = [tokenizer](std::string_view text) { return tokenizer->encode(text, false, false); };
    t.tokens = tokenizer->vocab_size();
  }
  for (const auto& kv : file->metadata())
    if (kv.first.rfind("tokenizer.", 0) == 0) t.gguf_metadata.push_back(kv);
  return t;
}

std::unique_ptr<DataSource> make_token_text_source(std::vector<int32_t> ids, int64_t seq_len, double val_fraction,
                                                   int64_t n_val, TokenVocabulary vocabulary) {
  return std::make_unique<TokenTextSource>(std::move(ids), seq_len, val_fraction, n_val, std::move(vocabulary));
}

}  // namespace canvas::train
