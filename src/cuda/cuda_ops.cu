// CUDA kernels and cuBLAS calls behind cuda/cuda_ops.h. Plain, readable kernels first (one block per
// row or per query head); the CPU ops in ops/ops.h are their reference.
#include "cuda/cuda_ops.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <mma.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "core/quant_block.h"
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

// The one stream every kernel and cuBLAS call of the backend runs on. A blocking stream: the plain
// (synchronous) copies below wait for its work and it waits for theirs, so ordering is as on the legacy
// stream; unlike that stream it can be captured into a CUDA graph (DeviceGraph).
cudaStream_t stream() {
  static std::once_flag once;
  static cudaStream_t s = nullptr;
  static cudaError_t made = cudaSuccess;
  std::call_once(once, [] { made = cudaStreamCreate(&s); });
  check_cuda(made, "cudaStreamCreate");
  return s;
}

cublasHandle_t cublas() {
  static std::once_flag once;
  static cublasHandle_t handle = nullptr;
  std::call_once(once, [] {
    if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
      handle = nullptr;
      return;
    }
    // Its own workspace, set once, so that a captured product allocates nothing.
    constexpr size_t kWorkspace = size_t(32) << 20;
    void* workspace = nullptr;
    if (cublasSetStream(handle, stream()) != CUBLAS_STATUS_SUCCESS ||
        cudaMalloc(&workspace, kWorkspace) != cudaSuccess ||
        cublasSetWorkspace(handle, workspace, kWorkspace) != CUBLAS_STATUS_SUCCESS) {
      cublasDestroy(handle);
      if (workspace) cudaFree(workspace);
      cudaGetLastError();  // not left for the next kernel's check to report
      handle = nullptr;
    }
  });
  if (!handle) throw Error("cuda: cuBLAS could not be set up (cublasCreate, its stream or its workspace)");
  return handle;
}

void check_cublas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw Error(std::string("cuda: ") + what + " failed (cuBLAS status " + std::to_string(int(s)) + ")");
}

constexpr int kBlock = 256;

int blocks_for(int64_t n) { return int((n + kBlock - 1) / kBlock); }

// Sum of v over the block (blockDim.x == kBlock); every thread gets the result.
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

template <typename T> __device__ float to_float(T v);
template <> __device__ float to_float<float>(float v) { return v; }
template <> __device__ float to_float<__half>(__half v) { return __half2float(v); }
template <> __device__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ void store_value(float* p, float v) { *p = v; }
__device__ void store_value(__half* p, float v) { *p = __float2half_rn(v); }

constexpr int kAttentionWarps = kBlock / 32;
constexpr int kAttentionDims = 16;  // dims per lane: head_dim <= 32 * 16 = 512

// A lane's dims of a head's row: out[t] = row[lane + 32 t] as f32, 0 past head_dim.
template <typename T>
__device__ void load_lane_dims(const T* row, int lane, int head_dim, float* out) {
#pragma unroll
  for (int t = 0; t < kAttentionDims; ++t) {
    const int d = lane + 32 * t;
    out[t] = d < head_dim ? to_float(row[d]) : 0.f;
  }
}

// The arguments of an attention launch that every request shares.
struct AttentionLaunch {
  const float* q = nullptr;
  int64_t ldq = 0;
  float* out = nullptr;
  int64_t ldo = 0;
  const float* own_k = nullptr;  // the pass's own K / V rows (a decoder canvas's), own_ld floats apart
  const float* own_v = nullptr;
  int64_t own_ld = 0;
  int n_heads = 0, group = 0, head_dim = 0;
  float scale = 0, softcap = 0;
};

// One block per (query row, head), one pass over the keys with an online softmax. The row's request is
// segs[seg_of_row[i]] (or `one` when segs is null). Each warp takes every kAttentionWarps-th key: its
// lanes hold the query's dims lane, lane + 32, ... and compute the score together (a warp sum), then keep
// a running maximum, sum and weighted sum of V in registers. The warps' partial results are merged at the
// end (shared memory). Keys: the cache's n_keys (masked as the CPU masks them), then own_keys rows of the
// pass's own K/V from the request's first row, visible to every query. A query that sees no key gets
// zeros, as on the CPU.
template <typename KV>
__global__ void attention_kernel(AttentionLaunch a, const AttentionSegment* segs, const int32_t* seg_of_row,
                                 AttentionSegment one) {
  extern __shared__ float part_acc[];  // [kAttentionWarps][head_dim]
  __shared__ float part_m[kAttentionWarps], part_l[kAttentionWarps];
  __shared__ int part_seen[kAttentionWarps];  // whether the warp saw a visible key
  const int64_t i = blockIdx.x / a.n_heads;
  const AttentionSegment seg = segs ? segs[seg_of_row[i]] : one;
  const int64_t li = i - seg.row0, n_keys = seg.n_keys;  // li: the row within its request
  const KV* k = static_cast<const KV*>(seg.k);
  const KV* v = static_cast<const KV*>(seg.v);
  const int head_dim = a.head_dim;
  const int h = int(blockIdx.x % a.n_heads), kvh = h / a.group;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const float* qh = a.q + i * a.ldq + int64_t(h) * head_dim;
  float qv[kAttentionDims], acc[kAttentionDims];
  load_lane_dims(qh, lane, head_dim, qv);
#pragma unroll
  for (int t = 0; t < kAttentionDims; ++t) acc[t] = 0.f;
  float m = -INFINITY, l = 0.f;
  bool seen = false;
  const int64_t total = n_keys + seg.own_keys;
  for (int64_t j = warp; j < total; j += kAttentionWarps) {
    // Key j's row of K and V: the cache's (KV) or the pass's own (f32); kv[t] / vv[t] are dim lane + 32 t.
    float kv[kAttentionDims], vv[kAttentionDims];
    if (j < n_keys) {
      if (!visible_device(seg.mask.key_group, seg.mask.query_group, seg.mask.window_start, li, j))
        continue;  // the same for the whole warp
      load_lane_dims(k + int64_t(kvh) * seg.kv_head_stride + j * head_dim, lane, head_dim, kv);
      load_lane_dims(v + int64_t(kvh) * seg.kv_head_stride + j * head_dim, lane, head_dim, vv);
    } else {
      const int64_t row = seg.row0 + (j - n_keys);
      load_lane_dims(a.own_k + row * a.own_ld + int64_t(kvh) * head_dim, lane, head_dim, kv);
      load_lane_dims(a.own_v + row * a.own_ld + int64_t(kvh) * head_dim, lane, head_dim, vv);
    }
    seen = true;
    float s = 0.f;
#pragma unroll
    for (int t = 0; t < kAttentionDims; ++t) s += qv[t] * kv[t];
    for (int offset = 16; offset > 0; offset /= 2) s += __shfl_xor_sync(0xffffffffu, s, offset);
    s *= a.scale;
    if (a.softcap > 0) s = a.softcap * tanhf(s / a.softcap);
    const float m_new = fmaxf(m, s);
    const float keep = expf(m - m_new), p = expf(s - m_new);  // keep = 0 while m is -inf
    l = l * keep + p;
#pragma unroll
    for (int t = 0; t < kAttentionDims; ++t) acc[t] = acc[t] * keep + p * vv[t];
    m = m_new;
  }
  if (lane == 0) {
    part_m[warp] = m;
    part_l[warp] = l;
    part_seen[warp] = seen;
  }
#pragma unroll
  for (int t = 0; t < kAttentionDims; ++t) {
    const int d = lane + 32 * t;
    if (d < head_dim) part_acc[warp * head_dim + d] = acc[t];
  }
  __syncthreads();
  float big = -INFINITY;
  bool any = false;
  for (int w = 0; w < kAttentionWarps; ++w) {
    big = fmaxf(big, part_m[w]);
    any = any || part_seen[w];
  }
  float* oh = a.out + i * a.ldo + int64_t(h) * head_dim;
  if (!any) {  // no visible key
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) oh[d] = 0.f;
    return;
  }
  // A warp without keys has m = -inf and l = 0, and adds nothing; scores that were all NaN leave NaN, as
  // on the CPU.
  float sum = 0.f;
  for (int w = 0; w < kAttentionWarps; ++w)
    if (part_seen[w]) sum += part_l[w] * expf(part_m[w] - big);
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float o = 0.f;
    for (int w = 0; w < kAttentionWarps; ++w)
      if (part_seen[w]) o += part_acc[w * head_dim + d] * expf(part_m[w] - big);
    oh[d] = o / sum;
  }
}

