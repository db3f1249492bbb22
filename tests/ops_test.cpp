// Tests of ops.h: every SIMD level against the scalar references, RoPE against hand computations,
// attention against a naive full-score-matrix computation and for bitwise determinism.
#include "ops/ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/rng.h"
#include "core/thread_pool.h"

namespace canvas {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> random_vector(Rng& rng, int64_t n, double scale = 1.0) {
  std::vector<float> v(n);
  for (auto& x : v) x = float(rng.normal() * scale);
  return v;
}

// Counts elements with |a - b| > abs_tol + rel_tol * |b| and reports the first one.
::testing::AssertionResult all_close(const float* a, const float* b, int64_t n, double rel_tol, double abs_tol) {
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (a[i] == b[i]) continue;  // also equal infinities
    const double diff = std::fabs(double(a[i]) - double(b[i]));
    if (!(diff <= abs_tol + rel_tol * std::fabs(double(b[i])))) {
      if (first < 0) first = i;
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << n << " differ; first at " << first << ": " << a[first]
                                       << " vs " << b[first];
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Runs each test once per SIMD level the machine supports, forcing ops to that level.
class OpsLevel : public ::testing::TestWithParam<SimdLevel> {
 protected:
  void SetUp() override {
    if (int(GetParam()) > int(simd_level()))
      GTEST_SKIP() << simd_level_name(GetParam()) << " not available (CPU or CANVAS_SIMD)";
    set_ops_simd_level(GetParam());
    ASSERT_EQ(ops_simd_level(), GetParam());
  }
  void TearDown() override { reset_ops_simd_level(); }
};

INSTANTIATE_TEST_SUITE_P(Levels, OpsLevel, ::testing::Values(SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512),
                         [](const ::testing::TestParamInfo<SimdLevel>& info) {
                           return std::string(simd_level_name(info.param));
                         });

// ---- norms, activations ------------------------------------------------------------------------

TEST_P(OpsLevel, RmsNormMatchesReference) {
  Rng rng(1);
  for (int64_t n = 1; n <= 300; ++n) {
    const auto x = random_vector(rng, n, 2.0), w = random_vector(rng, n);
    std::vector<float> got(n), want(n);
    for (const float* weight : {w.data(), static_cast<const float*>(nullptr)}) {
      rms_norm(x.data(), weight, n, 1e-6f, got.data());
      reference::rms_norm(x.data(), weight, n, 1e-6f, want.data());
      ASSERT_TRUE(all_close(got.data(), want.data(), n, 1e-5, 1e-7)) << "n=" << n;
    }
    std::vector<float> in_place = x;
    rms_norm(in_place.data(), w.data(), n, 1e-6f, in_place.data());
    rms_norm(x.data(), w.data(), n, 1e-6f, got.data());
    ASSERT_TRUE(bitwise_equal(in_place, got)) << "n=" << n;
  }
}

TEST(Ops, RmsNormValue) {
  const float x[4] = {1, 2, 3, 4}, w[4] = {1, 1, 2, 0.5f};
  float y[4];
  rms_norm(x, w, 4, 0.f, y);
  const double r = 1.0 / std::sqrt(30.0 / 4);
  EXPECT_NEAR(y[0], 1 * r, 1e-6);
  EXPECT_NEAR(y[2], 3 * r * 2, 1e-6);
  EXPECT_NEAR(y[3], 4 * r * 0.5, 1e-6);
}

TEST(Ops, ActivationValues) {
  EXPECT_EQ(silu(0.f), 0.f);
  EXPECT_NEAR(silu(1.f), 0.7310585786, 1e-7);
  EXPECT_NEAR(silu(-3.f), -0.1422776195, 1e-7);
  EXPECT_NEAR(gelu_tanh(1.f), 0.8411919906, 1e-7);
  EXPECT_NEAR(gelu_tanh(-1.f), -0.1588080094, 1e-7);
  EXPECT_NEAR(gelu_tanh(3.f), 2.9963627, 1e-6);
  EXPECT_EQ(gelu_tanh(0.f), 0.f);
}

TEST_P(OpsLevel, GatedActivationsMatchReference) {
  Rng rng(2);
  for (int64_t n = 1; n <= 300; ++n) {
    auto gate = random_vector(rng, n, 3.0);
    const auto up = random_vector(rng, n);
    if (n == 300) gate[7] = -120.f, gate[8] = 120.f, gate[9] = -30.f;  // exp over- and underflow
    std::vector<float> got(n), want(n);
    swiglu(gate.data(), up.data(), n, got.data());
    reference::swiglu(gate.data(), up.data(), n, want.data());
    ASSERT_TRUE(all_close(got.data(), want.data(), n, 1e-5, 1e-7)) << "swiglu n=" << n;
    geglu(gate.data(), up.data(), n, got.data());
    reference::geglu(gate.data(), up.data(), n, want.data());
    ASSERT_TRUE(all_close(got.data(), want.data(), n, 2e-5, 1e-7)) << "geglu n=" << n;
    std::vector<float> aliased = gate;  // out may alias gate
    geglu(aliased.data(), up.data(), n, aliased.data());
    ASSERT_TRUE(bitwise_equal(aliased, got)) << "n=" << n;
  }
}

// Against tanh in double, computed here: within 3e-7 * cap absolute over every tail length, with
// values far past the saturation point, NaN kept and +-inf capped.
TEST_P(OpsLevel, SoftcapMatchesTanhInDouble) {
  Rng rng(3);
  for (float cap : {30.f, 4.f}) {
    for (int64_t n = 1; n <= 200; ++n) {
      auto x = random_vector(rng, n, 2.0 * cap);
      if (n == 200) x[3] = 1e-6f, x[4] = -1e-30f, x[5] = 1e6f, x[6] = -1e6f, x[7] = 0.f;
      const std::vector<float> in = x;
      softcap(x.data(), n, cap);
      for (int64_t i = 0; i < n; ++i) {
        const double want = double(cap) * std::tanh(double(in[size_t(i)]) / double(cap));
        ASSERT_NEAR(x[size_t(i)], want, 3e-7 * cap) << "cap " << cap << " n " << n << " x " << in[size_t(i)];
      }
    }
    float special[4] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity(), 1.f};
    softcap(special, 4, cap);
    EXPECT_TRUE(std::isnan(special[0]));
    EXPECT_EQ(special[1], cap);
    EXPECT_EQ(special[2], -cap);
    EXPECT_NEAR(special[3], double(cap) * std::tanh(1.0 / cap), 3e-7 * cap);
  }
}

// ---- softmax family ------------------------------------------------------------------------------

// Double-precision statistics computed independently of ops.cpp.
struct ExactStats {
  int64_t argmax;
  double max, lse, p1, p2, entropy;
};
ExactStats exact_stats(const std::vector<float>& x) {
  ExactStats s{};
  s.argmax = std::max_element(x.begin(), x.end()) - x.begin();  // first of the largest
  s.max = x[s.argmax];
  std::vector<double> sorted(x.begin(), x.end());
  std::sort(sorted.rbegin(), sorted.rend());
  double z = 0;
  for (float v : x) z += std::exp(double(v) - s.max);
  s.lse = s.max + std::log(z);
  s.p1 = 1.0 / z;
  s.p2 = x.size() > 1 ? std::exp(sorted[1] - s.max) / z : 0.0;
  for (float v : x) {
    const double p = std::exp(double(v) - s.lse);
    if (p > 0) s.entropy -= p * (double(v) - s.lse);
  }
  return s;
}

void expect_stats(const RowStats& got, const ExactStats& want, const std::string& what) {
  EXPECT_EQ(got.argmax, want.argmax) << what;
  EXPECT_EQ(got.max, float(want.max)) << what;
  EXPECT_NEAR(got.logsumexp, want.lse, 1e-5 * std::max(1.0, std::fabs(want.lse))) << what;
  EXPECT_NEAR(got.p_top1, want.p1, 1e-5 * want.p1 + 1e-12) << what;
  EXPECT_NEAR(got.p_top2, want.p2, 1e-5 * want.p2 + 1e-12) << what;
  EXPECT_NEAR(got.entropy, want.entropy, 1e-5 * std::max(1.0, want.entropy)) << what;
}

TEST_P(OpsLevel, SoftmaxFamilyMatchesReference) {
  Rng rng(3);
  for (int64_t n = 1; n <= 300; ++n) {
    auto x = random_vector(rng, n, n % 3 == 0 ? 30.0 : 3.0);  // scale 30 exercises exp underflow
    if (n % 7 == 0) x[rng.below(n)] = -kInf;                   // a banned token
    std::vector<float> got(n), want(n);
    softmax(x.data(), n, got.data());
    reference::softmax(x.data(), n, want.data());
    ASSERT_TRUE(all_close(got.data(), want.data(), n, 1e-5, 1e-30)) << "softmax n=" << n;
    log_softmax(x.data(), n, got.data());
    reference::log_softmax(x.data(), n, want.data());
    ASSERT_TRUE(all_close(got.data(), want.data(), n, 1e-5, 1e-5)) << "log_softmax n=" << n;
    const float h = entropy(x.data(), n), h_ref = reference::entropy(x.data(), n);
    ASSERT_NEAR(h, h_ref, 1e-5 * std::max(1.f, h_ref)) << "entropy n=" << n;
    const ExactStats exact = exact_stats(x);
    ASSERT_NEAR(logsumexp(x.data(), n), exact.lse, 1e-5 * std::max(1.0, std::fabs(exact.lse))) << "logsumexp n=" << n;
    ASSERT_NEAR(reference::logsumexp(x.data(), n), exact.lse, 1e-6 * std::max(1.0, std::fabs(exact.lse)))
        << "reference logsumexp n=" << n;
    const std::string what = "row_stats n=" + std::to_string(n);
    expect_stats(row_stats(x.data(), n), exact_stats(x), what);
    expect_stats(reference::row_stats(x.data(), n), exact_stats(x), "reference " + what);
    ASSERT_FALSE(HasFailure()) << what;
  }
}

TEST_P(OpsLevel, RowStatsLargeVocabMatchesDouble) {
  Rng rng(4);
  for (int64_t n : {262144, 262144 - 5, 100003}) {
    auto x = random_vector(rng, n, 2.0);
    x[n / 3] = 14.f;  // a confident token and a runner-up
    x[n - 2] = 12.5f;
    for (int i = 0; i < 100; ++i) x[rng.below(n)] = -kInf;
    const std::string what = "n=" + std::to_string(n);
    expect_stats(row_stats(x.data(), n), exact_stats(x), what);
    const ExactStats e = exact_stats(x);
    EXPECT_NEAR(entropy(x.data(), n), e.entropy, 1e-5 * e.entropy) << what;
  }
  // A flat row: entropy log(n), no confident token.
  const int64_t n = 262144;
  std::vector<float> flat(n, 0.25f);
  const RowStats s = row_stats(flat.data(), n);
  EXPECT_EQ(s.argmax, 0);
  EXPECT_NEAR(s.entropy, std::log(double(n)), 1e-5 * std::log(double(n)));
  EXPECT_NEAR(s.p_top1, 1.0 / n, 1e-5 / n);
  EXPECT_NEAR(s.p_top2, 1.0 / n, 1e-5 / n);
}

TEST_P(OpsLevel, RowStatsTiesAndEdges) {
  for (int64_t n : {2, 17, 40, 300}) {
    std::vector<float> x(n);
    for (int64_t i = 0; i < n; ++i) x[i] = float(i % 5);
    x[n / 2] = 9.f;
    x[n - 1] = 9.f;  // tie: the first index wins, and the runner-up has the same probability
    if (n == 2) x[0] = 9.f;
    const RowStats s = row_stats(x.data(), n);
    EXPECT_EQ(s.argmax, n == 2 ? 0 : n / 2) << n;
    EXPECT_EQ(s.p_top1, s.p_top2) << n;
  }
  const float one[1] = {3.f};
  const RowStats s = row_stats(one, 1);
  EXPECT_EQ(s.argmax, 0);
  EXPECT_FLOAT_EQ(s.p_top1, 1.f);
  EXPECT_EQ(s.p_top2, 0.f);
  EXPECT_NEAR(s.entropy, 0.f, 1e-7);
  EXPECT_FLOAT_EQ(s.logsumexp, 3.f);
}

TEST(Ops, TopK) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {1, 3, 3, 2, 3, -1, nan, 5};
  EXPECT_EQ(top_k(x.data(), 8, 5), (std::vector<int32_t>{7, 1, 2, 4, 3}));
  EXPECT_EQ(top_k(x.data(), 8, 1), (std::vector<int32_t>{7}));
  EXPECT_EQ(top_k(x.data(), 8, 0), (std::vector<int32_t>{}));
  EXPECT_EQ(top_k(x.data(), 8, 100), (std::vector<int32_t>{7, 1, 2, 4, 3, 0, 5, 6}));  // NaN last
  // Random rows with many ties against a stable sort.
  Rng rng(5);
  for (int64_t n : {1, 10, 1000}) {
    std::vector<float> v(n);
    for (auto& e : v) e = float(rng.below(20));
    std::vector<int32_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return v[a] > v[b]; });
    for (int64_t k : {int64_t(1), int64_t(3), n / 2, n}) {
      const auto got = top_k(v.data(), n, k);
      ASSERT_EQ(got, std::vector<int32_t>(order.begin(), order.begin() + std::min(k, n))) << n << " " << k;
    }
  }
}

