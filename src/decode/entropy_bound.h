// DiffusionGemma's uniform-state entropy-bound sampler: the canvas loop, talking to the model only
// through two callbacks (decoder pass over a canvas, encoder pass over a committed canvas).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "core/thread_pool.h"
#include "decode/events.h"

namespace canvas {

// Defaults are the release's generation_config.json (docs/diffusiongemma.md section 3).
struct EntropyBoundParams {
  int64_t canvas_length = 256;
  int64_t max_denoising_steps = 48;   // N: s runs N, N-1, ..., 1
  float entropy_bound = 0.1f;         // nats; the acceptance budget of one step
  float t_min = 0.4f, t_max = 0.8f;   // T = t_min + (t_max - t_min) * s / N
  // Consecutive steps whose argmax canvas must equal the previous step's before the adaptive stop may
  // fire (1: the current equals the previous once, so at least 2 steps; 0: the entropy test alone).
  int64_t stability_threshold = 1;
  float confidence_threshold = 0.005f;  // the mean entropy (nats) over the canvas must be below it
  int64_t max_new_tokens = 256;
  std::vector<int32_t> eos_ids{1, 106, 50};
  int32_t pad_id = 0;
  uint64_t seed = 0;
};

// The model as the sampler sees it. The caller has already encoded the prompt into its KV cache.
struct DiffusionModelHooks {
  int64_t vocab = 0;
  // One decoder pass (bidirectional over cache + canvas; never writes the cache). self_cond holds the
  // previous step's temperature-scaled logits [canvas_length x vocab], or is nullptr on the first step
  // of a canvas (the model then uses zeros). Must write [canvas_length x vocab] logits; the vector
  // arrives already sized so, and is the same buffer every call.
  std::function<void(const std::vector<int32_t>& canvas, const std::vector<float>* self_cond,
                     std::vector<float>& logits)>
      decode;
  // Appends a committed canvas (argmax tokens) to the KV cache with the causal encoder. Called before
  // every canvas after the first, never after the last (nothing reads the cache then; a caller that
  // keeps the cache for a next turn encodes the tail of `tokens` itself).
  std::function<void(const std::vector<int32_t>& tokens)> encode;
};

struct EntropyBoundResult : GenerationResult {
  // tokens: every committed token; after the first EOS (kept) the rest of its canvas is pad_id.
  // passes: decoder passes (encoder passes are not counted).
  int64_t new_tokens = 0;           // tokens != pad_id
  double tokens_per_forward = 0;    // new_tokens / passes
  int64_t encoder_passes = 0;
  std::vector<int64_t> steps_per_canvas;
};

// T at step s (s = N first, 1 last): t_min + (t_max - t_min) * s / N. Note T(1) is
// t_min + (t_max - t_min) / N, not t_min: the schedule never reaches t_min itself.
double entropy_bound_temperature(int64_t s, int64_t steps, float t_min, float t_max);

// Entropy-bound acceptance (arXiv 2505.24857): order positions by entropy ascending (ties: lower
// position first) and accept the longest prefix of that order whose members k all satisfy
// cumsum(H)_k - H_k <= bound, i.e. the entropies accepted before k sum to at most `bound`. The first
// position is always accepted. Returns accepted positions in acceptance order.
std::vector<int64_t> entropy_bound_accept(const std::vector<float>& entropies, float bound);

// Generates up to params.max_new_tokens tokens, canvas by canvas. Per step: decode; z = logits / T;
// a = argmax z; y ~ softmax(z) (inverse CDF in double, one uniform per position drawn in position
// order, so the tokens do not depend on the pool's thread count); accept by entropy_bound_accept on
// the entropies of softmax(z); canvas = accepted ? y : fresh uniform token; stop early once the argmax
// canvas has equalled the previous step's stability_threshold times in a row and the mean entropy is
// below confidence_threshold. The last step's argmax canvas is committed. One StepEvent per step:
// block = canvas index, canvas = committed tokens followed by the current (re-noised) canvas,
// committed = accepted positions (indices into that region) and confidence = untempered softmax
// probability of each accepted token. Memory: the logits and one z buffer, plus per-position vectors.
EntropyBoundResult generate_entropy_bound(const DiffusionModelHooks& hooks, const EntropyBoundParams& params,
                                          const DecodeCallbacks& callbacks = {}, ThreadPool* pool = nullptr);

}  // namespace canvas
