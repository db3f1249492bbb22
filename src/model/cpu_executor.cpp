// model/cpu_executor.h: the primitives of model/transformer.h on this CPU's kernels, and the pieces of the
// CPU pass behind them (the experts, the self-conditioning input's soft embedding, attention over each
// request's cache or canvas).
#include "model/cpu_executor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"
#include "ops/lm_head.h"
#include "ops/matmul.h"
#include "ops/ops.h"
#include "ops/table_product.h"

namespace canvas {
namespace {

void add_bias(float* rows, int64_t n, int64_t width, const TensorView& bias) {
  if (!bias.data) return;
  const float* b = bias.f32();
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < width; ++i) rows[r * width + i] += b[i];
}

void rms_norm_rows(const CpuKernels& k, const float* x, int64_t n, int64_t width, const TensorView& w, float eps,
                   float* y) {
  const float* weight = w.data ? w.f32() : nullptr;
  for (int64_t r = 0; r < n; ++r) k.rms_norm(x + r * width, weight, width, eps, y + r * width);
}

// g = act(g) * u.
void gate(const CpuKernels& k, Activation act, float* g, const float* u, int64_t n) {
  (act == Activation::Silu ? k.swiglu : k.geglu)(g, u, n, g);
}

// Gated MLP over rows: out = down(act(gate(x)) * up(x)).
void gated_mlp(const CpuKernels& k, const TensorView& gate_w, const TensorView& up, const TensorView& down,
               Activation act, const float* x, int64_t n, float* out, std::vector<float>& g, std::vector<float>& u,
               ThreadPool* pool) {
  const int64_t width = gate_w.rows();
  g.resize(size_t(n * width));
  u.resize(size_t(n * width));
  const MatmulTarget gate_up[] = {{&gate_w, g.data(), width}, {&up, u.data(), up.rows()}};
  k.matmul_fused(gate_up, 2, x, gate_w.cols(), n, pool);  // one parallel loop for both
  gate(k, act, g.data(), u.data(), n * width);
  k.matmul(down, g.data(), n, out, pool);
}

// One expert's MLP over m gathered rows; a fused [gate; up] matrix (Gemma 4) is split after one product.
void expert_mlp(const CpuKernels& k, const ModelConfig& c, const LayerWeights& w, int64_t e, const float* x,
                int64_t m, float* out, std::vector<float>& g, std::vector<float>& u, std::vector<float>& gu,
                ThreadPool* pool) {
  if (!w.gate_up_exps.data) {
    gated_mlp(k, w.gate_exps.matrix(e), w.up_exps.matrix(e), w.down_exps.matrix(e), c.activation, x, m, out, g, u,
              pool);
    return;
  }
  const int64_t I = c.expert_ffn;
  gu.resize(size_t(m * 2 * I));
  g.resize(size_t(m * I));
  u.resize(size_t(m * I));
  k.matmul(w.gate_up_exps.matrix(e), x, m, gu.data(), pool);
  for (int64_t r = 0; r < m; ++r) {
    std::memcpy(&g[size_t(r * I)], &gu[size_t(r * 2 * I)], size_t(I) * 4);
    std::memcpy(&u[size_t(r * I)], &gu[size_t(r * 2 * I + I)], size_t(I) * 4);
  }
  gate(k, c.activation, g.data(), u.data(), m * I);
  k.matmul(w.down_exps.matrix(e), g.data(), m, out, pool);
}

// Mixture of experts: each row goes to its top-k experts; rows are grouped by expert so every expert's
// weights are read once per pass. A row's sum is taken in ascending expert order, so it does not
// depend on which other rows share the batch. The router reads router_in, the experts expert_in
// (the same rows except in Gemma 4, whose router and experts see differently normed inputs).
void moe(const CpuKernels& k, const ModelConfig& c, const LayerWeights& w, const float* router_in,
         const float* expert_in, int64_t n, float* out, ThreadPool* pool) {
  const int64_t E = c.n_experts, K = c.n_experts_used, H = c.hidden;
  std::vector<float> router_logits(size_t(n * E));
  k.matmul(w.router, router_in, n, router_logits.data(), pool);
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
    expert_mlp(k, c, w, e, gathered.data(), m, result.data(), g, u, gu, pool);
    for (int64_t i = 0; i < m; ++i) {
      float* dst = out + rows[size_t(i)] * H;
      const float weight = weights_of[size_t(e)][size_t(i)];
      for (int64_t j = 0; j < H; ++j) dst[j] += weight * result[size_t(i * H + j)];
    }
  }
}

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
  model.embedding_int8_columns.reset();
  model.embedding_columns_of = nullptr;
  const int64_t H = c.hidden, V = c.vocab;
  if (!(c.has_decoder || c.self_conditioning) || !model.token_embd.data || H <= 0 || V <= 0) return;
  if (V * H * int64_t(sizeof(float)) > kMaxEmbeddingColumnsBytes) {
    if (dtype_info(model.token_embd.type).block_size == 1) return;  // f32 / f16 / bf16: exact product
    model.embedding_int8_columns = make_int8_table_columns(model.token_embd, pool);
    model.embedding_columns_of = model.token_embd.data;
    return;
  }
  auto columns = std::make_shared<std::vector<float>>(size_t(V * H));
  transpose_embedding_rows(model, 0, V, columns->data(), V, pool);
  model.embedding_columns = std::move(columns);
  model.embedding_columns_of = model.token_embd.data;
}

