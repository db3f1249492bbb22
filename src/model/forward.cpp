// The transformer forward pass, one code path for every family and mode, in named stages: embed (token
// and position embeddings, self-conditioning input), attention_block (norm, Q/K/V, RoPE, attention over
// each request's cache, output projection), feed_forward (the dense MLP, the MoE, or Gemma 4's dense +
// experts layer tail) and head (plain logit rows in one matmul, fused-head requests one by one). Loading
// is model/model.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <vector>

#include "core/error.h"
#include "model/model.h"
#include "ops/lm_head.h"
#include "ops/matmul.h"
#include "ops/ops.h"

namespace canvas {
namespace {

void add_bias(float* rows, int64_t n, int64_t width, const TensorView& bias) {
  if (!bias.data) return;
  const float* b = bias.f32();
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < width; ++i) rows[r * width + i] += b[i];
}

void rms_norm_rows(const float* x, int64_t n, int64_t width, const TensorView& w, float eps, float* y) {
  for (int64_t r = 0; r < n; ++r) rms_norm(x + r * width, w.data ? w.f32() : nullptr, width, eps, y + r * width);
}

// Gated MLP over rows: out = down(act(gate(x)) * up(x)).
void gated_mlp(const TensorView& gate, const TensorView& up, const TensorView& down, Activation act, const float* x,
               int64_t n, float* out, std::vector<float>& g, std::vector<float>& u, ThreadPool* pool) {
  const int64_t width = gate.rows();
  g.resize(size_t(n * width));
  u.resize(size_t(n * width));
  const MatmulTarget gate_up[] = {{&gate, g.data(), width}, {&up, u.data(), up.rows()}};
  matmul_fused(gate_up, 2, x, gate.cols(), n, pool);  // one parallel loop for both
  if (act == Activation::Silu) {
    swiglu(g.data(), u.data(), n * width, g.data());
  } else {
    geglu(g.data(), u.data(), n * width, g.data());
  }
  matmul(down, g.data(), n, out, pool);
}

// One expert's MLP over m gathered rows; a fused [gate; up] matrix (Gemma 4) is split after one product.
void expert_mlp(const ModelConfig& c, const LayerWeights& w, int64_t e, const float* x, int64_t m, float* out,
                std::vector<float>& g, std::vector<float>& u, std::vector<float>& gu, ThreadPool* pool) {
  if (!w.gate_up_exps.data) {
    gated_mlp(w.gate_exps.matrix(e), w.up_exps.matrix(e), w.down_exps.matrix(e), c.activation, x, m, out, g, u, pool);
    return;
  }
  const int64_t I = c.expert_ffn;
  gu.resize(size_t(m * 2 * I));
  g.resize(size_t(m * I));
  u.resize(size_t(m * I));
  matmul(w.gate_up_exps.matrix(e), x, m, gu.data(), pool);
  for (int64_t r = 0; r < m; ++r) {
    std::memcpy(&g[size_t(r * I)], &gu[size_t(r * 2 * I)], size_t(I) * 4);
    std::memcpy(&u[size_t(r * I)], &gu[size_t(r * 2 * I + I)], size_t(I) * 4);
  }
  if (c.activation == Activation::Silu) {
    swiglu(g.data(), u.data(), m * I, g.data());
  } else {
    geglu(g.data(), u.data(), m * I, g.data());
  }
  matmul(w.down_exps.matrix(e), g.data(), m, out, pool);
}

// Mixture of experts: each row goes to its top-k experts; rows are grouped by expert so every expert's
// weights are read once per pass. A row's sum is taken in ascending expert order, so it does not
// depend on which other rows share the batch. The router reads router_in, the experts expert_in
// (the same rows except in Gemma 4, whose router and experts see differently normed inputs).
void moe(const ModelConfig& c, const LayerWeights& w, const float* router_in, const float* expert_in, int64_t n,
         float* out, ThreadPool* pool) {
  const int64_t E = c.n_experts, K = c.n_experts_used, H = c.hidden;
  std::vector<float> router_logits(size_t(n * E));
  matmul(w.router, router_in, n, router_logits.data(), pool);
  std::vector<std::vector<int32_t>> rows_of(static_cast<size_t>(E));
  std::vector<std::vector<float>> weights_of(static_cast<size_t>(E));
  std::vector<float> probs(static_cast<size_t>(E));
  const float* expert_scale = w.per_expert_scale.data ? w.per_expert_scale.f32() : nullptr;
  for (int64_t r = 0; r < n; ++r) {
    softmax(router_logits.data() + r * E, E, probs.data());
    std::vector<int32_t> top = top_k(probs.data(), E, K);
    float total = 0;
    for (int32_t e : top) total += probs[size_t(e)];
    for (int32_t e : top) {
      rows_of[size_t(e)].push_back(int32_t(r));
      float weight = c.expert_weights_norm ? probs[size_t(e)] / total : probs[size_t(e)];
      if (expert_scale) weight *= expert_scale[e];
      weights_of[size_t(e)].push_back(weight);
    }
  }
  std::fill(out, out + n * H, 0.f);
  std::vector<float> gathered, result, g, u, gu;
  for (int64_t e = 0; e < E; ++e) {
    const auto& rows = rows_of[size_t(e)];
    if (rows.empty()) continue;
    const int64_t m = int64_t(rows.size());
    gathered.resize(size_t(m * H));
    result.resize(size_t(m * H));
    for (int64_t i = 0; i < m; ++i)
      std::memcpy(&gathered[size_t(i * H)], expert_in + rows[size_t(i)] * H, size_t(H) * 4);
    expert_mlp(c, w, e, gathered.data(), m, result.data(), g, u, gu, pool);
    for (int64_t i = 0; i < m; ++i) {
      float* dst = out + rows[size_t(i)] * H;
      const float weight = weights_of[size_t(e)][size_t(i)];
      for (int64_t j = 0; j < H; ++j) dst[j] += weight * result[size_t(i * H + j)];
    }
  }
}

}  // namespace

