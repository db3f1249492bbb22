// model/placement.h: the placing executor, and the matmul-only backend that exercises it on the CPU.
#include "model/placement.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "ops/matmul.h"

namespace canvas {

void PlacementStats::add(const PlacementStats& other) {
  for (int i = 0; i < kPrimitives; ++i) {
    on_backend[size_t(i)] += other.on_backend[size_t(i)];
    on_cpu[size_t(i)] += other.on_cpu[size_t(i)];
  }
  copies_to_backend += other.copies_to_backend;
  copies_to_cpu += other.copies_to_cpu;
  bytes_copied += other.bytes_copied;
}

PlacementStats PrimitiveBackend::stats() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void PrimitiveBackend::add_stats(const PlacementStats& s) {
  const std::lock_guard<std::mutex> lock(mutex_);
  stats_.add(s);
}

PlacedExecutor::PlacedExecutor(Executor& cpu, Executor& backend, std::function<bool(Primitive, int64_t)> keep_on_cpu)
    : cpu_(cpu), backend_(backend), keep_on_cpu_(std::move(keep_on_cpu)) {}

void PlacedExecutor::bring(Slot s, uint8_t side) {
  uint8_t& held = where_[size_t(s)];
  if (held & side) return;
  check(held != 0, std::string("placement: slot ") + std::to_string(int(s)) + " is read before it is written");
  Executor& from = side == kCpu ? backend_ : cpu_;
  Executor& to = side == kCpu ? cpu_ : backend_;
  int64_t rows = 0, width = 0;
  from.read_slot(s, staging_, rows, width);
  to.write_slot(s, staging_.data(), rows, width);
  held |= side;
  (side == kCpu ? stats_.copies_to_cpu : stats_.copies_to_backend) += 1;
  stats_.bytes_copied += rows * width * int64_t(sizeof(float));
}

bool PlacedExecutor::runs_on_backend(Primitive p, WeightRef weight, int64_t layer) const {
  return !(keep_on_cpu_ && keep_on_cpu_(p, layer)) && backend_.supports(p, weight);
}

Executor& PlacedExecutor::place_on(bool on_backend, Primitive p, std::initializer_list<Slot> reads,
                                   std::initializer_list<Slot> writes) {
  const uint8_t side = on_backend ? kBackend : kCpu;
  for (Slot s : reads) bring(s, side);
  for (Slot s : writes) where_[size_t(s)] = side;
  (on_backend ? stats_.on_backend : stats_.on_cpu)[size_t(p)] += 1;
  return on_backend ? backend_ : cpu_;
}

void PlacedExecutor::read_slot(Slot s, std::vector<float>& data, int64_t& rows, int64_t& width) {
  bring(s, kCpu);
  cpu_.read_slot(s, data, rows, width);
}

void PlacedExecutor::write_slot(Slot s, const float* data, int64_t rows, int64_t width) {
  cpu_.write_slot(s, data, rows, width);
  where_[size_t(s)] = kCpu;
}

void PlacedExecutor::embed(Slot x) { place(Primitive::Embed, WeightRef{}, -1, {}, {x}).embed(x); }

bool PlacedExecutor::self_conditioning_input(Slot soft) {
  // Placed as a write of `soft`; when it returns false nothing was written, and nothing reads soft.
  return place(Primitive::SelfConditioningInput, WeightRef{}, -1, {}, {soft}).self_conditioning_input(soft);
}
void PlacedExecutor::add_self_conditioning(Slot x, Slot mlp) {
  place(Primitive::AddSelfConditioning, WeightRef{}, -1, {x, mlp}, {x}).add_self_conditioning(x, mlp);
}
void PlacedExecutor::decoder_norm(Slot x) { place(Primitive::DecoderNorm, WeightRef{}, -1, {x}, {x}).decoder_norm(x); }
void PlacedExecutor::rms_norm(Slot out, Slot in, WeightRef weight) {
  place(Primitive::RmsNorm, weight, weight.layer, {in}, {out}).rms_norm(out, in, weight);
}
void PlacedExecutor::rms_norm_heads(Slot x, int64_t head_dim, WeightRef weight) {
  place(Primitive::RmsNormHeads, weight, weight.layer, {x}, {x}).rms_norm_heads(x, head_dim, weight);
}
void PlacedExecutor::matmul(std::span<const Product> products, Slot in) {
  bool on_backend = true;
  for (const Product& p : products) on_backend = on_backend && runs_on_backend(Primitive::Matmul, p.weight, p.weight.layer);
  Executor& ex = place_on(on_backend, Primitive::Matmul, {in}, {});
  for (const Product& p : products) where_[size_t(p.out)] = on_backend ? kBackend : kCpu;
  ex.matmul(products, in);
}
void PlacedExecutor::copy(Slot out, Slot in) { place(Primitive::Copy, WeightRef{}, -1, {in}, {out}).copy(out, in); }
void PlacedExecutor::add(Slot x, Slot y) { place(Primitive::Add, WeightRef{}, -1, {x, y}, {x}).add(x, y); }
void PlacedExecutor::add_bias(Slot x, WeightRef bias) {
  place(Primitive::AddBias, bias, bias.layer, {x}, {x}).add_bias(x, bias);
}
void PlacedExecutor::gated_activation(Slot g, Slot u) {
  place(Primitive::GatedActivation, WeightRef{}, -1, {g, u}, {g}).gated_activation(g, u);
}
void PlacedExecutor::rope(Slot x, int64_t n_heads, int64_t layer) {
  place(Primitive::Rope, WeightRef{}, layer, {x}, {x}).rope(x, n_heads, layer);
}
void PlacedExecutor::attention(Slot out, Slot q, Slot k, Slot v, int64_t layer) {
  place(Primitive::Attention, WeightRef{}, layer, {q, k, v}, {out}).attention(out, q, k, v, layer);
}
void PlacedExecutor::moe(Slot out, Slot router_in, Slot expert_in, int64_t layer) {
  place(Primitive::Moe, {TensorRole::Router, layer}, layer, {router_in, expert_in}, {out}).moe(out, router_in, expert_in, layer);
}
void PlacedExecutor::router_input(Slot out, Slot in, int64_t layer) {
  place(Primitive::RouterInput, WeightRef{}, layer, {in}, {out}).router_input(out, in, layer);
}
void PlacedExecutor::scaled_residual(Slot x, Slot y, int64_t layer) {
  place(Primitive::ScaledResidual, WeightRef{}, layer, {x, y}, {x}).scaled_residual(x, y, layer);
}
void PlacedExecutor::head_rows(Slot head, Slot x) { place(Primitive::HeadRows, WeightRef{}, -1, {x}, {head}).head_rows(head, x); }
void PlacedExecutor::logits(Slot head, WeightRef weight) {
  place(Primitive::Logits, weight, -1, {head}, {}).logits(head, weight);
}

namespace {

// The matrix products of model/cpu_executor.cpp, on slots of its own.
class MatmulOnlyExecutor final : public Executor {
 public:
  MatmulOnlyExecutor(const Model& model, ThreadPool* pool) : model_(model), pool_(pool) {}

