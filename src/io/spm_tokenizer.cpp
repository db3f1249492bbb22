// Score-ordered SentencePiece BPE over a llama.cpp "llama" vocabulary (tokens + scores, no merges).
#include "io/spm_tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "core/error.h"
#include "io/gguf.h"
#include "io/tokenizer.h"

namespace canvas {
namespace {

const std::string kSpaceMarker = "\xe2\x96\x81";  // U+2581

size_t utf8_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xe) return 3;
  if ((lead >> 3) == 0x1e) return 4;
  return 1;  // a stray continuation or invalid byte stands alone
}

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  std::string out;
  size_t at = 0;
  while (true) {
    const size_t next = text.find(from, at);
    if (next == std::string::npos) break;
    out.append(text, at, next - at);
    out += to;
    at = next + from.size();
  }
  out.append(text, at, std::string::npos);
  return out;
}

}  // namespace

bool SpmTokenizer::describes(const GgufFile& file) {
  return file.get_string("tokenizer.ggml.model", "") == "llama" && file.find("tokenizer.ggml.scores") &&
         !file.find("tokenizer.ggml.merges");
}

SpmTokenizer SpmTokenizer::from_gguf(const GgufFile& file) {
  const std::string where = file.path() + ": ";
  const std::string model = file.require_string("tokenizer.ggml.model");
  check(model == "llama", where + "tokenizer.ggml.model is '" + model + "', not a SentencePiece ('llama') vocabulary");
  SpmTokenizer t;
  t.tokens_ = file.get_string_array("tokenizer.ggml.tokens");
  check(!t.tokens_.empty(), where + "tokenizer.ggml.tokens is missing or empty");
  check(t.tokens_.size() < size_t(INT32_MAX), where + "tokenizer.ggml.tokens is too large");
  const size_t n = t.tokens_.size();
  for (double s : file.get_float_array("tokenizer.ggml.scores")) t.scores_.push_back(float(s));
  check(t.scores_.size() == n, where + "tokenizer.ggml.scores has " + std::to_string(t.scores_.size()) +
                                   " entries for " + std::to_string(n) + " tokens");
  for (int64_t type : file.get_int_array("tokenizer.ggml.token_type")) t.types_.push_back(int32_t(type));
  if (t.types_.empty()) t.types_.assign(n, kTokenNormal);
  check(t.types_.size() == n, where + "tokenizer.ggml.token_type has " + std::to_string(t.types_.size()) +
                                  " entries for " + std::to_string(n) + " tokens");
  for (size_t id = 0; id < n; ++id) {
    t.ids_.emplace(t.tokens_[id], int32_t(id));  // the lowest id of a repeated text
    t.token_pairs_.add(t.tokens_[id]);
    uint8_t byte;
    if (t.types_[id] == kTokenByte && parse_byte_token(t.tokens_[id], byte) && t.byte_ids_[byte] < 0)
      t.byte_ids_[byte] = int32_t(id);
    if ((t.types_[id] == kTokenControl || t.types_[id] == kTokenUserDefined) && !t.tokens_[id].empty())
      t.special_ids_.push_back(int32_t(id));
    if (t.types_[id] == kTokenUnknown && t.unknown_id_ < 0) t.unknown_id_ = int32_t(id);
  }
  std::stable_sort(t.special_ids_.begin(), t.special_ids_.end(),
                   [&](int32_t a, int32_t b) { return t.tokens_[a].size() > t.tokens_[b].size(); });
  auto id = [&](const char* key, int64_t fallback) -> int32_t {
    const int64_t v = file.get_int(key, fallback);
    check(v >= -1 && v < int64_t(n), where + key + " = " + std::to_string(v) + " is outside the vocabulary");
    return int32_t(v);
  };
  t.bos_id_ = id("tokenizer.ggml.bos_token_id", -1);
  t.eos_id_ = id("tokenizer.ggml.eos_token_id", -1);
  t.unknown_id_ = id("tokenizer.ggml.unknown_token_id", t.unknown_id_);
  t.add_space_prefix_ = file.get_bool("tokenizer.ggml.add_space_prefix", true);
  return t;
}

