// Queue, generation slots, routing and progress publishing of canvas serve.
#include "serve/engine.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/timer.h"
#include "decode/verify.h"

namespace canvas::serve {

Engine::Engine(const Model& model, ThreadPool* pool, EngineOptions options)
    : model_(model),
      options_(std::move(options)),
      generator_(model, options_.tokenizer, options_.defaults, options_.chat),
      batcher_(model, pool) {
  check(options_.parallel >= 1, "--parallel must be at least 1");
  check(options_.queue >= 0, "--queue must be >= 0");
  const std::optional<CostModel> stored = options_.cost_model_file.empty()
                                              ? std::nullopt
                                              : CostModel::load(options_.cost_model_file, options_.cost_model_key);
  if (stored) {
    cost_ = *stored;
  } else {
    cost_ = CostModel::measure(model, pool, std::min<int64_t>(64, std::max<int64_t>(2, model.config.context_length)));
    if (!options_.cost_model_file.empty()) cost_.save(options_.cost_model_file, options_.cost_model_key);
  }
  cost_model_stored_ = stored.has_value();
  slots_ = std::make_unique<WorkerThreads>("canvas-slot", size_t(options_.parallel));
}

Engine::~Engine() {
  shutdown(true);
  slots_.reset();
}

CostModel Engine::cost_model() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cost_;
}

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
  slots_->post([this] { run_next(); });
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
    std::lock_guard<std::mutex> lock(job->mutex);
    job->error = "the server is shutting down";
    job->dropped = true;
    job->finished = true;
    ++job->version;
    job->changed.notify_all();
  }
}

void Engine::shutdown(bool cancel_running) {
  drain();
  std::unique_lock<std::mutex> lock(mutex_);
  if (cancel_running)
    for (Job* job : running_jobs_) job->cancel = true;
  slot_freed_.wait(lock, [&] { return running_ == 0; });
}

DecodeMode Engine::route(const GenerationSettings& s, int64_t prompt_tokens) const {
  DecodeMode mode = s.mode == DecodeMode::Auto ? options_.default_mode : s.mode;
  if (mode != DecodeMode::Auto) return mode;
  if (!has_diffusion()) return DecodeMode::Ar;
  // Holes between fixed text are filled by diffusion only.
  if (s.suffix || has_hole_marker(s.text)) return DecodeMode::Diffusion;
  if (!has_ar()) return DecodeMode::Diffusion;
  int64_t load = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    load = int64_t(queue_.size()) + running_;
  }
  load = std::clamp<int64_t>(load, 1, options_.parallel);
  const CostModel cost = cost_model();
  const ModelConfig& c = model_.config;
  const int64_t ar_rows = (!c.shift_logits && !c.uniform_state && !c.causal) ? 2 : 1;
  const int64_t n = generator_.new_tokens_of(s, prompt_tokens);
  if (c.uniform_state) {
    const EntropyBoundParams p = generator_.uniform_params(s, n);
    const double passes = s.steps > 0                          ? double(s.steps)
                          : cost.uniform_passes_per_canvas > 0 ? cost.uniform_passes_per_canvas
                                                               : double(p.max_denoising_steps);
    const double diffusion = cost.uniform_ms(n, p.canvas_length, passes, load), ar = cost.ar_ms(n, load, ar_rows);
    if (diffusion <= ar) return DecodeMode::Diffusion;
    if (!supports_verify(c)) return DecodeMode::Ar;
    // Draft-and-verify writes AR's text, so where AR wins it is the other candidate. Its tokens per pass
    // are only known once some requests used it: until 3 have finished, light-load requests go to verify
    // so that it is measured (their text is AR's under greedy decoding, AR's distribution when sampled).
    if (cost.verify_observations < 3) return load == 1 ? DecodeMode::Verify : DecodeMode::Ar;
    return cost.verify_ms(n, Generator::verify_pass_rows(s), cost.verify_tokens_per_forward, load) < ar ? DecodeMode::Verify
                                                                                                      : DecodeMode::Ar;
  }
  // Threshold decoding's tokens per pass is only known once some requests used it: until then, requests
  // that arrive at light load (where diffusion is the candidate) go to diffusion so that it is measured.
  if (s.threshold > 0 && cost.threshold_observations < 3 && load == 1) return DecodeMode::Diffusion;
  const int64_t block = generator_.masked_block_length(s, n, prompt_tokens);
  const int64_t passes = s.threshold > 0 ? int64_t(std::ceil(double(n) / std::max(1.0, cost.threshold_tokens_per_forward)))
                                         : (s.steps > 0 ? s.steps : n);
  return cost.diffusion_ms(n, block, passes, load) <= cost.ar_ms(n, load, ar_rows) ? DecodeMode::Diffusion
                                                                                      : DecodeMode::Ar;
}

void Engine::run_next() {
  std::shared_ptr<Job> job;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (queue_.empty()) return;  // dropped by drain()
    job = queue_.front();
    queue_.pop_front();
    ++running_;
    running_jobs_.push_back(job.get());
  }
  run(*job);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    --running_;
    running_jobs_.erase(std::find(running_jobs_.begin(), running_jobs_.end(), job.get()));
  }
  slot_freed_.notify_all();
}

