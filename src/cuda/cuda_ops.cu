// CUDA kernels and cuBLAS calls behind cuda/cuda_ops.h. Plain, readable kernels first (one block per
// row or per query head); the CPU ops in ops/ops.h are their reference.
#include "cuda/cuda_ops.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "ops/matmul.h"

namespace canvas::cuda {
namespace {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(std::string("cuda: ") + what + ": " + cudaGetErrorString(e));
}

// Kernel launches are asynchronous; a launch error is reported at once, an execution error at the
// next synchronize().
void check_launch(const char* kernel) { check_cuda(cudaGetLastError(), kernel); }

cublasHandle_t cublas() {
  static std::once_flag once;
  static cublasHandle_t handle = nullptr;
  std::call_once(once, [] {
    if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) handle = nullptr;
  });
  if (!handle) throw Error("cuda: cublasCreate failed");
  return handle;
}

void check_cublas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw Error(std::string("cuda: ") + what + " failed (cuBLAS status " + std::to_string(int(s)) + ")");
}

constexpr int kBlock = 256;

int blocks_for(int64_t n) { return int((n + kBlock - 1) / kBlock); }

// Sum of v over the block (blockDim.x == kBlock); every thread gets the result.
__device__ float block_sum(float v, float* shared) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kBlock / 32 ? shared[lane] : 0.f;
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  const float total = shared[0];
  __syncthreads();
  return total;
}

__device__ double block_sum_double(double v, double* shared) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kBlock / 32 ? shared[lane] : 0.0;
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  const double total = shared[0];
  __syncthreads();
  return total;
}

__global__ void rms_norm_kernel(const float* x, const float* w, int64_t n, float eps, float* y) {
  __shared__ double shared[kBlock / 32];
  const float* xr = x + blockIdx.x * n;
  float* yr = y + blockIdx.x * n;
  double sum_sq = 0;
  for (int64_t i = threadIdx.x; i < n; i += kBlock) sum_sq += double(xr[i]) * xr[i];
  sum_sq = block_sum_double(sum_sq, shared);
  const float scale = float(1.0 / sqrt(sum_sq / double(n) + eps));
  for (int64_t i = threadIdx.x; i < n; i += kBlock) yr[i] = xr[i] * scale * (w ? w[i] : 1.0f);
}

// One thread per (row, head, pair). Angles in double, as on the CPU.
__global__ void rope_kernel(float* x, int64_t n_rows, int n_heads, const int32_t* pos, int head_dim, int rot_dims,
                            int half, int active, double theta, bool neox) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= n_rows * n_heads * half) return;
  const int i = int(t % half);
  const int64_t rh = t / half;
  const int64_t r = rh / n_heads;
  float* xh = x + rh * head_dim;
  const double inv_freq = i < active ? pow(theta, -2.0 * i / rot_dims) : 0.0;
  const double angle = double(pos[r]) * inv_freq;
  const float c = float(cos(angle)), s = float(sin(angle));
  const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
  const float x0 = xh[a], x1 = xh[b];
  xh[a] = x0 * c - x1 * s;
  xh[b] = x0 * s + x1 * c;
}

__device__ float silu_device(float x) { return x / (1.f + expf(-x)); }
__device__ float gelu_tanh_device(float x) {
  return 0.5f * x * (1.f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

__global__ void glu_kernel(const float* gate, const float* up, int64_t n, float* out, bool gelu) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = gate[i];
  out[i] = (gelu ? gelu_tanh_device(g) : silu_device(g)) * up[i];
}

__global__ void softcap_kernel(float* x, int64_t n, float c) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = c * tanhf(x[i] / c);
}

// The best two (value, index) pairs seen; ties go to the lower index, as the CPU's first-maximum scan.
struct Top2 {
  float v1, v2;
  int64_t i1;
};
__device__ Top2 merge_top2(Top2 a, Top2 b) {
  Top2 r;
  const bool a_first = a.v1 > b.v1 || (a.v1 == b.v1 && a.i1 < b.i1);
  const Top2& hi = a_first ? a : b;
  const Top2& lo = a_first ? b : a;
  r.v1 = hi.v1;
  r.i1 = hi.i1;
  r.v2 = fmaxf(hi.v2, lo.v1);
  return r;
}