// ---- forward-pass kernels ----



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
template <typename T>
__global__ void scatter_kv_kernel(const float* k, const float* v, int64_t n, int64_t heads, int64_t head_dim,
                                  const int32_t* pos, const AttentionSegment* segs, const int32_t* seg_of_row) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= n * heads * head_dim) return;
  const int64_t d = t % head_dim, h = (t / head_dim) % heads, i = t / (head_dim * heads);
  const AttentionSegment& seg = segs[seg_of_row[i]];
  const int64_t at = h * seg.kv_head_stride + int64_t(pos[i]) * head_dim + d;
  store_value(static_cast<T*>(seg.k) + at, k[t]);
  store_value(static_cast<T*>(seg.v) + at, v[t]);
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


// ---- quantised weights in their GGUF block layout (core/quant_block.h decodes a 32-element block) ----

// A weight matrix's rows as the row kernels read them: any storage, `cols` values a row, row r at
// data + r * row_bytes.
struct WeightRows {
  DeviceMatrix::Storage storage;
  DType type;  // Quant: the blocks' type
  const uint8_t* data;
  int64_t row_bytes, cols;
};

// v[e] = p[j0 + e] as f32 for e < 32, 0 from `cols` on.
template <typename T>
__device__ void load_values(const T* p, int64_t j0, int64_t cols, float* v) {
#pragma unroll
  for (int e = 0; e < 32; ++e) v[e] = j0 + e < cols ? to_float(p[j0 + e]) : 0.f;
}

// Q4_0 and Q8_0 blocks (18 and 34 bytes) start at even addresses: a row is a whole number of blocks,
// every WeightRows starts at its DeviceMatrix's own cudaMalloc'd buffer (no views at an offset), and rows
// are row_bytes apart. So their fields are read 16 bits at a time: half the loads of decode_block's
// byte-wise reads, the same values (the same f16 scale, quants and rounding as block_value).
__device__ void load_q4_0(const uint8_t* block, float* v) {
  const uint16_t* p = reinterpret_cast<const uint16_t*>(block);
  const float d = f16_to_f32(p[0]);
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const uint32_t two = p[1 + k];  // qs[2k] (low byte) and qs[2k + 1]
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t q = (two >> (8 * h)) & 0xff;
      v[2 * k + h] = __fmul_rn(d, float(int(q & 15) - 8));
      v[2 * k + h + 16] = __fmul_rn(d, float(int(q >> 4) - 8));
    }
  }
}
__device__ void load_q8_0(const uint8_t* block, float* v) {
  const uint16_t* p = reinterpret_cast<const uint16_t*>(block);
  const float d = f16_to_f32(p[0]);
#pragma unroll
  for (int k = 0; k < 16; ++k) {
    const uint32_t two = p[1 + k];
    v[2 * k] = __fmul_rn(d, float(int8_t(two & 0xff)));
    v[2 * k + 1] = __fmul_rn(d, float(int8_t(two >> 8)));
  }
}

// Values b * 32 .. b * 32 + 31 of a row (0 past its end: float rows need not be whole blocks).
__device__ void load_block32(const WeightRows& w, const uint8_t* row, int64_t b, float* v) {
  const int64_t j0 = b * 32;
  switch (w.storage) {
    case DeviceMatrix::Storage::Quant: {
      static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ8_0) == 34, "GGUF block sizes");
      if (w.type == DType::Q4_0) return load_q4_0(row + b * int64_t(sizeof(BlockQ4_0)), v);
      if (w.type == DType::Q8_0) return load_q8_0(row + b * int64_t(sizeof(BlockQ8_0)), v);
      DecodedBlock blk;
      decode_block(w.type, row, b, blk);
#pragma unroll
      for (int e = 0; e < 32; ++e) v[e] = block_value(blk, e);
      return;
    }
    case DeviceMatrix::Storage::F32: return load_values(reinterpret_cast<const float*>(row), j0, w.cols, v);
    case DeviceMatrix::Storage::F16: return load_values(reinterpret_cast<const __half*>(row), j0, w.cols, v);
    case DeviceMatrix::Storage::BF16: return load_values(reinterpret_cast<const __nv_bfloat16*>(row), j0, w.cols, v);
  }
}

// out[i] = row (rows ? rows[i] : r0 + i) of w, times scale, for i < n: one thread per 32-value block of a
// row (load_block32, any storage). Embedding lookups (f32 out) and the weight chunks of the tensor-core
// path (f16 out).
template <typename T>
__global__ void rows_kernel(WeightRows w, const int32_t* rows, int64_t r0, int64_t n, float scale, T* out) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t blocks = (w.cols + 31) / 32;
  if (t >= n * blocks) return;
  const int64_t i = t / blocks, b = t % blocks;
  const int64_t r = rows ? int64_t(rows[i]) : r0 + i;
  float v[32];
  load_block32(w, w.data + r * w.row_bytes, b, v);
  T* o = out + i * w.cols;
  for (int e = 0; e < 32; ++e)
    if (b * 32 + e < w.cols) store_value(o + b * 32 + e, v[e] * scale);
}

// Row products y[s][r] = sum_j x[s][j] w[g * rows + r][j] for the slots s of group g = blockIdx.y:
// [first[g], first[g + 1]), or [0, m) when first is null (one matrix). One warp per weight row r; the
// slots are taken M at a time: each lane loads its blocks (b = lane, lane + 32, ...) once into registers
// and dots them with every slot's row of x; the lanes' sums are added by shuffles. x rows are cols
// floats apart (read through the cache: small next to w), y rows `rows` floats apart.
// A group of more than max_slots slots is left to tiled_products_kernel.
template <int M>
__global__ void row_products_kernel(WeightRows w, int64_t rows, const int32_t* first, int64_t m, int64_t max_slots,
                                    const float* x, float* y) {
  const int64_t g = blockIdx.y;
  const int64_t s0 = first ? first[g] : 0, s1 = first ? first[g + 1] : m;
  const int lane = threadIdx.x % 32;
  const int64_t r = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (r >= rows || s0 >= s1 || s1 - s0 > max_slots) return;  // the whole warp: r and the group are the warp's
  const uint8_t* wr = w.data + (g * rows + r) * w.row_bytes;
  const int64_t blocks = (w.cols + 31) / 32;
  const bool whole = w.cols % 32 == 0;  // then every x block is 16-byte aligned: float4 loads
  float v[32];
  for (int64_t t0 = s0; t0 < s1; t0 += M) {
    const int64_t count = s1 - t0 < M ? s1 - t0 : M;
    float acc[M];
#pragma unroll
    for (int i = 0; i < M; ++i) acc[i] = 0.f;
    for (int64_t b = lane; b < blocks; b += 32) {
      load_block32(w, wr, b, v);
#pragma unroll
      for (int i = 0; i < M; ++i) {
        if (i < count) {
          const float* xb = x + (t0 + i) * w.cols + b * 32;
          float sum = 0.f;
          if (whole) {
            const float4* x4 = reinterpret_cast<const float4*>(xb);
#pragma unroll
            for (int e = 0; e < 8; ++e) {
              const float4 q = x4[e];
              sum += v[4 * e] * q.x + v[4 * e + 1] * q.y + v[4 * e + 2] * q.z + v[4 * e + 3] * q.w;
            }
          } else {
#pragma unroll
            for (int e = 0; e < 32; ++e)
              if (b * 32 + e < w.cols) sum += v[e] * xb[e];
          }
          acc[i] += sum;
        }
      }
    }
#pragma unroll
    for (int i = 0; i < M; ++i) {
      if (i < count) {
        float total = acc[i];
        for (int offset = 16; offset > 0; offset /= 2) total += __shfl_down_sync(0xffffffffu, total, offset);
        if (lane == 0) y[(t0 + i) * rows + r] = total;
      }
    }
  }
}

