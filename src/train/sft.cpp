// Chat examples from KJV chapters in the Gemma 4 format, and the data source that mixes them into a
// corpus source.
#include "train/sft.h"

#include <algorithm>
#include <map>
#include <utility>

#include "core/error.h"
#include "io/hf_tokenizer.h"

namespace canvas::train {
namespace {

// The Bible's verses as they sit in a document: one per line.
std::vector<std::string> verses_of(const std::string& text) {
  std::vector<std::string> verses;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(begin, end - begin);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.pop_back();
    if (!line.empty()) verses.push_back(std::move(line));
    begin = end + 1;
  }
  return verses;
}

std::vector<std::string> words_of(const std::string& verse) {
  std::vector<std::string> words;
  size_t begin = 0;
  while (begin < verse.size()) {
    size_t end = verse.find(' ', begin);
    if (end == std::string::npos) end = verse.size();
    if (end > begin) words.push_back(verse.substr(begin, end - begin));
    begin = end + 1;
  }
  return words;
}

std::string join(const std::vector<std::string>& words, size_t from, size_t to) {
  std::string out;
  for (size_t i = from; i < to; ++i) out += (i > from ? " " : "") + words[i];
  return out;
}

// The phrasings of each kind of request; the text goes after them.
const char* const kContinue[] = {"Continue this verse: ", "Finish this verse from the King James Bible: ",
                                 "How does this verse go on? "};
const char* const kBook[] = {"Which book of the Bible is this verse from? ",
                             "Name the book of the Bible that contains this verse: ",
                             "In which book of the Bible do we read this? "};
const char* const kPassage[] = {"Complete the passage: ", "Give the verse that follows this passage: ",
                                "Continue the passage with its next verse: "};
const char* const kNext[] = {"What comes after: ", "What is the next verse after this one? ",
                             "Which verse follows this one? "};
constexpr uint64_t kPhrasings = 3;

// The seed of the validation set's chat examples: fixed, so runs on one split validate on the same ones.
constexpr uint64_t kValidationSeed = 0x5f7c4a7e11ull;
// Draws of a chat example that does not fit in the sequence before the last one is used cut.
constexpr int kFitAttempts = 16;

class SftSource : public DataSource {
 public:
  SftSource(std::unique_ptr<DataSource> plain, const std::vector<CorpusDocument>& train_documents,
            const std::vector<CorpusDocument>& held_out_documents, std::shared_ptr<const HfTokenizer> tokenizer,
            double fraction, int64_t n_chat_val)
      : plain_(std::move(plain)), tasks_(train_documents), tokenizer_(std::move(tokenizer)), fraction_(fraction) {
    check(plain_ != nullptr && tokenizer_ != nullptr, "make_sft_source: no plain source or no tokenizer");
    check(fraction >= 0 && fraction <= 1, "sft: the fraction of chat examples must be in [0, 1]");
    check(n_chat_val >= 0, "sft: the number of validation chat examples must not be negative");
    validation_ = plain_->validation();
    if (n_chat_val > 0) {
      std::unique_ptr<KjvChatTasks> held_out;
      try {
        held_out = std::make_unique<KjvChatTasks>(held_out_documents);
      } catch (const Error& e) {
        throw Error(std::string("sft: the held-out split has no chapter to validate chat examples on (raise "
                                "val_fraction): ") + e.what());
      }
      Rng rng(kValidationSeed);
      for (int64_t i = 0; i < n_chat_val; ++i) validation_.push_back(draw(*held_out, rng));
    }
  }
  Example sample(Rng& rng) const override {
    if (rng.uniform() < fraction_) return draw(tasks_, rng);
    return plain_->sample(rng);
  }
  const std::vector<Example>& validation() const override { return validation_; }
  int64_t sequence_length() const override { return plain_->sequence_length(); }
  int32_t vocab_size() const override { return plain_->vocab_size(); }
  int32_t mask_token() const override { return plain_->mask_token(); }
  int32_t eos_token() const override { return plain_->eos_token(); }
  std::vector<std::pair<std::string, GgufValue>> tokenizer_metadata(bool with_mask_token) const override {
    return plain_->tokenizer_metadata(with_mask_token);
  }