namespace {

// softmax(prev_logits) @ E for n rows into soft [n x hidden]. With model.embedding_columns (E transposed to
// f32 [H x V], made at load for small vocabularies) it is softmax row by row and one matmul per chunk of
// rows. With model.embedding_int8_columns (a quantised table of a large vocabulary) it is the int8 product
// of ops' soft_embedding_int8. Otherwise ops' soft_embedding multiplies the probabilities, made a tile of vocabulary rows at a
// time, with E's rows as stored: E streams through memory once per pass, nothing of its size is rebuilt
// and no [n, vocab] probability array is stored. Both are bitwise the same at every thread count.
void soft_embedding_of_logits(const Model& model, const float* prev_logits, int64_t n, float* soft,
                              ThreadPool* pool) {
  const ModelConfig& c = model.config;
  const int64_t H = c.hidden, V = c.vocab;
  const bool current = model.embedding_columns_of == model.token_embd.data;
  if (current && model.embedding_int8_columns) {
    soft_embedding_int8(*model.embedding_int8_columns, prev_logits, n, soft, pool);
    return;
  }
  if (!model.embedding_columns || !current) {
    soft_embedding(model.token_embd, prev_logits, n, soft, pool);
    return;
  }
  TensorView w;  // the f32 [H x V] columns as a matmul weight
  w.type = DType::F32;
  w.data = model.embedding_columns->data();
  w.n_dims = 2;
  w.ne[0] = V;
  w.ne[1] = H;
  const int64_t chunk = std::max<int64_t>(1, (int64_t(1) << 22) / V);  // <= 16 MiB of probabilities
  std::vector<float> probs(size_t(std::min(n, chunk) * V));
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t rows = std::min(chunk, n - r0);
    parallel_for(pool, rows, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) softmax(prev_logits + (r0 + i) * V, V, &probs[size_t(i * V)]);
    });
    matmul(w, probs.data(), V, rows, soft + r0 * H, H, pool);
  }
}

}  // namespace

const CpuKernels kFastKernels = {rms_norm, rope, swiglu, geglu, softcap, matmul, matmul_fused, attention};

