// The task registry, range-checked config values, and the text task (byte or token windows of a corpus).
#include "train/task.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>

#include "core/error.h"
#include "train/corpus.h"
#include "train/model_text.h"
#include "train/sft.h"

namespace canvas::train {
namespace {

// A corpus spec of named Debian corpora only (kjv, fortunes, comma-separated; train/corpus.h), as opposed
// to the byte-level text sources (`bible`, a file path).
bool is_named_corpus(const std::string& spec) {
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t comma = std::min(spec.find(',', start), spec.size());
    const std::string part = spec.substr(start, comma - start);
    if (part != "kjv" && part != "fortunes") return false;
    start = comma + 1;
  }
  return true;
}

// `task = text`: a language model on windows of a text corpus: bytes, or with `tokenizer = FILE` the
// tokens of a trained tokenizer, text_corpus then being a corpus spec (train/corpus.h).
class TextTask : public Task {
 public:
  std::string name() const override { return "text"; }
  bool set(const std::string& key, const std::string& value, const std::string& where) override {
    if (key == "seq_len") {
      seq_len_ = config_int(value, where, key, 2, int64_t(1) << 20);
    } else if (key == "text_corpus") {
      corpus_ = value;
    } else if (key == "tokenizer") {
      tokenizer_ = value;  // empty: bytes
    } else if (key == "sft") {
      sft_ = config_number(value, where, key, 0, 1);
    } else if (key == "val_fraction") {
      // Stored as a float, as it always was, so the train/validation split stays where it was.
      val_fraction_ = float(config_number(value, where, key, 0, 1, false, true));
    } else {
      return false;
    }
    return true;
  }
  void finish(const std::string&, const std::string& origin) override {
    check(!corpus_.empty(), origin + ": text_corpus is empty (bible, or a path to a text file; with a tokenizer, a "
                                     "corpus spec such as kjv,fortunes)");
    if (sft_ > 0) {
      bool has_kjv = false;
      for (const std::string& part : config_list(corpus_)) has_kjv |= part == "kjv";
      check(is_named_corpus(corpus_) && has_kjv,
            origin + ": sft makes its chat examples from the King James Bible: text_corpus must be a named corpus "
                     "that includes kjv (e.g. kjv or kjv,fortunes), got '" + corpus_ + "'");
    }
  }
  std::vector<std::pair<std::string, std::string>> settings() const override {
    std::vector<std::pair<std::string, std::string>> s = {{"seq_len", std::to_string(seq_len_)},
                                                          {"text_corpus", corpus_},
                                                          {"tokenizer", tokenizer_},
                                                          {"val_fraction", format_setting(val_fraction_)}};
    // Listed only when on, so that runs made before the key existed keep their identity (and resume).
    if (sft_ > 0) s.emplace_back("sft", format_setting(sft_));
    return s;
  }
  std::unique_ptr<DataSource> make_source(const TaskContext& context) const override {
    std::string vocabulary;  // a tokenizer file for a named-corpus spec, else empty
    if (!tokenizer_.empty()) {
      vocabulary = tokenizer_;
    } else if (!context.model_tokenizer.empty() && is_named_corpus(corpus_)) {
      // init_from / model_config with a named corpus: the same documents and held-out split as a run with
      // `tokenizer = FILE` (stage 2 of a recipe holds out what stage 1 held out), in the model's vocabulary.
      model_tokens_ = true;
      const std::filesystem::path dir(context.model_tokenizer);
      vocabulary = std::filesystem::is_directory(dir) ? (dir / "tokenizer.json").string() : context.model_tokenizer;
    }
    check(sft_ == 0 || !vocabulary.empty(),
          "sft needs a tokenizer with the Gemma chat tokens: tokenizer = FILE, or init_from / model_config with a "
          "named text_corpus");
    if (!vocabulary.empty()) {
      const std::vector<CorpusDocument> documents = load_corpus(corpus_);
      const TrainingVocabulary v = load_training_vocabulary(vocabulary);
      std::unique_ptr<DataSource> plain =
          make_corpus_source(documents, v, seq_len_, val_fraction_, context.eval_examples);
      if (sft_ == 0) return plain;
      // Chat examples from the training split's chapters; validation adds chat examples from the held-out
      // ones, as many as sft's share of eval_examples (at least one).
      const CorpusSplit split = split_corpus(documents, val_fraction_);
      plain_validation_ = plain->validation().size();
      const int64_t n_chat =
          context.eval_examples > 0 ? std::max<int64_t>(1, std::llround(sft_ * double(context.eval_examples))) : 0;
      chat_pad_ = chat_pad_id(*v.tokenizer);
      return make_sft_source(std::move(plain), split.train, split.held_out, v.tokenizer, sft_, n_chat);
    }
    if (!context.model_tokenizer.empty()) {  // init_from / model_config with the model's own vocabulary
      model_tokens_ = true;
      const ModelTokenizer t = load_model_tokenizer(context.model_tokenizer);
      TokenVocabulary v;
      // The data's vocabulary is the tokenizer's; a checkpoint's embedding may pad past it (init_from
      // keeps those rows as they are).
      v.vocab = t.tokens > 0 ? int32_t(t.tokens) : context.model_vocab;
      v.mask_token = context.model_mask_token;
      v.eos_token = context.model_eos_token;
      v.bytes = false;
      v.metadata = t.gguf_metadata;
      return make_token_text_source(t.encode(load_text_corpus(corpus_)), seq_len_, val_fraction_,
                                    context.eval_examples, v);
    }
    return make_text_source(load_text_corpus(corpus_), seq_len_, val_fraction_, context.eval_examples);
  }
  // What the accuracy counts: bytes, or the tokenizer's tokens.
  // With sft, token_accuracy counts the plain windows only and chat_accuracy the chat examples' answer
  // tokens (the answer and its <turn|>, not the padding after it).
  std::vector<std::string> metric_names() const override {
    std::vector<std::string> names = {tokenizer_.empty() && !model_tokens_ ? "byte_accuracy" : "token_accuracy"};
    if (sft_ > 0) names.push_back("chat_accuracy");
    return names;
  }
  std::vector<TaskMetric> validation_metrics(const std::vector<ScoredSequence>& scored) const override {
    if (sft_ == 0) return {{metric_names()[0], scored_accuracy(scored)}};
    // The source's validation is the plain windows, then the chat examples.
    const size_t plain = std::min(plain_validation_, scored.size());
    const std::vector<ScoredSequence> windows(scored.begin(), scored.begin() + int64_t(plain));
    int64_t right = 0, total = 0;
    for (size_t s = plain; s < scored.size(); ++s)
      for (size_t i = 0; i < scored[s].targets.size(); ++i)
        if (scored[s].targets[i] != chat_pad_) right += scored[s].predicted[i] == scored[s].targets[i], ++total;
    return {{metric_names()[0], scored_accuracy(windows)},
            {metric_names()[1], total ? double(right) / double(total) : 0.0}};
  }

