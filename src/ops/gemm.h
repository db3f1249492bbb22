// Dense f32 products for training: C = A B (or C += A B) with A read through strides, so A or A^T is
// used in place, and B row-major (columns contiguous). The inference matmul (ops/matmul.h) takes the
// contraction dimension contiguous in both operands; the backward products of a linear layer
// (dX = dY W, dW = dY^T X) have it as the row index of one of them, which this kernel reads directly
// instead of transposing first.
#pragma once
#include <cstdint>

#include "core/thread_pool.h"

namespace canvas {

// A(i, l) = a[i * a_row_stride + l * a_col_stride] for i < M, l < K; B(l, j) = b[l * ldb + j] for j < N;
// C(i, j) = c[i * ldc + j]. Every C element is one sequential chain of fused multiply-adds over l = 0,
// 1, ..., K-1 starting from C(i, j) (accumulate) or 0, so the result is bitwise that of
// reference::gemm at every thread count and instruction set.
void gemm(int64_t M, int64_t N, int64_t K, const float* a, int64_t a_row_stride, int64_t a_col_stride,
          const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate, ThreadPool* pool);

namespace reference {
void gemm(int64_t M, int64_t N, int64_t K, const float* a, int64_t a_row_stride, int64_t a_col_stride,
          const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate);
}  // namespace reference

namespace kernels {
// One tile: rows <= 6 rows of C, cols <= 32 columns, K steps, C loaded first when load_c.
using GemmTileFn = void (*)(int rows, int cols, int64_t K, const float* a, int64_t a_row_stride,
                            int64_t a_col_stride, const float* b, int64_t ldb, float* c, int64_t ldc, bool load_c);
// Packing for the driver (ops/gemm.cpp): a K block of `rows` rows of A into tile-major order (tile t's
// element (r, l) at t * 6 * kl + l * 6 + r), and kl rows of a strip of B (cols <= 32) into [kl][32].
using GemmPackAFn = void (*)(int64_t rows, int64_t kl, const float* a, int64_t a_row_stride, int64_t a_col_stride,
                             float* out);
using GemmPackBFn = void (*)(int64_t kl, int cols, const float* b, int64_t ldb, float* out);
namespace avx512 {
void gemm_pack_a(int64_t rows, int64_t kl, const float* a, int64_t a_row_stride, int64_t a_col_stride, float* out);
void gemm_pack_b(int64_t kl, int cols, const float* b, int64_t ldb, float* out);
void gemm_tile(int rows, int cols, int64_t K, const float* a, int64_t a_row_stride, int64_t a_col_stride,
               const float* b, int64_t ldb, float* c, int64_t ldc, bool load_c);
}  // namespace avx512
}  // namespace kernels

}  // namespace canvas
