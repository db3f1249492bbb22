// BPE vocabulary training (word counts, alphabet by coverage, greedy pair merges with a lazy max-heap)
// and the GGUF / tokenizer.json writers for the vocabulary it makes.
#include "io/bpe_trainer.h"

#include <algorithm>
#include <map>
#include <queue>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf.h"
#include "io/tokenizer.h"
#include "io/utf8.h"

namespace canvas {
namespace {

using Kind = HfVocab::Kind;

const char* const kSpaceMarker = "\xE2\x96\x81";  // U+2581, SentencePiece's space
constexpr uint32_t kSpaceMarkerCp = 0x2581;
// Invalid UTF-8 bytes are counted under these keys (never alphabet characters).
constexpr uint32_t kInvalidByteBase = 0x110000;

// What a character is for word splitting. Letters: everything not listed (so any script's letters).
enum class CharClass : uint8_t { Space, Newline, Digit, Punct, Letter, Invalid };

CharClass classify(uint32_t cp) {
  if (cp == ' ' || cp == kSpaceMarkerCp) return CharClass::Space;
  if (cp == '\n' || cp == '\r') return CharClass::Newline;
  if (cp >= '0' && cp <= '9') return CharClass::Digit;
  if (cp < 0x80) return ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') ? CharClass::Letter : CharClass::Punct;
  if (cp == kInvalidCodePoint) return CharClass::Invalid;
  // Latin-1 punctuation and symbols, general punctuation to miscellaneous symbols (arrows, maths, box
  // drawing, dingbats), CJK punctuation, variation selectors and small/fullwidth punctuation, emoji.
  if ((cp >= 0x80 && cp <= 0xBF) || cp == 0xD7 || cp == 0xF7 || (cp >= 0x2000 && cp <= 0x2BFF) ||
      (cp >= 0x3000 && cp <= 0x303F) || (cp >= 0xFE00 && cp <= 0xFE6F) || (cp >= 0xFF01 && cp <= 0xFF0F) ||
      (cp >= 0x1F000 && cp <= 0x1FAFF))
    return CharClass::Punct;
  return CharClass::Letter;
}

struct Char {
  uint32_t key;  // code point, or kInvalidByteBase + byte for a byte that is not valid UTF-8
  CharClass cls;
  std::string_view text;
};

std::vector<Char> chars_of(std::string_view text) {
  std::vector<Char> out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    uint32_t cp;
    const size_t len = decode_utf8(text, i, cp);
    const CharClass cls = classify(cp);
    const uint32_t key = cls == CharClass::Invalid ? kInvalidByteBase + uint8_t(text[i]) : cp;
    out.push_back({key, cls, text.substr(i, len)});
    i += len;
  }
  return out;
}

// Calls emit(begin, end) (character indices) for each word of `chars` (see BpeTrainer's comment);
// invalid bytes are words of their own.
template <class Emit>
void split_words(const std::vector<Char>& chars, Emit emit) {
  const size_t n = chars.size();
  size_t i = 0;
  while (i < n) {
    size_t j = i + 1;
    const CharClass c = chars[i].cls;
    if (c == CharClass::Space) {
      while (j < n && chars[j].cls == CharClass::Space) ++j;
      if (j < n && (chars[j].cls == CharClass::Letter || chars[j].cls == CharClass::Punct)) {
        const CharClass body = chars[j].cls;
        while (j < n && chars[j].cls == body) ++j;
      }
    } else if (c == CharClass::Letter || c == CharClass::Punct || c == CharClass::Newline) {
      while (j < n && chars[j].cls == c) ++j;
    }
    emit(i, j);
    i = j;
  }
}

std::string normalized_text(const std::vector<Char>& chars, size_t begin, size_t end) {
  std::string out;
  for (size_t k = begin; k < end; ++k) out += chars[k].text == " " ? std::string_view(kSpaceMarker) : chars[k].text;
  return out;
}

std::string byte_token_text(int b) {
  static const char* hex = "0123456789ABCDEF";
  return std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">";
}

uint64_t pair_key(int32_t left, int32_t right) { return (uint64_t(uint32_t(left)) << 32) | uint32_t(right); }

}  // namespace

