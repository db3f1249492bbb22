// The CUDA executor of model/transformer.h: each primitive is the kernel twin of the CPU executor's
// (model/cpu_executor.cpp) on device buffers. A pass stages everything it reads from the host when its
// executor is made (tokens, positions, groups, each layer's attention segments, the head's rows), queues
// kernels primitive by primitive, and copies its outputs out at the end (run), so a small encoder pass (an
// AR step) can be recorded as a CUDA graph and replayed. tests/cuda_test.cpp compares whole forwards with
// the CPU's, and canvas_backend_ops --backend cuda every primitive.
#include "cuda/cuda_backend.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "cuda/cuda_ops.h"
#include "model/kv_cache.h"
#include "model/tensors.h"
#include "ops/ops.h"

namespace canvas::cuda {
namespace {

using R = TensorRole;

// An f32 vector (norm weight, bias, scale) on the device; empty when the model has none.
DeviceBuffer upload_vector(const TensorView& v) {
  if (!v.data) return {};
  check(v.type == DType::F32, "cuda: vector '" + v.name + "' is not f32");
  DeviceBuffer b(size_t(v.elements()) * 4);
  b.upload(v.data, size_t(v.elements()) * 4);
  return b;
}
const float* ptr(const DeviceBuffer& b) { return b.bytes() ? b.as<float>() : nullptr; }

bool is_expert_weight(TensorRole role) {
  return role == R::Router || role == R::PerExpertScale || role == R::GateExps || role == R::UpExps ||
         role == R::DownExps || role == R::GateUpExps;
}

// A KvCache's device copy. A main cache: per layer K and V in the host cache's layout (the backend's
// KvType), and the visibility groups. A decoder's kept canvas K/V (canvas_kv): per layer f32 rows
// [canvas row][kv heads x head_dim], which attention reads as the pass's own keys are read.
struct DeviceCache {
  std::vector<DeviceBuffer> k, v;
  DeviceBuffer groups;
  uint64_t id = 0;  // unique in the process: recorded passes are keyed by it, not by an address
  bool canvas = false;
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

// What a profile names a product by: its first weight's role.
const char* matmul_span(TensorRole role) {
  switch (role) {
    case R::Wq: case R::Wk: case R::Wv: return "matmul: q/k/v";
    case R::Wo: return "matmul: attention output";
    case R::Gate: case R::Up: return "matmul: gate/up";
    case R::Down: return "matmul: down";
    case R::SelfCondGate: case R::SelfCondUp: case R::SelfCondDown: return "matmul: self-conditioning MLP";
    default: return "matmul";
  }
}

class CudaExecutor;

// The backend: the weights on the device, the slots and scratch buffers every pass reuses (a recorded pass
// replays on their addresses), the recorded passes. One pass at a time: an executor holds `mutex` while it
// lives.
class CudaBackend final : public PrimitiveBackend {
 public:
  CudaBackend(const Model& model, const BackendOptions& options);
  std::string name() const override { return "cuda: " + device_description(); }
  std::unique_ptr<Executor> executor(const Model& model, std::span<KvCache* const> caches,
                                     std::span<const ForwardRequest> requests, const ForwardPlan& plan,
                                     ThreadPool* pool) override;
  void run(Executor& device, const std::function<void()>& pass) override;
  bool runs_every_primitive() const override { return true; }

  // The weight's matrix (throws when it is not on the device) or vector (null when absent: a norm without
  // weight). The head tied to the embedding reads the embedding's matrix as Output.
  const DeviceMatrix& matrix(WeightRef w) const;
  bool has_matrix(WeightRef w) const;
  const float* vector(WeightRef w) const;
  bool experts_on_device(int64_t layer) const { return layer >= moe_layers_on_cpu_; }
  // Whether every primitive call of a pass runs here (nothing kept on the CPU): only such a pass can be
  // recorded (a copy to the host in mid-pass cannot be).
  bool everything_on_device(const ModelConfig& c) const;
  DeviceCache& device_cache(const ModelConfig& c, KvCache& cache, bool canvas);
  bool recording_allowed() const { return graphs_; }

  std::mutex mutex;
  KvType kv_type = KvType::F32;
  std::array<DeviceBuffer, kSlots> slots;
  // Per-pass buffers, reused.
  DeviceBuffer pos, tokens, qgroups, window, store_pos, sel_rows, row_ids, seg_of_row, segs, store_segs, logits,
      stats, soft_out, prev, position_rows, router_logits, gathered, expert_act, expert_res, expert_gu, moe_expert,
      moe_first, moe_rows, moe_begin, moe_slot, moe_weight;

 private:
  size_t index(WeightRef w) const { return size_t((w.layer + 1) * kTensorRoles + int64_t(w.role)); }
  bool run_recorded(const std::vector<int64_t>& key, const std::function<void()>& pass);

  std::vector<DeviceMatrix> matrices_;  // [index(w)]; rows() == 0: not on the device
  std::vector<DeviceBuffer> vectors_;
  int64_t n_layers_ = 0;
  int64_t moe_layers_on_cpu_ = 0;
  // Recorded passes by shape (graph_key), each with the allocation count it was recorded at.
  struct RecordedPass {
    DeviceGraph graph;
    uint64_t growths = 0;  // scratch_growths() after the shape's first, unrecorded, run
  };
  std::map<std::vector<int64_t>, RecordedPass> recorded_;
  bool graphs_ = true;  // false after a recording failed, or with CANVAS_CUDA_GRAPHS=0
  uint64_t next_cache_id_ = 1;
};

// One pass over a batch of requests (rows of all requests stacked, as the CPU executor's).
class CudaExecutor final : public TypedExecutor<CudaExecutor> {
 public:
  CudaExecutor(CudaBackend& backend, const Model& model, std::span<KvCache* const> caches,
               std::span<const ForwardRequest> requests, const ForwardPlan& plan);

