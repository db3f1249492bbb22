// AVX2 + FMA matmul kernels: f32/f16/bf16 weights with f32 FMA, quantised weights (Q8_0, Q4_0, Q4_1, Q5_0,
// Q5_1, Q4_K, Q5_K, Q6_K) with int8 dot products.
//
// Determinism as in the AVX-512 file: 8 f32 lanes accumulate k = 8s + l in order of s (the tail goes
// through a zero-padded copy), then a fixed reduction tree; quantised weights give 8 int32 lanes per
// 32-block, accumulated as acc += (isum * d_x) * d_w block by block (then + (d_x * sum_x) * min for formats
// with a minimum). Tile shape never changes that.
#include <immintrin.h>

#include <algorithm>
#include <cfloat>
#include <cstddef>
#include <cstring>
#include <limits>

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
// Activation row layout, per 32-block (96 bytes): 32 int8 values in element order; 8 lane words (4
// values each) that are either the int32 offset correction -offset * (sum of the lane's values) for
// weights stored as unsigned q with an offset (Q4_0 8, Q5_0 16, Q6_K 32), or, for weights with a block
// minimum (Q4_1, Q5_1, Q4_K, Q5_K), the f32 d_x * (sum of the lane's values); 8 copies of the f32 scale.
constexpr int64_t kActBlockBytes = 96;

int64_t act_row_bytes(int64_t k) { return k / kQK * kActBlockBytes; }

float quantize_block_avx2(const float* x, int8_t* q) {
  const __m256 sign = _mm256_set1_ps(-0.f);
  __m256 v[4];
  __m256 m = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(x + 8 * i);
    const __m256 a = _mm256_andnot_ps(sign, v[i]);
    m = _mm256_max_ps(m, a);
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, _mm256_set1_ps(FLT_MAX), _CMP_NLE_UQ));  // NaN or an infinity
  }
  if (_mm256_movemask_ps(bad)) {  // as quantize_act_block: q = 0, d = NaN
    std::memset(q, 0, kQK);
    return std::numeric_limits<float>::quiet_NaN();
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

void quantize_act(DType wtype, const float* x, int64_t k, uint8_t* dst) {
  const int offset = quant_offset(wtype);
  const bool mins = has_block_min(wtype);
  for (int64_t b = 0; b < k / kQK; ++b) {
    uint8_t* blk = dst + b * kActBlockBytes;
    int8_t* q = reinterpret_cast<int8_t*>(blk);
    float* dx = reinterpret_cast<float*>(blk + 64);
    const float d = quantize_block_avx2(x + b * kQK, q);
    for (int g = 0; g < 8; ++g) {
      const int32_t sum = q[4 * g] + q[4 * g + 1] + q[4 * g + 2] + q[4 * g + 3];
      if (mins) {
        const float sx = d * float(sum);
        std::memcpy(blk + 32 + 4 * g, &sx, 4);
      } else {
        const int32_t init = -offset * sum;
        std::memcpy(blk + 32 + 4 * g, &init, 4);
      }
      dx[g] = d;
    }
  }
}

void act_block(DType, const uint8_t* row, int64_t, int64_t b, int8_t* q, float* d) {
  std::memcpy(q, row + b * kActBlockBytes, kQK);
  std::memcpy(d, row + b * kActBlockBytes + 64, 4);
}

inline float half_to_float(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

// 0xff in byte i where bit i of bits is set.
inline __m256i bits_to_bytes(uint32_t bits) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(int(bits)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
  const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

// 32 nibbles of 16 bytes in element order: element i < 16 the low nibble of byte i, i + 16 the high one.
inline __m256i split_nibbles(const uint8_t* qs) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), _mm256_set1_epi8(0x0f));
}

// Unsigned weights (0..63) times signed activations: 8 lanes of 4-element sums, plus the lane's
// offset correction when the format has an offset.
template <bool kOffset>
inline __m256i unsigned_dot(__m256i wq, const uint8_t* act) {
  const __m256i xv = _mm256_load_si256(reinterpret_cast<const __m256i*>(act));
  const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(wq, xv), _mm256_set1_epi16(1));
  if constexpr (kOffset) return _mm256_add_epi32(s, _mm256_load_si256(reinterpret_cast<const __m256i*>(act + 32)));
  return s;
}