// The same products on the tensor cores, for groups of at least min_slots slots (an expert many rows
// picked; first null: one group, the m rows of x): a block owns 64 weight rows of its group and walks the
// group's slots Slots at a time (16, 32 or 64); per 32-column step it decodes the 64 rows' blocks
// (load_block32) and the Slots slots' x values to f16 in shared memory, and each of its 4 warps multiplies
// its 16 weight rows by the Slots slots (Slots / 16 WMMA tiles, f32 accumulation). With Slots >= the
// group's slots every weight block is read once. Groups with fewer slots are left to row_products_kernel.
constexpr int kTileRows = 64, kTileSlots = 16, kTileLd = 40;  // shared rows of 32 halves, padded to 40

template <int Slots, typename X>
__global__ void tiled_products_kernel(WeightRows w, int64_t rows, const int32_t* first, int64_t m,
                                      int64_t min_slots, const X* x, int64_t blocks_per_split, float* y,
                                      int64_t split_stride) {
  using namespace nvcuda;
  static_assert(Slots == 16 || Slots == 32 || Slots == 64, "Slots: 16, 32 or 64 (a divisor of kTileRows)");
  constexpr int kTiles = Slots / 16;
  constexpr int kThreadsPerSlot = kTileRows / Slots, kValuesPerThread = 32 / kThreadsPerSlot;
  __shared__ __align__(32) __half ws[kTileRows * kTileLd];
  __shared__ __align__(32) __half xs[Slots * kTileLd];
  __shared__ __align__(32) float cs[4][16 * 16];
  const int64_t g = blockIdx.y;
  const int64_t s0 = first ? first[g] : 0, s1 = first ? first[g + 1] : m;
  if (s1 - s0 < min_slots || s1 <= s0) return;  // the whole block
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t r0 = int64_t(blockIdx.x) * kTileRows;
  // This block's share of the columns (blockIdx.z: a split of them), and where its sums go.
  const int64_t all_blocks = (w.cols + 31) / 32, b_begin = int64_t(blockIdx.z) * blocks_per_split;
  const int64_t b_end = b_begin + blocks_per_split < all_blocks ? b_begin + blocks_per_split : all_blocks;
  y += int64_t(blockIdx.z) * split_stride;
  float v[32];
  for (int64_t t0 = s0; t0 < s1; t0 += Slots) {
    const int64_t count = s1 - t0 < Slots ? s1 - t0 : Slots;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kTiles];
#pragma unroll
    for (int f = 0; f < kTiles; ++f) wmma::fill_fragment(acc[f], 0.f);
    for (int64_t b = b_begin; b < b_end; ++b) {
      if (tid < kTileRows) {  // threads 0-63: one weight row's block each
        const int64_t r = r0 + tid;
        if (r < rows) {
          load_block32(w, w.data + (g * rows + r) * w.row_bytes, b, v);
        } else {
#pragma unroll
          for (int e = 0; e < 32; ++e) v[e] = 0.f;
        }
#pragma unroll
        for (int e = 0; e < 32; ++e) ws[tid * kTileLd + e] = __float2half_rn(v[e]);
      } else {  // threads 64-127: kValuesPerThread x values each (slot q / kThreadsPerSlot, its part q % ...)
        const int q = tid - kTileRows, j = q / kThreadsPerSlot, part = q % kThreadsPerSlot;
#pragma unroll
        for (int e = 0; e < kValuesPerThread; ++e) {
          const int64_t col = b * 32 + part * kValuesPerThread + e;
          const float value = j < count && col < w.cols ? to_float(x[(t0 + j) * w.cols + col]) : 0.f;
          xs[j * kTileLd + part * kValuesPerThread + e] = __float2half_rn(value);
        }
      }
      __syncthreads();
#pragma unroll
      for (int k0 = 0; k0 < 32; k0 += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
        wmma::load_matrix_sync(a, ws + warp * 16 * kTileLd + k0, kTileLd);
#pragma unroll
        for (int f = 0; f < kTiles; ++f) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> bx;
          wmma::load_matrix_sync(bx, xs + f * 16 * kTileLd + k0, kTileLd);
          wmma::mma_sync(acc[f], a, bx, acc[f]);
        }
      }
      __syncthreads();  // before the next step's loads overwrite ws and xs
    }
    // acc[f][i][j]: weight row r0 + 16 warp + i, slot t0 + 16 f + j; stored column-major: cs[j * 16 + i].
#pragma unroll
    for (int f = 0; f < kTiles; ++f) {
      wmma::store_matrix_sync(cs[warp], acc[f], 16, wmma::mem_col_major);
      __syncwarp();
      for (int e = lane; e < 16 * 16; e += 32) {
        const int j = f * 16 + e / 16, i = e % 16;
        const int64_t r = r0 + warp * 16 + i;
        if (j < count && r < rows) y[(t0 + j) * rows + r] = cs[warp][e];
      }
      __syncwarp();
    }
  }
}

// a ranks before b (ops top_k's order): larger value, NaN last, ties to the lower index; index < 0 is
// no candidate and ranks last.
__device__ bool ranks_before(float va, int ia, float vb, int ib) {
  if (ib < 0) return ia >= 0;
  if (ia < 0) return false;
  const bool na = isnan(va), nb = isnan(vb);
  if (na != nb) return nb;
  if (!na && va != vb) return va > vb;
  return ia < ib;
}

constexpr int kMaxExpertsUsed = 32;

// One warp per row: softmax of the router logits (probabilities in shared memory, dynamic: a row of
// n_experts floats per warp), k rounds of a warp-wide best-untaken search, then lane 0 writes the row's
// entries in ascending expert order with their weights (moe_route in cuda_ops.h).
__global__ void moe_route_kernel(const float* logits, int64_t n, int n_experts, int k, bool normalize,
                                 const float* expert_scale, int32_t* expert_of, float* weight_of) {
  extern __shared__ float probs_all[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t r = int64_t(blockIdx.x) * (blockDim.x / 32) + warp;
  if (r >= n) return;  // the whole warp
  const float* l = logits + r * n_experts;
  float* p = probs_all + int64_t(warp) * n_experts;
  float mx = -INFINITY;
  for (int e = lane; e < n_experts; e += 32) mx = fmaxf(mx, l[e]);
  for (int offset = 16; offset > 0; offset /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, offset));
  double sum = 0;
  for (int e = lane; e < n_experts; e += 32) sum += exp(double(l[e]) - mx);
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  for (int e = lane; e < n_experts; e += 32) p[e] = float(exp(double(l[e]) - mx) / sum);
  __syncwarp();
  int top[kMaxExpertsUsed];
  for (int j = 0; j < k; ++j) {
    float best_v = 0.f;
    int best_i = -1;
    for (int e = lane; e < n_experts; e += 32) {
      bool taken = false;
      for (int t = 0; t < j; ++t) taken = taken || top[t] == e;
      if (!taken && ranks_before(p[e], e, best_v, best_i)) {
        best_v = p[e];
        best_i = e;
      }
    }
    for (int offset = 16; offset > 0; offset /= 2) {
      const float ov = __shfl_xor_sync(0xffffffffu, best_v, offset);
      const int oi = __shfl_xor_sync(0xffffffffu, best_i, offset);
      if (ranks_before(ov, oi, best_v, best_i)) {
        best_v = ov;
        best_i = oi;
      }
    }
    top[j] = best_i;  // the same on every lane
  }
  if (lane != 0) return;
  float total = 0.f;
  for (int j = 0; j < k; ++j) total += p[top[j]];  // in rank order, as on the CPU
  for (int j = 1; j < k; ++j)  // ascending expert order
    for (int t = j; t > 0 && top[t - 1] > top[t]; --t) {
      const int swap = top[t];
      top[t] = top[t - 1];
      top[t - 1] = swap;
    }
  for (int j = 0; j < k; ++j) {
    const int e = top[j];
    float weight = normalize ? p[e] / total : p[e];
    if (expert_scale) weight *= expert_scale[e];
    expert_of[r * k + j] = e;
    weight_of[r * k + j] = weight;
  }
}

