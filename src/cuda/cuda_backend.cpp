// The CUDA forward pass: model/forward.cpp's forward_batch stage for stage (embed, attention_block,
// feed_forward, head), on device buffers. Each step is the kernel twin of the CPU op it replaces (tests/cuda_test.cpp compares whole forwards with the CPU's).
#include "cuda/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.h"
#include "cuda/cuda_ops.h"
#include "model/kv_cache.h"
#include "ops/ops.h"

namespace canvas::cuda {
namespace {

// An f32 vector (norm weight, bias, scale) on the device; empty when the model has none.
DeviceBuffer upload_vector(const TensorView& v) {
  if (!v.data) return {};
  check(v.type == DType::F32, "cuda: vector '" + v.name + "' is not f32");
  DeviceBuffer b(size_t(v.elements()) * 4);
  b.upload(v.data, size_t(v.elements()) * 4);
  return b;
}
const float* ptr(const DeviceBuffer& b) { return b.bytes() ? b.as<float>() : nullptr; }
DeviceMatrix upload_matrix(const TensorView& w) { return w.data ? DeviceMatrix::upload(w) : DeviceMatrix{}; }
struct DeviceLayer {
  DeviceMatrix wq, wk, wv, wo, gate, up, down, router;
  DeviceBuffer attn_norm, ffn_norm, bq, bk, bv, q_norm, k_norm, post_attn_norm, post_ffn_norm, post_ffn_norm_1,
      pre_ffn_norm_2, post_ffn_norm_2, router_scale, per_expert_scale;
  // Each expert projection as one stack [n_experts * rows x cols], for matmul_grouped.
  DeviceMatrix gate_exps, up_exps, down_exps, gate_up_exps;
};

// A KvCache's device copy: per layer K and V in the host cache's layout, and the visibility groups.
struct DeviceCache {
  std::vector<DeviceBuffer> k, v;
  DeviceBuffer groups;
  uint64_t id = 0;  // unique in the process: recorded passes are keyed by it, not by an address
};

int64_t kv_layer_bytes(const ModelConfig& c, int64_t l, int64_t capacity, KvType type) {
  const LayerAttention a = c.attention_of(l);
  return a.n_kv_heads * capacity * a.head_dim * kv_element_bytes(type);
}

template <typename T> T* upload_into(DeviceBuffer& s, const T* host, int64_t n) {
  T* d = s.reserve<T>(n);
  copy_to_device(d, host, size_t(n) * sizeof(T));
  return d;
}

// One pass over a batch of requests (rows of all requests stacked, as model/forward.cpp's Pass), with the
// device activations its stages share.
struct DevicePass {
  const Model& model;
  const ModelConfig& c;
  std::span<KvCache* const> caches;
  std::span<const ForwardRequest> requests;
  const ForwardPlan& plan;
  int64_t n = 0;  // rows of the whole batch
  // x: the residual stream [n, hidden]; h: a normed copy; q, k, v, attn: one layer's attention activations
  // (sized for the widest layer); proj: a sublayer's output before it joins x.
  float *x = nullptr, *h = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *attn = nullptr, *proj = nullptr;
  const int32_t* pos = nullptr;           // each row's position
  const int32_t* qgroups = nullptr;       // each row's group (encoder rows; 0 for decoder rows)
  const int32_t* window_start = nullptr;  // sliding layers: the first key position each row sees
  const int32_t* tokens = nullptr;        // each row's token
  const int32_t* seg_of_row = nullptr;    // each row's request
  const AttentionSegment* segs = nullptr; // each layer's requests' keys: segs[l * segments() + s]
  const int32_t* sel_rows = nullptr;      // the rows each request wants logits of, all requests in turn
  const uint64_t* row_ids = nullptr;      // the fused head's noise ids of those rows (null: none given)
  std::vector<int64_t> sel_row0;          // each request's first entry in sel_rows / row_ids
  float* logits = nullptr;                // the head's logits
  // Outputs stay on the device until fetch (a recorded pass: every logits row has its own place);
  // otherwise each request's logits are copied out as soon as they exist, in one request-sized buffer.
  bool defer_outputs = false;
  std::vector<DeviceCache*> dcaches;      // each request's device cache