// Weight formats, as the tile loop sees them: units of kBlocks 32-blocks (1, or 8 for the K-quants'
// super-blocks) kUnitBytes apart; prepare() decodes what a unit's blocks share (K-quant scales);
// block() yields 32-block t of the unit as 32 bytes in element order, its per-lane scale and, for kMins
// formats, its per-lane minimum (the value added to scale * q).
struct NoUnit {};

struct WeightQ8_0 {
  static constexpr int kBlocks = 1, kUnitBytes = sizeof(BlockQ8_0);
  static constexpr bool kMins = false;
  using Unit = NoUnit;
  static void prepare(const uint8_t*, Unit&) {}
  static void block(const uint8_t* p, const Unit&, int, __m256i& q, __m256& d, __m256&) {
    q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
    d = _mm256_set1_ps(half_to_float(p));
  }
  // Sign trick (|w| unsigned times x with w's sign) so vpmaddubsw sees u8 x s8 without overflow.
  static __m256i dot(__m256i wq, const uint8_t* act) {
    const __m256i xv = _mm256_load_si256(reinterpret_cast<const __m256i*>(act));
    const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(wq, wq), _mm256_sign_epi8(xv, wq));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
  }
};

// Q4_0: nibbles 0..15 enter unsigned; the -8 offset comes back through the activation correction.
struct WeightQ4_0 {
  static constexpr int kBlocks = 1, kUnitBytes = sizeof(BlockQ4_0);
  static constexpr bool kMins = false;
  using Unit = NoUnit;
  static void prepare(const uint8_t*, Unit&) {}
  static void block(const uint8_t* p, const Unit&, int, __m256i& q, __m256& d, __m256&) {
    q = split_nibbles(p + 2);
    d = _mm256_set1_ps(half_to_float(p));
  }
  static __m256i dot(__m256i wq, const uint8_t* act) { return unsigned_dot<true>(wq, act); }
};

struct WeightQ4_1 {
  static constexpr int kBlocks = 1, kUnitBytes = sizeof(BlockQ4_1);
  static constexpr bool kMins = true;
  using Unit = NoUnit;
  static void prepare(const uint8_t*, Unit&) {}
  static void block(const uint8_t* p, const Unit&, int, __m256i& q, __m256& d, __m256& m) {
    q = split_nibbles(p + 4);
    d = _mm256_set1_ps(half_to_float(p));
    m = _mm256_set1_ps(half_to_float(p + 2));
  }
  static __m256i dot(__m256i wq, const uint8_t* act) { return unsigned_dot<false>(wq, act); }
};

inline __m256i fifth_bit(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  return _mm256_and_si256(bits_to_bytes(bits), _mm256_set1_epi8(0x10));
}

struct WeightQ5_0 {
  static constexpr int kBlocks = 1, kUnitBytes = sizeof(BlockQ5_0);
  static constexpr bool kMins = false;
  using Unit = NoUnit;
  static void prepare(const uint8_t*, Unit&) {}
  static void block(const uint8_t* p, const Unit&, int, __m256i& q, __m256& d, __m256&) {
    q = _mm256_or_si256(split_nibbles(p + 6), fifth_bit(p + 2));
    d = _mm256_set1_ps(half_to_float(p));
  }
  static __m256i dot(__m256i wq, const uint8_t* act) { return unsigned_dot<true>(wq, act); }
};

struct WeightQ5_1 {
  static constexpr int kBlocks = 1, kUnitBytes = sizeof(BlockQ5_1);
  static constexpr bool kMins = true;
  using Unit = NoUnit;
  static void prepare(const uint8_t*, Unit&) {}
  static void block(const uint8_t* p, const Unit&, int, __m256i& q, __m256& d, __m256& m) {
    q = _mm256_or_si256(split_nibbles(p + 8), fifth_bit(p + 4));
    d = _mm256_set1_ps(half_to_float(p));
    m = _mm256_set1_ps(half_to_float(p + 2));
  }
  static __m256i dot(__m256i wq, const uint8_t* act) { return unsigned_dot<false>(wq, act); }
};

// Q4_K / Q5_K: the unit's 8 sub-block scales d * sc and minimums -(dmin * m), as f32.
struct KScales {
  alignas(32) float scale[8];
  alignas(32) float min[8];
};