// Block-wide maximum (blockDim.x == kBlock); every thread gets it.
__device__ float block_max(float v, float* shared) {
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, offset));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kBlock / 32 ? shared[lane] : -INFINITY;
    for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, offset));
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  const float total = shared[0];
  __syncthreads();
  return total;
}

__device__ bool visible_device(const int32_t* key_group, const int32_t* query_group, const int32_t* window_start,
                               int64_t i, int64_t j) {
  if (key_group && key_group[j] > query_group[i]) return false;
  return !window_start || j >= window_start[i];
}

// One block per (query, head). Scores of all keys go to `scores` (a scratch row of n_keys per block),
// then the softmax-weighted sum of V is taken per output dimension.
__global__ void attention_kernel(const float* q, int64_t ldq, const float* k, const float* v, int64_t n_keys,
                                 int64_t kv_head_stride, const int32_t* key_group, const int32_t* query_group,
                                 const int32_t* window_start, int n_heads, int group, int head_dim, float scale,
                                 float softcap, float* out, int64_t ldo, float* scores_all) {
  __shared__ float shared[kBlock / 32];
  const int64_t i = blockIdx.x / n_heads;
  const int h = int(blockIdx.x % n_heads);
  const float* qh = q + i * ldq + int64_t(h) * head_dim;
  const float* kh = k + int64_t(h / group) * kv_head_stride;
  const float* vh = v + int64_t(h / group) * kv_head_stride;
  float* scores = scores_all + int64_t(blockIdx.x) * n_keys;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < n_keys; j += kBlock) {
    if (!visible_device(key_group, query_group, window_start, i, j)) continue;
    float s = 0;
    for (int d = 0; d < head_dim; ++d) s += qh[d] * kh[j * head_dim + d];
    s *= scale;
    if (softcap > 0) s = softcap * tanhf(s / softcap);
    scores[j] = s;
    m = fmaxf(m, s);
  }
  m = block_max(m, shared);
  float* oh = out + i * ldo + int64_t(h) * head_dim;
  if (m == -INFINITY) {  // no visible key: zeros, as on the CPU
    for (int d = threadIdx.x; d < head_dim; d += kBlock) oh[d] = 0.f;
    return;
  }
  float sum = 0;
  for (int64_t j = threadIdx.x; j < n_keys; j += kBlock) {
    if (!visible_device(key_group, query_group, window_start, i, j)) continue;
    const float p = expf(scores[j] - m);
    scores[j] = p;
    sum += p;
  }
  sum = block_sum(sum, shared);  // also a barrier: every p is in `scores` now
  for (int d = threadIdx.x; d < head_dim; d += kBlock) {
    float acc = 0;
    for (int64_t j = 0; j < n_keys; ++j)
      if (visible_device(key_group, query_group, window_start, i, j)) acc += scores[j] * vh[j * head_dim + d];
    oh[d] = acc / sum;
  }
}

// ---- forward-pass kernels ----

template <typename T> __device__ float to_float(T v);
template <> __device__ float to_float<float>(float v) { return v; }
template <> __device__ float to_float<__half>(__half v) { return __half2float(v); }
template <> __device__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__global__ void embed_kernel(const T* table, int64_t cols, const int32_t* rows, int64_t n, float scale, float* out) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= n * cols) return;
  const int64_t i = t / cols, j = t % cols;
  out[t] = to_float(table[int64_t(rows[i]) * cols + j]) * scale;
}

