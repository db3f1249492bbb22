// The GPU's roofs (cuda/cuda_roofs.h): a streaming-read kernel and cuBLAS GEMMs timed with CUDA events.
#include "cuda/cuda_roofs.h"

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "core/error.h"
#include "cuda/cuda_ops.h"

namespace canvas::cuda {
namespace {

constexpr int kThreads = 256;

void check_cuda(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) throw Error("cuda roofs: " + what + ": " + cudaGetErrorString(e));
}

void require_device() {
  std::string why;
  if (!available(&why)) throw Error("cuda roofs: " + why);
}

struct CudaFree {
  void operator()(void* p) const { cudaFree(p); }
};
using DeviceMemoryPtr = std::unique_ptr<void, CudaFree>;

DeviceMemoryPtr allocate(size_t bytes, const std::string& what) {
  void* p = nullptr;
  check_cuda(cudaMalloc(&p, bytes), "cudaMalloc of " + std::to_string(bytes >> 20) + " MiB for " + what);
  return DeviceMemoryPtr(p);
}

// A start and a stop event; ms() waits for the stop and returns the time between them.
class EventTimer {
 public:
  EventTimer() {
    check_cuda(cudaEventCreate(&start_), "cudaEventCreate");
    const cudaError_t e = cudaEventCreate(&stop_);
    if (e != cudaSuccess) cudaEventDestroy(start_);
    check_cuda(e, "cudaEventCreate");
  }
  ~EventTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  void start() { check_cuda(cudaEventRecord(start_), "cudaEventRecord"); }
  float ms() {
    check_cuda(cudaEventRecord(stop_), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(stop_), "the timed kernel");
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
    return ms;
  }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Blocks that fill every multiprocessor with resident threads.
int resident_blocks() {
  int device = 0, sms = 0, threads_per_sm = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  check_cuda(cudaDeviceGetAttribute(&threads_per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, device),
             "cudaDeviceGetAttribute");
  return std::max(1, sms * std::max(1, threads_per_sm / kThreads));
}

__global__ void fill_ones_kernel(float4* data, int64_t n) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    data[i] = make_float4(1.f, 1.f, 1.f, 1.f);
}

// Grid-stride sum of n float4, four independent 16-byte loads in flight per thread; each block writes its
// sum, so every load feeds a stored result.
__global__ void read_sum_kernel(const float4* data, int64_t n, float* block_sums) {
  __shared__ float warp_sums[kThreads / 32];
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  float a = 0, b = 0, c = 0, d = 0;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const float4 v0 = data[i], v1 = data[i + stride], v2 = data[i + 2 * stride], v3 = data[i + 3 * stride];
    a += (v0.x + v0.y) + (v0.z + v0.w);
    b += (v1.x + v1.y) + (v1.z + v1.w);
    c += (v2.x + v2.y) + (v2.z + v2.w);
    d += (v3.x + v3.y) + (v3.z + v3.w);
  }
  for (; i < n; i += stride) {
    const float4 v = data[i];
    a += (v.x + v.y) + (v.z + v.w);
  }
  float s = (a + b) + (c + d);
  for (int offset = 16; offset > 0; offset /= 2) s += __shfl_down_sync(0xffffffffu, s, offset);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0;
    for (int w = 0; w < kThreads / 32; ++w) total += warp_sums[w];
    block_sums[blockIdx.x] = total;
  }
}

// Values in [-0.5, 0.5) from a hash of the index: data of a real product's spread (zeros would let the
// tensor cores run cooler and faster than they do on weights).
template <typename T>
__global__ void fill_pattern_kernel(T* data, int64_t n) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint32_t h = uint32_t(i) * 2654435761u;
    data[i] = T(float(h >> 22) / 1024.f - 0.5f);
  }
}

class CublasHandle {
 public:
  CublasHandle() {
    if (cublasCreate(&handle_) != CUBLAS_STATUS_SUCCESS) throw Error("cuda roofs: cublasCreate failed");
  }
  ~CublasHandle() { cublasDestroy(handle_); }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

void check_cublas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Error(std::string("cuda roofs: ") + what + " failed (cuBLAS status " + std::to_string(int(s)) + ")");
}

}  // namespace