  DevicePass(const Model& m, std::span<KvCache* const> cs, std::span<const ForwardRequest> rs, const ForwardPlan& pl)
      : model(m), c(m.config), caches(cs), requests(rs), plan(pl), n(pl.n) {}
  int64_t segments() const { return int64_t(requests.size()); }
};

// The most logits rows one product of the head writes: every wanted row of the pass when the outputs stay
// on the device until fetch, else the larger of the largest request's rows and 256 (a batch of AR steps
// in one product, without a [rows x vocab] buffer for a whole batch of canvases).
int64_t head_rows(const DevicePass& p) {
  const int64_t total = p.sel_row0.back();
  if (p.defer_outputs) return total;
  int64_t largest = 0;
  for (size_t s = 0; s + 1 < p.sel_row0.size(); ++s) largest = std::max(largest, p.sel_row0[s + 1] - p.sel_row0[s]);
  return std::min(total, std::max<int64_t>(largest, 256));
}

class CudaBackend final : public ForwardBackend {
 public:
  explicit CudaBackend(const Model& model);
  std::string name() const override { return "cuda: " + device_description(); }
  void forward_batch(const Model& model, std::span<KvCache* const> caches, std::span<const ForwardRequest> requests,
                     const ForwardPlan& plan) override;

 private:
  DeviceCache& device_cache(const ModelConfig& c, KvCache& cache);
  // A pass in three steps: its inputs uploaded (stage), its kernels queued (compute: the stages of
  // model/forward.cpp, one to one), its outputs copied back (fetch). A small encoder pass (an AR step)
  // is recorded as a DeviceGraph the second time its shape is seen and replayed from then on.
  void stage(DevicePass& p);
  void compute(DevicePass& p);
  void fetch(DevicePass& p);
  std::vector<int64_t> graph_key(const DevicePass& p) const;
  bool run_recorded(DevicePass& p, const std::vector<int64_t>& key);
  void embed(DevicePass& p);
  void attend(DevicePass& p, int64_t l);
  void stage_attention(DevicePass& p);
  void attention_block(DevicePass& p, int64_t l);
  void feed_forward(DevicePass& p, int64_t l);
  void head(DevicePass& p);
  void gated_mlp(const DeviceMatrix& gate, const DeviceMatrix& up, const DeviceMatrix& down, bool gelu, const float* x,
                 int64_t n, float* out);
  void moe(const ModelConfig& c, const DeviceLayer& w, const float* router_in, const float* expert_in, int64_t n,
           float* out);
  void self_conditioning(const Model& model, const ForwardRequest& req, float* x, bool decoder_norm);
  void gemma_layer_rest(const ModelConfig& c, const DeviceLayer& w, float layer_scalar, int64_t n, float* x,
                        float* proj, float* h);

