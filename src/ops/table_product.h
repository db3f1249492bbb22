// Products with the rows of an embedding table as stored (any quantised type, interleaved too): weighted
// sums of its rows, and the soft embedding softmax(logits) @ E that DiffusionGemma's self-conditioning reads.
#pragma once
#include <cstdint>

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

namespace reference {
// The obviously-correct twins: plain loops over get_row's rows with std::fma in the same order (the same
// bits as the fast table_rows_product), and the soft embedding by its definition in double.
void table_rows_product(const TensorView& table, int64_t v0, int64_t count, const float* weights, int64_t ldw,
                        int64_t m, float* out, int64_t ldo, bool accumulate);
void soft_embedding(const TensorView& table, const float* logits, int64_t m, float* out);
}  // namespace reference

}  // namespace canvas
