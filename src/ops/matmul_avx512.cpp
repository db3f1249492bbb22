// AVX-512 matmul kernels: f32/f16/bf16 weights with f32 FMA, quantised weights (Q8_0, Q4_0, Q4_1, Q5_0,
// Q5_1, Q4_K, Q5_K, Q6_K) with VNNI int8 dots.
//
// Determinism: every output y[i][j] is produced by the same instruction sequence whatever tile computes
// it. Float weights: 16 lanes accumulate k = 16s + l in order of s (masked tail last), then one fixed
// reduction tree. Q4_0 / Q8_0 (either layout): one lane per weight row, blocks in order, exactly the
// scalar reference's arithmetic (see group_tile). Other quantised weights: 16 int32 lanes per pair of
// 32-blocks, each lane converted to float and accumulated as acc += (isum * d_x) * d_w in pair order (an
// odd last block uses lanes 0-7 only; formats with a minimum add it per pair or per super-block, see
// quant_tile), then the same reduction tree. Tiles only decide how many independent outputs run side by
// side.
//
// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized on their own _mm512_undefined_* where they get
// inlined (GCC bug 105593), so those two warnings are off for this file.
#if !defined(__clang__)  // clang has no -Wmaybe-uninitialized (and no such false positive)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cfloat>
#include <cstddef>
#include <cstring>
#include <limits>

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
      // The last je - j < 6 columns in one tile as wide as they are (a chunk of 16 columns leaves 4;
      // one column at a time reads each x vector once per column). Each output sums in the same order
      // whatever the tile's width, so the results are the same bit for bit.
      const uint8_t* wj = a.w + j * wrb;
      switch (je - j) {
        case 5: float_tile_rows<L, 5>(r, x, a.ldx, wj, wrb, a.k, y + j, a.ldy); break;
        case 4: float_tile_rows<L, 4>(r, x, a.ldx, wj, wrb, a.k, y + j, a.ldy); break;
        case 3: float_tile_rows<L, 3>(r, x, a.ldx, wj, wrb, a.k, y + j, a.ldy); break;
        case 2: float_tile_rows<L, 2>(r, x, a.ldx, wj, wrb, a.k, y + j, a.ldy); break;
        case 1: float_tile_rows<L, 1>(r, x, a.ldx, wj, wrb, a.k, y + j, a.ldy); break;
        default: break;
      }
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
// pair unpacks; 16 lane words (4 values each) for vpdpbusd, which takes the weights as unsigned bytes:
// int32 start values -offset * (sum of the lane's values) (Q8_0 enters as q + 128, Q4_0 / Q5_0 / Q6_K as
// their stored unsigned q with offsets 8 / 16 / 32), or, for formats with a block minimum (Q4_1, Q5_1;
// no offset, the dot starts at 0), the f32 d_x * (sum of the lane's values); then 16 f32 activation
// scales per lane. An odd last block fills lanes 0-7 of its pair in element order. For Q4_K / Q5_K (no
// offset either) the minimum is applied once per super-block instead: lanes 8-15 of the first pair's lane
// words hold d_x * (sum of block s's values) for the super-block's 8 blocks s (the others stay 0).
constexpr int64_t kPairBytes = 192;

int64_t act_row_bytes(int64_t k) { return (k / kQK + 1) / 2 * kPairBytes; }

// Formats whose 32-block unpacks as [low nibbles = elements 0-15 | high nibbles = elements 16-31].
inline bool split_halves(DType wtype) {
  return wtype == DType::Q4_0 || wtype == DType::Q4_1 || wtype == DType::Q5_0 || wtype == DType::Q5_1;
}

// Lane (4-element group) that holds elements 4g..4g+3 of block h (0 or 1) of a full pair.
inline int pair_lane(DType wtype, int h, int g) {
  if (!split_halves(wtype)) return h * 8 + g;  // element order: Q8_0 and the K-quants
  return (g < 4 ? 0 : 8) + h * 4 + (g & 3);    // [b lo | b' lo | b hi | b' hi] by 16-element halves
}

// The byte position of element e of block h in a full pair.
inline int pair_byte(DType wtype, int h, int e) { return pair_lane(wtype, h, e / 4) * 4 + e % 4; }