__global__ void add_kernel(float* x, const float* y, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] += y[i];
}
__global__ void add_then_scale_kernel(float* x, const float* y, int64_t n, float s) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = (x[i] + y[i]) * s;
}
__global__ void add_to_rows_kernel(float* x, const float* bias, int64_t n, int64_t width) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] += bias[i % width];
}
__global__ void scale_columns_kernel(float* x, const float* scale, int64_t n, int64_t width, float s) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= (scale ? scale[i % width] : 1.f) * s;
}
__global__ void scatter_heads_kernel(const float* src, int64_t n, int64_t heads, int64_t head_dim, const int32_t* pos,
                                     int64_t pos0, float* dst, int64_t head_stride) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= n * heads * head_dim) return;
  const int64_t d = t % head_dim, h = (t / head_dim) % heads, i = t / (head_dim * heads);
  const int64_t p = pos ? int64_t(pos[i]) : pos0 + i;
  dst[h * head_stride + p * head_dim + d] = src[t];
}
__global__ void gather_rows_kernel(const float* src, int64_t width, const int32_t* rows, int64_t n, float* dst) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= n * width) return;
  dst[t] = src[int64_t(rows[t / width]) * width + t % width];
}
__global__ void combine_rows_kernel(const float* results, int64_t width, const int32_t* begin, const int32_t* slot,
                                    const float* weight, int64_t n_rows, float* out) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= n_rows * width) return;
  const int64_t r = t / width, j = t % width;
  float acc = 0;
  for (int32_t k = begin[r]; k < begin[r + 1]; ++k) acc += weight[k] * results[int64_t(slot[k]) * width + j];
  out[t] = acc;
}
__global__ void glu_halves_kernel(const float* gu, int64_t rows, int64_t width, bool gelu, float* out) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= rows * width) return;
  const int64_t r = t / width, j = t % width;
  const float g = gu[r * 2 * width + j];
  out[t] = (gelu ? gelu_tanh_device(g) : silu_device(g)) * gu[r * 2 * width + width + j];
}

__global__ void softmax_rows_kernel(const float* x, int64_t n, float inv_t, float* p) {
  __shared__ float shared_f[kBlock / 32];
  __shared__ double shared_d[kBlock / 32];
  const float* xr = x + blockIdx.x * n;
  float* pr = p + blockIdx.x * n;
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += kBlock) m = fmaxf(m, xr[i] * inv_t);
  m = block_max(m, shared_f);
  double sum = 0;
  for (int64_t i = threadIdx.x; i < n; i += kBlock) sum += exp(double(xr[i] * inv_t - m));
  sum = block_sum_double(sum, shared_d);
  for (int64_t i = threadIdx.x; i < n; i += kBlock) pr[i] = float(exp(double(xr[i] * inv_t - m)) / sum);
}

