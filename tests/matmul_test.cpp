// matmul against its scalar twin on every SIMD level, bitwise determinism across batch shapes, tiles
// and thread counts, and the (de)quantisation rows against known values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "ops/matmul.h"
#include "ops/matmul_kernels.h"

namespace canvas {
namespace {

// A weight matrix of n rows of k elements of a dtype, made from random normal floats.
struct Weights {
  std::vector<uint8_t> bytes;
  TensorView view;
  std::vector<float> dequantized;  // n * k
};

Weights make_weights(DType type, int64_t n, int64_t k, uint64_t seed) {
  Rng rng(seed);
  Weights w;
  const int64_t rb = row_bytes(type, k);
  w.bytes.resize(size_t(rb * n));
  w.dequantized.resize(size_t(n * k));
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t j = 0; j < n; ++j) {
    const float row_scale = float(0.5 + rng.uniform());  // rows of different magnitude
    for (auto& v : row) v = float(rng.normal()) * row_scale;
    quantize_row(type, row.data(), w.bytes.data() + j * rb, k);
    dequantize_row(type, w.bytes.data() + j * rb, w.dequantized.data() + j * k, k);
  }
  w.view.name = "test.weight";
  w.view.type = type;
  w.view.ne = {k, n, 1, 1};
  w.view.n_dims = 2;
  w.view.data = w.bytes.data();
  return w;
}

std::vector<float> random_vector(int64_t size, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(size));
  for (auto& x : v) x = float(rng.normal());
  return v;
}

// Levels this machine runs, each set through the override (restored by the guard).
std::vector<SimdLevel> available_levels() {
  std::vector<SimdLevel> levels;
  for (SimdLevel l : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512}) {
    set_matmul_simd_level(l);
    if (matmul_simd_level() == l) levels.push_back(l);
  }
  reset_matmul_simd_level();
  return levels;
}

struct LevelGuard {
  explicit LevelGuard(SimdLevel l) { set_matmul_simd_level(l); }
  ~LevelGuard() { reset_matmul_simd_level(); }
};

// Error scale of one output: sum of |terms| (for quantised weights, with the activation rounding).
float error_scale(const Weights& w, int64_t j, const float* x, int64_t k) {
  double s = 0;
  const float* wr = w.dequantized.data() + j * k;
  for (int64_t b = 0; b < k; b += 32) {
    const int64_t e = std::min<int64_t>(k, b + 32);
    double amax = 0;
    for (int64_t i = b; i < e; ++i) amax = std::max(amax, double(std::fabs(x[i])));
    for (int64_t i = b; i < e; ++i) s += std::fabs(wr[i]) * (std::fabs(x[i]) + amax / 127);
  }
  return float(s);
}

const DType kAllTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1,
                           DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K};
const DType kQuantTypes[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                             DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K};
const DType kNewQuantTypes[] = {DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K};

int64_t block_of(DType type) { return dtype_info(type).block_size; }

// Dequantises one row of hand-built blocks.
template <class Block, size_t N>
std::vector<float> dequantized(DType type, const Block (&blocks)[N]) {
  const int64_t n = int64_t(N) * block_of(type);
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_row(type, blocks, out.data(), n);
  return out;
}

// ---- quantisation rows --------------------------------------------------------------------------

TEST(QuantizeTest, Q8_0KnownValues) {
  float x[32];
  for (int i = 0; i < 32; ++i) x[i] = float(i - 16);  // amax 16: d = 16/127, q = roundf(x * 127/16)
  BlockQ8_0 blk;
  quantize_row(DType::Q8_0, x, &blk, 32);
  EXPECT_EQ(blk.d, f32_to_f16(16.f / 127.f));
  EXPECT_EQ(blk.qs[0], -127);   // -16
  EXPECT_EQ(blk.qs[16], 0);     // 0
  EXPECT_EQ(blk.qs[17], 8);     // 1 * 7.9375 = 7.9375
  EXPECT_EQ(blk.qs[18], 16);    // 15.875
  EXPECT_EQ(blk.qs[20], 32);    // 31.75
  EXPECT_EQ(blk.qs[31], 119);   // 15 * 7.9375 = 119.0625
  EXPECT_EQ(blk.qs[15], -8);    // -7.9375
  // Ties round half away from zero (roundf), as ggml does: amax 127 gives d = 1.
  float t[32] = {127.f, 2.5f, -2.5f, 0.5f, -0.5f, 1.5f};
  quantize_row(DType::Q8_0, t, &blk, 32);
  EXPECT_EQ(blk.d, f32_to_f16(1.f));
  EXPECT_EQ(blk.qs[0], 127);
  EXPECT_EQ(blk.qs[1], 3);
  EXPECT_EQ(blk.qs[2], -3);
  EXPECT_EQ(blk.qs[3], 1);
  EXPECT_EQ(blk.qs[4], -1);
  EXPECT_EQ(blk.qs[5], 2);
  float back[32];
  dequantize_row(DType::Q8_0, &blk, back, 32);
  EXPECT_EQ(back[1], 3.f);
  EXPECT_EQ(back[2], -3.f);
  // All zeros: d = 0 and q = 0.
  float z[32] = {};
  quantize_row(DType::Q8_0, z, &blk, 32);
  EXPECT_EQ(blk.d, 0);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(blk.qs[i], 0);
}

TEST(QuantizeTest, Q4_0KnownValuesAndNibbleLayout) {
  float x[32];
  for (int i = 0; i < 32; ++i) x[i] = float(i - 16);  // the largest magnitude is -16: d = -16/-8 = 2
  BlockQ4_0 blk;
  quantize_row(DType::Q4_0, x, &blk, 32);
  EXPECT_EQ(blk.d, f32_to_f16(2.f));
  // q = min(15, int8(x / 2 + 8.5)): element i < 16 in the low nibble of qs[i], i + 16 in the high one.
  for (int i = 0; i < 16; ++i) {
    const int lo = std::min(15, int(int8_t(x[i] * 0.5f + 8.5f)));
    const int hi = std::min(15, int(int8_t(x[i + 16] * 0.5f + 8.5f)));
    EXPECT_EQ(blk.qs[i] & 15, lo) << i;
    EXPECT_EQ(blk.qs[i] >> 4, hi) << i;
  }
  EXPECT_EQ(blk.qs[0] & 15, 0);   // -16 -> q 0 -> value -16
  EXPECT_EQ(blk.qs[15] >> 4, 15);  // 15 -> 16.0 clamped to 15 -> value 14
  EXPECT_EQ(blk.qs[1] >> 4, 9);   // 1 -> 9.0 -> value 2 (truncation after +8.5)
  float back[32];
  dequantize_row(DType::Q4_0, &blk, back, 32);
  EXPECT_EQ(back[0], -16.f);
  EXPECT_EQ(back[31], 14.f);
  EXPECT_EQ(back[17], 2.f);
  EXPECT_EQ(back[16], 0.f);
  // A positive extreme gives a negative scale, so that value maps exactly to q = 0 (-8 * d).
  float p[32] = {};
  p[5] = 24.f;
  p[6] = -3.f;
  quantize_row(DType::Q4_0, p, &blk, 32);
  EXPECT_EQ(f16_to_f32(blk.d), -3.f);
  dequantize_row(DType::Q4_0, &blk, back, 32);
  EXPECT_EQ(back[5], 24.f);
  EXPECT_EQ(back[6], -3.f);
  EXPECT_EQ(back[0], 0.f);
}

