// Autograd tape: every op's backward against central finite differences, and forwards against the
// inference kernels.
#include "train/tape.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "core/error.h"
#include "core/rng.h"
#include "ops/ops.h"
#include "train_test_util.h"

namespace canvas::train {
namespace {

struct Matrix {
  int64_t rows = 0, cols = 0;
  std::vector<float> data;
};

Matrix random_matrix(Rng& rng, int64_t rows, int64_t cols, double std = 1.0) {
  Matrix m{rows, cols, std::vector<float>(size_t(rows * cols))};
  for (float& v : m.data) v = float(rng.normal() * std);
  return m;
}

Parameter random_parameter(Rng& rng, const std::string& name, std::vector<int64_t> shape, double std = 1.0,
                           double mean = 0.0) {
  Parameter p(name, std::move(shape));
  for (float& v : p.value) v = float(mean + rng.normal() * std);
  return p;
}

// Builds an op graph from tape inputs (one per Matrix, in order) and returns its output.
using Graph = std::function<Var(Tape&, const std::vector<Var>&)>;

// The scalar the check differentiates: sum(out * probe).
using test::probe_sum;

struct CheckResult {
  double worst = 0;   // max |numeric - analytic| / tolerance; <= 1 passes
  std::string where;  // the worst element
  int64_t checked = 0;
};

// Compares the tape's gradients of sum(graph(inputs) * probe) with respect to every input and every
// parameter against central differences (eps), element by element: pass when
// |numeric - analytic| <= rtol * max(|numeric|, |analytic|) + atol, atol = rtol * (largest |analytic|
// of that tensor) / 4 + 1e-5, i.e. relative for the large entries, and a floor scaled by the tensor
// for entries that are tiny next to it (where float rounding of the loss dominates).
CheckResult check_gradients(std::vector<Matrix> inputs, const std::vector<Parameter*>& params,
                            const Graph& graph, ThreadPool* pool = nullptr, double eps = 1e-3,
                            double rtol = 1e-2) {
  Rng rng(1234);
  std::vector<float> probe;
  auto loss_of = [&](bool with_backward, std::vector<std::vector<float>>* input_grads) {
    Tape tape(pool);
    std::vector<Var> vars;
    for (const Matrix& m : inputs) vars.push_back(tape.input(m.rows, m.cols, m.data.data(), true));
    Var out = graph(tape, vars);
    if (probe.empty()) {
      probe.resize(size_t(tape.size(out)));
      for (float& v : probe) v = float(rng.normal());
    }
    double loss = 0;
    for (int64_t i = 0; i < tape.size(out); ++i) loss += double(tape.value(out)[i]) * probe[size_t(i)];
    if (with_backward) {
      tape.backward(probe_sum(tape, out, probe));
      for (size_t i = 0; i < vars.size(); ++i) {
        const float* g = tape.grad_or_null(vars[i]);
        (*input_grads)[i] = g ? std::vector<float>(g, g + tape.size(vars[i]))
                              : std::vector<float>(inputs[i].data.size(), 0.f);
      }
    }
    return loss;
  };
  for (Parameter* p : params) p->grad.clear();
  std::vector<std::vector<float>> input_grads(inputs.size());
  loss_of(true, &input_grads);

  CheckResult result;
  auto compare = [&](const std::string& name, std::vector<float>& values,
                     const std::vector<float>& analytic) {
    double scale = 0;
    for (float g : analytic) scale = std::max(scale, double(std::fabs(g)));
    const double atol = rtol * scale / 4 + 1e-5;
    for (size_t i = 0; i < values.size(); ++i) {
      const float saved = values[i];
      values[i] = float(saved + eps);
      const double plus = loss_of(false, nullptr);
      values[i] = float(saved - eps);
      const double minus = loss_of(false, nullptr);
      values[i] = saved;
      const double numeric = (plus - minus) / (2 * eps);
      const double a = analytic.empty() ? 0.0 : analytic[i];
      const double ratio =
          std::fabs(numeric - a) / (rtol * std::max(std::fabs(numeric), std::fabs(a)) + atol);
      ++result.checked;
      if (ratio > result.worst) {
        result.worst = ratio;
        result.where = name + "[" + std::to_string(i) + "]: numeric " + std::to_string(numeric) +
                       ", analytic " + std::to_string(a);
      }
    }
  };
  for (size_t i = 0; i < inputs.size(); ++i)
    compare("input " + std::to_string(i), inputs[i].data, input_grads[i]);
  for (Parameter* p : params) {
    const std::vector<float> analytic = p->grad;
    compare(p->name, p->value, analytic);
  }
  return result;
}

testing::AssertionResult gradients_ok(const CheckResult& r) {
  if (r.checked > 0 && r.worst <= 1.0) return testing::AssertionSuccess();
  return testing::AssertionFailure() << "worst error " << r.worst << " x tolerance at " << r.where << " ("
                                     << r.checked << " elements checked)";
}
#define EXPECT_GRADIENTS_OK(result) EXPECT_TRUE(gradients_ok(result))

// ---- the checker itself can fail ---------------------------------------------------------------

// y = x^2 with a backward that is off by `error` (relative) on element `bad` only (every element when
// bad < 0).
Var square_with_error(Tape& tape, Var x, double error, int64_t bad) {
  Var y = tape.make(tape.rows(x), tape.cols(x), true);
  for (int64_t i = 0; i < tape.size(x); ++i) tape.value(y)[i] = tape.value(x)[i] * tape.value(x)[i];
  tape.record([&tape, x, y, error, bad] {
    for (int64_t i = 0; i < tape.size(x); ++i)
      tape.grad(x)[i] +=
          float(tape.grad_or_null(y)[i] * 2 * tape.value(x)[i] * (i == bad || bad < 0 ? 1 + error : 1.0));
  });
  return y;
}

TEST(TapeGradCheck, CatchesAWrongBackward) {
  Rng rng(1);
  const Matrix x = random_matrix(rng, 3, 4);
  auto graph = [](double error, int64_t bad) {
    return
        [error, bad](Tape& t, const std::vector<Var>& in) { return square_with_error(t, in[0], error, bad); };
  };
  EXPECT_LE(check_gradients({x}, {}, graph(0.0, -1)).worst, 1.0);
  EXPECT_GT(check_gradients({x}, {}, graph(0.03, -1)).worst, 1.0);  // 3% off everywhere
  EXPECT_GT(check_gradients({x}, {}, graph(0.25, 5)).worst, 1.0);   // a wrong factor on one element
  EXPECT_GT(check_gradients({x}, {}, graph(-1.0, 5)).worst, 1.0);   // one contribution missing
}

// ---- per-op checks -----------------------------------------------------------------------------

TEST(TapeOps, Embedding) {
  Rng rng(2);
  Parameter table = random_parameter(rng, "table", {5, 7});
  const std::vector<int32_t> ids{3, 0, 3, 6, 1};  // repeated id: gradients must add
  EXPECT_GRADIENTS_OK(check_gradients(
      {}, {&table}, [&](Tape& t, const std::vector<Var>&) { return embedding(t, table, ids, 1.5f); }));
  Tape t;
  Var y = embedding(t, table, ids, 1.5f);
  EXPECT_FLOAT_EQ(t.value(y)[2 * 5 + 4], 1.5f * table.value[3 * 5 + 4]);
  EXPECT_THROW(embedding(t, table, {7}, 1.f), Error);
}

TEST(TapeOps, Linear) {
  Rng rng(3);
  Parameter w = random_parameter(rng, "w", {6, 5});
  const Matrix x = random_matrix(rng, 4, 6);
  EXPECT_GRADIENTS_OK(
      check_gradients({x}, {&w}, [&](Tape& t, const std::vector<Var>& in) { return linear(t, in[0], w); }));
  // Matrix 1 of a stack of 3: only its slice of the gradient may be non-zero.
  Parameter stack = random_parameter(rng, "stack", {6, 5, 3});
  EXPECT_GRADIENTS_OK(check_gradients(
      {x}, {&stack}, [&](Tape& t, const std::vector<Var>& in) { return linear(t, in[0], stack, 1); }));
  for (int64_t i = 0; i < stack.size(); ++i) {
    if (i < 30 || i >= 60) {
      EXPECT_EQ(stack.grad[size_t(i)], 0.f);
    }
  }
  Tape t;
  EXPECT_THROW(linear(t, t.input(2, 5), w), Error);
}

TEST(TapeOps, LinearLargerThanOneTile) {
  // Sizes that exercise the kernels' tails and the pool.
  ThreadPool pool(2);
  Rng rng(4);
  Parameter w = random_parameter(rng, "w", {37, 19}, 0.3);
  const Matrix x = random_matrix(rng, 23, 37);
  EXPECT_GRADIENTS_OK(check_gradients(
      {x}, {&w}, [&](Tape& t, const std::vector<Var>& in) { return linear(t, in[0], w); }, &pool));
}

TEST(TapeOps, AddAndBias) {
  Rng rng(5);
  Parameter bias = random_parameter(rng, "bias", {4});
  const Matrix a = random_matrix(rng, 3, 4), b = random_matrix(rng, 3, 4);
  EXPECT_GRADIENTS_OK(check_gradients({a, b}, {&bias}, [&](Tape& t, const std::vector<Var>& in) {
    // a used twice: its gradient sums both uses.
    return add_bias(t, add(t, add(t, in[0], in[1]), in[0]), bias);
  }));
}

TEST(TapeOps, RmsNorm) {
  Rng rng(6);
  Parameter w = random_parameter(rng, "w", {8}, 0.2, 1.0);
  const Matrix x = random_matrix(rng, 3, 8);
  EXPECT_GRADIENTS_OK(check_gradients(
      {x}, {&w}, [&](Tape& t, const std::vector<Var>& in) { return rms_norm(t, in[0], &w, 1e-5f); }));
  EXPECT_GRADIENTS_OK(check_gradients(
      {x}, {}, [&](Tape& t, const std::vector<Var>& in) { return rms_norm(t, in[0], nullptr, 1e-5f); }));
}

TEST(TapeOps, RopeBothLayouts) {
  Rng rng(7);
  const Matrix x = random_matrix(rng, 4, 2 * 8);  // 2 heads of 8
  const std::vector<int32_t> pos{0, 3, 17, 1000};
  for (RopeLayout layout : {RopeLayout::Normal, RopeLayout::Neox}) {
    for (int rot : {0, 4}) {  // full and partial rotation
      RopeParams p;
      p.layout = layout;
      p.head_dim = 8;
      p.rot_dims = rot;
      p.theta = 100.f;
      EXPECT_GRADIENTS_OK(check_gradients(
          {x}, {}, [&](Tape& t, const std::vector<Var>& in) { return rope(t, in[0], 2, pos, p); }))
          << "layout " << int(layout) << " rot " << rot;
      // Forward equals the inference kernel.
      Tape t;
      Var y = rope(t, t.input(4, 16, x.data.data()), 2, pos, p);
      std::vector<float> expect = x.data;
      canvas::rope(expect.data(), 4, 2, pos.data(), p);
      for (size_t i = 0; i < expect.size(); ++i) EXPECT_EQ(t.value(y)[i], expect[i]);
    }
  }
}

// ---- attention ---------------------------------------------------------------------------------

struct AttentionCase {
  const char* name;
  int n_heads, n_kv_heads;
  int64_t n_sequences, length;
  std::vector<int32_t> groups;
  float softcap = 0;
};

std::vector<AttentionCase> attention_cases() {
  std::vector<AttentionCase> cases;
  cases.push_back({"bidirectional", 2, 2, 1, 5, {}});
  cases.push_back({"causal-gqa", 4, 2, 1, 5, {0, 1, 2, 3, 4}});
  cases.push_back({"block-causal-two-sequences", 2, 1, 2, 5, {0, 0, 1, 1, 1, 0, 1, 1, 2, 2}});
  cases.push_back({"mixed-two-sequences-softcap", 4, 2, 2, 4, {0, 0, 0, 0, 0, 1, 2, 3}, 1.5f});
  return cases;
}

TEST(TapeAttention, GradientsUnderEveryMask) {
  const int head_dim = 4;
  for (const AttentionCase& c : attention_cases()) {
    Rng rng(8);
    const int64_t rows = c.n_sequences * c.length;
    const Matrix q = random_matrix(rng, rows, c.n_heads * head_dim, 0.8);
    const Matrix k = random_matrix(rng, rows, c.n_kv_heads * head_dim, 0.8);
    const Matrix v = random_matrix(rng, rows, c.n_kv_heads * head_dim);
    AttentionShape shape;
    shape.n_heads = c.n_heads;
    shape.n_kv_heads = c.n_kv_heads;
    shape.head_dim = head_dim;
    shape.scale = 0.5f;
    shape.softcap = c.softcap;
    const SequenceLayout layout{c.n_sequences, c.length, c.groups};
    EXPECT_GRADIENTS_OK(check_gradients({q, k, v}, {}, [&](Tape& t, const std::vector<Var>& in) {
      return attention(t, in[0], in[1], in[2], shape, layout);
    })) << c.name;
  }
}

TEST(TapeAttention, ForwardMatchesInferenceKernelPerSequence) {
  const int head_dim = 8;
  ThreadPool pool(2);
  for (const AttentionCase& c : attention_cases()) {
    Rng rng(9);
    const int64_t rows = c.n_sequences * c.length, q_width = c.n_heads * head_dim,
                  kv_width = c.n_kv_heads * head_dim;
    const Matrix q = random_matrix(rng, rows, q_width), k = random_matrix(rng, rows, kv_width),
                 v = random_matrix(rng, rows, kv_width);
    AttentionShape shape{c.n_heads, c.n_kv_heads, head_dim, 1.f / std::sqrt(float(head_dim)), c.softcap};
    Tape t(&pool);
    Var out = attention(t, t.input(rows, q_width, q.data.data()), t.input(rows, kv_width, k.data.data()),
                        t.input(rows, kv_width, v.data.data()), shape, {c.n_sequences, c.length, c.groups});
    for (int64_t s = 0; s < c.n_sequences; ++s) {
      // The KV-cache layout canvas::attention reads: [kv head][position][head_dim].
      std::vector<float> kc(size_t(kv_width * c.length)), vc(kc.size()), expect(size_t(c.length * q_width));
      for (int64_t j = 0; j < c.length; ++j)
        for (int64_t h = 0; h < c.n_kv_heads; ++h)
          for (int64_t d = 0; d < head_dim; ++d) {
            kc[size_t((h * c.length + j) * head_dim + d)] =
                k.data[size_t((s * c.length + j) * kv_width + h * head_dim + d)];
            vc[size_t((h * c.length + j) * head_dim + d)] =
                v.data[size_t((s * c.length + j) * kv_width + h * head_dim + d)];
          }
      AttentionMask mask;
      if (!c.groups.empty()) mask.key_group = mask.query_group = c.groups.data() + s * c.length;
      reference::attention(q.data.data() + s * c.length * q_width, c.length, q_width, kc.data(), vc.data(),
                           c.length, c.length * head_dim, mask, shape, expect.data(), q_width);
      for (int64_t i = 0; i < c.length * q_width; ++i)
        EXPECT_NEAR(t.value(out)[s * c.length * q_width + i], expect[size_t(i)], 2e-6) << c.name;
    }
  }
}

TEST(TapeAttention, ResultsDoNotDependOnThreadCount) {
  Rng rng(10);
  const AttentionCase c = attention_cases()[3];
  const int head_dim = 8;
  const int64_t rows = c.n_sequences * c.length;
  Parameter wq = random_parameter(rng, "wq", {8, c.n_heads * head_dim}, 0.3);
  Parameter wk = random_parameter(rng, "wk", {8, c.n_kv_heads * head_dim}, 0.3);
  const Matrix x = random_matrix(rng, rows, 8);
  AttentionShape shape{c.n_heads, c.n_kv_heads, head_dim, 0.35f, 0};
  std::vector<std::vector<float>> grads;
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    Tape t(&pool);
    wq.grad.clear();
    wk.grad.clear();
    Var xin = t.input(rows, 8, x.data.data(), true);
    Var k = linear(t, xin, wk);
    Var out = attention(t, linear(t, xin, wq), k, k, shape, {c.n_sequences, c.length, c.groups});
    std::vector<float> ones(size_t(t.size(out)), 1.f);
    t.backward(probe_sum(t, out, ones));
    grads.push_back(wq.grad);
    grads.back().insert(grads.back().end(), wk.grad.begin(), wk.grad.end());
    const float* gx = t.grad_or_null(xin);
    grads.back().insert(grads.back().end(), gx, gx + t.size(xin));
  }
  EXPECT_EQ(grads[0], grads[1]);
}

// ---- MLP activations, MoE ----------------------------------------------------------------------

TEST(TapeOps, GatedActivations) {
  Rng rng(11);
  Matrix gate = random_matrix(rng, 3, 5, 2.0), up = random_matrix(rng, 3, 5);
  for (Activation act : {Activation::Silu, Activation::GeluTanh}) {
    EXPECT_GRADIENTS_OK(check_gradients(
        {gate, up}, {},
        [&](Tape& t, const std::vector<Var>& in) { return gated_activation(t, in[0], in[1], act); }))
        << "activation " << int(act);
  }
}

TEST(TapeOps, RouterTopK) {
  // Logits spread widely so a 1e-3 nudge never changes which experts are selected.
  for (bool renormalise : {false, true}) {
    Matrix logits{4, 5, {0.0f,  1.0f,  2.5f,  -1.0f, 0.4f,   //
                         3.0f,  -0.5f, 0.2f,  1.6f,  -2.0f,  //
                         -1.0f, -0.2f, 0.7f,  2.2f,  1.3f,   //
                         0.9f,  0.1f,  -0.9f, -0.1f, 2.0f}};
    EXPECT_GRADIENTS_OK(check_gradients(
        {logits}, {},
        [&](Tape& t, const std::vector<Var>& in) { return route_top_k(t, in[0], 2, renormalise).weights; }))
        << "renormalise " << renormalise;
    Tape t;
    Routing r = route_top_k(t, t.input(4, 5, logits.data.data()), 2, renormalise);
    EXPECT_EQ(r.rows_of[2], (std::vector<int32_t>{0}));
    EXPECT_EQ(r.rows_of[4], (std::vector<int32_t>{2, 3}));
    const float* w = t.value(r.weights);
    EXPECT_EQ(w[0 * 5 + 0], 0.f);
    if (renormalise) {
      EXPECT_NEAR(w[0 * 5 + 2] + w[0 * 5 + 1], 1.0, 1e-6);
    }
  }
}

TEST(TapeOps, GatherAndCombineExperts) {
  Rng rng(12);
  const Matrix x = random_matrix(rng, 4, 3);
  const Matrix logits{4, 3, {2.0f, 0.0f, -1.5f, -1.0f, 1.0f, 2.5f, 0.5f, 2.0f, -1.0f, 1.8f, -1.2f, 0.4f}};
  Parameter experts = random_parameter(rng, "experts", {3, 3, 3});
  EXPECT_GRADIENTS_OK(check_gradients({x, logits}, {&experts}, [&](Tape& t, const std::vector<Var>& in) {
    Routing r = route_top_k(t, in[1], 2, true);
    std::vector<Var> out(3);
    for (int e = 0; e < 3; ++e)
      if (!r.rows_of[size_t(e)].empty())
        out[size_t(e)] = linear(t, gather_rows(t, in[0], r.rows_of[size_t(e)]), experts, e);
    return combine_experts(t, out, r);
  }));
}

// ---- head ----------------------------------------------------------------------------------------

TEST(TapeOps, Softcap) {
  Rng rng(13);
  const Matrix x = random_matrix(rng, 2, 6, 4.0);
  EXPECT_GRADIENTS_OK(
      check_gradients({x}, {}, [&](Tape& t, const std::vector<Var>& in) { return softcap(t, in[0], 3.f); }));
}

TEST(TapeOps, CrossEntropy) {
  Rng rng(14);
  const Matrix logits = random_matrix(rng, 5, 7, 2.0);
  const std::vector<int32_t> targets{3, -1, 0, 6, 2};  // row 1 has weight 0: its target is never read
  const std::vector<float> weights{1.f, 0.f, 2.5f, 0.5f, 1.f};
  EXPECT_GRADIENTS_OK(check_gradients({logits}, {}, [&](Tape& t, const std::vector<Var>& in) {
    return cross_entropy(t, in[0], targets, weights, 4.f);
  }));
  // The value: sum_i w_i (logsumexp - x_target) / normaliser, computed directly.
  double expect = 0;
  for (int r = 0; r < 5; ++r) {
    if (weights[size_t(r)] == 0) continue;
    double sum = 0;
    for (int j = 0; j < 7; ++j) sum += std::exp(double(logits.data[size_t(r * 7 + j)]));
    expect += weights[size_t(r)] * (std::log(sum) - logits.data[size_t(r * 7 + targets[size_t(r)])]);
  }
  Tape t;
  Var x = t.input(5, 7, logits.data.data(), true);
  Var loss = cross_entropy(t, x, targets, weights, 4.f);
  EXPECT_NEAR(t.value(loss)[0], expect / 4, 1e-5);
  t.backward(loss);
  for (int j = 0; j < 7; ++j) EXPECT_EQ(t.grad_or_null(x)[7 + j], 0.f);  // the skipped row
  // Huge logits stay finite (fused log-softmax).
  Tape t2;
  std::vector<float> big{1000.f, -1000.f, 999.f};
  Var l2 = cross_entropy(t2, t2.input(1, 3, big.data()), {2}, {1.f}, 1.f);
  EXPECT_NEAR(t2.value(l2)[0], std::log(1 + std::exp(1.0)), 1e-5);
  EXPECT_THROW(cross_entropy(t2, t2.input(1, 3, big.data()), {3}, {1.f}, 1.f), Error);
}

TEST(TapeOps, GradientsDisabledRecordsNothing) {
  Rng rng(16);
  Parameter w = random_parameter(rng, "w", {3, 2});
  const Matrix x = random_matrix(rng, 2, 3);
  Tape on, off;
  off.set_grad_enabled(false);
  Var a = cross_entropy(on, linear(on, on.input(2, 3, x.data.data(), true), w), {0, 1}, {1.f, 1.f}, 1.f);
  Var b = cross_entropy(off, linear(off, off.input(2, 3, x.data.data(), true), w), {0, 1}, {1.f, 1.f}, 1.f);
  EXPECT_EQ(on.value(a)[0], off.value(b)[0]);
  EXPECT_TRUE(on.requires_grad(a));
  EXPECT_FALSE(off.requires_grad(b));
  EXPECT_THROW(off.backward(b), Error);
}

TEST(TapeOps, ParametersAccumulateAcrossBackwardPasses) {
  Rng rng(15);
  Parameter w = random_parameter(rng, "w", {3, 2});
  const Matrix x = random_matrix(rng, 2, 3);
  std::vector<float> first;
  for (int pass = 0; pass < 2; ++pass) {
    Tape t;
    Var y = linear(t, t.input(2, 3, x.data.data()), w);
    t.backward(cross_entropy(t, y, {0, 1}, {1.f, 1.f}, 1.f));
    if (pass == 0) first = w.grad;
  }
  for (size_t i = 0; i < first.size(); ++i) EXPECT_FLOAT_EQ(w.grad[i], 2 * first[i]);
  w.zero_grad();
  for (float g : w.grad) EXPECT_EQ(g, 0.f);
}

// ---- Gemma 4 pieces ------------------------------------------------------------------------------

// Sliding window (encoder rows: p - window + 1; a canvas's rows: its first position - window + 1) with
// causal and block groups, forward against the inference kernel's window_start and gradients.
TEST(TapeGemma, SlidingWindowAttention) {
  const int head_dim = 4, n_heads = 2, n_kv = 1;
  const int64_t T = 7;
  Rng rng(21);
  const Matrix q = random_matrix(rng, T, n_heads * head_dim, 0.8);
  const Matrix k = random_matrix(rng, T, n_kv * head_dim, 0.8);
  const Matrix v = random_matrix(rng, T, n_kv * head_dim);
  AttentionShape shape;
  shape.n_heads = n_heads;
  shape.n_kv_heads = n_kv;
  shape.head_dim = head_dim;
  shape.scale = 0.7f;
  SequenceLayout layout(1, T, {0, 1, 2, 3, 4, 5, 5});
  layout.positions = {0, 1, 2, 3, 4, 5, 6};
  const int32_t window = 3;
  for (int64_t i = 0; i < T; ++i) layout.window_start.push_back(i < 5 ? int32_t(i) - window + 1 : 5 - window + 1);
  EXPECT_GRADIENTS_OK(check_gradients({q, k, v}, {}, [&](Tape& t, const std::vector<Var>& in) {
    return attention(t, in[0], in[1], in[2], shape, layout);
  }));
  // Forward: the inference kernel with the same groups and window starts (keys in the KV-cache layout).
  Tape t;
  const Var out = attention(t, t.input(T, n_heads * head_dim, q.data.data()), t.input(T, head_dim, k.data.data()),
                            t.input(T, head_dim, v.data.data()), shape, layout);
  std::vector<float> expect(size_t(T * n_heads * head_dim));
  AttentionMask mask;
  mask.key_group = layout.groups.data();
  mask.query_group = layout.groups.data();
  mask.window_start = layout.window_start.data();
  canvas::attention(q.data.data(), T, n_heads * head_dim, k.data.data(), v.data.data(), T, T * head_dim, mask, shape,
                    expect.data(), n_heads * head_dim, nullptr);
  for (size_t i = 0; i < expect.size(); ++i) EXPECT_NEAR(t.value(out)[i], expect[i], 1e-5) << i;
  // The window is live: without it row 4 (which the window cuts) differs.
  SequenceLayout open = layout;
  open.window_start.clear();
  Tape u;
  const Var wide = attention(u, u.input(T, n_heads * head_dim, q.data.data()), u.input(T, head_dim, k.data.data()),
                             u.input(T, head_dim, v.data.data()), shape, open);
  double diff = 0;
  for (int64_t j = 0; j < n_heads * head_dim; ++j)
    diff = std::max(diff, double(std::fabs(u.value(wide)[4 * n_heads * head_dim + j] - t.value(out)[4 * n_heads * head_dim + j])));
  EXPECT_GT(diff, 1e-3);
}

// q / k norm: RMSNorm with a weight over each head (rows read as [rows * heads, head_dim]).
TEST(TapeGemma, PerHeadNorm) {
  Rng rng(22);
  Parameter w = random_parameter(rng, "q_norm", {4}, 0.2, 1.0);
  const Matrix x = random_matrix(rng, 3, 3 * 4);
  EXPECT_GRADIENTS_OK(check_gradients({x}, {&w}, [&](Tape& t, const std::vector<Var>& in) {
    return reshape(t, rms_norm(t, reshape(t, in[0], 9, 4), &w, 1e-6f), 3, 12);
  }));
}

// Proportional RoPE: only the first active_pairs frequency pairs rotate.
TEST(TapeGemma, ProportionalRope) {
  Rng rng(23);
  const Matrix x = random_matrix(rng, 4, 2 * 8);
  const std::vector<int32_t> pos{0, 5, 9, 300};
  RopeParams p;
  p.layout = RopeLayout::Neox;
  p.head_dim = 8;
  p.rot_dims = 8;
  p.active_pairs = 2;
  p.theta = 1000.f;
  EXPECT_GRADIENTS_OK(
      check_gradients({x}, {}, [&](Tape& t, const std::vector<Var>& in) { return rope(t, in[0], 2, pos, p); }));
  Tape t;
  const Var y = rope(t, t.input(4, 16, x.data.data()), 2, pos, p);
  // Pairs 2 and 3 of each head (columns 2, 3 and 6, 7 in the split-half layout) are left alone.
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t col : {2, 3, 6, 7, 10, 11, 14, 15}) EXPECT_EQ(t.value(y)[r * 16 + col], x.data[size_t(r * 16 + col)]);
}

