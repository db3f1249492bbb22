// Training objectives, each a small function from clean examples to a corrupted batch and the
// weighted targets of its loss: masked diffusion (MDLM), autoregressive next-token, both with SFT.
#pragma once
#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "train/train_model.h"

namespace canvas::train {

// One clean sequence; the first prompt_len tokens are the prompt (SFT: never corrupted, never scored).
struct Example {
  std::vector<int32_t> tokens;
  int64_t prompt_len = 0;
  std::vector<uint8_t> fixed;  // optional, per token: 1 = given (infilling), treated like the prompt
  bool is_prompt(int64_t i) const { return i < prompt_len || (!fixed.empty() && fixed[size_t(i)]); }
};

// The model input plus the loss terms: loss = sum_i weights[i] * CE(logits[i], targets[i]) / normaliser.
struct ObjectiveBatch {
  TokenBatch input;
  std::vector<int32_t> targets;
  std::vector<float> weights;
  float normaliser = 1;
};

// MDLM: per sequence t ~ U(eps, 1]; each non-prompt token becomes [MASK] with probability t and is
// scored with weight 1/t; the normaliser is the number of non-prompt tokens, so the loss is the
// negative ELBO per token (in nats). Bidirectional attention.
ObjectiveBatch masked_diffusion_batch(const std::vector<Example>& examples, int32_t mask_token, float eps, Rng& rng);

// Next-token cross-entropy under a causal mask: row i predicts token i+1, scored when i+1 is past the
// prompt; the normaliser is the number of scored rows (loss = NLL per token, in nats).
ObjectiveBatch autoregressive_batch(const std::vector<Example>& examples);

}  // namespace canvas::train
