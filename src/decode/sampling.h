// Token choice from one row of logits: greedy, or Gumbel-max at a temperature with top-k / top-p.
#pragma once
#include <cstdint>

#include "core/rng.h"
#include "ops/ops.h"

namespace canvas {

struct SamplingParams {
  float temperature = 0.f;  // 0: greedy (argmax)
  int64_t top_k = 0;        // 0: off
  float top_p = 1.f;        // 1: off
  uint64_t seed = 0;
};

// The chosen token and the untempered softmax statistics of its row (so that confidence, margin and
// entropy scores stay meaningful at temperature 0, as in the reference implementations).
struct TokenChoice {
  int32_t token = 0;
  float p_token = 0;  // softmax(logits)[token]
  RowStats stats;
};

// Greedy when temperature == 0, else argmax(logits + T * gumbel) over the candidates kept by top-k and
// top-p (Gumbel-max draws from softmax(logits / T) restricted to them), computed in double precision.
TokenChoice choose_token(const float* logits, int64_t vocab, const SamplingParams& params, Rng& rng);

}  // namespace canvas
