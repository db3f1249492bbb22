// Products with an embedding table's rows as stored (table_product.h) and their scalar twins.
#include "ops/table_product.h"

#include <algorithm>
#include <cmath>
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
  // exp(z - max) stays in [0, 1]; the row's sum of them, exp(logsumexp - max), is divided out at the end.
  std::vector<float> row_max(static_cast<size_t>(m)), inv_sum(static_cast<size_t>(m));
  parallel_for(pool, m, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const RowStats st = row_stats(logits + i * V, V);
      row_max[size_t(i)] = st.max;
      inv_sum[size_t(i)] = float(std::exp(double(st.max) - double(st.logsumexp)));
    }
  });
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

}  // namespace reference
}  // namespace canvas