  DeviceMatrix token_embd_, output_, position_embd_;
  bool tied_ = false;
  DeviceBuffer output_norm_;
  DeviceMatrix sc_gate_, sc_up_, sc_down_;
  DeviceBuffer sc_norm_;
  std::vector<DeviceLayer> layers_;
  // The KV caches' element type: f32 for an f32 model (the CPU's arithmetic), f16 otherwise.
  KvType kv_type_ = KvType::F32;
  std::mutex mutex_;
  // Recorded passes by shape (graph_key), each with the allocation count it was recorded at.
  struct RecordedPass {
    DeviceGraph graph;
    uint64_t growths = 0;  // scratch_growths() after the shape's first, unrecorded, run
  };
  std::map<std::vector<int64_t>, RecordedPass> recorded_;
  bool graphs_ = true;  // false after a recording failed, or with CANVAS_CUDA_GRAPHS=0
  uint64_t next_cache_id_ = 1;
  // Per-pass buffers, reused.
  DeviceBuffer x_, h_, q_, k_, v_, attn_, proj_, g_, u_, pos_, tokens_, qgroups_, window_, sel_, sel_rows_,
      logits_, soft_, mlp_, stats_, row_ids_, seg_of_row_, segs_, router_in_, experts_out_, router_logits_, gathered_,
      expert_act_, expert_res_, expert_gu_, moe_expert_, moe_first_, moe_rows_, moe_begin_, moe_slot_,
      moe_weight_, prev_;
};

const DeviceMatrix& output_of(const DeviceMatrix& own, const DeviceMatrix& embd, bool tied) { return tied ? embd : own; }

CudaBackend::CudaBackend(const Model& model) {
  std::string why;
  if (!available(&why)) throw Error("--device cuda: " + why);  // why is set by the call
  token_embd_ = DeviceMatrix::upload(model.token_embd);
  tied_ = model.output.data == model.token_embd.data && model.output.type == model.token_embd.type;
  if (!tied_) output_ = DeviceMatrix::upload(model.output);
  output_norm_ = upload_vector(model.output_norm);
  position_embd_ = upload_matrix(model.position_embd);
  const SelfConditioningWeights& sc = model.self_conditioning;
  sc_gate_ = upload_matrix(sc.gate);
  sc_up_ = upload_matrix(sc.up);
  sc_down_ = upload_matrix(sc.down);
  sc_norm_ = upload_vector(sc.pre_norm);
  for (const LayerWeights& w : model.layers) {
    DeviceLayer d;
    d.wq = upload_matrix(w.wq);
    d.wk = upload_matrix(w.wk);
    d.wv = upload_matrix(w.wv);
    d.wo = upload_matrix(w.wo);
    d.gate = upload_matrix(w.gate);
    d.up = upload_matrix(w.up);
    d.down = upload_matrix(w.down);
    d.router = upload_matrix(w.router);
    d.attn_norm = upload_vector(w.attn_norm);
    d.ffn_norm = upload_vector(w.ffn_norm);
    d.bq = upload_vector(w.bq);
    d.bk = upload_vector(w.bk);
    d.bv = upload_vector(w.bv);
    d.q_norm = upload_vector(w.q_norm);
    d.k_norm = upload_vector(w.k_norm);
    d.post_attn_norm = upload_vector(w.post_attn_norm);
    d.post_ffn_norm = upload_vector(w.post_ffn_norm);
    d.post_ffn_norm_1 = upload_vector(w.post_ffn_norm_1);
    d.pre_ffn_norm_2 = upload_vector(w.pre_ffn_norm_2);
    d.post_ffn_norm_2 = upload_vector(w.post_ffn_norm_2);
    d.router_scale = upload_vector(w.router_scale);
    d.gate_exps = upload_matrix(w.gate_exps);
    d.up_exps = upload_matrix(w.up_exps);
    d.down_exps = upload_matrix(w.down_exps);
    d.gate_up_exps = upload_matrix(w.gate_up_exps);
    d.per_expert_scale = upload_vector(w.per_expert_scale);
    layers_.push_back(std::move(d));
  }
  kv_type_ = kv_type_for(model);
  const char* graphs = std::getenv("CANVAS_CUDA_GRAPHS");
  graphs_ = !(graphs && std::string(graphs) == "0");
  synchronize();
}

DeviceCache& CudaBackend::device_cache(const ModelConfig& c, KvCache& cache) {
  if (!cache.backend_state) {
    auto d = std::make_shared<DeviceCache>();
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const size_t bytes = size_t(kv_layer_bytes(c, l, cache.capacity(), kv_type_));
      d->k.emplace_back(bytes);
      d->v.emplace_back(bytes);
      fill_zero(d->k.back().data(), bytes);  // as the host cache starts: zeros
      fill_zero(d->v.back().data(), bytes);
    }
    d->groups = DeviceBuffer(size_t(cache.capacity()) * 4);
    fill_zero(d->groups.data(), size_t(cache.capacity()) * 4);
    d->id = next_cache_id_++;
    cache.backend_state = d;
  }
  return *static_cast<DeviceCache*>(cache.backend_state.get());
}

void CudaBackend::gated_mlp(const DeviceMatrix& gate, const DeviceMatrix& up, const DeviceMatrix& down, bool gelu,
                            const float* x, int64_t n, float* out) {
  const int64_t width = gate.rows();
  float* g = g_.reserve<float>(n * width);
  float* u = u_.reserve<float>(n * width);
  matmul(gate, x, n, g);
  matmul(up, x, n, u);
  if (gelu) {
    geglu(g, u, n * width, g);
  } else {
    swiglu(g, u, n * width, g);
  }
  matmul(down, g, n, out);
}

// Mixture of experts without a round trip to the host: the router's product, then routing (softmax, top-k,
// weights: ops softmax / top_k's order) and the slots of the routed rows grouped by expert on the device;
// every row gathered once per expert it picked; each projection one grouped product over all experts;
// combine_rows sums each row's results in ascending expert order, as the CPU does.
void CudaBackend::moe(const ModelConfig& c, const DeviceLayer& w, const float* router_in, const float* expert_in,
                      int64_t n, float* out) {
  const int64_t E = c.n_experts, K = c.n_experts_used, H = c.hidden, I = c.expert_ffn, slots = n * K;
  int32_t* expert_of = moe_expert_.reserve<int32_t>(slots);
  float* weight_of = moe_weight_.reserve<float>(slots);
  int32_t* first = moe_first_.reserve<int32_t>(E + 1);
  int32_t* slot_row = moe_rows_.reserve<int32_t>(slots);
  int32_t* slot_of = moe_slot_.reserve<int32_t>(slots);
  int32_t* begin = moe_begin_.reserve<int32_t>(n + 1);
  {
    const OpSpan span("MoE: router product, routing, slot plan");
    float* logits = router_logits_.reserve<float>(n * E);
    matmul(w.router, router_in, n, logits);
    moe_route(logits, n, E, K, c.expert_weights_norm, ptr(w.per_expert_scale), expert_of, weight_of);
    moe_plan(expert_of, n, K, E, first, slot_row, slot_of, begin);
  }
  const OpSpan span("MoE: gather, expert products, combine");
  float* gathered = gathered_.reserve<float>(slots * H);
  gather_rows(expert_in, H, slot_row, slots, gathered);
  float* act = expert_act_.reserve<float>(slots * I);
  const bool gelu = c.activation == Activation::GeluTanh;
  if (w.gate_up_exps.rows()) {
    float* gu = expert_gu_.reserve<float>(slots * 2 * I);
    matmul_grouped(w.gate_up_exps, E, first, gathered, gu);
    glu_halves(gu, slots, I, gelu, act);
  } else {
    float* u = expert_gu_.reserve<float>(slots * I);
    matmul_grouped(w.gate_exps, E, first, gathered, act);
    matmul_grouped(w.up_exps, E, first, gathered, u);
    if (gelu) {
      geglu(act, u, slots * I, act);
    } else {
      swiglu(act, u, slots * I, act);
    }
  }
  float* res = expert_res_.reserve<float>(slots * H);
  matmul_grouped(w.down_exps, E, first, act, res);
  combine_rows(res, H, begin, slot_of, weight_of, n, out);
}

// model.cpp's self_conditioning_input on the device: x += mlp(pre_norm(softmax(prev) @ E * scale)), then
// (decoder) a weightless RMSNorm.
void CudaBackend::self_conditioning(const Model& model, const ForwardRequest& req, float* x, bool decoder_norm) {
  const ModelConfig& c = model.config;
  const int64_t H = c.hidden, n = req.n;
  if (req.self_cond || req.self_cond_soft) {
    float* soft = soft_.reserve<float>(n * H);
    if (req.self_cond) {
      float* p = upload_into(prev_, req.self_cond, n * c.vocab);
      softmax_rows(p, n, c.vocab, 1.f, p);
      matmul_transposed(token_embd_, p, n, soft);
    } else {
      copy_to_device(soft, req.self_cond_soft, size_t(n * H) * 4);
    }
    scale_columns(soft, nullptr, n, H, c.embedding_scale);
    rms_norm(soft, ptr(sc_norm_), n, H, c.rms_eps, soft);
    float* mlp = mlp_.reserve<float>(n * H);
    gated_mlp(sc_gate_, sc_up_, sc_down_, c.activation == Activation::GeluTanh, soft, n, mlp);
    add(x, mlp, n * H);
  }
  if (decoder_norm) rms_norm(x, nullptr, n, H, c.rms_eps, x);
}

void CudaBackend::gemma_layer_rest(const ModelConfig& c, const DeviceLayer& w, float layer_scalar, int64_t n, float* x,
                                   float* proj, float* h) {
  const int64_t H = c.hidden;
  const bool gelu = c.activation == Activation::GeluTanh;
  rms_norm(proj, ptr(w.post_attn_norm), n, H, c.rms_eps, proj);
  add(x, proj, n * H);
  rms_norm(x, ptr(w.ffn_norm), n, H, c.rms_eps, h);
  gated_mlp(w.gate, w.up, w.down, gelu, h, n, proj);
  if (c.dense_and_moe) {
    rms_norm(proj, ptr(w.post_ffn_norm_1), n, H, c.rms_eps, proj);
    float* router_in = router_in_.reserve<float>(n * H);
    float* experts_out = experts_out_.reserve<float>(n * H);
    rms_norm(x, nullptr, n, H, c.rms_eps, router_in);
    if (c.router_norm) scale_columns(router_in, ptr(w.router_scale), n, H, 1.f / std::sqrt(float(H)));
    rms_norm(x, ptr(w.pre_ffn_norm_2), n, H, c.rms_eps, h);
    moe(c, w, router_in, h, n, experts_out);
    rms_norm(experts_out, ptr(w.post_ffn_norm_2), n, H, c.rms_eps, experts_out);
    add(proj, experts_out, n * H);
  }
  rms_norm(proj, ptr(w.post_ffn_norm), n, H, c.rms_eps, proj);
  add_then_scale(x, proj, n * H, layer_scalar);
}

// The stages of one pass, as model/forward.cpp names them: embed, then per layer attention_block and
// feed_forward, then head. Each mirrors its CPU twin step for step.
void CudaBackend::forward_batch(const Model& model, std::span<KvCache* const> caches,
                                std::span<const ForwardRequest> requests, const ForwardPlan& plan) {
  const std::lock_guard<std::mutex> lock(mutex_);  // one pass at a time: the scratch buffers are shared
  DevicePass p(model, caches, requests, plan);
  const std::vector<int64_t> key = graph_key(p);
  p.defer_outputs = !key.empty();
  stage(p);
  if (key.empty() || !run_recorded(p, key)) {
    compute(p);
    if (!key.empty() && graphs_) recorded_[key].growths = scratch_growths();  // the shape's first run
  }
  fetch(p);
  synchronize();
}

// A pass that can be recorded and replayed: encoder requests only (an AR step, a short prompt), no
// self-conditioning and no fused head (whose noise seed is an argument), at most 64 rows. Its key is its
// shape: every request's rows, logits rows and cache. Empty: not recordable.
std::vector<int64_t> CudaBackend::graph_key(const DevicePass& p) const {
  if (!graphs_ || p.n > 64 || profiling()) return {};
  std::vector<int64_t> key = {p.segments()};
  for (int64_t s = 0; s < p.segments(); ++s) {
    const ForwardRequest& req = p.requests[size_t(s)];
    if (req.decoder || req.self_cond || req.self_cond_soft || req.head_stats || req.soft_embedding_out) return {};
    const auto* dc = static_cast<const DeviceCache*>(p.caches[size_t(s)]->backend_state.get());
    if (!dc) return {};  // a new cache: its first pass allocates it
    key.insert(key.end(), {req.n, int64_t(req.logit_rows.size()), int64_t(dc->id)});
  }
  return key;
}

// Replays the recorded pass of this shape, or records it (the shape's second run: the first one sized
// every buffer). False: run it as usual (a first run, a scratch buffer grown since, or recording failed).
bool CudaBackend::run_recorded(DevicePass& p, const std::vector<int64_t>& key) {
  const auto found = recorded_.find(key);
  if (found == recorded_.end() || found->second.growths != scratch_growths()) {
    if (found != recorded_.end()) {
      recorded_.erase(found);
    } else if (recorded_.size() >= 16) {
      recorded_.erase(recorded_.begin());  // shapes come and go (serve): keep at most 16
    }
    return false;
  }
  RecordedPass& r = found->second;
  if (!r.graph.recorded()) {
    std::string why;
    if (!r.graph.record([&] { compute(p); }, &why) || scratch_growths() != r.growths) {
      graphs_ = false;
      recorded_.clear();
      std::fprintf(stderr, "canvas: CUDA graphs off, passes run launch by launch (%s)\n",
                   why.empty() ? "a scratch buffer grew while recording" : why.c_str());
      return false;
    }
  }
  r.graph.replay();
  return true;
}

// Everything a pass reads from the host, uploaded before any kernel: positions, tokens, each encoder row's
// group recorded in its cache (host and device), the rows' groups, sliding-window starts and key counts,
// the rows each request wants logits of; the activations' buffers reserved.
void CudaBackend::stage(DevicePass& p) {
  const Model& model = p.model;
  const ModelConfig& c = p.c;
  const int64_t H = c.hidden, n = p.n;
  int64_t max_q_width = 0, max_kv_width = 0;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerAttention a = c.attention_of(l);
    max_q_width = std::max(max_q_width, c.n_heads * a.head_dim);
    max_kv_width = std::max(max_kv_width, a.n_kv_heads * a.head_dim);
  }
  p.x = x_.reserve<float>(n * H);
  p.h = h_.reserve<float>(n * H);
  p.q = q_.reserve<float>(n * max_q_width);
  p.k = k_.reserve<float>(n * max_kv_width);
  p.v = v_.reserve<float>(n * max_kv_width);
  p.attn = attn_.reserve<float>(n * max_q_width);
  p.proj = proj_.reserve<float>(n * H);
  p.pos = upload_into(pos_, p.plan.pos.data(), n);
  if (model.position_embd.data)
    for (int64_t i = 0; i < n; ++i)
      check(p.plan.pos[size_t(i)] < model.position_embd.ne[1],
            "position " + std::to_string(p.plan.pos[size_t(i)]) + " is beyond the model's position embeddings (" +
                std::to_string(model.position_embd.ne[1]) + ")");
  std::vector<int32_t> tokens, qgroups(static_cast<size_t>(n), 0), seg_of_row, sel_rows;
  std::vector<uint64_t> row_ids;
  bool any_row_ids = false;
  for (int64_t s = 0; s < p.segments(); ++s) {
    const ForwardRequest& req = p.requests[size_t(s)];
    const int64_t r0 = p.plan.row0[size_t(s)], rows = int64_t(req.logit_rows.size());
    // model/forward.cpp hands a device runs of one kind whose encoder requests have caches of their own:
    // attend() writes every encoder request's K/V before any of them attends.
    check(req.decoder == p.requests[0].decoder, "cuda forward: a batch mixes encoder and decoder requests");
    for (int64_t e = 0; e < s && !req.decoder; ++e)
      check(p.caches[size_t(e)] != p.caches[size_t(s)], "cuda forward: two encoder requests of a batch share a cache");
    tokens.insert(tokens.end(), req.tokens, req.tokens + req.n);
    KvCache& cache = *p.caches[size_t(s)];
    DeviceCache& dc = device_cache(c, cache);
    p.dcaches.push_back(&dc);
    if (!req.decoder) {
      int32_t* groups = cache.groups();
      for (int64_t i = 0; i < req.n; ++i) {
        groups[p.plan.pos[size_t(r0 + i)]] = req.groups[i];
        qgroups[size_t(r0 + i)] = req.groups[i];
      }
      copy_to_device(dc.groups.data(), groups, size_t(p.plan.key_ends[size_t(s)]) * 4);
    }
    seg_of_row.insert(seg_of_row.end(), size_t(req.n), int32_t(s));
    p.sel_row0.push_back(int64_t(sel_rows.size()));
    for (int64_t i = 0; i < rows; ++i) {
      sel_rows.push_back(int32_t(r0 + req.logit_rows[size_t(i)]));
      row_ids.push_back(req.head_stats && req.head.row_ids ? req.head.row_ids[i] : uint64_t(i));
    }
    any_row_ids = any_row_ids || (req.head_stats && req.head.row_ids);
  }
  p.sel_row0.push_back(int64_t(sel_rows.size()));
  p.tokens = upload_into(tokens_, tokens.data(), n);
  p.qgroups = upload_into(qgroups_, qgroups.data(), n);
  p.seg_of_row = upload_into(seg_of_row_, seg_of_row.data(), n);
  p.sel_rows = upload_into(sel_rows_, sel_rows.data(), int64_t(sel_rows.size()));
  p.row_ids = any_row_ids ? upload_into(row_ids_, row_ids.data(), int64_t(row_ids.size())) : nullptr;
  p.logits = logits_.reserve<float>(head_rows(p) * c.vocab);
  if (c.sliding_window > 0) {
    std::vector<int32_t> window_start(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) window_start[size_t(i)] = int32_t(p.plan.pos[size_t(i)] - c.sliding_window + 1);
    p.window_start = upload_into(window_, window_start.data(), n);
  }
  stage_attention(p);
}

