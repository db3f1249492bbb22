// Weight binding and the transformer forward pass (one code path for every family and mode).
#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "io/gguf.h"
#include "ops/matmul.h"
#include "ops/ops.h"

namespace canvas {
namespace {

// Binds one tensor, checking its shape (ggml order) and that matmul/get_row can use its dtype.
TensorView bind(const GgufFile& file, const std::string& name, std::vector<int64_t> shape, bool required = true) {
  const TensorView* t = file.find_tensor(name);
  if (!t) {
    check(!required, file.path() + ": missing tensor '" + name + "'");
    return TensorView{};
  }
  bool ok = t->n_dims == int(shape.size()) || (t->n_dims < int(shape.size()) && shape.back() == 1);
  for (size_t i = 0; i < shape.size() && ok; ++i) ok = t->ne[i] == shape[i];
  if (!ok) {
    std::string want = "[";
    for (size_t i = 0; i < shape.size(); ++i) want += (i ? ", " : "") + std::to_string(shape[i]);
    throw Error(file.path() + ": tensor '" + name + "' has shape " + t->shape_string() + ", expected " + want + "]");
  }
  if (shape.size() > 1 || t->type != DType::F32) {
    check(matmul_supports(t->type),
          file.path() + ": tensor '" + name + "' has unsupported dtype " + dtype_name(t->type));
  }
  return *t;
}

TensorView bind_vector(const GgufFile& file, const std::string& name, int64_t n, bool required = true) {
  TensorView t = bind(file, name, {n}, required);
  if (t.data) check(t.type == DType::F32, file.path() + ": tensor '" + name + "' must be f32, is " + dtype_name(t.type));
  return t;
}

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
  matmul(gate, x, n, g.data(), pool);
  matmul(up, x, n, u.data(), pool);
  if (act == Activation::Silu) {
    swiglu(g.data(), u.data(), n * width, g.data());
  } else {
    geglu(g.data(), u.data(), n * width, g.data());
  }
  matmul(down, g.data(), n, out, pool);
}

// Mixture of experts: each row goes to its top-k experts; rows are grouped by expert so every expert's
// weights are read once per pass. A row's sum is taken in ascending expert order, so it does not
// depend on which other rows share the batch.
void moe(const ModelConfig& c, const LayerWeights& w, const float* x, int64_t n, float* out, ThreadPool* pool) {
  const int64_t E = c.n_experts, K = c.n_experts_used, H = c.hidden;
  std::vector<float> router_logits(size_t(n * E));
  matmul(w.router, x, n, router_logits.data(), pool);
  std::vector<std::vector<int32_t>> rows_of(static_cast<size_t>(E));
  std::vector<std::vector<float>> weights_of(static_cast<size_t>(E));
  std::vector<float> probs(static_cast<size_t>(E));
  for (int64_t r = 0; r < n; ++r) {
    softmax(router_logits.data() + r * E, E, probs.data());
    std::vector<int32_t> top = top_k(probs.data(), E, K);
    float total = 0;
    for (int32_t e : top) total += probs[size_t(e)];
    for (int32_t e : top) {
      rows_of[size_t(e)].push_back(int32_t(r));
      weights_of[size_t(e)].push_back(c.expert_weights_norm ? probs[size_t(e)] / total : probs[size_t(e)]);
    }
  }
  std::fill(out, out + n * H, 0.f);
  std::vector<float> gathered, result, g, u;
  for (int64_t e = 0; e < E; ++e) {
    const auto& rows = rows_of[size_t(e)];
    if (rows.empty()) continue;
    const int64_t m = int64_t(rows.size());
    gathered.resize(size_t(m * H));
    result.resize(size_t(m * H));
    for (int64_t i = 0; i < m; ++i) std::memcpy(&gathered[size_t(i * H)], x + rows[size_t(i)] * H, size_t(H) * 4);
    gated_mlp(w.gate_exps.matrix(e), w.up_exps.matrix(e), w.down_exps.matrix(e), c.activation, gathered.data(), m,
              result.data(), g, u, pool);
    for (int64_t i = 0; i < m; ++i) {
      float* dst = out + rows[size_t(i)] * H;
      const float weight = weights_of[size_t(e)][size_t(i)];
      for (int64_t j = 0; j < H; ++j) dst[j] += weight * result[size_t(i * H + j)];
    }
  }
}

}  // namespace

