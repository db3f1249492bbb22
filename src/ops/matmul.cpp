// Matmul dispatch, the scalar reference twin, row (de)quantisation (ggml rounding) and get_row.
#include "ops/matmul.h"

#include <algorithm>
#include <bit>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>

#include "core/error.h"
#include "ops/matmul_kernels.h"

namespace canvas {
namespace matmul_detail {

float quantize_act_block(const float* x, int8_t* q) {
  float amax = 0.f;
  bool finite = true;
  for (int i = 0; i < kQK; ++i) {
    amax = std::max(amax, std::fabs(x[i]));
    finite = finite && std::isfinite(x[i]);
  }
  if (!finite) {
    std::fill(q, q + kQK, int8_t(0));
    return std::numeric_limits<float>::quiet_NaN();
  }
  const float d = amax / 127.f;
  const float id = d != 0.f ? 1.f / d : 0.f;
  for (int i = 0; i < kQK; ++i) q[i] = int8_t(std::roundf(x[i] * id));
  return d;
}

void interleave_group(DType base, const uint8_t* rows, int64_t row_bytes, int count, int64_t nb, uint8_t* out) {
  const bool q8 = base == DType::Q8_0;
  const int64_t src_block = q8 ? 34 : 18, dst_block = interleaved_block_bytes(base);
  for (int c = 0; c < kInterleaveRows; ++c) {
    const uint8_t* row = rows + std::min(c, count - 1) * row_bytes;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* src = row + b * src_block;
      uint8_t* dst = out + b * dst_block;
      std::memcpy(dst + 2 * c, src, 2);  // f16 scale
      const int chunks = q8 ? 8 : 4;
      for (int i = 0; i < chunks; ++i)
        for (int e = 0; e < 4; ++e) {
          const uint8_t v = src[2 + 4 * i + e];
          dst[32 + 64 * i + 4 * c + e] = q8 ? uint8_t(v ^ 0x80) : v;
        }
    }
  }
}

void deinterleave_row(DType base, const uint8_t* group, int64_t nb, int lane, uint8_t* out) {
  const bool q8 = base == DType::Q8_0;
  const int64_t dst_block = q8 ? 34 : 18, src_block = interleaved_block_bytes(base);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* src = group + b * src_block;
    uint8_t* dst = out + b * dst_block;
    std::memcpy(dst, src + 2 * lane, 2);
    const int chunks = q8 ? 8 : 4;
    for (int i = 0; i < chunks; ++i)
      for (int e = 0; e < 4; ++e) {
        const uint8_t v = src[32 + 64 * i + 4 * lane + e];
        dst[2 + 4 * i + e] = q8 ? uint8_t(v ^ 0x80) : v;
      }
  }
}