// Vector form of quantize_act_block (same IEEE operations; roundf emulated exactly: half away from 0).
float quantize_block_avx512(const float* x, int8_t* q) {
  const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
  const __m512 largest = _mm512_set1_ps(FLT_MAX);
  if (_mm512_cmp_ps_mask(_mm512_abs_ps(x0), largest, _CMP_NLE_UQ) |
      _mm512_cmp_ps_mask(_mm512_abs_ps(x1), largest, _CMP_NLE_UQ)) {  // NaN or an infinity: as quantize_act_block
    std::memset(q, 0, kQK);
    return std::numeric_limits<float>::quiet_NaN();
  }
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

// Q4_0 / Q8_0 (file or interleaved layout) take their activations block by block instead, 40 bytes a
// block: the 32 values in element order, the int32 start value -offset * (block sum) (Q4_0's stored
// nibbles carry offset 8; Q8_0 enters as q + 128), the f32 scale. It fits in act_row_bytes(k).
constexpr int64_t kGroupedActBytes = 40;
inline bool grouped(DType wtype) { return wtype == DType::Q4_0 || wtype == DType::Q8_0 || is_interleaved(wtype); }

void quantize_act_grouped(DType wtype, const float* x, int64_t k, uint8_t* dst) {
  const int32_t offset = interleaved_base(wtype) == DType::Q8_0 ? 128 : 8;
  for (int64_t b = 0; b < k / kQK; ++b) {
    uint8_t* blk = dst + b * kGroupedActBytes;
    int8_t* q = reinterpret_cast<int8_t*>(blk);
    const float d = quantize_block_avx512(x + b * kQK, q);
    int32_t sum = 0;
    for (int e = 0; e < kQK; ++e) sum += q[e];
    const int32_t init = -offset * sum;
    std::memcpy(blk + kQK, &init, 4);
    std::memcpy(blk + kQK + 4, &d, 4);
  }
}

void quantize_act(DType wtype, const float* x, int64_t k, uint8_t* dst) {
  if (grouped(wtype)) return quantize_act_grouped(wtype, x, k, dst);
  const int64_t nb = k / kQK;
  const int offset = wtype == DType::Q8_0 ? 128 : quant_offset(wtype);
  const bool mins = has_block_min(wtype);
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* pair = dst + b / 2 * kPairBytes;
    const int h = int(b & 1);
    const bool lone = (b == nb - 1) && h == 0;  // odd last block: element order, lanes 0-7
    if (h == 0) std::memset(pair, 0, kPairBytes);
    int8_t q[kQK];
    const float d = quantize_block_avx512(x + b * kQK, q);
    float* dx = reinterpret_cast<float*>(pair + 128);
    int32_t block_sum = 0;
    for (int g = 0; g < 8; ++g) {
      const int lane = lone ? g : pair_lane(wtype, h, g);
      int32_t sum = 0;
      for (int e = 0; e < 4; ++e) {
        pair[lane * 4 + e] = uint8_t(q[4 * g + e]);
        sum += q[4 * g + e];
      }
      if (mins && is_kquant(wtype)) {
        block_sum += sum;
      } else if (mins) {
        const float sx = d * float(sum);
        std::memcpy(pair + 64 + 4 * lane, &sx, 4);
      } else {
        const int32_t init = -offset * sum;
        std::memcpy(pair + 64 + 4 * lane, &init, 4);
      }
      dx[lane] = d;
    }
    if (mins && is_kquant(wtype)) {  // lane 8 + s of the super-block's first pair
      const float sx = d * float(block_sum);
      std::memcpy(dst + b / 8 * 4 * kPairBytes + 64 + 4 * (8 + b % 8), &sx, 4);
    }
  }
}

void act_block(DType wtype, const uint8_t* row, int64_t k, int64_t b, int8_t* q, float* d) {
  if (grouped(wtype)) {
    std::memcpy(q, row + b * kGroupedActBytes, kQK);
    std::memcpy(d, row + b * kGroupedActBytes + kQK + 4, 4);
    return;
  }
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

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Two f16 values (at p and p + stride) spread over the lanes as `index` says.
inline __m512 pair_halves(const uint8_t* p, int stride, __m512i index) {
  uint16_t d0, d1;
  std::memcpy(&d0, p, 2);
  std::memcpy(&d1, p + stride, 2);
  const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128(int(uint32_t(d0) | uint32_t(d1) << 16)));
  return _mm512_permutexvar_ps(index, _mm512_castps128_ps512(f));
}

// Lane -> block of the pair for the split-halves formats: [b lo | b' lo | b hi | b' hi].
inline __m512i split_index() { return _mm512_set_epi32(1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0); }

// The 32 nibbles of two 16-byte runs in split-halves pair order: [a lo | b lo | a hi | b hi].
inline __m512i split_nibbles_pair(const uint8_t* a, const uint8_t* b) {
  const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
                                            _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1);
  const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1);
  return _mm512_and_si512(z, _mm512_set1_epi8(0x0f));
}

// One block's 32 nibbles in element order (an odd last block).
inline __m256i split_nibbles_one(const uint8_t* qs) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), _mm256_set1_epi8(0x0f));
}

