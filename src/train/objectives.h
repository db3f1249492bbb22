// Training objectives, each a small function from clean examples to a corrupted batch and the
// weighted targets of its loss: masked diffusion (MDLM), uniform-state block diffusion (DiffusionGemma),
// autoregressive next-token; all with SFT.
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
  float mask_rate = 0;         // masked diffusion: > 0 fixes this example's t instead of drawing it
  std::vector<float> weight;   // optional, per token: masked diffusion multiplies its loss weight by it
  bool is_prompt(int64_t i) const { return i < prompt_len || (!fixed.empty() && fixed[size_t(i)]); }
};

// The model input plus the loss terms: loss = sum_i weights[i] * CE(logits[i], targets[i]) / normaliser.
struct ObjectiveBatch {
  TokenBatch input;
  std::vector<int32_t> targets;
  std::vector<float> weights;
  float normaliser = 1;
};

// MDLM: per sequence t ~ U(eps, 1] (or the example's mask_rate); each non-prompt token becomes [MASK]
// with probability t and is scored with weight 1/t (times the example's weight of the token, if it has
// one); the normaliser is the number of non-prompt tokens, so the loss is the negative ELBO per token
// (in nats) when no example carries weights. Bidirectional attention.
ObjectiveBatch masked_diffusion_batch(const std::vector<Example>& examples, int32_t mask_token, float eps, Rng& rng);

// Next-token cross-entropy under a causal mask: row i predicts token i+1, scored when i+1 is past the
// prompt; the normaliser is the number of scored rows (loss = NLL per token, in nats).
ObjectiveBatch autoregressive_batch(const std::vector<Example>& examples);

// Uniform-state block diffusion as DiffusionGemma trains (docs/diffusiongemma.md section 4), laid out so
// that one forward pass holds both of its views of an example:
//   - a block of `block_length` response positions starting at b (uniform over [prompt_len, L - block],
//     so the model sees every context length it meets when decoding; for an example with a prompt,
//     b = prompt_len half of the time, where a reply's first canvas starts), corrupted with probability
//     t ~ U(eps, 1] per example by uniformly random tokens from [0, vocab); givens are never corrupted;
//   - the clean tokens before b, causal (the encoder's view, whose K/V the decoder reads from the cache).
// Row layout per sequence of length L: [unused rows ; clean 0..b-1 ; corrupted block b..b+B-1], at RoPE
// positions 0..b+B-1. Visibility groups: clean row i has group i; block rows have group b, so they see
// the clean prefix and each other but nothing after b (seeing the clean block would leak the answer);
// unused rows have a group above every other and are never seen. Loss: the flat mean CE over the block
// (corrupted and clean positions alike; no 1/t weight) plus ar_weight times the mean next-token CE of the
// clean rows (the encoder loss). Both views share the weights and one backward pass.
// With draft_length k > 0, a share `draft_share` of the examples is laid out as draft-and-verify drafts
// (decode/verify.h): the block is [one clean token at b ; k positions of pure noise (t = 1)], b >= 1, and
// only the k noise positions are scored, each with weight block_length / k so that a draft example
// weighs as much as a full block. A share `draft_noisy_first` of the draft examples has the first token
// noised and scored too (weight block_length / (k + 1)): what an overlapped verify cycle's candidates see,
// AR's token at that position being unknown when they draft.
struct UniformStateOptions {
  int64_t block_length = 32;
  int64_t vocab = 0;        // noise tokens are uniform over [0, vocab)
  float eps = 1e-3f;        // t ~ U(eps, 1]
  float ar_weight = 1.f;    // weight of the encoder (next-token) loss
  bool decoder_view = false;  // DiffusionGemma: mark the block rows as the decoder's (TokenBatch::decoder)
  int64_t draft_length = 0;   // 0: no draft examples
  float draft_share = 0.5f;
  float draft_noisy_first = 0.f;
};
ObjectiveBatch uniform_state_batch(const std::vector<Example>& examples, const UniformStateOptions& options, Rng& rng);

}  // namespace canvas::train
