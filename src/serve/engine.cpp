// Queue, generation slots, routing and progress publishing of canvas serve.
#include "serve/engine.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/timer.h"
#include "decode/ar.h"
#include "decode/uniform_state.h"

namespace canvas::serve {

namespace {
// Thrown out of a generation loop's callbacks: the client is gone, or the text is complete already.
struct Cancelled {};
struct TextComplete {};

// A uniform-state request's canvas: its block_length when given, else the sampler's.
int64_t uniform_canvas_length(const GenerationSettings& s, const EntropyBoundParams& sampler) {
  return s.block_length > 0 ? s.block_length : sampler.canvas_length;
}
}  // namespace

int64_t default_block_length(const GenerationSettings& s) {
  if (s.block_length > 0) return s.block_length;
  return s.max_tokens % 32 == 0 ? 32 : s.max_tokens;
}

DecodeMode parse_decode_mode(const std::string& name) {
  if (name == "auto") return DecodeMode::Auto;
  if (name == "diffusion") return DecodeMode::Diffusion;
  if (name == "ar") return DecodeMode::Ar;
  throw Error("unknown mode '" + name + "' (auto, diffusion, ar)");
}

const char* decode_mode_name(DecodeMode mode) {
  switch (mode) {
    case DecodeMode::Auto: return "auto";
    case DecodeMode::Diffusion: return "diffusion";
    case DecodeMode::Ar: return "ar";
  }
  return "?";
}

Engine::Engine(const Model& model, ThreadPool* pool, EngineOptions options)
    : model_(model), options_(std::move(options)), batcher_(model, pool) {
  check(options_.parallel >= 1, "--parallel must be at least 1");
  check(options_.queue >= 0, "--queue must be >= 0");
  cost_ = CostModel::measure(model, pool, std::min<int64_t>(64, std::max<int64_t>(2, model.config.context_length)));
  for (int64_t i = 0; i < options_.parallel; ++i) workers_.emplace_back([this] { worker(); });
}

Engine::~Engine() { shutdown(true); }

bool Engine::has_diffusion() const {
  const ModelConfig& c = model_.config;
  return c.uniform_state || (!c.causal && c.mask_token >= 0);
}

bool Engine::has_ar() const {
  const ModelConfig& c = model_.config;
  return c.causal || c.shift_logits || c.uniform_state || c.mask_token >= 0;
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
  wake_.notify_one();
  return true;
}

void Engine::shutdown(bool cancel_running) {
  std::deque<std::shared_ptr<Job>> dropped;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    dropped.swap(queue_);
  }
  wake_.notify_all();
  for (auto& job : dropped) {
    std::lock_guard<std::mutex> lock(job->mutex);
    job->error = "the server is shutting down";
    job->finished = true;
    ++job->version;
    job->changed.notify_all();
  }
  (void)cancel_running;  // running generations finish; the HTTP layer cancels its own jobs when asked
  for (std::thread& t : workers_)
    if (t.joinable()) t.join();
}

DecodeMode Engine::route(const GenerationSettings& s, int64_t prompt_tokens) const {
  (void)prompt_tokens;
  DecodeMode mode = s.mode == DecodeMode::Auto ? options_.default_mode : s.mode;
  if (mode != DecodeMode::Auto) return mode;
  if (!has_diffusion()) return DecodeMode::Ar;
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
  const int64_t n = s.max_tokens;
  if (c.uniform_state) {
    const int64_t canvas = uniform_canvas_length(s, options_.uniform);
    const double passes = s.steps > 0                          ? double(s.steps)
                          : cost.uniform_passes_per_canvas > 0 ? cost.uniform_passes_per_canvas
                                                               : double(options_.uniform.max_denoising_steps);
    return cost.uniform_ms(n, canvas, passes, load) <= cost.ar_ms(n, load, ar_rows) ? DecodeMode::Diffusion
                                                                                    : DecodeMode::Ar;
  }
  // Threshold decoding's tokens per pass is only known once some requests used it: until then, requests
  // that arrive at light load (where diffusion is the candidate) go to diffusion so that it is measured.
  if (s.threshold > 0 && cost.threshold_observations < 3 && load == 1) return DecodeMode::Diffusion;
  const int64_t block = default_block_length(s);
  const int64_t passes = s.threshold > 0 ? int64_t(std::ceil(double(n) / std::max(1.0, cost.threshold_tokens_per_pass)))
                                         : (s.steps > 0 ? s.steps : n);
  return cost.diffusion_ms(n, block, passes, load) <= cost.ar_ms(n, load, ar_rows) ? DecodeMode::Diffusion
                                                                                      : DecodeMode::Ar;
}

std::string Engine::visible_text(const std::vector<int32_t>& canvas, const std::vector<std::string>& stop,
                                 bool* stopped) const {
  *stopped = false;
  std::vector<int32_t> shown;
  for (int32_t id : canvas) {
    if (std::find(options_.stop_ids.begin(), options_.stop_ids.end(), id) != options_.stop_ids.end()) {
      *stopped = true;
      break;
    }
    if (id == model_.config.mask_token && model_.config.mask_token >= 0) break;
    shown.push_back(id);
  }
  std::string text = options_.detokenize(shown);
  size_t cut = std::string::npos;
  for (const std::string& s : stop)
    if (!s.empty()) cut = std::min(cut, text.find(s));
  if (cut != std::string::npos) {
    text.resize(cut);
    *stopped = true;
  }
  return text;
}

