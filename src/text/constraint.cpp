// Token automata over a vocabulary, the any-order canvas constraint and the left-to-right one.
#include "text/constraint.h"

#include <algorithm>
#include <deque>
#include <numeric>

#include "core/error.h"

namespace canvas {

TokenVocabulary::TokenVocabulary(std::vector<std::string> pieces) : pieces_(std::move(pieces)) {
  for (int32_t id = 0; id < int32_t(pieces_.size()); ++id)
    if (!pieces_[size_t(id)].empty()) by_piece_.push_back(id);
  std::stable_sort(by_piece_.begin(), by_piece_.end(),
                   [&](int32_t a, int32_t b) { return pieces_[size_t(a)] < pieces_[size_t(b)]; });
}

TokenAutomaton::TokenAutomaton(std::shared_ptr<const ByteDfa> dfa,
                               std::shared_ptr<const TokenVocabulary> vocab)
    : dfa_(std::move(dfa)), vocab_(std::move(vocab)), vocab_size_(vocab_->size()) {
  check(!dfa_->empty(), "constraint: the language is empty (no text satisfies it)");
  const int32_t S = dfa_->states();
  moves_.resize(size_t(S));
  const std::vector<int32_t>& ids = vocab_->by_piece();
  std::vector<int32_t> stack;  // stack[d]: the state after the first d bytes of the current prefix
  for (int32_t s = 0; s < S; ++s) {
    stack.assign(1, s);
    std::string_view prev;
    size_t k = 0;
    while (k < ids.size()) {
      const std::string& piece = vocab_->piece(ids[k]);
      size_t lcp = 0;
      const size_t limit = std::min({prev.size(), piece.size(), stack.size() - 1});
      while (lcp < limit && prev[lcp] == piece[lcp]) ++lcp;
      stack.resize(lcp + 1);
      size_t dead_at = piece.size();
      for (size_t d = lcp; d < piece.size(); ++d) {
        const int32_t t = dfa_->next(stack[d], uint8_t(piece[d]));
        if (t < 0) {
          dead_at = d;
          break;
        }
        stack.push_back(t);
      }
      if (dead_at < piece.size()) {
        // Every following piece that starts with piece[0..dead_at] dies at the same byte.
        const std::string_view dead_prefix(piece.data(), dead_at + 1);
        ++k;
        while (k < ids.size() &&
               std::string_view(vocab_->piece(ids[k])).substr(0, dead_at + 1) == dead_prefix)
          ++k;
        prev = std::string_view(piece.data(), dead_at);
        continue;
      }
      moves_[size_t(s)].push_back({ids[k], stack.back()});
      prev = piece;
      ++k;
    }
    std::sort(moves_[size_t(s)].begin(), moves_[size_t(s)].end(),
              [](const Move& a, const Move& b) { return a.token < b.token; });
  }
  // Fewest tokens to acceptance: breadth-first over the reversed moves.
  auto reverse = std::vector<std::vector<int32_t>>(size_t(S));
  for (int32_t s = 0; s < S; ++s)
    for (const Move& m : moves_[size_t(s)]) reverse[size_t(m.next)].push_back(s);
  min_tokens_.assign(size_t(S), -1);
  std::deque<int32_t> queue;
  for (int32_t s = 0; s < S; ++s)
    if (dfa_->accepting(s)) {
      min_tokens_[size_t(s)] = 0;
      queue.push_back(s);
    }
  while (!queue.empty()) {
    const int32_t s = queue.front();
    queue.pop_front();
    for (int32_t p : reverse[size_t(s)])
      if (min_tokens_[size_t(p)] < 0) {
        min_tokens_[size_t(p)] = min_tokens_[size_t(s)] + 1;
        queue.push_back(p);
      }
  }
}

int32_t TokenAutomaton::next(int32_t state, int32_t token) const {
  if (state < 0 || token < 0 || token >= vocab_size_) return -1;
  const std::string& piece = vocab_->piece(token);
  if (piece.empty()) return -1;
  return dfa_->walk(state, piece);
}

CanvasConstraint::CanvasConstraint(std::vector<CanvasHole> holes, int64_t canvas_length, int32_t mask_id,
                                   int32_t vocab_size)
    : holes_(std::move(holes)),
      hole_of_(size_t(canvas_length), -1),
      mask_id_(mask_id),
      vocab_size_(vocab_size) {
  for (size_t h = 0; h < holes_.size(); ++h) {
    const CanvasHole& hole = holes_[h];
    check(hole.language != nullptr, "constraint: hole " + std::to_string(h) + " has no language");
    check(hole.language->vocab_size() == vocab_size,
          "constraint: hole " + std::to_string(h) + "'s vocabulary has " +
              std::to_string(hole.language->vocab_size()) + " tokens, the model's " +
              std::to_string(vocab_size));
    check(hole.length > 0 && hole.start >= 0 && hole.start + hole.length <= canvas_length,
          "constraint: hole " + std::to_string(h) + " [" + std::to_string(hole.start) + ", " +
              std::to_string(hole.start + hole.length) + ") is outside the canvas of " +
              std::to_string(canvas_length));
    for (int64_t p = hole.start; p < hole.start + hole.length; ++p) {
      check(hole_of_[size_t(p)] < 0, "constraint: holes overlap at position " + std::to_string(p));
      hole_of_[size_t(p)] = int32_t(h);
    }
  }
  state_.resize(holes_.size());
}

void CanvasConstraint::recompute(size_t h, const std::vector<int32_t>& canvas) {
  const CanvasHole& hole = holes_[h];
  const TokenAutomaton& lang = *hole.language;
  const ByteDfa& dfa = lang.dfa();
  const int32_t S = dfa.states();
  const int64_t K = hole.length;
  HoleState& st = state_[h];
  st.seen.assign(canvas.begin() + hole.start, canvas.begin() + hole.start + K);
  st.forward.assign(size_t(K + 1), std::vector<char>(size_t(S), 0));
  st.backward.assign(size_t(K + 1), std::vector<char>(size_t(S), 0));
  st.allowed.resize(size_t(K));
  st.forward[0][size_t(dfa.start())] = 1;
  for (int64_t i = 0; i < K; ++i) {
    const int32_t token = st.seen[size_t(i)];
    for (int32_t s = 0; s < S; ++s) {
      if (!st.forward[size_t(i)][size_t(s)]) continue;
      if (token != mask_id_) {
        const int32_t n = lang.next(s, token);
        if (n >= 0) st.forward[size_t(i + 1)][size_t(n)] = 1;
      } else {
        for (const TokenAutomaton::Move& m : lang.moves(s)) st.forward[size_t(i + 1)][size_t(m.next)] = 1;
      }
    }
  }
  for (int32_t s = 0; s < S; ++s) st.backward[size_t(K)][size_t(s)] = dfa.accepting(s);
  for (int64_t i = K - 1; i >= 0; --i) {
    const int32_t token = st.seen[size_t(i)];
    const std::vector<char>& after = st.backward[size_t(i + 1)];
    for (int32_t s = 0; s < S; ++s) {
      if (token != mask_id_) {
        const int32_t n = lang.next(s, token);
        st.backward[size_t(i)][size_t(s)] = n >= 0 && after[size_t(n)];
      } else {
        for (const TokenAutomaton::Move& m : lang.moves(s))
          if (after[size_t(m.next)]) {
            st.backward[size_t(i)][size_t(s)] = 1;
            break;
          }
      }
    }
  }
  for (int64_t i = 0; i < K; ++i) {
    std::vector<char>& allowed = st.allowed[size_t(i)];
    if (st.seen[size_t(i)] != mask_id_) {
      allowed.clear();
      continue;
    }
    allowed.assign(size_t(vocab_size_), 0);
    const std::vector<char>& after = st.backward[size_t(i + 1)];
    for (int32_t s = 0; s < S; ++s) {
      if (!st.forward[size_t(i)][size_t(s)]) continue;
      for (const TokenAutomaton::Move& m : lang.moves(s))
        if (after[size_t(m.next)]) allowed[size_t(m.token)] = 1;
    }
  }
}

void CanvasConstraint::update(const std::vector<int32_t>& canvas) {
  check(canvas.size() == hole_of_.size(), "constraint: the canvas has " + std::to_string(canvas.size()) +
                                              " positions, the constraint " +
                                              std::to_string(hole_of_.size()));
  for (size_t h = 0; h < holes_.size(); ++h) {
    const CanvasHole& hole = holes_[h];
    const HoleState& st = state_[h];
    const bool same =
        !st.forward.empty() && std::equal(st.seen.begin(), st.seen.end(), canvas.begin() + hole.start);
    if (!same) recompute(h, canvas);
  }
}

const std::vector<char>& CanvasConstraint::allowed(int64_t position) const {
  const int32_t h = hole_of_[size_t(position)];
  check(h >= 0, "constraint: position " + std::to_string(position) + " is in no hole");
  const HoleState& st = state_[size_t(h)];
  check(!st.forward.empty(), "constraint: update() was not called");
  const std::vector<char>& a = st.allowed[size_t(position - holes_[size_t(h)].start)];
  check(!a.empty(), "constraint: position " + std::to_string(position) + " is already decided");
  return a;
}

bool CanvasConstraint::allows(int64_t position, int32_t token) const {
  if (!constrained(position)) return true;
  if (token < 0 || token >= vocab_size_) return false;
  return allowed(position)[size_t(token)] != 0;
}

void CanvasConstraint::mask_logits(int64_t position, float* logits) const {
  if (!constrained(position)) return;
  const std::vector<char>& a = allowed(position);
  for (int32_t v = 0; v < vocab_size_; ++v)
    if (!a[size_t(v)]) logits[v] = -1e30f;
}

bool CanvasConstraint::feasible() const {
  for (size_t h = 0; h < holes_.size(); ++h) {
    const HoleState& st = state_[h];
    if (st.backward.empty()) return false;
    if (!st.backward[0][size_t(holes_[h].language->dfa().start())]) return false;
  }
  return true;
}

PrefixConstraint::PrefixConstraint(std::shared_ptr<const TokenAutomaton> language)
    : language_(std::move(language)) {}

void PrefixConstraint::allowed(int32_t state, int64_t remaining, std::vector<char>& allowed) const {
  allowed.assign(size_t(language_->vocab_size()), 0);
  const std::vector<int32_t>& dist = language_->min_tokens_to_accept();
  for (const TokenAutomaton::Move& m : language_->moves(state)) {
    const int32_t d = dist[size_t(m.next)];
    if (d >= 0 && d <= remaining - 1) allowed[size_t(m.token)] = 1;
  }
}

bool PrefixConstraint::fits(int64_t max_tokens) const {
  const int32_t d = language_->min_tokens_to_accept()[size_t(start())];
  return d >= 0 && d <= max_tokens;
}

}  // namespace canvas