// ---- RoPE ------------------------------------------------------------------------------------------

TEST(Rope, HandComputationNormalAndNeox) {
  const int32_t pos[1] = {7};
  RopeParams p;
  p.head_dim = 4;
  p.rot_dims = 4;
  p.theta = 10000.f;  // inv_freq = {1, 10000^(-1/2) = 0.01}: angles 7 and 0.07
  const double c0 = std::cos(7.0), s0 = std::sin(7.0), c1 = std::cos(0.07), s1 = std::sin(0.07);
  float x[4] = {1, 2, 3, 4};
  p.layout = RopeLayout::Normal;  // pairs (x0, x1), (x2, x3)
  rope(x, 1, 1, pos, p);
  EXPECT_NEAR(x[0], 1 * c0 - 2 * s0, 1e-6);
  EXPECT_NEAR(x[1], 1 * s0 + 2 * c0, 1e-6);
  EXPECT_NEAR(x[2], 3 * c1 - 4 * s1, 1e-6);
  EXPECT_NEAR(x[3], 3 * s1 + 4 * c1, 1e-6);
  float y[4] = {1, 2, 3, 4};
  p.layout = RopeLayout::Neox;  // pairs (x0, x2), (x1, x3)
  rope(y, 1, 1, pos, p);
  EXPECT_NEAR(y[0], 1 * c0 - 3 * s0, 1e-6);
  EXPECT_NEAR(y[2], 1 * s0 + 3 * c0, 1e-6);
  EXPECT_NEAR(y[1], 2 * c1 - 4 * s1, 1e-6);
  EXPECT_NEAR(y[3], 2 * s1 + 4 * c1, 1e-6);
}