// MoE top-k routing with per-expert scales and a fused [gate; up] expert matrix, beside a dense branch:
// the whole Gemma 4 feed-forward of one layer.
TEST(TapeGemma, MoeTopKWithDenseBranch) {
  Rng rng(24);
  const int64_t H = 6, E = 4, I = 3, F = 5;
  Parameter router = random_parameter(rng, "router", {H, E}, 2.0);
  Parameter router_scale = random_parameter(rng, "router.scale", {H}, 0.2, 1.0);
  Parameter expert_scale = random_parameter(rng, "per_expert_scale", {E}, 0.2, 1.0);
  Parameter gate_up = random_parameter(rng, "gate_up_exps", {H, 2 * I, E}, 0.5);
  Parameter down = random_parameter(rng, "down_exps", {I, H, E}, 0.5);
  Parameter gate = random_parameter(rng, "gate", {H, F}, 0.5), up = random_parameter(rng, "up", {H, F}, 0.5);
  Parameter dense_down = random_parameter(rng, "down", {F, H}, 0.5);
  const Matrix x = random_matrix(rng, 5, H);
  EXPECT_GRADIENTS_OK(check_gradients(
      {x}, {&router, &router_scale, &expert_scale, &gate_up, &down, &gate, &up, &dense_down},
      [&](Tape& t, const std::vector<Var>& in) {
        Var h = in[0];
        Var dense = linear(t, gated_activation(t, linear(t, h, gate), linear(t, h, up), Activation::GeluTanh),
                           dense_down);
        Var router_in = scale(t, rms_norm(t, h, &router_scale, 1e-6f), 1.f / std::sqrt(float(H)));
        Routing routing = route_top_k(t, linear(t, router_in, router), 2, true);
        routing.weights = scale_columns(t, routing.weights, expert_scale);
        std::vector<Var> outs(static_cast<size_t>(E));
        for (int64_t e = 0; e < E; ++e) {
          if (routing.rows_of[size_t(e)].empty()) continue;
          Var gu = linear(t, gather_rows(t, h, routing.rows_of[size_t(e)]), gate_up, e);
          Var act = gated_activation(t, slice_columns(t, gu, 0, I), slice_columns(t, gu, I, 2 * I), Activation::GeluTanh);
          outs[size_t(e)] = linear(t, act, down, e);
        }
        return add(t, dense, combine_experts(t, outs, routing));
      }));
}

