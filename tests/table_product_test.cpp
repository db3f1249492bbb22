// Tests of products with an embedding table's rows as stored (ops/table_product.h): the fast kernels
// against their scalar twins on every weight type (interleaved layouts too) and odd sizes, bitwise
// independence of the thread count and of how the rows are split, and exp_shifted at every SIMD level.
#include "ops/table_product.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/matmul.h"
#include "ops/ops.h"
#include "table_test_util.h"

namespace canvas {
namespace {

using Table = test::QuantizedTable;

// vocab random rows (normal, std 0.5) of `hidden` values stored as `type`; interleaved (Q4_0_R16 /
// Q8_0_R16, as a loaded model holds its embedding) when `interleave` and matmul would prefer it.
Table make_table(DType type, int64_t vocab, int64_t hidden, uint64_t seed, bool interleave = false) {
  Table t = test::random_table(type, vocab, hidden, seed, 0.5, "token_embd");
  if (interleave && matmul_prefers_interleaved(t.view)) {  // into a new buffer: the last group is padded
    std::vector<uint8_t> rearranged(size_t(interleaved_bytes(t.view)));
    interleave_for_matmul(t.view, rearranged.data(), nullptr);
    t.bytes.swap(rearranged);  // (the view points at the buffer, which the swap keeps)
  }
  return t;
}

std::vector<float> random_values(int64_t n, uint64_t seed, double scale) {
  return test::random_normals(n, seed, scale);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Every type the kernels read, with a row width each accepts (K-quants: whole 256-blocks).
struct TypeCase {
  DType type;
  int64_t hidden;
  bool interleave;
};
const TypeCase kTypes[] = {
    {DType::F32, 72, false},  {DType::F16, 72, false},   {DType::BF16, 72, false},
    {DType::Q8_0, 96, false}, {DType::Q4_0, 96, false},  {DType::Q8_0, 96, true},
    {DType::Q4_0, 96, true},  {DType::Q4_K, 512, false}, {DType::Q6_K, 256, false},
};

std::string describe(const TypeCase& c, const TensorView& view) {
  return std::string(dtype_name(view.type)) + " (stored as " + dtype_name(c.type) + ") hidden " +
         std::to_string(c.hidden);
}

// Odd sizes (rows not a multiple of a tile, of 6 or of 16, strides wider than the data), accumulating or
// not: the fast product equals its twin bit for bit, with and without threads.
TEST(TableRowsProduct, MatchesTwinBitwiseOnEveryType) {
  const int64_t V = 1003, v0 = 37, count = 301, m = 7, ldw = count + 5;
  ThreadPool three(3);
  for (const TypeCase& c : kTypes) {
    const Table table = make_table(c.type, V, c.hidden, 11, c.interleave);
    const int64_t H = c.hidden, ldo = H + 3;
    const std::vector<float> weights = random_values(m * ldw, 12, 0.1);
    const std::vector<float> start = random_values(m * ldo, 13, 1.0);
    for (bool accumulate : {false, true}) {
      std::vector<float> want = start;
      reference::table_rows_product(table.view, v0, count, weights.data(), ldw, m, want.data(), ldo,
                                    accumulate);
      for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &three}) {
        std::vector<float> got = start;
        table_rows_product(table.view, v0, count, weights.data(), ldw, m, got.data(), ldo, accumulate, pool);
        EXPECT_TRUE(same_bits(got, want)) << describe(c, table.view) << (accumulate ? " accumulating" : "")
                                          << (pool ? " 3 threads" : " no pool");
      }
    }
  }
}

// The twin is what it says: the f32 rows times the weights, summed (here in double, loosely compared).
TEST(TableRowsProduct, TwinIsTheProductOfTheRows) {
  const int64_t V = 50, H = 64, m = 3;
  const Table table = make_table(DType::Q8_0, V, H, 3);
  const std::vector<float> weights = random_values(m * V, 4, 1.0);
  std::vector<float> got(size_t(m * H));
  reference::table_rows_product(table.view, 0, V, weights.data(), V, m, got.data(), H, false);
  std::vector<float> row(static_cast<size_t>(H));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < H; ++j) {
      double want = 0;
      for (int64_t v = 0; v < V; ++v) {
        get_row(table.view, v, row.data());
        want += double(weights[size_t(i * V + v)]) * row[size_t(j)];
      }
      EXPECT_NEAR(got[size_t(i * H + j)], want, 1e-5 * (1 + std::fabs(want)));
    }
}