// Adds bit 4 (Q5_0 / Q5_1: bit i of the block's qh is element i's) in split-halves pair order.
inline __m512i add_fifth_bit_pair(__m512i q, uint32_t qh0, uint32_t qh1) {
  const __mmask64 mask = __mmask64(qh0 & 0xffff) | __mmask64(qh1 & 0xffff) << 16 | __mmask64(qh0 >> 16) << 32 |
                         __mmask64(qh1 >> 16) << 48;
  return _mm512_mask_add_epi8(q, mask, q, _mm512_set1_epi8(0x10));
}

// Weight formats, as the tile loop sees them: units of kPairs pairs of 32-blocks (1, or 4 for the
// K-quants' super-blocks) kUnitBytes apart; prepare() decodes what a unit's blocks share (K-quant
// scales); pair() yields pair t of the unit as 64 unsigned bytes in activation-layout order, its per-lane
// scale and, for kLaneMin formats, its per-lane minimum (the value added to scale * q). The 32-block
// formats also give load_one() for an odd last block (element order, lanes 0-7).
struct NoUnit {};
// How a format's minimum enters: none; per lane (Q4_1, Q5_1: acc += (d_x * lane sum) * min); once per
// super-block (Q4_K, Q5_K: lanes 8-15 of acc += (d_x * block sum) * min of each of the 8 blocks).
constexpr int kNoMin = 0, kLaneMin = 1, kSuperBlockMin = 2;

struct PairQ4_1 {
  static constexpr int kPairs = 1, kUnitBytes = 2 * sizeof(BlockQ4_1), kPrefetchSpan = 64;
  static constexpr int kVecCols = 8, kCols = 4;
  static constexpr int kMinMode = kLaneMin;
  using Unit = NoUnit;
  static void prepare(const uint8_t*, Unit&) {}
  static void pair(const uint8_t* p, const Unit&, int, __m512i& q, __m512& d, __m512& m) {
    constexpr int kB = sizeof(BlockQ4_1);
    q = split_nibbles_pair(p + 4, p + kB + 4);
    d = pair_halves(p, kB, split_index());
    m = pair_halves(p + 2, kB, split_index());
  }
  static void load_one(const uint8_t* p, __m256i& q, __m256& d, __m256& m) {
    q = split_nibbles_one(p + 4);
    d = _mm256_set1_ps(half_to_float(p));
    m = _mm256_set1_ps(half_to_float(p + 2));
  }
};

struct PairQ5_0 {
  static constexpr int kPairs = 1, kUnitBytes = 2 * sizeof(BlockQ5_0), kPrefetchSpan = 64;
  static constexpr int kVecCols = 8, kCols = 4;
  static constexpr int kMinMode = kNoMin;
  using Unit = NoUnit;
  static void prepare(const uint8_t*, Unit&) {}
  static void pair(const uint8_t* p, const Unit&, int, __m512i& q, __m512& d, __m512&) {
    constexpr int kB = sizeof(BlockQ5_0);
    q = add_fifth_bit_pair(split_nibbles_pair(p + 6, p + kB + 6), load_u32(p + 2), load_u32(p + kB + 2));
    d = pair_halves(p, kB, split_index());
  }
  static void load_one(const uint8_t* p, __m256i& q, __m256& d, __m256&) {
    const __m256i n = split_nibbles_one(p + 6);
    q = _mm256_mask_add_epi8(n, __mmask32(load_u32(p + 2)), n, _mm256_set1_epi8(0x10));
    d = _mm256_set1_ps(half_to_float(p));
  }
};

struct PairQ5_1 {
  static constexpr int kPairs = 1, kUnitBytes = 2 * sizeof(BlockQ5_1), kPrefetchSpan = 64;
  static constexpr int kVecCols = 8, kCols = 4;
  static constexpr int kMinMode = kLaneMin;
  using Unit = NoUnit;
  static void prepare(const uint8_t*, Unit&) {}
  static void pair(const uint8_t* p, const Unit&, int, __m512i& q, __m512& d, __m512& m) {
    constexpr int kB = sizeof(BlockQ5_1);
    q = add_fifth_bit_pair(split_nibbles_pair(p + 8, p + kB + 8), load_u32(p + 4), load_u32(p + kB + 4));
    d = pair_halves(p, kB, split_index());
    m = pair_halves(p + 2, kB, split_index());
  }
  static void load_one(const uint8_t* p, __m256i& q, __m256& d, __m256& m) {
    const __m256i n = split_nibbles_one(p + 8);
    q = _mm256_mask_add_epi8(n, __mmask32(load_u32(p + 4)), n, _mm256_set1_epi8(0x10));
    d = _mm256_set1_ps(half_to_float(p));
    m = _mm256_set1_ps(half_to_float(p + 2));
  }
};