 private:
  Example draw(const KjvChatTasks& tasks, Rng& rng) const {
    Example e;
    for (int attempt = 0; attempt < kFitAttempts; ++attempt)
      if (chat_example(tasks.draw(rng), *tokenizer_, sequence_length(), e)) break;
    return e;
  }

  std::unique_ptr<DataSource> plain_;
  KjvChatTasks tasks_;
  std::shared_ptr<const HfTokenizer> tokenizer_;
  double fraction_;
  std::vector<Example> validation_;
};

}  // namespace

std::string kjv_book_name(const std::string& abbreviation) {
  // The abbreviations `bible -f` prints (Debian's bible-kjv), in the Bible's order.
  static const std::map<std::string, std::string> names = {
      {"Ge", "Genesis"},         {"Exo", "Exodus"},           {"Lev", "Leviticus"},
      {"Num", "Numbers"},        {"Deu", "Deuteronomy"},      {"Josh", "Joshua"},
      {"Jdgs", "Judges"},        {"Ruth", "Ruth"},            {"1Sm", "1 Samuel"},
      {"2Sm", "2 Samuel"},       {"1Ki", "1 Kings"},          {"2Ki", "2 Kings"},
      {"1Chr", "1 Chronicles"},  {"2Chr", "2 Chronicles"},    {"Ezra", "Ezra"},
      {"Neh", "Nehemiah"},       {"Est", "Esther"},           {"Job", "Job"},
      {"Psa", "Psalms"},         {"Prv", "Proverbs"},         {"Eccl", "Ecclesiastes"},
      {"SSol", "Song of Solomon"}, {"Isa", "Isaiah"},         {"Jer", "Jeremiah"},
      {"Lam", "Lamentations"},   {"Eze", "Ezekiel"},          {"Dan", "Daniel"},
      {"Hos", "Hosea"},          {"Joel", "Joel"},            {"Amos", "Amos"},
      {"Obad", "Obadiah"},       {"Jonah", "Jonah"},          {"Mic", "Micah"},
      {"Nahum", "Nahum"},        {"Hab", "Habakkuk"},         {"Zep", "Zephaniah"},
      {"Hag", "Haggai"},         {"Zec", "Zechariah"},        {"Mal", "Malachi"},
      {"Mat", "Matthew"},        {"Mark", "Mark"},            {"Luke", "Luke"},
      {"John", "John"},          {"Acts", "Acts"},            {"Rom", "Romans"},
      {"1Cor", "1 Corinthians"}, {"2Cor", "2 Corinthians"},   {"Gal", "Galatians"},
      {"Eph", "Ephesians"},      {"Phi", "Philippians"},      {"Col", "Colossians"},
      {"1Th", "1 Thessalonians"}, {"2Th", "2 Thessalonians"}, {"1Tim", "1 Timothy"},
      {"2Tim", "2 Timothy"},     {"Titus", "Titus"},          {"Phmn", "Philemon"},
      {"Heb", "Hebrews"},        {"Jas", "James"},            {"1Pet", "1 Peter"},
      {"2Pet", "2 Peter"},       {"1Jn", "1 John"},           {"2Jn", "2 John"},
      {"3Jn", "3 John"},         {"Jude", "Jude"},            {"Rev", "Revelation"},
  };
  const auto it = names.find(abbreviation);
  return it == names.end() ? "" : it->second;
}

std::string gemma4_chat_prompt(const std::string& request) {
  return "<bos><|turn>user\n" + request + "<turn|>\n<|turn>model\n";
}

KjvChatTasks::KjvChatTasks(const std::vector<CorpusDocument>& documents) {
  for (const CorpusDocument& d : documents) {
    if (d.key.rfind("kjv:", 0) != 0) continue;
    // "kjv:1Sm12": the book is the reference without its chapter number.
    const std::string reference = d.key.substr(4);
    const size_t digits = reference.find_last_not_of("0123456789");
    check(digits != std::string::npos && digits + 1 < reference.size(),
          "sft: corpus document '" + d.key + "' is not a KJV chapter (kjv:BookC)");
    const std::string book = kjv_book_name(reference.substr(0, digits + 1));
    check(!book.empty(), "sft: corpus document '" + d.key + "' names no book of the Bible");
    Chapter c{book, verses_of(d.text)};
    if (c.verses.empty()) continue;
    for (size_t v = 0; v < c.verses.size(); ++v) verses_.emplace_back(uint32_t(chapters_.size()), uint32_t(v));
    chapters_.push_back(std::move(c));
  }
  check(!chapters_.empty(), "sft: the corpus holds no KJV chapter to make chat examples from (text_corpus = kjv)");
}