// The CPU's noise (ops/lm_head.h): splitmix64 streams keyed by (seed, row id), one uniform per index.
__device__ uint64_t noise_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Row statistics of x * scale (RowStats' meaning), computed by the whole block; thread 0's is valid.
__device__ RowStats block_row_stats(const float* x, int64_t vocab, float scale, Top2* shared_top, double* shared) {
  Top2 t{-INFINITY, -INFINITY, INT64_MAX};
  for (int64_t i = threadIdx.x; i < vocab; i += kBlock) {
    Top2 one{x[i] * scale, -INFINITY, i};
    t = merge_top2(t, one);
  }
  shared_top[threadIdx.x] = t;
  __syncthreads();
  for (int stride = kBlock / 2; stride > 0; stride /= 2) {
    if (int(threadIdx.x) < stride) shared_top[threadIdx.x] = merge_top2(shared_top[threadIdx.x], shared_top[threadIdx.x + stride]);
    __syncthreads();
  }
  const Top2 best = shared_top[0];
  __syncthreads();
  const double m = best.v1;
  double sum = 0, moment = 0;
  for (int64_t i = threadIdx.x; i < vocab; i += kBlock) {
    const double d = double(x[i] * scale) - m, e = exp(d);
    sum += e;
    if (e > 0) moment += e * d;
  }
  sum = block_sum_double(sum, shared);
  moment = block_sum_double(moment, shared);
  RowStats st;
  st.argmax = int32_t(best.i1);
  st.max = float(m);
  st.logsumexp = float(m + log(sum));
  st.p_top1 = float(1.0 / sum);
  st.p_top2 = vocab > 1 ? float(exp(double(best.v2) - m) / sum) : 0.f;
  st.entropy = float(log(sum) - moment / sum);
  return st;
}

__global__ void row_stats_kernel(const float* logits, int64_t vocab, RowStats* out) {
  __shared__ Top2 shared_top[kBlock];
  __shared__ double shared[kBlock / 32];
  const RowStats st = block_row_stats(logits + blockIdx.x * vocab, vocab, 1.f, shared_top, shared);
  if (threadIdx.x == 0) out[blockIdx.x] = st;
}

__global__ void head_stats_kernel(const float* logits, int64_t vocab, float temperature, uint64_t seed,
                                  const uint64_t* row_ids, HeadRowStats* out) {
  __shared__ Top2 shared_top[kBlock];
  __shared__ double shared[kBlock / 32];
  __shared__ double best_score[kBlock];
  __shared__ int64_t best_index[kBlock];
  const float* x = logits + blockIdx.x * vocab;
  const RowStats plain = block_row_stats(x, vocab, 1.f, shared_top, shared);
  HeadRowStats st;
  st.plain = plain;
  if (temperature == 0.f) {
    st.tempered = plain;
    st.sample = plain.argmax;
  } else {
    st.tempered = block_row_stats(x, vocab, 1.f / temperature, shared_top, shared);
    const uint64_t row = row_ids ? row_ids[blockIdx.x] : uint64_t(blockIdx.x);
    const uint64_t key = noise_mix(seed ^ noise_mix(row + 0x9e3779b97f4a7c15ull));
    double score = -INFINITY;
    int64_t index = INT64_MAX;
    for (int64_t v = threadIdx.x; v < vocab; v += kBlock) {
      const uint64_t bits = noise_mix(key + uint64_t(v + 1) * 0x9e3779b97f4a7c15ull);
      const double u = (double(bits >> 12) + 0.5) * 0x1.0p-52;
      const double s = double(x[v] / temperature) - log(-log(u));
      if (s > score) {
        score = s;
        index = v;
      }
    }
    best_score[threadIdx.x] = score;
    best_index[threadIdx.x] = index;
    __syncthreads();
    for (int stride = kBlock / 2; stride > 0; stride /= 2) {
      if (int(threadIdx.x) < stride) {
        const double s2 = best_score[threadIdx.x + stride];
        const int64_t i2 = best_index[threadIdx.x + stride];
        if (s2 > best_score[threadIdx.x] || (s2 == best_score[threadIdx.x] && i2 < best_index[threadIdx.x])) {
          best_score[threadIdx.x] = s2;
          best_index[threadIdx.x] = i2;
        }
      }
      __syncthreads();
    }
    st.sample = int32_t(best_index[0]);
  }
  if (threadIdx.x == 0) {
    st.p_sample = float(exp(double(x[st.sample]) - double(plain.logsumexp)));
    out[blockIdx.x] = st;
  }
}

__global__ void to_half_kernel(const float* x, int64_t n, __half* y) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __float2half_rn(x[i]);
}
__global__ void to_bf16_kernel(const float* x, int64_t n, __nv_bfloat16* y) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __float2bfloat16_rn(x[i]);
}

// A growing device scratch buffer per purpose (the backend runs on one stream, one call at a time).
DeviceBuffer& attention_scratch() {
  static DeviceBuffer b;
  return b;
}
DeviceBuffer& matmul_scratch() {
  static DeviceBuffer b;
  return b;
}

}  // namespace

bool available(std::string* reason) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    if (reason) *reason = std::string("no usable CUDA driver or device: ") + cudaGetErrorString(e);
    return false;
  }
  if (count == 0) {
    if (reason) *reason = "no CUDA device";
    return false;
  }
  return true;
}