  bool supports(const Op& op) const override;
  // Each call in a profile span named by its primitive (a product by its weights: matmul_span).
  void run(const Op& op) override;
  void read_slot(Slot s, std::vector<float>& data, int64_t& rows, int64_t& width) override;
  void write_slot(Slot s, const float* data, int64_t rows, int64_t width) override;

  // The pass's shape when it can be recorded and replayed (encoder requests only: an AR step, a short
  // prompt; no self-conditioning and no fused head, whose inputs are host arguments; at most 64 rows; every
  // primitive on the device; caches the device already holds): every request's rows, logits rows and cache.
  // Empty: not recordable.
  const std::vector<int64_t>& graph_key() const { return key_; }
  // Outputs stay on the device until finish (a recorded pass: every logits row has its own place);
  // otherwise each request's logits are copied out as soon as they exist, in one request-sized buffer.
  void defer_outputs() { defer_outputs_ = true; }
  // A deferred pass's logits to the host; then waits for the device (a kernel's error surfaces here).
  void finish();

 private:
  friend TypedExecutor<CudaExecutor>;
  // The primitives (transformer.h says what each computes); run calls them.
  void embed(Slot x);
  void self_conditioning_input(Slot soft);
  void add_self_conditioning(Slot x, Slot mlp);
  void decoder_norm(Slot x);
  void rms_norm(Slot out, Slot in, WeightRef weight);
  void rms_norm_heads(Slot x, int64_t head_dim, WeightRef weight);
  void matmul(std::span<const Product> products, Slot in);
  void copy(Slot out, Slot in);
  void add(Slot x, Slot y);
  void add_bias(Slot x, WeightRef bias);
  void gated_activation(Slot g, Slot u);
  void rope(Slot x, int64_t n_heads, int64_t layer);
  void attention(Slot out, Slot q, Slot k, Slot v, int64_t layer);
  void moe(Slot out, Slot router_in, Slot expert_in, int64_t layer);
  void router_input(Slot out, Slot in, int64_t layer);
  void scaled_residual(Slot x, Slot y, int64_t layer);
  void head_rows(Slot head, Slot x);
  void logits(Slot head, WeightRef weight);

  struct Shape {
    int64_t rows = 0, width = 0;
  };
  // Consecutive requests that attend together, one launch per layer after their K/V are stored: a new one
  // starts at an encoder request whose cache an earlier request of the current one uses (it must not see
  // or overwrite that request's K/V before it has attended, as on the CPU, which attends request by
  // request), and a decoder request with kept canvas K/V has one of its own (its own keys are the store's).
  struct Wave {
    int64_t s0 = 0, s1 = 0;
    bool canvas = false;
  };
  float* at(Slot s) { return backend_.slots[size_t(s)].as<float>(); }
  float* shape(Slot s, int64_t rows, int64_t width);
  int64_t segments() const { return int64_t(requests_.size()); }
  int64_t row0(int64_t s) const { return plan_.row0[size_t(s)]; }
  std::vector<int64_t> make_graph_key() const;
  void stage();
  void stage_attention();
  int64_t head_budget() const;