namespace {
// The token embedding's rows v0 .. v0 + count dequantised and written transposed: out[j * ld + r] =
// E[v0 + r][j] (ld >= count).
void transpose_embedding_rows(const Model& model, int64_t v0, int64_t count, float* out, int64_t ld,
                              ThreadPool* pool) {
  const int64_t H = model.config.hidden;
  parallel_for(pool, count, 64, [&](int64_t b, int64_t e) {
    std::vector<float> row(static_cast<size_t>(H));
    for (int64_t r = b; r < e; ++r) {
      get_row(model.token_embd, v0 + r, row.data());
      for (int64_t j = 0; j < H; ++j) out[j * ld + r] = row[size_t(j)];
    }
  });
}
}  // namespace

void prepare_embedding_columns(Model& model, ThreadPool* pool) {
  const ModelConfig& c = model.config;
  model.embedding_columns.reset();
  model.embedding_columns_of = nullptr;
  const int64_t H = c.hidden, V = c.vocab;
  if (!(c.has_decoder || c.self_conditioning) || !model.token_embd.data || H <= 0 || V <= 0 ||
      V * H * int64_t(sizeof(float)) > kMaxEmbeddingColumnsBytes)
    return;
  auto columns = std::make_shared<std::vector<float>>(size_t(V * H));
  transpose_embedding_rows(model, 0, V, columns->data(), V, pool);
  model.embedding_columns = std::move(columns);
  model.embedding_columns_of = model.token_embd.data;
}