Model Model::load(const std::string& path) {
  Model m;
  m.file = GgufFile::open(path);
  const GgufFile& f = *m.file;
  ModelConfig& c = m.config;
  c = config_from_gguf(f);
  const TensorView* embd = f.find_tensor("token_embd.weight");
  check(embd != nullptr, path + ": missing tensor 'token_embd.weight'");
  c.vocab = embd->ne[1];
  const int64_t H = c.hidden, D = c.head_dim;
  m.token_embd = bind(f, "token_embd.weight", {H, c.vocab});
  m.output_norm = bind_vector(f, "output_norm.weight", H);
  m.output = bind(f, "output.weight", {H, c.vocab}, false);
  c.tied_output = m.output.data == nullptr;
  if (c.tied_output) m.output = m.token_embd;
  if (const TensorView* pe = f.find_tensor("position_embd.weight")) {
    m.position_embd = bind(f, "position_embd.weight", {H, pe->ne[1]});
    check(m.position_embd.type == DType::F32, path + ": tensor 'position_embd.weight' must be f32");
    c.n_positions = pe->ne[1];
    c.context_length = std::min(c.context_length, pe->ne[1]);
  }
  c.qkv_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    LayerWeights w;
    w.attn_norm = bind_vector(f, b + "attn_norm.weight", H);
    w.wq = bind(f, b + "attn_q.weight", {H, c.n_heads * D});
    w.wk = bind(f, b + "attn_k.weight", {H, c.n_kv_heads * D});
    w.wv = bind(f, b + "attn_v.weight", {H, c.n_kv_heads * D});
    w.wo = bind(f, b + "attn_output.weight", {c.n_heads * D, H});
    w.bq = bind_vector(f, b + "attn_q.bias", c.n_heads * D, c.qkv_bias);
    w.bk = bind_vector(f, b + "attn_k.bias", c.n_kv_heads * D, c.qkv_bias);
    w.bv = bind_vector(f, b + "attn_v.bias", c.n_kv_heads * D, c.qkv_bias);
    w.ffn_norm = bind_vector(f, b + "ffn_norm.weight", H);
    if (c.is_moe()) {
      w.router = bind(f, b + "ffn_gate_inp.weight", {H, c.n_experts});
      w.gate_exps = bind(f, b + "ffn_gate_exps.weight", {H, c.expert_ffn, c.n_experts});
      w.up_exps = bind(f, b + "ffn_up_exps.weight", {H, c.expert_ffn, c.n_experts});
      w.down_exps = bind(f, b + "ffn_down_exps.weight", {c.expert_ffn, H, c.n_experts});
    } else {
      w.gate = bind(f, b + "ffn_gate.weight", {H, c.ffn});
      w.up = bind(f, b + "ffn_up.weight", {H, c.ffn});
      w.down = bind(f, b + "ffn_down.weight", {c.ffn, H});
    }
    m.layers.push_back(w);
  }
  return m;
}

int64_t Model::parameter_count() const {
  int64_t total = 0;
  for (const TensorView& t : file->tensors()) total += t.elements();
  return total;
}

int64_t Model::weight_bytes() const {
  int64_t total = 0;
  for (const TensorView& t : file->tensors()) total += t.bytes();
  return total;
}