// Calls over consecutive row ranges with accumulate give the bits of one call over their union, so a
// caller may tile the vocabulary any way it likes.
TEST(TableRowsProduct, SplitRangesGiveTheSameBits) {
  const int64_t V = 777, H = 96, m = 13;
  const Table table = make_table(DType::Q4_0, V, H, 5, true);
  const std::vector<float> weights = random_values(m * V, 6, 0.1);
  ThreadPool two(2);
  std::vector<float> whole(size_t(m * H)), split(size_t(m * H));
  table_rows_product(table.view, 0, V, weights.data(), V, m, whole.data(), H, false, &two);
  const int64_t cuts[] = {0, 1, 255, 256, 500, V};
  for (size_t k = 0; k + 1 < std::size(cuts); ++k)
    table_rows_product(table.view, cuts[k], cuts[k + 1] - cuts[k], weights.data() + cuts[k], V, m,
                       split.data(), H, k > 0, nullptr);
  EXPECT_TRUE(same_bits(whole, split));
}

// softmax(logits) @ E against its double-precision twin, on every type, with a vocabulary that is not a
// multiple of the tile, large and -inf logits; within 1e-5 of the table's scale.
TEST(SelfCondSoftEmbedding, MatchesDoubleTwinOnEveryType) {
  const int64_t V = 3001, m = 5;
  ThreadPool two(2);
  for (const TypeCase& c : kTypes) {
    const Table table = make_table(c.type, V, c.hidden, 21, c.interleave);
    const int64_t H = c.hidden;
    std::vector<float> logits = random_values(m * V, 22, 3.0);
    logits[5] = 40.f;                                                    // row 0: one dominant entry
    logits[size_t(V + 7)] = -std::numeric_limits<float>::infinity();     // row 1: a zero probability
    for (int64_t v = 0; v < V; ++v) logits[size_t(2 * V + v)] *= 0.01f;  // row 2: nearly uniform
    std::vector<float> want(size_t(m * H)), got(size_t(m * H));
    reference::soft_embedding(table.view, logits.data(), m, want.data());
    soft_embedding(table.view, logits.data(), m, got.data(), &two);
    double worst = 0;
    for (size_t k = 0; k < got.size(); ++k)
      worst = std::max(worst, std::fabs(double(got[k]) - double(want[k])));
    EXPECT_LT(worst, 1e-5) << describe(c, table.view);
  }
}

TEST(SelfCondSoftEmbedding, ThreadCountDoesNotChangeBits) {
  const int64_t V = 2100, H = 96, m = 9;
  const Table table = make_table(DType::Q4_0, V, H, 31, true);
  const std::vector<float> logits = random_values(m * V, 32, 4.0);
  ThreadPool one(1), two(2), three(3);
  std::vector<float> base(size_t(m * H));
  soft_embedding(table.view, logits.data(), m, base.data(), nullptr);
  for (ThreadPool* pool : {&one, &two, &three}) {
    std::vector<float> got(size_t(m * H));
    soft_embedding(table.view, logits.data(), m, got.data(), pool);
    EXPECT_TRUE(same_bits(got, base)) << pool->size() << " threads";
  }
  // A row's result does not depend on the other rows either.
  std::vector<float> alone(static_cast<size_t>(H));
  soft_embedding(table.view, logits.data() + 4 * V, 1, alone.data(), &two);
  EXPECT_EQ(0, std::memcmp(alone.data(), base.data() + 4 * H, size_t(H) * sizeof(float)));
}

