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

__global__ void row_stats_kernel(const float* logits, int64_t vocab, RowStats* out) {
  __shared__ Top2 shared_top[kBlock];
  __shared__ double shared[kBlock / 32];
  const float* x = logits + blockIdx.x * vocab;
  Top2 t{-INFINITY, -INFINITY, INT64_MAX};
  for (int64_t i = threadIdx.x; i < vocab; i += kBlock) {
    Top2 one{x[i], -INFINITY, i};
    t = merge_top2(t, one);
  }
  shared_top[threadIdx.x] = t;
  __syncthreads();
  for (int stride = kBlock / 2; stride > 0; stride /= 2) {
    if (int(threadIdx.x) < stride) shared_top[threadIdx.x] = merge_top2(shared_top[threadIdx.x], shared_top[threadIdx.x + stride]);
    __syncthreads();
  }
  const Top2 best = shared_top[0];
  const double m = best.v1;
  double sum = 0, moment = 0;
  for (int64_t i = threadIdx.x; i < vocab; i += kBlock) {
    const double d = double(x[i]) - m, e = exp(d);
    sum += e;
    if (e > 0) moment += e * d;
  }
  sum = block_sum_double(sum, shared);
  moment = block_sum_double(moment, shared);
  if (threadIdx.x == 0) {
    RowStats st;
    st.argmax = int32_t(best.i1);
    st.max = float(m);
    st.logsumexp = float(m + log(sum));
    st.p_top1 = float(1.0 / sum);
    st.p_top2 = vocab > 1 ? float(exp(double(best.v2) - m) / sum) : 0.f;
    st.entropy = float(log(sum) - moment / sum);
    out[blockIdx.x] = st;
  }
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
  __shared__ float shared_max[kBlock];
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
  shared_max[threadIdx.x] = m;
  __syncthreads();
  for (int stride = kBlock / 2; stride > 0; stride /= 2) {
    if (int(threadIdx.x) < stride) shared_max[threadIdx.x] = fmaxf(shared_max[threadIdx.x], shared_max[threadIdx.x + stride]);
    __syncthreads();
  }
  m = shared_max[0];
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

__global__ void to_half_kernel(const float* x, int64_t n, __half* y) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __float2half_rn(x[i]);
}
__global__ void to_bf16_kernel(const float* x, int64_t n, __nv_bfloat16* y) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __float2bfloat16_rn(x[i]);
}

// A growing device scratch buffer per purpose (the backend runs on one stream, one call at a time).
void* scratch(DeviceBuffer& buffer, size_t bytes) {
  if (buffer.bytes() < bytes) buffer = DeviceBuffer(bytes);
  return buffer.data();
}
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
  // Everything else: dequantise on the host, one row at a time, to f16.
  m.storage_ = Storage::F16;
  m.buffer_ = DeviceBuffer(size_t(w.elements()) * 2);
  std::vector<float> row(size_t(m.cols_));
  std::vector<__half> half_rows;
  const int64_t rows_per_upload = std::max<int64_t>(1, (int64_t(1) << 22) / std::max<int64_t>(1, m.cols_));
  for (int64_t r0 = 0; r0 < m.rows_; r0 += rows_per_upload) {
    const int64_t n = std::min(rows_per_upload, m.rows_ - r0);
    half_rows.resize(size_t(n * m.cols_));
    for (int64_t r = 0; r < n; ++r) {
      get_row(w, r0 + r, row.data());
      for (int64_t c = 0; c < m.cols_; ++c) half_rows[size_t(r * m.cols_ + c)] = __float2half_rn(row[size_t(c)]);
    }
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
  const bool half = w.storage() == DeviceMatrix::Storage::F16;
  void* xr = scratch(matmul_scratch(), size_t(m) * size_t(k) * 2);
  const int64_t count = m * int64_t(k);
  if (half)
    to_half_kernel<<<blocks_for(count), kBlock>>>(x, count, static_cast<__half*>(xr));
  else
    to_bf16_kernel<<<blocks_for(count), kBlock>>>(x, count, static_cast<__nv_bfloat16*>(xr));
  check_launch("convert activations");
  const cudaDataType_t type = half ? CUDA_R_16F : CUDA_R_16BF;
  check_cublas(cublasGemmEx(cublas(), CUBLAS_OP_T, CUBLAS_OP_N, n, mm, k, &one, w.data(), type, k, xr, type, k, &zero, y,
                            CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
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
  float* scores = static_cast<float*>(scratch(attention_scratch(), size_t(blocks) * size_t(std::max<int64_t>(1, n_keys)) * 4));
  attention_kernel<<<unsigned(blocks), kBlock>>>(q, ldq, k, v, n_keys, kv_head_stride, mask.key_group, mask.query_group,
                                                 mask.window_start, shape.n_heads, shape.n_heads / shape.n_kv_heads,
                                                 shape.head_dim, shape.scale, shape.softcap, out, ldo, scores);
  check_launch("attention");
}

}  // namespace canvas::cuda