namespace {

// softmax(prev_logits) @ E for n rows into soft [n x hidden], as one matmul per tile of vocabulary rows:
// the tile of E is dequantised and transposed once ([H, tile]) and multiplied with the [n, tile]
// probabilities by the f32 matmul kernel, so E streams through memory once per pass instead of once per
// canvas row, and no [n, vocab] probability array is stored. The sum over tiles runs in a fixed order,
// so the result does not depend on the thread count.
// With model.embedding_columns (E transposed to f32 [H x V], made at load) it is softmax row by row and
// one matmul per chunk of rows instead: nothing is dequantised or transposed per pass.
void soft_embedding_of_logits(const Model& model, const float* prev_logits, int64_t n, std::vector<float>& soft,
                              ThreadPool* pool) {
  const ModelConfig& c = model.config;
  const int64_t H = c.hidden, V = c.vocab;
  // An f32 [H x cols] matrix (H rows of cols values) as a matmul weight.
  const auto columns_view = [H](const float* data, int64_t cols) {
    TensorView w;
    w.type = DType::F32;
    w.data = data;
    w.n_dims = 2;
    w.ne[0] = cols;
    w.ne[1] = H;
    return w;
  };
  if (model.embedding_columns && model.embedding_columns_of == model.token_embd.data) {
    const TensorView w = columns_view(model.embedding_columns->data(), V);
    const int64_t chunk = std::max<int64_t>(1, (int64_t(1) << 22) / V);  // <= 16 MiB of probabilities
    soft.resize(size_t(n * H));
    std::vector<float> probs(size_t(std::min(n, chunk) * V));
    for (int64_t r0 = 0; r0 < n; r0 += chunk) {
      const int64_t rows = std::min(chunk, n - r0);
      parallel_for(pool, rows, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) softmax(prev_logits + (r0 + i) * V, V, &probs[size_t(i * V)]);
      });
      matmul(w, probs.data(), V, rows, soft.data() + r0 * H, H, pool);
    }
    return;
  }
  std::vector<float> log_sum(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) log_sum[size_t(i)] = row_stats(prev_logits + i * V, V).logsumexp;
  constexpr int64_t kTile = 1024;
  soft.assign(size_t(n * H), 0.f);
  std::vector<float> partial(size_t(n * H));
  std::vector<float> columns_tile(size_t(kTile * H)), probs(size_t(n * kTile));
  for (int64_t v0 = 0; v0 < V; v0 += kTile) {
    const int64_t rows = std::min(kTile, V - v0);
    transpose_embedding_rows(model, v0, rows, columns_tile.data(), rows, pool);  // [H, rows]
    parallel_for(pool, n, 8, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const float* z = prev_logits + i * V + v0;
        for (int64_t r = 0; r < rows; ++r) probs[size_t(i * rows + r)] = std::exp(z[r] - log_sum[size_t(i)]);
      }
    });
    matmul(columns_view(columns_tile.data(), rows), probs.data(), rows, n, partial.data(), H, pool);
    for (int64_t i = 0; i < n * H; ++i) soft[size_t(i)] += partial[size_t(i)];
  }
}

// DiffusionGemma's decoder input (diffusiongemma.md section 2). On entry x holds E[canvas] * scale; on
// return rmsnorm_noweight(E[canvas] * scale + mlp(pre_norm(soft * scale))), soft = softmax(prev) @ E
// computed from the previous logits (prev_logits, [n x vocab]) or given (prev_soft, [n x hidden]); the
// MLP term is zero when neither is given. canvas's own models (config.self_conditioning) add the same
// term without the trailing norm (decoder_norm false), which belongs to the Gemma decoder, not to the
// llada-family layer.
void self_conditioning_input(const Model& model, const float* prev_logits, const float* prev_soft, int64_t n,
                             float* x, bool decoder_norm, ThreadPool* pool) {
  const ModelConfig& c = model.config;
  const int64_t H = c.hidden;
  if (prev_logits || prev_soft) {
    std::vector<float> soft;
    if (prev_logits) {
      soft_embedding_of_logits(model, prev_logits, n, soft, pool);
    } else {
      soft.assign(prev_soft, prev_soft + n * H);
    }
    for (float& value : soft) value *= c.embedding_scale;
    const SelfConditioningWeights& sc = model.self_conditioning;
    rms_norm_rows(soft.data(), n, H, sc.pre_norm, c.rms_eps, soft.data());
    std::vector<float> mlp(size_t(n * H)), g, u;
    gated_mlp(sc.gate, sc.up, sc.down, c.activation, soft.data(), n, mlp.data(), g, u, pool);
    for (int64_t i = 0; i < n * H; ++i) x[i] += mlp[size_t(i)];
  }
  if (decoder_norm) rms_norm_rows(x, n, H, TensorView{}, c.rms_eps, x);
}

// RMSNorm over each head_dim-wide head of every row, with an optional weight (q_norm / k_norm / v_norm).
void norm_heads(float* x, int64_t n, int64_t n_heads, int64_t head_dim, const TensorView& w, float eps) {
  rms_norm_rows(x, n * n_heads, head_dim, w, eps, x);
}

