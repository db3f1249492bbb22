// Tests of the fused LM head (ops/lm_head.h): against its double-precision reference twin and against
// row_stats of materialised logits, bitwise independence of threads / rows / SIMD level, the Gumbel
// sampler's distribution, and bad input.
#include "ops/lm_head.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/matmul.h"
#include "table_test_util.h"

namespace canvas {
namespace {

using Head = test::QuantizedTable;

// Random rows (normal, std scale) quantised to `type`.
Head make_head(DType type, int64_t vocab, int64_t hidden, uint64_t seed, double scale) {
  return test::random_table(type, vocab, hidden, seed, scale, "head");
}

std::vector<float> random_rows(int64_t m, int64_t hidden, uint64_t seed) {
  return test::random_normals(m * hidden, seed);
}

// |got - want| <= 1e-5 |want| + 1e-7 (the absolute floor only matters for values near 0).
::testing::AssertionResult close(double got, double want, const char* what) {
  if (std::fabs(got - want) <= 1e-5 * std::fabs(want) + 1e-7) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << got << " vs reference " << want;
}

::testing::AssertionResult stats_close(const RowStats& got, const RowStats& want) {
  for (auto r : {close(got.max, want.max, "max"), close(got.logsumexp, want.logsumexp, "logsumexp"),
                 close(got.entropy, want.entropy, "entropy"), close(got.p_top1, want.p_top1, "p_top1"),
                 close(got.p_top2, want.p_top2, "p_top2")})
    if (!r) return r;
  return ::testing::AssertionSuccess();
}

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}
bool same_bits(const RowStats& a, const RowStats& b) {
  return a.argmax == b.argmax && same_bits(a.max, b.max) && same_bits(a.logsumexp, b.logsumexp) &&
         same_bits(a.p_top1, b.p_top1) && same_bits(a.p_top2, b.p_top2) && same_bits(a.entropy, b.entropy);
}
bool same_bits(const HeadRowStats* a, const HeadRowStats* b, int64_t m) {
  for (int64_t i = 0; i < m; ++i)
    if (!same_bits(a[i].plain, b[i].plain) || !same_bits(a[i].tempered, b[i].tempered) ||
        a[i].sample != b[i].sample || !same_bits(a[i].p_sample, b[i].p_sample))
      return false;
  return true;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The reference's logits of every row in double (for telling real disagreements from near-ties).
std::vector<double> reference_logits(const TensorView& w, const std::vector<float>& x, int64_t m,
                                     float softcap) {
  std::vector<float> raw(size_t(m * w.rows()));
  matmul_reference(w, x.data(), w.cols(), m, raw.data(), w.rows());
  std::vector<double> z(raw.size());
  for (size_t k = 0; k < raw.size(); ++k)
    z[k] = softcap > 0 ? softcap * std::tanh(double(raw[k]) / softcap) : raw[k];
  return z;
}

// Two choices from the same row agree, or their scores (logits, or logits / T + Gumbel noise) are so
// close that rounding of the logits may order them either way.
bool same_or_tie(int32_t got, int32_t want, const double* z, double T, uint64_t key) {
  if (got == want) return true;
  auto score = [&](int32_t v) { return T > 0 ? z[v] / T + head_gumbel(head_noise_uniform(key, v)) : z[v]; };
  return std::fabs(score(got) - score(want)) <= 1e-4 * (1 + std::fabs(score(want)));
}

// Compares lm_head_stream on the first m rows against the reference on all 37; the first m rows must
// also be bitwise what the 37-row call gives (a row's result never depends on the other rows).
void expect_matches_reference(const Head& head, float softcap, float temperature, ThreadPool* pool,
                              const std::string& label) {
  const int64_t V = head.view.rows(), H = head.view.cols(), kRows = 37;
  const std::vector<float> x = random_rows(kRows, H, 11);
  HeadStreamOptions opt;
  opt.softcap = softcap;
  opt.temperature = temperature;
  opt.seed = 1234;
  std::vector<HeadRowStats> want(kRows), all(kRows);
  std::vector<float> want_soft(size_t(kRows * H)), all_soft(size_t(kRows * H));
  reference::lm_head_stream(head.view, x.data(), kRows, H, opt, want.data(), want_soft.data());
  lm_head_stream(head.view, x.data(), kRows, H, opt, all.data(), all_soft.data(), pool);
  const std::vector<double> z = reference_logits(head.view, x, kRows, softcap);
  for (int64_t m : {1, 3, 37}) {
    std::vector<HeadRowStats> got(static_cast<size_t>(m));
    std::vector<float> soft(size_t(m * H));
    lm_head_stream(head.view, x.data(), m, H, opt, got.data(), soft.data(), pool);
    ASSERT_TRUE(same_bits(got.data(), all.data(), m)) << label << " m=" << m;
    ASSERT_TRUE(same_bits(soft, std::vector<float>(all_soft.begin(), all_soft.begin() + m * H)))
        << label << " m=" << m;
  }
  for (int64_t i = 0; i < kRows; ++i) {
    const std::string where = label + " row " + std::to_string(i);
    const HeadRowStats &g = all[size_t(i)], &r = want[size_t(i)];
    const double* zi = &z[size_t(i * V)];
    const uint64_t key = head_noise_key(opt.seed, uint64_t(i));
    EXPECT_TRUE(same_or_tie(g.plain.argmax, r.plain.argmax, zi, 0, key)) << where;
    EXPECT_TRUE(same_or_tie(g.sample, r.sample, zi, temperature, key)) << where;
    EXPECT_EQ(g.tempered.argmax, g.plain.argmax) << where;
    EXPECT_TRUE(stats_close(g.plain, r.plain)) << where << " plain";
    EXPECT_TRUE(stats_close(g.tempered, r.tempered)) << where << " tempered";
    if (g.sample == r.sample) {
      EXPECT_TRUE(close(g.p_sample, r.p_sample, "p_sample")) << where;
    }
    double diff = 0, norm = 0;
    for (int64_t j = 0; j < H; ++j) {
      diff += std::pow(double(all_soft[size_t(i * H + j)]) - want_soft[size_t(i * H + j)], 2);
      norm += std::pow(double(want_soft[size_t(i * H + j)]), 2);
    }
    EXPECT_LE(std::sqrt(diff), 1e-5 * std::sqrt(norm)) << where << " soft embedding";
  }
}

TEST(LmHeadStream, MatchesReference) {
  ThreadPool pool(2);
  for (DType type : {DType::F32, DType::Q8_0, DType::Q4_0})
    for (int64_t V : {1000, 2053})
      for (int64_t H : {64, 96}) {
        const Head head =
            make_head(type, V, H, uint64_t(V * 7 + H), 2.5 / std::sqrt(double(H)));  // logits ~ N(0, 2.5^2)
        for (float softcap : {0.f, 4.f})
          for (float T : {0.f, 0.7f, 1.f, 1.3f})
            expect_matches_reference(head, softcap, T, &pool,
                                     std::string(dtype_name(type)) + " V=" + std::to_string(V) +
                                         " H=" + std::to_string(H) + " softcap=" + std::to_string(softcap) +
                                         " T=" + std::to_string(T));
      }
}

// F32 rows of 4 KiB: tiles of 256 entries and lanes of 2048, so 3000 entries make a full lane and a
// second of three full tiles and a partial one, merged across threads.
TEST(LmHeadStream, SmallTilesAndManyLanesMatchReference) {
  ThreadPool pool(2);
  const Head head = make_head(DType::F32, 3000, 1024, 5, 2.5 / 32);
  expect_matches_reference(head, 0.f, 0.8f, &pool, "f32 V=3000 H=1024");
  expect_matches_reference(head, 4.f, 1.f, &pool, "f32 V=3000 H=1024 softcap");
}

// Every kernel variant (baseline, AVX2, AVX-512; those the CPU has) against the reference.
TEST(LmHeadStream, EverySimdLevelMatchesReference) {
  const Head head = make_head(DType::Q4_0, 2053, 64, 9, 2.5 / 8);
  for (SimdLevel level : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512}) {
    if (int(level) > int(simd_level())) continue;
    set_ops_simd_level(level);
    expect_matches_reference(head, 4.f, 0.7f, nullptr, std::string("q4_0 ") + simd_level_name(level));
  }
  reset_ops_simd_level();
}

// Plain stats are row_stats of the logits the materialised head computes (matmul, then the same
// softcap expression): argmax and max bitwise, the sums up to their order of accumulation.
TEST(LmHeadStream, PlainStatsEqualRowStatsOfMatmul) {
  const int64_t V = 2053, H = 96, m = 37;
  const Head head = make_head(DType::Q4_0, V, H, 3, 2.5 / std::sqrt(96.0));
  const std::vector<float> x = random_rows(m, H, 4);
  for (float softcap : {0.f, 4.f}) {
    std::vector<float> logits(size_t(m * V));
    matmul(head.view, x.data(), m, logits.data(), nullptr);
    if (softcap > 0)
      for (int64_t i = 0; i < int64_t(logits.size()); i += V) canvas::softcap(logits.data() + i, V, softcap);
    HeadStreamOptions opt;
    opt.softcap = softcap;
    opt.temperature = 0.9f;
    std::vector<HeadRowStats> got(static_cast<size_t>(m));
    lm_head_stream(head.view, x.data(), m, H, opt, got.data(), nullptr, nullptr);
    for (int64_t i = 0; i < m; ++i) {
      const RowStats want = row_stats(&logits[size_t(i * V)], V);
      EXPECT_EQ(got[size_t(i)].plain.argmax, want.argmax) << "row " << i;
      EXPECT_EQ(got[size_t(i)].plain.max, want.max) << "row " << i;
      EXPECT_TRUE(stats_close(got[size_t(i)].plain, want)) << "row " << i << " softcap " << softcap;
    }
  }
}

// Equal logits: the argmax is the lowest index holding the max, whether the copies share a SIMD lane
// (10 and 26), a tile (700) or not (1500, in the second tile of 1024), as row_stats does; the runner-up
// is the max again.
TEST(LmHeadStream, TiesGoToTheLowerIndex) {
  const int64_t V = 2053, H = 64;
  Head head = make_head(DType::F32, V, H, 41, 2.5 / 8);
  const std::vector<float> x = random_rows(1, H, 42);
  double xx = 0;
  for (float v : x) xx += double(v) * v;
  float* rows = reinterpret_cast<float*>(head.bytes.data());
  for (int64_t v : {1500, 700, 26, 10})
    for (int64_t j = 0; j < H; ++j) rows[v * H + j] = float(x[size_t(j)] * 15.0 / xx);  // logit ~15, the max
  std::vector<float> logits(static_cast<size_t>(V));
  matmul(head.view, x.data(), 1, logits.data(), nullptr);
  ASSERT_EQ(logits[10], logits[1500]);
  const RowStats want = row_stats(logits.data(), V);
  HeadStreamOptions opt;
  opt.temperature = 0;
  HeadRowStats got;
  lm_head_stream(head.view, x.data(), 1, H, opt, &got, nullptr, nullptr);
  EXPECT_EQ(want.argmax, 10);
  EXPECT_EQ(got.plain.argmax, 10);
  EXPECT_EQ(got.sample, 10);
  EXPECT_EQ(got.plain.p_top2, got.plain.p_top1);
  EXPECT_TRUE(stats_close(got.plain, want));
}

// Q4_0 rows of 256 (144 bytes): tiles of 1024, lanes of 8192, so 20000 entries make three lanes.
TEST(LmHeadStream, ThreadCountDoesNotChangeBits) {
  const int64_t V = 20000, H = 256, m = 37;
  const Head head = make_head(DType::Q4_0, V, H, 21, 2.5 / 16);
  const std::vector<float> x = random_rows(m, H, 22);
  HeadStreamOptions opt;
  opt.softcap = 4;
  opt.temperature = 0.7f;
  opt.seed = 99;
  ThreadPool one(1), two(2), three(3);
  std::vector<HeadRowStats> s0(static_cast<size_t>(m)), s1(static_cast<size_t>(m)),
      s2(static_cast<size_t>(m));
  std::vector<float> e0(size_t(m * H)), e1(size_t(m * H)), e2(size_t(m * H));
  lm_head_stream(head.view, x.data(), m, H, opt, s1.data(), e1.data(), &one);
  lm_head_stream(head.view, x.data(), m, H, opt, s2.data(), e2.data(), &two);
  EXPECT_TRUE(same_bits(s1.data(), s2.data(), m));
  EXPECT_TRUE(same_bits(e1, e2));
  for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &three}) {
    lm_head_stream(head.view, x.data(), m, H, opt, s0.data(), e0.data(), pool);
    EXPECT_TRUE(same_bits(s0.data(), s2.data(), m));
    EXPECT_TRUE(same_bits(e0, e2));
  }
  // The sample is a function of (seed, row id, logits): the same row id draws the same token wherever
  // the row sits, and a different seed draws differently somewhere.
  const uint64_t ids[] = {17, 5, 17};
  std::vector<float> x3(size_t(3 * H));
  for (int r = 0; r < 3; ++r) std::copy(x.begin(), x.begin() + H, x3.begin() + r * H);
  opt.row_ids = ids;
  std::vector<HeadRowStats> s3(3), s4(3);
  lm_head_stream(head.view, x3.data(), 3, H, opt, s3.data(), nullptr, &two);
  lm_head_stream(head.view, x3.data() + 2 * H, 1, H, opt, s4.data(), nullptr, &two);  // id 17 alone at row 0
  EXPECT_EQ(s3[0].sample, s3[2].sample);
  EXPECT_EQ(s4[0].sample, s3[0].sample);
  int differ = 0;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    opt.seed = seed;
    lm_head_stream(head.view, x3.data(), 3, H, opt, s4.data(), nullptr, &two);
    differ += s4[0].sample != s3[0].sample;
  }
  EXPECT_GT(differ, 0);
}