TEST(QuantizeTest, RoundTripErrorBounds) {
  const int64_t n = 256 * 5;
  std::vector<float> x = random_vector(n, 7);
  for (int64_t i = 256; i < 512; ++i) x[size_t(i)] = std::fabs(x[size_t(i)]) + 0.5f;  // a positive super-block
  for (int64_t i = 512; i < 768; ++i) x[size_t(i)] *= 0.01f * float(1 + i % 32);       // mixed magnitudes
  for (DType type : kAllTypes) {
    std::vector<uint8_t> q(static_cast<size_t>(row_bytes(type, n)));
    std::vector<float> back(static_cast<size_t>(n));
    quantize_row(type, x.data(), q.data(), n);
    dequantize_row(type, q.data(), back.data(), n);
    double err2 = 0, x2 = 0;
    for (int64_t i = 0; i < n; ++i) {
      err2 += double(back[size_t(i)] - x[size_t(i)]) * (back[size_t(i)] - x[size_t(i)]);
      x2 += double(x[size_t(i)]) * x[size_t(i)];
    }
    // Relative RMS error: a loose check that every format keeps its promised precision.
    const double max_rel_rms = type == DType::F32 ? 0 : type == DType::F16 ? 1e-3 : type == DType::BF16 ? 5e-3
                               : type == DType::Q8_0                        ? 0.01
                               : type == DType::Q6_K                        ? 0.03
                               : type == DType::Q5_0 || type == DType::Q5_1 || type == DType::Q5_K ? 0.05
                                                                                                  : 0.11;
    EXPECT_LE(std::sqrt(err2 / x2), max_rel_rms) << dtype_name(type);
    // Per-element bounds from each format's definition.
    for (int64_t b = 0; b < n; b += 32) {
      const float* xb = x.data() + b;
      float amax = 0, lo = xb[0], hi = xb[0];
      for (int i = 0; i < 32; ++i) {
        amax = std::max(amax, std::fabs(xb[i]));
        lo = std::min(lo, xb[i]);
        hi = std::max(hi, xb[i]);
      }
      std::vector<float> tol(32, 0.f);
      const int64_t sb = b / 256 * 256;  // K-quant super-block of this 32-block
      switch (type) {
        case DType::F32: break;
        case DType::F16: std::fill(tol.begin(), tol.end(), amax * 0x1p-11f); break;
        case DType::BF16: std::fill(tol.begin(), tol.end(), amax * 0x1p-8f); break;
        case DType::Q8_0: std::fill(tol.begin(), tol.end(), amax / 127 * 0.51f + amax * 0x1p-11f); break;
        case DType::Q4_0: std::fill(tol.begin(), tol.end(), amax / 8 * 1.01f + amax * 0x1p-10f); break;  // clamp at 15
        case DType::Q5_0: std::fill(tol.begin(), tol.end(), amax / 16 * 1.01f + amax * 0x1p-10f); break;  // clamp at 31
        case DType::Q4_1:
        case DType::Q5_1: {  // half a step of (max - min) / nmax, plus the f16 rounding of d and m
          const float nmax = type == DType::Q4_1 ? 15.f : 31.f, d = (hi - lo) / nmax;
          std::fill(tol.begin(), tol.end(), 0.51f * d + (nmax * d + std::fabs(lo)) * 0x1p-10f);
          break;
        }
        case DType::Q4_K:
        case DType::Q5_K: {
          // Half a step of the sub-block, plus the 6-bit rounding of its scale (half a super-step over nmax
          // levels) and of its minimum (half a super-step).
          const float nmax = type == DType::Q4_K ? 15.f : 31.f;
          float max_scale = 0, max_min = 0;
          for (int s = 0; s < 8; ++s) {
            float slo = 0, shi = -1e30f;
            for (int l = 0; l < 32; ++l) {
              slo = std::min(slo, x[size_t(sb + 32 * s + l)]);
              shi = std::max(shi, x[size_t(sb + 32 * s + l)]);
            }
            max_scale = std::max(max_scale, (shi - slo) / nmax);
            max_min = std::max(max_min, -slo);
          }
          const float step = (hi - std::min(lo, 0.f)) / nmax;
          std::fill(tol.begin(), tol.end(),
                    0.5f * step + 0.5f * nmax * max_scale / 63 + 0.5f * max_min / 63 + amax * 0x1p-9f);
          break;
        }
        case DType::Q6_K: {
          // A full step of the 16-element sub-block (+32 clamps to 31), plus the int8 rounding of its scale
          // (half a super-step, times up to 32 levels).
          float max_scale = 0;
          for (int s = 0; s < 16; ++s) {
            float sa = 0;
            for (int l = 0; l < 16; ++l) sa = std::max(sa, std::fabs(x[size_t(sb + 16 * s + l)]));
            max_scale = std::max(max_scale, sa / 32);
          }
          for (int i = 0; i < 32; ++i) {
            float sa = 0;
            for (int l = 0; l < 16; ++l) sa = std::max(sa, std::fabs(xb[i / 16 * 16 + l]));
            tol[size_t(i)] = sa / 32 + 16.5f * max_scale / 127 + amax * 0x1p-9f;
          }
          break;
        }
        default: FAIL();
      }
      for (int i = 0; i < 32; ++i)
        ASSERT_LE(std::fabs(back[size_t(b + i)] - xb[i]), tol[size_t(i)]) << dtype_name(type) << " at " << b + i;
    }
  }
}

// ggml's reference rounding for Q4_1 / Q5_0 / Q5_1 on inputs whose quants are known by hand.
TEST(QuantizeTest, Q4_1Q5_0Q5_1KnownValues) {
  float x[32];
  for (int i = 0; i < 32; ++i) x[i] = float(i - 16);  // amax 16 at -16: Q5_0 d = -16 / -16 = 1, q = i
  BlockQ5_0 b50;
  quantize_row(DType::Q5_0, x, &b50, 32);
  EXPECT_EQ(b50.d, f32_to_f16(1.f));
  uint32_t qh;
  std::memcpy(&qh, b50.qh, 4);
  EXPECT_EQ(qh, 0xffff0000u);  // q = i: bit 4 set exactly for elements 16..31
  for (int i = 0; i < 16; ++i) EXPECT_EQ(b50.qs[i], uint8_t(i | i << 4)) << i;  // (i & 15) | ((i + 16) & 15) << 4
  for (int i = 0; i < 32; ++i) x[i] = 0.5f * float(i);  // Q5_1: min 0, max 15.5, d = 0.5, q = i
  BlockQ5_1 b51;
  quantize_row(DType::Q5_1, x, &b51, 32);
  EXPECT_EQ(b51.d, f32_to_f16(0.5f));
  EXPECT_EQ(b51.m, f32_to_f16(0.f));
  std::memcpy(&qh, b51.qh, 4);
  EXPECT_EQ(qh, 0xffff0000u);
  EXPECT_EQ(b51.qs[3], 0x33);
  for (int i = 0; i < 32; ++i) x[i] = float(i % 16) - 4.f;  // Q4_1: min -4, max 11, d = 1, q = i % 16
  BlockQ4_1 b41;
  quantize_row(DType::Q4_1, x, &b41, 32);
  EXPECT_EQ(b41.d, f32_to_f16(1.f));
  EXPECT_EQ(b41.m, f32_to_f16(-4.f));
  for (int i = 0; i < 16; ++i) EXPECT_EQ(b41.qs[i], uint8_t(i | i << 4)) << i;
  // Truncation after + 0.5 (not roundf): 0.4999 of a step rounds down, 0.5 up.
  for (int i = 0; i < 32; ++i) x[i] = i == 31 ? 15.f : i == 1 ? 0.4999f : i == 2 ? 1.5f : 0.f;  // d = 1
  quantize_row(DType::Q4_1, x, &b41, 32);
  EXPECT_EQ(b41.qs[1] & 15, 0);
  EXPECT_EQ(b41.qs[2] & 15, 2);
  EXPECT_EQ(b41.qs[15] >> 4, 15);
}