namespace {

// ---- scalar kernels: the reference arithmetic, one output at a time -------------------------------

// Scalar activation layout: per 32-block, the f32 scale then 32 int8 values.
struct ActBlock {
  float d;
  int8_t q[kQK];
};
static_assert(sizeof(ActBlock) == 36);

template <DType T>
float weight_value(const uint8_t* row, int64_t i) {
  if constexpr (T == DType::F32) {
    float v;
    std::memcpy(&v, row + 4 * i, 4);
    return v;
  } else {
    uint16_t h;
    std::memcpy(&h, row + 2 * i, 2);
    if constexpr (T == DType::F16) return f16_to_f32(h);
    else return bf16_to_f32(h);
  }
}

// Plain sequential sum over k: the obviously-correct order.
template <DType T>
float dot_float(const uint8_t* w_row, const float* x, int64_t k) {
  float acc = 0.f;
  for (int64_t i = 0; i < k; ++i) acc += x[i] * weight_value<T>(w_row, i);
  return acc;
}

float dot_float(DType type, const uint8_t* w_row, const float* x, int64_t k) {
  switch (type) {
    case DType::F32: return dot_float<DType::F32>(w_row, x, k);
    case DType::F16: return dot_float<DType::F16>(w_row, x, k);
    default: return dot_float<DType::BF16>(w_row, x, k);
  }
}

// Per 32-block: exact integer dots, then acc += (scale * d_x) * isum (+ (min * d_x) * sum(x_q) for types
// with a minimum) in float, blocks in order; Q4_0 / Q8_0 fuse that multiply-add into one rounding.
// Q6_K's two 16-element halves have their own scales.
float dot_quant(DType type, const uint8_t* w_row, const ActBlock* act, int64_t nb) {
  float acc = 0.f;
  DecodedBlock blk;
  for (int64_t b = 0; b < nb; ++b) {
    decode_block(type, w_row, b, blk);
    int32_t isum[2] = {0, 0}, xsum = 0;
    for (int i = 0; i < kQK; ++i) {
      isum[i / 16] += int32_t(blk.q[i]) * int32_t(act[b].q[i]);
      xsum += act[b].q[i];
    }
    if (type == DType::Q4_0 || type == DType::Q8_0) {
      // One fused multiply-add per block: the arithmetic the AVX-512 kernels reproduce bit for bit.
      acc = std::fma(blk.scale[0] * act[b].d, float(isum[0] + isum[1]), acc);
    } else if (type == DType::Q6_K) {
      acc += (blk.scale[0] * act[b].d) * float(isum[0]);
      acc += (blk.scale[1] * act[b].d) * float(isum[1]);
    } else {
      acc += (blk.scale[0] * act[b].d) * float(isum[0] + isum[1]);
    }
    if (blk.has_min) acc += (blk.min * act[b].d) * float(xsum);
  }
  return acc;
}

void scalar_matmul_float(const FloatArgs& a, int64_t j0, int64_t j1) {
  for (int64_t i = 0; i < a.m; ++i)
    for (int64_t j = j0; j < j1; ++j)
      a.y[i * a.ldy + j] = dot_float(a.type, a.w + j * a.w_row_bytes, a.x + i * a.ldx, a.k);
}

int64_t scalar_act_row_bytes(int64_t k) { return k / kQK * int64_t(sizeof(ActBlock)); }

void scalar_quantize_act(DType, const float* x, int64_t k, uint8_t* dst) {
  ActBlock* out = reinterpret_cast<ActBlock*>(dst);
  for (int64_t b = 0; b < k / kQK; ++b) out[b].d = quantize_act_block(x + b * kQK, out[b].q);
}

void scalar_act_block(DType, const uint8_t* row, int64_t, int64_t b, int8_t* q, float* d) {
  const ActBlock* blk = reinterpret_cast<const ActBlock*>(row) + b;
  std::memcpy(q, blk->q, kQK);
  *d = blk->d;
}

void scalar_matmul_quant(const QuantArgs& a, int64_t j0, int64_t j1) {
  for (int64_t i = 0; i < a.m; ++i) {
    const ActBlock* act = reinterpret_cast<const ActBlock*>(a.xq + i * a.xq_row_bytes);
    for (int64_t j = j0; j < j1; ++j)
      a.y[i * a.ldy + j] = dot_quant(a.type, a.w + j * a.w_row_bytes, act, a.k / kQK);
  }
}

}  // namespace

const KernelSet& kernels_scalar() {
  static const KernelSet set{SimdLevel::Scalar,  scalar_matmul_float, scalar_act_row_bytes, scalar_quantize_act,
                             scalar_act_block,   scalar_matmul_quant, 16};
  return set;
}

}  // namespace matmul_detail

using namespace matmul_detail;

namespace {

std::atomic<int> g_level_override{-1};

SimdLevel hardware_simd_level() {
  const CpuFeatures& f = cpu_features();
  if (!(f.avx2 && f.fma)) return SimdLevel::Scalar;
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512vnni && f.avx512bf16) return SimdLevel::Avx512;
  return SimdLevel::Avx2;
}

const KernelSet& kernels_for(SimdLevel level) {
  switch (level) {
    case SimdLevel::Avx512: return kernels_avx512();
    case SimdLevel::Avx2: return kernels_avx2();
    default: return kernels_scalar();
  }
}

bool is_quant(DType type) {
  switch (type) {
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::Q4_0_R16:
    case DType::Q8_0_R16: return true;
    default: return false;
  }
}

std::string describe(const TensorView& w) {
  return "weight '" + w.name + "' (" + dtype_name(w.type) + " " + w.shape_string() + ")";
}

