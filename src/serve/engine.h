// The request engine of canvas serve: a bounded queue, --parallel generation slots whose steps share
// one batched forward (StepBatcher), routing between diffusion and AR, and per-request progress that
// the HTTP layer streams.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "decode/cost_model.h"
#include "decode/mode_router.h"
#include "decode/events.h"
#include "decode/generation.h"
#include "model/model.h"
#include "serve/batcher.h"
#include "serve/job.h"
#include "serve/metrics.h"

namespace canvas::serve {

using canvas::DecodeMode;
using canvas::decode_mode_name;
using canvas::parse_decode_mode;
using canvas::CostModel;
using canvas::ModeChoice;
using canvas::cost_model_file_for;
using canvas::cost_model_key;

struct EngineOptions {
  int64_t parallel = 4;   // generations decoded at once (their steps batched)
  int64_t queue = 64;     // requests waiting for a slot; more are refused
  DecodeMode default_mode = DecodeMode::Auto;
  // The model's tokenizer and chat format (null: requests come as ids and produce no text) and its
  // sampler defaults; they must outlive the engine.
  const TextTokenizer* tokenizer = nullptr;
  const ChatFormat* chat = nullptr;
  SamplerDefaults defaults;
  // The sampling a request that sets none runs with (default_sampling(): the model's own values, else
  // llama.cpp's; greedy for canvas's own and diffusion models). Greedy when left as is.
  SamplingParams sampling;
  // --cost-model: the routing cost model read from this file when it was measured for `cost_model_key`
  // (the model file, threads, device), measured and written to it otherwise; empty: measured each start.
  std::string cost_model_file, cost_model_key;
  // --draft-datastore: verify's datastore drafts for every request that brings none.
  std::shared_ptr<const Datastore> datastore;
};

// Requests are taken from the queue, up to `parallel` at a time, by the step batcher's thread, which decodes
// all of them, every running request's pass in one batched forward per step: each request runs
// Generator::run on a fiber (core/fiber.h) that pauses in each of its passes, whatever its mode. No request
// has a thread of its own.
class Engine {
 public:
  Engine(const Model& model, ThreadPool* pool, EngineOptions options);
  ~Engine();  // drops what is queued, cancels what runs
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // False when the queue is full (the caller answers 503) or the engine is stopping.
  bool submit(const std::shared_ptr<Job>& job);
  // Stops taking requests and drops the queued ones (Finished with `dropped` and an error, never Started);
  // running ones go on.
  void drain();
  // drain(), then waits for the running ones to finish (cancelled first when cancel_running).
  void shutdown(bool cancel_running);

  const Model& model() const { return model_; }
  const EngineOptions& options() const { return options_; }
  const Generator& generator() const { return generator_; }
  bool has_diffusion() const { return generator_.has_diffusion(); }
  bool has_ar() const { return generator_.has_ar(); }
  // True when the cost model was read from --cost-model's file rather than measured at start-up.
  bool cost_model_stored() const { return router_.stored(); }
  // True when the measured cost model was written to that file (false: it was left as it was; a warning
  // said why).
  bool cost_model_written() const { return router_.written(); }
  // auto's router (decode/mode_router.h): the modes a request may run in, checked before it is queued.
  const ModeRouter& router() const { return router_; }
  // The mode a request would get now (ModeRouter::choose at the current load), with its draft length and
  // overlap for verify and the reason.
  ModeChoice choose(const GenerationSettings& settings) const;
  CostModel cost_model() const;  // a copy (finished requests update it)

  int64_t queued() const;
  int64_t running() const;
  const StepBatcher& batcher() const { return batcher_; }
  // Where finished generations are counted, under the model id `model` (null: nowhere); call it before
  // the first submit; the metrics must outlive the engine's generations.
  void set_metrics(ServerMetrics* metrics, std::string model) {
    metrics_model_ = std::move(model);
    metrics_.store(metrics);
  }

 private:
  struct Queued {
    std::shared_ptr<Job> job;
    double since_ms = 0;
  };
  struct Running;  // a job taken from the queue, with its request as it runs
  class OnFiber;  // ... decoded on a fiber of the batcher's thread
  // The batcher's intake: queued jobs while slots are free.
  void take(std::vector<std::unique_ptr<StepBatcher::Sequence>>& stepped);
  std::unique_ptr<Running> start(const Queued& queued);  // its mode chosen, its callbacks set, Started
  // The job's result, what routing learns from it, the metrics and the log line, Finished; frees its slot.
  void end(Running& run, const GenerationOutput& out, const std::string& error);
  const Model& model_;
  EngineOptions options_;
  Generator generator_;
  ModeRouter router_;  // auto's choices, and what finished requests teach them
  mutable std::mutex mutex_;
  std::condition_variable slot_freed_;
  std::deque<Queued> queue_;
  std::vector<Job*> running_jobs_;
  int64_t running_ = 0;
  int64_t started_ = 0;  // jobs started so far (a job ran alone when none started during it)
  bool stopping_ = false;
  std::atomic<ServerMetrics*> metrics_{nullptr};
  std::string metrics_model_;  // the id the metrics count this engine's generations under
  // Last: built after, and its thread joined before, the members its intake uses.
  StepBatcher batcher_;
};

}  // namespace canvas::serve