// One block: counts per expert (shared atomics), their prefix sums (first), then each entry takes the
// next slot of its expert (moe_plan in cuda_ops.h).
__global__ void moe_plan_kernel(const int32_t* expert_of, int64_t n, int k, int n_experts, int32_t* first,
                                int32_t* slot_row, int32_t* slot_of, int32_t* begin) {
  extern __shared__ int32_t next_slot[];
  const int64_t entries = n * k;
  for (int e = threadIdx.x; e < n_experts; e += blockDim.x) next_slot[e] = 0;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < entries; i += blockDim.x) atomicAdd(&next_slot[expert_of[i]], 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t run = 0;
    for (int e = 0; e < n_experts; ++e) {
      const int32_t count = next_slot[e];
      first[e] = run;
      next_slot[e] = run;
      run += count;
    }
    first[n_experts] = run;
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < entries; i += blockDim.x) {
    const int32_t s = atomicAdd(&next_slot[expert_of[i]], 1);
    slot_row[s] = int32_t(i / k);
    slot_of[i] = s;
  }
  for (int64_t r = threadIdx.x; r <= n; r += blockDim.x) begin[r] = int32_t(r * k);
}

// A growing device scratch buffer per purpose (the backend runs on one stream, one call at a time).
DeviceBuffer& matmul_scratch() {
  static DeviceBuffer b;
  return b;
}
// Quant weights decoded to f16 for the tensor cores, a chunk of rows at a time (at most kDecodeChunk values).
DeviceBuffer& decode_scratch() {
  static DeviceBuffer b;
  return b;
}
constexpr int64_t kDecodeChunk = int64_t(1) << 25;  // 64 MiB of f16

WeightRows weight_rows(const DeviceMatrix& w) {
  return {w.storage(), w.quant_type(), static_cast<const uint8_t*>(w.data()), w.row_bytes(), w.cols()};
}

// out[i] = row (rows ? rows[i] : r0 + i) of w as values times scale (T: float or __half), for i < n.
template <typename T>
void read_rows(const DeviceMatrix& w, const int32_t* rows, int64_t r0, int64_t n, float scale, T* out) {
  const int64_t threads = n * ((w.cols() + 31) / 32);
  if (threads == 0) return;
  rows_kernel<<<blocks_for(threads), kBlock, 0, stream()>>>(weight_rows(w), rows, r0, n, scale, out);
  check_launch("read rows");
}

// Rows [r0, r0 + n) of a Quant matrix as f16 (row-major, w.cols() wide) into out.
void decode_rows_f16(const DeviceMatrix& w, int64_t r0, int64_t n, __half* out) {
  read_rows(w, nullptr, r0, n, 1.f, out);
}
// Weight rows per chunk of the tensor-core path: a multiple of 64 (each chunk's output and input columns
// start aligned for cuBLAS), or the whole matrix.
int64_t decode_chunk_rows(const DeviceMatrix& w) {
  const int64_t rows = kDecodeChunk / std::max<int64_t>(1, w.cols());
  return std::min(w.rows(), std::max<int64_t>(64, rows / 64 * 64));
}

// row_products_kernel over `groups` groups of `rows` weight rows each.
template <int M>
void launch_row_products(const DeviceMatrix& w, int64_t groups, const int32_t* first, int64_t m, const float* x,
                         float* y, int64_t max_slots = INT64_MAX) {
  constexpr int kWarps = kBlock / 32;
  const int64_t rows = w.rows() / groups;
  const dim3 grid(unsigned((rows + kWarps - 1) / kWarps), unsigned(groups));
  row_products_kernel<M><<<grid, kBlock, 0, stream()>>>(weight_rows(w), rows, first, m, max_slots, x, y);
  check_launch("row products");
}

// y[i] = sum over z of part[z * stride + i], z = 0 .. splits - 1 in order.
__global__ void sum_splits_kernel(const float* part, int64_t n, int splits, int64_t stride, float* y) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float sum = part[i];
  for (int z = 1; z < splits; ++z) sum += part[z * stride + i];
  y[i] = sum;
}

// The partial sums of a product whose columns are split (launch_tiled_products).
DeviceBuffer& split_scratch() {
  static DeviceBuffer b;
  return b;
}

// How many parts the columns of a one-group fused-tile product are split into: enough thread blocks for
// a large GPU (256: two on each of an H100's 132 SMs; a 4096-row matrix has only 64 tiles of rows), the
// parts of equal size (at least 8 column blocks) but the last, none empty. From the shape alone, so that
// a product sums its parts the same way on every GPU.
int64_t tile_splits(int64_t rows, int64_t cols) {
  constexpr int64_t kWantedBlocks = 256;
  const int64_t tiles = (rows + kTileRows - 1) / kTileRows, blocks = (cols + 31) / 32;
  const int64_t splits = std::max<int64_t>(1, std::min((kWantedBlocks + tiles - 1) / tiles, blocks / 8));
  const int64_t per_split = (blocks + splits - 1) / splits;
  return (blocks + per_split - 1) / per_split;
}

// tiled_products_kernel<Slots> over `groups` groups of `rows` weight rows each (first null: one group, m
// rows of x). splits > 1 (one group only): the columns in that many parts, each part's sums into a
// scratch buffer, then added in part order, so the result does not depend on the scheduling.
template <int Slots, typename X>
void launch_tiled_products(const DeviceMatrix& w, int64_t groups, const int32_t* first, int64_t m,
                           int64_t min_slots, const X* x, float* y, int64_t splits = 1) {
  check(splits == 1 || (groups == 1 && !first), "cuda tiled products: split columns need one group");
  const int64_t rows = w.rows() / groups, blocks = (w.cols() + 31) / 32;
  const int64_t per_split = (blocks + splits - 1) / splits;
  const dim3 grid(unsigned((rows + kTileRows - 1) / kTileRows), unsigned(groups), unsigned(splits));
  float* out = splits > 1 ? split_scratch().reserve<float>(splits * m * rows) : y;
  tiled_products_kernel<Slots, X><<<grid, 128, 0, stream()>>>(weight_rows(w), rows, first, m, min_slots, x,
                                                              per_split, out, m * rows);
  check_launch("tiled products");
  if (splits == 1) return;
  sum_splits_kernel<<<blocks_for(m * rows), kBlock, 0, stream()>>>(out, m * rows, int(splits), m * rows, y);
  check_launch("sum of split products");
}

// n activations rounded to a f16 / bf16 weight's input type (storage) into out.
void to_input_type(const float* x, int64_t n, DeviceMatrix::Storage storage, void* out) {
  check(storage == DeviceMatrix::Storage::F16 || storage == DeviceMatrix::Storage::BF16,
        "cuda to_input_type: only f16 / bf16 weights take rounded activations");
  if (n == 0) return;
  if (storage == DeviceMatrix::Storage::F16)
    to_half_kernel<<<blocks_for(n), kBlock, 0, stream()>>>(x, n, static_cast<__half*>(out));
  else
    to_bf16_kernel<<<blocks_for(n), kBlock, 0, stream()>>>(x, n, static_cast<__nv_bfloat16*>(out));
  check_launch("convert activations");
}

