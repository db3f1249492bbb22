// Timing forward passes to fit the cost model used for routing.
#include "serve/cost_model.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "core/timer.h"

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
  double best = 1e30;
  for (int repeat = 0; repeat < 7; ++repeat) {  // the minimum: other work on the cores only adds time
    const double t0 = now_ms();
    forward(model, cache, req, pool);
    best = std::min(best, now_ms() - t0);
  }
  return best;
}
}  // namespace

CostModel CostModel::measure(const Model& model, ThreadPool* pool, int64_t rows) {
  CostModel cost;
  rows = std::max<int64_t>(2, std::min(rows, model.config.context_length > 0 ? model.config.context_length : rows));
  const double one = time_pass(model, pool, 1), many = time_pass(model, pool, rows);
  cost.per_row_ms = std::max(0.0, (many - one) / double(rows - 1));
  cost.fixed_ms = std::max(0.0, one - cost.per_row_ms);
  return cost;
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

std::string CostModel::describe() const {
  char buf[200];
  std::snprintf(buf, sizeof buf, "pass = %.3f ms + %.4f ms/row; threshold decoding %.2f tokens/pass", fixed_ms,
                per_row_ms, threshold_tokens_per_pass);
  std::string out = buf;
  if (uniform_passes_per_canvas > 0) {
    std::snprintf(buf, sizeof buf, "; uniform-state %.1f passes/canvas", uniform_passes_per_canvas);
    out += buf;
  }
  return out;
}

}  // namespace canvas::serve
