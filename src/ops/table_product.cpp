// Products with an embedding table's rows as stored (table_product.h) and their scalar twins.
#include "ops/table_product.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/gemm.h"
#include "ops/matmul.h"
#include "ops/ops.h"

namespace canvas {
namespace {

void check_rows_args(const TensorView& table, int64_t v0, int64_t count, int64_t m) {
  const std::string name = "table_rows_product: table '" + table.name + "' (" + dtype_name(table.type) + " " +
                           table.shape_string() + ")";
  check(matmul_supports(table.type) && table.data != nullptr, name + ": unsupported or empty table");
  check(count >= 0 && m >= 0, name + ": negative row count");
  check(v0 >= 0 && v0 + count <= table.rows(),
        name + ": rows " + std::to_string(v0) + ".." + std::to_string(v0 + count) + " outside the table");
}

// Row v of the table as f32, without get_row's per-row argument checks (the range was checked once).
void table_row(const TensorView& table, int64_t v, std::vector<uint8_t>& bytes, float* dst) {
  if (!is_interleaved(table.type)) {
    dequantize_row(table.type, table.row(v), dst, table.cols());
    return;
  }
  bytes.resize(size_t(table.row_size()));
  get_row_bytes(table, v, bytes.data());
  dequantize_row(interleaved_base(table.type), bytes.data(), dst, table.cols());
}

// Per row of m logit rows of V each: its max and 1 / sum exp(z - max) (exp(z - max) stays in [0, 1]; the
// row's sum of them, exp(logsumexp - max), is divided out at the end).
void row_shifts(const float* logits, int64_t m, int64_t V, std::vector<float>& row_max, std::vector<float>& inv_sum,
                ThreadPool* pool) {
  row_max.assign(size_t(m), 0.f);
  inv_sum.assign(size_t(m), 0.f);
  parallel_for(pool, m, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const RowStats st = row_stats(logits + i * V, V);
      row_max[size_t(i)] = st.max;
      inv_sum[size_t(i)] = float(std::exp(double(st.max) - double(st.logsumexp)));
    }
  });
}

// Vocabulary rows per tile of soft_embedding: one K block of the gemm.
constexpr int64_t kSoftTile = 256;

}  // namespace

void table_rows_product(const TensorView& table, int64_t v0, int64_t count, const float* weights, int64_t ldw,
                        int64_t m, float* out, int64_t ldo, bool accumulate, ThreadPool* pool) {
  check_rows_args(table, v0, count, m);
  const int64_t H = table.cols();
  if (m == 0) return;
  thread_local std::vector<float> rows;  // the calling thread's; the workers fill it through `dequantised`
  if (int64_t(rows.size()) < count * H) rows.resize(size_t(count * H));
  float* dequantised = rows.data();
  parallel_for(pool, count, 16, [&](int64_t b, int64_t e) {
    thread_local std::vector<uint8_t> bytes;
    for (int64_t r = b; r < e; ++r) table_row(table, v0 + r, bytes, dequantised + r * H);
  });
  gemm(m, H, count, weights, ldw, 1, dequantised, H, out, ldo, accumulate, pool);
}

void soft_embedding(const TensorView& table, const float* logits, int64_t m, float* out, ThreadPool* pool) {
  check_rows_args(table, 0, table.rows(), m);
  const int64_t V = table.rows(), H = table.cols();
  if (m == 0) return;
  std::vector<float> row_max, inv_sum;
  row_shifts(logits, m, V, row_max, inv_sum, pool);
  // The calling thread's, kept across calls (a pass allocates nothing of the canvas' size); the workers
  // write into it through `p` (inside the loop body the name would be their own thread's buffer).
  thread_local std::vector<float> probs;
  if (probs.size() < size_t(m * std::min(kSoftTile, V))) probs.resize(size_t(m * std::min(kSoftTile, V)));
  float* p = probs.data();
  for (int64_t v0 = 0; v0 < V; v0 += kSoftTile) {
    const int64_t count = std::min(kSoftTile, V - v0);
    parallel_for(pool, m, 8, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        exp_shifted(logits + i * V + v0, count, row_max[size_t(i)], p + i * count);
    });
    table_rows_product(table, v0, count, p, count, m, out, H, v0 > 0, pool);
  }
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < H; ++j) out[i * H + j] *= inv_sum[size_t(i)];
}

