// Matrix products of f32 activations with weights of any supported dtype, and (de)quantisation.
#pragma once
#include <cstdint>

#include "core/cpu.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace canvas {

// True when matmul() accepts weights of this type (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K,
// Q5_K, Q6_K).
bool matmul_supports(DType type);

// y[i][j] = sum_k x[i][k] * W[j][k] for i < m, j < n.
//   w: 2-D weights, w.cols() = k (contiguous), w.rows() = n, rows packed as in GGUF.
//   x: m rows of k floats, row stride ldx (>= k).   y: m rows of n floats, row stride ldy (>= n).
// Every y[i][j] is bitwise the same whatever m, whatever the other rows of x and whatever the thread
// count (work is split over output columns j / row tiles only; the order of accumulation over k is a
// fixed function of k). Quantised weights use activations quantised per 32-block to 8 bits (ggml's Q8_0
// rounding, scale kept in f32) and integer dot products; K-quants too (their sub-blocks are 32 or 16
// elements, so each activation block meets one or two weight scales; ggml's Q8_K 256-blocks are not used).
void matmul(const TensorView& w, const float* x, int64_t ldx, int64_t m, float* y, int64_t ldy,
            ThreadPool* pool);
inline void matmul(const TensorView& w, const float* x, int64_t m, float* y, ThreadPool* pool) {
  matmul(w, x, w.cols(), m, y, w.rows(), pool);
}

// One product of a fused call: y = x W^T for weights w, output row stride ldy (>= w.rows()).
struct MatmulTarget {
  const TensorView* w;
  float* y;
  int64_t ldy;
};

// Several products of the same activations (a layer's Q/K/V, or gate/up) in one parallel loop: the
// activations are quantised once per weight layout and the threads split the concatenated output
// columns, so a decode step waits for one loop instead of three. Every weight must have k = w.cols()
// columns; every output is bitwise what matmul() gives for it alone.
void matmul_fused(const MatmulTarget* targets, int count, const float* x, int64_t ldx, int64_t m, ThreadPool* pool);

// Weights rearranged for the AVX-512 VNNI kernels: Q4_0 / Q8_0 matrices in groups of 16 rows, so one
// vector holds 4 consecutive elements of 16 rows and the integer dots need no horizontal sums. The
// results are bit for bit those of the file layout (at every SIMD level: other levels read the groups
// back into the file layout); only the speed differs.
// True when w is Q4_0 / Q8_0 and matmul runs at the AVX-512 level, and w is one matrix or a stack whose
// matrices' row count (ne[1]) is a multiple of 16.
bool matmul_prefers_interleaved(const TensorView& w);
// Bytes of w's interleaved form: its rows rounded up to a multiple of 16.
int64_t interleaved_bytes(const TensorView& w);
// Rearranges w (Q4_0 / Q8_0) into `out` and points w at it with type Q4_0_R16 / Q8_0_R16. In place
// (out == w.data, writable) when the matrices' rows are a multiple of 16; otherwise (one matrix) `out`
// holds interleaved_bytes(w), the last group padded by repeating the last row.
void interleave_for_matmul(TensorView& w, void* out, ThreadPool* pool);

// The obviously-correct twin: plain scalar loops computing the same function (for quantised weights
// the same activation quantisation and block-wise integer dots), used by tests.
void matmul_reference(const TensorView& w, const float* x, int64_t ldx, int64_t m, float* y, int64_t ldy);

// Row conversion, any direction between f32 and F32/F16/BF16/Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/Q4_K/Q5_K/Q6_K.
// Dequantisation is bit-exact with ggml's; quantisation uses ggml's reference rounding except for the
// K-quants, which use a plain min/max quantiser (valid blocks, not byte-identical to llama-quantize).
void dequantize_row(DType type, const void* src, float* dst, int64_t n);
void quantize_row(DType type, const float* src, void* dst, int64_t n);

// One row of a weight/embedding table as f32 (embedding lookup for any dtype).
void get_row(const TensorView& w, int64_t row, float* dst);
// Row `row` of w as stored in a file (the bytes of row_bytes(file type, cols)): interleaved layouts are
// read back into their file type's blocks; interleaved_base(w.type) is the type of the bytes.
void get_row_bytes(const TensorView& w, int64_t row, uint8_t* dst);

// The SIMD level matmul() uses: simd_level() unless overridden. The override (for tests and benchmarks)
// is clamped to what the CPU supports; reset_matmul_simd_level() returns to simd_level().
SimdLevel matmul_simd_level();
void set_matmul_simd_level(SimdLevel level);
void reset_matmul_simd_level();

}  // namespace canvas