// matmul for Quant weights (cuda_ops.h): the register kernel for a few rows, else f16 chunks on the tensor cores.
void matmul_quant(const DeviceMatrix& w, const float* x, int64_t m, float* y) {
  if (m <= kQuantGemvRows) {
    const OpSpan span("product: quantised, register kernel");
    if (m == 1) return launch_row_products<1>(w, 1, nullptr, m, x, y);
    return launch_row_products<kQuantGemvRows>(w, 1, nullptr, m, x, y);
  }
  if (m <= kQuantTiledRows) {  // every weight block read once, decoded into shared memory
    const OpSpan span("product: quantised, fused decode on the tensor cores");
    __half* x16 = matmul_scratch().reserve<__half>(m * w.cols());  // x read by every tile of rows: f16 once
    to_input_type(x, m * w.cols(), DeviceMatrix::Storage::F16, x16);
    const int64_t splits = tile_splits(w.rows(), w.cols());
    if (m <= 16) return launch_tiled_products<16>(w, 1, nullptr, m, 0, x16, y, splits);
    if (m <= 32) return launch_tiled_products<32>(w, 1, nullptr, m, 0, x16, y, splits);
    return launch_tiled_products<64>(w, 1, nullptr, m, 0, x16, y, splits);
  }
  const OpSpan span("product: quantised, decoded f16 chunks + cuBLAS");
  const int64_t k = w.cols();
  __half* x16 = matmul_scratch().reserve<__half>(m * k);
  to_input_type(x, m * k, DeviceMatrix::Storage::F16, x16);
  const int64_t chunk = decode_chunk_rows(w);
  __half* wh = decode_scratch().reserve<__half>(chunk * k);
  const float one = 1.f, zero = 0.f;
  for (int64_t r0 = 0; r0 < w.rows(); r0 += chunk) {
    const int64_t n = std::min(chunk, w.rows() - r0);
    decode_rows_f16(w, r0, n, wh);
    // Column-major: y^T rows r0 .. r0 + n (ld w.rows()) = chunk (k x n, ld k)^T x^T (k x m, ld k).
    check_cublas(cublasGemmEx(cublas(), CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(m), int(k), &one, wh, CUDA_R_16F, int(k),
                              x16, CUDA_R_16F, int(k), &zero, y + r0, CUDA_R_32F, int(w.rows()), CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx (quantised weights)");
  }
}

// The product of rows rounded to a f16 / bf16 weight's input type (to_input_type) with the weight.
void matmul_rounded(const DeviceMatrix& w, const void* x16, int64_t m, float* y) {
  check(w.storage() == DeviceMatrix::Storage::F16 || w.storage() == DeviceMatrix::Storage::BF16,
        "cuda matmul_rounded: only f16 / bf16 weights take rounded activations");
  if (m == 0 || w.rows() == 0) return;
  const int n = int(w.rows()), k = int(w.cols()), mm = int(m);
  const float one = 1.f, zero = 0.f;
  const cudaDataType_t type = w.storage() == DeviceMatrix::Storage::F16 ? CUDA_R_16F : CUDA_R_16BF;
  check_cublas(cublasGemmEx(cublas(), CUBLAS_OP_T, CUBLAS_OP_N, n, mm, k, &one, w.data(), type, k, x16, type, k, &zero,
                            y, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx");
}

}  // namespace

namespace {

std::string cuda_version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

// Why cudaGetDeviceCount failed, in the user's terms: the NVIDIA driver's library missing, a driver older
// than this build's runtime, or no device; the runtime's own message last.
std::string device_count_failure(cudaError_t e) {
  std::string why;
  if (void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    dlclose(driver);
    int driver_version = 0, runtime_version = 0;
    cudaDriverGetVersion(&driver_version);
    cudaRuntimeGetVersion(&runtime_version);
    why = "no usable CUDA driver or device (the NVIDIA driver supports CUDA " + cuda_version_text(driver_version) +
          ", this build's runtime is CUDA " + cuda_version_text(runtime_version) + ")";
  } else {
    const char* error = dlerror();
    why = std::string("no NVIDIA driver: the CUDA driver library cannot be loaded (") +
          (error ? error : "libcuda.so.1") + ")";
  }
  return why + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e);
}

}  // namespace

bool available(std::string* reason) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    if (reason) *reason = device_count_failure(e);
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

namespace {
void collect_profile();  // the profiler's (below): finished spans into its totals
}  // namespace

void synchronize() {
  check_cuda(cudaDeviceSynchronize(), "kernel execution");
  collect_profile();
}

namespace {
std::atomic<uint64_t> growths{0}, graph_replays{0};
std::atomic<int64_t> buffer_bytes{0}, buffer_peak{0};

void note_allocated(int64_t bytes) {
  const int64_t now = buffer_bytes += bytes;
  int64_t peak = buffer_peak.load();
  while (now > peak && !buffer_peak.compare_exchange_weak(peak, now)) {
  }
}
}  // namespace

uint64_t scratch_growths() { return growths.load(); }
int64_t device_buffer_bytes() { return buffer_bytes.load(); }
int64_t device_buffer_peak_bytes() { return buffer_peak.load(); }

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  check_cuda(cudaMalloc(&ptr_, bytes), ("cudaMalloc of " + std::to_string(bytes) + " bytes").c_str());
  note_allocated(int64_t(bytes));
}

void DeviceBuffer::grow(size_t bytes) {
  *this = DeviceBuffer(bytes);
  ++growths;
}

DeviceGraph::~DeviceGraph() {
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
}
DeviceGraph::DeviceGraph(DeviceGraph&& other) noexcept : exec_(other.exec_) { other.exec_ = nullptr; }
DeviceGraph& DeviceGraph::operator=(DeviceGraph&& other) noexcept {
  if (this != &other) {
    if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
    exec_ = other.exec_;
    other.exec_ = nullptr;
  }
  return *this;
}

bool DeviceGraph::record(const std::function<void()>& work, std::string* why) {
  *this = DeviceGraph();
  std::string failure;
  cudaError_t e = cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (why) *why = std::string("cudaStreamBeginCapture: ") + cudaGetErrorString(e);
    return false;
  }
  try {
    work();
  } catch (const std::exception& ex) {
    failure = ex.what();
  }
  cudaGraph_t graph = nullptr;
  e = cudaStreamEndCapture(stream(), &graph);  // always ends the capture, even after a failure
  if (failure.empty() && e != cudaSuccess) failure = std::string("cudaStreamEndCapture: ") + cudaGetErrorString(e);
  cudaGraphExec_t exec = nullptr;
  if (failure.empty()) {
    e = cudaGraphInstantiate(&exec, graph, 0);
    if (e != cudaSuccess) failure = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(e);
  }
  if (graph) cudaGraphDestroy(graph);
  if (!failure.empty()) {
    if (exec) cudaGraphExecDestroy(exec);
    cudaGetLastError();  // capture errors are not sticky: clear the last one
    if (why) *why = failure;
    return false;
  }
  exec_ = exec;
  return true;
}

void DeviceGraph::replay() {
  check(exec_ != nullptr, "cuda: replay of a graph that was not recorded");
  check_cuda(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), stream()), "cudaGraphLaunch");
  ++graph_replays;
}

uint64_t DeviceGraph::replays() { return graph_replays.load(); }