// The Gemma 4 layer after attention (diffusiongemma.md section 2): x holds the layer input and proj
// the attention output; on return x is the layer output.
//   h = x + post_attn_norm(a); m1 = post_ffn_norm_1(dense(pre_ffn_norm(h)));
//   m2 = post_ffn_norm_2(experts(pre_ffn_norm_2(h), router(h)));  out = (h + post_ffn_norm(m1 + m2)) * scalar
// layer_scalar: one per row (encoder and decoder rows of a mixed batch scale by their own).
void gemma_layer_rest(const ModelConfig& c, const LayerWeights& w, const float* layer_scalar, int64_t n, float* x,
                      float* proj, float* h, std::vector<float>& g, std::vector<float>& u, ThreadPool* pool) {
  const int64_t H = c.hidden;
  rms_norm_rows(proj, n, H, w.post_attn_norm, c.rms_eps, proj);
  for (int64_t i = 0; i < n * H; ++i) x[i] += proj[i];
  rms_norm_rows(x, n, H, w.ffn_norm, c.rms_eps, h);
  gated_mlp(w.gate, w.up, w.down, c.activation, h, n, proj, g, u, pool);
  if (c.dense_and_moe) {
    rms_norm_rows(proj, n, H, w.post_ffn_norm_1, c.rms_eps, proj);
    std::vector<float> router_in(size_t(n * H)), experts_out(size_t(n * H));
    rms_norm_rows(x, n, H, TensorView{}, c.rms_eps, router_in.data());
    if (c.router_norm) {
      const float* scale = w.router_scale.f32();
      const float inv_sqrt_hidden = 1.f / std::sqrt(float(H));
      for (int64_t r = 0; r < n; ++r)
        for (int64_t j = 0; j < H; ++j) router_in[size_t(r * H + j)] *= scale[j] * inv_sqrt_hidden;
    }
    rms_norm_rows(x, n, H, w.pre_ffn_norm_2, c.rms_eps, h);
    moe(c, w, router_in.data(), h, n, experts_out.data(), pool);
    rms_norm_rows(experts_out.data(), n, H, w.post_ffn_norm_2, c.rms_eps, experts_out.data());
    for (int64_t i = 0; i < n * H; ++i) proj[i] += experts_out[size_t(i)];
  }
  rms_norm_rows(proj, n, H, w.post_ffn_norm, c.rms_eps, proj);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = r * H; j < (r + 1) * H; ++j) x[j] = (x[j] + proj[j]) * layer_scalar[r];
}

}  // namespace

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
      check(!model.backend, "forward: kept canvas K/V (freezing settled positions) are not supported on this device");
      const int64_t length = req.canvas_kv->capacity();
      check(req.canvas_rows ? n <= length : n == length,
            "forward: " + std::to_string(n) + " canvas rows for a canvas K/V store of " + std::to_string(length));
      // (Increasing rows are increasing positions, which the loop below checks.)
      for (int64_t i = 0; req.canvas_rows && i < n; ++i)
        check(req.canvas_rows[i] >= 0 && req.canvas_rows[i] < length, "forward: canvas rows must be inside the canvas");
    }
    for (int64_t i = 0; i < n; ++i) {
      pos.push_back(req.positions     ? req.positions[i]
                    : req.canvas_rows ? int32_t(req.pos0 + req.canvas_rows[i])
                                      : int32_t(req.pos0 + i));
      check(i == 0 || pos.back() > pos[pos.size() - 2], "forward: positions must be strictly increasing");
    }
    check(!req.positions || req.key_end > 0, "forward: explicit positions need key_end");
    const int64_t first = pos[size_t(row0[size_t(s)])], last = pos.back();
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
  return plan;
}

namespace {

// One pass over a batch of requests (rows of all requests stacked: segment s holds rows
// [row0[s], row0[s] + requests[s].n)), with the activations its stages share.
struct Pass {
  const Model& model;
  const ModelConfig& c;
  std::span<KvCache* const> caches;
  std::span<const ForwardRequest> requests;
  const ForwardPlan& plan;
  ThreadPool* pool;
  int64_t n = 0;  // rows of the whole batch
  // x: the residual stream [n, hidden]; h: a normed copy; q, k, v, attn: one layer's attention
  // activations, sized for the widest layer (Gemma 4's full layers are wider than its sliding ones);
  // proj: a sublayer's output before it joins x; g, u: MLP scratch.
  std::vector<float> x, h, q, k, v, attn, proj, g, u;
  std::vector<float> canvas_keys, canvas_values;  // decoder: [visible cache ; canvas] K/V of one layer
  std::vector<int32_t> window_start;  // sliding layers: query at position p sees keys j >= p - window + 1
  std::vector<float> row_scalar;      // Gemma 4: each row's layer scalar (encoder or decoder)

