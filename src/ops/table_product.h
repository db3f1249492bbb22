// Products with the rows of an embedding table as stored (any quantised type, interleaved too): weighted
// sums of its rows, and the soft embedding softmax(logits) @ E that DiffusionGemma's self-conditioning reads.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"

namespace canvas {

// out[i][j] = (accumulate ? out[i][j] : 0) + sum_{r < count} weights[i * ldw + r] * table[v0 + r][j]
// for i < m, j < table.cols(): the [m x count] weights times rows v0 .. v0 + count of the table. Each
// row is dequantised once per call into a [count x cols] f32 buffer (no transpose, nothing of the table's
// size), which the f32 gemm (ops/gemm.h) reads as its row-major right operand.
// Determinism: every out element is one chain of fmas over r = 0, 1, ..., count - 1 continuing from its
// value (as reference::gemm), so it is bitwise the same at every thread count and SIMD level, and calls
// over consecutive row ranges with accumulate give the bits of one call over their union.
// Bad arguments (rows outside the table, an unsupported type, negative sizes) throw Error.
void table_rows_product(const TensorView& table, int64_t v0, int64_t count, const float* weights, int64_t ldw,
                        int64_t m, float* out, int64_t ldo, bool accumulate, ThreadPool* pool);

// out[i] = softmax(logits[i]) @ table for m rows of table.rows() logits each (contiguous), out [m x cols]:
// per row the max and log-sum-exp first (two passes over the row), then per tile of vocabulary rows the
// tile's exp(z - max) (ops.h's exp_shifted) and table_rows_product over the tile, accumulating; last the
// rows are scaled by 1 / sum. Memory: an [m x tile] probability buffer and the tile's dequantised rows;
// never [m x vocab]. Bitwise the same at every thread count.
void soft_embedding(const TensorView& table, const float* logits, int64_t m, float* out, ThreadPool* pool);

// The table transposed into int8 for the soft embedding of a quantised table: E^T as Q8_0 matrices of
// [hidden rows x `tile` vocabulary columns], each 32 consecutive vocabulary entries of one hidden column a
// block with its own scale (rows interleaved for the VNNI kernels where matmul prefers that). Made once per
// model (make_int8_table_columns); about (34 / 32) bytes per table element.
struct Int8TableColumns {
  int64_t vocab = 0, hidden = 0, tile = 0;
  std::vector<TensorView> tiles;  // tile t holds vocabulary t * tile ..; the last ends at a multiple of 32
  std::unique_ptr<uint8_t[]> storage;
};
// Any table matmul reads (quantised, interleaved, f32...): each group of 32 rows dequantised once and its
// columns quantised to Q8_0 blocks (ggml's rounding). Bad arguments throw Error.
std::shared_ptr<const Int8TableColumns> make_int8_table_columns(const TensorView& table, ThreadPool* pool);

// soft_embedding by the int8 columns: per vocabulary tile the rows' exp(z - max) (zero past the vocabulary)
// go through matmul(), which quantises them per 32 entries to 8 bits as it does every activation, and the
// tiles' products are summed in tile order; last the rows are scaled by 1 / sum. The integer products make
// it about 4x the f32 product's arithmetic rate; its error against the exact soft embedding is that of
// 8-bit probabilities and weights (a fraction of a percent of the row's size). Bitwise the same at every
// thread count and for every m (each row is computed alone).
void soft_embedding_int8(const Int8TableColumns& columns, const float* logits, int64_t m, float* out,
                         ThreadPool* pool);

namespace reference {
// The obviously-correct twins: plain loops over get_row's rows with std::fma in the same order (the same
// bits as the fast table_rows_product), and the soft embedding by its definition in double.
void table_rows_product(const TensorView& table, int64_t v0, int64_t count, const float* weights, int64_t ldw,
                        int64_t m, float* out, int64_t ldo, bool accumulate);
void soft_embedding(const TensorView& table, const float* logits, int64_t m, float* out);
// soft_embedding_int8 by its definition, straight from the table: each column's 32-entry vocabulary blocks
// quantised as Q8_0, each row's exp(z - max) per 32 entries to 8 bits with an f32 scale (amax / 127, as
// matmul's activations), integer block dots summed in double, scaled by 1 / sum.
void soft_embedding_int8(const TensorView& table, const float* logits, int64_t m, float* out);
}  // namespace reference

}  // namespace canvas