// Hand-built blocks against values worked out by hand from ggml's format definitions (ggml-common.h /
// dequantize_row_* in ggml-quants.c). A wrong nibble order, qh bit or scale index changes these values.
TEST(QuantizeTest, DequantizeHandBuiltBlocks32) {
  uint8_t qs[16];
  for (int i = 0; i < 16; ++i) qs[i] = uint8_t(i | (15 - i) << 4);
  const uint32_t qh = 0x80010003u;  // bits 0, 1, 16, 31: elements 0, 1, 16, 31 get bit 4
  BlockQ4_1 q41[1];
  q41[0].d = 0x3800;  // 0.5
  q41[0].m = 0xBC00;  // -1
  std::memcpy(q41[0].qs, qs, 16);
  std::vector<float> y = dequantized(DType::Q4_1, q41);
  EXPECT_EQ(y[3], 0.5f);    // q 3: 0.5 * 3 - 1
  EXPECT_EQ(y[19], 5.f);    // element 16 + 3: high nibble of qs[3] = 12
  EXPECT_EQ(y[31], -1.f);   // high nibble of qs[15] = 0
  BlockQ5_0 q50[1];
  q50[0].d = 0x3400;  // 0.25
  std::memcpy(q50[0].qh, &qh, 4);
  std::memcpy(q50[0].qs, qs, 16);
  y = dequantized(DType::Q5_0, q50);
  EXPECT_EQ(y[0], 0.f);     // (0 | 16) - 16
  EXPECT_EQ(y[1], 0.25f);   // (1 | 16) - 16
  EXPECT_EQ(y[2], -3.5f);   // 2 - 16
  EXPECT_EQ(y[16], 3.75f);  // (15 | 16) - 16
  EXPECT_EQ(y[17], -0.5f);  // 14 - 16
  EXPECT_EQ(y[31], 0.f);    // (0 | 16) - 16
  BlockQ5_1 q51[1];
  q51[0].d = 0x3800;  // 0.5
  q51[0].m = 0x3800;  // 0.5
  std::memcpy(q51[0].qh, &qh, 4);
  std::memcpy(q51[0].qs, qs, 16);
  y = dequantized(DType::Q5_1, q51);
  EXPECT_EQ(y[0], 8.5f);   // 16 * 0.5 + 0.5
  EXPECT_EQ(y[2], 1.5f);   // 2
  EXPECT_EQ(y[16], 16.f);  // 31
  EXPECT_EQ(y[31], 8.5f);  // 16
  // ggml computes (q - 16) * d, which is -0 for q = 16 and d < 0; so must we (no "+ 0" in the decoder).
  q50[0].d = 0xB400;  // -0.25
  y = dequantized(DType::Q5_0, q50);
  EXPECT_TRUE(std::signbit(y[0]));
}

// Q4_K / Q5_K: d = 0.5, dmin = 0.25, sc = {1, 2, 3, 4, 40, 17, 63, 0}, m = {5, 6, 7, 8, 33, 48, 15, 62}
// (packed by hand, see DtypeTest.KQuantScalePacking), qs[i] = i. Element e: sub-block s = e / 32, l = e % 32,
// byte qs[32 * (s / 2) + l], low nibble for even s; value = 0.5 * sc[s] * q - 0.25 * m[s].
TEST(QuantizeTest, DequantizeHandBuiltKQuants) {
  const uint8_t scales[12] = {0x81, 0x42, 0xC3, 0x04, 0x85, 0xC6, 0x07, 0xC8, 0x18, 0x01, 0xFF, 0xE0};
  BlockQ4_K q4[1];
  q4[0].d = 0x3800;
  q4[0].dmin = 0x3400;
  std::memcpy(q4[0].scales, scales, 12);
  for (int i = 0; i < 128; ++i) q4[0].qs[i] = uint8_t(i);
  std::vector<float> y = dequantized(DType::Q4_K, q4);
  EXPECT_EQ(y[0], -1.25f);   // s 0, q 0: -0.25 * 5
  EXPECT_EQ(y[3], 0.25f);    // s 0, q 3: 1.5 - 1.25
  EXPECT_EQ(y[33], -1.5f);   // s 1, byte 1 high nibble 0: -0.25 * 6
  EXPECT_EQ(y[50], -0.5f);   // s 1, byte 18 high nibble 1: 0.5 * 2 - 1.5
  EXPECT_EQ(y[84], 4.25f);   // s 2, byte 52 low nibble 4: 0.5 * 3 * 4 - 1.75
  EXPECT_EQ(y[133], 91.75f); // s 4, byte 69 low nibble 5: 0.5 * 40 * 5 - 8.25
  EXPECT_EQ(y[191], 30.5f);  // s 5, byte 95 high nibble 5: 0.5 * 17 * 5 - 12
  EXPECT_EQ(y[255], -15.5f); // s 7, sc 0: -0.25 * 62
  // Q5_K: the same plus qh[l] = 1 << (l % 8): element l of sub-block s gets bit 4 when s == l % 8.
  BlockQ5_K q5[1];
  q5[0].d = 0x3800;
  q5[0].dmin = 0x3400;
  std::memcpy(q5[0].scales, scales, 12);
  for (int i = 0; i < 128; ++i) q5[0].qs[i] = uint8_t(i);
  for (int l = 0; l < 32; ++l) q5[0].qh[l] = uint8_t(1 << (l % 8));
  y = dequantized(DType::Q5_K, q5);
  EXPECT_EQ(y[0], 6.75f);     // s 0, l 0: q 16: 8 - 1.25
  EXPECT_EQ(y[3], 0.25f);     // s 0, l 3: no bit, q 3
  EXPECT_EQ(y[33], 14.5f);    // s 1, l 1: q 0 + 16: 0.5 * 2 * 16 - 1.5
  EXPECT_EQ(y[132], 391.75f); // s 4, l 4: byte 68 low nibble 4, + 16: 0.5 * 40 * 20 - 8.25
  EXPECT_EQ(y[133], 91.75f);  // s 4, l 5: no bit
  EXPECT_EQ(y[191], 30.5f);   // s 5, l 31: bit 7 only
}