const CpuKernels kReferenceKernels = {
    reference::rms_norm,
    reference::rope,
    reference::swiglu,
    reference::geglu,
    reference::softcap,
    [](const TensorView& w, const float* x, int64_t m, float* y, ThreadPool*) {
      matmul_reference(w, x, w.cols(), m, y, w.rows());
    },
    [](const MatmulTarget* targets, int count, const float* x, int64_t ldx, int64_t m, ThreadPool*) {
      for (const MatmulTarget* t = targets; t < targets + count; ++t) matmul_reference(*t->w, x, ldx, m, t->y, t->ldy);
    },
    [](const float* q, int64_t n_q, int64_t ldq, const float* k, const float* v, int64_t n_keys,
       int64_t kv_head_stride, const AttentionMask& mask, const AttentionShape& shape, float* out, int64_t ldo,
       ThreadPool*) { reference::attention(q, n_q, ldq, k, v, n_keys, kv_head_stride, mask, shape, out, ldo); },
};

CpuExecutor::CpuExecutor(const Model& m, std::span<KvCache* const> cs, std::span<const ForwardRequest> rs,
                         const ForwardPlan& p, ThreadPool* tp, const CpuKernels& kernels)
    : model_(m), c_(m.config), caches_(cs), requests_(rs), plan_(p), pool_(tp), k_(kernels), n_(p.n) {}

void CpuExecutor::read_slot(Slot s, std::vector<float>& data, int64_t& rows, int64_t& width) {
  const SlotBuffer& b = at(s);
  rows = b.rows;
  width = b.width;
  data.assign(b.ptr(), b.ptr() + b.size());
}

void CpuExecutor::write_slot(Slot s, const float* data, int64_t rows, int64_t width) {
  std::copy(data, data + rows * width, at(s).shape(rows, width));
}

const TensorView& CpuExecutor::view(WeightRef w) const {
  static const TensorView none;
  if (!w.present()) return none;
  const TensorView* v = weight_slot(model_, w.role, w.layer);
  return v ? *v : none;
}

void CpuExecutor::norm_rows(const float* x, int64_t n, int64_t width, const TensorView& w, float* y) const {
  rms_norm_rows(k_, x, n, width, w, c_.rms_eps, y);
}

void CpuExecutor::rms_norm(Slot out, Slot in, WeightRef weight) {
  const SlotBuffer& a = at(in);
  const int64_t rows = a.rows, width = a.width;
  const float* src = a.ptr();
  norm_rows(src, rows, width, view(weight), at(out).shape(rows, width));
}

void CpuExecutor::rms_norm_heads(Slot x, int64_t head_dim, WeightRef weight) {
  SlotBuffer& b = at(x);
  norm_rows(b.ptr(), b.size() / head_dim, head_dim, view(weight), b.ptr());
}

void CpuExecutor::copy(Slot out, Slot in) {
  const SlotBuffer& a = at(in);
  write_slot(out, a.ptr(), a.rows, a.width);
}

void CpuExecutor::add(Slot x, Slot y) {
  float* dst = at(x).ptr();
  const float* src = at(y).ptr();
  for (int64_t i = 0, size = at(x).size(); i < size; ++i) dst[i] += src[i];
}

void CpuExecutor::add_bias(Slot x, WeightRef bias) {
  SlotBuffer& b = at(x);
  canvas::add_bias(b.ptr(), b.rows, b.width, view(bias));
}

void CpuExecutor::gated_activation(Slot g, Slot u) {
  SlotBuffer& gate_values = at(g);
  gate(k_, c_.activation, gate_values.ptr(), at(u).ptr(), gate_values.size());
}

void CpuExecutor::rope(Slot x, int64_t n_heads, int64_t layer) {
  const RopeParams& params = c_.attention_of(layer).rope;
  k_.rope(at(x).ptr(), n_, int(n_heads), plan_.pos.data(), params);
}

void CpuExecutor::attention(Slot out, Slot q, Slot k, Slot v, int64_t layer) {
  at(out).shape(n_, at(q).width);
  for (int64_t s = 0; s < segments(); ++s) attend(layer, s, at(q), at(k), at(v), at(out));
}

void CpuExecutor::moe(Slot out, Slot router_in, Slot expert_in, int64_t layer) {
  const float* router = at(router_in).ptr();
  const float* experts = at(expert_in).ptr();
  canvas::moe(k_, c_, model_.layers[size_t(layer)], router, experts, n_, at(out).shape(n_, c_.hidden), pool_);
}