// Every layer's AttentionSegment of every request: an encoder request writes its K/V into its cache and
// attends causally over it (groups, sliding window); a decoder request sees the cache (sliding layers:
// its last window - 1 positions) and then its own canvas rows, both ways, and does not write the cache.
void CudaBackend::stage_attention(DevicePass& p) {
  const ModelConfig& c = p.c;
  std::vector<AttentionSegment> segs;
  segs.reserve(size_t(c.n_layers * p.segments()));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerAttention la = c.attention_of(l);
    const bool sliding = la.kind == AttentionKind::Sliding;
    for (int64_t s = 0; s < p.segments(); ++s) {
      const ForwardRequest& req = p.requests[size_t(s)];
      DeviceCache& dc = *p.dcaches[size_t(s)];
      AttentionSegment seg;
      seg.kv_head_stride = p.caches[size_t(s)]->head_stride(l);
      seg.row0 = p.plan.row0[size_t(s)];
      int64_t first = 0;  // the first cache position the request sees
      if (!req.decoder) {
        seg.mask.key_group = dc.groups.as<int32_t>();
        seg.mask.query_group = p.qgroups + seg.row0;
        if (sliding) seg.mask.window_start = p.window_start + seg.row0;
        seg.n_keys = int32_t(p.plan.key_ends[size_t(s)]);
      } else {
        first = sliding ? std::max<int64_t>(0, req.pos0 - (c.sliding_window - 1)) : 0;
        seg.n_keys = int32_t(req.pos0 - first);
        seg.own_keys = int32_t(req.n);
      }
      const int64_t skip = first * la.head_dim * kv_element_bytes(kv_type_);
      seg.k = static_cast<char*>(dc.k[size_t(l)].data()) + skip;
      seg.v = static_cast<char*>(dc.v[size_t(l)].data()) + skip;
      segs.push_back(seg);
    }
  }
  p.segs = upload_into(segs_, segs.data(), int64_t(segs.size()));
}

