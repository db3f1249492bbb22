// AVX-512 matmul kernels: f32/f16/bf16 weights with f32 FMA, Q8_0/Q4_0 weights with VNNI int8 dots.
//
// Determinism: every output y[i][j] is produced by the same instruction sequence whatever tile computes
// it. Float weights: 16 lanes accumulate k = 16s + l in order of s (masked tail last), then one fixed
// reduction tree. Quantised weights: 16 int32 lanes per pair of 32-blocks, each lane converted to float
// and accumulated as acc += (isum * d_x) * d_w in pair order (an odd last block uses lanes 0-7 only),
// then the same reduction tree. Tiles only decide how many independent outputs run side by side.
//
// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized on their own _mm512_undefined_* where they get
// inlined (GCC bug 105593), so those two warnings are off for this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "ops/matmul_kernels.h"

namespace canvas::matmul_detail {
namespace {

// Fixed reduction tree: lanes l and l+8, then l and l+4, l and l+2, l and l+1.
inline float hsum(__m512 v) {
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
  return _mm_cvtss_f32(s4);
}

constexpr int64_t kPanelBytes = 256 * 1024;  // weight rows kept hot in L2 while all x tiles pass
constexpr int kPrefetchBytes = 1024;         // software prefetch distance along each weight row
constexpr int64_t kTileAheadMax = 128 * 1024;  // quantised matvec: prefetch one tile ahead up to this

// ---- float weights ---------------------------------------------------------------------------------

struct LoadF32 {
  static constexpr int kBytes = 4;
  static __m512 full(const uint8_t* row, int64_t k0) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + k0);
  }
  static __m512 part(const uint8_t* row, int64_t k0, __mmask16 mask) {
    return _mm512_maskz_loadu_ps(mask, reinterpret_cast<const float*>(row) + k0);
  }
};

struct LoadF16 {
  static constexpr int kBytes = 2;
  static __m512 full(const uint8_t* row, int64_t k0) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k0)));
  }
  static __m512 part(const uint8_t* row, int64_t k0, __mmask16 mask) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, row + 2 * k0));
  }
};

struct LoadBF16 {
  static constexpr int kBytes = 2;
  static __m512 widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
  static __m512 full(const uint8_t* row, int64_t k0) {
    return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k0)));
  }
  static __m512 part(const uint8_t* row, int64_t k0, __mmask16 mask) {
    return widen(_mm256_maskz_loadu_epi16(mask, row + 2 * k0));
  }
};

// R rows of x against C weight rows. kStream: matvec over weights far larger than the caches, so each
// weight row is prefetched ahead.
template <class L, int R, int C, bool kStream = false>
void float_tile(const float* x, int64_t ldx, const uint8_t* w, int64_t wrb, int64_t k, float* y, int64_t ldy) {
  __m512 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  int64_t k0 = 0;
  for (; k0 + 16 <= k; k0 += 16) {
    if (kStream) {
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c)
        _mm_prefetch(reinterpret_cast<const char*>(w + c * wrb + k0 * L::kBytes) + kPrefetchBytes, _MM_HINT_T0);
    }
    __m512 xv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) xv[r] = _mm512_loadu_ps(x + r * ldx + k0);
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const __m512 wv = L::full(w + c * wrb, k0);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][c] = _mm512_fmadd_ps(xv[r], wv, acc[r][c]);
    }
  }
  if (k0 < k) {  // the last k % 16 elements, zero-masked
    const __mmask16 mask = __mmask16((1u << (k - k0)) - 1);
    __m512 xv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) xv[r] = _mm512_maskz_loadu_ps(mask, x + r * ldx + k0);
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const __m512 wv = L::part(w + c * wrb, k0, mask);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][c] = _mm512_fmadd_ps(xv[r], wv, acc[r][c]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) y[r * ldy + c] = hsum(acc[r][c]);
}

// Register tile 4 x 6 (24 accumulators, 10 loads per 24 FMAs); matvec streams 8 weight rows at once.
// (Chunking k to keep tiles in L1, with the accumulators spilled between chunks, measured slower.)
constexpr int kFloatRows = 4, kFloatCols = 6, kVecCols = 8;