TEST(Rope, NeoxIsNormalOnInterleavedDims) {
  Rng rng(6);
  const int head_dim = 64, half = 32, n_heads = 3, n_rows = 4;
  const int32_t pos[n_rows] = {0, 1, 17, 4095};
  const auto x = random_vector(rng, n_rows * n_heads * head_dim);
  RopeParams p;
  p.head_dim = head_dim;
  p.rot_dims = head_dim;
  p.layout = RopeLayout::Neox;
  std::vector<float> neox = x;
  rope(neox.data(), n_rows, n_heads, pos, p);
  std::vector<float> inter(x.size()), normal_back(x.size());
  for (size_t h = 0; h < x.size() / head_dim; ++h)
    for (int i = 0; i < half; ++i) {
      inter[h * head_dim + 2 * i] = x[h * head_dim + i];
      inter[h * head_dim + 2 * i + 1] = x[h * head_dim + i + half];
    }
  p.layout = RopeLayout::Normal;
  std::vector<float> normal = x;
  rope(normal.data(), n_rows, n_heads, pos, p);
  EXPECT_FALSE(bitwise_equal(normal, neox));  // the layouts differ...
  rope(inter.data(), n_rows, n_heads, pos, p);
  for (size_t h = 0; h < x.size() / head_dim; ++h)
    for (int i = 0; i < half; ++i) {
      normal_back[h * head_dim + i] = inter[h * head_dim + 2 * i];
      normal_back[h * head_dim + i + half] = inter[h * head_dim + 2 * i + 1];
    }
  EXPECT_TRUE(bitwise_equal(normal_back, neox));  // ...only by which dims form a pair
}

