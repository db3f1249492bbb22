#include "decode/mode_router.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "decode/verify.h"

namespace canvas {

DecodeMode model_default_mode(const ModelConfig& c) {
  if (!c.default_mode.empty()) return parse_decode_mode(c.default_mode);
  return c.is_diffusion() && !c.uniform_state ? DecodeMode::Diffusion : DecodeMode::Ar;
}

std::string model_default_reason(const ModelConfig& c, int64_t canvas_length) {
  if (c.release_form && c.default_mode == "diffusion")
    return "auto: the DiffusionGemma release's default, whole canvases of " + std::to_string(canvas_length) +
           " denoised by its entropy-bound sampler";
  if (!c.default_mode.empty()) return "auto: the model file's diffusion.default_mode";
  if (c.is_diffusion() && !c.uniform_state) return "auto: a masked-diffusion model decodes by diffusion";
  if (c.uniform_state) return "auto: AR's text, by its causal path";
  return "auto: an autoregressive model";
}

std::string verify_option_of(const GenerationRequest& r) {
  const VerifyOptions &v = r.verify, v0;
  if (v.draft_length != v0.draft_length) return "--draft-length";
  if (v.draft_steps != v0.draft_steps) return "--draft-steps";
  if (v.overlap != v0.overlap) return "--overlap";
  if (v.draft_lookup != v0.draft_lookup) return "--draft-lookup";
  if (v.draft_lookup_length != v0.draft_lookup_length) return "--draft-lookup-length";
  if (v.draft_tree != v0.draft_tree) return "--draft-tree";
  if (v.draft_tree_depth != v0.draft_tree_depth) return "--draft-tree-depth";
  return "";
}

std::string diffusion_option_of(const GenerationRequest& r) {
  const DiffusionOptions &d = r.diffusion, d0;
  const MaskedOptions &m = r.masked, m0;
  const UniformStateOptions &u = r.uniform_state, u0;
  if (d.steps != d0.steps) return "--steps";
  if (d.block_length != d0.block_length) return "--block-length";
  if (u.canvas_length != u0.canvas_length) return "--canvas-length";
  if (m.schedule != m0.schedule) return "--schedule";
  if (m.order != m0.order) return "--algorithm";
  if (m.threshold != m0.threshold) return "--threshold";
  if (m.cache != m0.cache) return "--cache";
  if (d.freeze_refresh != d0.freeze_refresh) return "--freeze-refresh";
  if (d.freeze != d0.freeze) return "--freeze";
  if (u.entropy_bound != u0.entropy_bound) return "--entropy-bound";
  if (u.t_min != u0.t_min) return "--t-min";
  if (u.t_max != u0.t_max) return "--t-max";
  if (u.stability != u0.stability) return "--stability";
  if (u.confidence_threshold != u0.confidence_threshold) return "--confidence-threshold";
  if (u.neighbor_penalty != u0.neighbor_penalty) return "--neighbor-penalty";
  if (u.stream_head != u0.stream_head) return "--stream-head";
  return "";
}

namespace {

// A running average of what finished runs measured: the first run's value, then 0.8 old + 0.2 new.
void average_in(double& average, bool first, double observed) {
  average = first ? observed : 0.8 * average + 0.2 * observed;
}

}  // namespace

bool fills_by_diffusion(const ModelConfig& c, bool has_diffusion, const GenerationRequest& r) {
  return r.mode == DecodeMode::Auto && c.default_mode.empty() && has_diffusion && Generator::fills_holes(r);
}

ModeRouter::ModeRouter(const Generator& generator, RouterOptions options)
    : generator_(generator), options_(std::move(options)) {
  if (options_.cost_model_file.empty()) return;
  if (std::optional<CostModel> kept = CostModel::load(options_.cost_model_file, options_.cost_model_key)) {
    cost_ = *kept;
    stored_ = kept->timed();
  }
}

bool ModeRouter::chooses_by_cost() const {
  const ModelConfig& c = generator_.model().config;
  return c.uniform_state && c.default_mode.empty() && supports_verify(c);
}

void ModeRouter::time_passes(ThreadPool* pool, const std::vector<int64_t>& rows) {
  std::lock_guard<std::mutex> lock(mutex_);
  time_passes_locked(pool, rows);
}

void ModeRouter::time_passes_locked(ThreadPool* pool, const std::vector<int64_t>& rows) const {
  if (cost_.timed()) return;
  cost_.take_pass_times(CostModel::measure(generator_.model(), pool, rows));
  save(cost_);
}

std::optional<ModeChoice> ModeRouter::by_rule(const GenerationRequest& r) const {
  ModeChoice choice;
  auto with_request_drafts = [&](DecodeMode mode, std::string reason) {  // the request's verify settings kept
    choice.mode = mode;
    choice.draft_length = r.verify.draft_length;
    choice.overlap = r.verify.overlap;
    choice.draft_tree = r.verify.draft_tree;
    choice.reason = std::move(reason);
    return choice;
  };
  const DecodeMode asked = r.mode == DecodeMode::Auto ? options_.default_mode : r.mode;
  if (asked != DecodeMode::Auto)
    return with_request_drafts(
        asked, r.mode == DecodeMode::Auto ? std::string("serve --mode ") + decode_mode_name(asked) : "asked for");
  const ModelConfig& c = generator_.model().config;
  const bool diffusion = generator_.has_diffusion(), holes = Generator::fills_holes(r);
  if (fills_by_diffusion(c, diffusion, r)) {
    choice.mode = DecodeMode::Diffusion;
    choice.reason = "auto: holes and schemas are filled by diffusion";
    return choice;
  }
  if (const std::string option = verify_option_of(r); !option.empty() && !holes)
    return with_request_drafts(DecodeMode::Verify, "auto: a verify option (" + option + ") was given");
  if (const std::string option = diffusion_option_of(r); !option.empty() && diffusion && !holes) {
    choice.mode = DecodeMode::Diffusion;
    choice.reason = "auto: a diffusion option (" + option + ") was given";
    return choice;
  }
  if (chooses_by_cost() && !holes) return std::nullopt;
  choice.mode = model_default_mode(c);
  choice.reason = model_default_reason(c, generator_.defaults().params.canvas_length);
  return choice;
}

ModeChoice ModeRouter::choose(const GenerationRequest& r, int64_t load) const {
  if (std::optional<ModeChoice> ruled = by_rule(r)) return *ruled;
  const ModelConfig& c = generator_.model().config;
  load = std::max<int64_t>(1, load);
  std::lock_guard<std::mutex> lock(mutex_);
  // With a datastore, one request at a time is judged by the measured runs of ar, the chains and trees;
  // under load, by the pass-time estimates.
  if (options_.datastore && load == 1) return choose_datastore_mode(cost_, !generator_.model().primitives);
  if (!cost_.timed() && options_.lazy_timing) {
    std::fprintf(stderr, "%s: timing this model's passes for --mode auto (once per model and machine)...\n",
                 options_.log_name.c_str());
    time_passes_locked(options_.lazy_timing, ar_text_mode_rows(c.has_decoder));
  }
  return choose_ar_text_mode(cost_, load, c.has_decoder);
}

std::vector<DecodeMode> ModeRouter::candidates(const GenerationRequest& r) const {
  if (std::optional<ModeChoice> ruled = by_rule(r)) return {ruled->mode};
  return {DecodeMode::Ar, DecodeMode::Verify};
}

void ModeRouter::learn(const GenerationRequest& r, const GenerationOutput& out, bool alone) {
  if (out.finish_reason == "cancelled" || out.passes <= 0) return;
  const ModelConfig& c = generator_.model().config;
  const bool uniform = r.mode == DecodeMode::Diffusion && c.uniform_state;
  const VerifyOptions& v = r.verify;
  const std::string setting = ar_text_setting(r.mode, v.draft_length, v.overlap, v.datastore != nullptr, v.draft_tree);
  std::optional<CostModel> to_save;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (r.mode == DecodeMode::Diffusion && !uniform && r.masked.threshold > 0) {
      // Threshold decoding's tokens per pass (a running average).
      average_in(cost_.threshold_tokens_per_forward, cost_.threshold_observations++ == 0,
                 double(out.region.size()) / double(out.passes));
    }
    if (uniform && r.diffusion.steps <= 0) {
      // The entropy-bound sampler's passes per canvas (its adaptive stop): over the canvases denoised (fewer
      // than N asks for when the text ended early).
      const int64_t n = generator_.new_tokens_of(r, int64_t(out.prompt.size()));
      const int64_t canvas = generator_.uniform_params(r, n).canvas_length;
      const int64_t canvases = !out.steps_per_canvas.empty() ? int64_t(out.steps_per_canvas.size())
                                                             : std::max<int64_t>(1, (n + canvas - 1) / canvas);
      average_in(cost_.uniform_passes_per_canvas, cost_.uniform_passes_per_canvas == 0,
                 double(out.passes) / double(canvases));
    }
    if (chooses_by_cost() && !setting.empty() && !out.tokens.empty()) {
      // Verify's tokens per pass and what it keeps per cycle, and (for a run alone) the setting's ms per token.
      if (r.mode == DecodeMode::Verify) {
        average_in(cost_.verify_tokens_per_forward, cost_.verify_observations++ == 0,
                   double(out.tokens.size()) / double(out.passes));
        cost_.acceptance.add(out.verify.cycles_keeping);
      }
      if (alone) cost_.observe(setting, out.decode_ms, out.decode_tokens);
      to_save = cost_;
    }
  }
  if (to_save) save(*to_save);
}

CostModel ModeRouter::cost_model() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cost_;
}

bool ModeRouter::written() const {
  std::lock_guard<std::mutex> lock(save_mutex_);
  return written_;
}

bool ModeRouter::save(const CostModel& cost) const {
  std::lock_guard<std::mutex> lock(save_mutex_);
  if (options_.cost_model_file.empty() || save_failed_) return false;
  const std::string warning = cost.save(options_.cost_model_file, options_.cost_model_key);
  if (!warning.empty()) {
    std::fprintf(stderr, "%s: warning: --cost-model %s\n", options_.log_name.c_str(), warning.c_str());
    save_failed_ = true;  // said once; the file is left alone from now on
    return false;
  }
  written_ = true;
  return true;
}

}  // namespace canvas
