// Timing forward passes to fit the cost model used for routing.
#include "serve/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "core/cpu.h"
#include "core/error.h"
#include "core/output_file.h"
#include "core/timer.h"
#include "io/json.h"

namespace canvas::serve {

namespace {
double time_pass(const Model& model, ThreadPool* pool, int64_t rows) {
  const ModelConfig& c = model.config;
  KvCache cache(c, rows);
  std::vector<int32_t> tokens(size_t(rows), std::max<int32_t>(0, c.bos_token));
  std::vector<int32_t> groups(size_t(rows), 0);
  std::vector<float> logits(size_t(c.vocab));
  ForwardRequest req;
  req.tokens = tokens.data();
  req.n = rows;
  req.groups = groups.data();
  req.logit_rows = {int32_t(rows - 1)};
  req.logits = logits.data();
  forward(model, cache, req, pool);  // warm-up: first-touch of buffers and weights
  // The median: one slow repeat (another process on the cores) or one lucky one does not move it, so
  // restarts measure the same line and route the same way.
  std::vector<double> times;
  for (int repeat = 0; repeat < CostModel::kMeasureRepeats; ++repeat) {
    const double t0 = now_ms();
    forward(model, cache, req, pool);
    times.push_back(now_ms() - t0);
  }
  std::nth_element(times.begin(), times.begin() + std::ptrdiff_t(times.size() / 2), times.end());
  return times[times.size() / 2];
}
}  // namespace

CostModel CostModel::measure(const Model& model, ThreadPool* pool, int64_t rows) {
  CostModel cost;
  rows = std::max<int64_t>(2, std::min(rows, model.config.context_length > 0 ? model.config.context_length : rows));
  const int64_t sizes[] = {1, std::max<int64_t>(2, rows / 2), rows};
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const int64_t r : sizes) {
    const double t = time_pass(model, pool, r), x = double(r);
    sx += x, sy += t, sxx += x * x, sxy += x * t;
  }
  const double n = 3, denominator = n * sxx - sx * sx;
  cost.per_row_ms = std::max(0.0, denominator > 0 ? (n * sxy - sx * sy) / denominator : 0.0);
  cost.fixed_ms = std::max(0.0, (sy - cost.per_row_ms * sx) / n);
  return cost;
}

void CostModel::save(const std::string& path, const std::string& key) const {
  const nlohmann::json j = {{"key", key}, {"fixed_ms", fixed_ms}, {"per_row_ms", per_row_ms}};
  try {
    write_file(path, j.dump(2) + "\n");
  } catch (const Error& e) {
    throw Error(std::string("--cost-model: ") + e.what());
  }
}

std::optional<CostModel> CostModel::load(const std::string& path, const std::string& key) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return std::nullopt;
  try {
    const JsonDocument doc = JsonDocument::load(path);
    if (doc.get_string("key", "") != key) return std::nullopt;
    CostModel cost;
    cost.fixed_ms = doc.get_float("fixed_ms", -1);
    cost.per_row_ms = doc.get_float("per_row_ms", -1);
    if (!(std::isfinite(cost.fixed_ms) && cost.fixed_ms >= 0 && std::isfinite(cost.per_row_ms) && cost.per_row_ms >= 0))
      return std::nullopt;
    return cost;
  } catch (const Error&) {
    return std::nullopt;  // a damaged file is measured again and rewritten
  }
}

double CostModel::ar_ms(int64_t tokens, int64_t load, int64_t ar_rows) const {
  return double(tokens) * pass_ms(double(load * ar_rows));
}

double CostModel::diffusion_ms(int64_t tokens, int64_t block, int64_t passes, int64_t load) const {
  const double rows = double(tokens + std::min(block, tokens)) / 2.0;
  return double(passes) * pass_ms(double(load) * rows);
}

double CostModel::uniform_ms(int64_t tokens, int64_t canvas, double passes_per_canvas, int64_t load) const {
  const int64_t canvases = (tokens + canvas - 1) / canvas;
  return double(canvases) * passes_per_canvas * pass_ms(double(load * canvas));
}

double CostModel::verify_ms(int64_t tokens, int64_t pass_rows, double tokens_per_forward, int64_t load) const {
  return double(tokens) / std::max(tokens_per_forward, 1e-3) * pass_ms(double(load * pass_rows));
}

std::string CostModel::describe() const {
  char buf[200];
  std::snprintf(buf, sizeof buf, "pass = %.3f ms + %.4f ms/row; threshold decoding %.2f tokens/pass", fixed_ms,
                per_row_ms, threshold_tokens_per_forward);
  std::string out = buf;
  if (uniform_passes_per_canvas > 0) {
    std::snprintf(buf, sizeof buf, "; uniform-state %.1f passes/canvas", uniform_passes_per_canvas);
    out += buf;
  }
  if (verify_observations > 0) {
    std::snprintf(buf, sizeof buf, "; verify %.2f tokens/pass", verify_tokens_per_forward);
    out += buf;
  }
  return out;
}

std::string cost_model_key(const std::string& model_path, int64_t cores, const std::string& device) {
  std::error_code ec;
  const std::filesystem::path model_file = std::filesystem::absolute(model_path, ec);
  const auto size =
      std::filesystem::is_regular_file(model_file, ec) ? std::filesystem::file_size(model_file, ec) : 0;
  const auto mtime = std::filesystem::last_write_time(model_file, ec).time_since_epoch().count();
  return model_file.string() + " " + std::to_string(size) + " " + std::to_string(mtime) + " threads " +
         std::to_string(cores) + " " + simd_level_name(simd_level()) + " " + device;
}

std::string cost_model_file_for(const std::string& file, const std::string& model_id, size_t models) {
  if (models <= 1) return file;
  const std::filesystem::path path(file);
  const std::string stem = path.stem().string(), extension = path.extension().string();
  return (path.parent_path() / (stem + "." + model_id + extension)).string();
}

}  // namespace canvas::serve