// Per-thread scratch, 64-byte aligned, grown on demand; one per use (Tag) so they never alias.
template <int Tag>
uint8_t* thread_scratch(int64_t bytes) {
  struct Free {
    void operator()(uint8_t* p) const { ::operator delete[](p, std::align_val_t(64)); }
  };
  thread_local std::unique_ptr<uint8_t[], Free> buffer;
  thread_local int64_t capacity = 0;
  if (bytes > capacity) {
    buffer.reset();
    capacity = std::max<int64_t>(bytes, capacity * 3 / 2);
    buffer.reset(static_cast<uint8_t*>(::operator new[](size_t(capacity), std::align_val_t(64))));
  }
  return buffer.get();
}
// The calling thread's quantised activations; a worker's rows of one interleaved group.
uint8_t* activation_scratch(int64_t bytes) { return thread_scratch<0>(bytes); }
uint8_t* group_scratch(int64_t bytes) { return thread_scratch<1>(bytes); }

}  // namespace

uint8_t* matmul_detail::kernel_scratch(int64_t bytes) { return thread_scratch<3>(bytes); }

namespace {

// Runs for every product of every forward pass: the messages are built only when a check fails.
void check_args(const TensorView& w, const float* x, int64_t ldx, int64_t m, const float* y, int64_t ldy) {
  auto fail = [](const std::string& message) { throw Error("matmul: " + message); };
  if (!matmul_supports(w.type)) fail(describe(w) + ": unsupported weight type");
  if (w.data == nullptr && w.rows() * w.cols() != 0) fail(describe(w) + " has no data");
  const int64_t k = w.cols();
  const int64_t block = dtype_info(w.type).block_size;
  if (k % block != 0)
    fail(describe(w) + ": row length " + std::to_string(k) + " is not a multiple of the block size " +
         std::to_string(block));
  if (m < 0) fail("negative row count " + std::to_string(m));
  if (ldx < k) fail("x row stride " + std::to_string(ldx) + " < k = " + std::to_string(k) + " for " + describe(w));
  if (ldy < w.rows())
    fail("y row stride " + std::to_string(ldy) + " < n = " + std::to_string(w.rows()) + " for " + describe(w));
  if (m != 0 && (x == nullptr || y == nullptr)) fail("null x or y for " + describe(w));
}

// The products of `targets` (all with k columns) in one parallel loop over their concatenated output
// columns. Splitting never changes a result: each output column is computed by the same instructions
// whatever chunk, tile or call it falls in.
void run_fused(const KernelSet& ks, const MatmulTarget* targets, int count, const float* x, int64_t ldx, int64_t m,
               ThreadPool* pool) {
  constexpr int kMaxTargets = 8;
  check(count > 0 && count <= kMaxTargets, "matmul_fused: between 1 and 8 products per call");
  const int64_t k = targets[0].w->cols();
  int64_t total_n = 0;
  for (int t = 0; t < count; ++t) total_n += targets[t].w->rows();
  if (m == 0 || total_n == 0) return;
  if (k == 0) {
    for (int t = 0; t < count; ++t)
      for (int64_t i = 0; i < m; ++i) std::fill(targets[t].y + i * targets[t].ldy, targets[t].y + i * targets[t].ldy + targets[t].w->rows(), 0.f);
    return;
  }
  // Tiny products are not worth waking the pool for; the split never changes results anyway.
  if (double(m) * double(total_n) * double(k) < 65536.0) pool = nullptr;

  // Quantise every activation row once per distinct quantised weight type (their layouts may differ),
  // before the column-parallel section that shares them.
  const int64_t act_bytes = ks.act_row_bytes(k);
  DType act_types[kMaxTargets];
  int n_act_types = 0, act_of[kMaxTargets];
  for (int t = 0; t < count; ++t) {
    act_of[t] = -1;
    if (!is_quant(targets[t].w->type)) continue;
    const DType act_type = interleaved_base(targets[t].w->type);  // the layouts share their activations
    int a = 0;
    while (a < n_act_types && act_types[a] != act_type) ++a;
    if (a == n_act_types) act_types[n_act_types++] = act_type;
    act_of[t] = a;
  }
  uint8_t* xq = n_act_types > 0 ? activation_scratch(act_bytes * m * n_act_types) : nullptr;
  if (n_act_types > 0) {
    parallel_for(
        m * k * n_act_types >= 65536 ? pool : nullptr, m * n_act_types, 1,
        [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r) {
            const int64_t a = r / m, i = r % m;
            ks.quantize_act(act_types[a], x + i * ldx, k, xq + (a * m + i) * act_bytes);
          }
        },
        uint64_t(k));
  }

