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

void PlacedExecutor::run(const Op& op) {
  const PrimitiveInfo& info = op.info();
  const bool on_backend = !(keep_on_cpu_ && keep_on_cpu_(op.primitive, op.layer)) && backend_.supports(op);
  const uint8_t side = on_backend ? kBackend : kCpu;
  for (int i = 0; i < info.reads; ++i) bring(op.in[size_t(i)], side);
  if (info.reads_out) bring(op.out, side);
  if (info.writes_out) where_[size_t(op.out)] = side;
  for (const Product& p : op.products) where_[size_t(p.out)] = side;
  (on_backend ? stats_.on_backend : stats_.on_cpu)[size_t(op.primitive)] += 1;
  (on_backend ? backend_ : cpu_).run(op);
}

void PlacedExecutor::read_slot(Slot s, std::vector<float>& data, int64_t& rows, int64_t& width) {
  bring(s, kCpu);
  cpu_.read_slot(s, data, rows, width);
}

void PlacedExecutor::write_slot(Slot s, const float* data, int64_t rows, int64_t width) {
  cpu_.write_slot(s, data, rows, width);
  where_[size_t(s)] = kCpu;
}

namespace {

// The matrix products of model/cpu_executor.cpp, on slots of its own.
class MatmulOnlyExecutor final : public Executor {
 public:
  MatmulOnlyExecutor(const Model& model, ThreadPool* pool) : model_(model), pool_(pool) {}

  bool supports(const Op& op) const override { return op.primitive == Primitive::Matmul; }
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
  void run(const Op& op) override {
    if (!supports(op)) throw Error(std::string("the partial backend does not run ") + primitive_name(op.primitive));
    const Held& x = slots_[size_t(op.in[0])];
    std::vector<MatmulTarget> targets;
    for (const Product& p : op.products) {
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

 private:
  struct Held {
    std::vector<float> data;
    int64_t rows = 0, width = 0;
  };
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
