// Likelihood of a text under a model's causal (next-token) reading: the judge of generated text and the
// exact AR negative log-likelihood of held-out text.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "core/thread_pool.h"
#include "model/model.h"

namespace canvas {

struct SequenceScore {
  double nll_nats = 0;   // -sum log p(token_i | tokens before i) over the scored tokens
  int64_t scored = 0;    // tokens scored
};

// Scores tokens[first, n) given everything before them, in one causal pass (so n must fit the context).
// Works for models whose causal rows predict the next token: AR models (shifted logits) and uniform-state
// models' encoders. Throws Error for a model that cannot score left to right (masked diffusion) or for
// first < 1.
SequenceScore score_causal(const Model& model, const std::vector<int32_t>& tokens, int64_t first, ThreadPool* pool);

// How many windows score_causal_windows runs over n tokens (1 when they fit in one window).
int64_t score_window_count(int64_t n, int64_t window, int64_t stride);

// Scores tokens[first, n) of a text that may be longer than the context: one score_causal pass when n fits
// in `window`, else windows of `window` tokens starting `stride` apart (the last one moved back to full
// length), each scoring the tokens after those already scored, so that every token is scored once and sees
// at least min(window - stride, first) tokens before it. `windows` (optional) receives the number of
// windows run; `on_window` (optional) is called after each window of a multi-window run. Throws Error for
// a stride outside [1, window).
SequenceScore score_causal_windows(const Model& model, const std::vector<int32_t>& tokens, int64_t first,
                                   int64_t window, int64_t stride, ThreadPool* pool, int64_t* windows = nullptr,
                                   const std::function<void()>& on_window = {});

}  // namespace canvas