inline void prepare_kscales(const uint8_t* p, KScales& u) {
  uint32_t words[4];
  unpack_kquant_scale_words(p + 4, words);
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(words));
  const __m256 scf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
  const __m256 mf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(bytes, 8)));
  // Same f32 products as the scalar decoder: d * sc and -(dmin * m).
  _mm256_store_ps(u.scale, _mm256_mul_ps(_mm256_set1_ps(half_to_float(p)), scf));
  _mm256_store_ps(u.min, _mm256_xor_ps(_mm256_mul_ps(_mm256_set1_ps(half_to_float(p + 2)), mf), _mm256_set1_ps(-0.f)));
}

// Sub-block t of a Q4_K / Q5_K unit: the low (t even) or high (t odd) nibbles of qs[32 * (t / 2) ...].
inline __m256i kquant_nibbles(const uint8_t* qs, int t) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * (t / 2)));
  return _mm256_and_si256(_mm256_srli_epi16(v, 4 * (t & 1)), _mm256_set1_epi8(0x0f));
}

struct WeightQ4_K {
  static constexpr int kBlocks = 8, kUnitBytes = sizeof(BlockQ4_K);
  static constexpr bool kMins = true;
  using Unit = KScales;
  static void prepare(const uint8_t* p, Unit& u) { prepare_kscales(p, u); }
  static void block(const uint8_t* p, const Unit& u, int t, __m256i& q, __m256& d, __m256& m) {
    q = kquant_nibbles(p + offsetof(BlockQ4_K, qs), t);
    d = _mm256_broadcast_ss(u.scale + t);
    m = _mm256_broadcast_ss(u.min + t);
  }
  static __m256i dot(__m256i wq, const uint8_t* act) { return unsigned_dot<false>(wq, act); }
};

struct WeightQ5_K {
  static constexpr int kBlocks = 8, kUnitBytes = sizeof(BlockQ5_K);
  static constexpr bool kMins = true;
  using Unit = KScales;
  static void prepare(const uint8_t* p, Unit& u) { prepare_kscales(p, u); }
  static void block(const uint8_t* p, const Unit& u, int t, __m256i& q, __m256& d, __m256& m) {
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + offsetof(BlockQ5_K, qh)));
    const __m256i bit = _mm256_set1_epi8(char(1 << t));
    const __m256i high = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit), _mm256_set1_epi8(0x10));
    q = _mm256_or_si256(kquant_nibbles(p + offsetof(BlockQ5_K, qs), t), high);
    d = _mm256_broadcast_ss(u.scale + t);
    m = _mm256_broadcast_ss(u.min + t);
  }
  static __m256i dot(__m256i wq, const uint8_t* act) { return unsigned_dot<false>(wq, act); }
};

// Q6_K: 16 sub-block scales d * sc as f32; 32-block t has two of them (lanes 0-3 and 4-7).
struct WeightQ6_K {
  static constexpr int kBlocks = 8, kUnitBytes = sizeof(BlockQ6_K);
  static constexpr bool kMins = false;
  struct Unit {
    alignas(32) float scale[16];
  };
  static void prepare(const uint8_t* p, Unit& u) {
    const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + offsetof(BlockQ6_K, scales)));
    const __m256 d = _mm256_set1_ps(half_to_float(p + offsetof(BlockQ6_K, d)));
    _mm256_store_ps(u.scale, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))));
    _mm256_store_ps(u.scale + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8)))));
  }
  static void block(const uint8_t* p, const Unit& u, int t, __m256i& q, __m256& d, __m256&) {
    const int half = t / 4, part = t % 4;
    const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64 * half + 32 * (part & 1)));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + offsetof(BlockQ6_K, qh) + 32 * half));
    const __m256i low = _mm256_and_si256(_mm256_srli_epi16(ql, 4 * (part >> 1)), _mm256_set1_epi8(0x0f));
    const __m256i high = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * part), _mm256_set1_epi8(3)), 4);
    q = _mm256_or_si256(low, high);
    d = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_broadcast_ss(u.scale + 2 * t)), _mm_broadcast_ss(u.scale + 2 * t + 1), 1);
  }
  static __m256i dot(__m256i wq, const uint8_t* act) { return unsigned_dot<true>(wq, act); }
};

