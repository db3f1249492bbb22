// Queue, generation slots, routing and progress publishing of canvas serve.
#include "serve/engine.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/fiber.h"
#include "core/timer.h"
#include "decode/verify.h"
#include "serve/openai.h"

namespace canvas::serve {

namespace {

// Tells the job's readers that it changed (call without job.mutex held).
void publish(Job& job, JobEvent event) {
  job.changed.notify_all();
  if (job.listener) job.listener(event);
}

}  // namespace

Engine::Engine(const Model& model, ThreadPool* pool, EngineOptions options)
    : model_(model),
      options_(std::move(options)),
      generator_(model, options_.tokenizer, options_.defaults, options_.chat),
      router_(generator_, RouterOptions{options_.default_mode, options_.cost_model_file, options_.cost_model_key,
                                        options_.datastore != nullptr, nullptr, "canvas serve"}),
      batcher_(model, pool, [this](std::vector<std::unique_ptr<StepBatcher::Sequence>>& stepped) { take(stepped); }) {
  check(options_.parallel >= 1, "--parallel must be at least 1");
  check(options_.queue >= 0, "--queue must be >= 0");
  // The passes of AR and each verify candidate, and of batched passes, timed unless the file kept them.
  const int64_t rows = std::min<int64_t>(64, std::max<int64_t>(2, model.config.context_length));
  std::vector<int64_t> sizes = {1, std::max<int64_t>(2, rows / 2), rows};
  if (router_.chooses_by_cost()) {
    sizes = ar_text_mode_rows(model.config.has_decoder);
    sizes.insert(sizes.end(), {rows / 2, rows});
  }
  router_.time_passes(pool, sizes);
}

Engine::~Engine() { shutdown(true); }

CostModel Engine::cost_model() const { return router_.cost_model(); }

int64_t Engine::queued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return int64_t(queue_.size());
}

int64_t Engine::running() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return running_;
}

bool Engine::submit(const std::shared_ptr<Job>& job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ || int64_t(queue_.size()) >= options_.queue + std::max<int64_t>(0, options_.parallel - running_))
      return false;
    job->queued_ms = now_ms();
    queue_.push_back(job);
  }
  batcher_.wake();
  return true;
}

void Engine::drain() {
  std::deque<std::shared_ptr<Job>> dropped;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    dropped.swap(queue_);
  }
  for (auto& job : dropped) {
    {
      std::lock_guard<std::mutex> lock(job->mutex);
      job->error = "the server is shutting down";
      job->dropped = true;
      job->finished = true;
    }
    publish(*job, JobEvent::Finished);
  }
}

void Engine::shutdown(bool cancel_running) {
  drain();
  std::unique_lock<std::mutex> lock(mutex_);
  if (cancel_running)
    for (Job* job : running_jobs_) job->cancel = true;
  slot_freed_.wait(lock, [&] { return running_ == 0; });
}

ModeChoice Engine::choose(const GenerationSettings& s) const {
  int64_t load = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    load = int64_t(queue_.size()) + running_;
  }
  return router_.choose(s, std::clamp<int64_t>(load, 1, options_.parallel));
}

// A job taken from the queue, with its request as it runs (the callbacks point at it: it does not move).
struct Engine::Running {
  std::shared_ptr<Job> job;
  GenerationRequest request;
  int64_t started_before = 0;  // a job that ran alone measures its setting's speed for auto
  bool alone = false;
  bool uniform = false;
  double t0 = 0;
};

// A job, decoded by the generator as it would be alone, on a fiber of the batcher's thread: it pauses in each
// forward pass and the batcher runs the pass with the others'.
class Engine::OnFiber final : public StepBatcher::Sequence {
 public:
  OnFiber(Engine& engine, std::unique_ptr<Running> run)
      : engine_(engine), run_(std::move(run)), fiber_([this] { decode(); }) {
    run_->request.forward = [this](const Model&, KvCache& cache, std::span<const ForwardRequest> requests,
                                   ThreadPool*) {
      cache_ = &cache;
      requests_ = requests;
      Fiber::suspend();  // the batcher runs the pass, calls ran(), then next() resumes here
      if (pass_error_) std::rethrow_exception(std::exchange(pass_error_, nullptr));
    };
  }
  bool next(KvCache*& cache, std::span<const ForwardRequest>& requests) override {
    if (!fiber_.resume()) return false;
    cache = cache_;
    requests = requests_;
    return true;
  }
  void ran(std::exception_ptr error) override { pass_error_ = std::move(error); }
  void done() override { engine_.end(*run_, out_, error_); }

 private:
  void decode() {
    try {
      out_ = engine_.generator_.run(run_->request, nullptr);
    } catch (const std::exception& e) {
      error_ = e.what();
    }
  }
  Engine& engine_;
  std::unique_ptr<Running> run_;
  KvCache* cache_ = nullptr;
  std::span<const ForwardRequest> requests_;
  std::exception_ptr pass_error_;
  GenerationOutput out_;
  std::string error_;
  Fiber fiber_;  // last: its body uses the members above
};

void Engine::take(std::vector<std::unique_ptr<StepBatcher::Sequence>>& stepped) {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (queue_.empty() || running_ >= options_.parallel) return;
      job = queue_.front();
      queue_.pop_front();
      ++running_;
      ++started_;
      running_jobs_.push_back(job.get());
    }
    try {
      stepped.push_back(std::make_unique<OnFiber>(*this, start(job)));
    } catch (const std::exception& e) {  // the job ends with the error; the engine goes on
      Running failed;
      failed.job = std::move(job);
      failed.t0 = now_ms();
      end(failed, GenerationOutput(), e.what());
    }
  }
}