// One run of text (spaces already U+2581): characters are the first symbols; the adjacent pair whose
// concatenation is the highest-scoring token merges first (ties: the leftmost), until no pair is a token.
// A final symbol that is not a token is split back along the merges that built it, down to characters,
// and a character that is not a token becomes its bytes' tokens.
void SpmTokenizer::encode_text(std::string_view text, std::vector<int32_t>& out) const {
  struct Symbol {
    int prev, next;
    size_t begin, size;
  };
  std::vector<Symbol> symbols;
  for (size_t at = 0; at < text.size();) {
    const size_t len = std::min(text.size() - at, utf8_length(uint8_t(text[at])));
    symbols.push_back({int(symbols.size()) - 1, -1, at, len});
    at += len;
    if (at < text.size()) symbols.back().next = int(symbols.size());
  }
  if (symbols.empty()) return;
  struct Pair {
    int left, right;
    float score;
    size_t size;
  };
  auto lower = [](const Pair& a, const Pair& b) { return a.score < b.score || (a.score == b.score && a.left > b.left); };
  std::priority_queue<Pair, std::vector<Pair>, decltype(lower)> queue(lower);
  std::unordered_map<std::string, std::pair<int, int>> built_from;
  auto try_pair = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const std::string piece(text.substr(symbols[size_t(left)].begin, symbols[size_t(left)].size + symbols[size_t(right)].size));
    const auto it = ids_.find(piece);
    if (it == ids_.end()) return;
    queue.push({left, right, scores_[size_t(it->second)], piece.size()});
    built_from[piece] = {left, right};
  };
  for (size_t i = 1; i < symbols.size(); ++i) try_pair(int(i) - 1, int(i));
  while (!queue.empty()) {
    const Pair p = queue.top();
    queue.pop();
    Symbol& left = symbols[size_t(p.left)];
    Symbol& right = symbols[size_t(p.right)];
    if (left.size == 0 || right.size == 0 || left.size + right.size != p.size) continue;  // stale
    left.size += right.size;
    right.size = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[size_t(right.next)].prev = p.left;
    try_pair(left.prev, p.left);
    try_pair(p.left, left.next);
  }
  // Recursion depth is bounded by the number of merges inside one symbol (at most its length).
  auto emit = [&](auto&& self, const Symbol& s) -> void {
    const std::string piece(text.substr(s.begin, s.size));
    if (const auto it = ids_.find(piece); it != ids_.end()) {
      out.push_back(it->second);
      return;
    }
    const auto parts = built_from.find(piece);
    if (parts == built_from.end()) {
      for (char c : piece) {
        const int32_t id = byte_ids_[uint8_t(c)];
        check(id >= 0 || unknown_id_ >= 0, "tokenizer: byte " + std::to_string(int(uint8_t(c))) +
                                              " has no token and the vocabulary has no unknown token");
        out.push_back(id >= 0 ? id : unknown_id_);
      }
      return;
    }
    self(self, symbols[size_t(parts->second.first)]);
    self(self, symbols[size_t(parts->second.second)]);
  };
  for (int i = 0; i != -1; i = symbols[size_t(i)].next) emit(emit, symbols[size_t(i)]);
}

std::vector<int32_t> SpmTokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  std::vector<int32_t> out;
  if (add_bos && bos_id_ >= 0) out.push_back(bos_id_);
  bool after_special = true;  // the text's start counts: it gets the space prefix too
  auto raw = [&](std::string_view span) {
    if (span.empty()) return;
    std::string piece = (add_space_prefix_ && after_special) ? " " : "";
    piece += span;
    // Merges join only text that is a token: a long text is encoded in pieces cut where none can span.
    const std::string marked = replace_all(std::move(piece), " ", kSpaceMarker);
    encode_in_pieces(
        marked, piece_bytes_, [&](size_t from) { return token_pairs_.cut(marked, from, [](size_t) { return true; }); },
        [&](std::string_view part, bool) { encode_text(part, out); });
    after_special = false;
  };
  size_t at = 0, start = 0;
  while (at < text.size()) {
    int32_t matched = -1;
    for (int32_t id : special_ids_) {
      if (types_[size_t(id)] == kTokenControl && !parse_special) continue;
      const std::string& s = tokens_[size_t(id)];
      if (text.compare(at, s.size(), s) == 0) {
        matched = id;
        break;
      }
    }
    if (matched < 0) {
      ++at;
      continue;
    }
    raw(text.substr(start, at - start));
    out.push_back(matched);
    after_special = true;
    at += tokens_[size_t(matched)].size();
    start = at;
  }
  raw(text.substr(start));
  return out;
}

std::string SpmTokenizer::token_text(int32_t id) const {
  check(id >= 0 && id < vocab_size(), "token id " + std::to_string(id) + " is out of range (vocabulary of " +
                                          std::to_string(vocab_size()) + ")");
  return tokens_[size_t(id)];
}

std::string SpmTokenizer::token_piece(int32_t id) const {
  const std::string& text = token_text(id);
  uint8_t byte;
  if (types_[size_t(id)] == kTokenByte && parse_byte_token(text, byte)) return std::string(1, char(byte));
  if (types_[size_t(id)] == kTokenControl || types_[size_t(id)] == kTokenUnknown) return text;
  return replace_all(text, kSpaceMarker, " ");
}

std::string SpmTokenizer::decode(const std::vector<int32_t>& ids, bool render_special) const {
  std::string out;
  bool first_text = true;
  for (int32_t id : ids) {
    const std::string& text = token_text(id);
    const int32_t type = types_[size_t(id)];
    uint8_t byte;
    if (type == kTokenControl || type == kTokenUnknown) {
      if (render_special) out += text;
      continue;
    }
    if (type == kTokenByte && parse_byte_token(text, byte)) {
      out += char(byte);
    } else {
      std::string piece = replace_all(text, kSpaceMarker, " ");
      // The encoder's space prefix: drop it from the first piece of text, as SentencePiece does.
      if (first_text && add_space_prefix_ && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
      out += piece;
    }
    first_text = false;
  }
  return out;
}

}  // namespace canvas