TEST(Rope, PartialRotationAndActivePairs) {
  Rng rng(7);
  const int head_dim = 16, n_heads = 2, n_rows = 3;
  const int32_t pos[n_rows] = {5, 300, 99999};
  const auto x = random_vector(rng, n_rows * n_heads * head_dim);
  for (RopeLayout layout : {RopeLayout::Normal, RopeLayout::Neox}) {
    // Partial: rot_dims 8 of 16; the tail is untouched and the head equals a full rope of 8 dims.
    RopeParams p;
    p.layout = layout;
    p.head_dim = head_dim;
    p.rot_dims = 8;
    std::vector<float> y = x;
    rope(y.data(), n_rows, n_heads, pos, p);
    std::vector<float> front;
    for (int h = 0; h < n_rows * n_heads; ++h) front.insert(front.end(), &x[h * head_dim], &x[h * head_dim + 8]);
    RopeParams p8 = p;
    p8.head_dim = 8;
    rope(front.data(), n_rows, n_heads, pos, p8);
    for (int h = 0; h < n_rows * n_heads; ++h)
      for (int d = 0; d < head_dim; ++d) {
        if (d < 8) ASSERT_EQ(y[h * head_dim + d], front[h * 8 + d]);
        else ASSERT_EQ(y[h * head_dim + d], x[h * head_dim + d]) << "tail dim " << d;
      }
    // active_pairs 3 of 8: pairs 3.. rotate by 0 (unchanged), pairs 0..2 as in the full rope.
    RopeParams pa;
    pa.layout = layout;
    pa.head_dim = head_dim;
    pa.rot_dims = head_dim;
    std::vector<float> full = x, active = x;
    rope(full.data(), n_rows, n_heads, pos, pa);
    pa.active_pairs = 3;
    rope(active.data(), n_rows, n_heads, pos, pa);
    for (int h = 0; h < n_rows * n_heads; ++h)
      for (int i = 0; i < head_dim / 2; ++i) {
        const int a = layout == RopeLayout::Normal ? 2 * i : i;
        const int b = layout == RopeLayout::Normal ? 2 * i + 1 : i + head_dim / 2;
        const std::vector<float>& want = i < 3 ? full : x;
        ASSERT_EQ(active[h * head_dim + a], want[h * head_dim + a]) << "pair " << i;
        ASSERT_EQ(active[h * head_dim + b], want[h * head_dim + b]) << "pair " << i;
      }
  }
}

TEST(Rope, PositionZeroIsIdentityAndReferenceAgrees) {
  Rng rng(8);
  const int head_dim = 24, n_heads = 4, n_rows = 5;
  const auto x = random_vector(rng, n_rows * n_heads * head_dim);
  const std::vector<int32_t> zeros(n_rows, 0), pos = {0, 3, 1000, 65535, 131071};
  for (RopeLayout layout : {RopeLayout::Normal, RopeLayout::Neox}) {
    RopeParams p;
    p.layout = layout;
    p.head_dim = head_dim;
    p.rot_dims = 20;
    p.theta = 1e6f;
    std::vector<float> y = x;
    rope(y.data(), n_rows, n_heads, zeros.data(), p);
    EXPECT_TRUE(bitwise_equal(y, x));
    y = x;
    std::vector<float> r = x;
    rope(y.data(), n_rows, n_heads, pos.data(), p);
    reference::rope(r.data(), n_rows, n_heads, pos.data(), p);
    EXPECT_TRUE(bitwise_equal(y, r));
  }
}