void BpeTrainer::add_text(std::string_view text) {
  const std::vector<Char> chars = chars_of(text);
  for (const Char& c : chars) ++chars_[c.cls == CharClass::Space ? kSpaceMarkerCp : c.key];
  split_words(chars, [&](size_t b, size_t e) {
    if (chars[b].cls != CharClass::Invalid) ++words_[normalized_text(chars, b, e)];
  });
}

HfVocab BpeTrainer::train(const BpeTrainOptions& o, BpeTrainStats* stats) const {
  check(o.character_coverage > 0 && o.character_coverage <= 1, "character coverage must be in (0, 1]");
  check(o.min_frequency >= 1, "the minimum pair frequency must be at least 1");
  check(o.vocab_size <= (1 << 24), "a vocabulary of " + std::to_string(o.vocab_size) + " tokens is too large");

  // Fixed ids: the specials at Gemma's ids, the 256 bytes in the free ids below kTrainedFixedTokens.
  HfVocab v;
  v.tokens.assign(size_t(kTrainedFixedTokens), "");
  v.kinds.assign(size_t(kTrainedFixedTokens), Kind::Byte);
  for (const SpecialToken& s : kGemmaSpecialTokens) {
    v.tokens[size_t(s.id)] = s.text;
    v.kinds[size_t(s.id)] = std::string_view(s.text) == "<unk>" ? Kind::Unknown : Kind::Special;
  }
  int byte = 0;
  for (size_t id = 0; id < v.tokens.size(); ++id)
    if (v.tokens[id].empty()) v.tokens[id] = byte_token_text(byte++);
  check(byte == 256, "internal: the fixed token layout does not hold 256 bytes");

  // Alphabet: the most frequent characters up to the coverage (ties: lower code point first).
  std::vector<std::pair<uint32_t, int64_t>> chars;
  int64_t total = 0;
  for (const auto& [key, count] : chars_) {
    total += count;
    if (key < kInvalidByteBase) chars.emplace_back(key, count);
  }
  std::sort(chars.begin(), chars.end(),
            [](const auto& a, const auto& b) { return a.second != b.second ? a.second > b.second : a.first < b.first; });
  std::unordered_map<std::string, int32_t> id_of;
  for (size_t id = 0; id < v.tokens.size(); ++id) id_of.emplace(v.tokens[id], int32_t(id));
  int64_t covered = 0;
  for (const auto& [cp, count] : chars) {
    if (double(covered) >= o.character_coverage * double(total)) break;
    covered += count;
    const std::string text = cp == kSpaceMarkerCp ? std::string(kSpaceMarker) : utf8(cp);
    id_of.emplace(text, int32_t(v.tokens.size()));
    v.tokens.push_back(text);
    v.kinds.push_back(Kind::Normal);
  }
  const int32_t alphabet = int32_t(v.tokens.size()) - kTrainedFixedTokens;
  check(int64_t(o.vocab_size) >= int64_t(v.tokens.size()),
        "a vocabulary of " + std::to_string(o.vocab_size) + " tokens cannot hold the " +
            std::to_string(kTrainedFixedTokens) + " special and byte tokens and the " + std::to_string(alphabet) +
            " characters of the alphabet (use at least " + std::to_string(v.tokens.size()) + ")");

  // Words as symbol sequences, cut at characters outside the alphabet (those become byte tokens).
  std::map<std::vector<int32_t>, int64_t> segments;  // ordered: deterministic word order
  for (const auto& [word, count] : words_) {
    std::vector<int32_t> sym;
    for (const Char& c : chars_of(word)) {
      const auto it = id_of.find(std::string(c.text));
      if (it != id_of.end() && it->second >= kTrainedFixedTokens) {
        sym.push_back(it->second);
        continue;
      }
      if (sym.size() > 1) segments[sym] += count;
      sym.clear();
    }
    if (sym.size() > 1) segments[sym] += count;
  }
  struct Word {
    std::vector<int32_t> sym;
    int64_t count;
  };
  std::vector<Word> words;
  words.reserve(segments.size());
  for (auto& [sym, count] : segments) words.push_back({sym, count});

  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<int32_t>> pair_words;  // may list words that lost the pair
  for (size_t w = 0; w < words.size(); ++w)
    for (size_t i = 0; i + 1 < words[w].sym.size(); ++i) {
      const uint64_t key = pair_key(words[w].sym[i], words[w].sym[i + 1]);
      pair_count[key] += words[w].count;
      std::vector<int32_t>& list = pair_words[key];
      if (list.empty() || list.back() != int32_t(w)) list.push_back(int32_t(w));
    }
  // Max-heap on (count, then lower left id, then lower right id). Counts of existing pairs only fall,
  // so an entry whose count is stale is re-pushed with the current one when it reaches the top.
  struct Entry {
    int64_t count;
    int32_t left, right;
    bool operator<(const Entry& o) const {
      if (count != o.count) return count < o.count;
      return left != o.left ? left > o.left : right > o.right;
    }
  };
  std::priority_queue<Entry> heap;
  for (const auto& [key, count] : pair_count)
    if (count >= o.min_frequency) heap.push({count, int32_t(key >> 32), int32_t(uint32_t(key))});

  bool stopped_early = false;
  while (int64_t(v.tokens.size()) < o.vocab_size) {
    if (heap.empty()) {
      stopped_early = true;
      break;
    }
    const Entry top = heap.top();
    heap.pop();
    const uint64_t key = pair_key(top.left, top.right);
    const auto found = pair_count.find(key);
    const int64_t current = found == pair_count.end() ? 0 : found->second;
    if (current != top.count) {
      if (current >= o.min_frequency) heap.push({current, top.left, top.right});
      continue;
    }
    const std::string text = v.tokens[size_t(top.left)] + v.tokens[size_t(top.right)];
    int32_t result;
    if (const auto it = id_of.find(text); it != id_of.end()) {
      result = it->second;  // reached again by another pair: one token, two merges (as Hugging Face allows)
    } else {
      result = int32_t(v.tokens.size());
      id_of.emplace(text, result);
      v.tokens.push_back(text);
      v.kinds.push_back(Kind::Normal);
    }
    v.merges.emplace_back(v.tokens[size_t(top.left)], v.tokens[size_t(top.right)]);

    // Rewrite every word holding the pair (left to right, as encoding does); recount its pairs.
    std::vector<int32_t> holders = std::move(pair_words[key]);
    pair_words.erase(key);
    std::vector<uint64_t> grown;  // pairs with the new token, pushed once all words are done
    for (int32_t w : holders) {
      Word& word = words[size_t(w)];
      std::vector<int32_t> next;
      next.reserve(word.sym.size());
      for (size_t i = 0; i < word.sym.size(); ++i) {
        if (i + 1 < word.sym.size() && word.sym[i] == top.left && word.sym[i + 1] == top.right) {
          next.push_back(result);
          ++i;
        } else {
          next.push_back(word.sym[i]);
        }
      }
      if (next.size() == word.sym.size()) continue;  // a stale listing: the pair is gone from this word
      for (size_t i = 0; i + 1 < word.sym.size(); ++i) {
        const auto it = pair_count.find(pair_key(word.sym[i], word.sym[i + 1]));
        if ((it->second -= word.count) == 0) pair_count.erase(it);
      }
      for (size_t i = 0; i + 1 < next.size(); ++i) {
        const uint64_t k = pair_key(next[i], next[i + 1]);
        pair_count[k] += word.count;
        if (next[i] == result || next[i + 1] == result) {
          std::vector<int32_t>& list = pair_words[k];
          if (list.empty() || list.back() != w) list.push_back(w);
          grown.push_back(k);
        }
      }
      word.sym = std::move(next);
    }
    std::sort(grown.begin(), grown.end());
    grown.erase(std::unique(grown.begin(), grown.end()), grown.end());
    for (uint64_t k : grown) {
      const auto it = pair_count.find(k);
      if (it != pair_count.end() && it->second >= o.min_frequency)
        heap.push({it->second, int32_t(k >> 32), int32_t(uint32_t(k))});
    }
  }

  v.normalized.assign(v.tokens.size(), false);
  v.replacements = {{" ", kSpaceMarker}};
  v.byte_fallback = true;
  v.fuse_unknown = true;
  v.ignore_merges = false;
  v.pad_id = 0;
  v.eos_id = 1;
  v.bos_id = 2;
  v.unknown_id = 3;
  v.add_bos = true;
  if (stats) {
    stats->characters = total;
    stats->distinct_words = int64_t(words_.size());
    stats->alphabet = alphabet;
    stats->merges = int32_t(v.merges.size());
    stats->stopped_early = stopped_early;
  }
  return v;
}