// Token embeddings (scaled) and learned positions; each encoder row's group recorded in its cache.
void CpuExecutor::embed(Slot slot) {
  const int64_t H = c_.hidden;
  float* x = at(slot).shape(n_, H);
  for (int64_t s = 0; s < segments(); ++s) {
    const ForwardRequest& req = requests_[size_t(s)];
    for (int64_t i = 0; i < req.n; ++i) {
      const int64_t r = row0(s) + i;
      float* row = x + r * H;
      get_row(model_.token_embd, req.tokens[i], row);
      if (c_.embedding_scale != 1.f)
        for (int64_t j = 0; j < H; ++j) row[j] *= c_.embedding_scale;
      if (model_.position_embd.data) {
        const int32_t position = plan_.pos[size_t(r)];
        check(position < model_.position_embd.ne[1], "position " + std::to_string(position) +
                                                         " is beyond the model's position embeddings (" +
                                                         std::to_string(model_.position_embd.ne[1]) + ")");
        const float* pe = model_.position_embd.f32() + int64_t(position) * H;
        for (int64_t j = 0; j < H; ++j) row[j] += pe[j];
      }
    }
    if (!req.decoder) {
      int32_t* groups = caches_[size_t(s)]->groups();
      for (int64_t i = 0; i < req.n; ++i) groups[plan_.slot(row0(s) + i)] = req.groups[i];
    }
  }
}

// Each request with previous logits (self_cond) or their soft embedding (self_cond_soft).
void CpuExecutor::self_conditioning_input(Slot slot) {
  const int64_t H = c_.hidden, rows = plan_.conditioned_rows;
  float* soft = at(slot).shape(rows, H);
  for (int64_t s : plan_.conditioned) {
    const ForwardRequest& req = requests_[size_t(s)];
    if (req.self_cond) {
      soft_embedding_of_logits(model_, req.self_cond, req.n, soft, pool_);
    } else {
      std::copy(req.self_cond_soft, req.self_cond_soft + req.n * H, soft);
    }
    soft += req.n * H;
  }
  float* all = at(slot).ptr();
  for (int64_t i = 0; i < rows * H; ++i) all[i] *= c_.embedding_scale;
}

void CpuExecutor::add_self_conditioning(Slot slot, Slot mlp_slot) {
  const int64_t H = c_.hidden;
  float* x = at(slot).ptr();
  const float* mlp = at(mlp_slot).ptr();
  for (int64_t s : plan_.conditioned) {
    float* rows = x + row0(s) * H;
    const int64_t size = requests_[size_t(s)].n * H;
    for (int64_t i = 0; i < size; ++i) rows[i] += mlp[i];
    mlp += size;
  }
}

void CpuExecutor::decoder_norm(Slot slot) {
  const int64_t H = c_.hidden;
  float* x = at(slot).ptr();
  for (int64_t s = 0; s < segments(); ++s)
    if (requests_[size_t(s)].decoder) {
      float* rows = x + row0(s) * H;
      norm_rows(rows, requests_[size_t(s)].n, H, TensorView{}, rows);
    }
}

void CpuExecutor::matmul(std::span<const Product> products, Slot in) {
  const SlotBuffer& a = at(in);
  const int64_t rows = a.rows;
  if (products.size() == 1) {
    const TensorView& w = view(products[0].weight);
    k_.matmul(w, a.ptr(), rows, at(products[0].out).shape(rows, w.rows()), pool_);
    return;
  }
  // One parallel loop for all of them (a decode step is a chain of short loops; each wait costs).
  std::array<MatmulTarget, 3> targets;
  check(products.size() <= targets.size(), "forward: more than 3 fused products");
  for (size_t i = 0; i < products.size(); ++i) {
    const TensorView& w = view(products[i].weight);
    targets[i] = {&w, at(products[i].out).shape(rows, w.rows()), w.rows()};
  }
  k_.matmul_fused(targets.data(), int(products.size()), a.data.data(), a.width, rows, pool_);
}

