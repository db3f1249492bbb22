// Corpus documents (KJV chapters, fortunes, file paragraphs), the held-out split by document, and the
// tokenized data source.
#include "train/corpus.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"
#include "core/timer.h"
#include "io/bpe_trainer.h"
#include "io/gguf.h"
#include "io/input_file.h"
#include "io/hf_tokenizer.h"

namespace canvas::train {
namespace fs = std::filesystem;
namespace {

std::string read_file(const std::string& path, const std::string& what) {
  return read_file_bounded(path, kMaxCorpusBytes, what, "kMaxCorpusBytes");
}

// Lines of text without their '\n' (a final line without one counts too; '\r' is kept).
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return lines;
}

bool blank(const std::string& line) { return line.find_first_not_of(" \t\r") == std::string::npos; }

// Paragraphs (runs of non-blank lines) of a text, each with a trailing '\n'.
std::vector<CorpusDocument> paragraph_documents(const std::string& name, const std::string& text) {
  std::vector<CorpusDocument> docs;
  std::string current;
  auto flush = [&]() {
    if (!current.empty()) docs.push_back({name + ":" + std::to_string(docs.size()), std::move(current)});
    current.clear();
  };
  for (const std::string& line : lines_of(text)) {
    if (blank(line))
      flush();
    else
      current += line + "\n";
  }
  flush();
  return docs;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) {
    h ^= uint8_t(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

// The fortune files that are English prose (ascii-art is pictures, translate-me is Latin).
bool is_prose_fortune_file(const fs::path& p) {
  const std::string name = p.filename().string();
  return !fs::is_symlink(p) && fs::is_regular_file(p) && p.extension().empty() && name != "ascii-art" &&
         name != "translate-me";
}

class CorpusSource : public DataSource {
 public:
  CorpusSource(const std::vector<CorpusDocument>& documents, const TrainingVocabulary& vocabulary, int64_t seq_len,
               double held_out_fraction, int64_t n_val)
      : seq_len_(seq_len), vocabulary_(vocabulary) {
    check(seq_len >= 2, "sequence length must be at least 2");
    check(n_val >= 0, "the number of validation examples must not be negative");
    const CorpusSplit split = split_corpus(documents, held_out_fraction);
    train_ = corpus_token_stream(split.train, *vocabulary.tokenizer);
    const std::vector<int32_t> held_out = corpus_token_stream(split.held_out, *vocabulary.tokenizer);
    check(train_.size() > size_t(seq_len),
          "the corpus's training split has " + std::to_string(train_.size()) + " tokens, too few for sequences of " +
              std::to_string(seq_len));
    check(n_val == 0 || held_out.size() >= size_t(seq_len),
          "the corpus's held-out split has " + std::to_string(held_out.size()) +
              " tokens, too few for one validation sequence of " + std::to_string(seq_len) +
              " (raise val_fraction or add text)");
    for (size_t at = 0; at + size_t(seq_len) <= held_out.size() && int64_t(validation_.size()) < n_val;
         at += size_t(seq_len)) {
      Example e;
      e.tokens.assign(held_out.begin() + int64_t(at), held_out.begin() + int64_t(at) + seq_len);
      validation_.push_back(std::move(e));
    }
  }
  Example sample(Rng& rng) const override {
    const size_t start = size_t(rng.below(uint64_t(train_.size() - size_t(seq_len_) + 1)));
    Example e;
    e.tokens.assign(train_.begin() + int64_t(start), train_.begin() + int64_t(start) + seq_len_);
    return e;
  }
  const std::vector<Example>& validation() const override { return validation_; }
  int64_t sequence_length() const override { return seq_len_; }
  int32_t vocab_size() const override { return vocabulary_.tokenizer->vocab_size(); }
  int32_t mask_token() const override { return vocabulary_.mask_id; }
  int32_t eos_token() const override { return vocabulary_.tokenizer->eos_id(); }
  std::vector<std::pair<std::string, GgufValue>> tokenizer_metadata(bool with_mask_token) const override {
    std::vector<std::pair<std::string, GgufValue>> out;
    for (const auto& kv : vocabulary_.metadata)
      if (with_mask_token || kv.first != "tokenizer.ggml.mask_token_id") out.push_back(kv);
    return out;
  }

 private:
  int64_t seq_len_;
  TrainingVocabulary vocabulary_;
  std::vector<int32_t> train_;
  std::vector<Example> validation_;
};

}  // namespace

std::vector<CorpusDocument> kjv_documents(const std::string& bible_output) {
  std::vector<CorpusDocument> docs;
  for (const std::string& line : lines_of(bible_output)) {
    if (blank(line)) continue;
    const size_t space = line.find(' '), colon = line.find(':');
    check(space != std::string::npos && colon != std::string::npos && colon < space,
          "bible output line '" + line.substr(0, 60) + "' is not 'BookC:V text'");
    const std::string key = "kjv:" + line.substr(0, colon);
    if (docs.empty() || docs.back().key != key) docs.push_back({key, ""});
    docs.back().text += line.substr(space + 1) + "\n";
  }
  return docs;
}

std::vector<CorpusDocument> fortune_documents(const std::string& name, const std::string& text) {
  std::vector<CorpusDocument> docs;
  std::string current;
  auto flush = [&]() {
    // Leading and trailing blank lines are not part of a fortune.
    std::vector<std::string> lines = lines_of(current);
    while (!lines.empty() && blank(lines.back())) lines.pop_back();
    size_t first = 0;
    while (first < lines.size() && blank(lines[first])) ++first;
    std::string text_out;
    for (size_t i = first; i < lines.size(); ++i) text_out += lines[i] + "\n";
    if (!text_out.empty()) docs.push_back({"fortunes:" + name + ":" + std::to_string(docs.size()), text_out});
    current.clear();
  };
  for (const std::string& line : lines_of(text)) {
    if (line == "%" || line == "%\r")
      flush();
    else
      current += line + "\n";
  }
  flush();
  return docs;
}

std::vector<CorpusDocument> load_corpus_part(const std::string& part, const std::string& fortunes_dir) {
  std::vector<CorpusDocument> docs;
  if (part == "kjv" || part == "bible") {
    FILE* pipe = popen("bible -f 'Gen1:1-Rev22:21' 2>/dev/null", "r");
    check(pipe != nullptr, "corpus part kjv: cannot run `bible` (install Debian's bible-kjv package)");
    std::string text;
    char buf[8192];
    size_t got;
    while ((got = std::fread(buf, 1, sizeof buf, pipe)) > 0) text.append(buf, got);
    const int status = pclose(pipe);
    check(status == 0 && text.size() > 1000000,
          "corpus part kjv: `bible` printed too little text (is Debian's bible-kjv package installed?)");
    docs = kjv_documents(text);
  } else if (part == "fortunes") {
    check(fs::is_directory(fortunes_dir),
          "corpus part fortunes: " + fortunes_dir + " does not exist (install Debian's fortunes package)");
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(fortunes_dir))
      if (is_prose_fortune_file(entry.path())) files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) {
      std::vector<CorpusDocument> more = fortune_documents(f.filename().string(), read_file(f.string(), "fortune file"));
      docs.insert(docs.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
    }
  } else {
    check(!part.empty(), "empty corpus part (a spec is a comma-separated list: kjv, fortunes or file paths)");
    check(fs::is_regular_file(part), "corpus part '" + part + "' is neither kjv, bible, fortunes nor a readable file");
    docs = paragraph_documents(part, read_file(part, "corpus file"));
  }
  check(!docs.empty(), "corpus part '" + part + "' holds no document");
  return docs;
}

std::vector<std::string> corpus_parts(const std::string& spec) {
  std::vector<std::string> parts;
  std::stringstream ss(spec);
  std::string part;
  while (std::getline(ss, part, ',')) {
    const size_t b = part.find_first_not_of(" \t"), e = part.find_last_not_of(" \t");
    parts.push_back(b == std::string::npos ? "" : part.substr(b, e - b + 1));
  }
  return parts;
}

std::vector<std::string> corpus_files(const std::string& spec) {
  std::vector<std::string> files;
  for (const std::string& part : corpus_parts(spec))
    if (!part.empty() && part != "kjv" && part != "bible" && part != "fortunes") files.push_back(part);
  return files;
}

std::vector<CorpusDocument> load_corpus(const std::string& spec) {
  std::vector<CorpusDocument> docs;
  std::map<std::string, bool> seen;
  for (const std::string& part : corpus_parts(spec)) {
    const std::string canonical = part == "bible" ? "kjv" : part;
    check(!seen[canonical], "corpus spec '" + spec + "' names '" + part + "' twice");
    seen[canonical] = true;
    std::vector<CorpusDocument> more = load_corpus_part(part);
    docs.insert(docs.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  }
  check(!docs.empty(), "corpus spec '" + spec + "' names no part");
  return docs;
}

CorpusSplit split_corpus(const std::vector<CorpusDocument>& documents, double held_out_fraction) {
  check(held_out_fraction >= 0 && held_out_fraction < 1, "the held-out fraction must be in [0, 1)");
  std::map<std::string, std::vector<size_t>> parts;  // part -> indices of its documents
  for (size_t i = 0; i < documents.size(); ++i) {
    const std::string& key = documents[i].key;
    parts[key.substr(0, key.find(':'))].push_back(i);
  }
  std::vector<bool> held(documents.size(), false);
  for (auto& [part, indices] : parts) {
    std::vector<std::pair<uint64_t, const std::string*>> ranked;
    for (size_t i : indices) ranked.emplace_back(fnv1a(documents[i].key), &documents[i].key);
    std::vector<size_t> order(indices.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = k;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return ranked[a].first != ranked[b].first ? ranked[a].first < ranked[b].first : *ranked[a].second < *ranked[b].second;
    });
    const size_t n_held = size_t(std::llround(held_out_fraction * double(indices.size())));
    for (size_t k = 0; k < n_held; ++k) held[indices[order[k]]] = true;
  }
  CorpusSplit split;
  for (size_t i = 0; i < documents.size(); ++i) (held[i] ? split.held_out : split.train).push_back(documents[i]);
  return split;
}

std::vector<int32_t> corpus_token_stream(const std::vector<CorpusDocument>& documents, const HfTokenizer& tokenizer) {
  check(tokenizer.bos_id() >= 0 && tokenizer.eos_id() >= 0, "the tokenizer has no <bos> or no <eos> token");
  std::vector<int32_t> stream;
  for (const CorpusDocument& d : documents) {
    stream.push_back(tokenizer.bos_id());
    const std::vector<int32_t> ids = tokenizer.encode(d.text, false, false);
    stream.insert(stream.end(), ids.begin(), ids.end());
    stream.push_back(tokenizer.eos_id());
  }
  return stream;
}

TokenizationMeasure measure_tokenization(const std::vector<CorpusDocument>& documents, const HfTokenizer& tokenizer) {
  TokenizationMeasure m;
  for (const CorpusDocument& d : documents) {
    ++m.documents;
    m.bytes += int64_t(d.text.size());
    m.tokens += int64_t(tokenizer.encode(d.text, false, false).size());
  }
  return m;
}

CorpusTokenizer train_corpus_tokenizer(const std::string& spec, double held_out_fraction,
                                       const BpeTrainOptions& options) {
  CorpusTokenizer r;
  const double t0 = now_ms();
  const CorpusSplit split = split_corpus(load_corpus(spec), held_out_fraction);
  BpeTrainer trainer;
  for (const CorpusDocument& d : split.train) trainer.add_text(d.text);
  const double t1 = now_ms();
  r.vocab = trainer.train(options, &r.stats);
  r.counting_seconds = (t1 - t0) / 1000;
  r.merging_seconds = (now_ms() - t1) / 1000;
  r.training_documents = int64_t(split.train.size());
  const HfTokenizer tokenizer = HfTokenizer::from_vocab(r.vocab);
  r.train = measure_tokenization(split.train, tokenizer);
  r.held_out = measure_tokenization(split.held_out, tokenizer);
  char fraction[32];
  std::snprintf(fraction, sizeof fraction, "%g", held_out_fraction);
  r.metadata = {{"canvas.tokenizer.corpus", GgufValue::string(spec)},
                {"canvas.tokenizer.held_out_fraction", GgufValue::string(fraction)},
                {"canvas.tokenizer.character_coverage", GgufValue::f64(options.character_coverage)},
                {"canvas.tokenizer.min_frequency", GgufValue::u64(uint64_t(options.min_frequency))}};
  return r;
}

TrainingVocabulary load_training_vocabulary(const std::string& path) {
  TrainingVocabulary v;
  const HfVocab vocab = HfTokenizer::vocab_from_file(path, &v.mask_id);
  try {
    v.tokenizer = std::make_shared<const HfTokenizer>(HfTokenizer::from_vocab(vocab));
    v.metadata = vocab_gguf_metadata(vocab);
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
  if (v.mask_id < 0) {
    const int32_t id = v.tokenizer->token_id("<mask>");
    if (id >= 0 && v.tokenizer->kind(id) == HfVocab::Kind::Special) v.mask_id = id;
  }
  check(v.mask_id < v.tokenizer->vocab_size(), path + ": tokenizer.ggml.mask_token_id is out of range");
  // The model names the mask the file names (vocab_gguf_metadata's guess is replaced).
  std::erase_if(v.metadata, [](const auto& kv) { return kv.first == "tokenizer.ggml.mask_token_id"; });
  if (v.mask_id >= 0) v.metadata.emplace_back("tokenizer.ggml.mask_token_id", GgufValue::u32(uint32_t(v.mask_id)));
  return v;
}

std::unique_ptr<DataSource> make_corpus_source(const std::vector<CorpusDocument>& documents,
                                               const TrainingVocabulary& vocabulary, int64_t seq_len,
                                               double held_out_fraction, int64_t n_val) {
  return std::make_unique<CorpusSource>(documents, vocabulary, seq_len, held_out_fraction, n_val);
}

std::unique_ptr<DataSource> make_corpus_source(const std::string& spec, const std::string& tokenizer_path,
                                               int64_t seq_len, double held_out_fraction, int64_t n_val) {
  return make_corpus_source(load_corpus(spec), load_training_vocabulary(tokenizer_path), seq_len, held_out_fraction,
                            n_val);
}

}  // namespace canvas::train