  Pass(const Model& m, std::span<KvCache* const> cs, std::span<const ForwardRequest> rs, const ForwardPlan& p,
       ThreadPool* tp)
      : model(m), c(m.config), caches(cs), requests(rs), plan(p), pool(tp), n(p.n) {
    const int64_t H = c.hidden;
    int64_t max_q_width = 0, max_kv_width = 0;
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const LayerAttention a = c.attention_of(l);
      max_q_width = std::max(max_q_width, c.n_heads * a.head_dim);
      max_kv_width = std::max(max_kv_width, a.n_kv_heads * a.head_dim);
    }
    x.resize(size_t(n * H));
    h.resize(size_t(n * H));
    proj.resize(size_t(n * H));
    q.resize(size_t(n * max_q_width));
    attn.resize(size_t(n * max_q_width));
    k.resize(size_t(n * max_kv_width));
    v.resize(size_t(n * max_kv_width));
    if (c.sliding_window > 0)
      for (int64_t i = 0; i < n; ++i) window_start.push_back(int32_t(plan.pos[size_t(i)] - c.sliding_window + 1));
  }
  int64_t segments() const { return int64_t(requests.size()); }
};

// Stage 1: token embeddings (scaled), learned positions, the self-conditioning input (decoder passes,
// and canvas's self-conditioned models), and each encoder row's group recorded in its cache.
void embed(Pass& p) {
  const ModelConfig& c = p.c;
  const Model& model = p.model;
  const int64_t H = c.hidden;
  for (int64_t s = 0; s < p.segments(); ++s) {
    const ForwardRequest& req = p.requests[size_t(s)];
    const int64_t r0 = p.plan.row0[size_t(s)];
    for (int64_t i = 0; i < req.n; ++i) {
      const int64_t r = r0 + i;
      float* row = &p.x[size_t(r * H)];
      get_row(model.token_embd, req.tokens[i], row);
      if (c.embedding_scale != 1.f)
        for (int64_t j = 0; j < H; ++j) row[j] *= c.embedding_scale;
      if (model.position_embd.data) {
        const int32_t position = p.plan.pos[size_t(r)];
        check(position < model.position_embd.ne[1], "position " + std::to_string(position) +
                                                        " is beyond the model's position embeddings (" +
                                                        std::to_string(model.position_embd.ne[1]) + ")");
        const float* pe = model.position_embd.f32() + int64_t(position) * H;
        for (int64_t j = 0; j < H; ++j) row[j] += pe[j];
      }
    }
    float* xs = &p.x[size_t(r0 * H)];
    if (req.decoder) {
      self_conditioning_input(model, req.self_cond, req.self_cond_soft, req.n, xs, /*decoder_norm=*/true, p.pool);
    } else if (req.self_cond || req.self_cond_soft) {  // neither: zeros, which leave x as it is
      self_conditioning_input(model, req.self_cond, req.self_cond_soft, req.n, xs, /*decoder_norm=*/false, p.pool);
    }
    if (!req.decoder) {
      int32_t* groups = p.caches[size_t(s)]->groups();
      for (int64_t i = 0; i < req.n; ++i) groups[p.plan.pos[size_t(r0 + i)]] = req.groups[i];
    }
  }
}