void CpuExecutor::router_input(Slot out, Slot in, int64_t layer) {
  const int64_t H = c_.hidden;
  float* router = at(out).shape(n_, H);
  norm_rows(at(in).ptr(), n_, H, TensorView{}, router);
  if (!c_.router_norm) return;
  const float* scale = model_.layers[size_t(layer)].router_scale.f32();
  const float inv_sqrt_hidden = 1.f / std::sqrt(float(H));
  for (int64_t r = 0; r < n_; ++r)
    for (int64_t j = 0; j < H; ++j) router[r * H + j] *= scale[j] * inv_sqrt_hidden;
}

void CpuExecutor::scaled_residual(Slot slot, Slot y, int64_t layer) {
  const int64_t H = c_.hidden;
  const LayerWeights& w = model_.layers[size_t(layer)];
  row_scalar_.resize(size_t(n_));
  for (int64_t s = 0; s < segments(); ++s)
    std::fill(row_scalar_.begin() + row0(s), row_scalar_.begin() + row0(s + 1),
              requests_[size_t(s)].decoder ? w.layer_scalar_decoder : w.layer_scalar_encoder);
  float* x = at(slot).ptr();
  const float* proj = at(y).ptr();
  for (int64_t r = 0; r < n_; ++r)
    for (int64_t j = r * H; j < (r + 1) * H; ++j) x[j] = (x[j] + proj[j]) * row_scalar_[size_t(r)];
}

// The plan's Head rows (ForwardPlan::head_rows: plain logits first, then the fused head's).
void CpuExecutor::head_rows(Slot head, Slot slot) {
  const int64_t H = c_.hidden, rows = int64_t(plan_.head_rows.size());
  const float* x = at(slot).ptr();
  float* out = at(head).shape(rows, H);
  for (int64_t i = 0; i < rows; ++i) std::copy_n(x + int64_t(plan_.head_rows[size_t(i)]) * H, H, out + i * H);
}

// The plain logit rows of every request in one matmul (soft-capped); fused-head requests one by one (each
// has its own temperature and noise).
void CpuExecutor::logits(Slot head, WeightRef weight) {
  const int64_t H = c_.hidden, V = c_.vocab;
  const TensorView& output = view(weight);
  const float* rows_in = at(head).ptr();
  for (int64_t s = 0; s < segments(); ++s) {
    const ForwardRequest& req = requests_[size_t(s)];
    const int64_t rows = int64_t(req.logit_rows.size());
    if (!req.head_stats || rows == 0) continue;
    // The soft embedding is softmax @ output; it is the self-conditioning's softmax @ E only when tied.
    check(!req.soft_embedding_out ||
              (output.data == model_.token_embd.data && output.type == model_.token_embd.type),
          "forward: a soft embedding output needs a head tied to the token embedding; '" + c_.arch +
              "' has its own output matrix");
    HeadStreamOptions options = req.head;
    options.softcap = std::max(c_.logit_softcap, 0.f);
    lm_head_stream(output, rows_in + plan_.head_row0[size_t(s)] * H, rows, H, options, req.head_stats,
                   req.soft_embedding_out, pool_);
  }
  if (plan_.plain_head_rows == 0) return;
  // One request writes its own buffer directly; a batch goes through one array and is scattered.
  const bool direct = segments() == 1;
  std::vector<float> batch_logits;
  if (!direct) batch_logits.resize(size_t(plan_.plain_head_rows * V));
  float* logits = direct ? requests_[0].logits : batch_logits.data();
  k_.matmul(output, rows_in, plan_.plain_head_rows, logits, pool_);
  if (c_.logit_softcap > 0) {
    const float cap = c_.logit_softcap;
    parallel_for(pool_, plan_.plain_head_rows, std::max<int64_t>(1, 16384 / V), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) k_.softcap(logits + i * V, V, cap);
    });
  }
  if (direct) return;
  for (int64_t s = 0; s < segments(); ++s) {
    const ForwardRequest& req = requests_[size_t(s)];
    if (req.head_stats || req.logit_rows.empty()) continue;
    const int64_t r = plan_.head_row0[size_t(s)], rows = int64_t(req.logit_rows.size());
    std::copy(logits + r * V, logits + (r + rows) * V, req.logits);
  }
}

