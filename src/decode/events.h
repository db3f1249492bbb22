// What a generation loop reports while it runs; front ends (CLI, server, bench) consume these.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

namespace canvas {

struct Model;
class KvCache;
struct ForwardRequest;
class ThreadPool;

// Runs `requests`, all on `cache`, in order, as one forward pass (forward_batch over that cache: a decoder
// request sees the K/V an earlier encoder request of the group writes). One request is a plain forward().
using ForwardFn = std::function<void(const Model&, KvCache&, std::span<const ForwardRequest>, ThreadPool*)>;

// forward_batch with every request on `cache`.
void forward_on(const Model& model, KvCache& cache, std::span<const ForwardRequest> requests, ThreadPool* pool);

struct StepEvent {
  int64_t block = 0;                      // block index (0 for AR)
  int64_t step = 0;                       // step index within the block
  int64_t passes = 0;                     // decoder passes so far
  const std::vector<int32_t>* canvas;     // generated region; masked positions hold the mask id
  std::vector<int64_t> committed;         // positions (into the generated region) fixed by this step
  std::vector<float> confidence;          // softmax probability of each committed token (untempered)
  // The generated positions that are final (everything before it can no longer change; after it: masks,
  // noise or drafts). Set by a loop that shows drafts after its final tokens (verify), and by
  // Generator::run for its on_step. -1 when unknown.
  int64_t final_end = -1;
};

// A generated token's log-probability: the log-softmax, at temperature 1, of the logits row of the pass that
// committed it (before any sampling transform), and that row's most likely ids.
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // (id, logprob), most likely first
};

struct DecodeCallbacks {
  std::function<void(const StepEvent&)> on_step;  // may be empty
  // Runs each forward pass of the loop in place of model/model.h's forward() (empty: forward()). A server
  // uses it to gather the passes of many concurrent generations into one batched pass; it must leave
  // exactly what forward() would in the cache and the outputs. It may throw to abandon the generation.
  ForwardFn forward;
  // May be empty; returning true ends generation after the current step (AR) or block (masked
  // diffusion), e.g. once a stop string has appeared. The result then holds what was generated so far.
  std::function<bool()> should_stop;
  // May be empty (then nothing is computed); called where a token is committed, before that step's
  // on_step, with its position in the generated region and its TokenLogprob with `logprobs_top`
  // alternatives. A uniform-state run reports a canvas when it commits it (with the materialised head only).
  std::function<void(int64_t position, const TokenLogprob&)> on_logprob;
  int64_t logprobs_top = 0;
};

// forward() (or forward_on() for a group of requests on one cache), or the callbacks' replacement for it.
void run_forward(const DecodeCallbacks& callbacks, const Model& model, KvCache& cache, const ForwardRequest& request,
                 ThreadPool* pool);
void run_forward(const DecodeCallbacks& callbacks, const Model& model, KvCache& cache,
                 std::span<const ForwardRequest> requests, ThreadPool* pool);

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated ids (the whole generated region)
  int64_t prompt_tokens = 0;
  int64_t cached_prompt_tokens = 0;  // prompt tokens whose K/V came from a PrefixCache (not run again)
  int64_t passes = 0;           // forward passes that produced logits during decoding
  int64_t rows_computed = 0;    // token rows those passes ran through the model (the work they did)
  double prompt_ms = 0;         // time to the first decoder pass (prompt processing; 0 when fused)
  double decode_ms = 0;
};

}  // namespace canvas
