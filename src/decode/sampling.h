// Token choice from one row of logits: greedy, or Gumbel-max at a temperature with top-k / top-p / min-p,
// after optional logit biases and repetition, frequency and presence penalties.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "decode/events.h"
#include "ops/ops.h"

namespace canvas {

struct SamplingParams {
  float temperature = 0.f;  // 0: greedy (argmax)
  int64_t top_k = 0;        // 0: off
  float top_p = 1.f;        // 1: off
  uint64_t seed = 0;
  float min_p = 0.f;           // 0: off; else keep tokens with p >= min_p * p(most likely) (untempered)
  float repeat_penalty = 1.f;  // 1: off; recent tokens' logits divided by it (multiplied when negative)
  int64_t repeat_last_n = 64;  // how many recent tokens the penalty looks at (the decode loop picks them)
  // OpenAI's penalties (0: off): a token generated c times so far in this request (the completion, not the
  // prompt) has frequency_penalty * c + presence_penalty * (c > 0) subtracted from its logit.
  float frequency_penalty = 0.f;
  float presence_penalty = 0.f;
  // Added to these ids' logits before everything else (greedy included); -100 all but bans a token, +100 all
  // but forces it, -inf bans it. An id given twice gets both.
  std::vector<std::pair<int32_t, float>> logit_bias;

  bool counts_penalized() const { return frequency_penalty != 0.f || presence_penalty != 0.f; }
};

// The tokens a row's penalties read: repeat_penalty's `recent` window (prompt included) and the request's
// `generated` tokens so far (frequency and presence penalties). Null: none.
struct TokenHistory {
  const std::vector<int32_t>* recent = nullptr;
  const std::vector<int32_t>* generated = nullptr;
};

// The repetition penalty applied to one logit: divided by the penalty, multiplied when negative (as
// llama.cpp and CTRL do).
inline float penalize_logit(float v, float penalty) { return v > 0 ? v / penalty : v * penalty; }

// The chosen token and the untempered softmax statistics of its row (so that confidence, margin and
// entropy scores stay meaningful at temperature 0, as in the reference implementations).
struct TokenChoice {
  int32_t token = 0;
  float p_token = 0;  // softmax(logits)[token]
  RowStats stats;
};

// Greedy when temperature == 0, else argmax(logits + T * gumbel) over the candidates kept by top-k,
// top-p and min-p (Gumbel-max draws from softmax(logits / T) restricted to them), computed in double
// precision. The row is first shaped, in llama.cpp's order: logit_bias added; with repeat_penalty != 1 the
// logits of the distinct ids in history.recent divided by the penalty (multiplied when negative, as
// llama.cpp and CTRL do); then each id generated c > 0 times (history.generated) lowered by
// frequency_penalty * c + presence_penalty. Everything, greedy included, reads the shaped row.
// The row choose_token reads: `raw_logits` itself when nothing shapes it, else a thread-local copy shaped
// as above, valid until the next call on this thread.
const float* penalized_row(const float* raw_logits, int64_t vocab, const SamplingParams& params,
                           const TokenHistory& history);
// The ids choose_token draws among at a temperature above 0 with top-k, top-p or min-p on (descending).
std::vector<int32_t> sampling_candidates(const float* logits, int64_t vocab, const SamplingParams& params);
// The distribution choose_token draws from at a temperature above 0: softmax(logits / T) over the
// candidates (every id when no filter is on), zeros elsewhere; [vocab] probabilities in double.
std::vector<double> sampling_distribution(const float* logits, int64_t vocab, const SamplingParams& params);

// The log-probability of `token` under softmax(logits) (temperature 1) and the `top` most likely ids of the
// row with theirs.
TokenLogprob token_logprob(const float* logits, int64_t vocab, int32_t token, int64_t top);

// `position` (the sequence position the row predicts, prompt included; -1 when unknown) is named in the
// error raised for a row holding NaN or +inf.
TokenChoice choose_token(const float* logits, int64_t vocab, const SamplingParams& params, Rng& rng,
                         const TokenHistory& history = {}, int64_t position = -1);

}  // namespace canvas
