// Internal interface between the matmul dispatcher (matmul.cpp) and its per-instruction-set kernels.
#pragma once
#include <cstdint>

#include "core/cpu.h"
#include "core/dtype.h"

namespace canvas::matmul_detail {

// Float weights (F32, F16, BF16): the kernel computes y[i][j] for every i < m and j in [j0, j1).
struct FloatArgs {
  DType type;
  const uint8_t* w;     // row j starts at w + j * w_row_bytes
  int64_t w_row_bytes;
  int64_t k;
  const float* x;
  int64_t ldx;
  int64_t m;
  float* y;
  int64_t ldy;
};

// Quantised weights (Q8_0, Q4_0) against activations quantised by the same kernel set's quantize_act
// (each kernel set lays the quantised activations out the way its dot products want them).
struct QuantArgs {
  DType type;
  const uint8_t* w;
  int64_t w_row_bytes;
  int64_t k;  // multiple of 32
  const uint8_t* xq;
  int64_t xq_row_bytes;
  int64_t m;
  float* y;
  int64_t ldy;
};

struct KernelSet {
  SimdLevel level;
  void (*matmul_float)(const FloatArgs& a, int64_t j0, int64_t j1);
  // Bytes of one quantised activation row of k elements (k a multiple of 32), for weights of type wtype.
  int64_t (*act_row_bytes)(int64_t k);
  void (*quantize_act)(DType wtype, const float* x, int64_t k, uint8_t* dst);
  // Reads block b of a quantised activation row back as (q[32] in element order, scale): for tests.
  void (*act_block)(DType wtype, const uint8_t* row, int64_t k, int64_t b, int8_t* q, float* d);
  void (*matmul_quant)(const QuantArgs& a, int64_t j0, int64_t j1);
  int64_t grain;  // output columns per parallel chunk unit (keeps SIMD tiles whole)
};

const KernelSet& kernels_scalar();
const KernelSet& kernels_avx2();
const KernelSet& kernels_avx512();

// The activation quantisation every kernel set must reproduce bit for bit (ggml's Q8_0 rounding with
// the scale kept in f32): d = max|x| / 127, q = roundf(x * (1 / d)). Returns d.
float quantize_act_block(const float* x, int8_t* q);

}  // namespace canvas::matmul_detail
