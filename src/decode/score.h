// Likelihood of a text under a model's causal (next-token) reading: the judge of generated text and the
// exact AR negative log-likelihood of held-out text.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "io/text_tokenizer.h"
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

// `canvas score`: a text, after a context that is conditioned on but not scored, tokenized (the context
// with BOS when the vocabulary has one) and scored in windows of the model's context length that start
// `stride` apart. Without a context token before it, the text's first token has nothing to be predicted
// from: it is not scored, and its bytes are left out of `bytes`.
struct TextScoreJob {
  std::vector<int32_t> tokens;  // context then text
  int64_t first = 0;            // the first scored token
  int64_t window = 0, stride = 0, windows = 0;
  int64_t bytes = 0;            // the scored text's bytes
};
// stride 0: half the context length. Throws Error for a text that encodes to no tokens, a stride outside
// [1, context), or a context that leaves no room.
TextScoreJob plan_text_score(const Model& model, const TextTokenizer& tokenizer, const std::string& context,
                             const std::string& text, int64_t stride);
struct TextScore {
  SequenceScore score;
  int64_t bytes = 0, windows = 0;
  int64_t stride = 0;  // 0 when one window held the text
  // {"tokens", "bytes", "nll_nats", "nats_per_token", "bits_per_byte", "windows", "stride"} on one line.
  std::string json() const;
};
// Runs the job; `on_window` as for score_causal_windows.
TextScore score_text(const Model& model, const TextScoreJob& job, ThreadPool* pool,
                     const std::function<void()>& on_window = {});

}  // namespace canvas
