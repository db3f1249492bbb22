// The request engine of canvas serve: a bounded queue, --parallel generation slots whose steps share
// one batched forward (StepBatcher), routing between diffusion and AR, and per-request progress that
// the HTTP layer streams.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
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
#include "serve/metrics.h"

namespace canvas::serve {

using canvas::DecodeMode;
using canvas::decode_mode_name;
using canvas::parse_decode_mode;
using canvas::CostModel;
using canvas::ModeChoice;
using canvas::cost_model_file_for;
using canvas::cost_model_key;

// What one request asks for (the prompt as ids in Job::prompt), already checked by the API layer.
using GenerationSettings = GenerationRequest;

// What changed in a job (JobListener's argument).
enum class JobEvent { Started, Step, Text, Finished };

// One request's life: queued, running, finished. The engine publishes the latest canvas after every step;
// readers wait on `changed` or are called through `listener`.
struct Job {
  std::vector<int32_t> prompt;
  GenerationSettings settings;
  std::string model;  // the id of the model that decodes it (for the log line)

  // Set by a front end that refused the job before the engine took it (its answer is this error).
  std::exception_ptr refused;
  // Called after every change, on the engine's thread, without `mutex` held: it must return at once (the
  // HTTP layer wakes the connection's event loop). Set before submit.
  std::function<void(JobEvent)> listener;

  std::mutex mutex;
  std::condition_variable changed;
  bool started = false, finished = false;
  DecodeMode mode_used = DecodeMode::Diffusion;
  std::string mode_reason;       // why mode_used (ModeChoice::reason)
  std::vector<int32_t> canvas;   // the generated region so far (masked positions hold the mask id)
  int64_t drafts_from = -1;      // verify: canvas positions from here on are drafts being checked (else -1)
  // The final text so far, as the generator sent it, piece by piece (append-only): each piece with the number
  // of the generated region's first tokens whose text the pieces up to it hold whole (-1: an infilled
  // document). A suffix request has none: its answer, the text between prompt and suffix, is `text`.
  struct TextPiece {
    std::string text;
    int64_t tokens = 0;
  };
  std::vector<TextPiece> pieces;
  int64_t passes = 0;            // forward passes that produced logits
  int64_t steps = 0;
  std::string error;             // set when the generation failed
  bool cancelled_by_client = false;
  bool dropped = false;          // never ran: the engine stopped before a slot took it (an HTTP 503)
  bool uniform_state = false;    // the canvas holds noise, not masks
  // The final text and why it ended (OpenAI's words: "stop" for an end token or a stop string, "length"
  // for max_tokens or the context, "cancelled"); `ended` is the generator's own reason (eos, stop, ...).
  std::string text, finish_reason, ended;
  int64_t completion_tokens = 0;
  std::vector<int32_t> tokens;   // the text's tokens (no end token, no padding)
  // With settings.logprobs >= 0: by position in the generated region while it runs (have_logprob marks
  // the committed positions), then one per token of `tokens`.
  std::vector<TokenLogprob> logprobs;
  std::vector<char> have_logprob;
  std::vector<std::string> fills;  // infilling: each hole's text
  double queued_ms = 0, decode_ms = 0;

  std::atomic<bool> cancel{false};  // set by the HTTP layer when the client is gone
};

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
  // Stops taking requests and drops the queued ones (finished with `dropped` and an error, never
  // started); running ones go on.
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
  struct Running;  // a job taken from the queue, with its request as it runs
  class OnFiber;  // ... decoded on a fiber of the batcher's thread
  // The batcher's intake: queued jobs while slots are free.
  void take(std::vector<std::unique_ptr<StepBatcher::Sequence>>& stepped);
  std::unique_ptr<Running> start(std::shared_ptr<Job> job);  // its mode chosen, its callbacks set, Started
  // The job's result, what routing learns from it, the metrics and the log line, Finished; frees its slot.
  void end(Running& run, const GenerationOutput& out, const std::string& error);
  const Model& model_;
  EngineOptions options_;
  Generator generator_;
  ModeRouter router_;  // auto's choices, and what finished requests teach them
  mutable std::mutex mutex_;
  std::condition_variable slot_freed_;
  std::deque<std::shared_ptr<Job>> queue_;
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