template <class L, int C>
void float_tile_rows(int r, const float* x, int64_t ldx, const uint8_t* w, int64_t wrb, int64_t k, float* y,
                     int64_t ldy) {
  switch (r) {
    case 1: float_tile<L, 1, C>(x, ldx, w, wrb, k, y, ldy); break;
    case 2: float_tile<L, 2, C>(x, ldx, w, wrb, k, y, ldy); break;
    case 3: float_tile<L, 3, C>(x, ldx, w, wrb, k, y, ldy); break;
    default: float_tile<L, 4, C>(x, ldx, w, wrb, k, y, ldy); break;
  }
}

template <class L>
void matmul_float_typed(const FloatArgs& a, int64_t j0, int64_t j1) {
  const int64_t wrb = a.w_row_bytes;
  if (a.m == 1) {
    int64_t j = j0;
    for (; j + kVecCols <= j1; j += kVecCols)
      float_tile<L, 1, kVecCols, true>(a.x, a.ldx, a.w + j * wrb, wrb, a.k, a.y + j, a.ldy);
    for (; j < j1; ++j) float_tile<L, 1, 1, true>(a.x, a.ldx, a.w + j * wrb, wrb, a.k, a.y + j, a.ldy);
    return;
  }
  // A panel of weight rows stays in L2 while every tile of x rows passes over it.
  const int64_t panel = std::max<int64_t>(kFloatCols, kPanelBytes / wrb / kFloatCols * kFloatCols);
  for (int64_t jp = j0; jp < j1; jp += panel) {
    const int64_t je = std::min(j1, jp + panel);
    for (int64_t i = 0; i < a.m; i += kFloatRows) {
      const int r = int(std::min<int64_t>(kFloatRows, a.m - i));
      const float* x = a.x + i * a.ldx;
      float* y = a.y + i * a.ldy;
      int64_t j = jp;
      for (; j + kFloatCols <= je; j += kFloatCols)
        float_tile_rows<L, kFloatCols>(r, x, a.ldx, a.w + j * wrb, wrb, a.k, y + j, a.ldy);
      for (; j < je; ++j) float_tile_rows<L, 1>(r, x, a.ldx, a.w + j * wrb, wrb, a.k, y + j, a.ldy);
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
// Activation row layout, per pair of 32-blocks (192 bytes): 64 int8 values ordered the way the weight
// pair unpacks, 16 int32 start values for vpdpbusd (the bias correction: the weights enter as unsigned
// bytes, Q8_0 as q + 128 and Q4_0 as the raw nibble q, so each lane starts at -128 or -8 times the sum of
// its 4 activation values), and 16 f32 activation scales per lane. An odd last block fills lanes 0-7
// of its pair in element order.
constexpr int64_t kPairBytes = 192;

int64_t act_row_bytes(int64_t k) { return (k / kQK + 1) / 2 * kPairBytes; }

// Lane (4-element group) that holds elements 4g..4g+3 of block h (0 or 1) of a full pair.
inline int pair_lane(DType wtype, int h, int g) {
  if (wtype == DType::Q8_0) return h * 8 + g;
  return (g < 4 ? 0 : 8) + h * 4 + (g & 3);  // Q4_0: [b lo | b' lo | b hi | b' hi] by 16-element halves
}

// The byte position of element e of block h in a full pair.
inline int pair_byte(DType wtype, int h, int e) { return pair_lane(wtype, h, e / 4) * 4 + e % 4; }

// Vector form of quantize_act_block (same IEEE operations; roundf emulated exactly: half away from 0).
float quantize_block_avx512(const float* x, int8_t* q) {
  const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
  const float d = amax / 127.f;
  const float id = d != 0.f ? 1.f / d : 0.f;
  const __m512 idv = _mm512_set1_ps(id), half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.f);
  const __m512 sign = _mm512_set1_ps(-0.f);
  for (int h = 0; h < 2; ++h) {
    const __m512 v = _mm512_mul_ps(h ? x1 : x0, idv);
    const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __mmask16 away = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(v, t)), half, _CMP_GE_OQ);
    const __m512 r = _mm512_mask_add_ps(t, away, t, _mm512_or_ps(one, _mm512_and_ps(v, sign)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16 * h), _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(r)));
  }
  return d;
}