DeviceReadRoof measure_device_read_bandwidth(int64_t bytes, int repeats) {
  check(bytes > 0 && repeats > 0, "cuda roofs: the read roof needs a positive size and repeat count");
  require_device();
  const DeviceMemory memory = device_memory();
  bytes = std::min<int64_t>(bytes, memory.free_bytes / 2) / 16 * 16;
  check(bytes >= (int64_t(64) << 20), "cuda roofs: only " + std::to_string(memory.free_bytes >> 20) +
                                          " MiB of device memory free; the read roof needs 128 MiB");
  const int64_t vectors = bytes / 16;
  DeviceMemoryPtr buffer = allocate(size_t(bytes), "the read roof's buffer");
  const int blocks = resident_blocks();
  DeviceMemoryPtr sums = allocate(size_t(blocks) * sizeof(float), "the read roof's sums");
  float4* data = static_cast<float4*>(buffer.get());
  fill_ones_kernel<<<blocks, kThreads>>>(data, vectors);
  check_cuda(cudaGetLastError(), "fill_ones_kernel");
  EventTimer timer;
  std::vector<double> gbps;
  std::vector<float> block_sums(static_cast<size_t>(blocks));
  for (int r = 0; r < repeats + 1; ++r) {  // r = 0 warms up
    timer.start();
    read_sum_kernel<<<blocks, kThreads>>>(data, vectors, static_cast<float*>(sums.get()));
    check_cuda(cudaGetLastError(), "read_sum_kernel");
    const double ms = timer.ms();
    if (r == 0) {
      // Every float is 1: the sums must add up to the float count, or the kernel skipped data.
      check_cuda(cudaMemcpy(block_sums.data(), sums.get(), block_sums.size() * sizeof(float), cudaMemcpyDeviceToHost),
                 "copying the read roof's sums");
      double total = 0;
      for (float s : block_sums) total += double(s);
      check(std::fabs(total - double(vectors) * 4) <= 1e-6 * double(vectors) * 4,
            "cuda roofs: the read kernel's sum is wrong: the kernel is broken");
      continue;
    }
    gbps.push_back(double(bytes) / (ms * 1e6));
  }
  DeviceReadRoof roof;
  roof.buffer_bytes = bytes;
  roof.repeats = repeats;
  roof.gbps = median(gbps);
  return roof;
}

DeviceGemmRoof measure_device_gemm_rate(GemmPrecision precision, int64_t size, int repeats) {
  check(size > 0 && size <= 65536 && repeats > 0, "cuda roofs: the GEMM roof needs a size in 1..65536 and repeats > 0");
  require_device();
  const int64_t elements = size * size;
  const size_t input_bytes = size_t(elements) * (precision == GemmPrecision::F16 ? 2 : 4);
  DeviceMemoryPtr a = allocate(input_bytes, "the GEMM roof's A"), b = allocate(input_bytes, "the GEMM roof's B");
  DeviceMemoryPtr c = allocate(size_t(elements) * 4, "the GEMM roof's C");
  const int blocks = resident_blocks();
  for (void* p : {a.get(), b.get()}) {
    if (precision == GemmPrecision::F16) {
      fill_pattern_kernel<__half><<<blocks, kThreads>>>(static_cast<__half*>(p), elements);
    } else {
      fill_pattern_kernel<float><<<blocks, kThreads>>>(static_cast<float*>(p), elements);
    }
    check_cuda(cudaGetLastError(), "fill_pattern_kernel");
  }
  CublasHandle handle;
  const int n = int(size);
  const float one = 1.f, zero = 0.f;
  auto product = [&] {
    if (precision == GemmPrecision::F16) {
      check_cublas(cublasGemmEx(handle.get(), CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a.get(), CUDA_R_16F, n, b.get(),
                                CUDA_R_16F, n, &zero, c.get(), CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx");
    } else {
      check_cublas(cublasSgemm(handle.get(), CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, static_cast<const float*>(a.get()),
                               n, static_cast<const float*>(b.get()), n, &zero, static_cast<float*>(c.get()), n),
                   "cublasSgemm");
    }
  };
  EventTimer timer;
  std::vector<double> times;
  for (int r = 0; r < repeats + 1; ++r) {  // r = 0 warms up (cuBLAS picks and loads its kernel)
    timer.start();
    product();
    const double ms = timer.ms();
    if (r > 0) times.push_back(ms);
  }
  DeviceGemmRoof roof;
  roof.precision = precision;
  roof.size = size;
  roof.repeats = repeats;
  roof.ms = median(times);
  roof.tflops = 2.0 * double(size) * double(size) * double(size) / (roof.ms * 1e9);
  return roof;
}

DeviceMemory device_memory() {
  require_device();
  size_t free_bytes = 0, total_bytes = 0;
  check_cuda(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  DeviceMemory m;
  m.total_bytes = int64_t(total_bytes);
  m.free_bytes = int64_t(free_bytes);
  return m;
}

int64_t device_memory_in_use() { return device_memory().used_bytes(); }

std::string device_name() {
  require_device();
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  cudaDeviceProp p{};
  check_cuda(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties");
  return p.name;
}

}  // namespace canvas::cuda
