// The cost model behind --mode auto: a forward pass's time as a function of the rows it computes,
// measured on this machine, what draft-and-verify keeps per cycle on this model, and the estimated latency
// of a request in each mode at a load. generate, chat and serve keep it in a file per model and machine.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/thread_pool.h"
#include "decode/generation.h"
#include "model/model.h"

namespace canvas {

// Draft-and-verify's measured acceptance: for each draft length K used, how many cycles kept j = 0..K drafts.
struct VerifyAcceptance {
  std::map<int64_t, std::vector<int64_t>> cycles_keeping;  // K -> [j] cycles (K + 1 entries)
  // A run's VerifyStats::cycles_keeping (its K is the size - 1); counts past kMaxCycles are halved so that
  // recent runs weigh.
  void add(const std::vector<int64_t>& cycles);
  static constexpr int64_t kMaxCycles = 4096;
  // Cycles that drafted k or more tokens (what tokens_per_cycle(k) is estimated from).
  int64_t cycles(int64_t k) const;
  // Tokens a cycle of k drafts commits: 1 + the mean of min(kept, k) over cycles of K >= k drafts (a greedy
  // draft of k tokens is the first k of a longer one's positions, give or take the noise they start from).
  double tokens_per_cycle(int64_t k) const;
  int64_t longest() const { return cycles_keeping.empty() ? 0 : cycles_keeping.rbegin()->first; }
};

struct CostModel {
  // time of one (batched) pass in ms = fixed_ms + per_row_ms * rows, fitted to timed passes.
  double fixed_ms = 0, per_row_ms = 0;
  // Measured tokens committed per diffusion pass with threshold decoding (learned from finished
  // requests; 1 until one has finished).
  double threshold_tokens_per_forward = 1;
  int64_t threshold_observations = 0;  // finished threshold-decoding requests behind that average
  // Uniform-state models (DiffusionGemma): measured denoising passes per canvas (the entropy-bound
  // sampler stops a canvas early once it is stable); 0 until a request has finished (then the
  // configured maximum is assumed).
  double uniform_passes_per_canvas = 0;
  // Draft-and-verify: measured new tokens per forward pass (decoder drafts and verifying encoder passes
  // together), learned from finished verify requests.
  double verify_tokens_per_forward = 0;
  int64_t verify_observations = 0;

  // Timed passes (rows, ms), rows ascending: pass_ms interpolates between them (a memory-bound pass costs
  // about the same for 1 to a few rows, which a line through 1 and 64 rows misses).
  std::vector<std::pair<int64_t, double>> passes;
  VerifyAcceptance acceptance;
  // Decode time per token measured by whole runs at one request, by setting ("ar", "verify k=3",
  // "verify k=2 overlapped"): a running average and the runs behind it. auto prefers these to estimates.
  struct Observed {
    double ms_per_token = 0;
    int64_t runs = 0;
  };
  std::map<std::string, Observed> observed;
  // A finished run of `tokens` decoded tokens in `decode_ms` (runs of fewer than 8 tokens are not counted).
  void observe(const std::string& setting, double decode_ms, int64_t tokens);

  // Times passes of 1, rows / 2 and `rows` rows (kMeasureRepeats each, the median kept) and fits the
  // line by least squares.
  static CostModel measure(const Model& model, ThreadPool* pool, int64_t rows);
  // ... of each of `rows` (at least two sizes).
  static CostModel measure(const Model& model, ThreadPool* pool, std::vector<int64_t> rows);
  static constexpr int kMeasureRepeats = 5;
  // The cost model as a JSON file tagged with `key` (what it was measured for: the model file, the
  // threads, the device), and read back: nullopt when the file is absent, unreadable or has another key.
  // save writes only a regular file that is a cost model (or none): a link, a pipe, a device or another
  // file is left alone and save returns a warning saying why ("" when written); a failed write is a warning
  // too (the file is a cache). load reads at most kMaxFileBytes and never waits on a pipe.
  std::string save(const std::string& path, const std::string& key) const;
  static std::optional<CostModel> load(const std::string& path, const std::string& key);
  static constexpr int64_t kMaxFileBytes = 1 << 20;

