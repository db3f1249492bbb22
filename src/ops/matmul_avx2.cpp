// AVX2 + FMA matmul kernels: f32/f16/bf16 weights with f32 FMA, Q8_0/Q4_0 weights with int8 dot products.
//
// Determinism as in the AVX-512 file: 8 f32 lanes accumulate k = 8s + l in order of s (the tail goes
// through a zero-padded copy), then a fixed reduction tree; quantised weights give 8 int32 lanes per
// 32-block, accumulated as acc += (isum * d_x) * d_w block by block. Tile shape never changes that.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "ops/matmul_kernels.h"

namespace canvas::matmul_detail {
namespace {

inline float hsum(__m256 v) {
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
  return _mm_cvtss_f32(s4);
}

constexpr int64_t kPanelBytes = 256 * 1024;
constexpr int kPrefetchBytes = 1024;
constexpr int64_t kTileAheadMax = 128 * 1024;

// ---- float weights ---------------------------------------------------------------------------------

struct LoadF32 {
  static constexpr int kBytes = 4;
  static __m256 load(const uint8_t* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
};
struct LoadF16 {
  static constexpr int kBytes = 2;
  static __m256 load(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
};
struct LoadBF16 {
  static constexpr int kBytes = 2;
  static __m256 load(const uint8_t* p) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  }
};

template <class L, int R, int C>
void float_tile(const float* x, int64_t ldx, const uint8_t* w, int64_t wrb, int64_t k, float* y, int64_t ldy) {
  __m256 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  int64_t k0 = 0;
  for (; k0 + 8 <= k; k0 += 8) {
    if (R == 1) {
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) _mm_prefetch(reinterpret_cast<const char*>(w + c * wrb + k0 * L::kBytes) + kPrefetchBytes, _MM_HINT_T0);
    }
    __m256 xv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) xv[r] = _mm256_loadu_ps(x + r * ldx + k0);
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const __m256 wv = L::load(w + c * wrb + k0 * L::kBytes);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][c] = _mm256_fmadd_ps(xv[r], wv, acc[r][c]);
    }
  }
  if (k0 < k) {  // zero-padded copies of the last k % 8 elements
    const int rest = int(k - k0);
    __m256 xv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      alignas(32) float buf[8] = {};
      std::memcpy(buf, x + r * ldx + k0, size_t(rest) * 4);
      xv[r] = _mm256_load_ps(buf);
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      alignas(32) uint8_t buf[32] = {};
      std::memcpy(buf, w + c * wrb + k0 * L::kBytes, size_t(rest) * L::kBytes);
      const __m256 wv = L::load(buf);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][c] = _mm256_fmadd_ps(xv[r], wv, acc[r][c]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) y[r * ldy + c] = hsum(acc[r][c]);
}

constexpr int kFloatRows = 2, kFloatCols = 4, kVecCols = 8;

template <class L, int C>
void float_tile_rows(int r, const float* x, int64_t ldx, const uint8_t* w, int64_t wrb, int64_t k, float* y,
                     int64_t ldy) {
  if (r == 1) float_tile<L, 1, C>(x, ldx, w, wrb, k, y, ldy);
  else float_tile<L, 2, C>(x, ldx, w, wrb, k, y, ldy);
}

template <class L>
void matmul_float_typed(const FloatArgs& a, int64_t j0, int64_t j1) {
  const int64_t wrb = a.w_row_bytes;
  if (a.m == 1) {
    int64_t j = j0;
    for (; j + kVecCols <= j1; j += kVecCols) float_tile<L, 1, kVecCols>(a.x, a.ldx, a.w + j * wrb, wrb, a.k, a.y + j, a.ldy);
    for (; j < j1; ++j) float_tile<L, 1, 1>(a.x, a.ldx, a.w + j * wrb, wrb, a.k, a.y + j, a.ldy);
    return;
  }
  const int64_t panel = std::max<int64_t>(kFloatCols, kPanelBytes / wrb / kFloatCols * kFloatCols);
  for (int64_t jp = j0; jp < j1; jp += panel) {
    const int64_t je = std::min(j1, jp + panel);
    for (int64_t i = 0; i < a.m; i += kFloatRows) {
      const int r = int(std::min<int64_t>(kFloatRows, a.m - i));
      int64_t j = jp;
      for (; j + kFloatCols <= je; j += kFloatCols)
        float_tile_rows<L, kFloatCols>(r, a.x + i * a.ldx, a.ldx, a.w + j * wrb, wrb, a.k, a.y + i * a.ldy + j, a.ldy);
      for (; j < je; ++j) float_tile_rows<L, 1>(r, a.x + i * a.ldx, a.ldx, a.w + j * wrb, wrb, a.k, a.y + i * a.ldy + j, a.ldy);
    }
  }
}