// Q4_K / Q5_K: lanes 0-7 the sub-block scales d * sc[s], lanes 8-15 the minimums -(dmin * m[s]).
struct KScales {
  __m512 v;
};

inline void prepare_kscales(const uint8_t* p, KScales& u) {
  uint32_t words[4];
  unpack_kquant_scale_words(p + 4, words);
  const __m512 sm = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(words))));
  const __m256 d = _mm256_set1_ps(half_to_float(p)), dmin = _mm256_set1_ps(-half_to_float(p + 2));
  u.v = _mm512_mul_ps(sm, _mm512_insertf32x8(_mm512_castps256_ps512(d), dmin, 1));
}

// Sub-blocks 2t (lanes 0-7) and 2t + 1 (lanes 8-15) of a K-quant unit: their scale lanes.
inline __m512 kscale_pair(const KScales& u, int t) {
  const __m512i index = _mm512_add_epi32(_mm512_set1_epi32(2 * t),
                                         _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0));
  return _mm512_permutexvar_ps(index, u.v);
}

// The low nibbles of qs[32t ..] (sub-block 2t) then their high nibbles (sub-block 2t + 1): element order.
inline __m512i kquant_nibbles_pair(const uint8_t* qs, int t) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * t));
  const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1);
  return _mm512_and_si512(z, _mm512_set1_epi8(0x0f));
}

struct PairQ4_K {
  static constexpr int kPairs = 4, kUnitBytes = sizeof(BlockQ4_K), kPrefetchSpan = kUnitBytes;
  static constexpr int kVecCols = 4, kCols = 4;
  static constexpr int kMinMode = kSuperBlockMin;
  using Unit = KScales;
  static void prepare(const uint8_t* p, Unit& u) { prepare_kscales(p, u); }
  static void pair(const uint8_t* p, const Unit& u, int t, __m512i& q, __m512& d, __m512&) {
    q = kquant_nibbles_pair(p + offsetof(BlockQ4_K, qs), t);
    d = kscale_pair(u, t);
  }
  static void load_one(const uint8_t*, __m256i&, __m256&, __m256&) {}  // never: 8 blocks per unit
};

struct PairQ5_K {
  static constexpr int kPairs = 4, kUnitBytes = sizeof(BlockQ5_K), kPrefetchSpan = kUnitBytes;
  static constexpr int kVecCols = 4, kCols = 4;
  static constexpr int kMinMode = kSuperBlockMin;
  using Unit = KScales;
  static void prepare(const uint8_t* p, Unit& u) { prepare_kscales(p, u); }
  static void pair(const uint8_t* p, const Unit& u, int t, __m512i& q, __m512& d, __m512&) {
    // Bit 4 of sub-block s is bit s of qh[l]: bit 2t for bytes 0-31, bit 2t + 1 for bytes 32-63.
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + offsetof(BlockQ5_K, qh)));
    const __m512i bits = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi8(char(1 << (2 * t)))),
                                            _mm256_set1_epi8(char(2 << (2 * t))), 1);
    const __mmask64 high = _mm512_test_epi8_mask(_mm512_inserti64x4(_mm512_castsi256_si512(qh), qh, 1), bits);
    const __m512i n = kquant_nibbles_pair(p + offsetof(BlockQ5_K, qs), t);
    q = _mm512_mask_add_epi8(n, high, n, _mm512_set1_epi8(0x10));
    d = kscale_pair(u, t);
  }
  static void load_one(const uint8_t*, __m256i&, __m256&, __m256&) {}
};

// Q6_K: the 16 sub-block scales d * sc[s]; pair t covers sub-blocks 4t .. 4t + 3, 4 lanes each.
struct PairQ6_K {
  static constexpr int kPairs = 4, kUnitBytes = sizeof(BlockQ6_K), kPrefetchSpan = kUnitBytes;
  static constexpr int kVecCols = 4, kCols = 4;
  static constexpr int kMinMode = kNoMin;
  struct Unit {
    __m512 v;
  };
  static void prepare(const uint8_t* p, Unit& u) {
    const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + offsetof(BlockQ6_K, scales)));
    u.v = _mm512_mul_ps(_mm512_set1_ps(half_to_float(p + offsetof(BlockQ6_K, d))),
                        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc)));
  }
  static void pair(const uint8_t* p, const Unit& u, int t, __m512i& q, __m512& d, __m512&) {
    // Pair t lies in half t / 2: low (t even) or high (t odd) nibbles of ql[64h .. 64h + 63] and bits
    // 0-1 / 2-3 (t even) or 4-5 / 6-7 (t odd) of qh[32h ..] for bytes 0-31 / 32-63.
    const int half = t / 2, shift = 4 * (t & 1);
    const __m512i ql = _mm512_loadu_si512(p + 64 * half);
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + offsetof(BlockQ6_K, qh) + 32 * half));
    const __m512i qh2 = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
    const __m512i low = _mm512_and_si512(_mm512_srli_epi16(ql, unsigned(shift)), _mm512_set1_epi8(0x0f));
    const __m512i high =
        _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh2, unsigned(shift)), _mm512_set1_epi8(3)), 4);
    q = _mm512_or_si512(low, high);
    const __m512i index = _mm512_add_epi32(_mm512_set1_epi32(4 * t),
                                           _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0));
    d = _mm512_permutexvar_ps(index, u.v);
  }
  static void load_one(const uint8_t*, __m256i&, __m256&, __m256&) {}
};