  auto run_range = [&](int t, int64_t j0, int64_t j1) {
    const TensorView& w = *targets[t].w;
    const uint8_t* wp = static_cast<const uint8_t*>(w.data);
    if (act_of[t] < 0) {
      const FloatArgs a{w.type, wp, w.row_size(), k, x, ldx, m, targets[t].y, targets[t].ldy};
      ks.matmul_float(a, j0, j1);
    } else if (is_interleaved(w.type) && ks.level != SimdLevel::Avx512) {
      // Other levels read each group back into the file layout and run their own kernel on it.
      const DType base = interleaved_base(w.type);
      const int64_t rb = w.row_size(), nb = k / kQK;
      uint8_t* rows = group_scratch(kInterleaveRows * rb);
      for (int64_t g = j0 / kInterleaveRows; g * kInterleaveRows < j1; ++g) {
        const int64_t c0 = std::max(j0, g * kInterleaveRows), c1 = std::min(j1, (g + 1) * kInterleaveRows);
        for (int64_t c = c0; c < c1; ++c)
          deinterleave_row(base, wp + g * kInterleaveRows * rb, nb, int(c % kInterleaveRows), rows + (c - c0) * rb);
        const QuantArgs a{base, rows, rb, k, xq + act_of[t] * m * act_bytes, act_bytes,
                          m,    targets[t].y + c0, targets[t].ldy};
        ks.matmul_quant(a, 0, c1 - c0);
      }
    } else {
      const QuantArgs a{w.type, wp, w.row_size(), k, xq + act_of[t] * m * act_bytes, act_bytes,
                        m,      targets[t].y, targets[t].ldy};
      ks.matmul_quant(a, j0, j1);
    }
  };
  // Chunks claimed dynamically, ~8 per thread, whole SIMD tiles: on cores shared with other work a
  // statically halved loop waits for its slower thread.
  const int64_t threads = pool ? pool->size() : 1;
  const int64_t chunk = std::max<int64_t>(1, (total_n + 8 * threads * ks.grain - 1) / (8 * threads * ks.grain)) * ks.grain;
  // The pool times loops per class: products of one output width differ in cost by their rows (within 2x
  // alike) and width.
  const uint64_t shape = uint64_t(std::bit_width(uint64_t(m))) << 32 | uint64_t(k);
  parallel_for_dynamic(
      pool, total_n, chunk,
      [&](int64_t c0, int64_t c1) {
        int64_t offset = 0;
        for (int t = 0; t < count && offset < c1; ++t) {
          const int64_t n = targets[t].w->rows();
          const int64_t j0 = std::max<int64_t>(c0 - offset, 0), j1 = std::min<int64_t>(c1 - offset, n);
          if (j0 < j1) run_range(t, j0, j1);
          offset += n;
        }
      },
      shape);
}

void run_matmul(const KernelSet& ks, const TensorView& w, const float* x, int64_t ldx, int64_t m, float* y,
                int64_t ldy, ThreadPool* pool) {
  const MatmulTarget target{&w, y, ldy};
  run_fused(ks, &target, 1, x, ldx, m, pool);
}

}  // namespace

bool matmul_supports(DType type) {
  return type == DType::F32 || type == DType::F16 || type == DType::BF16 || is_quant(type);
}

SimdLevel matmul_simd_level() {
  const int forced = g_level_override.load(std::memory_order_relaxed);
  return forced >= 0 ? SimdLevel(forced) : simd_level();
}

void set_matmul_simd_level(SimdLevel level) {
  const SimdLevel best = hardware_simd_level();
  g_level_override.store(int(std::min(level, best)), std::memory_order_relaxed);
}

void reset_matmul_simd_level() { g_level_override.store(-1, std::memory_order_relaxed); }

void matmul(const TensorView& w, const float* x, int64_t ldx, int64_t m, float* y, int64_t ldy, ThreadPool* pool) {
  check_args(w, x, ldx, m, y, ldy);
  run_matmul(kernels_for(matmul_simd_level()), w, x, ldx, m, y, ldy, pool);
}