void matmul_float(const FloatArgs& a, int64_t j0, int64_t j1) {
  switch (a.type) {
    case DType::F32: matmul_float_typed<LoadF32>(a, j0, j1); break;
    case DType::F16: matmul_float_typed<LoadF16>(a, j0, j1); break;
    default: matmul_float_typed<LoadBF16>(a, j0, j1); break;
  }
}

// ---- quantised weights -----------------------------------------------------------------------------
//
// Activation row layout, per 32-block (96 bytes): 32 int8 values in element order; 8 int32 Q4_0 bias
// corrections (-8 times the sum of each lane's 4 values, as Q4_0 nibbles enter unsigned); 8 copies of
// the f32 block scale.
constexpr int64_t kActBlockBytes = 96;

int64_t act_row_bytes(int64_t k) { return k / kQK * kActBlockBytes; }

float quantize_block_avx2(const float* x, int8_t* q) {
  const __m256 sign = _mm256_set1_ps(-0.f);
  __m256 v[4];
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(x + 8 * i);
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i]));
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const float amax = _mm_cvtss_f32(m4);
  const float d = amax / 127.f;
  const float id = d != 0.f ? 1.f / d : 0.f;
  const __m256 idv = _mm256_set1_ps(id), half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.f);
  for (int i = 0; i < 4; ++i) {
    const __m256 s = _mm256_mul_ps(v[i], idv);
    const __m256 t = _mm256_round_ps(s, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 away = _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_sub_ps(s, t)), half, _CMP_GE_OQ);
    const __m256 r = _mm256_add_ps(t, _mm256_and_ps(away, _mm256_or_ps(one, _mm256_and_ps(s, sign))));
    alignas(32) int32_t qi[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(qi), _mm256_cvttps_epi32(r));
    for (int e = 0; e < 8; ++e) q[8 * i + e] = int8_t(qi[e]);
  }
  return d;
}

void quantize_act(DType, const float* x, int64_t k, uint8_t* dst) {
  for (int64_t b = 0; b < k / kQK; ++b) {
    uint8_t* blk = dst + b * kActBlockBytes;
    int8_t* q = reinterpret_cast<int8_t*>(blk);
    int32_t* init = reinterpret_cast<int32_t*>(blk + 32);
    float* dx = reinterpret_cast<float*>(blk + 64);
    const float d = quantize_block_avx2(x + b * kQK, q);
    for (int g = 0; g < 8; ++g) {
      init[g] = -8 * (q[4 * g] + q[4 * g + 1] + q[4 * g + 2] + q[4 * g + 3]);
      dx[g] = d;
    }
  }
}

void act_block(DType, const uint8_t* row, int64_t, int64_t b, int8_t* q, float* d) {
  std::memcpy(q, row + b * kActBlockBytes, kQK);
  std::memcpy(d, row + b * kActBlockBytes + 64, 4);
}

inline __m256 block_scale(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

// Q8_0: sign trick (|w| unsigned times x with w's sign) so vpmaddubsw sees u8 x s8 without overflow.
struct BlockQ8 {
  static constexpr int kBytes = sizeof(BlockQ8_0);
  static void load(const uint8_t* p, __m256i& q, __m256& d) {
    q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
    d = block_scale(p);
  }
  static __m256i dot(__m256i wq, const uint8_t* act) {
    const __m256i xv = _mm256_load_si256(reinterpret_cast<const __m256i*>(act));
    const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(wq, wq), _mm256_sign_epi8(xv, wq));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
  }
};

// Q4_0: nibbles 0..15 enter unsigned; the -8 offset comes back through the precomputed correction.
struct BlockQ4 {
  static constexpr int kBytes = sizeof(BlockQ4_0);
  static void load(const uint8_t* p, __m256i& q, __m256& d) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2));
    q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), _mm256_set1_epi8(0x0f));
    d = block_scale(p);
  }
  static __m256i dot(__m256i wq, const uint8_t* act) {
    const __m256i xv = _mm256_load_si256(reinterpret_cast<const __m256i*>(act));
    const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(wq, xv), _mm256_set1_epi16(1));
    return _mm256_add_epi32(s, _mm256_load_si256(reinterpret_cast<const __m256i*>(act + 32)));
  }
};