void Engine::worker() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping
      job = queue_.front();
      queue_.pop_front();
      ++running_;
    }
    run(*job);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      --running_;
    }
  }
}

void Engine::run(Job& job) {
  const GenerationSettings& s = job.settings;
  const DecodeMode mode = route(s, int64_t(job.prompt.size()));
  {
    std::lock_guard<std::mutex> lock(job.mutex);
    job.started = true;
    job.mode_used = mode;
    job.uniform_state = mode == DecodeMode::Diffusion && model_.config.uniform_state;
    job.queued_ms = now_ms() - job.queued_ms;
    ++job.version;
  }
  job.changed.notify_all();
  const double t0 = now_ms();
  StepBatcher::Membership member(batcher_);
  DecodeCallbacks callbacks;
  callbacks.forward = [&](const Model&, KvCache& cache, const ForwardRequest& req, ThreadPool*) {
    if (job.cancel.load()) throw Cancelled{};
    batcher_.forward(cache, req);
  };
  bool complete = false;
  callbacks.on_step = [&](const StepEvent& e) {
    bool stopped = false;
    // The committed prefix already holds an end: the rest of the canvas cannot change the text.
    if (!job.uniform_state) visible_text(*e.canvas, s.stop, &stopped);
    {
      std::lock_guard<std::mutex> lock(job.mutex);
      job.canvas = *e.canvas;
      job.passes = e.passes;
      ++job.steps;
      ++job.version;
    }
    job.changed.notify_all();
    if (job.cancel.load()) throw Cancelled{};
    if (stopped) throw TextComplete{};
  };
  std::string error;
  bool cancelled = false;
  GenerationResult result;
  try {
    if (mode == DecodeMode::Diffusion && model_.config.uniform_state) {
      EntropyBoundParams p = options_.uniform;
      p.max_new_tokens = s.max_tokens;
      p.seed = s.sampling.seed;
      p.canvas_length = uniform_canvas_length(s, options_.uniform);
      if (s.steps > 0) p.max_denoising_steps = s.steps;
      if (s.entropy_bound > 0) p.entropy_bound = s.entropy_bound;
      result = generate_uniform_state(model_, job.prompt, p, nullptr, callbacks);
    } else if (mode == DecodeMode::Diffusion) {
      MaskedDiffusionParams p;
      p.gen_length = s.max_tokens;
      p.block_length = default_block_length(s);
      p.steps = s.steps > 0 ? s.steps : s.max_tokens;
      p.threshold = s.threshold;
      p.cache = s.cache;
      p.sampling = s.sampling;
      result = generate_masked(model_, job.prompt, p, nullptr, callbacks);
    } else {
      ArParams p;
      p.max_new_tokens = s.max_tokens;
      p.sampling = s.sampling;
      p.stop_ids = options_.stop_ids;
      result = generate_ar(model_, job.prompt, p, nullptr, callbacks);
    }
    complete = true;
  } catch (const Cancelled&) {
    cancelled = true;
  } catch (const TextComplete&) {
    complete = true;
  } catch (const std::exception& e) {
    error = e.what();
  }
  std::lock_guard<std::mutex> lock(job.mutex);
  if (complete && !result.tokens.empty()) job.canvas = result.tokens;
  if (complete && result.passes > 0) job.passes = result.passes;
  bool stopped = false;
  job.text = visible_text(job.canvas, s.stop, &stopped);
  job.finish_reason = stopped ? "stop" : "length";
  int64_t tokens = 0;
  for (int32_t id : job.canvas) {
    if (std::find(options_.stop_ids.begin(), options_.stop_ids.end(), id) != options_.stop_ids.end()) break;
    ++tokens;
  }
  job.completion_tokens = tokens;
  job.decode_ms = now_ms() - t0;
  job.error = error;
  job.cancelled_by_client = cancelled;
  if (complete && mode == DecodeMode::Diffusion && s.threshold > 0 && job.passes > 0) {
    // Learn threshold decoding's tokens per pass for routing (a running average).
    std::lock_guard<std::mutex> engine_lock(mutex_);
    const double observed = double(job.canvas.size()) / double(job.passes);
    cost_.threshold_tokens_per_pass = cost_.threshold_observations == 0
                                          ? observed
                                          : 0.8 * cost_.threshold_tokens_per_pass + 0.2 * observed;
    ++cost_.threshold_observations;
  }
  if (complete && job.uniform_state && s.steps <= 0 && job.passes > 0) {
    // Learn the entropy-bound sampler's passes per canvas (its adaptive stop) for routing.
    const int64_t canvas = uniform_canvas_length(s, options_.uniform);
    const int64_t canvases = std::max<int64_t>(1, (s.max_tokens + canvas - 1) / canvas);
    const double observed = double(job.passes) / double(canvases);
    std::lock_guard<std::mutex> engine_lock(mutex_);
    cost_.uniform_passes_per_canvas =
        cost_.uniform_passes_per_canvas == 0 ? observed : 0.8 * cost_.uniform_passes_per_canvas + 0.2 * observed;
  }
  job.finished = true;
  ++job.version;
  job.changed.notify_all();
}

}  // namespace canvas::serve
