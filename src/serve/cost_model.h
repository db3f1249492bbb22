// The cost model behind --mode auto: a forward pass's time as a function of the rows it computes,
// measured on this machine at start-up, and the estimated latency of a request in each mode at a load.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/thread_pool.h"
#include "model/model.h"

namespace canvas::serve {

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

  // Times passes of 1, rows / 2 and `rows` rows (kMeasureRepeats each, the median kept) and fits the
  // line by least squares.
  static CostModel measure(const Model& model, ThreadPool* pool, int64_t rows);
  static constexpr int kMeasureRepeats = 9;
  // The measured line as a JSON file tagged with `key` (what it was measured for: the model file, the
  // threads, the device), and read back: nullopt when the file is absent, unreadable or has another key.
  void save(const std::string& path, const std::string& key) const;
  static std::optional<CostModel> load(const std::string& path, const std::string& key);

  double pass_ms(double rows) const { return fixed_ms + per_row_ms * rows; }
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
  // (Generator::verify_pass_rows: k + 1, the draft and verify passes having the same shape; or the
  // overlapped cycle's (k + 1)(k + 2)).
  double verify_ms(int64_t tokens, int64_t pass_rows, double tokens_per_forward, int64_t load) const;
  std::string describe() const;
};

// The key a cost model is saved and loaded with (CostModel::save, load): what its timings depend on, the
// model's bytes (the file's absolute path, size and modification time), the cores, the SIMD level and the
// device; a stored line for other weights or another machine is measured again.
std::string cost_model_key(const std::string& model_path, int64_t cores, const std::string& device);

// The cost-model file of one of `models` served models: `file` itself for a single model, else with the
// model's id before the extension ("costs.json" -> "costs.text-dg.json"), so that each model keeps its own.
std::string cost_model_file_for(const std::string& file, const std::string& model_id, size_t models);

}  // namespace canvas::serve
