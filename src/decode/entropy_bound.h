// DiffusionGemma's uniform-state entropy-bound sampler: the canvas loop, talking to the model only
// through two callbacks (decoder pass over a canvas, encoder pass over a committed canvas).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "core/thread_pool.h"
#include "decode/events.h"
#include "ops/lm_head.h"

namespace canvas {

// The random draws of a recorded run (the reference's generate(), tests/fixtures/make_release_fixture.py),
// replayed instead of the sampler's own RNG so that two implementations can be compared step by step:
// per canvas its initial tokens, and per step the sampled canvas and the re-noising draw (only the
// positions not accepted read it). A test hook: nothing outside the parity tests sets it.
struct EntropyBoundReplay {
  struct Step {
    std::vector<int32_t> sample, noise;
  };
  struct Canvas {
    std::vector<int32_t> initial;
    std::vector<Step> steps;
  };
  std::vector<Canvas> canvases;
};

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
  // Decode through DiffusionModelHooks::decode_stream (the fused streaming LM head) instead of decode:
  // no [canvas_length x vocab] buffer at all. Same loop and rules; the samples come from Gumbel noise,
  // a different random stream than decode's inverse CDF, so one seed gives different (equally
  // distributed) tokens on the two paths. See generate_entropy_bound.
  bool stream_head = false;
  // 1: off. Otherwise, before a step's rows are reduced, position i's logit of the token its left
  // neighbour's row now peaks at (position i-1's argmax after its own penalty; for i = 0 the last
  // committed token, or left_context when nothing is committed yet) is penalised as repeat_penalty does
  // (divided by it, multiplied when negative), left to right. It discourages the adjacent repeats
  // ("thy thy") that parallel decoding makes when two positions take the same word. Not with stream_head.
  float neighbor_penalty = 1.f;
  int32_t left_context = -1;  // the token before the first canvas (e.g. the prompt's last), or -1
  // Compute-aware decoding (approximate, off by default; needs DiffusionModelHooks::decode_rows, not
  // stream_head). A position is frozen once two consecutive steps accepted it with the same token that
  // is also its argmax: later passes skip its row (its input token no longer changes; its K/V stay as
  // its last pass computed them, and its argmax, sample and entropy as that pass reduced them), and it
  // stays accepted. The first step of a canvas is a full pass, and so is every freeze_refresh-th step
  // (0: never), which thaws the positions that no longer meet the rule.
  bool freeze = false;
  int64_t freeze_refresh = 0;
  // Token choice of an accepted position (materialised head only; the entropies and the acceptance always
  // read the full tempered distribution). greedy: its argmax. Otherwise a draw from softmax(z) restricted to
  // the top_k most likely tokens (0: all), the smallest set holding top_p of the mass (1: all) and those
  // with probability >= min_p times the most likely one's (0: all), renormalised.
  bool greedy = false;
  int64_t top_k = 0;
  float top_p = 1.f, min_p = 0.f;
  const EntropyBoundReplay* replay = nullptr;  // see EntropyBoundReplay (materialised head only)
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
  // The streaming alternative to decode (used when EntropyBoundParams::stream_head is set): one decoder
  // pass whose LM head is reduced on the fly (lm_head_stream), never materialising logits. Inputs: the
  // canvas; self_cond_soft, the previous step's soft embedding softmax(logits / T_prev) @ E as this hook
  // wrote it ([canvas_length x hidden]), or nullptr on the first step of a canvas; `head`: temperature
  // T, noise seed and row ids ([canvas_length]) for this step (softcap is the model's business). Must
  // write stats[i] (HeadRowStats of canvas position i at temperature T; resized to canvas_length) and
  // soft_embedding (softmax(logits / T) @ E, the next step's self_cond_soft; the hook sizes it, and may
  // leave it empty when its model has no self-conditioning input). The vectors are the sampler's own,
  // the same every call; soft_embedding is never the vector self_cond_soft points to.
  std::function<void(const std::vector<int32_t>& canvas, const std::vector<float>* self_cond_soft,
                     const HeadStreamOptions& head, std::vector<HeadRowStats>& stats,
                     std::vector<float>& soft_embedding)>
      decode_stream;
  // Compute-aware decoding (EntropyBoundParams::freeze): a pass over the canvas rows `rows` (strictly
  // increasing) only, the other rows' K/V as the last pass computing them left them; an empty `rows`
  // is a pass over every row that also (re)starts the kept K/V of this canvas. self_cond: the previous
  // step's temperature-scaled logits of those rows ([rows x vocab], every row when `rows` is empty) or
  // nullptr; writes their logits (resized to [rows x vocab]).
  std::function<void(const std::vector<int32_t>& canvas, const std::vector<int32_t>& rows,
                     const std::vector<float>* self_cond, std::vector<float>& logits)>
      decode_rows;
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
//
// With params.stream_head the step calls hooks.decode_stream instead, and reads everything from the
// streamed head: entropies = tempered.entropy (of softmax(z)), y = sample, a = plain.argmax, confidence
// = p_sample; accepting, re-noising (the same RNG sequence), the adaptive stop and EOS handling are as
// above, and the next step's self-conditioning input is the streamed soft embedding softmax(z) @ E
// (what decode's model computes from z). The sample is a Gumbel-max draw, argmax(z + g), with noise
// g of (params.seed, row id, vocabulary index) (lm_head.h) and row id (canvas index * max_denoising_steps
// + step) * canvas_length + position, unique per draw and independent of the thread count. It is a
// different random stream than the inverse-CDF path, so the same seed gives different (equally
// distributed) tokens; as T -> 0 both become argmax. Memory: per-position stats and two
// [canvas_length x hidden] soft embeddings, no [canvas_length x vocab] buffer.
EntropyBoundResult generate_entropy_bound(const DiffusionModelHooks& hooks, const EntropyBoundParams& params,
                                          const DecodeCallbacks& callbacks = {}, ThreadPool* pool = nullptr);

}  // namespace canvas
