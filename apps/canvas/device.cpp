#include "device.h"

#include <cstdio>

#include "core/error.h"
#include "core/timer.h"
#include "model/weight_check.h"
#if CANVAS_HAVE_CUDA
#include "cuda/cuda_backend.h"
#include "cuda/cuda_ops.h"
#include "cuda/cuda_roofs.h"
#endif

namespace canvas::cli {

void check_all_weights(const Model& model, const std::string& path) {
  const double t0 = now_ms();
  const int64_t read = check_weights_finite(model, WeightScan::Full, path);
  std::fprintf(stderr, "--check-weights: %lld weights finite (%.0f ms)\n", static_cast<long long>(read),
               now_ms() - t0);
}

void use_device(Model& model, const std::string& device) {
  if (device == "cpu") return;
  check(device == "cuda", "--device: unknown device '" + device + "' (cpu or cuda)");
#if CANVAS_HAVE_CUDA
  model.backend = cuda::make_backend(model);
  std::fprintf(stderr, "device: %s\n", model.backend->name().c_str());
#else
  (void)model;
  throw Error("--device cuda: this canvas was built without the CUDA backend (rebuild where nvcc and cuBLAS are "
              "installed, or with -DCANVAS_CUDA=ON)");
#endif
}

bench::DeviceFloors measure_device_floors(bool measure_roofs, bool quick) {
#if CANVAS_HAVE_CUDA
  bench::DeviceFloors d;
  d.name = cuda::device_name();
  const cuda::DeviceMemory memory = cuda::device_memory();
  d.memory_total_bytes = memory.total_bytes;
  d.memory_used_bytes = d.memory_peak_bytes = memory.used_bytes();
  d.memory_in_use = [] { return cuda::device_memory_in_use(); };
  d.buffers_peak = [] { return cuda::device_buffer_peak_bytes(); };
  d.profile = [](const std::function<void()>& pass) {
    cuda::take_profile();  // drops what came before
    cuda::set_profiling(true);
    std::vector<cuda::OpTime> times;
    try {
      pass();
      times = cuda::take_profile();
    } catch (...) {
      cuda::set_profiling(false);
      throw;
    }
    cuda::set_profiling(false);
    std::vector<bench::DeviceOpTime> ops;
    for (const cuda::OpTime& t : times) ops.push_back({t.name, t.depth, t.ms, t.spans});
    return ops;
  };
  if (!measure_roofs) {
    d.not_measured = "--no-roofs";
    return d;
  }
  try {
    const double t0 = now_ms();
    const cuda::DeviceReadRoof read = cuda::measure_device_read_bandwidth(int64_t(quick ? 256 : 4096) << 20);
    const int64_t size = quick ? 2048 : 8192;
    const cuda::DeviceGemmRoof f16 = cuda::measure_device_gemm_rate(cuda::GemmPrecision::F16, size);
    const cuda::DeviceGemmRoof f32 = cuda::measure_device_gemm_rate(cuda::GemmPrecision::F32, size);
    d.read_gbps = read.gbps;
    d.read_buffer_bytes = read.buffer_bytes;
    d.gemm_size = size;
    d.gemm_f16_tflops = f16.tflops;
    d.gemm_f32_tflops = f32.tflops;
    std::fprintf(stderr, "canvas bench: device floors in %.1f s\n", (now_ms() - t0) / 1000);
  } catch (const Error& e) {
    d.not_measured = e.what();
  }
  return d;
#else
  (void)measure_roofs;
  (void)quick;
  throw Error("--device cuda: this canvas was built without the CUDA backend");
#endif
}

}  // namespace canvas::cli