// Q6_K: d = 0.5, scales[s] = 3s - 20, ql[i] = i, qh[l] = 0xE4 (top bits 0, 1, 2, 3 for the four 32-element
// groups of each half). Element e: half n = e / 128, group p = (e % 128) / 32, l = e % 32; low bits from
// ql[64n + l] (p 0 low nibble, p 2 high) or ql[64n + 32 + l] (p 1 low, p 3 high); value 0.5 * sc[e / 16] * (q - 32).
TEST(QuantizeTest, DequantizeHandBuiltQ6_K) {
  BlockQ6_K b[1];
  for (int i = 0; i < 128; ++i) b[0].ql[i] = uint8_t(i);
  for (int i = 0; i < 64; ++i) b[0].qh[i] = 0xE4;
  for (int s = 0; s < 16; ++s) b[0].scales[s] = int8_t(3 * s - 20);
  b[0].d = 0x3800;
  const std::vector<float> y = dequantized(DType::Q6_K, b);
  EXPECT_EQ(y[5], 270.f);     // p 0: ql[5] low 5, q 5: 0.5 * -20 * -27
  EXPECT_EQ(y[41], 49.f);     // p 1, l 9: ql[41] low 9, + 16 = 25: 0.5 * -14 * -7
  EXPECT_EQ(y[81], -2.5f);    // p 2, l 17: ql[17] high 1, + 32 = 33: 0.5 * -5 * 1
  EXPECT_EQ(y[126], 9.5f);    // p 3, l 30: ql[62] high 3, + 48 = 51: 0.5 * 1 * 19
  EXPECT_EQ(y[130], -60.f);   // half 1, p 0, l 2: ql[66] low 2: 0.5 * 4 * -30
  EXPECT_EQ(y[192], 32.f);    // half 1, p 2, l 0: ql[64] high 4, + 32 = 36: 0.5 * 16 * 4
  EXPECT_EQ(y[255], 287.5f);  // half 1, p 3, l 31: ql[127] high 7, + 48 = 55: 0.5 * 25 * 23
}

// The word-wise scale unpacking the SIMD kernels use agrees with the byte-wise definition on random bytes.
TEST(QuantizeTest, KQuantScaleWordsMatchBytes) {
  Rng rng(5);
  for (int trial = 0; trial < 1000; ++trial) {
    uint8_t scales[12], sc[8], m[8];
    for (auto& v : scales) v = uint8_t(rng.next());
    unpack_kquant_scales(scales, sc, m);
    uint32_t words[4];
    matmul_detail::unpack_kquant_scale_words(scales, words);
    uint8_t bytes[16];
    std::memcpy(bytes, words, 16);
    for (int j = 0; j < 8; ++j) {
      ASSERT_EQ(bytes[j], sc[j]);
      ASSERT_EQ(bytes[8 + j], m[j]);
    }
  }
}

TEST(QuantizeTest, GetRowMatchesDequantizeAndChecksRange) {
  for (DType type : kAllTypes) {
    const Weights w = make_weights(type, 5, 256, 3);
    std::vector<float> row(256);
    get_row(w.view, 3, row.data());
    for (int i = 0; i < 256; ++i) ASSERT_EQ(row[size_t(i)], w.dequantized[size_t(3 * 256 + i)]) << dtype_name(type);
    EXPECT_THROW(get_row(w.view, 5, row.data()), Error);
  }
}

TEST(QuantizeTest, RejectsRowsNotMultipleOf32) {
  std::vector<float> x(48, 1.f);
  std::vector<uint8_t> buf(256);
  EXPECT_THROW(quantize_row(DType::Q8_0, x.data(), buf.data(), 48), Error);
  EXPECT_THROW(quantize_row(DType::Q4_0, x.data(), buf.data(), 48), Error);
  TensorView w;
  w.name = "blk.0.ffn_up.weight";
  w.type = DType::Q8_0;
  w.ne = {48, 4, 1, 1};
  w.n_dims = 2;
  w.data = buf.data();
  std::vector<float> y(4);
  try {
    matmul(w, x.data(), 1, y.data(), nullptr);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of the block size 32"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("blk.0.ffn_up.weight"), std::string::npos) << e.what();
  }
  w.type = DType::Q4_0;
  EXPECT_THROW(matmul(w, x.data(), 1, y.data(), nullptr), Error);
  w.type = DType::Q2_K;  // not supported (yet)
  EXPECT_THROW(matmul(w, x.data(), 1, y.data(), nullptr), Error);
  EXPECT_FALSE(matmul_supports(DType::Q2_K));
  for (DType type : kQuantTypes) EXPECT_TRUE(matmul_supports(type)) << dtype_name(type);
  // K-quants need rows of whole 256-element super-blocks.
  std::vector<float> x160(160 * 2, 1.f);
  w.type = DType::Q4_K;
  w.ne = {160, 2, 1, 1};
  try {
    matmul(w, x160.data(), 1, y.data(), nullptr);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of the block size 256"), std::string::npos) << e.what();
  }
  EXPECT_THROW(quantize_row(DType::Q6_K, x160.data(), buf.data(), 160), Error);
  w.ne = {48, 4, 1, 1};
  w.type = DType::F32;
  EXPECT_THROW(matmul(w, x.data(), 40, 1, y.data(), 4, nullptr), Error);  // ldx < k
}

// Every kernel set's activation quantisation reproduces the scalar definition bit for bit.
TEST(QuantizeTest, ActivationQuantizationIdenticalOnEveryLevel) {
  using namespace matmul_detail;
  for (int64_t k : {32, 64, 96, 320, 352}) {
    std::vector<float> x = random_vector(k, uint64_t(k));
    // Exact ties for roundf: a block with amax 127 (d = 1) and .5 values.
    for (int i = 0; i < 32; ++i) x[size_t(i)] = i == 0 ? 127.f : float(i % 7) - 3.5f;
    // A block of zeros.
    if (k >= 64) std::fill(x.begin() + 32, x.begin() + 64, 0.f);
    for (SimdLevel level : available_levels()) {
      const KernelSet* ks = level == SimdLevel::Avx512 ? &kernels_avx512()
                            : level == SimdLevel::Avx2 ? &kernels_avx2()
                                                       : &kernels_scalar();
      for (DType wt : kQuantTypes) {
        std::vector<uint8_t> row(size_t(ks->act_row_bytes(k)) + 64);
        uint8_t* aligned = row.data() + (64 - reinterpret_cast<uintptr_t>(row.data()) % 64) % 64;
        ks->quantize_act(wt, x.data(), k, aligned);
        for (int64_t b = 0; b < k / 32; ++b) {
          int8_t want[32], got[32];
          float want_d, got_d;
          want_d = quantize_act_block(x.data() + b * 32, want);
          ks->act_block(wt, aligned, k, b, got, &got_d);
          ASSERT_EQ(std::memcmp(&want_d, &got_d, 4), 0) << simd_level_name(ks->level) << " block " << b;
          ASSERT_EQ(std::memcmp(want, got, 32), 0) << simd_level_name(ks->level) << " block " << b;
        }
      }
    }
  }
  int8_t q[32];
  float t[32] = {127.f, 2.5f, -2.5f, 0.5f};
  quantize_act_block(t, q);
  EXPECT_EQ(q[1], 3);
  EXPECT_EQ(q[2], -3);
  EXPECT_EQ(q[3], 1);
}