void forward(const Model& model, KvCache& cache, const ForwardRequest& req, ThreadPool* pool) {
  const ModelConfig& c = model.config;
  const int64_t n = req.n, H = c.hidden, D = c.head_dim;
  const int64_t q_width = c.n_heads * D, kv_width = c.n_kv_heads * D;
  const int64_t key_end = req.key_end > 0 ? req.key_end : req.pos0 + n;
  check(n > 0, "forward: no tokens");
  check(req.pos0 >= 0 && req.pos0 + n <= key_end && key_end <= cache.capacity(),
        "forward: positions " + std::to_string(req.pos0) + ".." + std::to_string(req.pos0 + n) + " (keys to " +
            std::to_string(key_end) + ") exceed the KV cache capacity " + std::to_string(cache.capacity()));
  for (int64_t i = 0; i < n; ++i)
    check(req.tokens[i] >= 0 && req.tokens[i] < c.vocab,
          "token id " + std::to_string(req.tokens[i]) + " is outside the vocabulary (size " + std::to_string(c.vocab) + ")");

  std::vector<float> x(size_t(n * H)), h(size_t(n * H)), q(size_t(n * q_width)), k(size_t(n * kv_width)),
      v(size_t(n * kv_width)), attn(size_t(n * q_width)), proj(size_t(n * H)), g, u;
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    pos[size_t(i)] = int32_t(req.pos0 + i);
    get_row(model.token_embd, req.tokens[i], &x[size_t(i * H)]);
    if (c.embedding_scale != 1.f)
      for (int64_t j = 0; j < H; ++j) x[size_t(i * H + j)] *= c.embedding_scale;
    if (model.position_embd.data) {
      check(req.pos0 + i < model.position_embd.ne[1], "position " + std::to_string(req.pos0 + i) +
                                                           " is beyond the model's position embeddings (" +
                                                           std::to_string(model.position_embd.ne[1]) + ")");
      const float* pe = model.position_embd.f32() + (req.pos0 + i) * H;
      for (int64_t j = 0; j < H; ++j) x[size_t(i * H + j)] += pe[j];
    }
  }
  int32_t* groups = cache.groups();
  for (int64_t i = 0; i < n; ++i) groups[req.pos0 + i] = req.groups[i];

  AttentionShape shape;
  shape.n_heads = int(c.n_heads);
  shape.n_kv_heads = int(c.n_kv_heads);
  shape.head_dim = int(D);
  shape.scale = 1.f / std::sqrt(float(D));
  AttentionMask mask;
  mask.key_group = groups;
  mask.query_group = req.groups;

  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = model.layers[size_t(l)];
    rms_norm_rows(x.data(), n, H, w.attn_norm, c.rms_eps, h.data());
    matmul(w.wq, h.data(), n, q.data(), pool);
    matmul(w.wk, h.data(), n, k.data(), pool);
    matmul(w.wv, h.data(), n, v.data(), pool);
    add_bias(q.data(), n, q_width, w.bq);
    add_bias(k.data(), n, kv_width, w.bk);
    add_bias(v.data(), n, kv_width, w.bv);
    rope(q.data(), n, int(c.n_heads), pos.data(), c.rope);
    rope(k.data(), n, int(c.n_kv_heads), pos.data(), c.rope);
    float* kc = cache.keys(l);
    float* vc = cache.values(l);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t hh = 0; hh < c.n_kv_heads; ++hh) {
        const int64_t dst = hh * cache.head_stride() + (req.pos0 + i) * D;
        std::memcpy(kc + dst, &k[size_t(i * kv_width + hh * D)], size_t(D) * 4);
        std::memcpy(vc + dst, &v[size_t(i * kv_width + hh * D)], size_t(D) * 4);
      }
    attention(q.data(), n, q_width, kc, vc, key_end, cache.head_stride(), mask, shape, attn.data(), q_width, pool);
    matmul(w.wo, attn.data(), n, proj.data(), pool);
    for (int64_t i = 0; i < n * H; ++i) x[size_t(i)] += proj[size_t(i)];

    rms_norm_rows(x.data(), n, H, w.ffn_norm, c.rms_eps, h.data());
    if (c.is_moe()) {
      moe(c, w, h.data(), n, proj.data(), pool);
    } else {
      gated_mlp(w.gate, w.up, w.down, c.activation, h.data(), n, proj.data(), g, u, pool);
    }
    for (int64_t i = 0; i < n * H; ++i) x[size_t(i)] += proj[size_t(i)];
  }

  const int64_t rows = int64_t(req.logit_rows.size());
  if (rows == 0) return;
  check(req.logits != nullptr, "forward: logit rows requested without an output buffer");
  std::vector<float> selected(size_t(rows * H));
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t row = req.logit_rows[size_t(r)];
    check(row >= 0 && row < n, "forward: logit row out of range");
    rms_norm(&x[size_t(row * H)], model.output_norm.f32(), H, c.rms_eps, &selected[size_t(r * H)]);
  }
  matmul(model.output, selected.data(), rows, req.logits, pool);
  if (c.logit_softcap > 0) {
    const float cap = c.logit_softcap;
    for (int64_t i = 0; i < rows * c.vocab; ++i) req.logits[i] = cap * std::tanh(req.logits[i] / cap);
  }
}

}  // namespace canvas
