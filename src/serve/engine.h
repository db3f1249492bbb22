// The request engine of canvas serve: a bounded queue, --parallel generation slots whose steps share
// one batched forward (StepBatcher), routing between diffusion and AR, and per-request progress that
// the HTTP layer streams.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "decode/events.h"
#include "decode/entropy_bound.h"
#include "decode/masked.h"
#include "decode/sampling.h"
#include "model/model.h"
#include "serve/batcher.h"
#include "serve/cost_model.h"

namespace canvas::serve {

enum class DecodeMode { Auto, Diffusion, Ar };
DecodeMode parse_decode_mode(const std::string& name);  // auto | diffusion | ar
const char* decode_mode_name(DecodeMode mode);

// What one request asks for, already checked by the API layer.
struct GenerationSettings {
  DecodeMode mode = DecodeMode::Auto;
  int64_t max_tokens = 64;
  SamplingParams sampling;
  // Masked diffusion: 0 = defaults (steps = max_tokens: one token per step; block 32 or max_tokens).
  int64_t steps = 0;
  int64_t block_length = 0;
  float threshold = 0.f;
  CacheMode cache = CacheMode::Prefix;
  float entropy_bound = 0.f;  // uniform-state diffusion: 0 = the model's default
  std::vector<std::string> stop;  // text ends before the first of these
};

// Masked diffusion's block length: the request's, else 32 when it divides max_tokens, else max_tokens.
int64_t default_block_length(const GenerationSettings& settings);

// One request's life: queued, running, finished. The worker publishes the latest canvas after every
// step; readers wait on `changed`.
struct Job {
  std::vector<int32_t> prompt;
  GenerationSettings settings;

  std::mutex mutex;
  std::condition_variable changed;
  int64_t version = 0;           // bumped on every published change
  bool started = false, finished = false;
  DecodeMode mode_used = DecodeMode::Diffusion;
  std::vector<int32_t> canvas;   // the generated region so far (masked positions hold the mask id)
  int64_t passes = 0;            // forward passes that produced logits
  int64_t steps = 0;
  std::string error;             // set when the generation failed
  bool cancelled_by_client = false;
  bool uniform_state = false;    // the canvas holds noise, not masks: no committed prefix until the end
  // The final text and why it ended ("stop": EOS or a stop string; "length": max_tokens).
  std::string text, finish_reason;
  int64_t completion_tokens = 0;
  double queued_ms = 0, decode_ms = 0;

  std::atomic<bool> cancel{false};  // set by the HTTP layer when the client is gone
};

struct EngineOptions {
  int64_t parallel = 4;   // generations decoded at once (their steps batched)
  int64_t queue = 64;     // requests waiting for a slot; more are refused
  DecodeMode default_mode = DecodeMode::Auto;
  std::vector<int32_t> stop_ids;  // tokens that end the text (EOS)
  EntropyBoundParams uniform;     // uniform-state models: the sampler's defaults
  std::function<std::string(const std::vector<int32_t>&)> detokenize;
};

class Engine {
 public:
  Engine(const Model& model, ThreadPool* pool, EngineOptions options);
  ~Engine();  // cancels what is queued, finishes what runs
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // False when the queue is full (the caller answers 503) or the engine is stopping.
  bool submit(const std::shared_ptr<Job>& job);
  // Stops taking requests; queued ones are cancelled, running ones finish (or are cancelled when
  // cancel_running), then the workers exit.
  void shutdown(bool cancel_running);

  const Model& model() const { return model_; }
  const EngineOptions& options() const { return options_; }
  bool has_diffusion() const;  // the model can decode by masked diffusion
  bool has_ar() const;         // ... and autoregressively
  // The mode a request would get now (auto resolved by the cost model at the current load).
  DecodeMode route(const GenerationSettings& settings, int64_t prompt_tokens) const;
  CostModel cost_model() const;  // a copy (finished requests update it)

  int64_t queued() const;
  int64_t running() const;
  const StepBatcher& batcher() const { return batcher_; }

  // The text a canvas stands for: tokens up to the first stop id (and, when `final` is false, only up
  // to the first masked position), cut before the first stop string. `stopped` tells whether a stop id
  // or string ended it. Used for the final text and for the streamed committed prefix.
  std::string visible_text(const std::vector<int32_t>& canvas, const std::vector<std::string>& stop, bool* stopped) const;

 private:
  void worker();
  void run(Job& job);

  const Model& model_;
  EngineOptions options_;
  StepBatcher batcher_;
  CostModel cost_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> queue_;
  int64_t running_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace canvas::serve