namespace {
// The profiler's state: the spans open now (their names: a finished span is counted under the path of
// names from the outermost open span to it), finished spans not yet read, the totals by path, and events
// to reuse. One lock: spans come from the backend's one pass at a time, and from tests.
struct Profiler {
  std::mutex mutex;
  bool on = false;
  std::vector<const char*> open;
  struct Finished {
    std::string path;  // the names from the outermost span, joined by '\n' (no name holds one)
    cudaEvent_t start, end;
  };
  std::vector<Finished> finished;
  std::map<std::string, OpTime> totals;  // by path
  std::vector<cudaEvent_t> spare;
  cudaEvent_t event() {  // under mutex
    cudaEvent_t e = nullptr;
    if (!spare.empty()) {
      e = spare.back();
      spare.pop_back();
      return e;
    }
    check_cuda(cudaEventCreate(&e), "cudaEventCreate (profiling)");
    return e;
  }
  // Adds every finished span's time to the totals; the device has finished their work. A span whose
  // time cannot be read is dropped (profiling never fails a pass); its events are not reused.
  void collect() {  // under mutex
    std::vector<Finished> done;
    done.swap(finished);
    for (Finished& f : done) {
      float ms = 0;
      if (cudaEventElapsedTime(&ms, f.start, f.end) != cudaSuccess) {
        cudaGetLastError();
        cudaEventDestroy(f.start);
        cudaEventDestroy(f.end);
        continue;
      }
      OpTime& t = totals[f.path];
      const size_t cut = f.path.rfind('\n');
      t.name = cut == std::string::npos ? f.path : f.path.substr(cut + 1);
      t.depth = int(std::count(f.path.begin(), f.path.end(), '\n'));
      t.ms += ms;
      ++t.spans;
      spare.push_back(f.start);
      spare.push_back(f.end);
    }
  }
};
Profiler& profiler() {
  static Profiler p;
  return p;
}
void collect_profile() {
  Profiler& p = profiler();
  const std::lock_guard<std::mutex> lock(p.mutex);
  p.collect();
}
}  // namespace

void set_profiling(bool on) {
  Profiler& p = profiler();
  const std::lock_guard<std::mutex> lock(p.mutex);
  p.on = on;
}
bool profiling() {
  Profiler& p = profiler();
  const std::lock_guard<std::mutex> lock(p.mutex);
  return p.on;
}

std::vector<OpTime> take_profile() {
  synchronize();  // collects
  Profiler& p = profiler();
  const std::lock_guard<std::mutex> lock(p.mutex);
  // Tree order: a span's path right after its parent's, siblings by time, largest first.
  std::vector<std::pair<std::vector<std::string>, OpTime>> rows;
  for (auto& [path, t] : p.totals) {
    std::vector<std::string> names;
    for (size_t b = 0;;) {
      const size_t e = path.find('\n', b);
      names.push_back(path.substr(b, e == std::string::npos ? std::string::npos : e - b));
      if (e == std::string::npos) break;
      b = e + 1;
    }
    rows.emplace_back(std::move(names), t);
  }
  auto ms_of = [&](const std::vector<std::string>& names, size_t depth) {  // the prefix of depth + 1 names
    std::string path;
    for (size_t d = 0; d <= depth; ++d) path += (d ? "\n" : "") + names[d];
    const auto found = p.totals.find(path);
    return found == p.totals.end() ? 0.0 : found->second.ms;
  };
  std::sort(rows.begin(), rows.end(), [&](const auto& a, const auto& b) {
    const std::vector<std::string>&x = a.first, &y = b.first;
    size_t d = 0;
    while (d < x.size() && d < y.size() && x[d] == y[d]) ++d;
    if (d == x.size() || d == y.size()) return x.size() < y.size();  // a parent before its children
    const double mx = ms_of(x, d), my = ms_of(y, d);
    return mx != my ? mx > my : x[d] < y[d];
  });
  p.totals.clear();
  std::vector<OpTime> out;
  for (auto& row : rows) out.push_back(std::move(row.second));
  return out;
}

OpSpan::OpSpan(const char* name) {
  Profiler& p = profiler();
  const std::lock_guard<std::mutex> lock(p.mutex);
  if (!p.on) return;
  cudaEvent_t e = p.event();
  if (cudaEventRecord(e, stream()) != cudaSuccess) {  // no span, and no error for the pass
    cudaGetLastError();
    p.spare.push_back(e);
    return;
  }
  start_ = e;
  p.open.push_back(name);
}

OpSpan::~OpSpan() {
  if (!start_) return;
  Profiler& p = profiler();
  const std::lock_guard<std::mutex> lock(p.mutex);
  std::string path;
  for (const char* name : p.open) path += std::string(path.empty() ? "" : "\n") + name;
  p.open.pop_back();  // this span is the innermost open one (spans are scoped)
  cudaEvent_t end = nullptr;
  try {
    end = p.event();
  } catch (const Error&) {  // no event for the end: the span is dropped
    p.spare.push_back(static_cast<cudaEvent_t>(start_));
    return;
  }
  if (cudaEventRecord(end, stream()) != cudaSuccess) {
    cudaGetLastError();
    p.spare.push_back(static_cast<cudaEvent_t>(start_));
    p.spare.push_back(end);
    return;
  }
  p.finished.push_back({std::move(path), static_cast<cudaEvent_t>(start_), end});
}
void DeviceBuffer::release() {
  if (!ptr_) return;
  cudaFree(ptr_);
  buffer_bytes -= int64_t(bytes_);
  ptr_ = nullptr;
}
DeviceBuffer::~DeviceBuffer() { release(); }
DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
  o.ptr_ = nullptr;
  o.bytes_ = 0;
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    release();
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

DeviceMatrix::Storage device_storage_of(DType type) {
  if (type == DType::F32) return DeviceMatrix::Storage::F32;
  if (type == DType::BF16) return DeviceMatrix::Storage::BF16;
  return block_decodable(interleaved_base(type)) ? DeviceMatrix::Storage::Quant : DeviceMatrix::Storage::F16;
}

namespace {

// Uploads `rows` rows of row_bytes into `buffer` in chunks of about 64 MiB; write_row(r, dst) writes row r
// into a host staging chunk, on several threads (rows in turn) when the chunk is large. An error on any
// thread is rethrown here.
void upload_rows(DeviceBuffer& buffer, int64_t rows, int64_t row_bytes,
                 const std::function<void(int64_t, uint8_t*)>& write_row) {
  const int64_t rows_per_chunk = std::max<int64_t>(1, (int64_t(1) << 26) / std::max<int64_t>(1, row_bytes));
  std::vector<uint8_t> staging;
  for (int64_t r0 = 0; r0 < rows; r0 += rows_per_chunk) {
    const int64_t n = std::min(rows_per_chunk, rows - r0);
    staging.resize(size_t(n * row_bytes));
    const int threads = int(std::max<int64_t>(
        1, std::min<int64_t>(std::thread::hardware_concurrency(), n * row_bytes / (int64_t(1) << 21) + 1)));
    std::vector<std::string> errors(static_cast<size_t>(threads));
    auto convert = [&](int t) {
      try {
        for (int64_t r = t; r < n; r += threads) write_row(r0 + r, staging.data() + r * row_bytes);
      } catch (const std::exception& e) {
        errors[size_t(t)] = e.what();
      }
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(convert, t);
    convert(0);
    for (std::thread& t : pool) t.join();
    for (const std::string& e : errors) check(e.empty(), e);
    buffer.upload(staging.data(), staging.size(), size_t(r0 * row_bytes));
  }
}

}  // namespace

DeviceMatrix DeviceMatrix::upload(const TensorView& w) {
  DeviceMatrix m;
  m.rows_ = w.rows();
  m.cols_ = w.cols();
  m.storage_ = device_storage_of(w.type);
  m.row_bytes_ = m.cols_ * (m.storage_ == Storage::F32 ? 4 : 2);  // Quant: set below
  if (m.storage_ == Storage::Quant) {
    // The file's rows, in order (an interleaved CPU layout is read back into the file layout).
    m.quant_type_ = interleaved_base(w.type);
    m.row_bytes_ = canvas::row_bytes(m.quant_type_, m.cols_);
    m.buffer_ = DeviceBuffer(size_t(m.rows_ * m.row_bytes_));
    if (!is_interleaved(w.type)) {
      m.buffer_.upload(w.data, size_t(m.rows_ * m.row_bytes_));
      return m;
    }
    upload_rows(m.buffer_, m.rows_, m.row_bytes_, [&](int64_t r, uint8_t* dst) { get_row_bytes(w, r, dst); });
    return m;
  }
  if (m.storage_ == Storage::F32 || m.storage_ == Storage::BF16) {  // as stored
    m.buffer_ = DeviceBuffer(size_t(m.rows_ * m.row_bytes_));
    m.buffer_.upload(w.data, size_t(m.rows_ * m.row_bytes_));
    return m;
  }
  // F16 and everything else: each row dequantised on the host (ops get_row) and rounded to f16.
  m.buffer_ = DeviceBuffer(size_t(m.rows_ * m.row_bytes_));
  upload_rows(m.buffer_, m.rows_, m.row_bytes_, [&](int64_t r, uint8_t* dst) {
    thread_local std::vector<float> row;
    row.resize(size_t(m.cols_));
    get_row(w, r, row.data());
    __half* out = reinterpret_cast<__half*>(dst);
    for (int64_t c = 0; c < m.cols_; ++c) out[c] = __float2half_rn(row[size_t(c)]);
  });
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
    const OpSpan span("product: f32, cuBLAS");
    check_cublas(cublasSgemm(cublas(), CUBLAS_OP_T, CUBLAS_OP_N, n, mm, k, &one, static_cast<const float*>(w.data()), k,
                             x, k, &zero, y, n),
                 "cublasSgemm");
    return;
  }
  if (w.storage() == DeviceMatrix::Storage::Quant) return matmul_quant(w, x, m, y);
  const OpSpan span("product: f16 / bf16, cuBLAS");
  void* xr = matmul_scratch().reserve<uint16_t>(m * k);
  to_input_type(x, m * int64_t(k), w.storage(), xr);
  matmul_rounded(w, xr, m, y);
}

