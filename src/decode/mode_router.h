// --mode auto, decided in one place for every front end (generate, chat, serve's admission checks and its
// engine): which options imply which mode, holes and schemas to diffusion, the model's own mode (the
// DiffusionGemma release's default: diffusion), and, for a uniform-state model with draft-and-verify and no
// default mode of its file, the fastest of ar and verify by the cost model (decode/cost_model.h) that it
// learns from finished runs and keeps in a file per model and machine.
#pragma once
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "decode/cost_model.h"
#include "decode/generation.h"

namespace canvas {

// The model's own mode for auto (Generator::resolve): the file's diffusion.default_mode, else diffusion for a
// masked-diffusion model and AR otherwise (a uniform-state model writes AR's text through its causal path).
DecodeMode model_default_mode(const ModelConfig& c);
// Why auto runs the model's own mode (the stats line's reason); `canvas_length` is the release's canvas.
std::string model_default_reason(const ModelConfig& c, int64_t canvas_length);

// The first option of `r` that only draft-and-verify reads (r.verify's --draft-length, --draft-steps,
// --overlap, --draft-lookup, --draft-lookup-length, --draft-tree, --draft-tree-depth) and the first that only
// diffusion reads (r.diffusion, r.masked and r.uniform_state: --steps, --block-length, --canvas-length,
// --schedule, --algorithm, --threshold, --cache, --freeze, --freeze-refresh, --entropy-bound, --t-min,
// --t-max, --stability, --confidence-threshold, --neighbor-penalty, --stream-head), as the CLI spells them; "" when none differs from its default. With
// auto the first means verify, the second diffusion on a model that has it. serve's request fields of the
// same names (draft_length, steps, ...) fill the same request fields, so they mean the same.
std::string verify_option_of(const GenerationRequest& r);
std::string diffusion_option_of(const GenerationRequest& r);

// Whether auto fills the request's holes, suffix or schema by diffusion: where the model has diffusion and
// its file names no default mode (else the model's own mode writes the schema, left to right).
bool fills_by_diffusion(const ModelConfig& c, bool has_diffusion, const GenerationRequest& r);

struct RouterOptions {
  // What auto stands for (serve --mode); Auto: decided per request.
  DecodeMode default_mode = DecodeMode::Auto;
  // The cost model's file and the key it is kept under (cost_model_key); empty file: not kept.
  std::string cost_model_file, cost_model_key;
  // --draft-datastore: auto weighs verify with the datastore's drafts against AR (choose_datastore_mode), one
  // request at a time.
  bool datastore = false;
  // Where an unmeasured cost model's passes are timed when choose needs them (generate, chat: on first use,
  // said on stderr); null: never there (serve times them at start-up, time_passes).
  ThreadPool* lazy_timing = nullptr;
  // Prefix of the warnings on stderr ("canvas", "canvas serve").
  std::string log_name = "canvas";
};

// One per model and front end; thread-safe (serve chooses on the event loop and its engine's thread, and
// learns on the latter).
class ModeRouter {
 public:
  // Reads the cost model from options.cost_model_file when it was kept there for options.cost_model_key.
  // `generator` must outlive the router.
  ModeRouter(const Generator& generator, RouterOptions options);

  // Whether auto picks among ar and verify by the cost model (a uniform-state model with verify and no
  // default mode of its file); other models run their own mode.
  bool chooses_by_cost() const;
  // Times the model's passes of `rows` rows (CostModel::measure) unless the kept cost model has pass times,
  // keeping what its runs taught, and saves it.
  void time_passes(ThreadPool* pool, const std::vector<int64_t>& rows);

  // The mode `r` runs in when `load` requests decode at once, with verify's draft length, overlap and tree
  // and the reason (ModeChoice::apply sets them on the request). A mode asked for (or serve --mode's) is
  // taken as it is.
  ModeChoice choose(const GenerationRequest& r, int64_t load = 1) const;
  // choose's mode, draft settings and reason set on the request.
  void route(GenerationRequest& r, int64_t load = 1) const { choose(r, load).apply(r); }
  // Every mode choose may give `r` at some load (what a server checks a request against before queueing it).
  std::vector<DecodeMode> candidates(const GenerationRequest& r) const;
  // What a finished run (not cancelled) teaches: threshold decoding's tokens per pass, verify's tokens per
  // pass and drafts kept per cycle, the entropy-bound sampler's passes per canvas, and (for a run that had
  // the machine to itself: `alone`) its setting's time per token; kept in the file.
  void learn(const GenerationRequest& r, const GenerationOutput& out, bool alone);

  CostModel cost_model() const;  // a copy
  // The cost model had pass times when read from its file (it was not measured here).
  bool stored() const { return stored_; }
  // The cost model was written to its file at least once (false: left alone; a warning said why).
  bool written() const;

 private:
  // The choice of the rules (a mode asked for, options that imply one, holes, the model's own mode);
  // nullopt when the cost model picks among ar and verify.
  std::optional<ModeChoice> by_rule(const GenerationRequest& r) const;
  // time_passes with mutex_ held (choose times lazily under it).
  void time_passes_locked(ThreadPool* pool, const std::vector<int64_t>& rows) const;
  bool save(const CostModel& cost) const;  // a failure is a warning, said once; the file is then left alone
  const Generator& generator_;
  RouterOptions options_;
  bool stored_ = false;
  mutable std::mutex mutex_;  // cost_
  mutable CostModel cost_;    // timed lazily by choose (options_.lazy_timing)
  mutable std::mutex save_mutex_;  // one save at a time; the members below
  mutable bool save_failed_ = false, written_ = false;
};

}  // namespace canvas