void Engine::run(Job& job) {
  GenerationRequest request = job.settings;
  if (!Generator::fills_holes(request)) request.prompt = job.prompt;  // infilling plans from the text
  request.mode = route(request, int64_t(job.prompt.size()));
  const bool uniform = request.mode == DecodeMode::Diffusion && model_.config.uniform_state;
  {
    std::lock_guard<std::mutex> lock(job.mutex);
    job.started = true;
    job.mode_used = request.mode;
    job.uniform_state = uniform;
    job.queued_ms = now_ms() - job.queued_ms;
    ++job.version;
  }
  job.changed.notify_all();
  const double t0 = now_ms();
  StepBatcher::Membership member(batcher_);
  request.forward = [&](const Model&, KvCache& cache, std::span<const ForwardRequest> reqs, ThreadPool*) {
    batcher_.forward(cache, reqs);
  };
  request.cancelled = [&] { return job.cancel.load(); };
  request.on_step = [&](const StepEvent& e) {
    {
      std::lock_guard<std::mutex> lock(job.mutex);
      job.canvas = *e.canvas;
      job.drafts_from = request.mode == DecodeMode::Verify ? e.final_end : -1;
      job.passes = e.passes;
      ++job.steps;
      ++job.version;
    }
    job.changed.notify_all();
  };
  request.on_text = [&](const std::string& chunk) {
    {
      std::lock_guard<std::mutex> lock(job.mutex);
      job.committed_text += chunk;
      ++job.version;
    }
    job.changed.notify_all();
  };
  if (request.logprobs >= 0)
    request.on_logprob = [&](int64_t position, const TokenLogprob& lp) {
      std::lock_guard<std::mutex> lock(job.mutex);  // readers see it with the next version
      if (int64_t(job.logprobs.size()) <= position) {
        job.logprobs.resize(size_t(position + 1));
        job.have_logprob.resize(size_t(position + 1), 0);
      }
      job.logprobs[size_t(position)] = lp;
      job.have_logprob[size_t(position)] = 1;
    };
  GenerationOutput out;
  std::string error;
  try {
    out = generator_.run(request, nullptr);
  } catch (const std::exception& e) {
    error = e.what();
  }
  std::lock_guard<std::mutex> lock(job.mutex);
  if (error.empty()) {
    job.canvas = out.region;
    job.drafts_from = -1;
    job.passes = out.passes;
    job.text = out.text;
    job.committed_text = out.text;
    job.ended = out.finish_reason;
    job.finish_reason = out.finish_reason == "eos" || out.finish_reason == "stop" ? "stop"
                        : out.finish_reason == "cancelled"                        ? "cancelled"
                                                                                  : "length";
    job.completion_tokens = int64_t(out.tokens.size());
    job.tokens = out.tokens;
    if (request.logprobs >= 0) {
      job.logprobs = out.logprobs;
      job.have_logprob.assign(job.logprobs.size(), 1);
    }
    job.fills = out.fills;
    if (request.suffix) {
      // OpenAI's suffix: the completion is the text inserted between the prompt and the suffix.
      job.text.clear();
      for (const std::string& f : out.fills) job.text += f;
      job.committed_text = job.text;
    }
    if (Generator::fills_holes(request)) job.completion_tokens = out.filled_tokens;
    if (job.prompt.empty()) job.prompt = out.prompt;  // infilling: the prompt its plan encoded
  }
  job.decode_ms = now_ms() - t0;
  job.error = error;
  job.cancelled_by_client = error.empty() && out.finish_reason == "cancelled";
  const bool complete = error.empty() && !job.cancelled_by_client;
  if (complete && request.mode == DecodeMode::Diffusion && !uniform && request.threshold > 0 && job.passes > 0) {
    // Learn threshold decoding's tokens per pass for routing (a running average).
    std::lock_guard<std::mutex> engine_lock(mutex_);
    const double observed = double(job.canvas.size()) / double(job.passes);
    cost_.threshold_tokens_per_forward = cost_.threshold_observations == 0
                                          ? observed
                                          : 0.8 * cost_.threshold_tokens_per_forward + 0.2 * observed;
    ++cost_.threshold_observations;
  }
  if (complete && request.mode == DecodeMode::Verify && job.passes > 0 && job.completion_tokens > 0) {
    // Learn draft-and-verify's tokens per pass for routing (a running average).
    std::lock_guard<std::mutex> engine_lock(mutex_);
    const double observed = double(job.completion_tokens) / double(job.passes);
    cost_.verify_tokens_per_forward =
        cost_.verify_observations == 0 ? observed : 0.8 * cost_.verify_tokens_per_forward + 0.2 * observed;
    ++cost_.verify_observations;
  }
  if (complete && uniform && request.steps <= 0 && job.passes > 0) {
    // Learn the entropy-bound sampler's passes per canvas (its adaptive stop) for routing.
    const int64_t n = generator_.new_tokens_of(request, int64_t(job.prompt.size()));
    const int64_t canvas = generator_.uniform_params(request, n).canvas_length;
    const int64_t canvases = std::max<int64_t>(1, (n + canvas - 1) / canvas);
    const double observed = double(job.passes) / double(canvases);
    std::lock_guard<std::mutex> engine_lock(mutex_);
    cost_.uniform_passes_per_canvas =
        cost_.uniform_passes_per_canvas == 0 ? observed : 0.8 * cost_.uniform_passes_per_canvas + 0.2 * observed;
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
  ++job.version;
  job.changed.notify_all();
}

}  // namespace canvas::serve