namespace {

// Vocabulary columns per int8 tile: [m x 8192] probabilities (8 MiB at m = 256) per matmul call.
constexpr int64_t kInt8Tile = 8192;

// The 32 x H values x (row-major) as H Q8_0 blocks, one per column, with quantize_row's rounding (ggml's
// reference: d = amax / 127, q = round(x / d) half away from zero; a column with a non-finite value gets
// finite[j] = 0 and is set to d = NaN and zeros by the caller). Written along the rows, with no aliasing,
// so that the compiler vectorises every loop: q[r * H + j], amax[j]; inv is H floats of scratch.
void quantize_column_blocks(const float* __restrict x, int64_t H, float* __restrict amax, uint8_t* __restrict finite,
                            float* __restrict inv, int8_t* __restrict q) {
  for (int64_t j = 0; j < H; ++j) {
    amax[j] = 0.f;
    finite[j] = 1;
  }
  for (int64_t r = 0; r < 32; ++r)
    for (int64_t j = 0; j < H; ++j) {
      const float a = std::fabs(x[r * H + j]);
      amax[j] = amax[j] < a ? a : amax[j];
      finite[j] &= uint8_t(a <= std::numeric_limits<float>::max());
    }
  for (int64_t j = 0; j < H; ++j) {
    const float d = amax[j] / 127.f;
    inv[j] = finite[j] && d != 0.f ? 1.f / d : 0.f;
  }
  for (int64_t r = 0; r < 32; ++r)
    for (int64_t j = 0; j < H; ++j) {
      float y = x[r * H + j] * inv[j];  // |y| <= 127: the int conversion truncates exactly
      if (!(std::fabs(y) <= 127.5f)) y = 0.f;  // a non-finite column's values (NaN x 0): zeros, set by the caller
      const int32_t t = int32_t(y);
      const float rest = y - float(t);
      q[r * H + j] = int8_t(t + (rest >= 0.5f ? 1 : 0) - (rest <= -0.5f ? 1 : 0));
    }
}

}  // namespace