// The int8 soft embedding (a quantised table of a large vocabulary) against its twin, which quantises the
// table's columns and the probabilities by their definition: the same integers and scales, so the two
// agree to float rounding, on vocabularies that fill a tile, pass one and end mid-block.
TEST(SelfCondSoftEmbeddingInt8, MatchesItsTwin) {
  ThreadPool two(2);
  for (const TypeCase& c : kTypes) {
    for (int64_t V : {int64_t(3001), int64_t(8192 + 77)}) {
      if (V > 4000 && c.type != DType::Q4_0) continue;  // the tile edge once is enough
      const Table table = make_table(c.type, V, c.hidden, 21, c.interleave);
      const int64_t H = c.hidden, m = 4;
      std::vector<float> logits = random_values(m * V, 22, 3.0);
      logits[5] = 40.f;                                                    // row 0: one dominant entry
      logits[size_t(V + 7)] = -std::numeric_limits<float>::infinity();     // row 1: a zero probability
      for (int64_t v = 0; v < V; ++v) logits[size_t(2 * V + v)] *= 0.01f;  // row 2: nearly uniform
      const auto columns = make_int8_table_columns(table.view, &two);
      std::vector<float> want(size_t(m * H)), got(size_t(m * H));
      reference::soft_embedding_int8(table.view, logits.data(), m, want.data());
      soft_embedding_int8(*columns, logits.data(), m, got.data(), &two);
      double worst = 0;
      for (size_t k = 0; k < got.size(); ++k)
        worst = std::max(worst, std::fabs(double(got[k]) - double(want[k])));
      EXPECT_LT(worst, 1e-5) << describe(c, table.view) << " vocab " << V;
    }
  }
}

// The int8 columns are the table's columns quantised by quantize_row (Q8_0), byte for byte once read back
// from the interleaved layout: every tile, the last one's padding past the vocabulary and a column with a
// NaN included.
TEST(SelfCondSoftEmbeddingInt8, ColumnsAreTheTablesColumnsAsQ8_0) {
  const int64_t V = 8192 + 100, H = 64;
  Table table = make_table(DType::Q4_0, V, H, 61);
  table.bytes[0] = 0xff;  // row 0's first block gets the f16 scale 0x7fff, a NaN: its columns are non-finite
  table.bytes[1] = 0x7f;
  const auto columns = make_int8_table_columns(table.view, nullptr);
  std::vector<float> rows(size_t(V * H)), column(size_t(8192));
  for (int64_t v = 0; v < V; ++v) get_row(table.view, v, rows.data() + v * H);
  std::vector<uint8_t> want, got;
  for (size_t t = 0; t < columns->tiles.size(); ++t) {
    const TensorView& w = columns->tiles[t];
    const int64_t v0 = int64_t(t) * 8192;
    want.resize(size_t(w.row_size()));
    got.resize(size_t(w.row_size()));
    for (int64_t j = 0; j < H; ++j) {
      for (int64_t k = 0; k < w.cols(); ++k) column[size_t(k)] = v0 + k < V ? rows[size_t((v0 + k) * H + j)] : 0.f;
      quantize_row(DType::Q8_0, column.data(), want.data(), w.cols());
      get_row_bytes(w, j, got.data());
      ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size())) << "tile " << t << " column " << j;
    }
  }
}

// Its error against the exact soft embedding is that of 8-bit values: here (table entries of std 0.5) under
// 1% of the largest entry, and on average far less; a peaked row is dominated by one row of the table, a
// flat row by the table's mean.
TEST(SelfCondSoftEmbeddingInt8, StaysCloseToTheExactProduct) {
  const int64_t V = 5000, H = 96, m = 3;
  const Table table = make_table(DType::Q4_0, V, H, 41, true);
  std::vector<float> logits = random_values(m * V, 42, 3.0);
  logits[17] = 40.f;
  for (int64_t v = 0; v < V; ++v) logits[size_t(2 * V + v)] *= 0.01f;
  std::vector<float> exact(size_t(m * H)), got(size_t(m * H)), row(static_cast<size_t>(H));
  reference::soft_embedding(table.view, logits.data(), m, exact.data());
  soft_embedding_int8(*make_int8_table_columns(table.view, nullptr), logits.data(), m, got.data(), nullptr);
  double largest = 0, worst = 0, total = 0;
  for (int64_t v = 0; v < V; ++v) {
    get_row(table.view, v, row.data());
    for (float x : row) largest = std::max(largest, double(std::fabs(x)));
  }
  for (size_t k = 0; k < got.size(); ++k) {
    const double e = std::fabs(double(got[k]) - double(exact[k]));
    worst = std::max(worst, e);
    total += e;
  }
  EXPECT_LT(worst, 0.01 * largest);
  EXPECT_LT(total / double(got.size()), 0.001 * largest);
  EXPECT_GT(worst, 0.0);  // it is an approximation: identical bits would mean the exact path ran
}