// Per pair, in pair order: acc = fma(cvt(isum) * d_x, d_w, acc), then for kLaneMin formats
// acc = fma(d_x * sum_x, min_w, acc); kSuperBlockMin formats add their minimums after each super-block's
// pairs; an odd last block does the same in lanes 0-7.
template <class P, int R, int C, bool kStream = (R == 1)>
void quant_tile(const uint8_t* xq, int64_t xrb, const uint8_t* w, int64_t wrb, int64_t nb, float* y, int64_t ldy) {
  __m512 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  const int64_t units = nb / 2 / P::kPairs;
  // Quantised rows are short (a few KB), so a fixed distance along a row would miss every row's start;
  // one tile ahead covers each line exactly once. Very long rows fall back to a distance along the row.
  const int64_t prefetch_ahead = C * wrb <= kTileAheadMax ? C * wrb : kPrefetchBytes;
  for (int64_t u = 0; u < units; ++u) {
    typename P::Unit unit[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const uint8_t* blk = w + c * wrb + u * P::kUnitBytes;
      // matvec: fetch the same spot of the next tile's rows (they follow in memory). A second prefetch
      // for the Q8_0 pair's other line measured slower: the hardware prefetcher covers it.
      if (kStream)
        for (int off = 0; off < P::kPrefetchSpan; off += 64)
          _mm_prefetch(reinterpret_cast<const char*>(blk) + prefetch_ahead + off, _MM_HINT_T0);
      P::prepare(blk, unit[c]);
    }
#pragma GCC unroll 4
    for (int t = 0; t < P::kPairs; ++t) {
      __m512i wq[C];
      __m512 dw[C], mw[C];
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) P::pair(w + c * wrb + u * P::kUnitBytes, unit[c], t, wq[c], dw[c], mw[c]);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const uint8_t* act = xq + r * xrb + (u * P::kPairs + t) * kPairBytes;
        const __m512i xv = _mm512_load_si512(act);
        const __m512i init = P::kMinMode != kNoMin ? _mm512_setzero_si512() : _mm512_load_si512(act + 64);
        const __m512 dx = _mm512_load_ps(act + 128);
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
          const __m512i s = _mm512_dpbusd_epi32(init, wq[c], xv);
          acc[r][c] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s), dx), dw[c], acc[r][c]);
          if constexpr (P::kMinMode == kLaneMin)
            acc[r][c] = _mm512_fmadd_ps(_mm512_load_ps(act + 64), mw[c], acc[r][c]);
        }
      }
    }
    if constexpr (P::kMinMode == kSuperBlockMin) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m512 sx = _mm512_load_ps(xq + r * xrb + u * P::kPairs * kPairBytes + 64);
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) acc[r][c] = _mm512_mask3_fmadd_ps(sx, unit[c].v, acc[r][c], 0xff00);
      }
    }
  }
  if (P::kPairs == 1 && (nb & 1)) {
    const int64_t last = nb / 2;
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      __m256i wq1;
      __m256 dw1, mw1;
      P::load_one(w + c * wrb + last * P::kUnitBytes, wq1, dw1, mw1);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const uint8_t* act = xq + r * xrb + last * kPairBytes;
        const __m256i init = P::kMinMode != kNoMin ? _mm256_setzero_si256()
                                      : _mm256_load_si256(reinterpret_cast<const __m256i*>(act + 64));
        const __m256i s = _mm256_dpbusd_epi32(init, wq1, _mm256_load_si256(reinterpret_cast<const __m256i*>(act)));
        const __m256 g = _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_load_ps(reinterpret_cast<const float*>(act + 128)));
        acc[r][c] = _mm512_mask3_fmadd_ps(_mm512_zextps256_ps512(g), _mm512_zextps256_ps512(dw1), acc[r][c], 0x00ff);
        if constexpr (P::kMinMode == kLaneMin) {
          const __m256 sx = _mm256_load_ps(reinterpret_cast<const float*>(act + 64));
          acc[r][c] = _mm512_mask3_fmadd_ps(_mm512_zextps256_ps512(sx), _mm512_zextps256_ps512(mw1), acc[r][c], 0x00ff);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) y[r * ldy + c] = hsum(acc[r][c]);
}

