// The forward pass: requests checked and laid out (plan_forward), then model/transformer.h's one
// definition of the model run by the CPU's executor (model/cpu_executor.h), or placed primitive by
// primitive on a backend's and the CPU's (model/placement.h). Loading is model/model.cpp.
#include <algorithm>
#include <bit>
#include <cmath>
#include <span>
#include <vector>

#include "core/error.h"
#include "model/cpu_executor.h"
#include "model/model.h"
#include "model/placement.h"
#include "model/transformer.h"

namespace canvas {

void forward(const Model& model, KvCache& cache, const ForwardRequest& req, ThreadPool* pool) {
  KvCache* caches[] = {&cache};
  forward_batch(model, caches, std::span<const ForwardRequest>(&req, 1), pool);
}

AttentionShape attention_shape(const ModelConfig& c, const LayerAttention& la) {
  AttentionShape shape;
  shape.n_heads = int(c.n_heads);
  shape.n_kv_heads = int(la.n_kv_heads);
  shape.head_dim = int(la.head_dim);
  shape.scale = c.attention_scale > 0 ? c.attention_scale : 1.f / std::sqrt(float(la.head_dim));
  return shape;
}

namespace {

// The plan's attention metadata (model.h, ForwardPlan): window starts, each request's visible keys per
// layer kind, tree visibility bits.
void plan_attention(const ModelConfig& c, std::span<const ForwardRequest> requests, ForwardPlan& plan) {
  const size_t segments = requests.size();
  const size_t full = size_t(AttentionKind::Full), sliding = size_t(AttentionKind::Sliding);
  plan.first_key[full].assign(segments, 0);
  plan.first_key[sliding].assign(segments, 0);
  plan.canvas_keys.assign(segments, 0);
  if (c.sliding_window > 0) plan.window_start.resize(size_t(plan.n));
  if (!plan.slots.empty()) {
    plan.tree_bits[full].assign(size_t(plan.n), 0);
    plan.tree_bits[sliding].assign(size_t(plan.n), 0);
  }
  for (size_t s = 0; s < segments; ++s) {
    const ForwardRequest& req = requests[s];
    const int64_t r0 = plan.row0[s];
    for (int64_t i = 0; c.sliding_window > 0 && i < req.n; ++i) {
      const int64_t anchor = req.decoder ? req.pos0 : plan.pos[size_t(r0 + i)];
      plan.window_start[size_t(r0 + i)] = sliding_window_start(c, anchor);
    }
    if (req.decoder) {
      if (c.sliding_window > 0)
        plan.first_key[sliding][s] = std::max<int64_t>(0, plan.window_start[size_t(r0)]);
      plan.canvas_keys[s] = req.canvas_kv ? req.canvas_kv->capacity() : req.n;
    }
    if (!req.tree_parents) continue;
    uint64_t* bits = plan.tree_bits[full].data() + r0;
    uint64_t* windowed = plan.tree_bits[sliding].data() + r0;
    for (int64_t i = 0; i < req.n; ++i) {
      const int32_t parent = req.tree_parents[i];
      bits[i] = (parent < 0 ? 0 : bits[parent]) | uint64_t(1) << i;
      windowed[i] = bits[i];
      // On sliding layers, only the ancestors inside its window (a row's slot is not its position).
      for (int64_t a = 0; c.sliding_window > 0 && a < i; ++a)
        if (plan.pos[size_t(r0 + a)] < plan.window_start[size_t(r0 + i)]) windowed[i] &= ~(uint64_t(1) << a);
    }
  }
}

// The Head slot's rows (plain logits first, then the fused head's) and the self-conditioned requests.
void plan_heads(std::span<const ForwardRequest> requests, ForwardPlan& plan) {
  const int64_t segments = int64_t(requests.size());
  plan.head_row0.assign(size_t(segments), 0);
  for (int fused = 0; fused < 2; ++fused)
    for (int64_t s = 0; s < segments; ++s) {
      const ForwardRequest& req = requests[size_t(s)];
      if ((req.head_stats != nullptr) != bool(fused)) continue;
      plan.head_order.push_back(s);
      plan.head_row0[size_t(s)] = int64_t(plan.head_rows.size());
      for (int32_t row : req.logit_rows) plan.head_rows.push_back(int32_t(plan.row0[size_t(s)] + row));
      if (!fused) plan.plain_head_rows = int64_t(plan.head_rows.size());
    }
  for (int64_t s = 0; s < segments; ++s) {
    const ForwardRequest& req = requests[size_t(s)];
    if (!req.self_cond && !req.self_cond_soft) continue;
    plan.conditioned.push_back(s);
    plan.conditioned_rows += req.n;
  }
}

}  // namespace

ForwardPlan plan_forward(const Model& model, std::span<KvCache* const> caches, std::span<const ForwardRequest> requests) {
  const ModelConfig& c = model.config;
  const int64_t segments = int64_t(requests.size());
  check(segments > 0, "forward: no requests");
  check(caches.size() == requests.size(), "forward_batch: one KV cache per request");
  // Rows of all requests are stacked: segment s holds rows [row0[s], row0[s] + requests[s].n).
  ForwardPlan plan;
  std::vector<int64_t>& row0 = plan.row0;
  std::vector<int32_t>& pos = plan.pos;
  std::vector<int64_t>& key_ends = plan.key_ends;
  row0.assign(size_t(segments + 1), 0);
  key_ends.resize(size_t(segments));
  for (int64_t s = 0; s < segments; ++s) {
    const ForwardRequest& req = requests[size_t(s)];
    const KvCache& cache = *caches[size_t(s)];
    const int64_t n = req.n;
    const bool decoder = req.decoder;
    check(n > 0, "forward: no tokens");
    check(!decoder || c.has_decoder, "forward: decoder mode needs a model with a decoder (diffusion-gemma); '" +
                                         c.arch + "' has none");
    check(!decoder || !req.positions, "forward: explicit positions are for encoder passes only");
    check(decoder || (!req.canvas_kv && !req.canvas_rows), "forward: canvas K/V are for decoder passes only");
    check(!req.canvas_rows || req.canvas_kv, "forward: canvas rows need canvas_kv");
    if (req.canvas_kv) {
      const int64_t length = req.canvas_kv->capacity();
      check(req.canvas_rows ? n <= length : n == length,
            "forward: " + std::to_string(n) + " canvas rows for a canvas K/V store of " + std::to_string(length));
      // (Increasing rows are increasing positions, which the loop below checks.)
      for (int64_t i = 0; req.canvas_rows && i < n; ++i)
        check(req.canvas_rows[i] >= 0 && req.canvas_rows[i] < length, "forward: canvas rows must be inside the canvas");
    }
    if (req.tree_parents) {
      check(!decoder && !req.positions, "forward: a tree of rows is for encoder passes without explicit positions");
      check(n <= 64, "forward: a tree has at most 64 rows, not " + std::to_string(n));
      check(req.key_end == 0 || req.key_end == req.pos0 + n, "forward: a tree's keys end after its rows");
      // Rows stored in order from pos0, each at its parent's position + 1.
      if (plan.slots.empty()) plan.slots.assign(pos.begin(), pos.end());
      const size_t r0 = pos.size();
      for (int64_t i = 0; i < n; ++i) {
        const int32_t parent = req.tree_parents[i];
        check(parent >= -1 && parent < i, "forward: a tree row's parent must be an earlier row (or -1)");
        pos.push_back(parent < 0 ? int32_t(req.pos0) : pos[r0 + size_t(parent)] + 1);
        plan.slots.push_back(int32_t(req.pos0 + i));
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        pos.push_back(req.positions     ? req.positions[i]
                      : req.canvas_rows ? int32_t(req.pos0 + req.canvas_rows[i])
                                        : int32_t(req.pos0 + i));
        check(i == 0 || pos.back() > pos[pos.size() - 2], "forward: positions must be strictly increasing");
      }
      if (!plan.slots.empty()) plan.slots.insert(plan.slots.end(), pos.end() - n, pos.end());
    }
    check(!req.positions || req.key_end > 0, "forward: explicit positions need key_end");
    // (A tree's slots run from its first position, pos0, to its last, pos0 + n - 1.)
    const int64_t first = pos[size_t(row0[size_t(s)])], last = req.tree_parents ? req.pos0 + n - 1 : pos.back();
    const int64_t key_end = decoder ? req.pos0 : req.key_end > 0 ? req.key_end : req.pos0 + n;
    key_ends[size_t(s)] = key_end;
    if (decoder) {
      check(req.pos0 >= 0 && req.pos0 <= cache.capacity(),
            "forward: decoder canvas after " + std::to_string(req.pos0) +
                " cached positions exceeds the KV cache capacity " + std::to_string(cache.capacity()));
    } else {
      check(first >= 0 && last < key_end && key_end <= cache.capacity(),
            "forward: positions " + std::to_string(first) + ".." + std::to_string(last + 1) + " (keys to " +
                std::to_string(key_end) + ") exceed the KV cache capacity " + std::to_string(cache.capacity()));
    }
    for (int64_t i = 0; i < n; ++i)
      check(req.tokens[i] >= 0 && req.tokens[i] < c.vocab, "token id " + std::to_string(req.tokens[i]) +
                                                               " is outside the vocabulary (size " +
                                                               std::to_string(c.vocab) + ")");
    check(!(req.self_cond || req.self_cond_soft) || decoder || c.self_conditioning,
          "forward: self-conditioning logits given to a model without a self-conditioning input");
    check(!(req.self_cond && req.self_cond_soft),
          "forward: give the self-conditioning input as logits (self_cond) or as a soft embedding (self_cond_soft), "
          "not both");
    check(!req.soft_embedding_out || req.head_stats,
          "forward: a soft embedding output needs head_stats (the fused head)");
    check(req.logit_rows.empty() || req.logits != nullptr || req.head_stats != nullptr,
          "forward: logit rows requested without an output buffer");
    for (int32_t row : req.logit_rows) check(row >= 0 && row < n, "forward: logit row out of range");
    row0[size_t(s + 1)] = row0[size_t(s)] + n;
  }
  plan.n = row0[size_t(segments)];
  plan_attention(c, requests, plan);
  plan_heads(requests, plan);
  return plan;
}

void forward_batch(const Model& model, std::span<KvCache* const> caches, std::span<const ForwardRequest> requests,
                   ThreadPool* pool) {
  const ForwardPlan plan = plan_forward(model, caches, requests);
  PrimitiveBackend* backend = model.primitives.get();
  // Keeps the pool's workers spinning between this pass's parallel loops instead of sleeping, unless a
  // device runs the whole pass.
  const bool device_only = backend && backend->runs_every_primitive() && !backend->keep_on_cpu;
  // Passes are judged by kind (the model, the row count within 2x, encoder or decoder rows): whether the
  // pool's workers make that kind faster at all.
  bool decoder = false;
  for (const ForwardRequest& r : requests) decoder = decoder || r.decoder;
  const uint64_t pass_kind = (reinterpret_cast<uintptr_t>(&model) << 8) ^ (uint64_t(std::bit_width(uint64_t(plan.n))) << 1) ^
                             uint64_t(decoder);
  const ThreadPool::Busy busy(device_only ? nullptr : pool, pass_kind);
  CpuExecutor executor(model, caches, requests, plan, pool);
  if (!backend) {
    run_transformer(model.config, executor, plan.conditioned_rows > 0);
    return;
  }
  check(plan.slots.empty(), "forward: a tree of rows (tree verification) runs on the CPU's executor only");
  const std::unique_ptr<Executor> device = backend->executor(model, caches, requests, plan, pool);
  PlacedExecutor placed(executor, *device, backend->keep_on_cpu);
  backend->run(*device, [&] { run_transformer(model.config, placed, plan.conditioned_rows > 0); });
  backend->add_stats(placed.stats());
}

}  // namespace canvas
