// The conformance harness (bench/backend_ops.h): it passes the CPU's kernels and the partial backend, and
// it catches a backend whose products are off.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>

#include "bench/backend_ops.h"
#include "core/error.h"
#include "model/placement.h"

namespace canvas {
namespace {

// The partial backend's products with one value per call off by 1% of the largest.
class SkewedProducts final : public Executor {
 public:
  explicit SkewedProducts(std::unique_ptr<Executor> inner) : inner_(std::move(inner)) {}
  bool supports(Primitive p, WeightRef w) const override { return inner_->supports(p, w); }
  void read_slot(Slot s, std::vector<float>& d, int64_t& r, int64_t& w) override { inner_->read_slot(s, d, r, w); }
  void write_slot(Slot s, const float* d, int64_t r, int64_t w) override { inner_->write_slot(s, d, r, w); }
  void matmul(std::span<const Product> products, Slot in) override {
    inner_->matmul(products, in);
    std::vector<float> values;
    int64_t rows = 0, width = 0;
    inner_->read_slot(products[0].out, values, rows, width);
    float largest = 0;
    for (float v : values) largest = std::max(largest, std::fabs(v));
    values[values.size() / 2] += 0.01f * largest;
    inner_->write_slot(products[0].out, values.data(), rows, width);
  }
  void embed(Slot) override { no(); }
  bool self_conditioning_input(Slot) override { no(); }
  void add_self_conditioning(Slot, Slot) override { no(); }
  void decoder_norm(Slot) override { no(); }
  void rms_norm(Slot, Slot, WeightRef) override { no(); }
  void rms_norm_heads(Slot, int64_t, WeightRef) override { no(); }
  void copy(Slot, Slot) override { no(); }
  void add(Slot, Slot) override { no(); }
  void add_bias(Slot, WeightRef) override { no(); }
  void gated_activation(Slot, Slot) override { no(); }
  void rope(Slot, int64_t, int64_t) override { no(); }
  void attention(Slot, Slot, Slot, Slot, int64_t) override { no(); }
  void moe(Slot, Slot, Slot, int64_t) override { no(); }
  void router_input(Slot, Slot, int64_t) override { no(); }
  void scaled_residual(Slot, Slot, int64_t) override { no(); }
  void head_rows(Slot, Slot) override { no(); }
  void logits(Slot, WeightRef) override { no(); }

 private:
  [[noreturn]] static void no() { throw std::logic_error("not supported"); }
  std::unique_ptr<Executor> inner_;
};

class SkewedBackend final : public PrimitiveBackend {
 public:
  std::string name() const override { return "skewed"; }
  std::unique_ptr<Executor> executor(const Model& model, std::span<KvCache* const> caches,
                                     std::span<const ForwardRequest> requests, const ForwardPlan& plan,
                                     ThreadPool* pool) override {
    return std::make_unique<SkewedProducts>(partial_->executor(model, caches, requests, plan, pool));
  }

 private:
  std::shared_ptr<PrimitiveBackend> partial_ = make_partial_backend();
};

TEST(BackendOps, ListNamesEveryPrimitiveWithItsBackends) {
  const std::string list = bench::backend_ops_list();
  for (int i = 0; i < kPrimitives; ++i) EXPECT_NE(list.find(primitive_name(Primitive(i))), std::string::npos);
  EXPECT_NE(list.find("matmul                    cpu partial"), std::string::npos) << list;
}

TEST(BackendOps, CatchesABackendWhoseProductsAreOff) {
  bench::BackendOpsOptions options;
  options.backend = "skewed";
  options.primitive = "matmul";
  std::FILE* sink = std::tmpfile();
  const bench::BackendOpsResult skewed = bench::run_backend_ops(options, sink, std::make_shared<SkewedBackend>(), 1e-4);
  EXPECT_GT(skewed.cases, 0);
  EXPECT_EQ(skewed.failed, skewed.cases);  // every product case has one value 1% off
  options.backend = "partial";
  const bench::BackendOpsResult partial = bench::run_backend_ops(options, sink, make_partial_backend(), 0.0);
  EXPECT_EQ(partial.cases, skewed.cases);
  EXPECT_EQ(partial.failed, 0);
  std::fclose(sink);
}

TEST(BackendOps, UnknownBackendOrPrimitiveIsRefused) {
  bench::BackendOpsOptions options;
  options.backend = "tpu";
  EXPECT_THROW(bench::run_backend_ops(options, stdout), Error);
  options.backend = "cpu";
  options.primitive = "convolution";
  EXPECT_THROW(bench::run_backend_ops(options, stdout), Error);
}

}  // namespace
}  // namespace canvas