constexpr int kQuantRows = 4;

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
  constexpr int kVecCols = P::kVecCols, kQuantCols = P::kCols;
  const int64_t wrb = a.w_row_bytes, nb = a.k / kQK;
  if (a.m == 1) {
    int64_t j = j0;
    for (; j + kVecCols <= j1; j += kVecCols) quant_tile<P, 1, kVecCols>(a.xq, a.xq_row_bytes, a.w + j * wrb, wrb, nb, a.y + j, a.ldy);
    for (; j < j1; ++j) quant_tile<P, 1, 1>(a.xq, a.xq_row_bytes, a.w + j * wrb, wrb, nb, a.y + j, a.ldy);
    return;
  }
  if (a.m == 2) {  // a LLaDA AR step ([token, MASK]): bandwidth-bound like matvec, so stream the weights once
    int64_t j = j0;
    for (; j + kVecCols <= j1; j += kVecCols)
      quant_tile<P, 2, kVecCols, true>(a.xq, a.xq_row_bytes, a.w + j * wrb, wrb, nb, a.y + j, a.ldy);
    for (; j < j1; ++j) quant_tile<P, 2, 1, true>(a.xq, a.xq_row_bytes, a.w + j * wrb, wrb, nb, a.y + j, a.ldy);
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

// ---- Q4_0 / Q8_0: 16 rows at once from interleaved groups ------------------------------------------
//
// One vector lane per weight row: per 32-block, 8 vpdpbusd (4 elements each, the activation's 4 bytes
// broadcast) give each lane the block's exact integer dot (started at -offset * block sum), then
//   acc = fma(d_w * d_x, float(isum), acc)
// in block order (one rounding for the product of scales, one for the fused multiply-add): exactly the
// scalar reference's arithmetic for these formats, so these outputs equal matmul_reference's bit for
// bit. Weights in the file layout are interleaved into
// the same groups on the fly (16 rows at a time), so both layouts give the same bits.

// s + (unsigned bytes of w) . (the 4 signed bytes at q, broadcast): vpdpbusd with an embedded broadcast
// operand, which GCC does not form from _mm512_set1_epi32 by itself.
inline __m512i dpbusd_bcast(__m512i s, __m512i w, const int32_t* q) {
  __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(s) : "v"(w), "m"(*q));
  return s;
}

constexpr int kTwoChainRows = 2;   // tiles of at most this many (row, group) pairs split each block's dot
constexpr int kPairRows = 4;       // activation rows per register tile of two groups (one group: 8)
constexpr int kGroupAhead = 8192;  // software prefetch distance along the groups' bytes

// R rows of activations against C adjacent groups (gstride bytes apart; y + 16c is group c's lane 0).
// Only the first `rows` (<= R) rows exist and are stored, the others repeat the last one; only
// lanes[c] of group c are stored.
template <bool kQ8, int R, int C>
void group_tile(const uint8_t* g, int64_t gstride, int64_t nb, const uint8_t* xq, int64_t xrb, float* y, int64_t ldy,
                const __mmask16* lanes, int rows = R) {
  constexpr int64_t kBlock = kQ8 ? 544 : 288;
  constexpr bool kOnce = R <= 2 && C == 1;
  __m512 acc[R][C];
  const uint8_t* act[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 2
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
    act[r] = xq + std::min(r, rows - 1) * xrb;
  }
  const __m512i low = _mm512_set1_epi8(0x0f);
  for (int64_t b = 0; b < nb; ++b) {
    __m512 dw[C];
    __m512i wv[C][8];
#pragma GCC unroll 2
    for (int c = 0; c < C; ++c) {
      const uint8_t* p = g + c * gstride + b * kBlock;
      // One or two activation rows read each group once: a non-temporal prefetch keeps the stream
      // from evicting what the caches hold (measured 8% faster from DRAM); larger tiles re-read the
      // groups row tile after row tile, from L2.
#pragma GCC unroll 9
      for (int64_t off = 0; off < kBlock; off += 64)
        _mm_prefetch(reinterpret_cast<const char*>(p) + kGroupAhead + off, kOnce ? _MM_HINT_NTA : _MM_HINT_T0);
      dw[c] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
      if constexpr (kQ8) {
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) wv[c][i] = _mm512_loadu_si512(p + 32 + 64 * i);
      } else {
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) {
          const __m512i raw = _mm512_loadu_si512(p + 32 + 64 * i);
          wv[c][i] = _mm512_and_si512(raw, low);
          wv[c][i + 4] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low);
        }
      }
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const uint8_t* a = act[r] + b * kGroupedActBytes;
      const int32_t* q = reinterpret_cast<const int32_t*>(a);
      const __m512i init = _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(a + kQK));
      const __m512 dx = _mm512_set1_ps(*reinterpret_cast<const float*>(a + kQK + 4));
      __m512i s[C];