std::unique_ptr<Engine::Running> Engine::start(std::shared_ptr<Job> job_ptr) {
  auto run = std::make_unique<Running>();
  run->job = std::move(job_ptr);
  Job& job = *run->job;
  GenerationRequest& request = run->request;
  request = job.settings;
  if (!request.datastore) request.datastore = options_.datastore;
  if (!Generator::fills_holes(request)) request.prompt = job.prompt;  // infilling plans from the text
  choose(request).apply(request);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    run->started_before = started_;
    run->alone = running_ == 1 && queue_.empty();
  }
  run->uniform = request.mode == DecodeMode::Diffusion && model_.config.uniform_state;
  {
    std::lock_guard<std::mutex> lock(job.mutex);
    job.started = true;
    job.mode_used = request.mode;
    job.mode_reason = request.mode_reason;
    job.uniform_state = run->uniform;
    job.queued_ms = now_ms() - job.queued_ms;
  }
  publish(job, JobEvent::Started);
  run->t0 = now_ms();
  const bool verify = request.mode == DecodeMode::Verify;
  request.cancelled = [&job] { return job.cancel.load(); };
  request.on_step = [&job, verify](const StepEvent& e) {
    {
      std::lock_guard<std::mutex> lock(job.mutex);
      job.canvas = *e.canvas;
      job.drafts_from = verify ? e.final_end : -1;
      job.passes = e.passes;
      ++job.steps;
    }
    publish(job, JobEvent::Step);
  };
  if (!request.suffix)  // (a suffix request's text is the document; its answer is only what fills the gap)
    request.on_text = [&job](const std::string& chunk, int64_t tokens) {
      {
        std::lock_guard<std::mutex> lock(job.mutex);
        job.pieces.push_back({chunk, tokens});
      }
      publish(job, JobEvent::Text);
    };
  if (request.logprobs >= 0)
    request.on_logprob = [&job](int64_t position, const TokenLogprob& lp) {
      std::lock_guard<std::mutex> lock(job.mutex);  // readers see it with the next step or text
      if (int64_t(job.logprobs.size()) <= position) {
        job.logprobs.resize(size_t(position + 1));
        job.have_logprob.resize(size_t(position + 1), 0);
      }
      job.logprobs[size_t(position)] = lp;
      job.have_logprob[size_t(position)] = 1;
    };
  return run;
}

void Engine::end(Running& run, const GenerationOutput& out, const std::string& error) {
  Job& job = *run.job;
  const GenerationRequest& request = run.request;
  std::unique_lock<std::mutex> lock(job.mutex);
  if (error.empty()) {
    job.canvas = out.region;
    job.drafts_from = -1;
    job.passes = out.passes;
    job.text = completion_text(request, out);  // OpenAI's words (serve/openai.h)
    job.ended = out.finish_reason;
    job.finish_reason = openai_finish_reason(out.finish_reason);
    job.completion_tokens = int64_t(out.tokens.size());
    job.tokens = out.tokens;
    if (request.logprobs >= 0) {
      job.logprobs = out.logprobs;
      job.have_logprob.assign(job.logprobs.size(), 1);
    }
    job.fills = out.fills;
    if (Generator::fills_holes(request)) job.completion_tokens = out.filled_tokens;
    if (job.prompt.empty()) job.prompt = out.prompt;  // infilling: the prompt its plan encoded
  }
  job.decode_ms = now_ms() - run.t0;
  job.error = error;
  job.cancelled_by_client = error.empty() && out.finish_reason == "cancelled";
  if (error.empty()) {
    bool alone = false;  // the machine to itself from start to end: its time per token measures its setting
    {
      std::lock_guard<std::mutex> engine_lock(mutex_);
      alone = run.alone && started_ == run.started_before && running_ == 1;
    }
    router_.learn(request, out, alone);
  }
  const int64_t prompt_tokens = int64_t(error.empty() ? out.prompt.size() : job.prompt.size());
  if (ServerMetrics* metrics = metrics_.load())  // before `finished`: an answered request is counted
    metrics->generation_finished(metrics_model_, prompt_tokens, job.completion_tokens, job.passes,
                                 job.queued_ms / 1000.0, (job.queued_ms + job.decode_ms) / 1000.0);
  // One line per request on stderr, for the operator (canvas serve's log).
  const char* status = !error.empty() ? "error" : job.cancelled_by_client ? "cancelled" : "ok";
  std::fprintf(stderr,
               "canvas serve: request mode=%s model=%s prompt=%lld tokens=%lld passes=%lld queue_ms=%.1f "
               "decode_ms=%.1f finish=%s status=%s%s\n",
               decode_mode_name(request.mode), job.model.empty() ? "-" : job.model.c_str(), (long long)prompt_tokens,
               (long long)job.completion_tokens, (long long)job.passes, job.queued_ms, job.decode_ms,
               error.empty() ? out.finish_reason.c_str() : "error", status,
               error.empty() ? "" : (" (" + error + ")").c_str());
  job.finished = true;
  lock.unlock();
  publish(job, JobEvent::Finished);
  {
    std::lock_guard<std::mutex> engine_lock(mutex_);
    --running_;
    running_jobs_.erase(std::find(running_jobs_.begin(), running_jobs_.end(), &job));
  }
  slot_freed_.notify_all();
  batcher_.wake();  // the slot may take a queued job
}

}  // namespace canvas::serve