TEST(Rope, LargePositionsStayAccurate) {
  // An angle computed in float would be off by ~1e-2 rad at these positions.
  const int head_dim = 128;
  const int32_t pos[3] = {100000, 123457, 131071};
  std::vector<float> x(3 * head_dim, 0.f);
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < head_dim / 2; ++i) x[r * head_dim + 2 * i] = 1.f;  // (1, 0) pairs
  RopeParams p;
  p.head_dim = head_dim;
  p.rot_dims = head_dim;
  p.theta = 500000.f;
  rope(x.data(), 3, 1, pos, p);
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < head_dim / 2; ++i) {
      const long double angle = (long double)pos[r] * std::pow((long double)500000, -2.0L * i / head_dim);
      ASSERT_NEAR(x[r * head_dim + 2 * i], double(std::cos(angle)), 2e-7) << r << " " << i;
      ASSERT_NEAR(x[r * head_dim + 2 * i + 1], double(std::sin(angle)), 2e-7) << r << " " << i;
    }
}

TEST(Rope, RejectsBadRotDims) {
  float x[8] = {};
  const int32_t pos[1] = {1};
  RopeParams p;
  p.head_dim = 8;
  p.rot_dims = 5;
  EXPECT_ANY_THROW(rope(x, 1, 1, pos, p));
  p.rot_dims = 10;
  EXPECT_ANY_THROW(rope(x, 1, 1, pos, p));
}

// ---- attention -------------------------------------------------------------------------------------

// A batch of attention inputs. k/v: n_kv_heads blocks of `capacity` keys (kv_head_stride =
// capacity * head_dim), of which n_keys are used.
struct AttnCase {
  AttentionShape shape;
  int64_t n_q = 0, n_keys = 0, capacity = 0;
  std::vector<float> q, k, v;
  std::vector<int32_t> key_group, query_group, window_start;
  bool use_window = false;
  std::vector<uint64_t> tree;  // non-empty: the tree keys each query sees, from tree_key0
  int64_t tree_key0 = 0;

  int64_t ldq() const { return int64_t(shape.n_heads) * shape.head_dim; }
  int64_t stride() const { return capacity * shape.head_dim; }
  AttentionMask mask() const {
    AttentionMask m;
    m.key_group = key_group.data();
    m.query_group = query_group.data();
    m.window_start = use_window ? window_start.data() : nullptr;
    m.tree = tree.empty() ? nullptr : tree.data();
    m.tree_key0 = tree_key0;
    return m;
  }
  std::vector<float> run(ThreadPool* pool) const {
    std::vector<float> out(n_q * ldq(), -1.f);
    attention(q.data(), n_q, ldq(), k.data(), v.data(), n_keys, stride(), mask(), shape, out.data(), ldq(), pool);
    return out;
  }
  std::vector<float> run_reference() const {
    std::vector<float> out(n_q * ldq(), -1.f);
    reference::attention(q.data(), n_q, ldq(), k.data(), v.data(), n_keys, stride(), mask(), shape, out.data(),
                         ldq());
    return out;
  }
  // The naive computation: full score matrix in double, -inf where masked, softmax per row, P V.
  std::vector<float> run_naive() const {
    const int hd = shape.head_dim, group = shape.n_heads / shape.n_kv_heads;
    std::vector<float> out(n_q * ldq());
    for (int h = 0; h < shape.n_heads; ++h) {
      const int kv = h / group;
      std::vector<double> s(n_q * n_keys);
      for (int64_t i = 0; i < n_q; ++i)
        for (int64_t j = 0; j < n_keys; ++j) {
          double d = 0;
          for (int e = 0; e < hd; ++e) d += double(q[i * ldq() + h * hd + e]) * k[kv * stride() + j * hd + e];
          d *= shape.scale;
          if (shape.softcap > 0) d = shape.softcap * std::tanh(d / shape.softcap);
          const bool vis = !tree.empty() && j >= tree_key0
                               ? bool(tree[i] >> (j - tree_key0) & 1)
                               : key_group[j] <= query_group[i] && (!use_window || j >= window_start[i]);
          s[i * n_keys + j] = vis ? d : -std::numeric_limits<double>::infinity();
        }
      for (int64_t i = 0; i < n_q; ++i) {
        double m = -std::numeric_limits<double>::infinity(), z = 0;
        for (int64_t j = 0; j < n_keys; ++j) m = std::max(m, s[i * n_keys + j]);
        for (int e = 0; e < hd; ++e) out[i * ldq() + h * hd + e] = 0.f;
        if (m == -std::numeric_limits<double>::infinity()) continue;  // sees nothing: zeros
        for (int64_t j = 0; j < n_keys; ++j) z += std::exp(s[i * n_keys + j] - m);
        for (int e = 0; e < hd; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < n_keys; ++j) acc += std::exp(s[i * n_keys + j] - m) / z * v[kv * stride() + j * hd + e];
          out[i * ldq() + h * hd + e] = float(acc);
        }
      }
    }
    return out;
  }
};