#pragma GCC unroll 2
      for (int c = 0; c < C; ++c) s[c] = init;
      if constexpr (R * C <= kTwoChainRows) {  // few rows: two chains hide vpdpbusd's latency (integer sums)
        __m512i s1[C];
#pragma GCC unroll 2
        for (int c = 0; c < C; ++c) s1[c] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int i = 0; i < 8; i += 2)
#pragma GCC unroll 2
          for (int c = 0; c < C; ++c) {
            s[c] = dpbusd_bcast(s[c], wv[c][i], q + i);
            s1[c] = dpbusd_bcast(s1[c], wv[c][i + 1], q + i + 1);
          }
#pragma GCC unroll 2
        for (int c = 0; c < C; ++c) s[c] = _mm512_add_epi32(s[c], s1[c]);
      } else if constexpr (C == 1) {
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) s[0] = dpbusd_bcast(s[0], wv[0][i], q + i);
      } else {  // one broadcast of the activation's 4 bytes feeds both groups
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) {
          const __m512i xb = _mm512_set1_epi32(q[i]);
#pragma GCC unroll 2
          for (int c = 0; c < C; ++c) s[c] = _mm512_dpbusd_epi32(s[c], wv[c][i], xb);
        }
      }
#pragma GCC unroll 2
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_fmadd_ps(_mm512_mul_ps(dw[c], dx), _mm512_cvtepi32_ps(s[c]), acc[r][c]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
    if (r < rows)
#pragma GCC unroll 2
      for (int c = 0; c < C; ++c) _mm512_mask_storeu_ps(y + r * ldy + 16 * c, lanes[c], acc[r][c]);
}

template <bool kQ8, int C>
void group_rows(int r, const uint8_t* g, int64_t gstride, int64_t nb, const uint8_t* xq, int64_t xrb, float* y,
                int64_t ldy, const __mmask16* lanes) {
  constexpr int kFull = C == 1 ? 8 : kPairRows;
  const int rows = std::min(r, kFull);
  switch (rows) {  // 1-3 rows get their own tiles; more run in the full one
    case 1: return group_tile<kQ8, 1, C>(g, gstride, nb, xq, xrb, y, ldy, lanes);
    case 2: return group_tile<kQ8, 2, C>(g, gstride, nb, xq, xrb, y, ldy, lanes);
    case 3: return group_tile<kQ8, 3, C>(g, gstride, nb, xq, xrb, y, ldy, lanes);
    default: return group_tile<kQ8, kFull, C>(g, gstride, nb, xq, xrb, y, ldy, lanes, rows);
  }
}

// Every activation row against C adjacent groups; y points at the first group's lane 0.
template <bool kQ8, int C>
void group_all_rows(const uint8_t* g, int64_t gstride, int64_t nb, const QuantArgs& a, float* y, const __mmask16* lanes) {
  constexpr int kStep = C == 1 ? 8 : kPairRows;
  for (int64_t i = 0; i < a.m; i += kStep)
    group_rows<kQ8, C>(int(std::min<int64_t>(kStep, a.m - i)), g, gstride, nb, a.xq + i * a.xq_row_bytes,
                       a.xq_row_bytes, y + i * a.ldy, a.ldy, lanes);
}

inline __mmask16 lane_range(int64_t c0, int64_t c1) {  // lanes [c0, c1) of a group, 0 <= c0 < c1 <= 16
  return __mmask16(((1u << (c1 - c0)) - 1) << c0);
}

// interleave_group (matmul.cpp) with gathers: each 64-byte chunk is one 16-lane gather of 4-byte words.
template <bool kQ8>
void interleave_group_avx512(const uint8_t* rows, int64_t row_bytes, int count, int64_t nb, uint8_t* out) {
  constexpr int64_t kSrc = kQ8 ? 34 : 18, kDst = kQ8 ? 544 : 288;
  constexpr int kChunks = kQ8 ? 8 : 4;
  const __m512i index = _mm512_mullo_epi32(_mm512_min_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                            _mm512_set1_epi32(count - 1)),
                                           _mm512_set1_epi32(int32_t(row_bytes)));
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* src = rows + b * kSrc;
    uint8_t* dst = out + b * kDst;
    // The scale words also carry 2 bytes of quants; their low halves are the f16 scales.
    const __m512i scales = _mm512_i32gather_epi32(index, src, 1);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm512_cvtepi32_epi16(scales));