// ---- matmul against the reference -------------------------------------------------------------

void check_against_reference(DType type, int64_t m, int64_t n, int64_t k, ThreadPool* pool, uint64_t seed) {
  const Weights w = make_weights(type, n, k, seed);
  const int64_t ldx = k + 3, ldy = n + 5;  // strides wider than the rows
  const std::vector<float> x = random_vector(m * ldx, seed + 1);
  std::vector<float> ref(size_t(m * ldy), -1.f);
  matmul_reference(w.view, x.data(), ldx, m, ref.data(), ldy);
  for (SimdLevel level : available_levels()) {
    LevelGuard guard(level);
    std::vector<float> y(size_t(m * ldy), -7.f);
    matmul(w.view, x.data(), ldx, m, y.data(), ldy, pool);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        const float tol = 1e-5f * error_scale(w, j, x.data() + i * ldx, k) + 1e-30f;
        ASSERT_NEAR(y[size_t(i * ldy + j)], ref[size_t(i * ldy + j)], tol)
            << dtype_name(type) << " " << simd_level_name(level) << " m=" << m << " n=" << n << " k=" << k
            << " at (" << i << ", " << j << ")";
      }
      for (int64_t j = n; j < ldy; ++j) ASSERT_EQ(y[size_t(i * ldy + j)], -7.f) << "wrote past n";
    }
  }
}

TEST(MatmulTest, MatchesReferenceFloatTypes) {
  ThreadPool pool(2);
  for (DType type : {DType::F32, DType::F16, DType::BF16}) {
    for (int64_t k : {1, 7, 16, 17, 33, 100, 257}) check_against_reference(type, 3, 19, k, &pool, uint64_t(k));
    for (int64_t m : {1, 2, 4, 5, 8, 13, 37, 70}) check_against_reference(type, m, 37, 129, &pool, uint64_t(m));
    for (int64_t n : {1, 3, 8, 17, 64, 131}) check_against_reference(type, 6, n, 96, &pool, uint64_t(n));
  }
  check_against_reference(DType::F32, 9, 40, 4096, &pool, 11);
}

// Every new quantised type, every SIMD level, m in {1, 2, 7, 32}, against the scalar reference.
TEST(MatmulTest, MatchesReferenceNewQuantTypes) {
  ThreadPool pool(2);
  for (DType type : kNewQuantTypes) {
    const int64_t bs = block_of(type);
    const std::vector<int64_t> ks =
        bs == 32 ? std::vector<int64_t>{32, 64, 96, 544} : std::vector<int64_t>{256, 512, 768, 4096};
    for (int64_t k : ks) check_against_reference(type, 3, 19, k, &pool, uint64_t(k));
    for (int64_t m : {1, 2, 7, 32}) check_against_reference(type, m, 37, bs == 32 ? 224 : 512, &pool, uint64_t(m));
    for (int64_t n : {1, 3, 8, 17, 64}) check_against_reference(type, 6, n, bs == 32 ? 96 : 256, &pool, uint64_t(n));
  }
}

// Blocks of random bytes (every bit pattern of quants, qh bits and packed scales; Q6_K scales down to
// -128; only the f16 scales are kept finite and small) through every kernel against the reference.
TEST(MatmulTest, RandomBlockBytesMatchReference) {
  struct F16Field {
    DType type;
    int offsets[2];
  };
  const F16Field fields[] = {{DType::Q4_1, {0, 2}}, {DType::Q5_0, {0, -1}}, {DType::Q5_1, {0, 2}},
                             {DType::Q4_K, {0, 2}}, {DType::Q5_K, {0, 2}},  {DType::Q6_K, {208, -1}},
                             {DType::Q4_0, {0, -1}}, {DType::Q8_0, {0, -1}}};
  for (const F16Field& f : fields) {
    const int64_t bs = block_of(f.type), k = bs == 32 ? 352 : 768, n = 13, m = 5;
    const int64_t block_bytes = dtype_info(f.type).block_bytes;
    Rng rng(uint64_t(f.type) + 17);
    std::vector<uint8_t> bytes(static_cast<size_t>(n * row_bytes(f.type, k)));
    for (auto& v : bytes) v = uint8_t(rng.next());
    for (size_t b = 0; b < bytes.size() / size_t(block_bytes); ++b)
      for (int off : f.offsets)
        if (off >= 0) {
          const uint16_t h = f32_to_f16(float(rng.uniform() * 0.02 - 0.01));
          std::memcpy(bytes.data() + b * size_t(block_bytes) + size_t(off), &h, 2);
        }
    TensorView w;
    w.name = "random";
    w.type = f.type;
    w.ne = {k, n, 1, 1};
    w.n_dims = 2;
    w.data = bytes.data();
    const std::vector<float> x = random_vector(m * k, 3);
    std::vector<float> ref(static_cast<size_t>(m * n)), wd(static_cast<size_t>(k));
    matmul_reference(w, x.data(), k, m, ref.data(), n);
    for (SimdLevel level : available_levels()) {
      LevelGuard guard(level);
      std::vector<float> y(static_cast<size_t>(m * n));
      matmul(w, x.data(), m, y.data(), nullptr);
      for (int64_t j = 0; j < n; ++j) {
        get_row(w, j, wd.data());
        for (int64_t i = 0; i < m; ++i) {
          double scale = 0, exact = 0, rounding = 0;
          for (int64_t e0 = 0; e0 < k; e0 += 32) {
            double amax = 0;
            for (int64_t e = e0; e < e0 + 32; ++e) amax = std::max(amax, double(std::fabs(x[size_t(i * k + e)])));
            for (int64_t e = e0; e < e0 + 32; ++e) {
              scale += std::fabs(wd[size_t(e)] * x[size_t(i * k + e)]);
              exact += double(wd[size_t(e)]) * x[size_t(i * k + e)];
              rounding += std::fabs(wd[size_t(e)]) * amax / 127 * 0.5;
            }
          }
          ASSERT_NEAR(y[size_t(i * n + j)], ref[size_t(i * n + j)], 1e-5 * scale + 1e-6)
              << dtype_name(f.type) << " " << simd_level_name(level) << " (" << i << ", " << j << ")";
          // The reference is the dequantised product up to the activation rounding (half a step each).
          ASSERT_NEAR(ref[size_t(i * n + j)], exact, rounding * 1.01 + 1e-5 * scale + 1e-6) << dtype_name(f.type);
        }
      }
    }
  }
}

TEST(MatmulTest, MatchesReferenceQuantTypes) {
  ThreadPool pool(2);
  for (DType type : {DType::Q8_0, DType::Q4_0}) {
    for (int64_t k : {32, 64, 96, 160, 544}) check_against_reference(type, 3, 19, k, &pool, uint64_t(k));
    for (int64_t m : {1, 2, 3, 4, 5, 8, 13, 37, 70}) check_against_reference(type, m, 37, 224, &pool, uint64_t(m));
    for (int64_t n : {1, 3, 8, 17, 64, 131}) check_against_reference(type, 6, n, 96, &pool, uint64_t(n));
    check_against_reference(type, 9, 40, 4096, &pool, 11);
  }
}

