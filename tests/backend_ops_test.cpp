// The conformance harness (bench/backend_ops.h): it passes the CPU's kernels and the partial backend, and
// it catches a backend whose products are off.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <memory>

#include "bench/backend_ops.h"
#include "core/error.h"
#include "model/placement.h"

namespace canvas {
namespace {

// The partial backend's products with one value per call off by 1% of the largest.
class SkewedProducts final : public Executor {
 public:
  explicit SkewedProducts(std::unique_ptr<Executor> inner) : inner_(std::move(inner)) {}
  bool supports(const Op& op) const override { return inner_->supports(op); }
  void read_slot(Slot s, std::vector<float>& d, int64_t& r, int64_t& w) override { inner_->read_slot(s, d, r, w); }
  void write_slot(Slot s, const float* d, int64_t r, int64_t w) override { inner_->write_slot(s, d, r, w); }
  void run(const Op& op) override {
    inner_->run(op);
    std::vector<float> values;
    int64_t rows = 0, width = 0;
    inner_->read_slot(op.products[0].out, values, rows, width);
    float largest = 0;
    for (float v : values) largest = std::max(largest, std::fabs(v));
    values[values.size() / 2] += 0.01f * largest;
    inner_->write_slot(op.products[0].out, values.data(), rows, width);
  }

 private:
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
  EXPECT_NE(list.find("matmul                    cpu partial\n"), std::string::npos) << list;
  // A device backend's column, from what it says it runs, and the note after the table.
  const std::string with_device =
      bench::backend_ops_list([](Primitive p) { return p != Primitive::Moe; }, "(cuda: a note)");
  EXPECT_NE(with_device.find("matmul                    cpu partial cuda\n"), std::string::npos) << with_device;
  EXPECT_NE(with_device.find("moe                       cpu\n"), std::string::npos) << with_device;
  EXPECT_NE(with_device.find("\n(cuda: a note)\n"), std::string::npos) << with_device;
}

// canvas_backend_ops (beside the canvas binary) with these arguments: its exit status and output.
std::pair<int, std::string> run_harness(const std::string& args) {
  const std::string binary = std::string(CANVAS_BINARY);
  const std::string harness = binary.substr(0, binary.rfind('/') + 1) + "canvas_backend_ops";
  FILE* pipe = popen((harness + " " + args + " 2>&1").c_str(), "r");
  if (!pipe) return {-1, "popen failed"};
  std::string out;
  char buf[4096];
  for (size_t got; (got = fread(buf, 1, sizeof(buf), pipe)) > 0;) out.append(buf, got);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// canvas_backend_ops --list works without a GPU: the cuda column read from the module (which loads
// without one), or a note that this build has none.
TEST(BackendOpsCli, ListSaysWhatTheCudaModuleRuns) {
  const auto [status, out] = run_harness("--list");
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("embed"), std::string::npos) << out;
  EXPECT_NE(out.find("(cuda: "), std::string::npos) << out;
  if (out.find("(cuda: this build has no CUDA module)") == std::string::npos &&
      out.find("cannot load") == std::string::npos) {
    EXPECT_NE(out.find("attention                 cpu cuda\n"), std::string::npos) << out;
    EXPECT_NE(out.find("matmul                    cpu partial cuda\n"), std::string::npos) << out;
  }
}

// --backend cuda where the module cannot run (no module, no GPU): an error saying why, exit 1.
TEST(BackendOpsCli, CudaWithoutAUsableDeviceSaysWhy) {
  const auto [status, out] = run_harness("--backend cuda --primitive copy");
  if (status == 0) GTEST_SKIP() << "a GPU ran it:\n" << out;
  EXPECT_EQ(status, 1) << out;
  EXPECT_TRUE(out.find("--device cuda: ") != std::string::npos ||
              out.find("canvas_backend_ops --backend cuda: ") != std::string::npos)
      << out;
}

TEST(BackendOps, CatchesABackendWhoseProductsAreOff) {
  bench::BackendOpsOptions options;
  options.backend = "skewed";
  options.primitive = "matmul";
  std::FILE* sink = std::tmpfile();
  const bench::BackendOpsResult skewed =
      bench::run_backend_ops(options, sink, [](const Model&) { return std::make_shared<SkewedBackend>(); }, 1e-4);
  EXPECT_GT(skewed.cases, 0);
  EXPECT_EQ(skewed.failed, skewed.cases);  // every product case has one value 1% off
  options.backend = "partial";
  const bench::BackendOpsResult partial =
      bench::run_backend_ops(options, sink, [](const Model&) { return make_partial_backend(); }, 0.0);
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