 private:
  int64_t seq_len_ = 128;
  std::string corpus_ = "bible";
  std::string tokenizer_;  // a trained tokenizer (GGUF or tokenizer.json); empty: bytes
  float val_fraction_ = 0.02f;
  double sft_ = 0;  // the fraction of training examples that are chat examples (train/sft.h)
  // Whether make_source tokenized with a model file's tokenizer (the trainer asks for metric names after).
  mutable bool model_tokens_ = false;
  // With sft, what make_source built: the number of plain validation windows (the chat examples follow
  // them) and the pad id that fills a chat example after its answer.
  mutable size_t plain_validation_ = 0;
  mutable int32_t chat_pad_ = -1;
};

std::map<std::string, TaskFactory>& registry() {
  static std::map<std::string, TaskFactory> tasks = {
      {"text", [] { return std::unique_ptr<Task>(std::make_unique<TextTask>()); }},
  };
  return tasks;
}

}  // namespace

void register_task(const std::string& name, TaskFactory factory) {
  registry()[name] = std::move(factory);
}

std::vector<std::string> task_names() {
  std::vector<std::string> names;
  for (const auto& [name, factory] : registry()) names.push_back(name);
  return names;
}

std::unique_ptr<Task> make_task(const std::string& name, const std::string& where) {
  const auto it = registry().find(name);
  if (it == registry().end()) {
    std::string known;
    for (const std::string& n : task_names()) known += (known.empty() ? "" : ", ") + n;
    throw Error(where + ": unknown task '" + name + "' (known: " + known + ")");
  }
  return it->second();
}

int64_t config_int(const std::string& value, const std::string& where, const std::string& key, int64_t lo,
                   int64_t hi) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(value.c_str(), &end, 10);
  check(!value.empty() && *end == 0, where + ": " + key + " needs an integer, got '" + value + "'");
  check(errno != ERANGE && v >= lo && v <= hi, where + ": " + key + " must be an integer in [" +
                                                   std::to_string(lo) + ", " + std::to_string(hi) +
                                                   "], got " + value);
  return int64_t(v);
}

double config_number(const std::string& value, const std::string& where, const std::string& key, double lo,
                     double hi, bool lo_open, bool hi_open) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(value.c_str(), &end);
  check(!value.empty() && *end == 0, where + ": " + key + " needs a number, got '" + value + "'");
  const bool in_range =
      errno != ERANGE && std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  check(in_range, where + ": " + key + " must be a number in " + (lo_open ? "(" : "[") + format_setting(lo) +
                      ", " + format_setting(hi) + (hi_open ? ")" : "]") + ", got " + value);
  return v;
}

bool config_bool(const std::string& value, const std::string& where, const std::string& key) {
  check(value == "true" || value == "false",
        where + ": " + key + " needs true or false, got '" + value + "'");
  return value == "true";
}

std::string config_trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> config_list(const std::string& value) {
  std::vector<std::string> items;
  std::stringstream ss(value);
  std::string item;
  while (std::getline(ss, item, ',')) items.push_back(config_trim(item));
  return items;
}

std::string format_setting(double value) {
  char buf[40];
  for (int digits = 1;; ++digits) {  // the shortest text that reads back as the same double
    std::snprintf(buf, sizeof buf, "%.*g", digits, value);
    if (digits >= 17 || std::strtod(buf, nullptr) == value) return buf;
  }
}

std::string format_setting(float value) {
  char buf[40];
  for (int digits = 1;; ++digits) {  // the shortest text that reads back as the same float
    std::snprintf(buf, sizeof buf, "%.*g", digits, double(value));
    if (digits >= 9 || std::strtof(buf, nullptr) == value) return buf;
  }
}

double scored_accuracy(const std::vector<ScoredSequence>& scored) {
  int64_t right = 0, total = 0;
  for (const ScoredSequence& s : scored)
    for (size_t i = 0; i < s.targets.size(); ++i) right += s.predicted[i] == s.targets[i], ++total;
  return total ? double(right) / double(total) : 0.0;
}

}  // namespace canvas::train