// 20000 draws (row ids 0..19999) from one row of 8 logits follow softmax(logits / T): Pearson's
// chi-square with 7 degrees of freedom stays below 35 (P(chi2_7 > 35) = 1.1e-5 under the null), while
// draws at T = 1 tested against the T = 0.5 probabilities exceed it, so the test can fail.
TEST(LmHeadStream, GumbelSamplesFollowTemperedSoftmax) {
  const int64_t V = 8, H = 32, N = 20000;
  const Head head = make_head(DType::F32, V, H, 31, 1.0 / std::sqrt(32.0));  // logits ~ N(0, 1)
  const std::vector<float> one = random_rows(1, H, 32);
  std::vector<float> x(size_t(N * H));
  for (int64_t r = 0; r < N; ++r) std::copy(one.begin(), one.end(), x.begin() + r * H);
  std::vector<float> logits(V);
  matmul_reference(head.view, one.data(), H, 1, logits.data(), V);

  auto probabilities = [&](double T) {
    std::vector<double> p(V);
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += p[size_t(v)] = std::exp(logits[size_t(v)] / T);
    for (double& value : p) value /= sum;
    return p;
  };
  auto counts_at = [&](float T) {
    HeadStreamOptions opt;
    opt.temperature = T;
    opt.seed = 2024;
    std::vector<HeadRowStats> stats(static_cast<size_t>(N));
    lm_head_stream(head.view, x.data(), N, H, opt, stats.data(), nullptr, nullptr);
    std::vector<double> counts(V, 0.0);
    for (const HeadRowStats& s : stats) counts[size_t(s.sample)] += 1;
    return counts;
  };
  auto chi_square = [&](const std::vector<double>& counts, const std::vector<double>& p) {
    double chi2 = 0;
    for (int64_t v = 0; v < V; ++v)
      chi2 += std::pow(counts[size_t(v)] - N * p[size_t(v)], 2) / (N * p[size_t(v)]);
    return chi2;
  };
  const std::vector<double> p1 = probabilities(1.0), p05 = probabilities(0.5);
  for (double p : p1) ASSERT_GT(p * N, 100.0);  // every cell well populated: the chi-square law applies
  const std::vector<double> c1 = counts_at(1.f), c05 = counts_at(0.5f);
  EXPECT_LT(chi_square(c1, p1), 35.0);
  EXPECT_LT(chi_square(c05, p05), 35.0);
  EXPECT_GT(chi_square(c1, p05), 35.0);
  EXPECT_GT(chi_square(c05, p1), 35.0);
}