std::string device_description() {
  std::string why;
  if (!available(&why)) throw Error("cuda: " + why);
  cudaDeviceProp p{};
  check_cuda(cudaGetDeviceProperties(&p, 0), "cudaGetDeviceProperties");
  return std::string(p.name) + " (sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
         std::to_string(p.totalGlobalMem >> 30) + " GiB)";
}

void synchronize() { check_cuda(cudaDeviceSynchronize(), "kernel execution"); }

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  check_cuda(cudaMalloc(&ptr_, bytes), ("cudaMalloc of " + std::to_string(bytes) + " bytes").c_str());
}
DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
  o.ptr_ = nullptr;
  o.bytes_ = 0;
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}
void DeviceBuffer::upload(const void* host, size_t bytes, size_t offset) {
  check(offset + bytes <= bytes_, "cuda: upload past the end of a device buffer");
  check_cuda(cudaMemcpy(static_cast<char*>(ptr_) + offset, host, bytes, cudaMemcpyHostToDevice), "upload");
}
void DeviceBuffer::download(void* host, size_t bytes, size_t offset) const {
  check(offset + bytes <= bytes_, "cuda: download past the end of a device buffer");
  check_cuda(cudaMemcpy(host, static_cast<const char*>(ptr_) + offset, bytes, cudaMemcpyDeviceToHost), "download");
}