std::shared_ptr<const Int8TableColumns> make_int8_table_columns(const TensorView& table, ThreadPool* pool) {
  check_rows_args(table, 0, table.rows(), 0);
  auto columns = std::make_shared<Int8TableColumns>();
  const int64_t V = table.rows(), H = table.cols();
  const int64_t padded = (V + 31) / 32 * 32;
  const int64_t tile = std::min(kInt8Tile, padded);
  const int64_t tiles = (padded + tile - 1) / tile;
  columns->vocab = V;
  columns->hidden = H;
  columns->tile = tile;
  // Tile t starts at t * tile_bytes; the last is only as wide as the padded vocabulary.
  const int64_t tile_bytes = row_bytes(DType::Q8_0, tile) * H;
  columns->storage.reset(new uint8_t[size_t(row_bytes(DType::Q8_0, padded) * H)]);
  for (int64_t t = 0; t < tiles; ++t) {
    TensorView w;
    w.name = table.name + " (int8 columns " + std::to_string(t) + ")";
    w.type = DType::Q8_0;
    w.n_dims = 2;
    w.ne = {std::min(tile, padded - t * tile), H, 1, 1};
    w.data = columns->storage.get() + t * tile_bytes;
    columns->tiles.push_back(w);
  }
  // One group of 32 vocabulary rows at a time: dequantised once, then each hidden column's 32 values are
  // one Q8_0 block of that column's row in the group's tile.
  const int64_t block_bytes = row_bytes(DType::Q8_0, 32);
  parallel_for(pool, padded / 32, 4, [&](int64_t b, int64_t e) {
    thread_local std::vector<uint8_t> bytes;
    std::vector<float> group(size_t(32 * H)), amax(static_cast<size_t>(H)), inverse(static_cast<size_t>(H));
    std::vector<uint8_t> finite(static_cast<size_t>(H));
    std::vector<int8_t> q(size_t(32 * H));
    for (int64_t g = b; g < e; ++g) {
      const int64_t v0 = g * 32;
      const int64_t rows = std::min<int64_t>(32, V - v0);
      for (int64_t r = 0; r < 32; ++r) {
        if (r < rows) table_row(table, v0 + r, bytes, group.data() + r * H);
        else std::fill(group.begin() + r * H, group.begin() + (r + 1) * H, 0.f);
      }
      quantize_column_blocks(group.data(), H, amax.data(), finite.data(), inverse.data(), q.data());
      const int64_t t = v0 / tile, block = (v0 - t * tile) / 32;
      uint8_t* base = columns->storage.get() + t * tile_bytes + block * block_bytes;
      const int64_t stride = columns->tiles[size_t(t)].row_size();
      for (int64_t j = 0; j < H; ++j) {
        BlockQ8_0 blk;
        blk.d = f32_to_f16(finite[size_t(j)] ? amax[size_t(j)] / 127.f : std::numeric_limits<float>::quiet_NaN());
        for (int64_t r = 0; r < 32; ++r) blk.qs[r] = finite[size_t(j)] ? q[size_t(r * H + j)] : int8_t(0);
        std::memcpy(base + j * stride, &blk, sizeof blk);
      }
    }
  });
  for (TensorView& w : columns->tiles)
    if (H % 16 == 0 && matmul_prefers_interleaved(w)) interleave_for_matmul(w, const_cast<void*>(w.data), pool);
  return columns;
}

void soft_embedding_int8(const Int8TableColumns& columns, const float* logits, int64_t m, float* out,
                         ThreadPool* pool) {
  check(m >= 0 && !columns.tiles.empty(), "soft_embedding_int8: no columns or a negative row count");
  const int64_t V = columns.vocab, H = columns.hidden, tile = columns.tile;
  if (m == 0) return;
  std::vector<float> row_max, inv_sum;
  row_shifts(logits, m, V, row_max, inv_sum, pool);
  thread_local std::vector<float> probs, partial;  // the calling thread's, kept across calls
  if (probs.size() < size_t(m * tile)) probs.resize(size_t(m * tile));
  if (partial.size() < size_t(m * H)) partial.resize(size_t(m * H));
  float* p = probs.data();
  for (size_t t = 0; t < columns.tiles.size(); ++t) {
    const int64_t v0 = int64_t(t) * tile, width = columns.tiles[t].cols(), count = std::min(width, V - v0);
    parallel_for(pool, m, 8, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        exp_shifted(logits + i * V + v0, count, row_max[size_t(i)], p + i * tile);
        std::fill(p + i * tile + count, p + i * tile + width, 0.f);  // the padding past the vocabulary
      }
    });
    float* y = t == 0 ? out : partial.data();
    matmul(columns.tiles[t], p, tile, m, y, H, pool);
    if (t > 0)
      for (int64_t k = 0; k < m * H; ++k) out[k] += y[k];
  }
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < H; ++j) out[i * H + j] *= inv_sum[size_t(i)];
}

namespace reference {

void table_rows_product(const TensorView& table, int64_t v0, int64_t count, const float* weights, int64_t ldw,
                        int64_t m, float* out, int64_t ldo, bool accumulate) {
  check_rows_args(table, v0, count, m);
  const int64_t H = table.cols();
  std::vector<float> row(static_cast<size_t>(H));
  if (!accumulate)
    for (int64_t i = 0; i < m; ++i) std::fill(out + i * ldo, out + i * ldo + H, 0.f);
  for (int64_t r = 0; r < count; ++r) {
    get_row(table, v0 + r, row.data());
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < H; ++j)
        out[i * ldo + j] = std::fma(weights[i * ldw + r], row[size_t(j)], out[i * ldo + j]);
  }
}