void rms_norm(const float* x, const float* w, int64_t rows, int64_t n, float eps, float* y) {
  if (rows == 0 || n == 0) return;
  rms_norm_kernel<<<unsigned(rows), kBlock, 0, stream()>>>(x, w, n, eps, y);
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
  rope_kernel<<<blocks_for(threads), kBlock, 0, stream()>>>(x, n_rows, n_heads, pos, p.head_dim, rot_dims, half, active,
                                                double(p.theta), p.layout == RopeLayout::Neox);
  check_launch("rope");
}

void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  if (n == 0) return;
  glu_kernel<<<blocks_for(n), kBlock, 0, stream()>>>(gate, up, n, out, false);
  check_launch("swiglu");
}
void geglu(const float* gate, const float* up, int64_t n, float* out) {
  if (n == 0) return;
  glu_kernel<<<blocks_for(n), kBlock, 0, stream()>>>(gate, up, n, out, true);
  check_launch("geglu");
}

void softcap(float* x, int64_t n, float c) {
  check(c > 0, "cuda softcap: the cap must be positive");
  if (n == 0) return;
  softcap_kernel<<<blocks_for(n), kBlock, 0, stream()>>>(x, n, c);
  check_launch("softcap");
}

void row_stats(const float* logits, int64_t rows, int64_t vocab, RowStats* out) {
  if (rows == 0) return;
  check(vocab > 0, "cuda row_stats: empty rows");
  row_stats_kernel<<<unsigned(rows), kBlock, 0, stream()>>>(logits, vocab, out);
  check_launch("row_stats");
}

namespace {
void launch_attention(const float* q, int64_t n_rows, int64_t ldq, const AttentionSegment* segs,
                      const int32_t* seg_of_row, const AttentionSegment& one, KvType kv_type, const float* own_k,
                      const float* own_v, int64_t own_ld, const AttentionShape& shape, float* out, int64_t ldo) {
  check(shape.n_heads > 0 && shape.n_kv_heads > 0 && shape.head_dim > 0 && shape.n_heads % shape.n_kv_heads == 0,
        "cuda attention: bad head counts");
  check(shape.head_dim <= 32 * kAttentionDims, "cuda attention: head_dim above 512");
  if (n_rows == 0) return;
  const AttentionLaunch a{q, ldq, out, ldo, own_k, own_v, own_ld, int(shape.n_heads),
                          int(shape.n_heads / shape.n_kv_heads), int(shape.head_dim), shape.scale, shape.softcap};
  const int64_t blocks = n_rows * shape.n_heads;
  const size_t shared = size_t(kAttentionWarps) * size_t(shape.head_dim) * sizeof(float);
  if (kv_type == KvType::F16)
    attention_kernel<__half><<<unsigned(blocks), kBlock, shared, stream()>>>(a, segs, seg_of_row, one);
  else
    attention_kernel<float><<<unsigned(blocks), kBlock, shared, stream()>>>(a, segs, seg_of_row, one);
  check_launch("attention");
}
}  // namespace

void attention(const float* q, int64_t n_q, int64_t ldq, const void* k, const void* v, KvType kv_type, int64_t n_keys,
               int64_t kv_head_stride, const AttentionMask& mask, const AttentionShape& shape, float* out,
               int64_t ldo, const ExtraKeys& extra) {
  check((mask.key_group == nullptr) == (mask.query_group == nullptr),
        "cuda attention: key_group and query_group must both be set or both be null");
  check(extra.n == 0 || (extra.k && extra.v), "cuda attention: extra keys without K or V");
  check(n_keys >= 0 && n_keys <= INT32_MAX && extra.n >= 0 && extra.n <= INT32_MAX,
        "cuda attention: key counts beyond int32");
  AttentionSegment one;
  one.k = const_cast<void*>(k);
  one.v = const_cast<void*>(v);
  one.kv_head_stride = kv_head_stride;
  one.mask = mask;
  one.n_keys = int32_t(n_keys);
  one.own_keys = int32_t(extra.n);
  launch_attention(q, n_q, ldq, nullptr, nullptr, one, kv_type, extra.k, extra.v, extra.ld, shape, out, ldo);
}

void attention_batch(const float* q, int64_t n_rows, int64_t ldq, const AttentionSegment* segs,
                     const int32_t* seg_of_row, KvType kv_type, const float* own_k, const float* own_v, int64_t own_ld,
                     const AttentionShape& shape, float* out, int64_t ldo) {
  check(segs && seg_of_row, "cuda attention_batch: no requests");
  launch_attention(q, n_rows, ldq, segs, seg_of_row, AttentionSegment{}, kv_type, own_k, own_v, own_ld, shape, out,
                   ldo);
}

void embed_rows(const DeviceMatrix& table, const int32_t* rows, int64_t n, float scale, float* out) {
  read_rows(table, rows, 0, n, scale, out);
}