void CudaBackend::compute(DevicePass& p) {
  {
    const OpSpan span("embed (and self-conditioning)");
    embed(p);
  }
  for (int64_t l = 0; l < p.c.n_layers; ++l) {
    {
      const OpSpan span("attention block");
      attention_block(p, l);
    }
    const OpSpan span("feed-forward block");
    feed_forward(p, l);
  }
  const OpSpan span("head");
  head(p);
}

// A deferred pass's logits, request by request, to the host.
void CudaBackend::fetch(DevicePass& p) {
  if (!p.defer_outputs) return;
  for (int64_t s = 0; s < p.segments(); ++s) {
    const ForwardRequest& req = p.requests[size_t(s)];
    const int64_t first = p.sel_row0[size_t(s)], rows = p.sel_row0[size_t(s + 1)] - first;
    if (rows) copy_to_host(req.logits, p.logits + first * p.c.vocab, size_t(rows * p.c.vocab) * 4);
  }
}

// Stage 1: token embeddings (scaled), learned positions and the self-conditioning input.
void CudaBackend::embed(DevicePass& p) {
  const Model& model = p.model;
  const ModelConfig& c = p.c;
  const int64_t H = c.hidden, n = p.n;
  embed_rows(token_embd_, p.tokens, n, c.embedding_scale, p.x);
  if (model.position_embd.data) {
    embed_rows(position_embd_, p.pos, n, 1.f, p.h);
    add(p.x, p.h, n * H);
  }
  for (int64_t s = 0; s < p.segments(); ++s) {
    const ForwardRequest& req = p.requests[size_t(s)];
    const int64_t r0 = p.plan.row0[size_t(s)];
    if (req.decoder || req.self_cond || req.self_cond_soft) self_conditioning(model, req, p.x + r0 * H, req.decoder);
  }
}