template <class B, int R, int C>
void quant_tile(const uint8_t* xq, int64_t xrb, const uint8_t* w, int64_t wrb, int64_t nb, float* y, int64_t ldy) {
  __m256 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  const int64_t prefetch_ahead = C * wrb <= kTileAheadMax ? C * wrb : kPrefetchBytes;
  for (int64_t b = 0; b < nb; ++b) {
    __m256i wq[C];
    __m256 dw[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const uint8_t* blk = w + c * wrb + b * B::kBytes;
      // matvec: fetch the same spot of the next tile's rows (short quantised rows follow in memory)
      if (R == 1) _mm_prefetch(reinterpret_cast<const char*>(blk) + prefetch_ahead, _MM_HINT_T0);
      B::load(blk, wq[c], dw[c]);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const uint8_t* act = xq + r * xrb + b * kActBlockBytes;
      const __m256 dx = _mm256_load_ps(reinterpret_cast<const float*>(act + 64));
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        const __m256 g = _mm256_mul_ps(_mm256_cvtepi32_ps(B::dot(wq[c], act)), dx);
        acc[r][c] = _mm256_fmadd_ps(g, dw[c], acc[r][c]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) y[r * ldy + c] = hsum(acc[r][c]);
}

constexpr int kQuantRows = 2, kQuantCols = 2, kQuantVecCols = 4;

template <class B, int C>
void quant_tile_rows(int r, const uint8_t* xq, int64_t xrb, const uint8_t* w, int64_t wrb, int64_t nb, float* y,
                     int64_t ldy) {
  if (r == 1) quant_tile<B, 1, C>(xq, xrb, w, wrb, nb, y, ldy);
  else quant_tile<B, 2, C>(xq, xrb, w, wrb, nb, y, ldy);
}

template <class B>
void matmul_quant_typed(const QuantArgs& a, int64_t j0, int64_t j1) {
  const int64_t wrb = a.w_row_bytes, nb = a.k / kQK;
  if (a.m == 1) {
    int64_t j = j0;
    for (; j + kQuantVecCols <= j1; j += kQuantVecCols)
      quant_tile<B, 1, kQuantVecCols>(a.xq, a.xq_row_bytes, a.w + j * wrb, wrb, nb, a.y + j, a.ldy);
    for (; j < j1; ++j) quant_tile<B, 1, 1>(a.xq, a.xq_row_bytes, a.w + j * wrb, wrb, nb, a.y + j, a.ldy);
    return;
  }
  const int64_t panel = std::max<int64_t>(kQuantCols, kPanelBytes / wrb / kQuantCols * kQuantCols);
  for (int64_t jp = j0; jp < j1; jp += panel) {
    const int64_t je = std::min(j1, jp + panel);
    for (int64_t i = 0; i < a.m; i += kQuantRows) {
      const int r = int(std::min<int64_t>(kQuantRows, a.m - i));
      const uint8_t* xq = a.xq + i * a.xq_row_bytes;
      float* y = a.y + i * a.ldy;
      int64_t j = jp;
      for (; j + kQuantCols <= je; j += kQuantCols)
        quant_tile_rows<B, kQuantCols>(r, xq, a.xq_row_bytes, a.w + j * wrb, wrb, nb, y + j, a.ldy);
      for (; j < je; ++j) quant_tile_rows<B, 1>(r, xq, a.xq_row_bytes, a.w + j * wrb, wrb, nb, y + j, a.ldy);
    }
  }
}

void matmul_quant(const QuantArgs& a, int64_t j0, int64_t j1) {
  if (a.type == DType::Q8_0) matmul_quant_typed<BlockQ8>(a, j0, j1);
  else matmul_quant_typed<BlockQ4>(a, j0, j1);
}

}  // namespace

const KernelSet& kernels_avx2() {
  static constexpr KernelSet set{SimdLevel::Avx2, matmul_float, act_row_bytes, quantize_act,
                                 act_block,       matmul_quant, 16};
  return set;
}

}  // namespace canvas::matmul_detail