#pragma GCC unroll 8
    for (int i = 0; i < kChunks; ++i) {
      __m512i v = _mm512_i32gather_epi32(index, src + 2 + 4 * i, 1);
      if (kQ8) v = _mm512_xor_si512(v, _mm512_set1_epi8(char(0x80)));
      _mm512_storeu_si512(dst + 32 + 64 * i, v);
    }
  }
}

}  // namespace

void interleave_group_avx512(DType base, const uint8_t* rows, int64_t row_bytes, int count, int64_t nb, uint8_t* out) {
  if (base == DType::Q8_0) interleave_group_avx512<true>(rows, row_bytes, count, nb, out);
  else interleave_group_avx512<false>(rows, row_bytes, count, nb, out);
}

namespace {

template <bool kQ8>
void matmul_grouped(const QuantArgs& a, int64_t j0, int64_t j1) {
  const int64_t nb = a.k / kQK, rb = a.w_row_bytes, group_bytes = kInterleaveRows * rb;
  const bool pairs = a.m > 2;  // many rows: two groups share each activation broadcast
  if (is_interleaved(a.type)) {  // row j is lane j % 16 of group j / 16
    const int64_t g1 = (j1 + kInterleaveRows - 1) / kInterleaveRows;
    // The tiles prefetch kGroupAhead bytes ahead of themselves; start that stream now, so a chunk's
    // first blocks do not each wait for DRAM.
    const uint8_t* first = a.w + j0 / kInterleaveRows * group_bytes;
    const int64_t lead = std::min<int64_t>(kGroupAhead, (g1 - j0 / kInterleaveRows) * group_bytes);
    for (int64_t off = 0; off < lead; off += 64) _mm_prefetch(reinterpret_cast<const char*>(first) + off, _MM_HINT_T0);
    for (int64_t g = j0 / kInterleaveRows; g < g1;) {
      __mmask16 lanes[2];
      const int n = pairs && g + 1 < g1 ? 2 : 1;
      for (int c = 0; c < n; ++c) {
        const int64_t c0 = std::max(j0, (g + c) * kInterleaveRows), c1 = std::min(j1, (g + c + 1) * kInterleaveRows);
        lanes[c] = lane_range(c0 - (g + c) * kInterleaveRows, c1 - (g + c) * kInterleaveRows);
      }
      if (n == 2) group_all_rows<kQ8, 2>(a.w + g * group_bytes, group_bytes, nb, a, a.y + g * kInterleaveRows, lanes);
      else group_all_rows<kQ8, 1>(a.w + g * group_bytes, group_bytes, nb, a, a.y + g * kInterleaveRows, lanes);
      g += n;
    }
    return;
  }
  // File layout: rows j0, j0 + 16, ... start groups interleaved on the fly into this thread's buffer.
  uint8_t* tmp = kernel_scratch(2 * group_bytes);
  for (int64_t j = j0; j < j1;) {
    __mmask16 lanes[2];
    const int n = pairs && j1 - j > kInterleaveRows ? 2 : 1;
    for (int c = 0; c < n; ++c) {
      const int count = int(std::min<int64_t>(kInterleaveRows, j1 - j - c * kInterleaveRows));
      interleave_group_avx512<kQ8>(a.w + (j + c * kInterleaveRows) * rb, rb, count, nb, tmp + c * group_bytes);
      lanes[c] = lane_range(0, count);
    }
    if (n == 2) group_all_rows<kQ8, 2>(tmp, group_bytes, nb, a, a.y + j, lanes);
    else group_all_rows<kQ8, 1>(tmp, group_bytes, nb, a, a.y + j, lanes);
    j += n * kInterleaveRows;
  }
}

void matmul_quant(const QuantArgs& a, int64_t j0, int64_t j1) {
  switch (a.type) {
    case DType::Q8_0:
    case DType::Q8_0_R16: matmul_grouped<true>(a, j0, j1); break;
    case DType::Q4_0:
    case DType::Q4_0_R16: matmul_grouped<false>(a, j0, j1); break;
    case DType::Q4_1: matmul_quant_typed<PairQ4_1>(a, j0, j1); break;
    case DType::Q5_0: matmul_quant_typed<PairQ5_0>(a, j0, j1); break;
    case DType::Q5_1: matmul_quant_typed<PairQ5_1>(a, j0, j1); break;
    case DType::Q4_K: matmul_quant_typed<PairQ4_K>(a, j0, j1); break;
    case DType::Q5_K: matmul_quant_typed<PairQ5_K>(a, j0, j1); break;
    default: matmul_quant_typed<PairQ6_K>(a, j0, j1); break;
  }
}

}  // namespace

const KernelSet& kernels_avx512() {
  static constexpr KernelSet set{SimdLevel::Avx512, matmul_float, act_row_bytes, quantize_act,
                                 act_block,         matmul_quant, 16};
  return set;
}

}  // namespace canvas::matmul_detail