  CudaBackend& backend_;
  std::unique_lock<std::mutex> lock_;
  const Model& model_;
  const ModelConfig& c_;
  std::span<KvCache* const> caches_;
  std::span<const ForwardRequest> requests_;
  const ForwardPlan& plan_;
  const int64_t n_;  // rows of the whole batch
  std::array<Shape, kSlots> shapes_{};
  std::vector<int64_t> key_;
  bool defer_outputs_ = false;
  // Staged device arrays (the backend's buffers).
  const int32_t *pos_ = nullptr, *tokens_ = nullptr, *qgroups_ = nullptr, *window_start_ = nullptr,
                *store_pos_ = nullptr, *sel_rows_ = nullptr, *seg_of_row_ = nullptr;
  const uint64_t* row_ids_ = nullptr;     // the fused head's noise ids of the head's rows (null: none given)
  const AttentionSegment* segs_ = nullptr;        // attention: segs_[l * segments() + s], row0 from its wave
  const AttentionSegment* store_segs_ = nullptr;  // where each request's K/V rows go (scatter_kv)
  std::vector<DeviceCache*> dcaches_, kept_;      // each request's device cache, and kept canvas K/V (or null)
  std::vector<Wave> waves_;
  int64_t head_total_ = 0;
};

// ---- the backend ----

CudaBackend::CudaBackend(const Model& model, const BackendOptions& options) {
  std::string why;
  if (!available(&why)) throw Error("--device cuda: " + why);  // why is set by the call
  const ModelConfig& c = model.config;
  n_layers_ = c.n_layers;
  check(options.moe_layers_on_cpu >= 0, "--n-cpu-moe: a negative layer count");
  moe_layers_on_cpu_ = c.is_moe() ? std::min(options.moe_layers_on_cpu, c.n_layers) : 0;
  matrices_.resize(size_t((c.n_layers + 1) * kTensorRoles));
  vectors_.resize(matrices_.size());
  for (const TensorSpec& spec : model_tensors(c)) {
    if (spec.kind == TensorKind::Scalar || spec.layer >= c.n_layers) continue;
    if (spec.layer >= 0 && spec.layer < moe_layers_on_cpu_ && is_expert_weight(spec.role)) continue;  // in RAM
    const TensorView view = model_weight(model, spec);
    if (!view.data) continue;
    if (spec.role == R::Output && view.data == model.token_embd.data && view.type == model.token_embd.type)
      continue;  // the head is the embedding: matrix() reads that one
    const size_t i = index({spec.role, spec.layer});
    if (spec.kind == TensorKind::Vector) {
      vectors_[i] = upload_vector(view);
    } else {
      matrices_[i] = DeviceMatrix::upload(view);
    }
  }
  if (moe_layers_on_cpu_ > 0) {
    const int64_t layers = moe_layers_on_cpu_;
    keep_on_cpu = [layers](Primitive p, int64_t layer) { return p == Primitive::Moe && layer < layers; };
  }
  kv_type = kv_type_for(model);
  const char* graphs = std::getenv("CANVAS_CUDA_GRAPHS");
  graphs_ = !(graphs && std::string(graphs) == "0");
  synchronize();
}

bool CudaBackend::has_matrix(WeightRef w) const {
  if (!w.present() || w.layer < -1 || w.layer >= n_layers_) return false;
  if (matrices_[index(w)].rows() > 0) return true;
  return w.role == R::Output && matrices_[index({R::TokenEmbd, -1})].rows() > 0;  // a head tied to the embedding
}

const DeviceMatrix& CudaBackend::matrix(WeightRef w) const {
  check(w.present() && w.layer >= -1 && w.layer < n_layers_, "cuda: a product without a weight");
  const DeviceMatrix& m = matrices_[index(w)];
  if (m.rows() > 0) return m;
  if (w.role == R::Output && matrices_[index({R::TokenEmbd, -1})].rows() > 0)
    return matrices_[index({R::TokenEmbd, -1})];
  throw Error("cuda: weight " + std::to_string(int(w.role)) + " of layer " + std::to_string(w.layer) +
              " is not on the device");
}

const float* CudaBackend::vector(WeightRef w) const {
  if (!w.present() || w.layer < -1 || w.layer >= n_layers_) return nullptr;
  return ptr(vectors_[index(w)]);
}

bool CudaBackend::everything_on_device(const ModelConfig& c) const {
  if (moe_layers_on_cpu_ > 0) return false;
  if (!keep_on_cpu) return true;
  for (int p = 0; p < kPrimitives; ++p)
    for (int64_t l = -1; l < c.n_layers; ++l)
      if (keep_on_cpu(Primitive(p), l)) return false;
  return true;
}

// A cache's device copy, made on its first use from what the host cache holds then (zeros, unless it was
// written on the host: the conformance harness's cached prefix).
DeviceCache& CudaBackend::device_cache(const ModelConfig& c, KvCache& cache, bool canvas) {
  if (!cache.backend_state) {
    auto d = std::make_shared<DeviceCache>();
    d->canvas = canvas;
    const int64_t capacity = cache.capacity();
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const LayerAttention a = c.attention_of(l);
      const int64_t floats = a.n_kv_heads * capacity * a.head_dim, stride = cache.head_stride(l);
      const size_t bytes = canvas ? size_t(floats) * 4 : size_t(kv_layer_bytes(c, l, capacity, kv_type));
      for (int kv = 0; kv < 2; ++kv) {
        const float* host = kv ? cache.values(l) : cache.keys(l);
        DeviceBuffer b(bytes);
        if (std::all_of(host, host + floats, [](float x) { return x == 0.f; })) {
          fill_zero(b.data(), bytes);  // as the host cache starts
        } else if (canvas) {  // [kv head][row][dim] -> [row][kv head][dim]
          std::vector<float> rows(static_cast<size_t>(floats));
          for (int64_t h = 0; h < a.n_kv_heads; ++h)
            for (int64_t r = 0; r < capacity; ++r)
              std::copy_n(host + h * stride + r * a.head_dim, a.head_dim,
                          &rows[size_t((r * a.n_kv_heads + h) * a.head_dim)]);
          b.upload(rows.data(), bytes);
        } else if (kv_type == KvType::F16) {
          std::vector<uint16_t> half(static_cast<size_t>(floats));
          for (int64_t i = 0; i < floats; ++i) half[size_t(i)] = f32_to_f16(host[i]);
          b.upload(half.data(), bytes);
        } else {
          b.upload(host, bytes);
        }
        (kv ? d->v : d->k).push_back(std::move(b));
      }
    }
    if (!canvas) {
      d->groups = DeviceBuffer(size_t(capacity) * 4);
      d->groups.upload(cache.groups(), size_t(capacity) * 4);
    }
    d->id = next_cache_id_++;
    cache.backend_state = d;
  }
  auto* d = static_cast<DeviceCache*>(cache.backend_state.get());
  check(d->canvas == canvas, canvas ? "forward: a KV cache of a sequence is given as a canvas's K/V store"
                                    : "forward: a canvas's K/V store is given as a sequence's KV cache");
  return *d;
}

std::unique_ptr<Executor> CudaBackend::executor(const Model& model, std::span<KvCache* const> caches,
                                                std::span<const ForwardRequest> requests, const ForwardPlan& plan,
                                                ThreadPool*) {
  return std::make_unique<CudaExecutor>(*this, model, caches, requests, plan);
}

// A recordable pass is replayed when its shape was recorded, or recorded on the shape's second run (the
// first sized every buffer); otherwise the pass runs launch by launch.
void CudaBackend::run(Executor& device, const std::function<void()>& pass) {
  auto& ex = static_cast<CudaExecutor&>(device);  // made by executor() above
  const std::vector<int64_t>& key = ex.graph_key();
  if (!key.empty()) ex.defer_outputs();
  if (key.empty() || !run_recorded(key, pass)) {
    pass();
    if (!key.empty() && graphs_) recorded_[key].growths = scratch_growths();  // the shape's first run
  }
  ex.finish();
}

// Replays the recorded pass of this shape, or records it (the shape's second run: the first one sized
// every buffer). False: run it as usual (a first run, a scratch buffer grown since, or recording failed).
bool CudaBackend::run_recorded(const std::vector<int64_t>& key, const std::function<void()>& pass) {
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
    if (!r.graph.record(pass, &why) || scratch_growths() != r.growths) {
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

// ---- the executor: staging ----

CudaExecutor::CudaExecutor(CudaBackend& backend, const Model& model, std::span<KvCache* const> caches,
                           std::span<const ForwardRequest> requests, const ForwardPlan& plan)
    : backend_(backend), lock_(backend.mutex), model_(model), c_(model.config), caches_(caches),
      requests_(requests), plan_(plan), n_(plan.n) {
  key_ = make_graph_key();
  stage();
}

std::vector<int64_t> CudaExecutor::make_graph_key() const {
  if (!backend_.recording_allowed() || n_ > 64 || profiling() || !backend_.everything_on_device(c_)) return {};
  std::vector<int64_t> key = {segments()};
  for (int64_t s = 0; s < segments(); ++s) {
    const ForwardRequest& req = requests_[size_t(s)];
    if (req.decoder || req.self_cond || req.self_cond_soft || req.head_stats || req.soft_embedding_out) return {};
    const auto* dc = static_cast<const DeviceCache*>(caches_[size_t(s)]->backend_state.get());
    if (!dc) return {};  // a new cache: its first pass allocates it
    key.insert(key.end(), {req.n, int64_t(req.logit_rows.size()), int64_t(dc->id)});
  }
  return key;
}

// Everything a pass reads from the host, uploaded before any kernel: positions, tokens, each encoder row's
// group recorded in its cache (host and device), the rows' groups, sliding-window starts, where each row's
// K/V go, each layer's attention segments, the rows each request wants logits of.
void CudaExecutor::stage() {
  const ModelConfig& c = c_;
  if (model_.position_embd.data)
    for (int64_t i = 0; i < n_; ++i)
      check(plan_.pos[size_t(i)] < model_.position_embd.ne[1],
            "position " + std::to_string(plan_.pos[size_t(i)]) + " is beyond the model's position embeddings (" +
                std::to_string(model_.position_embd.ne[1]) + ")");
  pos_ = upload_into(backend_.pos, plan_.pos.data(), n_);
  std::vector<int32_t> tokens, qgroups(static_cast<size_t>(n_), 0), seg_of_row, store_pos(static_cast<size_t>(n_), 0);
  for (int64_t s = 0; s < segments(); ++s) {
    const ForwardRequest& req = requests_[size_t(s)];
    const int64_t r0 = row0(s);
    tokens.insert(tokens.end(), req.tokens, req.tokens + req.n);
    seg_of_row.insert(seg_of_row.end(), size_t(req.n), int32_t(s));
    KvCache& cache = *caches_[size_t(s)];
    DeviceCache& dc = backend_.device_cache(c, cache, false);
    dcaches_.push_back(&dc);
    kept_.push_back(req.canvas_kv ? &backend_.device_cache(c, *req.canvas_kv, true) : nullptr);
    if (!req.decoder) {
      int32_t* groups = cache.groups();
      for (int64_t i = 0; i < req.n; ++i) {
        groups[plan_.pos[size_t(r0 + i)]] = req.groups[i];
        qgroups[size_t(r0 + i)] = req.groups[i];
        store_pos[size_t(r0 + i)] = plan_.pos[size_t(r0 + i)];
      }
      copy_to_device(dc.groups.data(), groups, size_t(plan_.key_ends[size_t(s)]) * 4);
    } else if (req.canvas_kv) {
      for (int64_t i = 0; i < req.n; ++i) store_pos[size_t(r0 + i)] = req.canvas_rows ? req.canvas_rows[i] : int32_t(i);
    }
    // Waves (see Wave).
    bool start = waves_.empty() || req.canvas_kv || waves_.back().canvas;
    for (int64_t e = start ? s : waves_.back().s0; e < s && !req.decoder; ++e)
      start = start || caches_[size_t(e)] == caches_[size_t(s)];
    if (start) {
      waves_.push_back({s, s + 1, req.canvas_kv != nullptr});
    } else {
      waves_.back().s1 = s + 1;
    }
  }
  // The Head slot's rows, in the plan's order (ForwardPlan::head_rows), and the fused head's noise ids.
  std::vector<uint64_t> row_ids;
  bool any_row_ids = false;
  for (int64_t s : plan_.head_order) {
    const ForwardRequest& req = requests_[size_t(s)];
    for (size_t i = 0; i < req.logit_rows.size(); ++i)
      row_ids.push_back(req.head_stats && req.head.row_ids ? req.head.row_ids[i] : uint64_t(i));
    any_row_ids = any_row_ids || (req.head_stats && req.head.row_ids);
  }
  head_total_ = int64_t(plan_.head_rows.size());
  tokens_ = upload_into(backend_.tokens, tokens.data(), n_);
  qgroups_ = upload_into(backend_.qgroups, qgroups.data(), n_);
  seg_of_row_ = upload_into(backend_.seg_of_row, seg_of_row.data(), n_);
  store_pos_ = upload_into(backend_.store_pos, store_pos.data(), n_);
  sel_rows_ = upload_into(backend_.sel_rows, plan_.head_rows.data(), head_total_);
  row_ids_ = any_row_ids ? upload_into(backend_.row_ids, row_ids.data(), head_total_) : nullptr;
  if (c.sliding_window > 0) window_start_ = upload_into(backend_.window, plan_.window_start.data(), n_);
  stage_attention();
}

// Every layer's AttentionSegment of every request: an encoder request writes its K/V into its cache and
// attends causally over it (groups, sliding window); a decoder request sees the cache (sliding layers: its
// last window - 1 positions) and then its own canvas rows, both ways, and does not write the cache; with
// kept canvas K/V it writes its rows there and sees every row of it. A segment's row0 counts from its
// wave's first row (each wave is one launch over its rows).
void CudaExecutor::stage_attention() {
  const ModelConfig& c = c_;
  std::vector<int64_t> wave_row0(static_cast<size_t>(segments()));
  for (const Wave& w : waves_)
    for (int64_t s = w.s0; s < w.s1; ++s) wave_row0[size_t(s)] = row0(w.s0);
  std::vector<AttentionSegment> segs, store;
  segs.reserve(size_t(c.n_layers * segments()));
  store.reserve(segs.capacity());
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerAttention la = c.attention_of(l);
    const bool sliding = la.kind == AttentionKind::Sliding;
    for (int64_t s = 0; s < segments(); ++s) {
      const ForwardRequest& req = requests_[size_t(s)];
      DeviceCache& dc = *dcaches_[size_t(s)];
      AttentionSegment seg, to;
      seg.kv_head_stride = caches_[size_t(s)]->head_stride(l);
      seg.row0 = row0(s) - wave_row0[size_t(s)];
      const int64_t first = plan_.first_key_of(s, la.kind);  // the first cache position the request sees
      if (!req.decoder) {
        seg.mask.key_group = dc.groups.as<int32_t>();
        seg.mask.query_group = qgroups_ + row0(s);
        if (sliding) seg.mask.window_start = window_start_ + row0(s);
        seg.n_keys = int32_t(plan_.key_ends[size_t(s)]);
        to.k = dc.k[size_t(l)].data();
        to.v = dc.v[size_t(l)].data();
        to.kv_head_stride = seg.kv_head_stride;
      } else {
        seg.n_keys = int32_t(plan_.key_ends[size_t(s)] - first);
        seg.own_keys = int32_t(plan_.canvas_keys[size_t(s)]);
        if (DeviceCache* kept = kept_[size_t(s)]) {
          to.k = kept->k[size_t(l)].data();
          to.v = kept->v[size_t(l)].data();
        }
      }
      const int64_t skip = first * la.head_dim * kv_element_bytes(backend_.kv_type);
      seg.k = static_cast<char*>(dc.k[size_t(l)].data()) + skip;
      seg.v = static_cast<char*>(dc.v[size_t(l)].data()) + skip;
      segs.push_back(seg);
      store.push_back(to);
    }
  }
  segs_ = upload_into(backend_.segs, segs.data(), int64_t(segs.size()));
  store_segs_ = upload_into(backend_.store_segs, store.data(), int64_t(store.size()));
}

// ---- the executor: slots and the end of a pass ----

bool CudaExecutor::supports(const Op& op) const {
  if (op.primitive == Primitive::Moe) return op.layer < 0 || backend_.experts_on_device(op.layer);
  if (op.info().weight == WeightUse::Matrix) {  // the matrices on the device (a harness's query: any)
    if (op.products.empty()) return !op.weight.present() || backend_.has_matrix(op.weight);
    return std::all_of(op.products.begin(), op.products.end(),
                       [&](const Product& p) { return backend_.has_matrix(p.weight); });
  }
  return runs_primitive(op.primitive);
}

void CudaExecutor::run(const Op& op) {
  const OpSpan span(op.primitive == Primitive::Matmul ? matmul_span(op.weight.role)
                                                      : primitive_name(op.primitive));
  TypedExecutor::run(op);
}

float* CudaExecutor::shape(Slot s, int64_t rows, int64_t width) {
  shapes_[size_t(s)] = {rows, width};
  return backend_.slots[size_t(s)].reserve<float>(rows * width);
}

void CudaExecutor::read_slot(Slot s, std::vector<float>& data, int64_t& rows, int64_t& width) {
  const Shape& sh = shapes_[size_t(s)];
  rows = sh.rows;
  width = sh.width;
  data.resize(size_t(rows * width));
  copy_to_host(data.data(), at(s), size_t(rows * width) * 4);
}

void CudaExecutor::write_slot(Slot s, const float* data, int64_t rows, int64_t width) {
  copy_to_device(shape(s, rows, width), data, size_t(rows * width) * 4);
}

void CudaExecutor::finish() {
  if (defer_outputs_) {
    const int64_t V = c_.vocab;
    const float* logits = backend_.logits.as<float>();
    for (int64_t s = 0; s < segments(); ++s) {
      const ForwardRequest& req = requests_[size_t(s)];
      const int64_t rows = int64_t(req.logit_rows.size());
      if (rows) copy_to_host(req.logits, logits + plan_.head_row0[size_t(s)] * V, size_t(rows * V) * 4);
    }
  }
  synchronize();
}

// ---- the executor: the primitives ----

// Token embeddings (scaled) and learned positions (each encoder row's group was recorded in its cache by
// stage).
void CudaExecutor::embed(Slot slot) {
  const int64_t H = c_.hidden;
  float* x = shape(slot, n_, H);
  embed_rows(backend_.matrix({R::TokenEmbd, -1}), tokens_, n_, c_.embedding_scale, x);
  if (model_.position_embd.data) {
    float* rows = backend_.position_rows.reserve<float>(n_ * H);
    embed_rows(backend_.matrix({R::PositionEmbd, -1}), pos_, n_, 1.f, rows);
    cuda::add(x, rows, n_ * H);
  }
}

// Soft = softmax(previous logits) @ E * embedding_scale for each request with previous logits (self_cond)
// or their soft embedding (self_cond_soft), stacked.
void CudaExecutor::self_conditioning_input(Slot slot) {
  const int64_t H = c_.hidden, V = c_.vocab;
  const int64_t rows = plan_.conditioned_rows;
  float* soft = shape(slot, rows, H);
  for (int64_t s : plan_.conditioned) {
    const ForwardRequest& req = requests_[size_t(s)];
    if (req.self_cond) {
      float* p = upload_into(backend_.prev, req.self_cond, req.n * V);
      softmax_rows(p, req.n, V, 1.f, p);
      matmul_transposed(backend_.matrix({R::TokenEmbd, -1}), p, req.n, soft);
    } else {
      copy_to_device(soft, req.self_cond_soft, size_t(req.n * H) * 4);
    }
    soft += req.n * H;
  }
  scale_columns(at(slot), nullptr, rows, H, c_.embedding_scale);
}

void CudaExecutor::add_self_conditioning(Slot slot, Slot mlp_slot) {
  const int64_t H = c_.hidden;
  float* x = at(slot);
  const float* mlp = at(mlp_slot);
  for (int64_t s : plan_.conditioned) {
    const int64_t size = requests_[size_t(s)].n * H;
    cuda::add(x + row0(s) * H, mlp, size);
    mlp += size;
  }
}

// A weightless RMSNorm over each run of consecutive decoder requests' rows.
void CudaExecutor::decoder_norm(Slot slot) {
  const int64_t H = c_.hidden;
  float* x = at(slot);
  for (int64_t s = 0; s < segments();) {
    int64_t e = s;
    while (e < segments() && requests_[size_t(e)].decoder) ++e;
    if (e > s) {
      cuda::rms_norm(x + row0(s) * H, nullptr, row0(e) - row0(s), H, c_.rms_eps, x + row0(s) * H);
      s = e;
    } else {
      ++s;
    }
  }
}

void CudaExecutor::rms_norm(Slot out, Slot in, WeightRef weight) {
  const Shape a = shapes_[size_t(in)];
  const float* src = at(in);
  cuda::rms_norm(src, backend_.vector(weight), a.rows, a.width, c_.rms_eps, shape(out, a.rows, a.width));
}

void CudaExecutor::rms_norm_heads(Slot x, int64_t head_dim, WeightRef weight) {
  const Shape a = shapes_[size_t(x)];
  cuda::rms_norm(at(x), backend_.vector(weight), a.rows * a.width / head_dim, head_dim, c_.rms_eps, at(x));
}

void CudaExecutor::matmul(std::span<const Product> products, Slot in) {
  const Shape a = shapes_[size_t(in)];
  for (const Product& p : products) {
    const DeviceMatrix& w = backend_.matrix(p.weight);
    check(w.cols() == a.width, "cuda matmul: a weight of " + std::to_string(w.cols()) + " columns on rows of " +
                                   std::to_string(a.width));
    const float* x = at(in);  // (before out is sized: out is never in)
    cuda::matmul(w, x, a.rows, shape(p.out, a.rows, w.rows()));
  }
}

void CudaExecutor::copy(Slot out, Slot in) {
  const Shape a = shapes_[size_t(in)];
  const float* src = at(in);
  copy_on_device(shape(out, a.rows, a.width), src, size_t(a.rows * a.width) * 4);
}

void CudaExecutor::add(Slot x, Slot y) {
  const Shape a = shapes_[size_t(x)];
  cuda::add(at(x), at(y), a.rows * a.width);
}

void CudaExecutor::add_bias(Slot x, WeightRef bias) {
  const float* b = backend_.vector(bias);
  if (!b) return;
  const Shape a = shapes_[size_t(x)];
  add_to_rows(at(x), b, a.rows, a.width);
}

void CudaExecutor::gated_activation(Slot g, Slot u) {
  const Shape a = shapes_[size_t(g)];
  if (c_.activation == Activation::GeluTanh) {
    geglu(at(g), at(u), a.rows * a.width, at(g));
  } else {
    swiglu(at(g), at(u), a.rows * a.width, at(g));
  }
}

void CudaExecutor::rope(Slot x, int64_t n_heads, int64_t layer) {
  cuda::rope(at(x), n_, int(n_heads), pos_, c_.attention_of(layer).rope);
}

// Layer l's attention, wave by wave: the wave's encoder requests' K/V rows into their caches (one launch
// per run of consecutive ones), a kept canvas's rows into its store, then one attention launch over the
// wave's rows (stage_attention says what each request sees).
void CudaExecutor::attention(Slot out, Slot q, Slot k, Slot v, int64_t layer) {
  const LayerAttention la = c_.attention_of(layer);
  const int64_t D = la.head_dim, q_width = c_.n_heads * D, kv_width = la.n_kv_heads * D;
  check(shapes_[size_t(q)].width == q_width && shapes_[size_t(k)].width == kv_width &&
            shapes_[size_t(v)].width == kv_width,
        "cuda attention: Q, K or V of another width than layer " + std::to_string(layer) + "'s");
  const float *qs = at(q), *ks = at(k), *vs = at(v);
  float* o = shape(out, n_, q_width);
  const AttentionShape shape = attention_shape(c_, la);
  const AttentionSegment* segs = segs_ + layer * segments();
  const AttentionSegment* store = store_segs_ + layer * segments();
  const OpSpan span("attention: kernel (and an encoder's K/V into the caches)");
  for (const Wave& w : waves_) {
    const int64_t ra = row0(w.s0), rows = row0(w.s1) - ra;
    if (w.canvas) {
      // Rows of kv_width floats to their canvas rows of the store (f32, one head of the whole width).
      scatter_kv(ks + ra * kv_width, vs + ra * kv_width, rows, 1, kv_width, store_pos_ + ra, store, seg_of_row_ + ra,
                 KvType::F32);
      const DeviceCache& kept = *kept_[size_t(w.s0)];
      attention_batch(qs + ra * q_width, rows, q_width, segs, seg_of_row_ + ra, backend_.kv_type,
                      kept.k[size_t(layer)].as<float>(), kept.v[size_t(layer)].as<float>(), kv_width, shape,
                      o + ra * q_width, q_width);
      continue;
    }
    bool decoders = false;
    for (int64_t s = w.s0; s < w.s1;) {
      if (requests_[size_t(s)].decoder) {
        decoders = true;
        ++s;
        continue;
      }
      int64_t e = s;
      while (e < w.s1 && !requests_[size_t(e)].decoder) ++e;
      scatter_kv(ks + row0(s) * kv_width, vs + row0(s) * kv_width, row0(e) - row0(s), la.n_kv_heads, D,
                 store_pos_ + row0(s), store, seg_of_row_ + row0(s), backend_.kv_type);
      s = e;
    }
    attention_batch(qs + ra * q_width, rows, q_width, segs, seg_of_row_ + ra, backend_.kv_type,
                    decoders ? ks + ra * kv_width : nullptr, decoders ? vs + ra * kv_width : nullptr, kv_width, shape,
                    o + ra * q_width, q_width);
  }
}

// Mixture of experts without a round trip to the host: the router's product, then routing (softmax, top-k,
// weights: ops softmax / top_k's order) and the slots of the routed rows grouped by expert on the device;
// every row gathered once per expert it picked; each projection one grouped product over all experts;
// combine_rows sums each row's results in ascending expert order, as the CPU does.
void CudaExecutor::moe(Slot out_slot, Slot router_slot, Slot expert_slot, int64_t l) {
  const ModelConfig& c = c_;
  CudaBackend& b = backend_;
  const int64_t n = shapes_[size_t(router_slot)].rows;
  const int64_t E = c.n_experts, K = c.n_experts_used, H = c.hidden, I = c.expert_ffn, slots = n * K;
  const float* router_in = at(router_slot);
  const float* expert_in = at(expert_slot);
  float* out = shape(out_slot, n, H);
  int32_t* expert_of = b.moe_expert.reserve<int32_t>(slots);
  float* weight_of = b.moe_weight.reserve<float>(slots);
  int32_t* first = b.moe_first.reserve<int32_t>(E + 1);
  int32_t* slot_row = b.moe_rows.reserve<int32_t>(slots);
  int32_t* slot_of = b.moe_slot.reserve<int32_t>(slots);
  int32_t* begin = b.moe_begin.reserve<int32_t>(n + 1);
  {
    const OpSpan span("MoE: router product, routing, slot plan");
    float* logits = b.router_logits.reserve<float>(n * E);
    cuda::matmul(b.matrix({R::Router, l}), router_in, n, logits);
    moe_route(logits, n, E, K, c.expert_weights_norm, b.vector({R::PerExpertScale, l}), expert_of, weight_of);
    moe_plan(expert_of, n, K, E, first, slot_row, slot_of, begin);
  }
  const OpSpan span("MoE: gather, expert products, combine");
  float* gathered = b.gathered.reserve<float>(slots * H);
  gather_rows(expert_in, H, slot_row, slots, gathered);
  float* act = b.expert_act.reserve<float>(slots * I);
  const bool gelu = c.activation == Activation::GeluTanh;
  if (b.has_matrix({R::GateUpExps, l})) {
    float* gu = b.expert_gu.reserve<float>(slots * 2 * I);
    matmul_grouped(b.matrix({R::GateUpExps, l}), E, first, gathered, gu);
    glu_halves(gu, slots, I, gelu, act);
  } else {
    float* u = b.expert_gu.reserve<float>(slots * I);
    matmul_grouped(b.matrix({R::GateExps, l}), E, first, gathered, act);
    matmul_grouped(b.matrix({R::UpExps, l}), E, first, gathered, u);
    if (gelu) {
      geglu(act, u, slots * I, act);
    } else {
      swiglu(act, u, slots * I, act);
    }
  }
  float* res = b.expert_res.reserve<float>(slots * H);
  matmul_grouped(b.matrix({R::DownExps, l}), E, first, act, res);
  combine_rows(res, H, begin, slot_of, weight_of, n, out);
}

// Gemma 4's router input: RMSNorm(in) (no weight) * router_scale / sqrt(hidden).
void CudaExecutor::router_input(Slot out, Slot in, int64_t layer) {
  const int64_t H = c_.hidden, rows = shapes_[size_t(in)].rows;
  const float* src = at(in);
  float* router = shape(out, rows, H);
  cuda::rms_norm(src, nullptr, rows, H, c_.rms_eps, router);
  if (c_.router_norm)
    scale_columns(router, backend_.vector({R::RouterScale, layer}), rows, H, 1.f / std::sqrt(float(H)));
}

// Gemma 4's layer end: x = (x + y) * the layer's scalar, the encoder's or the decoder's, one launch per run of
// consecutive requests of one kind.
void CudaExecutor::scaled_residual(Slot x, Slot y, int64_t layer) {
  const int64_t H = c_.hidden;
  const LayerWeights& w = model_.layers[size_t(layer)];
  float* xs = at(x);
  const float* ys = at(y);
  for (int64_t s = 0; s < segments();) {
    const bool decoder = requests_[size_t(s)].decoder;
    int64_t e = s;
    while (e < segments() && requests_[size_t(e)].decoder == decoder) ++e;
    add_then_scale(xs + row0(s) * H, ys + row0(s) * H, (row0(e) - row0(s)) * H,
                   decoder ? w.layer_scalar_decoder : w.layer_scalar_encoder);
    s = e;
  }
}

void CudaExecutor::head_rows(Slot head, Slot x) {
  const int64_t H = c_.hidden;
  const float* src = at(x);
  gather_rows(src, H, sel_rows_, head_total_, shape(head, head_total_, H));
}

// The most logits rows one product of the head writes: every wanted row of the pass when the outputs stay
// on the device until finish, else the larger of the largest request's rows and 256 (a batch of AR steps
// in one product, without a [rows x vocab] buffer for a whole batch of canvases).
int64_t CudaExecutor::head_budget() const {
  if (defer_outputs_) return head_total_;
  int64_t largest = 0;
  for (const ForwardRequest& req : requests_) largest = std::max(largest, int64_t(req.logit_rows.size()));
  return std::min(head_total_, std::max<int64_t>(largest, 256));
}

// The Head rows of consecutive requests (in the Head slot's order) through the output matrix together,
// head_budget() rows at most a product (a batch of AR steps reads the output matrix once), soft-capped;
// then each request's logits are copied out, or its fused head's statistics (and soft embedding) taken.
void CudaExecutor::logits(Slot head, WeightRef weight) {
  const int64_t H = c_.hidden, V = c_.vocab, budget = head_budget();
  const DeviceMatrix& w = backend_.matrix(weight);
  const float* rows_in = at(head);
  float* all = backend_.logits.reserve<float>(budget * V);
  const std::vector<int64_t>& head_order = plan_.head_order;
  const int64_t order = int64_t(head_order.size());
  auto rows_of = [&](int64_t s) { return int64_t(requests_[size_t(s)].logit_rows.size()); };
  for (int64_t i0 = 0; i0 < order;) {
    int64_t i1 = i0 + 1, rows = rows_of(head_order[size_t(i0)]);  // head_order[i0 .. i1) in one product
    while (i1 < order && rows + rows_of(head_order[size_t(i1)]) <= budget)
      rows += rows_of(head_order[size_t(i1++)]);
    const int64_t first = plan_.head_row0[size_t(head_order[size_t(i0)])];
    float* logits = all + (defer_outputs_ ? first * V : 0);
    if (rows) {
      const OpSpan span("head: output product, soft-cap");
      cuda::matmul(w, rows_in + first * H, rows, logits);
      if (c_.logit_softcap > 0) softcap(logits, rows * V, c_.logit_softcap);
    }
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t s = head_order[size_t(i)];
      const ForwardRequest& req = requests_[size_t(s)];
      const int64_t at_row = plan_.head_row0[size_t(s)], n = rows_of(s);
      if (n == 0) continue;
      check(!req.soft_embedding_out || weight.role == R::TokenEmbd,
            "forward: a soft embedding output needs a head tied to the token embedding; '" + c_.arch +
                "' has its own output matrix");
      float* own = logits + (at_row - first) * V;
      if (!req.head_stats) {
        if (!defer_outputs_) copy_to_host(req.logits, own, size_t(n * V) * 4);  // else: finish()
        continue;
      }
      const OpSpan span("head: statistics, soft embedding");
      const float T = req.head.temperature;  // head_stats refuses a negative or NaN one
      HeadRowStats* stats = backend_.stats.reserve<HeadRowStats>(n);
      head_stats(own, n, V, T, req.head.seed, row_ids_ ? row_ids_ + at_row : nullptr, stats);
      copy_to_host(req.head_stats, stats, size_t(n) * sizeof(HeadRowStats));
      if (req.soft_embedding_out) {
        // The probabilities replace the logits (the statistics are taken): no second [rows x vocab] buffer.
        softmax_rows(own, n, V, T > 0 ? 1.f / T : 1.f, own);
        float* soft = backend_.soft_out.reserve<float>(n * H);
        matmul_transposed(backend_.matrix({R::TokenEmbd, -1}), own, n, soft);
        copy_to_host(req.soft_embedding_out, soft, size_t(n * H) * 4);
      }
    }
    i0 = i1;
  }
}

}  // namespace

std::unique_ptr<PrimitiveBackend> make_backend(const Model& model, const BackendOptions& options) {
  return std::make_unique<CudaBackend>(model, options);
}

bool runs_primitive(Primitive p) { return int(p) < kPrimitives; }

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
