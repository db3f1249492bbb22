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

// A backend of single primitives: for each pass, an executor over storage of its own. Primitives that
// keep state between calls come in pairs a backend supports together or not at all
// (self_conditioning_input with add_self_conditioning, head_rows with logits).
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

  void read_slot(Slot s, std::vector<float>& data, int64_t& rows, int64_t& width) override;
  void write_slot(Slot s, const float* data, int64_t rows, int64_t width) override;
  void embed(Slot x) override;
  bool self_conditioning_input(Slot soft) override;
  void add_self_conditioning(Slot x, Slot mlp) override;
  void decoder_norm(Slot x) override;
  void rms_norm(Slot out, Slot in, WeightRef weight) override;
  void rms_norm_heads(Slot x, int64_t head_dim, WeightRef weight) override;
  void matmul(std::span<const Product> products, Slot in) override;
  void copy(Slot out, Slot in) override;
  void add(Slot x, Slot y) override;
  void add_bias(Slot x, WeightRef bias) override;
  void gated_activation(Slot g, Slot u) override;
  void rope(Slot x, int64_t n_heads, int64_t layer) override;
  void attention(Slot out, Slot q, Slot k, Slot v, int64_t layer) override;
  void moe(Slot out, Slot router_in, Slot expert_in, int64_t layer) override;
  void router_input(Slot out, Slot in, int64_t layer) override;
  void scaled_residual(Slot x, Slot y, int64_t layer) override;
  void head_rows(Slot head, Slot x) override;
  void logits(Slot head, WeightRef weight) override;

 private:
  enum Side : uint8_t { kCpu = 1, kBackend = 2 };  // bits of where_: the sides holding a slot's current value
  // The executor that runs primitive p (weight: the one it reads, if any; layer: its layer or -1), with the
  // slots it reads brought to that side; the slots it writes are then marked as held there only.
  Executor& place(Primitive p, WeightRef weight, int64_t layer, std::initializer_list<Slot> reads,
                  std::initializer_list<Slot> writes) {
    return place_on(runs_on_backend(p, weight, layer), p, reads, writes);
  }
  bool runs_on_backend(Primitive p, WeightRef weight, int64_t layer) const;
  Executor& place_on(bool on_backend, Primitive p, std::initializer_list<Slot> reads, std::initializer_list<Slot> writes);
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
