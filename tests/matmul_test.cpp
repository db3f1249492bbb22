// matmul against its scalar twin on every SIMD level, bitwise determinism across batch shapes, tiles
// and thread counts, and the (de)quantisation rows against known values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
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

const DType kAllTypes[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0};

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
  const int64_t n = 32 * 40;
  const std::vector<float> x = random_vector(n, 7);
  for (DType type : kAllTypes) {
    std::vector<uint8_t> q(static_cast<size_t>(row_bytes(type, n)));
    std::vector<float> back(static_cast<size_t>(n));
    quantize_row(type, x.data(), q.data(), n);
    dequantize_row(type, q.data(), back.data(), n);
    for (int64_t b = 0; b < n; b += 32) {
      float amax = 0;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[size_t(b + i)]));
      float tol = 0;
      switch (type) {
        case DType::F32: tol = 0; break;
        case DType::F16: tol = amax * 0x1p-11f; break;
        case DType::BF16: tol = amax * 0x1p-8f; break;
        case DType::Q8_0: tol = amax / 127 * 0.51f + amax * 0x1p-11f; break;  // half a step + f16 scale
        default: tol = amax / 8 * 1.01f + amax * 0x1p-10f; break;            // a step (clamp at 15)
      }
      for (int i = 0; i < 32; ++i)
        ASSERT_LE(std::fabs(back[size_t(b + i)] - x[size_t(b + i)]), tol) << dtype_name(type) << " at " << b + i;
    }
  }
}

TEST(QuantizeTest, GetRowMatchesDequantizeAndChecksRange) {
  for (DType type : kAllTypes) {
    const Weights w = make_weights(type, 5, 64, 3);
    std::vector<float> row(64);
    get_row(w.view, 3, row.data());
    for (int i = 0; i < 64; ++i) ASSERT_EQ(row[size_t(i)], w.dequantized[size_t(3 * 64 + i)]) << dtype_name(type);
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
  w.type = DType::Q4_K;
  EXPECT_THROW(matmul(w, x.data(), 1, y.data(), nullptr), Error);
  EXPECT_FALSE(matmul_supports(DType::Q4_K));
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
      for (DType wt : {DType::Q8_0, DType::Q4_0}) {
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
  for (DType type : {DType::Q8_0, DType::Q4_0}) {
    const int64_t m = 5, n = 23, k = 320;
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
  for (DType type : {DType::Q8_0, DType::Q4_0})
    for (int64_t k : {544, 512}) check_deterministic(type, k);  // odd and even block counts
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
