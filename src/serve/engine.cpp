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
    queue_.push_back({job, now_ms()});
  }
  batcher_.wake();
  return true;
}

void Engine::drain() {
  std::deque<Queued> dropped;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    dropped.swap(queue_);
  }
  for (Queued& queued : dropped) {
    event::Finished finished;
    finished.error = "the server is shutting down";
    finished.dropped = true;
    queued.job->append(std::move(finished));
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
  double queued_ms = 0, t0 = 0;
  int64_t steps = 0, passes = 0;
  std::string text;  // the text of its TextDeltas so far
  // With logprobs asked: the latest canvas and, by position in it, the log-probabilities committed so far;
  // those of the first `logprobs_sent` positions went out with TextDeltas.
  std::vector<int32_t> canvas;
  std::vector<TokenLogprob> logprobs;
  std::vector<char> have_logprob;
  size_t logprobs_sent = 0;

  // The log-probabilities a TextDelta whose text holds the first `tokens` tokens whole carries: those not sent
  // yet, in order, as far as they are committed and are no end id (`stop_ids`).
  std::vector<TokenLogprob> logprobs_through(int64_t tokens, const std::vector<int32_t>& stop_ids) {
    size_t known = logprobs_sent;
    while (int64_t(known) < tokens && known < have_logprob.size() && known < canvas.size() && have_logprob[known] &&
           std::find(stop_ids.begin(), stop_ids.end(), canvas[known]) == stop_ids.end())
      ++known;
    return sent_up_to(logprobs, known);
  }
  // logprobs[logprobs_sent, to) of `all`, now sent.
  std::vector<TokenLogprob> sent_up_to(const std::vector<TokenLogprob>& all, size_t to) {
    const size_t from = std::min(logprobs_sent, to);
    logprobs_sent = std::max(logprobs_sent, to);
    return std::vector<TokenLogprob>(all.begin() + from, all.begin() + to);
  }
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
    Queued queued;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (queue_.empty() || running_ >= options_.parallel) return;
      queued = queue_.front();
      queue_.pop_front();
      ++running_;
      ++started_;
      running_jobs_.push_back(queued.job.get());
    }
    try {
      stepped.push_back(std::make_unique<OnFiber>(*this, start(queued)));
    } catch (const std::exception& e) {  // the job ends with the error; the engine goes on
      Running failed;
      failed.job = std::move(queued.job);
      failed.t0 = now_ms();
      failed.queued_ms = failed.t0 - queued.since_ms;
      end(failed, GenerationOutput(), e.what());
    }
  }
}

std::unique_ptr<Engine::Running> Engine::start(const Queued& queued) {
  auto run = std::make_unique<Running>();
  Running& r = *run;
  r.job = queued.job;
  Job& job = *r.job;
  GenerationRequest& request = r.request;
  request = job.settings;
  if (!request.verify.datastore) request.verify.datastore = options_.datastore;
  if (!Generator::fills_holes(request)) request.prompt = job.prompt;  // infilling plans from the text
  choose(request).apply(request);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    r.started_before = started_;
    r.alone = running_ == 1 && queue_.empty();
  }
  r.queued_ms = now_ms() - queued.since_ms;
  job.append(event::Started{request.mode, request.mode_reason,
                            request.mode == DecodeMode::Diffusion && model_.config.uniform_state, r.queued_ms});
  r.t0 = now_ms();
  const bool verify = request.mode == DecodeMode::Verify;
  const bool logprobs = request.logprobs >= 0;
  request.cancelled = [&job] { return job.cancel.load(); };
  request.on_step = [&r, verify, logprobs](const StepEvent& e) {
    r.passes = e.passes;
    if (logprobs) r.canvas = *e.canvas;
    r.job->append(event::CanvasStep{++r.steps, e.passes, *e.canvas, verify ? e.final_end : -1});
  };
  if (!request.suffix)  // (a suffix request's text is the document; its answer is only what fills the gap)
    request.on_text = [this, &r, logprobs](const std::string& chunk, int64_t tokens) {
      event::TextDelta delta{chunk, tokens, {}};
      if (logprobs) delta.logprobs = r.logprobs_through(tokens, generator_.stop_ids());
      r.text += chunk;
      r.job->append(std::move(delta));
    };
  if (logprobs)
    request.on_logprob = [&r](int64_t position, const TokenLogprob& lp) {  // sent with the text it completes
      if (int64_t(r.logprobs.size()) <= position) {
        r.logprobs.resize(size_t(position + 1));
        r.have_logprob.resize(size_t(position + 1), 0);
      }
      r.logprobs[size_t(position)] = lp;
      r.have_logprob[size_t(position)] = 1;
    };
  return run;
}

