// Internal interface between the matmul dispatcher (matmul.cpp) and its per-instruction-set kernels.
#pragma once
#include <cstdint>
#include <cstring>

#include "core/cpu.h"
#include "core/dtype.h"
#include "core/quant_block.h"

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

// Quantised weights (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) against activations quantised by
// the same kernel set's quantize_act (each kernel set lays the quantised activations out the way its dot
// products want them). Every type uses the same activation quantisation, 8 bits per 32-element block
// (K-quant sub-blocks are 32 or 16 elements, so one activation block never straddles two weight scales).
struct QuantArgs {
  DType type;
  const uint8_t* w;
  int64_t w_row_bytes;
  int64_t k;  // multiple of the weight block size (32 or 256)
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

// Weight types whose values carry an additive per-block minimum (value = d * q + min): their dot needs
// the activation block sums, which the SIMD layouts keep in f32 in place of the integer bias.
inline bool has_block_min(DType t) {
  return t == DType::Q4_1 || t == DType::Q5_1 || t == DType::Q4_K || t == DType::Q5_K;
}
// The offset stored unsigned quants carry (value = d * (q - offset)): 8 for Q4_0, 16 for Q5_0, 32 for Q6_K.
inline int quant_offset(DType t) {
  return t == DType::Q4_0 ? 8 : t == DType::Q5_0 ? 16 : t == DType::Q6_K ? 32 : 0;
}
// Quantised weight types with 256-element super-blocks.
inline bool is_kquant(DType t) { return t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K; }

// The 6-bit scales and mins of a Q4_K / Q5_K block (unpack_kquant_scales in core/dtype.h) with 32-bit
// word operations: out[0] = sc[0..3], out[1] = sc[4..7], out[2] = m[0..3], out[3] = m[4..7], a byte each.
inline void unpack_kquant_scale_words(const uint8_t* scales, uint32_t* out) {
  uint32_t w[3];
  std::memcpy(w, scales, 12);
  out[0] = w[0] & 0x3f3f3f3fu;
  out[1] = (w[2] & 0x0f0f0f0fu) | ((w[0] >> 2) & 0x30303030u);  // top 2 bits of bytes 0-3 -> bits 4-5
  out[2] = w[1] & 0x3f3f3f3fu;
  out[3] = ((w[2] >> 4) & 0x0f0f0f0fu) | ((w[1] >> 2) & 0x30303030u);
}

// decode_block and DecodedBlock (core/quant_block.h): one 32-element block of a quantised weight row.
// Row (de)quantisation for Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K (matmul_kquants.cpp); n already validated.
void dequantize_row_extra(DType type, const uint8_t* src, float* dst, int64_t n);
void quantize_row_extra(DType type, const float* src, uint8_t* dst, int64_t n);

// ---- the row-interleaved layouts (Q4_0_R16, Q8_0_R16) ---------------------------------------------
//
// A group of 16 consecutive rows (row r of the matrix is lane r % 16 of group r / 16) is stored block by
// block: for each 32-element block b, 16 f16 scales (lane c = row c of the group), then the quants as
// 64-byte chunks whose lane c (bytes 4c .. 4c + 3) belongs to row c:
//   Q4_0_R16 (288 bytes a block): chunk i (0..3) lane c = bytes 4i .. 4i + 3 of row c's qs, unchanged, so
//     its low nibbles are elements 4i .. 4i + 3 and its high nibbles elements 16 + 4i .. 16 + 4i + 3;
//   Q8_0_R16 (544 bytes a block): chunk g (0..7) lane c = row c's qs[4g .. 4g + 3] + 128 (as unsigned bytes).
// A group takes exactly the bytes of its 16 rows, so a matrix can be rearranged in place.
inline int64_t interleaved_block_bytes(DType base) { return kInterleaveRows * (base == DType::Q4_0 ? 18 : 34); }
// Rows [0, count) of `rows` (file layout, row stride row_bytes, nb blocks each) as one interleaved group;
// lanes count .. 15 repeat row count - 1 (they are computed and never stored).
void interleave_group(DType base, const uint8_t* rows, int64_t row_bytes, int count, int64_t nb, uint8_t* out);
// The same as interleave_group with AVX-512 gathers (same bytes; only on CPUs with AVX-512).
void interleave_group_avx512(DType base, const uint8_t* rows, int64_t row_bytes, int count, int64_t nb, uint8_t* out);
// Lane `lane` of an interleaved group back in the file layout (nb blocks).
void deinterleave_row(DType base, const uint8_t* group, int64_t nb, int lane, uint8_t* out);
// This thread's scratch for the kernels (64-byte aligned, grown on demand, kept between calls).
uint8_t* kernel_scratch(int64_t bytes);

const KernelSet& kernels_scalar();
const KernelSet& kernels_avx2();
const KernelSet& kernels_avx512();

// The activation quantisation every kernel set must reproduce bit for bit (ggml's Q8_0 rounding with
// the scale kept in f32): d = max|x| / 127, q = roundf(x * (1 / d)). Returns d. A block holding NaN or
// an infinity gets q = 0 and d = NaN, so that the products it enters are NaN as in f32 arithmetic (a
// max that skips NaN would quantize it to a finite value and hide broken weights from the logits check).
float quantize_act_block(const float* x, int8_t* q);

}  // namespace canvas::matmul_detail