void CpuExecutor::attend(int64_t l, int64_t s, const SlotBuffer& q, const SlotBuffer& k, const SlotBuffer& v, SlotBuffer& attn) {
  const ModelConfig& c = c_;
  const LayerAttention la = c.attention_of(l);
  const int64_t D = la.head_dim, q_width = c.n_heads * D, kv_width = la.n_kv_heads * D;
  const bool sliding = la.kind == AttentionKind::Sliding;
  const AttentionShape shape = attention_shape(c, la);
  const ForwardRequest& req = requests_[size_t(s)];
  KvCache& cache = *caches_[size_t(s)];
  const int64_t r0 = plan_.row0[size_t(s)], ns = req.n;
  const float* qs = q.data.data() + r0 * q_width;
  const float* ks_new = k.data.data() + r0 * kv_width;
  const float* vs_new = v.data.data() + r0 * kv_width;
  float* out = attn.data.data() + r0 * q_width;
  float* kc = cache.keys(l);
  float* vc = cache.values(l);
  const int64_t stride = cache.head_stride(l);
  if (!req.decoder) {
    for (int64_t i = 0; i < ns; ++i)
      for (int64_t hh = 0; hh < la.n_kv_heads; ++hh) {
        const int64_t dst = hh * stride + int64_t(plan_.slot(r0 + i)) * D;
        std::memcpy(kc + dst, &ks_new[size_t(i * kv_width + hh * D)], size_t(D) * 4);
        std::memcpy(vc + dst, &vs_new[size_t(i * kv_width + hh * D)], size_t(D) * 4);
      }
    AttentionMask mask;
    mask.key_group = cache.groups();
    mask.query_group = req.groups;
    if (sliding) mask.window_start = plan_.window_start.data() + r0;
    if (req.tree_parents) {  // each row sees itself and its ancestors (windowed on sliding layers)
      mask.tree = plan_.tree_bits_of(r0, la.kind);
      mask.tree_key0 = req.pos0;
    }
    k_.attention(qs, ns, q_width, kc, vc, plan_.key_ends[size_t(s)], stride, mask, shape, out, q_width, pool_);
    return;
  }
  // The canvas sees the cache (sliding layers: its last window - 1 positions) and itself, both ways;
  // its own K/V go to scratch (or to the kept canvas K/V) so the cache stays as the encoder left it.
  const int64_t first = plan_.first_key_of(s, la.kind);
  KvCache* kept = req.canvas_kv;
  const int64_t canvas_rows = plan_.canvas_keys[size_t(s)];
  const int64_t cached = plan_.key_ends[size_t(s)] - first, keys = cached + canvas_rows;
  if (kept)
    for (int64_t i = 0; i < ns; ++i) {
      const int64_t row = req.canvas_rows ? req.canvas_rows[i] : i;
      for (int64_t hh = 0; hh < la.n_kv_heads; ++hh) {
        const int64_t dst = hh * kept->head_stride(l) + row * D;
        std::memcpy(kept->keys(l) + dst, &ks_new[size_t(i * kv_width + hh * D)], size_t(D) * 4);
        std::memcpy(kept->values(l) + dst, &vs_new[size_t(i * kv_width + hh * D)], size_t(D) * 4);
      }
    }
  canvas_keys_.resize(size_t(la.n_kv_heads * keys * D));
  canvas_values_.resize(size_t(la.n_kv_heads * keys * D));
  for (int64_t hh = 0; hh < la.n_kv_heads; ++hh) {
    float* ks = &canvas_keys_[size_t(hh * keys * D)];
    float* vs = &canvas_values_[size_t(hh * keys * D)];
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
  k_.attention(qs, ns, q_width, canvas_keys_.data(), canvas_values_.data(), keys, keys * D, AttentionMask{}, shape,
               out, q_width, pool_);
}

}  // namespace canvas