std::vector<std::pair<std::string, GgufValue>> vocab_gguf_metadata(const HfVocab& vocab) {
  std::vector<std::pair<std::string, GgufValue>> out = HfTokenizer::gguf_metadata(vocab);
  for (size_t id = 0; id < vocab.tokens.size(); ++id)
    if (vocab.tokens[id] == "<mask>" && !vocab.kinds.empty() && vocab.kinds[id] == Kind::Special) {
      out.emplace_back("tokenizer.ggml.mask_token_id", GgufValue::u32(uint32_t(id)));
      break;
    }
  return out;
}

void write_vocab_gguf(const HfVocab& vocab, const std::string& path,
                      const std::vector<std::pair<std::string, GgufValue>>& extra) {
  GgufWriter w;
  w.set("general.name", GgufValue::string("canvas tokenizer"));
  for (auto& [key, value] : vocab_gguf_metadata(vocab)) w.set(key, std::move(value));
  for (const auto& [key, value] : extra) w.set(key, value);
  w.write(path);
}

std::string tokenizer_json_text(const HfVocab& v) {
  HfTokenizer::from_vocab(v);  // validates
  const std::string problem = HfTokenizer::gguf_problem(v);
  check(problem.empty(), "the tokenizer cannot be written in Gemma's tokenizer.json layout: " + problem);
  using Json = nlohmann::ordered_json;
  auto kind = [&](size_t id) { return v.kinds.empty() ? Kind::Normal : v.kinds[id]; };
  auto string_pattern = [](const std::string& s) { return Json{{"String", s}}; };

  Json added = Json::array();
  Json vocab = Json::object();
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    const Kind k = kind(id);
    if (k == Kind::Special || k == Kind::Unknown || k == Kind::Added)
      added.push_back({{"id", id},
                       {"content", v.tokens[id]},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", k == Kind::Added},
                       {"special", k != Kind::Added}});
    if (!vocab.contains(v.tokens[id])) vocab[v.tokens[id]] = id;  // a repeated text keeps its first id
  }
  Json merges = Json::array();
  for (const auto& [left, right] : v.merges) merges.push_back(Json::array({left, right}));

  Json doc = Json::object();
  doc["version"] = "1.0";
  doc["truncation"] = nullptr;
  doc["padding"] = nullptr;
  doc["added_tokens"] = std::move(added);
  doc["normalizer"] = {{"type", "Replace"}, {"pattern", string_pattern(" ")}, {"content", kSpaceMarker}};
  // Gemma's files split on ' ' after the normalizer has replaced every ' ': a no-op kept for fidelity.
  doc["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", string_pattern(" ")}, {"behavior", "MergedWithPrevious"}, {"invert", false}};
  if (v.add_bos && v.bos_id >= 0) {
    const std::string& bos = v.tokens[size_t(v.bos_id)];
    const Json bos_item = {{"SpecialToken", {{"id", bos}, {"type_id", 0}}}};
    doc["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single", Json::array({bos_item, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"pair", Json::array({bos_item,
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
        {"special_tokens", {{bos, {{"id", bos}, {"ids", Json::array({v.bos_id})}, {"tokens", Json::array({bos})}}}}}};
  } else {
    doc["post_processor"] = nullptr;
  }
  doc["decoder"] = {{"type", "Sequence"},
                    {"decoders", Json::array({{{"type", "Replace"}, {"pattern", string_pattern(kSpaceMarker)}, {"content", " "}},
                                              {{"type", "ByteFallback"}},
                                              {{"type", "Fuse"}}})}};
  doc["model"] = {{"type", "BPE"},
                  {"dropout", nullptr},
                  {"unk_token", v.unknown_id >= 0 ? Json(v.tokens[size_t(v.unknown_id)]) : Json(nullptr)},
                  {"continuing_subword_prefix", nullptr},
                  {"end_of_word_suffix", nullptr},
                  {"fuse_unk", v.fuse_unknown},
                  {"byte_fallback", v.byte_fallback},
                  {"ignore_merges", v.ignore_merges},
                  {"vocab", std::move(vocab)},
                  {"merges", std::move(merges)}};
  return doc.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::strict) + "\n";
}

}  // namespace canvas