void quantize_act(DType wtype, const float* x, int64_t k, uint8_t* dst) {
  const int64_t nb = k / kQK;
  const int bias = wtype == DType::Q8_0 ? -128 : -8;
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* pair = dst + b / 2 * kPairBytes;
    const int h = int(b & 1);
    const bool lone = (b == nb - 1) && h == 0;  // odd last block: element order, lanes 0-7
    if (h == 0) std::memset(pair, 0, kPairBytes);
    int8_t q[kQK];
    const float d = quantize_block_avx512(x + b * kQK, q);
    int32_t* init = reinterpret_cast<int32_t*>(pair + 64);
    float* dx = reinterpret_cast<float*>(pair + 128);
    for (int g = 0; g < 8; ++g) {
      const int lane = lone ? g : pair_lane(wtype, h, g);
      int32_t sum = 0;
      for (int e = 0; e < 4; ++e) {
        pair[lane * 4 + e] = uint8_t(q[4 * g + e]);
        sum += q[4 * g + e];
      }
      init[lane] = bias * sum;
      dx[lane] = d;
    }
  }
}

void act_block(DType wtype, const uint8_t* row, int64_t k, int64_t b, int8_t* q, float* d) {
  const uint8_t* pair = row + b / 2 * kPairBytes;
  const int h = int(b & 1);
  const bool lone = (b == k / kQK - 1) && h == 0;
  for (int e = 0; e < kQK; ++e) q[e] = int8_t(pair[lone ? e : pair_byte(wtype, h, e)]);
  *d = reinterpret_cast<const float*>(pair + 128)[lone ? 0 : pair_lane(wtype, h, 0)];
}

inline float half_to_float(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

// Weight scales of a pair (two f16 at p and p + stride) spread over the lanes as `index` says.
inline __m512 pair_scales(const uint8_t* p, int stride, __m512i index) {
  uint16_t d0, d1;
  std::memcpy(&d0, p, 2);
  std::memcpy(&d1, p + stride, 2);
  const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128(int(uint32_t(d0) | uint32_t(d1) << 16)));
  return _mm512_permutexvar_ps(index, _mm512_castps128_ps512(f));
}

struct PairQ8 {
  static constexpr int kBlockBytes = sizeof(BlockQ8_0);
  static void load(const uint8_t* p, __m512i& q, __m512& d) {
    const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
    const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + kBlockBytes + 2));
    q = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(b0), b1, 1), _mm512_set1_epi8(char(0x80)));
    d = pair_scales(p, kBlockBytes, _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0));
  }
  static void load_one(const uint8_t* p, __m256i& q, __m256& d) {
    q = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2)), _mm256_set1_epi8(char(0x80)));
    d = _mm256_set1_ps(half_to_float(p));
  }
};

struct PairQ4 {
  static constexpr int kBlockBytes = sizeof(BlockQ4_0);
  static void load(const uint8_t* p, __m512i& q, __m512& d) {
    const __m128i b0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2));
    const __m128i b1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + kBlockBytes + 2));
    const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(b0), b1, 1);
    const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1);
    q = _mm512_and_si512(z, _mm512_set1_epi8(0x0f));
    d = pair_scales(p, kBlockBytes, _mm512_set_epi32(1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0));
  }
  static void load_one(const uint8_t* p, __m256i& q, __m256& d) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2));
    q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), _mm256_set1_epi8(0x0f));
    d = _mm256_set1_ps(half_to_float(p));
  }
};

