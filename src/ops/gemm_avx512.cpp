// AVX-512 tile of ops/gemm.h: up to 6 rows x 32 columns of C in 12 registers; each step of K loads two
// vectors of B's row, broadcasts each row's element of A and issues 12 fused multiply-adds. The row
// loops are unrolled explicitly so the accumulators stay in registers.
#include <immintrin.h>

#include "ops/gemm.h"

namespace canvas::kernels::avx512 {

namespace {

// kPacked: A in the driver's tile-major packing (row stride 1, column stride 6), known at compile time.
template <int R, bool kPacked>
void tile(int cols, int64_t K, const float* a, int64_t a_row_stride, int64_t a_col_stride, const float* b,
          int64_t ldb, float* c, int64_t ldc, bool load_c) {
  if constexpr (kPacked) {
    a_row_stride = 1;
    a_col_stride = 6;
  }
  const __mmask16 m0 = cols >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << cols) - 1);
  const __mmask16 m1 = cols >= 32 ? __mmask16(0xFFFF) : cols > 16 ? __mmask16((1u << (cols - 16)) - 1) : __mmask16(0);
  __m512 acc0[R], acc1[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    acc0[r] = load_c ? _mm512_maskz_loadu_ps(m0, c + r * ldc) : _mm512_setzero_ps();
    acc1[r] = load_c ? _mm512_maskz_loadu_ps(m1, c + r * ldc + 16) : _mm512_setzero_ps();
  }
  for (int64_t l = 0; l < K; ++l) {
    const float* bl = b + l * ldb;
    const __m512 b0 = _mm512_maskz_loadu_ps(m0, bl), b1 = _mm512_maskz_loadu_ps(m1, bl + 16);
    const float* al = a + l * a_col_stride;
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(al[r * a_row_stride]);
      acc0[r] = _mm512_fmadd_ps(av, b0, acc0[r]);
      acc1[r] = _mm512_fmadd_ps(av, b1, acc1[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    _mm512_mask_storeu_ps(c + r * ldc, m0, acc0[r]);
    _mm512_mask_storeu_ps(c + r * ldc + 16, m1, acc1[r]);
  }
}

}  // namespace

void gemm_pack_a(int64_t rows, int64_t kl, const float* a, int64_t a_row_stride, int64_t a_col_stride, float* out) {
  if (a_row_stride != 1) {  // rows strided: element by element (the driver packs only transposed A)
    for (int64_t l = 0; l < kl; ++l)
      for (int64_t r = 0; r < rows; ++r) out[(r / 6) * 6 * kl + l * 6 + r % 6] = a[r * a_row_stride + l * a_col_stride];
    return;
  }
  // Each K step is one contiguous run of rows: six at a time with a masked load and store.
  for (int64_t l = 0; l < kl; ++l) {
    const float* src = a + l * a_col_stride;
    for (int64_t r0 = 0; r0 < rows; r0 += 6) {
      const int n = int(rows - r0 < 6 ? rows - r0 : 6);
      const __mmask16 m = __mmask16((1u << n) - 1);
      _mm512_mask_storeu_ps(out + r0 * kl + l * 6, m, _mm512_maskz_loadu_ps(m, src + r0));
    }
  }
}

void gemm_pack_b(int64_t kl, int cols, const float* b, int64_t ldb, float* out) {
  const __mmask16 m0 = cols >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << cols) - 1);
  const __mmask16 m1 = cols >= 32 ? __mmask16(0xFFFF) : cols > 16 ? __mmask16((1u << (cols - 16)) - 1) : __mmask16(0);
  for (int64_t l = 0; l < kl; ++l) {
    const float* src = b + l * ldb;
    _mm512_storeu_ps(out + l * 32, _mm512_maskz_loadu_ps(m0, src));
    _mm512_storeu_ps(out + l * 32 + 16, _mm512_maskz_loadu_ps(m1, src + 16));
  }
}

void gemm_tile(int rows, int cols, int64_t K, const float* a, int64_t a_row_stride, int64_t a_col_stride,
               const float* b, int64_t ldb, float* c, int64_t ldc, bool load_c) {
  if (rows == 6 && a_row_stride == 1 && a_col_stride == 6)
    return tile<6, true>(cols, K, a, a_row_stride, a_col_stride, b, ldb, c, ldc, load_c);
  switch (rows) {
    case 6: return tile<6, false>(cols, K, a, a_row_stride, a_col_stride, b, ldb, c, ldc, load_c);
    case 5: return tile<5, false>(cols, K, a, a_row_stride, a_col_stride, b, ldb, c, ldc, load_c);
    case 4: return tile<4, false>(cols, K, a, a_row_stride, a_col_stride, b, ldb, c, ldc, load_c);
    case 3: return tile<3, false>(cols, K, a, a_row_stride, a_col_stride, b, ldb, c, ldc, load_c);
    case 2: return tile<2, false>(cols, K, a, a_row_stride, a_col_stride, b, ldb, c, ldc, load_c);
    default: return tile<1, false>(cols, K, a, a_row_stride, a_col_stride, b, ldb, c, ldc, load_c);
  }
}

}  // namespace canvas::kernels::avx512