void Engine::end(Running& run, const GenerationOutput& out, const std::string& error) {
  Job& job = *run.job;
  const GenerationRequest& request = run.request;
  event::Finished finished;
  finished.passes = run.passes;
  finished.prompt_tokens = int64_t(job.prompt.size());
  if (error.empty()) {
    finished.canvas = out.region;
    finished.passes = out.passes;
    finished.text = completion_text(request, out);  // OpenAI's words (serve/openai.h)
    finished.ended = out.finish_reason;
    finished.finish_reason = openai_finish_reason(out.finish_reason);
    finished.tokens = out.tokens;
    const bool fills = Generator::fills_holes(request);
    finished.completion_tokens = fills ? out.filled_tokens : int64_t(out.tokens.size());
    if (request.logprobs >= 0) finished.logprobs = out.logprobs;
    finished.fills = out.fills;
    finished.prompt_tokens = int64_t(out.prompt.size());  // infilling: the prompt its plan encoded
    finished.cancelled_by_client = out.finish_reason == "cancelled";
    // The text and log-probabilities the deltas have not carried (a suffix request's answer comes whole).
    event::TextDelta rest;
    rest.tokens = fills ? -1 : int64_t(out.tokens.size());
    if (finished.text.size() > run.text.size() && finished.text.compare(0, run.text.size(), run.text) == 0)
      rest.text = finished.text.substr(run.text.size());
    rest.logprobs = run.sent_up_to(finished.logprobs, std::min(finished.tokens.size(), finished.logprobs.size()));
    if (!rest.text.empty() || !rest.logprobs.empty()) job.append(std::move(rest));
  }
  finished.decode_ms = now_ms() - run.t0;
  finished.error = error;
  if (error.empty()) {
    bool alone = false;  // the machine to itself from start to end: its time per token measures its setting
    {
      std::lock_guard<std::mutex> engine_lock(mutex_);
      alone = run.alone && started_ == run.started_before && running_ == 1;
    }
    router_.learn(request, out, alone);
  }
  if (ServerMetrics* metrics = metrics_.load())  // before Finished: an answered request is counted
    metrics->generation_finished(metrics_model_, finished.prompt_tokens, finished.completion_tokens, finished.passes,
                                 run.queued_ms / 1000.0, (run.queued_ms + finished.decode_ms) / 1000.0);
  // One line per request on stderr, for the operator (canvas serve's log).
  const char* status = !error.empty() ? "error" : finished.cancelled_by_client ? "cancelled" : "ok";
  std::fprintf(stderr,
               "canvas serve: request mode=%s model=%s prompt=%lld tokens=%lld passes=%lld queue_ms=%.1f "
               "decode_ms=%.1f finish=%s status=%s%s\n",
               decode_mode_name(request.mode), job.model.empty() ? "-" : job.model.c_str(),
               (long long)finished.prompt_tokens, (long long)finished.completion_tokens, (long long)finished.passes,
               run.queued_ms, finished.decode_ms, error.empty() ? out.finish_reason.c_str() : "error", status,
               error.empty() ? "" : (" (" + error + ")").c_str());
  job.append(std::move(finished));
  {
    std::lock_guard<std::mutex> engine_lock(mutex_);
    --running_;
    running_jobs_.erase(std::find(running_jobs_.begin(), running_jobs_.end(), &job));
  }
  slot_freed_.notify_all();
  batcher_.wake();  // the slot may take a queued job
}

}  // namespace canvas::serve