DeviceMatrix DeviceMatrix::upload(const TensorView& w) {
  DeviceMatrix m;
  m.rows_ = w.rows();
  m.cols_ = w.cols();
  if (w.type == DType::F32) {
    m.storage_ = Storage::F32;
    m.buffer_ = DeviceBuffer(size_t(w.elements()) * 4);
    m.buffer_.upload(w.data, size_t(w.elements()) * 4);
    return m;
  }
  if (w.type == DType::BF16) {
    m.storage_ = Storage::BF16;
    m.buffer_ = DeviceBuffer(size_t(w.elements()) * 2);
    m.buffer_.upload(w.data, size_t(w.elements()) * 2);
    return m;
  }
  // Everything else: dequantise on the host, row by row (threads take rows in turn), to f16, and upload
  // in chunks of about 64 M values.
  m.storage_ = Storage::F16;
  m.buffer_ = DeviceBuffer(size_t(w.elements()) * 2);
  const int64_t rows_per_upload = std::max<int64_t>(1, (int64_t(1) << 26) / std::max<int64_t>(1, m.cols_));
  const int64_t chunk_rows = std::min(rows_per_upload, m.rows_);
  const int threads = int(std::max<int64_t>(1, std::min<int64_t>(std::thread::hardware_concurrency(),
                                                                   chunk_rows * m.cols_ / (int64_t(1) << 20) + 1)));
  std::vector<__half> half_rows;
  for (int64_t r0 = 0; r0 < m.rows_; r0 += rows_per_upload) {
    const int64_t n = std::min(rows_per_upload, m.rows_ - r0);
    half_rows.resize(size_t(n * m.cols_));
    auto convert = [&](int t) {
      std::vector<float> row(size_t(m.cols_));
      for (int64_t r = t; r < n; r += threads) {
        get_row(w, r0 + r, row.data());
        for (int64_t c = 0; c < m.cols_; ++c) half_rows[size_t(r * m.cols_ + c)] = __float2half_rn(row[size_t(c)]);
      }
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(convert, t);
    convert(0);
    for (std::thread& t : pool) t.join();
    m.buffer_.upload(half_rows.data(), half_rows.size() * 2, size_t(r0 * m.cols_) * 2);
  }
  return m;
}

void matmul(const DeviceMatrix& w, const float* x, int64_t m, float* y) {
  if (m == 0 || w.rows() == 0) return;
  check(w.cols() > 0, "cuda matmul: empty weight rows");
  // Row-major y[m x n] = x[m x k] w^T[k x n] is, in cuBLAS's column-major terms, y^T[n x m] =
  // w[n x k]... as column-major W^T (k x n, ld k) transposed: C(n x m) = op(A) B with A = w as a
  // column-major k x n matrix (ld k), op = T, B = x as column-major k x m (ld k).
  const int n = int(w.rows()), k = int(w.cols()), mm = int(m);
  const float one = 1.f, zero = 0.f;
  if (w.storage() == DeviceMatrix::Storage::F32) {
    check_cublas(cublasSgemm(cublas(), CUBLAS_OP_T, CUBLAS_OP_N, n, mm, k, &one, static_cast<const float*>(w.data()), k,
                             x, k, &zero, y, n),
                 "cublasSgemm");
    return;
  }
  void* xr = matmul_scratch().reserve<uint16_t>(m * k);
  to_input_type(x, m * int64_t(k), w.storage(), xr);
  matmul_rounded(w, xr, m, y);
}

void to_input_type(const float* x, int64_t n, DeviceMatrix::Storage storage, void* out) {
  check(storage != DeviceMatrix::Storage::F32, "cuda to_input_type: f32 weights take f32 activations");
  if (n == 0) return;
  if (storage == DeviceMatrix::Storage::F16)
    to_half_kernel<<<blocks_for(n), kBlock>>>(x, n, static_cast<__half*>(out));
  else
    to_bf16_kernel<<<blocks_for(n), kBlock>>>(x, n, static_cast<__nv_bfloat16*>(out));
  check_launch("convert activations");
}

void matmul_rounded(const DeviceMatrix& w, const void* x16, int64_t m, float* y) {
  check(w.storage() != DeviceMatrix::Storage::F32, "cuda matmul_rounded: f32 weights take f32 activations");
  if (m == 0 || w.rows() == 0) return;
  const int n = int(w.rows()), k = int(w.cols()), mm = int(m);
  const float one = 1.f, zero = 0.f;
  const cudaDataType_t type = w.storage() == DeviceMatrix::Storage::F16 ? CUDA_R_16F : CUDA_R_16BF;
  check_cublas(cublasGemmEx(cublas(), CUBLAS_OP_T, CUBLAS_OP_N, n, mm, k, &one, w.data(), type, k, x16, type, k, &zero,
                            y, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx");
}

void rms_norm(const float* x, const float* w, int64_t rows, int64_t n, float eps, float* y) {
  if (rows == 0 || n == 0) return;
  rms_norm_kernel<<<unsigned(rows), kBlock>>>(x, w, n, eps, y);
  check_launch("rms_norm");
}

void rope(float* x, int64_t n_rows, int n_heads, const int32_t* pos, const RopeParams& p) {
  check(p.head_dim > 0, "cuda rope: head_dim must be positive");
  const int rot_dims = p.rot_dims > 0 ? p.rot_dims : p.head_dim;
  check(rot_dims % 2 == 0 && rot_dims <= p.head_dim, "cuda rope: rot_dims must be even and <= head_dim");
  const int half = rot_dims / 2;
  const int active = p.active_pairs > 0 ? std::min(p.active_pairs, half) : half;
  const int64_t threads = n_rows * n_heads * half;
  if (threads == 0) return;
  rope_kernel<<<blocks_for(threads), kBlock>>>(x, n_rows, n_heads, pos, p.head_dim, rot_dims, half, active,
                                                double(p.theta), p.layout == RopeLayout::Neox);
  check_launch("rope");
}

void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  if (n == 0) return;
  glu_kernel<<<blocks_for(n), kBlock>>>(gate, up, n, out, false);
  check_launch("swiglu");
}
void geglu(const float* gate, const float* up, int64_t n, float* out) {
  if (n == 0) return;
  glu_kernel<<<blocks_for(n), kBlock>>>(gate, up, n, out, true);
  check_launch("geglu");
}

void softcap(float* x, int64_t n, float c) {
  check(c > 0, "cuda softcap: the cap must be positive");
  if (n == 0) return;
  softcap_kernel<<<blocks_for(n), kBlock>>>(x, n, c);
  check_launch("softcap");
}

void row_stats(const float* logits, int64_t rows, int64_t vocab, RowStats* out) {
  if (rows == 0) return;
  check(vocab > 0, "cuda row_stats: empty rows");
  row_stats_kernel<<<unsigned(rows), kBlock>>>(logits, vocab, out);
  check_launch("row_stats");
}

void attention(const float* q, int64_t n_q, int64_t ldq, const float* k, const float* v, int64_t n_keys,
               int64_t kv_head_stride, const AttentionMask& mask, const AttentionShape& shape, float* out,
               int64_t ldo) {
  check(shape.n_heads > 0 && shape.n_kv_heads > 0 && shape.head_dim > 0 && shape.n_heads % shape.n_kv_heads == 0,
        "cuda attention: bad head counts");
  check((mask.key_group == nullptr) == (mask.query_group == nullptr),
        "cuda attention: key_group and query_group must both be set or both be null");
  if (n_q == 0) return;
  const int64_t blocks = n_q * shape.n_heads;
  float* scores = attention_scratch().reserve<float>(int64_t(blocks) * std::max<int64_t>(1, n_keys));
  attention_kernel<<<unsigned(blocks), kBlock>>>(q, ldq, k, v, n_keys, kv_head_stride, mask.key_group, mask.query_group,
                                                 mask.window_start, shape.n_heads, shape.n_heads / shape.n_kv_heads,
                                                 shape.head_dim, shape.scale, shape.softcap, out, ldo, scores);
  check_launch("attention");
}

void embed_rows(const DeviceMatrix& table, const int32_t* rows, int64_t n, float scale, float* out) {
  const int64_t count = n * table.cols();
  if (count == 0) return;
  switch (table.storage()) {
    case DeviceMatrix::Storage::F32:
      embed_kernel<<<blocks_for(count), kBlock>>>(static_cast<const float*>(table.data()), table.cols(), rows, n, scale, out);
      break;
    case DeviceMatrix::Storage::F16:
      embed_kernel<<<blocks_for(count), kBlock>>>(static_cast<const __half*>(table.data()), table.cols(), rows, n, scale, out);
      break;
    case DeviceMatrix::Storage::BF16:
      embed_kernel<<<blocks_for(count), kBlock>>>(static_cast<const __nv_bfloat16*>(table.data()), table.cols(), rows, n,
                                                  scale, out);
      break;
  }
  check_launch("embed_rows");
}

void add(float* x, const float* y, int64_t n) {
  if (n == 0) return;
  add_kernel<<<blocks_for(n), kBlock>>>(x, y, n);
  check_launch("add");
}
void add_then_scale(float* x, const float* y, int64_t n, float s) {
  if (n == 0) return;
  add_then_scale_kernel<<<blocks_for(n), kBlock>>>(x, y, n, s);
  check_launch("add_then_scale");
}
void add_to_rows(float* x, const float* bias, int64_t rows, int64_t width) {
  if (rows * width == 0) return;
  add_to_rows_kernel<<<blocks_for(rows * width), kBlock>>>(x, bias, rows * width, width);
  check_launch("add_to_rows");
}
void scale_columns(float* x, const float* scale, int64_t rows, int64_t width, float s) {
  if (rows * width == 0) return;
  scale_columns_kernel<<<blocks_for(rows * width), kBlock>>>(x, scale, rows * width, width, s);
  check_launch("scale_columns");
}
void scatter_heads(const float* src, int64_t n, int64_t heads, int64_t head_dim, const int32_t* pos, int64_t pos0,
                   float* dst, int64_t head_stride) {
  const int64_t count = n * heads * head_dim;
  if (count == 0) return;
  scatter_heads_kernel<<<blocks_for(count), kBlock>>>(src, n, heads, head_dim, pos, pos0, dst, head_stride);
  check_launch("scatter_heads");
}
void copy_head_positions(const float* src, int64_t src_stride, int64_t first, int64_t count, int64_t heads,
                         int64_t head_dim, float* dst, int64_t dst_stride) {
  if (count == 0 || heads == 0) return;
  check_cuda(cudaMemcpy2D(dst, size_t(dst_stride) * 4, src + first * head_dim, size_t(src_stride) * 4,
                          size_t(count * head_dim) * 4, size_t(heads), cudaMemcpyDeviceToDevice),
             "copy_head_positions");
}
void gather_rows(const float* src, int64_t width, const int32_t* rows, int64_t n, float* dst) {
  if (n * width == 0) return;
  gather_rows_kernel<<<blocks_for(n * width), kBlock>>>(src, width, rows, n, dst);
  check_launch("gather_rows");
}
void combine_rows(const float* results, int64_t width, const int32_t* begin, const int32_t* slot, const float* weight,
                  int64_t n_rows, float* out) {
  if (n_rows * width == 0) return;
  combine_rows_kernel<<<blocks_for(n_rows * width), kBlock>>>(results, width, begin, slot, weight, n_rows, out);
  check_launch("combine_rows");
}
void glu_halves(const float* gu, int64_t rows, int64_t width, bool gelu, float* out) {
  if (rows * width == 0) return;
  glu_halves_kernel<<<blocks_for(rows * width), kBlock>>>(gu, rows, width, gelu, out);
  check_launch("glu_halves");
}
void softmax_rows(const float* x, int64_t rows, int64_t n, float inv_temperature, float* p) {
  if (rows == 0) return;
  check(n > 0, "cuda softmax_rows: empty rows");
  softmax_rows_kernel<<<unsigned(rows), kBlock>>>(x, n, inv_temperature, p);
  check_launch("softmax_rows");
}
void head_stats(const float* logits, int64_t rows, int64_t vocab, float temperature, uint64_t seed,
                const uint64_t* row_ids, HeadRowStats* out) {
  if (rows == 0) return;
  check(vocab > 0 && temperature >= 0.f, "cuda head_stats: empty rows, or a temperature that is negative or NaN");
  head_stats_kernel<<<unsigned(rows), kBlock>>>(logits, vocab, temperature, seed, row_ids, out);
  check_launch("head_stats");
}
void copy_to_device(void* dst, const void* src, size_t bytes) {
  if (bytes) check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "copy to device");
}
void copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes) check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "copy to host");
}
void fill_zero(void* dst, size_t bytes) {
  if (bytes) check_cuda(cudaMemset(dst, 0, bytes), "fill_zero");
}
void copy_on_device(void* dst, const void* src, size_t bytes) {
  if (bytes) check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice), "copy on device");
}