  bool supports(Primitive p, WeightRef) const override { return p == Primitive::Matmul; }
  void read_slot(Slot s, std::vector<float>& data, int64_t& rows, int64_t& width) override {
    const Held& h = slots_[size_t(s)];
    rows = h.rows;
    width = h.width;
    data.assign(h.data.begin(), h.data.begin() + rows * width);
  }
  void write_slot(Slot s, const float* data, int64_t rows, int64_t width) override {
    Held& h = slots_[size_t(s)];
    h.data.assign(data, data + rows * width);
    h.rows = rows;
    h.width = width;
  }
  void matmul(std::span<const Product> products, Slot in) override {
    const Held& x = slots_[size_t(in)];
    std::vector<MatmulTarget> targets;
    for (const Product& p : products) {
      const TensorView& w = *weight_slot(model_, p.weight.role, p.weight.layer);
      Held& out = slots_[size_t(p.out)];
      out.rows = x.rows;
      out.width = w.rows();
      out.data.resize(size_t(out.rows * out.width));
      targets.push_back({&w, out.data.data(), w.rows()});
    }
    // As the CPU executor calls them: one product alone, several in one fused loop.
    if (targets.size() == 1) {
      canvas::matmul(*targets[0].w, x.data.data(), x.rows, targets[0].y, pool_);
    } else {
      matmul_fused(targets.data(), int(targets.size()), x.data.data(), x.width, x.rows, pool_);
    }
  }

  void embed(Slot) override { refuse(Primitive::Embed); }
  bool self_conditioning_input(Slot) override { refuse(Primitive::SelfConditioningInput); }
  void add_self_conditioning(Slot, Slot) override { refuse(Primitive::AddSelfConditioning); }
  void decoder_norm(Slot) override { refuse(Primitive::DecoderNorm); }
  void rms_norm(Slot, Slot, WeightRef) override { refuse(Primitive::RmsNorm); }
  void rms_norm_heads(Slot, int64_t, WeightRef) override { refuse(Primitive::RmsNormHeads); }
  void copy(Slot, Slot) override { refuse(Primitive::Copy); }
  void add(Slot, Slot) override { refuse(Primitive::Add); }
  void add_bias(Slot, WeightRef) override { refuse(Primitive::AddBias); }
  void gated_activation(Slot, Slot) override { refuse(Primitive::GatedActivation); }
  void rope(Slot, int64_t, int64_t) override { refuse(Primitive::Rope); }
  void attention(Slot, Slot, Slot, Slot, int64_t) override { refuse(Primitive::Attention); }
  void moe(Slot, Slot, Slot, int64_t) override { refuse(Primitive::Moe); }
  void router_input(Slot, Slot, int64_t) override { refuse(Primitive::RouterInput); }
  void scaled_residual(Slot, Slot, int64_t) override { refuse(Primitive::ScaledResidual); }
  void head_rows(Slot, Slot) override { refuse(Primitive::HeadRows); }
  void logits(Slot, WeightRef) override { refuse(Primitive::Logits); }

 private:
  struct Held {
    std::vector<float> data;
    int64_t rows = 0, width = 0;
  };
  [[noreturn]] static void refuse(Primitive p) {
    throw Error(std::string("the partial backend does not run ") + primitive_name(p));
  }
  const Model& model_;
  ThreadPool* pool_;
  std::array<Held, kSlots> slots_;
};

class PartialBackend final : public PrimitiveBackend {
 public:
  std::string name() const override { return "partial"; }
  std::unique_ptr<Executor> executor(const Model& model, std::span<KvCache* const>, std::span<const ForwardRequest>,
                                     const ForwardPlan&, ThreadPool* pool) override {
    return std::make_unique<MatmulOnlyExecutor>(model, pool);
  }
};

}  // namespace

std::shared_ptr<PrimitiveBackend> make_partial_backend() { return std::make_shared<PartialBackend>(); }

}  // namespace canvas