// Q8_0 blocks written by other quantisers may hold -128, which ggml's rounding never produces: every
// kernel must still take it exactly (no saturation in the int8 dot products).
TEST(MatmulTest, Q8_0FullInt8RangeMatchesReference) {
  const int64_t n = 21, k = 160, m = 5;
  Rng rng(31);
  std::vector<uint8_t> bytes(static_cast<size_t>(n * row_bytes(DType::Q8_0, k)));
  for (int64_t b = 0; b < n * k / 32; ++b) {
    BlockQ8_0 blk;
    blk.d = f32_to_f16(float(0.01 + 0.02 * rng.uniform()));
    for (int i = 0; i < 32; ++i) blk.qs[i] = int8_t(b % 3 == 0 ? -128 : int(rng.below(256)) - 128);
    std::memcpy(bytes.data() + b * sizeof blk, &blk, sizeof blk);
  }
  TensorView w;
  w.name = "raw";
  w.type = DType::Q8_0;
  w.ne = {k, n, 1, 1};
  w.n_dims = 2;
  w.data = bytes.data();
  std::vector<float> x = random_vector(m * k, 32);
  for (int64_t i = 0; i < k; ++i) x[size_t(i)] = i % 32 == 0 ? 100.f : -100.f;  // q = +-127 everywhere
  std::vector<float> ref(static_cast<size_t>(m * n)), wd(static_cast<size_t>(k));
  matmul_reference(w, x.data(), k, m, ref.data(), n);
  for (SimdLevel level : available_levels()) {
    LevelGuard guard(level);
    std::vector<float> y(static_cast<size_t>(m * n));
    matmul(w, x.data(), m, y.data(), nullptr);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        get_row(w, j, wd.data());
        double scale = 0;
        for (int64_t e = 0; e < k; ++e) scale += std::fabs(wd[size_t(e)] * x[size_t(i * k + e)]);
        ASSERT_NEAR(y[size_t(i * n + j)], ref[size_t(i * n + j)], 1e-5 * scale)
            << simd_level_name(level) << " (" << i << ", " << j << ")";
      }
    }
  }
}

// Quantised matmul is close to the float product with the dequantised weights: the only extra error is
// the activation rounding, at most half a step per element (guards against a wrong shared idea of the
// block layout in both the kernels and the reference).
TEST(MatmulTest, QuantizedCloseToDequantizedFloatProduct) {
  for (DType type : kQuantTypes) {
    const int64_t m = 5, n = 23, k = 512;
    const Weights w = make_weights(type, n, k, 99);
    const std::vector<float> x = random_vector(m * k, 100);
    std::vector<float> y(static_cast<size_t>(m * n));
    matmul(w.view, x.data(), m, y.data(), nullptr);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double exact = 0, bound = 0;
        for (int64_t b = 0; b < k; b += 32) {
          double amax = 0;
          for (int64_t e = b; e < b + 32; ++e) amax = std::max(amax, double(std::fabs(x[size_t(i * k + e)])));
          for (int64_t e = b; e < b + 32; ++e) {
            const double wv = w.dequantized[size_t(j * k + e)];
            exact += wv * x[size_t(i * k + e)];
            bound += std::fabs(wv) * amax / 127 * 0.5;
          }
        }
        ASSERT_NEAR(y[size_t(i * n + j)], exact, bound * 1.01 + 1e-5 * error_scale(w, j, &x[size_t(i * k)], k))
            << dtype_name(type) << " (" << i << ", " << j << ")";
      }
    }
  }
}

// ---- determinism ----------------------------------------------------------------------------------

bool same_bits(const float* a, const float* b, int64_t n) { return std::memcmp(a, b, size_t(n) * 4) == 0; }

// The same output, bit for bit, for: all 37 rows at once, each row alone, rows in uneven groups and in
// batches with other rows, 1/2/3 threads, and a column sub-range of the weights (other tile paths).
void check_deterministic(DType type, int64_t k) {
  const int64_t m = 37, n = 131;
  const Weights w = make_weights(type, n, k, 5);
  const std::vector<float> x = random_vector(m * k, 6);
  ThreadPool pool1(1), pool2(2), pool3(3);
  for (SimdLevel level : available_levels()) {
    LevelGuard guard(level);
    const std::string what = std::string(dtype_name(type)) + " " + simd_level_name(level) + " k=" + std::to_string(k);
    std::vector<float> full(static_cast<size_t>(m * n));
    matmul(w.view, x.data(), m, full.data(), nullptr);
    for (ThreadPool* pool : {&pool1, &pool2, &pool3}) {
      std::vector<float> y(static_cast<size_t>(m * n));
      matmul(w.view, x.data(), m, y.data(), pool);
      ASSERT_TRUE(same_bits(y.data(), full.data(), m * n)) << what << " threads=" << pool->size();
      for (int64_t i = 0; i < m; ++i) {
        std::vector<float> row(static_cast<size_t>(n));
        matmul(w.view, x.data() + i * k, 1, row.data(), pool);
        ASSERT_TRUE(same_bits(row.data(), full.data() + i * n, n)) << what << " row " << i << " alone";
      }
      for (int64_t group : {2, 3, 5, 6, 9}) {
        for (int64_t i0 = 0; i0 < m; i0 += group) {
          const int64_t g = std::min(group, m - i0);
          std::vector<float> y2(static_cast<size_t>(g * n));
          matmul(w.view, x.data() + i0 * k, g, y2.data(), pool);
          ASSERT_TRUE(same_bits(y2.data(), full.data() + i0 * n, g * n)) << what << " group " << group;
        }
      }
    }
    // Row i placed among unrelated rows, at a different position, with wider strides.
    const std::vector<float> other = random_vector(7 * (k + 9), 77);
    for (int64_t i : {0, 17, 36}) {
      std::vector<float> xb = other;
      std::copy(x.begin() + i * k, x.begin() + (i + 1) * k, xb.begin() + 4 * (k + 9));
      std::vector<float> yb(static_cast<size_t>(7 * (n + 2)));
      matmul(w.view, xb.data(), k + 9, 7, yb.data(), n + 2, &pool2);
      ASSERT_TRUE(same_bits(yb.data() + 4 * (n + 2), full.data() + i * n, n)) << what << " among others";
    }
    // A sub-range of weight rows starting at an odd row: different tiles and thread chunks.
    TensorView sub = w.view;
    const int64_t j0 = 3, nj = 101;
    sub.data = w.bytes.data() + j0 * w.view.row_size();
    sub.ne[1] = nj;
    std::vector<float> ys(static_cast<size_t>(m * nj));
    matmul(sub, x.data(), m, ys.data(), &pool3);
    for (int64_t i = 0; i < m; ++i)
      ASSERT_TRUE(same_bits(ys.data() + i * nj, full.data() + i * n + j0, nj)) << what << " column sub-range";
  }
}

TEST(MatmulTest, DeterministicFloat) {
  for (DType type : {DType::F32, DType::F16, DType::BF16})
    for (int64_t k : {529, 512}) check_deterministic(type, k);
}