void matmul_transposed(const DeviceMatrix& w, const float* x, int64_t m, float* y) {
  if (m == 0 || w.cols() == 0) return;
  // Row-major y[m x n] = x[m x k] w[k x n] (w row-major k x n, n = cols): column-major
  // y^T(n x m) = w^T(n x k, = w as column-major with ld n) x^T(k x m, ld k).
  const int n = int(w.cols()), k = int(w.rows()), mm = int(m);
  const float one = 1.f, zero = 0.f;
  if (w.storage() == DeviceMatrix::Storage::F32) {
    check_cublas(cublasSgemm(cublas(), CUBLAS_OP_N, CUBLAS_OP_N, n, mm, k, &one, static_cast<const float*>(w.data()), n,
                             x, k, &zero, y, n),
                 "cublasSgemm");
    return;
  }
  const bool half = w.storage() == DeviceMatrix::Storage::F16;
  void* xr = matmul_scratch().reserve<uint16_t>(m * k);
  const int64_t count = m * int64_t(k);
  if (half)
    to_half_kernel<<<blocks_for(count), kBlock>>>(x, count, static_cast<__half*>(xr));
  else
    to_bf16_kernel<<<blocks_for(count), kBlock>>>(x, count, static_cast<__nv_bfloat16*>(xr));
  check_launch("convert activations");
  const cudaDataType_t type = half ? CUDA_R_16F : CUDA_R_16BF;
  check_cublas(cublasGemmEx(cublas(), CUBLAS_OP_N, CUBLAS_OP_N, n, mm, k, &one, w.data(), type, n, xr, type, k, &zero, y,
                            CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx");
}

}  // namespace canvas::cuda
