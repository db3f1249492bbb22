// The GPU's roofs for `canvas bench --device cuda`, behind plain C++ declarations (no CUDA header needed):
// device 0's streaming-read bandwidth and dense GEMM rates, measured in the same run as the model, and
// its memory in use. Each throws Error (with the CUDA or cuBLAS error) when no device is usable.
#pragma once
#include <cstdint>
#include <string>

namespace canvas::cuda {

struct DeviceReadRoof {
  int64_t buffer_bytes = 0;  // the buffer actually streamed (clamped to what the device had free)
  int repeats = 0;
  double gbps = 0;  // median over the repeats of buffer_bytes / kernel time, 1e9 bytes per second
};
// Streams a buffer of `bytes` (at most half of the device's free memory, rounded down to whole 16-byte
// vectors; throws when that leaves less than 64 MiB) through a grid-stride kernel of 16-byte loads whose
// per-block sums land in memory (so no load can be dropped), timed with CUDA events: one warm-up, then the
// median of `repeats` runs.
DeviceReadRoof measure_device_read_bandwidth(int64_t bytes = int64_t(4) << 30, int repeats = 7);

enum class GemmPrecision { F16, F32 };  // f16 inputs on the tensor cores, or plain f32 (no TF32)
struct DeviceGemmRoof {
  GemmPrecision precision = GemmPrecision::F16;
  int64_t size = 0;  // an n x n x n product
  int repeats = 0;
  double ms = 0;      // median time of one product
  double tflops = 0;  // 2 n^3 / ms
};
// A cuBLAS product of two n x n matrices into an f32 result with f32 accumulation (cublasGemmEx with f16
// inputs, or cublasSgemm in the default, TF32-free math mode), on a handle of its own, timed with CUDA
// events: one warm-up, then the median of `repeats` products.
DeviceGemmRoof measure_device_gemm_rate(GemmPrecision precision, int64_t size = 8192, int repeats = 5);

struct DeviceMemory {
  int64_t total_bytes = 0, free_bytes = 0;
  int64_t used_bytes() const { return total_bytes - free_bytes; }
};
// cudaMemGetInfo of device 0: everything in use on it (this process's weights, caches, scratch and
// context, and any other process's).
DeviceMemory device_memory();
// device_memory().used_bytes().
int64_t device_memory_in_use();
// The device's name as the driver gives it ("NVIDIA H200").
std::string device_name();

}  // namespace canvas::cuda