ChatTurn KjvChatTasks::draw(Rng& rng) const {
  const uint64_t kind = rng.below(4), phrasing = rng.below(kPhrasings);
  // A verse the kind can use: `continue` needs four words, `passage` two verses after it, `next` one.
  // Short chapters and verses are drawn again; a kind no verse allows falls back to `book`.
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const auto [c, v] = verses_[size_t(rng.below(verses_.size()))];
    const Chapter& chapter = chapters_[c];
    const std::string& verse = chapter.verses[v];
    if (kind == 0) {
      const std::vector<std::string> words = words_of(verse);
      const size_t n = words.size();
      if (n < 4) continue;
      // The first third to two thirds of the verse is given (at least two words each side).
      const size_t lo = std::max<size_t>(2, (n + 2) / 3), hi = std::min(n - 2, 2 * n / 3);
      const size_t cut = lo + size_t(rng.below(uint64_t(std::max(hi, lo) - lo + 1)));
      return {kContinue[phrasing] + join(words, 0, cut), join(words, cut, n)};
    }
    if (kind == 2) {
      if (v + 2 >= chapter.verses.size()) continue;
      return {kPassage[phrasing] + verse + " " + chapter.verses[v + 1], chapter.verses[v + 2]};
    }
    if (kind == 3) {
      if (v + 1 >= chapter.verses.size()) continue;
      return {kNext[phrasing] + verse, chapter.verses[v + 1]};
    }
    return {kBook[phrasing] + verse, chapter.book};
  }
  const auto [c, v] = verses_[size_t(rng.below(verses_.size()))];
  return {kBook[phrasing] + chapters_[c].verses[v], chapters_[c].book};
}

int32_t chat_pad_id(const HfTokenizer& tokenizer) {
  return tokenizer.pad_id() >= 0 ? tokenizer.pad_id() : tokenizer.eos_id();
}

bool chat_example(const ChatTurn& turn, const HfTokenizer& tokenizer, int64_t seq_len, Example& out) {
  check(seq_len >= 2, "chat_example: the sequence length must be at least 2");
  const int32_t bos = tokenizer.bos_id(), open = tokenizer.token_id("<|turn>"), close = tokenizer.token_id("<turn|>");
  check(bos >= 0 && open >= 0 && close >= 0 && tokenizer.is_special(open) && tokenizer.is_special(close),
        "sft: the tokenizer has no <bos>, <|turn> or <turn|> special token (the Gemma 4 chat format needs them)");
  // The prompt exactly as `canvas chat` encodes it (the whole rendering, special tokens parsed); the
  // answer as the model writes it, its text never parsed for special tokens.
  const std::vector<int32_t> prompt = tokenizer.encode(gemma4_chat_prompt(turn.request), false, true);
  check(prompt.size() >= 2 && prompt[0] == bos && prompt[1] == open,
        "sft: the tokenizer does not read '<bos><|turn>' as its <bos> and <|turn> tokens");
  const std::vector<int32_t> answer = tokenizer.encode(turn.answer, false, false);
  const int32_t pad = chat_pad_id(tokenizer);
  check(pad >= 0, "sft: the tokenizer has neither a pad nor an <eos> token");
  out = Example{};
  out.tokens = prompt;
  out.tokens.insert(out.tokens.end(), answer.begin(), answer.end());
  out.tokens.push_back(close);
  const bool fits = int64_t(out.tokens.size()) <= seq_len;
  out.tokens.resize(size_t(seq_len), pad);
  out.prompt_len = std::min<int64_t>(int64_t(prompt.size()), seq_len);
  return fits;
}

std::unique_ptr<DataSource> make_sft_source(std::unique_ptr<DataSource> plain,
                                            const std::vector<CorpusDocument>& train_documents,
                                            const std::vector<CorpusDocument>& held_out_documents,
                                            std::shared_ptr<const HfTokenizer> tokenizer, double fraction,
                                            int64_t n_chat_val) {
  return std::make_unique<SftSource>(std::move(plain), train_documents, held_out_documents, std::move(tokenizer),
                                     fraction, n_chat_val);
}

}  // namespace canvas::train
