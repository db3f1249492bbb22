// The CPU's executor of model/transformer.h: each primitive is a call of this machine's kernels (ops/),
// over one pass of a batch of forward requests (model/model.h). forward_batch runs the model with it;
// placement and the conformance harness run single primitives with it.
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "model/model.h"
#include "model/transformer.h"
#include "ops/matmul.h"
#include "ops/ops.h"

namespace canvas {

// A slot's floats: rows x width, the storage kept between uses (it only grows).
struct SlotBuffer {
  std::vector<float> data;
  int64_t rows = 0, width = 0;
  float* shape(int64_t r, int64_t w) {
    if (int64_t(data.size()) < r * w) data.resize(size_t(r * w));
    rows = r;
    width = w;
    return data.data();
  }
  float* ptr() { return data.data(); }
  const float* ptr() const { return data.data(); }
  int64_t size() const { return rows * width; }
};

// The kernels the primitives call: this machine's SIMD kernels (kFastKernels), or their scalar twins
// (kReferenceKernels: ops.h's reference namespace, matmul_reference), which the conformance harness checks
// the others against. The self-conditioning input's soft embedding and the fused head use the SIMD kernels
// in both.
struct CpuKernels {
  void (*rms_norm)(const float* x, const float* w, int64_t n, float eps, float* y);
  void (*rope)(float* x, int64_t n_rows, int n_heads, const int32_t* pos, const RopeParams& p);
  void (*swiglu)(const float* gate, const float* up, int64_t n, float* out);
  void (*geglu)(const float* gate, const float* up, int64_t n, float* out);
  void (*softcap)(float* x, int64_t n, float cap);
  // y = x @ w^T over m rows (ops/matmul.h), and several products of the same x.
  void (*matmul)(const TensorView& w, const float* x, int64_t m, float* y, ThreadPool* pool);
  void (*matmul_fused)(const MatmulTarget* targets, int count, const float* x, int64_t ldx, int64_t m,
                       ThreadPool* pool);
  void (*attention)(const float* q, int64_t n_q, int64_t ldq, const float* k, const float* v, int64_t n_keys,
                    int64_t kv_head_stride, const AttentionMask& mask, const AttentionShape& shape, float* out,
                    int64_t ldo, ThreadPool* pool);
};
extern const CpuKernels kFastKernels, kReferenceKernels;

// Rows of all requests are stacked (segment s holds rows [row0[s], row0[s] + requests[s].n)). Row-wise
// primitives run over the whole batch at once, so the weights stream through memory once per batch;
// attention, the self-conditioning input and the head are per request. Each request's results are bit
// for bit what it gets alone (matmul and attention rows do not depend on the other rows).
class CpuExecutor final : public TypedExecutor<CpuExecutor> {
 public:
  CpuExecutor(const Model& model, std::span<KvCache* const> caches, std::span<const ForwardRequest> requests,
              const ForwardPlan& plan, ThreadPool* pool, const CpuKernels& kernels = kFastKernels);

  void read_slot(Slot s, std::vector<float>& data, int64_t& rows, int64_t& width) override;
  void write_slot(Slot s, const float* data, int64_t rows, int64_t width) override;

 private:
  friend TypedExecutor<CpuExecutor>;
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

  SlotBuffer& at(Slot s) { return slots_[size_t(s)]; }
  const TensorView& view(WeightRef w) const;
  int64_t segments() const { return int64_t(requests_.size()); }
  int64_t row0(int64_t s) const { return plan_.row0[size_t(s)]; }
  void norm_rows(const float* x, int64_t n, int64_t width, const TensorView& w, float* y) const;
  void attend(int64_t l, int64_t s, const SlotBuffer& q, const SlotBuffer& k, const SlotBuffer& v, SlotBuffer& out);

  const Model& model_;
  const ModelConfig& c_;
  std::span<KvCache* const> caches_;
  std::span<const ForwardRequest> requests_;
  const ForwardPlan& plan_;
  ThreadPool* pool_;
  const CpuKernels& k_;
  const int64_t n_;  // rows of the whole batch
  std::array<SlotBuffer, kSlots> slots_;
  std::vector<float> canvas_keys_, canvas_values_;  // decoder: [visible cache ; canvas] K/V of one layer
  std::vector<float> row_scalar_;      // Gemma 4: each row's layer scalar (encoder or decoder)
};

}  // namespace canvas