// One request's attention for layer l: an encoder pass writes its K/V into the cache and attends causally
// (groups, sliding window); a decoder pass attends both ways over the visible cache and the canvas,
// keeping the cache as the encoder left it.
void attend(Pass& p, int64_t l, int64_t s) {
  const ModelConfig& c = p.c;
  const LayerAttention la = c.attention_of(l);
  const int64_t D = la.head_dim, q_width = c.n_heads * D, kv_width = la.n_kv_heads * D;
  const bool sliding = la.kind == AttentionKind::Sliding;
  const AttentionShape shape = attention_shape(c, la);
  const ForwardRequest& req = p.requests[size_t(s)];
  KvCache& cache = *p.caches[size_t(s)];
  const int64_t r0 = p.plan.row0[size_t(s)], ns = req.n;
  const std::vector<int32_t>& pos = p.plan.pos;
  const float* qs = &p.q[size_t(r0 * q_width)];
  const float* ks_new = &p.k[size_t(r0 * kv_width)];
  const float* vs_new = &p.v[size_t(r0 * kv_width)];
  float* out = &p.attn[size_t(r0 * q_width)];
  float* kc = cache.keys(l);
  float* vc = cache.values(l);
  const int64_t stride = cache.head_stride(l);
  if (!req.decoder) {
    for (int64_t i = 0; i < ns; ++i)
      for (int64_t hh = 0; hh < la.n_kv_heads; ++hh) {
        const int64_t dst = hh * stride + int64_t(pos[size_t(r0 + i)]) * D;
        std::memcpy(kc + dst, &ks_new[size_t(i * kv_width + hh * D)], size_t(D) * 4);
        std::memcpy(vc + dst, &vs_new[size_t(i * kv_width + hh * D)], size_t(D) * 4);
      }
    AttentionMask mask;
    mask.key_group = cache.groups();
    mask.query_group = req.groups;
    if (sliding) mask.window_start = p.window_start.data() + r0;
    attention(qs, ns, q_width, kc, vc, p.plan.key_ends[size_t(s)], stride, mask, shape, out, q_width, p.pool);
    return;
  }
  // The canvas sees the cache (sliding layers: its last window - 1 positions) and itself, both ways;
  // its own K/V go to scratch (or to the kept canvas K/V) so the cache stays as the encoder left it.
  const int64_t first = sliding ? std::max<int64_t>(0, req.pos0 - (c.sliding_window - 1)) : 0;
  KvCache* kept = req.canvas_kv;
  const int64_t canvas_rows = kept ? kept->capacity() : ns;
  const int64_t cached = req.pos0 - first, keys = cached + canvas_rows;
  if (kept)
    for (int64_t i = 0; i < ns; ++i) {
      const int64_t row = req.canvas_rows ? req.canvas_rows[i] : i;
      for (int64_t hh = 0; hh < la.n_kv_heads; ++hh) {
        const int64_t dst = hh * kept->head_stride(l) + row * D;
        std::memcpy(kept->keys(l) + dst, &ks_new[size_t(i * kv_width + hh * D)], size_t(D) * 4);
        std::memcpy(kept->values(l) + dst, &vs_new[size_t(i * kv_width + hh * D)], size_t(D) * 4);
      }
    }
  p.canvas_keys.resize(size_t(la.n_kv_heads * keys * D));
  p.canvas_values.resize(size_t(la.n_kv_heads * keys * D));
  for (int64_t hh = 0; hh < la.n_kv_heads; ++hh) {
    float* ks = &p.canvas_keys[size_t(hh * keys * D)];
    float* vs = &p.canvas_values[size_t(hh * keys * D)];
    std::memcpy(ks, kc + hh * stride + first * D, size_t(cached * D) * 4);
    std::memcpy(vs, vc + hh * stride + first * D, size_t(cached * D) * 4);
    if (kept) {
      std::memcpy(ks + cached * D, kept->keys(l) + hh * kept->head_stride(l), size_t(canvas_rows * D) * 4);
      std::memcpy(vs + cached * D, kept->values(l) + hh * kept->head_stride(l), size_t(canvas_rows * D) * 4);
      continue;
    }
    for (int64_t i = 0; i < ns; ++i) {
      std::memcpy(ks + (cached + i) * D, &ks_new[size_t(i * kv_width + hh * D)], size_t(D) * 4);
      std::memcpy(vs + (cached + i) * D, &vs_new[size_t(i * kv_width + hh * D)], size_t(D) * 4);
    }
  }
  attention(qs, ns, q_width, p.canvas_keys.data(), p.canvas_values.data(), keys, keys * D, AttentionMask{}, shape, out,
            q_width, p.pool);
}