// Layer scalars per view, and the decoder rows' input replaced in place (the self-conditioning MLP's
// output then the decoder norm).
TEST(TapeGemma, LayerScalarsAndDecoderRows) {
  Rng rng(25);
  Parameter encoder = random_parameter(rng, "enc", {1}, 0.1, 0.8);
  Parameter decoder = random_parameter(rng, "dec", {1}, 0.1, 1.2);
  const Matrix x = random_matrix(rng, 4, 5), z = random_matrix(rng, 2, 5);
  const std::vector<uint8_t> views{0, 1, 0, 1};
  EXPECT_GRADIENTS_OK(check_gradients({x}, {&encoder, &decoder}, [&](Tape& t, const std::vector<Var>& in) {
    return scale_rows_by_scalar(t, in[0], encoder, &decoder, views);
  }));
  EXPECT_GRADIENTS_OK(check_gradients({x, z}, {}, [&](Tape& t, const std::vector<Var>& in) {
    return replace_rows(t, in[0], {3, 1}, rms_norm(t, in[1], nullptr, 1e-6f));
  }));
}

// The self-conditioning MLP: soft embedding of fixed probabilities, pre-norm, GeGLU MLP.
TEST(TapeGemma, SelfConditioningMlp) {
  Rng rng(26);
  const int64_t V = 7, H = 4, F = 6;
  Parameter table = random_parameter(rng, "E", {H, V}), norm = random_parameter(rng, "pre_norm", {H}, 0.2, 1.0);
  Parameter gate = random_parameter(rng, "gate", {H, F}, 0.5), up = random_parameter(rng, "up", {H, F}, 0.5);
  Parameter down = random_parameter(rng, "down", {F, H}, 0.5);
  Matrix probs = random_matrix(rng, 3, V);
  for (float& p : probs.data) p = std::fabs(p);
  EXPECT_GRADIENTS_OK(check_gradients({probs}, {&table, &norm, &gate, &up, &down}, [&](Tape& t, const std::vector<Var>& in) {
    Var h = rms_norm(t, soft_embedding(t, in[0], table, 2.f), &norm, 1e-6f);
    return linear(t, gated_activation(t, linear(t, h, gate), linear(t, h, up), Activation::GeluTanh), down);
  }));
}

}  // namespace
}  // namespace canvas::train