  double pass_ms(double rows) const;
  // Whether the passes were timed (pass_ms is above 0): a file saved before any pass was timed (generate with
  // a datastore judges by whole runs alone: fixed_ms 0, per_row_ms 0, no passes) has no pass times, and is
  // timed before any estimate is made from it.
  bool timed() const;
  // Takes `timed`'s pass times (fixed_ms, per_row_ms, passes), keeping what was learned from runs.
  void take_pass_times(const CostModel& timed);
  // Estimated latency (ms) of a request of `prompt` tokens and `tokens` new ones, when `load` requests
  // of the same shape decode at once and share each pass.
  // AR: `tokens` passes of ar_rows rows each (1, or 2 for models fed a mask to predict the next token).
  double ar_ms(int64_t tokens, int64_t load, int64_t ar_rows) const;
  // Masked diffusion with the prefix cache: `passes` passes; a pass in block b recomputes the region
  // from the block's start to the end of the canvas, (tokens + block) / 2 rows on average.
  double diffusion_ms(int64_t tokens, int64_t block, int64_t passes, int64_t load) const;
  // Uniform-state diffusion: ceil(tokens / canvas) canvases of `passes_per_canvas` passes, each pass
  // over the whole canvas (canvas rows per request).
  double uniform_ms(int64_t tokens, int64_t canvas, double passes_per_canvas, int64_t load) const;
  // Draft-and-verify: tokens / tokens_per_forward passes of `pass_rows` rows per request
  // (Generator::verify_rows: k + 1, the draft and verify passes having the same shape; or the
  // overlapped cycle's (k + 1)(k + 2)).
  double verify_ms(int64_t tokens, int64_t pass_rows, double tokens_per_forward, int64_t load) const;
  std::string describe() const;
};

// --mode auto among the modes that write AR's text: AR, and draft-and-verify with k drafts, plain (a draft
// pass and a verify pass of k + 1 rows per cycle) or overlapped ((k + 1)(k + 2) rows, one pass per cycle).
struct ModeChoice {
  DecodeMode mode = DecodeMode::Ar;
  int64_t draft_length = 0;  // verify
  bool overlap = false;      // verify
  int64_t draft_tree = 0;    // verify with a datastore: tree drafts of this many tokens (0: chains)
  double ms_per_token = 0;   // the estimate it was chosen by (0: not estimated)
  std::string reason;        // for the stats line, --json and serve's answers
  // Sets mode, draft_length, overlap, draft_tree and mode_reason.
  void apply(GenerationRequest& request) const;
};
// The name of a setting in CostModel::observed: "ar", "verify k=K" or "verify k=K overlapped", with a
// datastore "verify k=K datastore" or "verify tree=N datastore" ("" for other modes).
std::string ar_text_setting(DecodeMode mode, int64_t draft_length, bool overlap, bool datastore = false,
                            int64_t draft_tree = 0);
constexpr int64_t kExploreDraftLength = 8;   // verify's k while its acceptance is being measured
constexpr int64_t kMinAcceptanceCycles = 8;   // cycles measured before verify is judged by them
constexpr int64_t kMaxOverlapDraftLength = 4;
constexpr int64_t kMaxExploredSettings = 3;   // settings run at load 1 before auto picks among those alone
constexpr double kSwitchMargin = 0.05;        // a measured setting must beat the most-run one by this much
// The pass sizes (rows) AR and every verify candidate run at `load` requests per pass.
std::vector<int64_t> ar_text_mode_rows(bool can_overlap, int64_t load = 1);
// The fastest by time per token at `load` requests sharing each pass: at load 1 a setting's measured runs
// (CostModel::observed), else its estimate from the pass times and verify's acceptance, scaled by how the
// measured settings compare with their estimates (a setting estimated fastest runs, and is then measured).
// A cost model without pass times (not timed()) has no estimates: AR, saying so.
// Until kMinAcceptanceCycles verify cycles have been measured, verify with kExploreDraftLength drafts runs
// at load 1 (it writes AR's text, and measures the acceptance) and AR at higher loads; then AR runs once at
// load 1 to be measured. Exploration is bounded: once kMaxExploredSettings settings have measured runs, load 1
// picks among them alone, and the setting with the most runs stays while it is within kSwitchMargin of the
// fastest measured one.
ModeChoice choose_ar_text_mode(const CostModel& cost, int64_t load, bool can_overlap);

// --mode auto with a datastore (--draft-datastore), one request at a time: AR, verify with lookup and
// datastore chains (k = 4), and verify with trees of each of kDatastoreTrees tokens, judged by their measured
// runs alone (what they keep depends on the text and the corpus as much as on the model). AR runs first to be
// measured; then each setting not measured yet, in that order, while the last one measured is the fastest so
// far (a larger tree computes more rows per pass: once a setting is slower than the best, the larger ones are
// not tried); then the fastest measured. Without `trees` (a device backend runs the passes), no trees.
constexpr int64_t kDatastoreTrees[] = {8, 16, 32};
ModeChoice choose_datastore_mode(const CostModel& cost, bool trees = true);

// The key a cost model is saved and loaded with (CostModel::save, load): what its timings depend on, the
// model's bytes (the file's absolute path, size and modification time), the cores, the SIMD level and the
// device; a stored line for other weights or another machine is measured again.
std::string cost_model_key(const std::string& model_path, int64_t cores, const std::string& device);

// The cost-model file of one of `models` served models: `file` itself for a single model, else with the
// model's id before the extension ("costs.json" -> "costs.text-dg.json"), so that each model keeps its own.
std::string cost_model_file_for(const std::string& file, const std::string& model_id, size_t models);

// Where generate and chat keep a model's cost model by default: $XDG_CACHE_HOME/canvas (else
// ~/.cache/canvas), one file per key ("" when neither is set).
std::string default_cost_model_file(const std::string& key);

}  // namespace canvas
