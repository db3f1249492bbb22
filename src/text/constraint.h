// Token-level constraints from byte automata: which token ids of a model's vocabulary may stand at a
// position so that the text stays in a regular language. CanvasConstraint serves any-order (diffusion)
// decoding of fixed-length holes; PrefixConstraint serves left-to-right (AR) decoding of a document.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "text/byte_automaton.h"

namespace canvas {

// A vocabulary as the constraint sees it: the bytes each token id stands for. Ids with an empty piece
// (control tokens: BOS, EOS, mask, pad, chat markers) never appear inside constrained text.
class TokenVocabulary {
 public:
  explicit TokenVocabulary(std::vector<std::string> pieces);
  int32_t size() const { return int32_t(pieces_.size()); }
  const std::string& piece(int32_t id) const { return pieces_[size_t(id)]; }
  // The ids with a non-empty piece, sorted by piece (so shared prefixes are adjacent).
  const std::vector<int32_t>& by_piece() const { return by_piece_; }

 private:
  std::vector<std::string> pieces_;
  std::vector<int32_t> by_piece_;
};

// A byte automaton lifted to tokens: for every state, the (token, next state) pairs whose whole piece
// keeps the automaton alive. Built once by walking the vocabulary sorted by piece (shared prefixes are
// walked once, dead prefixes skip every token under them).
class TokenAutomaton {
 public:
  TokenAutomaton(std::shared_ptr<const ByteDfa> dfa, std::shared_ptr<const TokenVocabulary> vocab);

  const ByteDfa& dfa() const { return *dfa_; }
  int32_t vocab_size() const { return vocab_size_; }
  struct Move {
    int32_t token;
    int32_t next;
  };
  const std::vector<Move>& moves(int32_t state) const { return moves_[size_t(state)]; }
  int32_t next(int32_t state, int32_t token) const;  // -1 when the token leaves the language
  // Fewest tokens from each state to acceptance (-1: unreachable with this vocabulary).
  const std::vector<int32_t>& min_tokens_to_accept() const { return min_tokens_; }

 private:
  std::shared_ptr<const ByteDfa> dfa_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  int32_t vocab_size_ = 0;
  std::vector<std::vector<Move>> moves_;
  std::vector<int32_t> min_tokens_;
};

// A hole of a canvas: `length` consecutive positions from `start` whose tokens, concatenated, must form
// a string of the automaton's language.
struct CanvasHole {
  int64_t start = 0;
  int64_t length = 0;
  std::shared_ptr<const TokenAutomaton> language;
};

// The any-order constraint over a canvas's holes. A position not in a hole is unconstrained. A token is
// allowed at an undecided position when, with the canvas's decided tokens kept, the hole can still be
// completed; so committing allowed tokens one at a time keeps every hole completable, and a finished
// canvas is valid by construction. Several tokens committed in one step must each be re-checked
// (allows) after the previous commit.
class CanvasConstraint {
 public:
  // mask_id: the id that marks an undecided position. Throws Error when holes overlap, leave the canvas
  // or their automaton's vocabulary differs from vocab_size.
  CanvasConstraint(std::vector<CanvasHole> holes, int64_t canvas_length, int32_t mask_id, int32_t vocab_size);

  // Reads the canvas (the generated region) and recomputes what changed since the last call.
  void update(const std::vector<int32_t>& canvas);
  bool constrained(int64_t position) const { return hole_of_[size_t(position)] >= 0; }
  // After update: may `token` stand at the (undecided) position?
  bool allows(int64_t position, int32_t token) const;
  // After update: the allowed tokens of an undecided position as a 0/1 mask of vocab_size.
  const std::vector<char>& allowed(int64_t position) const;
  // Sets the logits of disallowed tokens to -1e30 (a finite floor, so softmax statistics stay defined).
  void mask_logits(int64_t position, float* logits) const;
  // After update: can every hole still be completed?
  bool feasible() const;
  // The positions' canvas as a valid completion: walks each hole left to right, keeps a token while the
  // hole stays completable, else takes the best allowed token under score(position, token) (higher is
  // better). Undecided positions are filled the same way. Returns the repaired canvas.
  template <class Score>
  std::vector<int32_t> repair(std::vector<int32_t> canvas, Score score);
  const std::vector<CanvasHole>& holes() const { return holes_; }

