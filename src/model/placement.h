// Placement per operation: model/transformer.h's primitives run on a backend's executor where it supports
// them and on the CPU's otherwise, each slot's value copied to the side that reads it next (the copies
// counted). So a backend that runs only some primitives still runs every model, and a user can keep
// some on the CPU (--cpu-moe: the experts in RAM).
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/transformer.h"

namespace canvas {

struct PlacementStats {
  std::array<int64_t, kPrimitives> on_backend{}, on_cpu{};  // primitive calls run on each side
  int64_t copies_to_backend = 0, copies_to_cpu = 0;         // slot copies between them
  int64_t bytes_copied = 0;
  void add(const PlacementStats& other);
};

// A backend of single primitives: for each pass, an executor over storage of its own, which runs the calls
// it supports() and leaves the others to the CPU.
class PrimitiveBackend {
 public:
  virtual ~PrimitiveBackend() = default;
  virtual std::string name() const = 0;
  virtual std::unique_ptr<Executor> executor(const Model& model, std::span<KvCache* const> caches,
                                             std::span<const ForwardRequest> requests, const ForwardPlan& plan,
                                             ThreadPool* pool) = 0;
  // Runs one pass: `pass` runs the model (through placement) with `device`, the executor executor() made
  // for it, and the pass's results are then where its requests want them. The default calls pass; a device
  // backend may instead replay what an earlier pass of the same shape queued (CUDA graphs), and waits for
  // its device here.
  virtual void run(Executor& device, const std::function<void()>& pass) {
    (void)device;
    pass();
  }
  // True when the executor runs every primitive of every model: forward_batch then leaves the CPU's thread
  // pool asleep during the pass (unless keep_on_cpu keeps some calls on the CPU).
  virtual bool runs_every_primitive() const { return false; }
  // Primitive calls the user keeps on the CPU whatever the backend supports (layer: the call's layer, -1
  // for global ones).
  std::function<bool(Primitive, int64_t layer)> keep_on_cpu;
  // What the passes so far placed and copied.
  PlacementStats stats() const;
  void add_stats(const PlacementStats& s);

 private:
  mutable std::mutex mutex_;
  PlacementStats stats_;
};

// The executor that places: each call goes to `backend` when it supports it (and keep_on_cpu does not
// keep it), else to `cpu`; a slot a call reads is copied first when its current value is on the other side.
class PlacedExecutor final : public Executor {
 public:
  PlacedExecutor(Executor& cpu, Executor& backend, std::function<bool(Primitive, int64_t)> keep_on_cpu = {});
  const PlacementStats& stats() const { return stats_; }

  // Runs op on the side placement chooses, after bringing there the slots its primitive reads
  // (primitive_info); the slots it writes are then marked as held there only.
  void run(const Op& op) override;
  void read_slot(Slot s, std::vector<float>& data, int64_t& rows, int64_t& width) override;
  void write_slot(Slot s, const float* data, int64_t rows, int64_t width) override;

 private:
  enum Side : uint8_t { kCpu = 1, kBackend = 2 };  // bits of where_: the sides holding a slot's current value
  void bring(Slot s, uint8_t side);

  Executor& cpu_;
  Executor& backend_;
  std::function<bool(Primitive, int64_t)> keep_on_cpu_;
  std::array<uint8_t, kSlots> where_{};
  PlacementStats stats_;
  std::vector<float> staging_;
};

// A backend that runs only the matrix products, with the CPU's kernels on storage of its own: every other
// primitive falls back to the CPU, so a pass through it exercises placement and its copies on a machine
// without a GPU (logits bit for bit the CPU's). Named "partial" in the conformance harness.
std::shared_ptr<PrimitiveBackend> make_partial_backend();

}  // namespace canvas