TEST(LmHeadStream, BadInputThrowsClearError) {
  const Head head = make_head(DType::Q8_0, 100, 64, 1, 0.1);
  const std::vector<float> x = random_rows(2, 64, 2);
  std::vector<HeadRowStats> stats(2);
  auto message = [&](HeadStreamOptions opt, int64_t hidden, HeadRowStats* out) -> std::string {
    try {
      lm_head_stream(head.view, x.data(), 2, hidden, opt, out, nullptr, nullptr);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  HeadStreamOptions opt;
  opt.temperature = -0.5f;
  EXPECT_NE(message(opt, 64, stats.data()).find("temperature must be finite and >= 0"), std::string::npos);
  opt.temperature = std::nanf("");
  EXPECT_NE(message(opt, 64, stats.data()).find("temperature"), std::string::npos);
  opt = HeadStreamOptions{};
  opt.softcap = -1;
  EXPECT_NE(message(opt, 64, stats.data()).find("softcap"), std::string::npos);
  opt = HeadStreamOptions{};
  EXPECT_NE(message(opt, 64, nullptr).find("null stats"), std::string::npos);
  const std::string width = message(opt, 96, stats.data());
  EXPECT_NE(width.find("activation rows have 96 values, the head's rows 64"), std::string::npos) << width;
  EXPECT_NE(width.find("'head'"), std::string::npos) << width;
  EXPECT_EQ(message(opt, 64, stats.data()), "no error");
  EXPECT_THROW(reference::lm_head_stream(head.view, x.data(), 2, 96, opt, stats.data(), nullptr), Error);
}

}  // namespace
}  // namespace canvas