// Layer l's attention for every request of the pass in one launch (stage_attention says what each
// request sees); an encoder pass first writes its K/V rows into the caches.
void CudaBackend::attend(DevicePass& p, int64_t l) {
  const ModelConfig& c = p.c;
  const LayerAttention la = c.attention_of(l);
  const int64_t D = la.head_dim, q_width = c.n_heads * D, kv_width = la.n_kv_heads * D;
  const OpSpan span("attention: kernel (and an encoder's K/V into the caches)");
  const AttentionSegment* segs = p.segs + l * p.segments();
  const bool decoder = p.requests[0].decoder;  // a device batch holds one kind (stage checks it)
  if (!decoder) scatter_kv(p.k, p.v, p.n, la.n_kv_heads, D, p.pos, segs, p.seg_of_row, kv_type_);
  attention_batch(p.q, p.n, q_width, segs, p.seg_of_row, kv_type_, decoder ? p.k : nullptr, decoder ? p.v : nullptr,
                  kv_width, attention_shape(c, la), p.attn, q_width);
}

// Stage 2, per layer: attn_norm, Q/K/V (biases, q/k/v norms, RoPE), attention per request, and the output
// projection into proj.
void CudaBackend::attention_block(DevicePass& p, int64_t l) {
  const ModelConfig& c = p.c;
  const DeviceLayer& w = layers_[size_t(l)];
  const LayerAttention la = c.attention_of(l);
  const int64_t n = p.n, H = c.hidden, D = la.head_dim, q_width = c.n_heads * D, kv_width = la.n_kv_heads * D;
  rms_norm(p.x, ptr(w.attn_norm), n, H, c.rms_eps, p.h);
  matmul(w.wq, p.h, n, p.q);
  matmul(w.wk, p.h, n, p.k);
  if (la.value_from_key) {
    copy_on_device(p.v, p.k, size_t(n * kv_width) * 4);  // raw k_proj output, before k_norm and RoPE
  } else {
    matmul(w.wv, p.h, n, p.v);
  }
  if (w.bq.bytes()) add_to_rows(p.q, ptr(w.bq), n, q_width);
  if (w.bk.bytes()) add_to_rows(p.k, ptr(w.bk), n, kv_width);
  if (w.bv.bytes()) add_to_rows(p.v, ptr(w.bv), n, kv_width);
  if (c.qk_norm) {
    rms_norm(p.q, ptr(w.q_norm), n * c.n_heads, D, c.rms_eps, p.q);
    rms_norm(p.k, ptr(w.k_norm), n * la.n_kv_heads, D, c.rms_eps, p.k);
  }
  if (c.v_norm) rms_norm(p.v, nullptr, n * la.n_kv_heads, D, c.rms_eps, p.v);
  cuda::rope(p.q, n, int(c.n_heads), p.pos, la.rope);
  cuda::rope(p.k, n, int(la.n_kv_heads), p.pos, la.rope);
  attend(p, l);
  matmul(w.wo, p.attn, n, p.proj);
}