template <class P, int R, int C>
void quant_tile(const uint8_t* xq, int64_t xrb, const uint8_t* w, int64_t wrb, int64_t nb, float* y, int64_t ldy) {
  __m512 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  const int64_t pairs = nb / 2;
  constexpr int64_t kWeightPair = 2 * P::kBlockBytes;
  // Quantised rows are short (a few KB), so a fixed distance along a row would miss every row's start;
  // one tile ahead covers each line exactly once. Very long rows fall back to a distance along the row.
  const int64_t prefetch_ahead = C * wrb <= kTileAheadMax ? C * wrb : kPrefetchBytes;
  for (int64_t p = 0; p < pairs; ++p) {
    __m512i wq[C];
    __m512 dw[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const uint8_t* blk = w + c * wrb + p * kWeightPair;
      // matvec: fetch the same spot of the next tile's rows (they follow in memory). A second prefetch
      // for the Q8_0 pair's other line measured slower: the hardware prefetcher covers it.
      if (R == 1) _mm_prefetch(reinterpret_cast<const char*>(blk) + prefetch_ahead, _MM_HINT_T0);
      P::load(blk, wq[c], dw[c]);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const uint8_t* act = xq + r * xrb + p * kPairBytes;
      const __m512i xv = _mm512_load_si512(act);
      const __m512i init = _mm512_load_si512(act + 64);
      const __m512 dx = _mm512_load_ps(act + 128);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        const __m512i s = _mm512_dpbusd_epi32(init, wq[c], xv);
        acc[r][c] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s), dx), dw[c], acc[r][c]);
      }
    }
  }
  if (nb & 1) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      __m256i wq1;
      __m256 dw1;
      P::load_one(w + c * wrb + pairs * kWeightPair, wq1, dw1);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const uint8_t* act = xq + r * xrb + pairs * kPairBytes;
        const __m256i s = _mm256_dpbusd_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(act + 64)), wq1,
                                              _mm256_load_si256(reinterpret_cast<const __m256i*>(act)));
        const __m256 g = _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_load_ps(reinterpret_cast<const float*>(act + 128)));
        acc[r][c] = _mm512_mask3_fmadd_ps(_mm512_zextps256_ps512(g), _mm512_zextps256_ps512(dw1), acc[r][c], 0x00ff);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) y[r * ldy + c] = hsum(acc[r][c]);
}

constexpr int kQuantRows = 4, kQuantCols = 4;

template <class P, int C>
void quant_tile_rows(int r, const uint8_t* xq, int64_t xrb, const uint8_t* w, int64_t wrb, int64_t nb, float* y,
                     int64_t ldy) {
  switch (r) {
    case 1: quant_tile<P, 1, C>(xq, xrb, w, wrb, nb, y, ldy); break;
    case 2: quant_tile<P, 2, C>(xq, xrb, w, wrb, nb, y, ldy); break;
    case 3: quant_tile<P, 3, C>(xq, xrb, w, wrb, nb, y, ldy); break;
    default: quant_tile<P, 4, C>(xq, xrb, w, wrb, nb, y, ldy); break;
  }
}

template <class P>
void matmul_quant_typed(const QuantArgs& a, int64_t j0, int64_t j1) {
  const int64_t wrb = a.w_row_bytes, nb = a.k / kQK;
  if (a.m == 1) {
    int64_t j = j0;
    for (; j + kVecCols <= j1; j += kVecCols) quant_tile<P, 1, kVecCols>(a.xq, a.xq_row_bytes, a.w + j * wrb, wrb, nb, a.y + j, a.ldy);
    for (; j < j1; ++j) quant_tile<P, 1, 1>(a.xq, a.xq_row_bytes, a.w + j * wrb, wrb, nb, a.y + j, a.ldy);
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
        quant_tile_rows<P, kQuantCols>(r, xq, a.xq_row_bytes, a.w + j * wrb, wrb, nb, y + j, a.ldy);
      for (; j < je; ++j) quant_tile_rows<P, 1>(r, xq, a.xq_row_bytes, a.w + j * wrb, wrb, nb, y + j, a.ldy);
    }
  }
}

void matmul_quant(const QuantArgs& a, int64_t j0, int64_t j1) {
  if (a.type == DType::Q8_0) matmul_quant_typed<PairQ8>(a, j0, j1);
  else matmul_quant_typed<PairQ4>(a, j0, j1);
}

}  // namespace

const KernelSet& kernels_avx512() {
  static constexpr KernelSet set{SimdLevel::Avx512, matmul_float, act_row_bytes, quantize_act,
                                 act_block,         matmul_quant, 16};
  return set;
}

}  // namespace canvas::matmul_detail