void matmul_fused(const MatmulTarget* targets, int count, const float* x, int64_t ldx, int64_t m, ThreadPool* pool) {
  check(count > 0 && targets != nullptr, "matmul_fused: no products");
  for (int t = 0; t < count; ++t) {
    check(targets[t].w != nullptr, "matmul_fused: null weight");
    check(targets[t].w->cols() == targets[0].w->cols(),
          "matmul_fused: " + describe(*targets[t].w) + " has a different row length than " + describe(*targets[0].w));
    check_args(*targets[t].w, x, ldx, m, targets[t].y, targets[t].ldy);
  }
  run_fused(kernels_for(matmul_simd_level()), targets, count, x, ldx, m, pool);
}

bool matmul_prefers_interleaved(const TensorView& w) {
  return (w.type == DType::Q4_0 || w.type == DType::Q8_0) && w.ne[1] > 0 &&
         (w.ne[1] % kInterleaveRows == 0 || w.ne[2] * w.ne[3] == 1) && matmul_simd_level() == SimdLevel::Avx512;
}

int64_t interleaved_bytes(const TensorView& w) {
  return (w.rows() + kInterleaveRows - 1) / kInterleaveRows * kInterleaveRows * w.row_size();
}

void interleave_for_matmul(TensorView& w, void* out, ThreadPool* pool) {
  check(w.type == DType::Q4_0 || w.type == DType::Q8_0,
        "interleave_for_matmul: " + describe(w) + " is not Q4_0 or Q8_0");
  const bool in_place = out == w.data;
  check(!in_place || w.ne[1] % kInterleaveRows == 0,
        "interleave_for_matmul: " + describe(w) + ": rows not a multiple of 16 (rearrange into a new buffer)");
  check(in_place || w.ne[2] * w.ne[3] == 1, "interleave_for_matmul: " + describe(w) + ": a stack of matrices");
  const int64_t rb = w.row_size(), nb = w.cols() / kQK, rows = w.rows();
  const int64_t groups = (rows + kInterleaveRows - 1) / kInterleaveRows, group_bytes = kInterleaveRows * rb;
  const uint8_t* src = static_cast<const uint8_t*>(w.data);
  uint8_t* dst = static_cast<uint8_t*>(out);
  const bool avx512 = hardware_simd_level() == SimdLevel::Avx512;
  parallel_for(groups * group_bytes >= (int64_t(1) << 20) ? pool : nullptr, groups, 16, [&](int64_t g0, int64_t g1) {
    uint8_t* tmp = group_scratch(group_bytes);
    for (int64_t g = g0; g < g1; ++g) {
      // The last group of a matrix whose rows are not a multiple of 16 repeats its last row.
      const int count = int(std::min<int64_t>(kInterleaveRows, rows - g * kInterleaveRows));
      if (avx512) interleave_group_avx512(w.type, src + g * group_bytes, rb, count, nb, tmp);
      else interleave_group(w.type, src + g * group_bytes, rb, count, nb, tmp);
      std::memcpy(dst + g * group_bytes, tmp, size_t(group_bytes));
    }
  });
  w.type = w.type == DType::Q4_0 ? DType::Q4_0_R16 : DType::Q8_0_R16;
  w.data = out;
}