void add(float* x, const float* y, int64_t n) {
  if (n == 0) return;
  add_kernel<<<blocks_for(n), kBlock, 0, stream()>>>(x, y, n);
  check_launch("add");
}
void add_then_scale(float* x, const float* y, int64_t n, float s) {
  if (n == 0) return;
  add_then_scale_kernel<<<blocks_for(n), kBlock, 0, stream()>>>(x, y, n, s);
  check_launch("add_then_scale");
}
void add_to_rows(float* x, const float* bias, int64_t rows, int64_t width) {
  if (rows * width == 0) return;
  add_to_rows_kernel<<<blocks_for(rows * width), kBlock, 0, stream()>>>(x, bias, rows * width, width);
  check_launch("add_to_rows");
}
void scale_columns(float* x, const float* scale, int64_t rows, int64_t width, float s) {
  if (rows * width == 0) return;
  scale_columns_kernel<<<blocks_for(rows * width), kBlock, 0, stream()>>>(x, scale, rows * width, width, s);
  check_launch("scale_columns");
}
void scatter_kv(const float* k, const float* v, int64_t n, int64_t heads, int64_t head_dim, const int32_t* pos,
                const AttentionSegment* segs, const int32_t* seg_of_row, KvType kv_type) {
  const int64_t count = n * heads * head_dim;
  if (count == 0) return;
  if (kv_type == KvType::F16)
    scatter_kv_kernel<__half><<<blocks_for(count), kBlock, 0, stream()>>>(k, v, n, heads, head_dim, pos, segs,
                                                                          seg_of_row);
  else
    scatter_kv_kernel<float><<<blocks_for(count), kBlock, 0, stream()>>>(k, v, n, heads, head_dim, pos, segs,
                                                                         seg_of_row);
  check_launch("scatter_kv");
}
void gather_rows(const float* src, int64_t width, const int32_t* rows, int64_t n, float* dst) {
  if (n * width == 0) return;
  gather_rows_kernel<<<blocks_for(n * width), kBlock, 0, stream()>>>(src, width, rows, n, dst);
  check_launch("gather_rows");
}
void combine_rows(const float* results, int64_t width, const int32_t* begin, const int32_t* slot, const float* weight,
                  int64_t n_rows, float* out) {
  if (n_rows * width == 0) return;
  combine_rows_kernel<<<blocks_for(n_rows * width), kBlock, 0, stream()>>>(results, width, begin, slot,
                                                                           weight, n_rows, out);
  check_launch("combine_rows");
}
void glu_halves(const float* gu, int64_t rows, int64_t width, bool gelu, float* out) {
  if (rows * width == 0) return;
  glu_halves_kernel<<<blocks_for(rows * width), kBlock, 0, stream()>>>(gu, rows, width, gelu, out);
  check_launch("glu_halves");
}
void softmax_rows(const float* x, int64_t rows, int64_t n, float inv_temperature, float* p) {
  if (rows == 0) return;
  check(n > 0, "cuda softmax_rows: empty rows");
  softmax_rows_kernel<<<unsigned(rows), kBlock, 0, stream()>>>(x, n, inv_temperature, p);
  check_launch("softmax_rows");
}
void head_stats(const float* logits, int64_t rows, int64_t vocab, float temperature, uint64_t seed,
                const uint64_t* row_ids, HeadRowStats* out) {
  if (rows == 0) return;
  check(vocab > 0 && temperature >= 0.f, "cuda head_stats: empty rows, or a temperature that is negative or NaN");
  head_stats_kernel<<<unsigned(rows), kBlock, 0, stream()>>>(logits, vocab, temperature, seed, row_ids, out);
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
  if (bytes) check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream()), "copy on device");
}

void matmul_transposed(const DeviceMatrix& w, const float* x, int64_t m, float* y) {
  if (m == 0 || w.cols() == 0) return;
  // Row-major y[m x n] = x[m x k] w[k x n] (w row-major k x n, n = cols): column-major
  // y^T(n x m) = w^T(n x k, = w as column-major with ld n) x^T(k x m, ld k).
  const int n = int(w.cols()), k = int(w.rows()), mm = int(m);
  const float one = 1.f, zero = 0.f;
  if (w.storage() == DeviceMatrix::Storage::F32) {
    const OpSpan span("product: f32, cuBLAS");
    check_cublas(cublasSgemm(cublas(), CUBLAS_OP_N, CUBLAS_OP_N, n, mm, k, &one, static_cast<const float*>(w.data()), n,
                             x, k, &zero, y, n),
                 "cublasSgemm");
    return;
  }
  const int64_t count = m * int64_t(k);
  if (w.storage() == DeviceMatrix::Storage::Quant) {
    if (k == 0) return fill_zero(y, size_t(m * n) * 4);  // an empty sum, as cuBLAS gives with k = 0
    // The sum over w's rows in chunks: each chunk of rows decoded to f16 and added into y (beta 1 after
    // the first), x rounded to f16 once.
    __half* x16 = matmul_scratch().reserve<__half>(count);
    to_input_type(x, count, DeviceMatrix::Storage::F16, x16);
    const int64_t chunk = decode_chunk_rows(w);
    __half* wh = decode_scratch().reserve<__half>(chunk * n);
    for (int64_t r0 = 0; r0 < k; r0 += chunk) {
      const int64_t rows = std::min(chunk, int64_t(k) - r0);
      decode_rows_f16(w, r0, rows, wh);
      const float beta = r0 == 0 ? 0.f : 1.f;
      check_cublas(cublasGemmEx(cublas(), CUBLAS_OP_N, CUBLAS_OP_N, n, mm, int(rows), &one, wh, CUDA_R_16F, n,
                                x16 + r0, CUDA_R_16F, k, &beta, y, CUDA_R_32F, n, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx (quantised weights, transposed)");
    }
    return;
  }
  void* xr = matmul_scratch().reserve<uint16_t>(m * k);
  to_input_type(x, count, w.storage(), xr);
  const cudaDataType_t type = w.storage() == DeviceMatrix::Storage::F16 ? CUDA_R_16F : CUDA_R_16BF;
  check_cublas(cublasGemmEx(cublas(), CUBLAS_OP_N, CUBLAS_OP_N, n, mm, k, &one, w.data(), type, n, xr, type,
                            k, &zero, y, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx");
}

void moe_route(const float* logits, int64_t n, int64_t n_experts, int64_t k, bool normalize, const float* expert_scale,
               int32_t* expert_of, float* weight_of) {
  check(n_experts > 0 && k > 0 && k <= kMaxExpertsUsed && k <= n_experts,
        "cuda moe_route: needs 0 < k <= min(32, experts)");
  if (n == 0) return;
  constexpr int kWarps = kBlock / 32;
  const size_t shared = size_t(kWarps) * size_t(n_experts) * sizeof(float);
  check(shared <= 48 * 1024, "cuda moe_route: too many experts for one block's shared memory");
  moe_route_kernel<<<unsigned((n + kWarps - 1) / kWarps), kBlock, shared, stream()>>>(
      logits, n, int(n_experts), int(k), normalize, expert_scale, expert_of, weight_of);
  check_launch("moe_route");
}

void moe_plan(const int32_t* expert_of, int64_t n, int64_t k, int64_t n_experts, int32_t* first, int32_t* slot_row,
              int32_t* slot_of, int32_t* begin) {
  check(n_experts > 0 && size_t(n_experts) * 4 <= 48 * 1024, "cuda moe_plan: bad expert count");
  moe_plan_kernel<<<1, 1024, size_t(n_experts) * 4, stream()>>>(expert_of, n, int(k), int(n_experts), first,
                                                                slot_row, slot_of, begin);
  check_launch("moe_plan");
}

void matmul_grouped(const DeviceMatrix& stack, int64_t n_groups, const int32_t* first, const float* x, float* y) {
  check(n_groups > 0 && stack.rows() % n_groups == 0, "cuda matmul_grouped: the stack is not n_groups matrices");
  if (stack.rows() == 0) return;
  // f32 experts stay in f32 arithmetic (as the dense f32 products do): the register kernel for all.
  if (stack.storage() == DeviceMatrix::Storage::F32) {
    const OpSpan span("experts: register kernel");
    return launch_row_products<8>(stack, n_groups, first, 0, x, y);
  }
  // Otherwise experts with fewer than 16 slots take the register kernel (an AR step: one slot each), the
  // others the tensor cores; each launch skips the other's experts.
  constexpr int64_t kTensorSlots = kTileSlots;
  {
    const OpSpan span("experts: register kernel");
    launch_row_products<8>(stack, n_groups, first, 0, x, y, kTensorSlots - 1);
  }
  const OpSpan span("experts: tensor cores");
  launch_tiled_products<kTileSlots, float>(stack, n_groups, first, 0, kTensorSlots, x, y);
}

}  // namespace canvas::cuda