AttnCase make_case(Rng& rng, int n_heads, int n_kv_heads, int head_dim, int64_t n_q, int64_t n_keys,
                   int64_t capacity = 0) {
  AttnCase c;
  c.shape.n_heads = n_heads;
  c.shape.n_kv_heads = n_kv_heads;
  c.shape.head_dim = head_dim;
  c.shape.scale = float(1.0 / std::sqrt(double(head_dim)));
  c.n_q = n_q;
  c.n_keys = n_keys;
  c.capacity = std::max(capacity, n_keys);
  c.q = random_vector(rng, n_q * c.ldq(), 1.5);
  c.k = random_vector(rng, n_kv_heads * c.stride(), 1.5);
  c.v = random_vector(rng, n_kv_heads * c.stride());
  c.key_group.assign(n_keys, 0);
  c.query_group.assign(n_q, 0);
  c.window_start.assign(n_q, 0);
  return c;
}

// Queries are the last n_q of n_keys positions.
void set_causal(AttnCase& c, int block = 1) {
  for (int64_t j = 0; j < c.n_keys; ++j) c.key_group[j] = int32_t(j / block);
  for (int64_t i = 0; i < c.n_q; ++i) c.query_group[i] = int32_t((c.n_keys - c.n_q + i) / block);
}
void set_window(AttnCase& c, int64_t window) {
  c.use_window = true;
  for (int64_t i = 0; i < c.n_q; ++i) c.window_start[i] = int32_t(std::max<int64_t>(0, c.n_keys - c.n_q + i - window + 1));
}

TEST_P(OpsLevel, AttentionMasksMatchNaive) {
  Rng rng(9);
  ThreadPool pool(2);
  struct Config { int heads, kv_heads, dim; int64_t n_q, n_keys; };
  for (const Config& cfg : {Config{2, 2, 16, 5, 9}, Config{4, 2, 7, 6, 6}, Config{8, 2, 64, 4, 33},
                            Config{3, 1, 80, 3, 20}, Config{2, 1, 130, 2, 17}, Config{1, 1, 1, 3, 5}}) {
    for (int kind = 0; kind < 7; ++kind) {
      AttnCase c = make_case(rng, cfg.heads, cfg.kv_heads, cfg.dim, cfg.n_q, cfg.n_keys, cfg.n_keys + 3);
      const char* names[] = {"causal", "bidirectional", "block-causal", "window", "softcap", "tree", "tree, window"};
      if (kind == 0) set_causal(c);
      if (kind == 2) set_causal(c, 4);
      if (kind == 3) set_causal(c), set_window(c, 3);
      if (kind == 4) set_causal(c), c.shape.softcap = 2.f;
      if (kind >= 5) {  // the queries are a tree stored as the last n_q keys: each sees a random subset of them
        set_causal(c);
        if (kind == 6) set_window(c, 3);
        c.tree_key0 = c.n_keys - c.n_q;
        for (int64_t i = 0; i < c.n_q; ++i) c.tree.push_back(rng.next() & ((uint64_t(1) << c.n_q) - 1));
      }
      const std::string what = std::string(names[kind]) + " dim " + std::to_string(cfg.dim);
      const auto naive = c.run_naive();
      const auto got = c.run(&pool), ref = c.run_reference();
      EXPECT_TRUE(all_close(got.data(), naive.data(), int64_t(got.size()), 2e-5, 2e-5)) << what;
      EXPECT_TRUE(all_close(ref.data(), naive.data(), int64_t(ref.size()), 2e-5, 2e-5)) << "reference " << what;
    }
  }
}

TEST_P(OpsLevel, AttentionQueryThatSeesNothingGetsZeros) {
  Rng rng(10);
  AttnCase c = make_case(rng, 2, 1, 20, 3, 8);
  set_causal(c);
  c.use_window = true;
  c.window_start = {0, 100, 8};  // queries 1 and 2 see no key
  const auto out = c.run(nullptr);
  for (int64_t i = 1; i < 3; ++i)
    for (int64_t e = 0; e < c.ldq(); ++e) ASSERT_EQ(out[i * c.ldq() + e], 0.f);
  EXPECT_NE(out[0], 0.f);
  const auto ref = c.run_reference();
  EXPECT_TRUE(all_close(out.data(), ref.data(), int64_t(out.size()), 1e-5, 1e-6));
}

