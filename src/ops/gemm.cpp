// The gemm driver (blocking, threads, dispatch), its scalar tile and the reference.
#include "ops/gemm.h"

#include <algorithm>
#include <cmath>

#include "ops/ops.h"

namespace canvas {

namespace {

constexpr int kTileRows = 6, kTileCols = 32;
constexpr int64_t kBlockRows = 96;  // rows of C per task: 16 tiles share each B block in L1
constexpr int64_t kBlockK = 256;    // a B block is kBlockK x kTileCols floats = 32 KiB

// Without AVX-512 a tile is the reference loop on the tile (the same chains of fmas).
void gemm_tile_scalar(int rows, int cols, int64_t K, const float* a, int64_t a_row_stride, int64_t a_col_stride,
                      const float* b, int64_t ldb, float* c, int64_t ldc, bool load_c) {
  reference::gemm(rows, cols, K, a, a_row_stride, a_col_stride, b, ldb, c, ldc, load_c);
}

kernels::GemmTileFn tile_kernel() {
  return ops_simd_level() == SimdLevel::Avx512 ? kernels::avx512::gemm_tile : gemm_tile_scalar;
}

}  // namespace

void gemm(int64_t M, int64_t N, int64_t K, const float* a, int64_t a_row_stride, int64_t a_col_stride,
          const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate, ThreadPool* pool) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    if (!accumulate)
      for (int64_t i = 0; i < M; ++i) std::fill(c + i * ldc, c + i * ldc + N, 0.f);
    return;
  }
  const kernels::GemmTileFn tile = tile_kernel();
  const int64_t row_blocks = (M + kBlockRows - 1) / kBlockRows, strips = (N + kTileCols - 1) / kTileCols;
  const bool threaded = M * N * K >= (int64_t(1) << 18);
  // Task t: row block t / strips, column strip t % strips. Within a task the K loop is blocked, the
  // partial sums going through C, which keeps each element's chain of fmas in order.
  parallel_for_dynamic(threaded ? pool : nullptr, row_blocks * strips, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t i0 = (t / strips) * kBlockRows, i1 = std::min(M, i0 + kBlockRows);
      const int64_t j0 = (t % strips) * kTileCols;
      const int cols = int(std::min<int64_t>(kTileCols, N - j0));
      for (int64_t k0 = 0; k0 < K; k0 += kBlockK) {
        const int64_t kl = std::min(kBlockK, K - k0);
        for (int64_t i = i0; i < i1; i += kTileRows)
          tile(int(std::min<int64_t>(kTileRows, i1 - i)), cols, kl, a + i * a_row_stride + k0 * a_col_stride,
               a_row_stride, a_col_stride, b + k0 * ldb + j0, ldb, c + i * ldc + j0, ldc, accumulate || k0 > 0);
      }
    }
  });
}

namespace reference {
void gemm(int64_t M, int64_t N, int64_t K, const float* a, int64_t a_row_stride, int64_t a_col_stride,
          const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float acc = accumulate ? c[i * ldc + j] : 0.f;
      for (int64_t l = 0; l < K; ++l) acc = std::fma(a[i * a_row_stride + l * a_col_stride], b[l * ldb + j], acc);
      c[i * ldc + j] = acc;
    }
}
}  // namespace reference

}  // namespace canvas