void matmul_reference(const TensorView& w, const float* x, int64_t ldx, int64_t m, float* y, int64_t ldy) {
  check_args(w, x, ldx, m, y, ldy);
  run_matmul(kernels_scalar(), w, x, ldx, m, y, ldy, nullptr);
}

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  const uint8_t* s = static_cast<const uint8_t*>(src);
  switch (type) {
    case DType::F32: std::memcpy(dst, src, size_t(n) * 4); return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) dst[i] = weight_value<DType::F16>(s, i);
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = weight_value<DType::BF16>(s, i);
      return;
    case DType::Q8_0: {
      row_bytes(type, n);  // validates n
      for (int64_t b = 0; b < n / kQK; ++b) {
        BlockQ8_0 blk;
        std::memcpy(&blk, s + b * sizeof blk, sizeof blk);
        const float d = f16_to_f32(blk.d);
        for (int i = 0; i < kQK; ++i) dst[b * kQK + i] = d * float(blk.qs[i]);
      }
      return;
    }
    case DType::Q4_0: {
      row_bytes(type, n);
      for (int64_t b = 0; b < n / kQK; ++b) {
        BlockQ4_0 blk;
        std::memcpy(&blk, s + b * sizeof blk, sizeof blk);
        const float d = f16_to_f32(blk.d);
        for (int i = 0; i < kQK / 2; ++i) {
          dst[b * kQK + i] = d * float(int(blk.qs[i] & 15) - 8);
          dst[b * kQK + i + kQK / 2] = d * float(int(blk.qs[i] >> 4) - 8);
        }
      }
      return;
    }
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
      row_bytes(type, n);
      dequantize_row_extra(type, s, dst, n);
      return;
    default: throw Error(std::string("dequantize_row: unsupported type ") + dtype_name(type));
  }
}

void quantize_row(DType type, const float* src, void* dst, int64_t n) {
  uint8_t* out = static_cast<uint8_t*>(dst);
  switch (type) {
    case DType::F32: std::memcpy(dst, src, size_t(n) * 4); return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_f16(src[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_bf16(src[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case DType::Q8_0: {  // ggml quantize_row_q8_0_ref
      row_bytes(type, n);
      for (int64_t b = 0; b < n / kQK; ++b) {
        BlockQ8_0 blk;
        blk.d = f32_to_f16(quantize_act_block(src + b * kQK, blk.qs));
        std::memcpy(out + b * sizeof blk, &blk, sizeof blk);
      }
      return;
    }
    case DType::Q4_0: {  // ggml quantize_row_q4_0_ref: the signed value of largest magnitude maps to -8
      row_bytes(type, n);
      for (int64_t b = 0; b < n / kQK; ++b) {
        const float* x = src + b * kQK;
        float amax = 0.f, max = 0.f;
        for (int i = 0; i < kQK; ++i) {
          if (amax < std::fabs(x[i])) {
            amax = std::fabs(x[i]);
            max = x[i];
          }
        }
        const float d = max / -8.f;
        const float id = d != 0.f ? 1.f / d : 0.f;
        BlockQ4_0 blk;
        blk.d = f32_to_f16(d);
        for (int i = 0; i < kQK / 2; ++i) {
          const uint8_t lo = uint8_t(std::min<int>(15, int8_t(x[i] * id + 8.5f)));
          const uint8_t hi = uint8_t(std::min<int>(15, int8_t(x[i + kQK / 2] * id + 8.5f)));
          blk.qs[i] = uint8_t(lo | hi << 4);
        }
        std::memcpy(out + b * sizeof blk, &blk, sizeof blk);
      }
      return;
    }
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
      row_bytes(type, n);
      quantize_row_extra(type, src, out, n);
      return;
    default: throw Error(std::string("quantize_row: unsupported type ") + dtype_name(type));
  }
}

void get_row(const TensorView& w, int64_t row, float* dst) {
  check(row >= 0 && row < w.rows(), "get_row: row " + std::to_string(row) + " out of range for " + describe(w));
  check(matmul_supports(w.type), "get_row: " + describe(w) + ": unsupported type");
  if (is_interleaved(w.type)) {
    uint8_t* bytes = thread_scratch<2>(w.row_size());
    get_row_bytes(w, row, bytes);
    dequantize_row(interleaved_base(w.type), bytes, dst, w.cols());
    return;
  }
  dequantize_row(w.type, w.row(row), dst, w.cols());
}

void get_row_bytes(const TensorView& w, int64_t row, uint8_t* dst) {
  if (row < 0 || row >= w.rows())
    throw Error("get_row_bytes: row " + std::to_string(row) + " out of range for " + describe(w));
  if (!is_interleaved(w.type)) {
    std::memcpy(dst, w.row(row), size_t(w.row_size()));
    return;
  }
  const uint8_t* group = static_cast<const uint8_t*>(w.data) + row / kInterleaveRows * kInterleaveRows * w.row_size();
  deinterleave_row(interleaved_base(w.type), group, w.cols() / kQK, int(row % kInterleaveRows), dst);
}

}  // namespace canvas