// Stage 3, per layer: the attention output joins the residual stream, then the feed-forward sublayer:
// Gemma 4's layer tail, or the pre-norm block's dense MLP or MoE. A device batch holds requests of one kind
// (forward_batch splits mixed ones), so one layer scalar serves every row.
void CudaBackend::feed_forward(DevicePass& p, int64_t l) {
  const ModelConfig& c = p.c;
  const DeviceLayer& w = layers_[size_t(l)];
  const int64_t n = p.n, H = c.hidden;
  if (c.layer_style == LayerStyle::Gemma4) {
    const LayerWeights& host = p.model.layers[size_t(l)];
    gemma_layer_rest(c, w, p.requests[0].decoder ? host.layer_scalar_decoder : host.layer_scalar_encoder, n, p.x,
                     p.proj, p.h);
    return;
  }
  add(p.x, p.proj, n * H);
  rms_norm(p.x, ptr(w.ffn_norm), n, H, c.rms_eps, p.h);
  if (c.is_moe()) {
    moe(c, w, p.h, p.h, n, p.proj);
  } else {
    gated_mlp(w.gate, w.up, w.down, c.activation == Activation::GeluTanh, p.h, n, p.proj);
  }
  add(p.x, p.proj, n * H);
}

// Stage 4: the head. The wanted rows of consecutive requests go through the final norm and the output
// matrix together, head_rows(p) rows at most a product (a batch of AR steps reads the output matrix once),
// soft-capped; then each request's logits are copied out, or its fused head's statistics (and soft
// embedding) taken.
void CudaBackend::head(DevicePass& p) {
  const ModelConfig& c = p.c;
  const int64_t H = c.hidden, V = c.vocab, budget = head_rows(p);
  const DeviceMatrix& weights = output_of(output_, token_embd_, tied_);
  for (int64_t s0 = 0; s0 < p.segments();) {
    int64_t s1 = s0 + 1;  // requests s0 .. s1 - 1 in one product
    while (s1 < p.segments() && p.sel_row0[size_t(s1 + 1)] - p.sel_row0[size_t(s0)] <= budget) ++s1;
    const int64_t first = p.sel_row0[size_t(s0)], rows = p.sel_row0[size_t(s1)] - first;
    float* logits = p.logits + (p.defer_outputs ? first * V : 0);
    if (rows) {
      const OpSpan span("head: norm, output product, soft-cap");
      float* sel = sel_.reserve<float>(rows * H);
      gather_rows(p.x, H, p.sel_rows + first, rows, sel);
      rms_norm(sel, ptr(output_norm_), rows, H, c.rms_eps, sel);
      matmul(weights, sel, rows, logits);
      if (c.logit_softcap > 0) softcap(logits, rows * V, c.logit_softcap);
    }
    for (int64_t s = s0; s < s1; ++s) {
      const ForwardRequest& req = p.requests[size_t(s)];
      const int64_t at = p.sel_row0[size_t(s)], n = p.sel_row0[size_t(s + 1)] - at;
      if (n == 0) continue;
      check(!req.soft_embedding_out || tied_,
            "forward: a soft embedding output needs a head tied to the token embedding; '" + c.arch +
                "' has its own output matrix");
      float* own = logits + (at - first) * V;
      if (!req.head_stats) {
        if (!p.defer_outputs) copy_to_host(req.logits, own, size_t(n * V) * 4);  // else: fetch()
        continue;
      }
      const OpSpan span("head: statistics, soft embedding");
      const float T = req.head.temperature;  // head_stats refuses a negative or NaN one
      HeadRowStats* stats = stats_.reserve<HeadRowStats>(n);
      head_stats(own, n, V, T, req.head.seed, p.row_ids ? p.row_ids + at : nullptr, stats);
      copy_to_host(req.head_stats, stats, size_t(n) * sizeof(HeadRowStats));
      if (req.soft_embedding_out) {
        // The probabilities replace the logits (the statistics are taken): no second [rows x vocab] buffer.
        softmax_rows(own, n, V, T > 0 ? 1.f / T : 1.f, own);
        float* soft = soft_.reserve<float>(n * H);
        matmul_transposed(token_embd_, own, n, soft);
        copy_to_host(req.soft_embedding_out, soft, size_t(n * H) * 4);
      }
    }
    s0 = s1;
  }
}

}  // namespace

std::shared_ptr<ForwardBackend> make_backend(const Model& model) { return std::make_shared<CudaBackend>(model); }

KvType kv_type_for(const Model& model) {
  const bool f32 = model.layers.empty() || model.layers.front().wq.type == DType::F32;
  return f32 ? KvType::F32 : KvType::F16;
}

int64_t device_cache_bytes(const ModelConfig& c, int64_t capacity, KvType type) {
  int64_t bytes = capacity * 4;  // groups
  for (int64_t l = 0; l < c.n_layers; ++l) bytes += 2 * kv_layer_bytes(c, l, capacity, type);
  return bytes;
}

}  // namespace canvas::cuda