// Per 32-block, in block order: acc = fma(cvt(isum) * d_x, d_w, acc), then for kMins formats
// acc = fma(d_x * sum_x, min_w, acc). The same sequence for every output whatever the tile.
template <class W, int R, int C>
void quant_tile(const uint8_t* xq, int64_t xrb, const uint8_t* w, int64_t wrb, int64_t nb, float* y, int64_t ldy) {
  __m256 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  const int64_t prefetch_ahead = C * wrb <= kTileAheadMax ? C * wrb : kPrefetchBytes;
  const int64_t units = nb / W::kBlocks;
  for (int64_t u = 0; u < units; ++u) {
    typename W::Unit unit[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const uint8_t* blk = w + c * wrb + u * W::kUnitBytes;
      // matvec: fetch the same spot of the next tile's rows (short quantised rows follow in memory)
      if (R == 1)
        for (int off = 0; off < W::kUnitBytes; off += 64)
          _mm_prefetch(reinterpret_cast<const char*>(blk) + prefetch_ahead + off, _MM_HINT_T0);
      W::prepare(blk, unit[c]);
    }
#pragma GCC unroll 8
    for (int t = 0; t < W::kBlocks; ++t) {
      __m256i wq[C];
      __m256 dw[C], mw[C];
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) W::block(w + c * wrb + u * W::kUnitBytes, unit[c], t, wq[c], dw[c], mw[c]);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const uint8_t* act = xq + r * xrb + (u * W::kBlocks + t) * kActBlockBytes;
        const __m256 dx = _mm256_load_ps(reinterpret_cast<const float*>(act + 64));
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
          const __m256 g = _mm256_mul_ps(_mm256_cvtepi32_ps(W::dot(wq[c], act)), dx);
          acc[r][c] = _mm256_fmadd_ps(g, dw[c], acc[r][c]);
          if constexpr (W::kMins)
            acc[r][c] = _mm256_fmadd_ps(_mm256_load_ps(reinterpret_cast<const float*>(act + 32)), mw[c], acc[r][c]);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) y[r * ldy + c] = hsum(acc[r][c]);
}

constexpr int kQuantRows = 2, kQuantCols = 2, kQuantVecCols = 4;

template <class W, int C>
void quant_tile_rows(int r, const uint8_t* xq, int64_t xrb, const uint8_t* w, int64_t wrb, int64_t nb, float* y,
                     int64_t ldy) {
  if (r == 1) quant_tile<W, 1, C>(xq, xrb, w, wrb, nb, y, ldy);
  else quant_tile<W, 2, C>(xq, xrb, w, wrb, nb, y, ldy);
}

template <class W>
void matmul_quant_typed(const QuantArgs& a, int64_t j0, int64_t j1) {
  const int64_t wrb = a.w_row_bytes, nb = a.k / kQK;
  if (a.m == 1) {
    int64_t j = j0;
    for (; j + kQuantVecCols <= j1; j += kQuantVecCols)
      quant_tile<W, 1, kQuantVecCols>(a.xq, a.xq_row_bytes, a.w + j * wrb, wrb, nb, a.y + j, a.ldy);
    for (; j < j1; ++j) quant_tile<W, 1, 1>(a.xq, a.xq_row_bytes, a.w + j * wrb, wrb, nb, a.y + j, a.ldy);
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
        quant_tile_rows<W, kQuantCols>(r, xq, a.xq_row_bytes, a.w + j * wrb, wrb, nb, y + j, a.ldy);
      for (; j < je; ++j) quant_tile_rows<W, 1>(r, xq, a.xq_row_bytes, a.w + j * wrb, wrb, nb, y + j, a.ldy);
    }
  }
}

void matmul_quant(const QuantArgs& a, int64_t j0, int64_t j1) {
  switch (a.type) {
    case DType::Q8_0: matmul_quant_typed<WeightQ8_0>(a, j0, j1); break;
    case DType::Q4_0: matmul_quant_typed<WeightQ4_0>(a, j0, j1); break;
    case DType::Q4_1: matmul_quant_typed<WeightQ4_1>(a, j0, j1); break;
    case DType::Q5_0: matmul_quant_typed<WeightQ5_0>(a, j0, j1); break;
    case DType::Q5_1: matmul_quant_typed<WeightQ5_1>(a, j0, j1); break;
    case DType::Q4_K: matmul_quant_typed<WeightQ4_K>(a, j0, j1); break;
    case DType::Q5_K: matmul_quant_typed<WeightQ5_K>(a, j0, j1); break;
    default: matmul_quant_typed<WeightQ6_K>(a, j0, j1); break;
  }
}

}  // namespace

const KernelSet& kernels_avx2() {
  static constexpr KernelSet set{SimdLevel::Avx2, matmul_float, act_row_bytes, quantize_act,
                                 act_block,       matmul_quant, 16};
  return set;
}

}  // namespace canvas::matmul_detail