TEST(MatmulTest, DeterministicQuant) {
  for (DType type : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1})
    for (int64_t k : {544, 512}) check_deterministic(type, k);  // odd and even block counts
  for (DType type : {DType::Q4_K, DType::Q5_K, DType::Q6_K})
    for (int64_t k : {768, 512}) check_deterministic(type, k);  // odd and even super-block counts
}

// matmul_fused gives, bit for bit, what separate matmul calls give: mixed quantised and float weights
// (each quantised layout once), every level, 1 to 3 threads, the 1- and 2-row streaming paths.
TEST(MatmulTest, FusedMatchesSeparateCalls) {
  const int64_t k = 544;
  const Weights a = make_weights(DType::Q8_0, 67, k, 11), b = make_weights(DType::Q4_0, 32, k, 12),
                c = make_weights(DType::F16, 19, k, 13), d = make_weights(DType::Q8_0, 45, k, 14);
  const TensorView* ws[] = {&a.view, &b.view, &c.view, &d.view};
  ThreadPool pool1(1), pool2(2), pool3(3);
  for (SimdLevel level : available_levels()) {
    LevelGuard guard(level);
    for (int64_t m : {1, 2, 3, 9}) {
      const std::vector<float> x = random_vector(m * (k + 3), 15);
      for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool1, &pool2, &pool3}) {
        std::vector<std::vector<float>> want(4), got(4);
        std::vector<MatmulTarget> targets;
        for (int t = 0; t < 4; ++t) {
          const int64_t n = ws[t]->rows();
          want[size_t(t)].assign(size_t(m * (n + 1)), 0.f);
          got[size_t(t)].assign(size_t(m * (n + 1)), 0.f);
          matmul(*ws[t], x.data(), k + 3, m, want[size_t(t)].data(), n + 1, pool);
          targets.push_back({ws[t], got[size_t(t)].data(), n + 1});
        }
        matmul_fused(targets.data(), 4, x.data(), k + 3, m, pool);
        for (int t = 0; t < 4; ++t)
          ASSERT_TRUE(same_bits(got[size_t(t)].data(), want[size_t(t)].data(), int64_t(want[size_t(t)].size())))
              << simd_level_name(level) << " m=" << m << " target " << t
              << " threads=" << (pool ? pool->size() : 0);
      }
    }
  }
  const Weights other = make_weights(DType::Q8_0, 8, 64, 16);
  const std::vector<float> x = random_vector(k, 17);
  std::vector<float> y(128);
  const MatmulTarget mismatched[] = {{&a.view, y.data(), 67}, {&other.view, y.data(), 8}};
  EXPECT_THROW(matmul_fused(mismatched, 2, x.data(), k, 1, nullptr), Error);
}

// ---- the interleaved layout (Q4_0_R16, Q8_0_R16) ----------------------------------------------------

// A copy of w rearranged by interleave_for_matmul.
Weights interleaved_copy(const Weights& w) {
  Weights r = w;
  r.view.data = r.bytes.data();
  interleave_for_matmul(r.view, r.bytes.data(), nullptr);
  return r;
}

// An activation row holding NaN or an infinity gives outputs that are not finite at every level, as in
// f32 arithmetic (issue 35): the int8 activation quantization took max|x| with a max that skips NaN and
// turned the NaN into a finite value, so a broken model's logits looked fine. Other rows are unaffected.
TEST(MatmulTest, NonFiniteActivationsGiveNonFiniteOutputsAtEveryLevel) {
  const int64_t n = 16, k = 512, m = 3;  // whole 256-blocks for the K-quants
  std::vector<float> x = random_vector(m * k, 41);
  x[size_t(k + 40)] = std::numeric_limits<float>::quiet_NaN();    // row 1, second 32-block
  x[size_t(2 * k + 300)] = std::numeric_limits<float>::infinity();  // row 2, in the second 256-block
  for (DType type : kAllTypes) {
    Weights w = make_weights(type, n, k, 42);
    std::vector<const Weights*> layouts{&w};
    Weights interleaved;
    if (type == DType::Q8_0 || type == DType::Q4_0) layouts.push_back(&(interleaved = interleaved_copy(w)));
    for (const Weights* layout : layouts)
      for (SimdLevel level : available_levels()) {
        LevelGuard guard(level);
        std::vector<float> y(size_t(m * n));
        matmul(layout->view, x.data(), m, y.data(), nullptr);
        const std::string what = std::string(dtype_name(layout->view.type)) + " " + simd_level_name(level);
        for (int64_t j = 0; j < n; ++j) {
          EXPECT_TRUE(std::isfinite(y[size_t(j)])) << what << " row 0, column " << j;
          EXPECT_TRUE(std::isnan(y[size_t(n + j)])) << what << " row 1, column " << j;
          EXPECT_FALSE(std::isfinite(y[size_t(2 * n + j)])) << what << " row 2, column " << j;
        }
      }
  }
}

// Rows read back through get_row are the file layout's; the bytes are a permutation of the same size.
TEST(MatmulTest, InterleavedLayoutKeepsEveryRow) {
  for (DType type : {DType::Q4_0, DType::Q8_0}) {
    const Weights w = make_weights(type, 48, 96, 3);
    const Weights r = interleaved_copy(w);
    EXPECT_EQ(r.view.type, type == DType::Q4_0 ? DType::Q4_0_R16 : DType::Q8_0_R16);
    EXPECT_EQ(interleaved_base(r.view.type), type);
    EXPECT_EQ(r.view.bytes(), w.view.bytes());
    EXPECT_NE(r.bytes, w.bytes);
    std::vector<float> a(96), b(96);
    for (int64_t j = 0; j < 48; ++j) {
      get_row(w.view, j, a.data());
      get_row(r.view, j, b.data());
      ASSERT_TRUE(same_bits(a.data(), b.data(), 96)) << dtype_name(type) << " row " << j;
    }
    // Not a file type: GGUF readers and writers refuse it, names do not parse to it.
    EXPECT_EQ(dtype_info(uint32_t(r.view.type)), nullptr);
    EXPECT_THROW(dtype_from_name(dtype_name(r.view.type)), Error);
  }
  // The gather form of the rearrangement writes the same bytes as the scalar one, short groups too.
  const std::vector<SimdLevel> levels = available_levels();
  if (std::find(levels.begin(), levels.end(), SimdLevel::Avx512) != levels.end()) {
    for (DType type : {DType::Q4_0, DType::Q8_0}) {
      const Weights w = make_weights(type, 16, 96, 6);
      for (int count : {16, 5, 1}) {
        std::vector<uint8_t> a(w.bytes.size()), b(w.bytes.size());
        matmul_detail::interleave_group(type, w.bytes.data(), w.view.row_size(), count, 3, a.data());
        matmul_detail::interleave_group_avx512(type, w.bytes.data(), w.view.row_size(), count, 3, b.data());
        EXPECT_EQ(a, b) << dtype_name(type) << " count " << count;
      }
    }
  }
  Weights odd = make_weights(DType::Q8_0, 40, 64, 4);  // 40 rows: not whole groups of 16
  EXPECT_THROW(interleave_for_matmul(odd.view, odd.bytes.data(), nullptr), Error);  // not in place
  EXPECT_TRUE(matmul_prefers_interleaved(odd.view) == (matmul_simd_level() == SimdLevel::Avx512));
  {  // into a padded buffer of 48 rows
    TensorView padded = odd.view;
    EXPECT_EQ(interleaved_bytes(padded), 48 * padded.row_size());
    std::vector<uint8_t> buffer(size_t(interleaved_bytes(padded)));
    interleave_for_matmul(padded, buffer.data(), nullptr);
    EXPECT_EQ(padded.data, buffer.data());
    std::vector<float> a(64), b(64);
    for (int64_t j = 0; j < 40; ++j) {
      get_row(odd.view, j, a.data());
      get_row(padded, j, b.data());
      ASSERT_TRUE(same_bits(a.data(), b.data(), 64)) << "padded row " << j;
    }
    TensorView stack = odd.view;  // 2 matrices of 20 rows: no padded form
    stack.ne = {64, 20, 2, 1};
    EXPECT_FALSE(matmul_prefers_interleaved(stack));
    EXPECT_THROW(interleave_for_matmul(stack, buffer.data(), nullptr), Error);
  }
  Weights f16 = make_weights(DType::F16, 32, 64, 5);
  EXPECT_THROW(interleave_for_matmul(f16.view, f16.bytes.data(), nullptr), Error);
  EXPECT_FALSE(matmul_prefers_interleaved(f16.view));
}