// Stage 2, per layer: attn_norm, Q/K/V (biases, q/k/v norms, RoPE), attention per request (the one
// per-request part of a layer: each request reads its own cache), and the output projection into proj.
void attention_block(Pass& p, int64_t l) {
  const ModelConfig& c = p.c;
  const LayerWeights& w = p.model.layers[size_t(l)];
  const LayerAttention la = c.attention_of(l);
  const int64_t n = p.n, H = c.hidden, D = la.head_dim, q_width = c.n_heads * D, kv_width = la.n_kv_heads * D;
  rms_norm_rows(p.x.data(), n, H, w.attn_norm, c.rms_eps, p.h.data());
  // Q, K and V in one parallel loop (a decode step is a chain of short loops; each wait costs).
  const MatmulTarget qkv[] = {{&w.wq, p.q.data(), w.wq.rows()}, {&w.wk, p.k.data(), w.wk.rows()},
                              {&w.wv, p.v.data(), w.wv.rows()}};
  matmul_fused(qkv, la.value_from_key ? 2 : 3, p.h.data(), H, n, p.pool);
  if (la.value_from_key)
    std::copy(p.k.begin(), p.k.begin() + n * kv_width, p.v.begin());  // raw k_proj output, before k_norm and RoPE
  add_bias(p.q.data(), n, q_width, w.bq);
  add_bias(p.k.data(), n, kv_width, w.bk);
  add_bias(p.v.data(), n, kv_width, w.bv);
  if (c.qk_norm) {
    norm_heads(p.q.data(), n, c.n_heads, D, w.q_norm, c.rms_eps);
    norm_heads(p.k.data(), n, la.n_kv_heads, D, w.k_norm, c.rms_eps);
  }
  if (c.v_norm) norm_heads(p.v.data(), n, la.n_kv_heads, D, TensorView{}, c.rms_eps);
  rope(p.q.data(), n, int(c.n_heads), p.plan.pos.data(), la.rope);
  rope(p.k.data(), n, int(la.n_kv_heads), p.plan.pos.data(), la.rope);
  for (int64_t s = 0; s < p.segments(); ++s) attend(p, l, s);
  matmul(w.wo, p.attn.data(), n, p.proj.data(), p.pool);
}

// Stage 3, per layer: the attention output joins the residual stream, then the feed-forward sublayer:
// Gemma 4's layer tail (dense MLP beside the experts, its norms and layer scalar), or the pre-norm
// block's dense MLP or MoE.
void feed_forward(Pass& p, int64_t l) {
  const ModelConfig& c = p.c;
  const LayerWeights& w = p.model.layers[size_t(l)];
  const int64_t n = p.n, H = c.hidden;
  if (c.layer_style == LayerStyle::Gemma4) {
    // The decoder's layer scalar belongs to decoder rows, the encoder's to encoder rows.
    p.row_scalar.resize(size_t(n));
    for (int64_t s = 0; s < p.segments(); ++s)
      std::fill(p.row_scalar.begin() + p.plan.row0[size_t(s)], p.row_scalar.begin() + p.plan.row0[size_t(s + 1)],
                p.requests[size_t(s)].decoder ? w.layer_scalar_decoder : w.layer_scalar_encoder);
    gemma_layer_rest(c, w, p.row_scalar.data(), n, p.x.data(), p.proj.data(), p.h.data(), p.g, p.u, p.pool);
    return;
  }
  for (int64_t i = 0; i < n * H; ++i) p.x[size_t(i)] += p.proj[size_t(i)];
  rms_norm_rows(p.x.data(), n, H, w.ffn_norm, c.rms_eps, p.h.data());
  if (c.is_moe()) {
    moe(c, w, p.h.data(), p.h.data(), n, p.proj.data(), p.pool);
  } else {
    gated_mlp(w.gate, w.up, w.down, c.activation, p.h.data(), n, p.proj.data(), p.g, p.u, p.pool);
  }
  for (int64_t i = 0; i < n * H; ++i) p.x[size_t(i)] += p.proj[size_t(i)];
}