 private:
  struct HoleState {
    std::vector<std::vector<char>> forward;   // [length + 1][states]: reachable before position i
    std::vector<std::vector<char>> backward;  // [length + 1][states]: completable from position i
    std::vector<std::vector<char>> allowed;   // [length][vocab] (only for undecided positions)
    std::vector<int32_t> seen;                // the hole's tokens at the last update
  };
  void recompute(size_t h, const std::vector<int32_t>& canvas);

  std::vector<CanvasHole> holes_;
  std::vector<HoleState> state_;
  std::vector<int32_t> hole_of_;
  int32_t mask_id_;
  int32_t vocab_size_;
};

// Left-to-right constraint over one document: the decoder keeps a state (start(), then advance() per
// token) and masks each step's logits; with `remaining` tokens left only tokens after which the
// document can still be finished in time are allowed. The end-of-text token is the caller's: it is
// allowed exactly when complete(state).
class PrefixConstraint {
 public:
  explicit PrefixConstraint(std::shared_ptr<const TokenAutomaton> language);
  int32_t start() const { return language_->dfa().start(); }
  int32_t advance(int32_t state, int32_t token) const { return language_->next(state, token); }
  bool complete(int32_t state) const { return language_->dfa().accepting(state); }
  // Nothing may follow: the document is complete and no token continues it.
  bool finished(int32_t state) const { return complete(state) && language_->moves(state).empty(); }
  // Fills allowed (vocab_size, 0/1) with the tokens that may follow at state with `remaining` tokens
  // left (counting this one).
  void allowed(int32_t state, int64_t remaining, std::vector<char>& allowed) const;
  // Can a document be finished from the start within max_tokens tokens?
  bool fits(int64_t max_tokens) const;
  int32_t vocab_size() const { return language_->vocab_size(); }

 private:
  std::shared_ptr<const TokenAutomaton> language_;
};

template <class Score>
std::vector<int32_t> CanvasConstraint::repair(std::vector<int32_t> canvas, Score score) {
  for (const CanvasHole& hole : holes_) {
    const TokenAutomaton& lang = *hole.language;
    // Completable from position i with every position >= i free.
    std::vector<std::vector<char>> free_back(size_t(hole.length + 1),
                                             std::vector<char>(size_t(lang.dfa().states()), 0));
    for (int32_t s = 0; s < lang.dfa().states(); ++s)
      free_back[size_t(hole.length)][size_t(s)] = lang.dfa().accepting(s);
    for (int64_t i = hole.length - 1; i >= 0; --i)
      for (int32_t s = 0; s < lang.dfa().states(); ++s)
        for (const TokenAutomaton::Move& m : lang.moves(s))
          if (free_back[size_t(i + 1)][size_t(m.next)]) {
            free_back[size_t(i)][size_t(s)] = 1;
            break;
          }
    int32_t state = lang.dfa().start();
    for (int64_t i = 0; i < hole.length; ++i) {
      const int64_t p = hole.start + i;
      const int32_t kept = canvas[size_t(p)] == mask_id_ ? -1 : lang.next(state, canvas[size_t(p)]);
      if (kept >= 0 && free_back[size_t(i + 1)][size_t(kept)]) {
        state = kept;
        continue;
      }
      int32_t best = -1, best_next = -1;
      double best_score = 0;
      for (const TokenAutomaton::Move& m : lang.moves(state)) {
        if (!free_back[size_t(i + 1)][size_t(m.next)]) continue;
        const double sc = score(p, m.token);
        if (best < 0 || sc > best_score) best = m.token, best_next = m.next, best_score = sc;
      }
      if (best < 0) break;  // cannot happen for a feasible hole
      canvas[size_t(p)] = best;
      state = best_next;
    }
  }
  return canvas;
}

}  // namespace canvas
