// Likelihood of a text under a model's causal (next-token) reading: the judge of generated text and the
// exact AR negative log-likelihood of held-out text.
#pragma once
#include <cstdint>
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

}  // namespace canvas