// Stage 4: the head. The plain logit rows of every request in one matmul (soft-capped); fused-head
// requests one by one (each has its own temperature and noise).
void head(Pass& p) {
  const ModelConfig& c = p.c;
  const Model& model = p.model;
  const int64_t H = c.hidden;
  const std::vector<int64_t>& row0 = p.plan.row0;
  std::vector<float> selected, batch_logits;
  int64_t plain_rows = 0;
  for (const ForwardRequest& req : p.requests)
    if (!req.head_stats) plain_rows += int64_t(req.logit_rows.size());
  selected.resize(size_t(plain_rows * H));
  int64_t r = 0;
  for (int64_t s = 0; s < p.segments(); ++s) {
    const ForwardRequest& req = p.requests[size_t(s)];
    const int64_t rows = int64_t(req.logit_rows.size());
    if (rows == 0) continue;
    if (req.head_stats) {
      // The soft embedding is softmax @ output; it is the self-conditioning's softmax @ E only when tied.
      check(!req.soft_embedding_out ||
                (model.output.data == model.token_embd.data && model.output.type == model.token_embd.type),
            "forward: a soft embedding output needs a head tied to the token embedding; '" + c.arch +
                "' has its own output matrix");
      std::vector<float> own(size_t(rows * H));
      for (int64_t i = 0; i < rows; ++i)
        rms_norm(&p.x[size_t((row0[size_t(s)] + req.logit_rows[size_t(i)]) * H)], model.output_norm.f32(), H,
                 c.rms_eps, &own[size_t(i * H)]);
      HeadStreamOptions options = req.head;
      options.softcap = std::max(c.logit_softcap, 0.f);
      lm_head_stream(model.output, own.data(), rows, H, options, req.head_stats, req.soft_embedding_out, p.pool);
      continue;
    }
    for (int64_t i = 0; i < rows; ++i, ++r)
      rms_norm(&p.x[size_t((row0[size_t(s)] + req.logit_rows[size_t(i)]) * H)], model.output_norm.f32(), H,
               c.rms_eps, &selected[size_t(r * H)]);
  }
  if (plain_rows == 0) return;
  // One request writes its own buffer directly; a batch goes through one array and is scattered.
  const bool direct = p.segments() == 1;
  if (!direct) batch_logits.resize(size_t(plain_rows * c.vocab));
  float* logits = direct ? p.requests[0].logits : batch_logits.data();
  matmul(model.output, selected.data(), plain_rows, logits, p.pool);
  if (c.logit_softcap > 0) {
    const float cap = c.logit_softcap;
    const int64_t V = c.vocab;
    parallel_for(p.pool, plain_rows, std::max<int64_t>(1, 16384 / V), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) softcap(logits + i * V, V, cap);
    });
  }
  if (direct) return;
  r = 0;
  for (const ForwardRequest& req : p.requests) {
    if (req.head_stats || req.logit_rows.empty()) continue;
    const int64_t rows = int64_t(req.logit_rows.size());
    std::copy(logits + r * c.vocab, logits + (r + rows) * c.vocab, req.logits);
    r += rows;
  }
}

}  // namespace

void forward_batch(const Model& model, std::span<KvCache* const> caches, std::span<const ForwardRequest> requests,
                   ThreadPool* pool) {
  const ForwardPlan plan = plan_forward(model, caches, requests);
  if (model.backend) {
    // Another device runs a batch of one kind whose encoder requests have caches of their own (it writes
    // every encoder request's K/V before any of them attends): another batch is split into such runs, in
    // order, which leaves the same K/V and logits (a decoder request reads only the cache rows earlier
    // requests wrote, no request reads a decoder's rows, and an encoder request sees the rows written to
    // its cache by the requests before it).
    auto joins = [&](size_t i, size_t begin) {
      if (requests[i].decoder != requests[begin].decoder) return false;
      if (requests[i].decoder) return true;
      return std::find(caches.begin() + std::ptrdiff_t(begin), caches.begin() + std::ptrdiff_t(i), caches[i]) ==
             caches.begin() + std::ptrdiff_t(i);
    };
    size_t begin = 0;
    for (size_t i = 1; i <= requests.size(); ++i) {
      if (i < requests.size() && joins(i, begin)) continue;
      if (begin == 0 && i == requests.size()) {
        model.backend->forward_batch(model, caches, requests, plan);
        return;
      }
      const auto part_caches = caches.subspan(begin, i - begin);
      const auto part = requests.subspan(begin, i - begin);
      model.backend->forward_batch(model, part_caches, part, plan_forward(model, part_caches, part));
      begin = i;
    }
    return;
  }
  // Keeps the pool's workers spinning between this pass's parallel loops instead of sleeping.
  const ThreadPool::Busy busy(pool);
  Pass p(model, caches, requests, plan, pool);
  embed(p);
  for (int64_t l = 0; l < model.config.n_layers; ++l) {
    attention_block(p, l);
    feed_forward(p, l);
  }
  head(p);
}

}  // namespace canvas
