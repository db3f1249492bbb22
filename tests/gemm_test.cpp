// ops/gemm: the blocked, threaded, SIMD product equals the plain triple loop bit for bit, with A read
// directly and transposed, with and without accumulation, across tile and K-block edges.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/rng.h"
#include "ops/gemm.h"
#include "ops/ops.h"

namespace canvas {
namespace {

std::vector<float> random_values(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = float(rng.uniform() * 2.0 - 1.0);
  return v;
}

struct Shape {
  int64_t M, N, K;
};

// Tails in every dimension: rows not a multiple of 6 or of the 96-row block, columns not a multiple of
// 16 or 32, K across the 256-step block.
const Shape kShapes[] = {{1, 1, 1}, {7, 17, 5}, {13, 37, 300}, {97, 64, 513}, {200, 130, 129}, {6, 32, 256}};

void check_all(bool transposed_a, bool accumulate) {
  for (const Shape& s : kShapes)
    for (int threads : {1, 2, 3}) {
      // A stored [M][K] (read with strides K, 1) or [K][M] (read as its transpose: strides 1, M).
      const std::vector<float> a = random_values(s.M * s.K, 1), b = random_values(s.K * s.N, 2);
      const std::vector<float> c0 = random_values(s.M * s.N, 3);
      const int64_t rs = transposed_a ? 1 : s.K, cs = transposed_a ? s.M : 1;
      std::vector<float> want = c0, got = c0;
      reference::gemm(s.M, s.N, s.K, a.data(), rs, cs, b.data(), s.N, want.data(), s.N, accumulate);
      ThreadPool pool(threads);
      gemm(s.M, s.N, s.K, a.data(), rs, cs, b.data(), s.N, got.data(), s.N, accumulate, &pool);
      ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
          << "M=" << s.M << " N=" << s.N << " K=" << s.K << " threads=" << threads << " transposed=" << transposed_a
          << " accumulate=" << accumulate << " level=" << simd_level_name(ops_simd_level());
    }
}

TEST(Gemm, EqualsTheReferenceBitForBit) {
  for (bool transposed : {false, true})
    for (bool accumulate : {false, true}) check_all(transposed, accumulate);
}

// Operands inside wider matrices, as attention reads one head of [rows, heads * head_dim] in place:
// A rows at a stride larger than K (or, transposed, columns at a stride larger than M), B rows at
// ldb > N and C rows at ldc > N, with many row blocks (the packed-B path) and few (column chunks).
TEST(Gemm, StridedOperandsEqualTheReferenceBitForBit) {
  for (const Shape s : {Shape{256, 64, 64}, Shape{256, 64, 256}, Shape{97, 100, 300}, Shape{700, 40, 17}})
    for (bool transposed : {false, true})
      for (int threads : {1, 2}) {
        const int64_t pad = 24, lda = (transposed ? s.M : s.K) + pad, ldb = s.N + 40, ldc = s.N + 8;
        const std::vector<float> a = random_values((transposed ? s.K : s.M) * lda, 4), b = random_values(s.K * ldb, 5);
        const std::vector<float> c0 = random_values(s.M * ldc, 6);
        const int64_t rs = transposed ? 1 : lda, cs = transposed ? lda : 1;
        std::vector<float> want = c0, got = c0;
        reference::gemm(s.M, s.N, s.K, a.data(), rs, cs, b.data(), ldb, want.data(), ldc, true);
        ThreadPool pool(threads);
        gemm(s.M, s.N, s.K, a.data(), rs, cs, b.data(), ldb, got.data(), ldc, true, &pool);
        ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
            << "M=" << s.M << " N=" << s.N << " K=" << s.K << " transposed=" << transposed << " threads=" << threads;
      }
}

TEST(Gemm, ScalarTileEqualsTheReferenceBitForBit) {
  set_ops_simd_level(SimdLevel::Scalar);
  for (bool transposed : {false, true}) check_all(transposed, true);
  reset_ops_simd_level();
}

TEST(Gemm, ReferenceIsTheProduct) {
  // A 2x3 times 3x2 by hand, and accumulation onto C.
  const float a[] = {1, 2, 3, 4, 5, 6}, b[] = {1, 0, 0, 1, 1, 1};
  float c[] = {10, 20, 30, 40};
  reference::gemm(2, 2, 3, a, 3, 1, b, 2, c, 2, false);
  EXPECT_EQ(c[0], 4.f);
  EXPECT_EQ(c[1], 5.f);
  EXPECT_EQ(c[2], 10.f);
  EXPECT_EQ(c[3], 11.f);
  reference::gemm(2, 2, 3, a, 3, 1, b, 2, c, 2, true);
  EXPECT_EQ(c[3], 22.f);
  // Transposed read: A^T of the [3][2] array {1, 4, 2, 5, 3, 6} is the same 2x3 matrix.
  const float at[] = {1, 4, 2, 5, 3, 6};
  float d[4];
  reference::gemm(2, 2, 3, at, 1, 2, b, 2, d, 2, false);
  EXPECT_EQ(d[0], 4.f);
  EXPECT_EQ(d[3], 11.f);
}

}  // namespace
}  // namespace canvas