// Same bits from either layout at every level, for row counts that hit every tile (1, 2, the 4-row
// pairs of groups and their remainders), column sub-ranges of whole groups and fused calls; and on
// AVX-512 the Q4_0 / Q8_0 kernels reproduce the scalar reference bit for bit.
TEST(MatmulTest, InterleavedLayoutGivesTheFileLayoutsBits) {
  ThreadPool pool(2);
  for (DType type : {DType::Q4_0, DType::Q8_0}) {
    for (int64_t k : {32, 544}) {
      const int64_t n = 80;
      const Weights w = make_weights(type, n, k, uint64_t(k));
      const Weights r = interleaved_copy(w);
      // 75 rows into a padded buffer: its last group has 11 rows.
      TensorView odd = w.view;
      odd.ne[1] = 75;
      std::vector<uint8_t> odd_bytes(size_t(interleaved_bytes(odd)));
      interleave_for_matmul(odd, odd_bytes.data(), nullptr);
      for (int64_t m : {1, 2, 3, 4, 5, 8, 9, 13, 32, 37}) {
        const std::vector<float> x = random_vector(m * k, uint64_t(m));
        std::vector<float> ref(size_t(m * n));
        matmul_reference(w.view, x.data(), k, m, ref.data(), n);
        for (SimdLevel level : available_levels()) {
          LevelGuard guard(level);
          const std::string what = std::string(dtype_name(type)) + " " + simd_level_name(level) +
                                   " k=" + std::to_string(k) + " m=" + std::to_string(m);
          std::vector<float> yf(size_t(m * n)), yr(size_t(m * n));
          matmul(w.view, x.data(), m, yf.data(), &pool);
          matmul(r.view, x.data(), m, yr.data(), &pool);
          ASSERT_TRUE(same_bits(yf.data(), yr.data(), m * n)) << what;
          std::vector<float> yo(size_t(m * 75));
          matmul(odd, x.data(), m, yo.data(), &pool);
          for (int64_t i = 0; i < m; ++i)
            ASSERT_TRUE(same_bits(yo.data() + i * 75, yf.data() + i * n, 75)) << what << " 75 rows, padded";
          if (level == SimdLevel::Avx512) {
            ASSERT_TRUE(same_bits(yf.data(), ref.data(), m * n)) << what << " vs reference";
          }
          // Groups 1..3 of the interleaved matrix alone (a sub-view of whole groups).
          TensorView sub = r.view;
          sub.data = r.bytes.data() + 16 * r.view.row_size();
          sub.ne[1] = 48;
          std::vector<float> ys(size_t(m * 48));
          matmul(sub, x.data(), m, ys.data(), &pool);
          for (int64_t i = 0; i < m; ++i)
            ASSERT_TRUE(same_bits(ys.data() + i * 48, yf.data() + i * n + 16, 48)) << what << " sub-view";
          // Fused behind a 3-row matrix, so the interleaved one's columns start mid-group in the loop.
          const Weights small = make_weights(DType::Q8_0, 3, k, 9);
          std::vector<float> y3(size_t(m * 3)), yfused(size_t(m * n));
          const MatmulTarget targets[] = {{&small.view, y3.data(), 3}, {&r.view, yfused.data(), n}};
          matmul_fused(targets, 2, x.data(), k, m, &pool);
          ASSERT_TRUE(same_bits(yfused.data(), yf.data(), m * n)) << what << " fused";
        }
      }
    }
  }
}

// A Busy scope keeps results and completion intact (workers spin instead of sleeping) and nests.
TEST(ThreadPoolTest, BusyScopeRunsLoopsAndReleases) {
  ThreadPool pool(3);
  std::vector<int64_t> out(1000, 0);
  for (int round = 0; round < 3; ++round) {
    const ThreadPool::Busy busy(&pool);
    const ThreadPool::Busy nested(&pool);
    for (int rep = 0; rep < 200; ++rep)
      pool.parallel_for(1000, 16, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) out[size_t(i)] += i;
      });
  }
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(out[size_t(i)], 600 * i);
  const ThreadPool::Busy none(nullptr);  // a null pool is accepted
  pool.parallel_for(1000, 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[size_t(i)] = 0;
  });
  for (int64_t v : out) ASSERT_EQ(v, 0);
}

// Two threads sharing one pool (a server's engine and another caller) take turns: every loop of each
// runs whole (before, the second caller overwrote the first's job and both could spin forever).
TEST(ThreadPoolTest, TwoCallersTakeTurns) {
  ThreadPool pool(2);
  std::vector<int64_t> a(4096, 0), b(4096, 0);
  auto loops = [&pool](std::vector<int64_t>& out) {
    for (int rep = 0; rep < 300; ++rep)
      pool.parallel_for(int64_t(out.size()), 8, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) out[size_t(i)] += 1;
      });
  };
  std::thread other([&] { loops(b); });
  loops(a);
  other.join();
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i], 300);
    ASSERT_EQ(b[i], 300);
  }
}

TEST(MatmulTest, EmptyShapesAndOverride) {
  const Weights w = make_weights(DType::F32, 4, 32, 1);
  std::vector<float> x(32, 1.f), y(4, 5.f);
  matmul(w.view, x.data(), 0, y.data(), nullptr);
  EXPECT_EQ(y[0], 5.f);
  set_matmul_simd_level(SimdLevel::Avx512);
  EXPECT_LE(int(matmul_simd_level()), int(SimdLevel::Avx512));
  set_matmul_simd_level(SimdLevel::Scalar);
  EXPECT_EQ(matmul_simd_level(), SimdLevel::Scalar);
  reset_matmul_simd_level();
  EXPECT_EQ(matmul_simd_level(), simd_level());
}

}  // namespace
}  // namespace canvas