TEST_P(OpsLevel, AttentionGqaMapsHeadsToKvGroups) {
  Rng rng(11);
  AttnCase gqa = make_case(rng, 8, 2, 32, 4, 12);
  set_causal(gqa);
  // Every query head gets the same q: heads reading one kv head agree, the two kv groups differ.
  for (int64_t i = 0; i < gqa.n_q; ++i)
    for (int h = 1; h < 8; ++h)
      std::copy_n(&gqa.q[i * gqa.ldq()], 32, &gqa.q[i * gqa.ldq() + h * 32]);
  const auto out = gqa.run(nullptr);
  for (int64_t i = 0; i < gqa.n_q; ++i) {
    const float* row = &out[i * gqa.ldq()];
    for (int h = 0; h < 8; ++h)
      ASSERT_EQ(std::memcmp(row + h * 32, row + (h / 4) * 4 * 32, 32 * sizeof(float)), 0) << "head " << h;
    ASSERT_NE(std::memcmp(row, row + 4 * 32, 32 * sizeof(float)), 0);
  }
  // Equivalent multi-head attention with each kv head repeated for its 4 query heads.
  AttnCase mha = gqa;
  mha.shape.n_kv_heads = 8;
  mha.k.assign(8 * mha.stride(), 0.f);
  mha.v.assign(8 * mha.stride(), 0.f);
  for (int h = 0; h < 8; ++h) {
    std::copy_n(&gqa.k[(h / 4) * gqa.stride()], gqa.stride(), &mha.k[h * mha.stride()]);
    std::copy_n(&gqa.v[(h / 4) * gqa.stride()], gqa.stride(), &mha.v[h * mha.stride()]);
  }
  EXPECT_TRUE(bitwise_equal(out, mha.run(nullptr)));
  const auto naive = gqa.run_naive();
  EXPECT_TRUE(all_close(out.data(), naive.data(), int64_t(out.size()), 2e-5, 2e-5));
}

TEST_P(OpsLevel, AttentionIsBitwiseIndependentOfThreadsAndBatch) {
  Rng rng(12);
  ThreadPool pool1(1), pool2(2), pool3(3);
  // Without a window, queries of one block share their keys and are tiled together; with one, not.
  for (int dim : {64, 72}) for (bool windowed : {false, true}) {
    AttnCase c = make_case(rng, 8, 2, dim, 11, 40);
    set_causal(c, 3);
    if (windowed) set_window(c, 25);
    const auto base = c.run(nullptr);
    EXPECT_TRUE(bitwise_equal(base, c.run(&pool1)));
    EXPECT_TRUE(bitwise_equal(base, c.run(&pool2)));
    EXPECT_TRUE(bitwise_equal(base, c.run(&pool3)));
    // One query at a time (n_q = 1) gives the same bits as the batch.
    std::vector<float> single(base.size());
    for (int64_t i = 0; i < c.n_q; ++i) {
      AttentionMask m = c.mask();
      m.query_group += i;
      if (m.window_start) m.window_start += i;
      attention(&c.q[i * c.ldq()], 1, c.ldq(), c.k.data(), c.v.data(), c.n_keys, c.stride(), m, c.shape,
                &single[i * c.ldq()], c.ldq(), &pool2);
    }
    EXPECT_TRUE(bitwise_equal(base, single));
    // In place: out = q.
    std::vector<float> inplace = c.q;
    attention(inplace.data(), c.n_q, c.ldq(), c.k.data(), c.v.data(), c.n_keys, c.stride(), c.mask(), c.shape,
              inplace.data(), c.ldq(), &pool3);
    EXPECT_TRUE(bitwise_equal(base, inplace));
  }
}

// The decode engine's situation: a causal prefix already in the KV cache, then a bidirectional canvas
// whose keys are appended. Canvas queries must get the same bits whether computed together with the
// prefix in one pass over a fresh buffer or alone over the cache, with invisible keys (a stale canvas,
// other canvases' rows) interleaved and a different kv_head_stride.
TEST_P(OpsLevel, AttentionCachePlusNewRowsEqualsAllAtOnce) {
  Rng rng(13);
  const int n_heads = 4, n_kv = 2, hd = 48;
  const int64_t prefix = 13, canvas = 7, total = prefix + canvas;
  AttnCase all = make_case(rng, n_heads, n_kv, hd, total, total);
  for (int64_t j = 0; j < total; ++j) all.key_group[j] = int32_t(std::min(j, prefix));
  for (int64_t i = 0; i < total; ++i) all.query_group[i] = int32_t(std::min(i, prefix));
  ThreadPool pool(2);
  const auto full = all.run(&pool);

  // Cache layout: capacity 64; the prefix keys, then 5 stale rows (group 1000, invisible), then the
  // canvas keys; queries are only the canvas rows.
  const int64_t stale = 5, capacity = 64, n_keys = prefix + stale + canvas;
  AttnCase cached = make_case(rng, n_heads, n_kv, hd, canvas, n_keys, capacity);
  std::vector<int64_t> slot(total);
  for (int64_t j = 0; j < total; ++j) slot[j] = j < prefix ? j : j + stale;
  for (int kv = 0; kv < n_kv; ++kv)
    for (int64_t j = 0; j < total; ++j) {
      std::copy_n(&all.k[kv * all.stride() + j * hd], hd, &cached.k[kv * cached.stride() + slot[j] * hd]);
      std::copy_n(&all.v[kv * all.stride() + j * hd], hd, &cached.v[kv * cached.stride() + slot[j] * hd]);
    }
  for (int64_t j = 0; j < n_keys; ++j) cached.key_group[j] = 1000;
  for (int64_t j = 0; j < total; ++j) cached.key_group[slot[j]] = all.key_group[j];
  std::copy_n(&all.q[prefix * all.ldq()], canvas * all.ldq(), cached.q.data());
  std::fill(cached.query_group.begin(), cached.query_group.end(), int32_t(prefix));
  const auto part = cached.run(nullptr);
  const std::vector<float> want(full.begin() + prefix * all.ldq(), full.end());
  EXPECT_TRUE(bitwise_equal(part, want));
  // And the prefix queries alone over the cache (causal) match too.
  AttnCase prefix_only = cached;
  prefix_only.n_q = prefix;
  prefix_only.q.assign(all.q.begin(), all.q.begin() + prefix * all.ldq());
  prefix_only.query_group.assign(all.query_group.begin(), all.query_group.begin() + prefix);
  prefix_only.window_start.assign(prefix, 0);
  const auto pre = prefix_only.run(&pool);
  EXPECT_TRUE(bitwise_equal(pre, std::vector<float>(full.begin(), full.begin() + prefix * all.ldq())));
}

