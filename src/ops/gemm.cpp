// The gemm driver (blocking, threads, dispatch), its scalar tile and the reference.
#include "ops/gemm.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/ops.h"

namespace canvas {

namespace {

constexpr int kTileRows = 6, kTileCols = 32;
constexpr int64_t kBlockRows = 192;  // rows of C per task: 32 tiles share each packed B block in L1
constexpr int64_t kBlockK = 256;    // a B block is kBlockK x kTileCols floats = 32 KiB

// Without AVX-512 a tile is the reference loop on the tile (the same chains of fmas).
void gemm_tile_scalar(int rows, int cols, int64_t K, const float* a, int64_t a_row_stride, int64_t a_col_stride,
                      const float* b, int64_t ldb, float* c, int64_t ldc, bool load_c) {
  reference::gemm(rows, cols, K, a, a_row_stride, a_col_stride, b, ldb, c, ldc, load_c);
}

// Rows [0, rows) x K steps [0, kl) of A into tile-major order: tile t's (r, l) at t * 6 * kl + l * 6 + r.
// K steps outermost: with A read transposed (row stride 1) each step is one contiguous run of rows.
void pack_a_scalar(int64_t rows, int64_t kl, const float* a, int64_t a_row_stride, int64_t a_col_stride, float* out) {
  for (int64_t l = 0; l < kl; ++l) {
    const float* src = a + l * a_col_stride;
    for (int64_t t = 0; t * kTileRows < rows; ++t) {
      const int64_t r0 = t * kTileRows, n = std::min<int64_t>(kTileRows, rows - r0);
      float* dst = out + r0 * kl + l * kTileRows;
      for (int64_t r = 0; r < n; ++r) dst[r] = src[(r0 + r) * a_row_stride];
    }
  }
}

// kl rows of a strip of B (cols <= 32 columns) into a contiguous [kl][32] block.
void pack_b_scalar(int64_t kl, int cols, const float* b, int64_t ldb, float* out) {
  for (int64_t l = 0; l < kl; ++l)
    for (int j = 0; j < cols; ++j) out[l * kTileCols + j] = b[l * ldb + j];
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
  const bool avx512 = ops_simd_level() == SimdLevel::Avx512;
  const kernels::GemmPackAFn pack_a_block = avx512 ? kernels::avx512::gemm_pack_a : pack_a_scalar;
  const kernels::GemmPackBFn pack_b_strip = avx512 ? kernels::avx512::gemm_pack_b : pack_b_scalar;
  const bool threaded = pool != nullptr && pool->size() > 1 && M * N * K >= (int64_t(1) << 18);
  const int64_t threads = threaded ? pool->size() : 1;
  // Row blocks of at most kBlockRows rows (a multiple of 6), as many as a multiple of the thread count so
  // that equal tasks share out evenly. A read transposed (column stride > 1) is packed per K block; a row
  // of A contiguous is read in place (six sequential streams). Packing is paid once per row block, so
  // the columns are split into chunks only when there are fewer row blocks than threads.
  int64_t row_blocks = (M + kBlockRows - 1) / kBlockRows;
  row_blocks = std::min((row_blocks + threads - 1) / threads * threads, (M + kTileRows - 1) / kTileRows);
  const int64_t block_rows = ((M + row_blocks - 1) / row_blocks + kTileRows - 1) / kTileRows * kTileRows;
  row_blocks = (M + block_rows - 1) / block_rows;
  const bool pack_a = a_col_stride != 1;
  const int64_t strips = (N + kTileCols - 1) / kTileCols;
  const int64_t chunk_strips = row_blocks >= threads ? strips : std::max<int64_t>(1, strips / threads);
  const int64_t chunks = (strips + chunk_strips - 1) / chunk_strips;
  // Task t: row block t / chunks, column chunk t % chunks. Within a task the K loop is blocked, the
  // partial sums going through C, which keeps each element's chain of fmas in order. Each K block of a
  // 32-column strip of B is copied to a contiguous buffer first: with a row stride of 1 or 4 KiB, every
  // row of a strided block falls into the same few L1 sets and the block did not stay in L1.
  parallel_for_dynamic(threaded ? pool : nullptr, row_blocks * chunks, 1, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> packed_a, packed_b;
    packed_a.resize(size_t(block_rows * kBlockK));
    packed_b.resize(size_t(kBlockK * kTileCols));
    for (int64_t t = begin; t < end; ++t) {
      const int64_t i0 = (t / chunks) * block_rows, i1 = std::min(M, i0 + block_rows);
      const int64_t c0 = (t % chunks) * chunk_strips * kTileCols, c1 = std::min(N, c0 + chunk_strips * kTileCols);
      for (int64_t k0 = 0; k0 < K; k0 += kBlockK) {
        const int64_t kl = std::min(kBlockK, K - k0);
        if (pack_a)  // tile-major: tile (i - i0) / 6 at (i - i0) * kl, element (r, l) at l * 6 + r
          pack_a_block(i1 - i0, kl, a + i0 * a_row_stride + k0 * a_col_stride, a_row_stride, a_col_stride,
                       packed_a.data());
        for (int64_t j0 = c0; j0 < c1; j0 += kTileCols) {
          const int cols = int(std::min<int64_t>(kTileCols, c1 - j0));
          float* pb = packed_b.data();
          pack_b_strip(kl, cols, b + k0 * ldb + j0, ldb, pb);
          for (int64_t i = i0; i < i1; i += kTileRows) {
            const int rows = int(std::min<int64_t>(kTileRows, i1 - i));
            if (pack_a) {
              tile(rows, cols, kl, packed_a.data() + (i - i0) * kl, 1, kTileRows, pb, kTileCols, c + i * ldc + j0,
                   ldc, accumulate || k0 > 0);
            } else {
              tile(rows, cols, kl, a + i * a_row_stride + k0, a_row_stride, 1, pb, kTileCols, c + i * ldc + j0, ldc,
                   accumulate || k0 > 0);
            }
          }
        }
      }
    }
  }, uint64_t(std::bit_width(uint64_t(M) * uint64_t(N) * uint64_t(K))));
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