TEST(SelfCondSoftEmbeddingInt8, ThreadCountAndOtherRowsDoNotChangeBits) {
  const int64_t V = 9000, H = 96, m = 9;
  const Table table = make_table(DType::Q8_0, V, H, 51, true);
  const std::vector<float> logits = random_values(m * V, 52, 4.0);
  ThreadPool one(1), two(2), three(3);
  const auto columns = make_int8_table_columns(table.view, &three);
  const auto built_alone = make_int8_table_columns(table.view, nullptr);
  for (size_t t = 0; t < columns->tiles.size(); ++t)
    ASSERT_EQ(0, std::memcmp(columns->tiles[t].data, built_alone->tiles[t].data, size_t(columns->tiles[t].bytes())));
  std::vector<float> base(size_t(m * H));
  soft_embedding_int8(*columns, logits.data(), m, base.data(), nullptr);
  for (ThreadPool* pool : {&one, &two, &three}) {
    std::vector<float> got(size_t(m * H));
    soft_embedding_int8(*columns, logits.data(), m, got.data(), pool);
    EXPECT_TRUE(same_bits(got, base)) << pool->size() << " threads";
  }
  std::vector<float> alone(static_cast<size_t>(H));
  soft_embedding_int8(*columns, logits.data() + 4 * V, 1, alone.data(), &two);
  EXPECT_EQ(0, std::memcmp(alone.data(), base.data() + 4 * H, size_t(H) * sizeof(float)));
}

TEST(TableRowsProduct, BadInputThrowsClearError) {
  const Table table = make_table(DType::Q4_0, 40, 64, 1);
  std::vector<float> weights(40 * 2), out(2 * 64);
  try {
    table_rows_product(table.view, 30, 20, weights.data(), 40, 2, out.data(), 64, false, nullptr);
    FAIL() << "no error for rows past the table";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token_embd"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("outside the table"), std::string::npos) << e.what();
  }
  EXPECT_THROW(table_rows_product(table.view, -1, 2, weights.data(), 40, 2, out.data(), 64, false, nullptr),
               Error);
  EXPECT_THROW(reference::table_rows_product(table.view, 0, 41, weights.data(), 40, 2, out.data(), 64, false),
               Error);
}

// exp(x - shift) at every SIMD level within a few ulp of the double reference (after rounding x - shift to
// float); -inf gives 0, NaN stays NaN.
TEST(ExpShifted, EverySimdLevelMatchesReference) {
  std::vector<float> x = random_values(1000 + 13, 41, 10.0);
  x[3] = -std::numeric_limits<float>::infinity();
  x[4] = std::numeric_limits<float>::quiet_NaN();
  x[5] = -200.f;
  const float shift = 12.5f;
  std::vector<float> want(x.size()), got(x.size());
  reference::exp_shifted(x.data(), int64_t(x.size()), shift, want.data());
  for (SimdLevel level : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512}) {
    if (int(level) > int(simd_level())) continue;
    set_ops_simd_level(level);
    exp_shifted(x.data(), int64_t(x.size()), shift, got.data());
    for (size_t k = 0; k < x.size(); ++k) {
      if (std::isnan(want[k])) {
        EXPECT_TRUE(std::isnan(got[k])) << simd_level_name(level) << " at " << k;
        continue;
      }
      if (want[k] == 0) {  // -inf and far below the shift
        EXPECT_EQ(got[k], 0.f) << simd_level_name(level) << " at " << k;
        continue;
      }
      // x - shift is rounded to float first: its error (half an ulp of |x - shift|) becomes relative error.
      const double tolerance = want[k] * (4e-7 + 1.2e-7 * std::fabs(double(x[k]) - shift)) + 1e-38;
      EXPECT_NEAR(got[k], want[k], tolerance) << simd_level_name(level) << " at " << k;
    }
    EXPECT_EQ(got[3], 0.f);
    EXPECT_EQ(got[5], 0.f);
  }
  reset_ops_simd_level();
}

}  // namespace
}  // namespace canvas