void soft_embedding(const TensorView& table, const float* logits, int64_t m, float* out) {
  check_rows_args(table, 0, table.rows(), m);
  const int64_t V = table.rows(), H = table.cols();
  std::vector<float> row(static_cast<size_t>(H));
  std::vector<double> acc(static_cast<size_t>(H));
  for (int64_t i = 0; i < m; ++i) {
    const float* z = logits + i * V;
    double top = -INFINITY;
    for (int64_t v = 0; v < V; ++v) top = std::max(top, double(z[v]));
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(double(z[v]) - top);
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t v = 0; v < V; ++v) {
      const double p = std::exp(double(z[v]) - top) / sum;
      get_row(table, v, row.data());
      for (int64_t j = 0; j < H; ++j) acc[size_t(j)] += p * double(row[size_t(j)]);
    }
    for (int64_t j = 0; j < H; ++j) out[i * H + j] = float(acc[size_t(j)]);
  }
}

void soft_embedding_int8(const TensorView& table, const float* logits, int64_t m, float* out) {
  check_rows_args(table, 0, table.rows(), m);
  const int64_t V = table.rows(), H = table.cols(), padded = (V + 31) / 32 * 32, blocks = padded / 32;
  std::vector<float> rows(size_t(V * H));
  for (int64_t v = 0; v < V; ++v) get_row(table, v, rows.data() + v * H);
  // Column j's blocks: the f16 scale as a float and 32 int8 values each.
  std::vector<float> column_scale(size_t(H * blocks));
  std::vector<int8_t> column_q(size_t(H * padded));
  std::vector<float> column(static_cast<size_t>(padded));
  std::vector<BlockQ8_0> quantised(static_cast<size_t>(blocks));
  for (int64_t j = 0; j < H; ++j) {
    for (int64_t v = 0; v < padded; ++v) column[size_t(v)] = v < V ? rows[size_t(v * H + j)] : 0.f;
    quantize_row(DType::Q8_0, column.data(), quantised.data(), padded);
    for (int64_t b = 0; b < blocks; ++b) {
      column_scale[size_t(j * blocks + b)] = f16_to_f32(quantised[size_t(b)].d);
      std::copy(quantised[size_t(b)].qs, quantised[size_t(b)].qs + 32, &column_q[size_t(j * padded + b * 32)]);
    }
  }
  std::vector<float> p(static_cast<size_t>(padded));
  std::vector<int8_t> pq(static_cast<size_t>(padded));
  std::vector<float> p_scale(static_cast<size_t>(blocks));
  for (int64_t i = 0; i < m; ++i) {
    const float* z = logits + i * V;
    float top = -INFINITY;
    for (int64_t v = 0; v < V; ++v) top = std::max(top, z[v]);
    std::fill(p.begin(), p.end(), 0.f);
    reference::exp_shifted(z, V, top, p.data());
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += p[size_t(v)];
    for (int64_t b = 0; b < blocks; ++b) {
      float amax = 0;
      for (int64_t k = 0; k < 32; ++k) amax = std::max(amax, std::fabs(p[size_t(b * 32 + k)]));
      const float d = amax / 127.f;
      const float inverse = d != 0.f ? 1.f / d : 0.f;
      p_scale[size_t(b)] = d;
      for (int64_t k = 0; k < 32; ++k) pq[size_t(b * 32 + k)] = int8_t(std::roundf(p[size_t(b * 32 + k)] * inverse));
    }
    for (int64_t j = 0; j < H; ++j) {
      double acc = 0;
      for (int64_t b = 0; b < blocks; ++b) {
        int32_t dot = 0;
        for (int64_t k = 0; k < 32; ++k)
          dot += int32_t(pq[size_t(b * 32 + k)]) * int32_t(column_q[size_t(j * padded + b * 32 + k)]);
        acc += double(p_scale[size_t(b)]) * double(column_scale[size_t(j * blocks + b)]) * dot;
      }
      out[i * H + j] = float(acc / sum);
    }
  }
}

}  // namespace reference
}  // namespace canvas