TEST_P(OpsLevel, AttentionMatchesReferenceOnRandomShapes) {
  Rng rng(14);
  ThreadPool pool(3);
  for (int trial = 0; trial < 30; ++trial) {
    const int n_kv = 1 + int(rng.below(3)), n_heads = n_kv * (1 + int(rng.below(3)));
    const int hd = 1 + int(rng.below(150));
    const int64_t n_keys = 1 + int64_t(rng.below(70)), n_q = 1 + int64_t(rng.below(std::min<int64_t>(n_keys, 9)));
    AttnCase c = make_case(rng, n_heads, n_kv, hd, n_q, n_keys, n_keys + int64_t(rng.below(4)));
    set_causal(c, 1 + int(rng.below(4)));
    if (rng.below(2)) set_window(c, 1 + int64_t(rng.below(20)));
    if (rng.below(3) == 0) c.shape.softcap = 1.f + float(rng.uniform() * 30);
    const auto got = c.run(&pool), ref = c.run_reference();
    ASSERT_TRUE(all_close(got.data(), ref.data(), int64_t(got.size()), 1e-5, 1e-5))
        << "trial " << trial << " heads " << n_heads << "/" << n_kv << " dim " << hd << " keys " << n_keys;
  }
}

// NaN in, NaN out, at every level as in the scalar code (issue 35): the vector exp clamped NaN to a
// finite value, so a NaN score got a finite softmax weight and a NaN logit vanished from the sums, and
// avx2 / avx512 printed text where scalar stopped with "logits are not finite". Rows of every tail
// length, with the NaN in the vector body and in the tail.
TEST_P(OpsLevel, NaNPropagatesThroughEveryReduction) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Rng rng(12);
  for (int64_t n : {1, 7, 16, 33, 300}) {
    for (int64_t at : {int64_t(0), n / 2, n - 1}) {
      auto x = random_vector(rng, n, 3.0);
      x[size_t(at)] = nan;
      const std::string what = "n=" + std::to_string(n) + " NaN at " + std::to_string(at);
      std::vector<float> out(static_cast<size_t>(n));
      softmax(x.data(), n, out.data());
      EXPECT_TRUE(std::isnan(out[0])) << "softmax " << what;
      log_softmax(x.data(), n, out.data());
      EXPECT_TRUE(std::isnan(out[0])) << "log_softmax " << what;
      EXPECT_FALSE(std::isfinite(logsumexp(x.data(), n))) << "logsumexp " << what;  // -inf for a row of NaN alone
      EXPECT_TRUE(std::isnan(entropy(x.data(), n))) << "entropy " << what;
      EXPECT_FALSE(std::isfinite(row_stats(x.data(), n).logsumexp)) << "row_stats " << what;
    }
  }
  // One NaN in one query head: that head's output is NaN (its scores all are), the other head's is not.
  for (int64_t n_keys : {1, 5, 40}) {
    AttnCase c = make_case(rng, 2, 1, 24, 1, n_keys);
    c.q[3] = nan;  // head 0
    const auto out = c.run(nullptr), ref = c.run_reference();
    for (int e = 0; e < 24; ++e) {
      EXPECT_TRUE(std::isnan(out[size_t(e)])) << "keys " << n_keys << " dim " << e;
      EXPECT_TRUE(std::isnan(ref[size_t(e)])) << "reference, keys " << n_keys << " dim " << e;
      EXPECT_TRUE(std::isfinite(out[size_t(24 + e)])) << "keys " << n_keys << " dim " << e;
    }
  }
}

TEST(Ops, AttentionRejectsBadShapes) {
  AttentionShape s;
  s.n_heads = 6;
  s.n_kv_heads = 4;
  s.head_dim = 8;
  float buf[64] = {};
  EXPECT_ANY_THROW(attention(buf, 1, 48, buf, buf, 1, 8, AttentionMask{}, s, buf, 48, nullptr));
}

}  // namespace
}  // namespace canvas
