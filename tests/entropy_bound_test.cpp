// The entropy-bound sampler loop on fake models with hand-made logits: acceptance rule, temperature
// schedule, self-conditioning hand-off, adaptive stop, argmax commit, EOS / pad, multi-canvas
// continuation, determinism, tokens per forward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <set>

#include "core/error.h"
#include "decode/entropy_bound.h"

namespace canvas {
namespace {

// A model that returns logits computed by `make` and records everything the sampler hands it.
struct FakeModel {
  int64_t vocab = 16, length = 8;
  // (decode call index over the whole generation, step index within the canvas, canvas, logits row-major)
  std::function<void(int64_t, int64_t, const std::vector<int32_t>&, std::vector<float>&)> make;
  std::vector<std::vector<int32_t>> canvases;    // canvas at each decode call
  std::vector<std::vector<float>> self_conds;    // copy of self_cond at each call (empty: nullptr)
  std::vector<bool> self_cond_null;
  std::vector<std::vector<float>> logits_out;    // logits written at each call
  std::vector<std::vector<int32_t>> encoded;
  std::vector<char> log;                         // 'D' decode, 'E' encode, in call order
  std::vector<std::vector<int32_t>> rows_requested;  // decode_rows calls' rows (empty: all)
  int64_t step_in_canvas = 0;

  DiffusionModelHooks hooks() {
    DiffusionModelHooks h;
    h.vocab = vocab;
    h.decode = [this](const std::vector<int32_t>& canvas, const std::vector<float>* self_cond,
                      std::vector<float>& logits) {
      EXPECT_EQ(int64_t(canvas.size()), length);
      EXPECT_EQ(int64_t(logits.size()), length * vocab);
      EXPECT_NE(self_cond, &logits);
      if (self_cond == nullptr) step_in_canvas = 0;
      canvases.push_back(canvas);
      self_cond_null.push_back(self_cond == nullptr);
      self_conds.push_back(self_cond ? *self_cond : std::vector<float>{});
      std::fill(logits.begin(), logits.end(), 0.f);
      make(int64_t(canvases.size()) - 1, step_in_canvas, canvas, logits);
      logits_out.push_back(logits);
      log.push_back('D');
      ++step_in_canvas;
    };
    // Freeze: the same logits, cut to the requested rows (empty: all), and the rows recorded.
    h.decode_rows = [this, h](const std::vector<int32_t>& canvas, const std::vector<int32_t>& rows,
                              const std::vector<float>* self_cond, std::vector<float>& logits) {
      rows_requested.push_back(rows);
      std::vector<float> full(size_t(length * vocab)), full_self_cond;
      if (self_cond && !rows.empty()) {  // the fake model reads self_cond only to record it
        full_self_cond.assign(size_t(length * vocab), 0.f);
        for (size_t k = 0; k < rows.size(); ++k)
          std::copy_n(&(*self_cond)[k * size_t(vocab)], vocab, &full_self_cond[size_t(rows[k]) * size_t(vocab)]);
      }
      h.decode(canvas, self_cond == nullptr ? nullptr : rows.empty() ? self_cond : &full_self_cond, full);
      if (rows.empty()) {
        logits = full;
        return;
      }
      logits.resize(rows.size() * size_t(vocab));
      for (size_t k = 0; k < rows.size(); ++k)
        std::copy_n(&full[size_t(rows[k]) * size_t(vocab)], vocab, &logits[k * size_t(vocab)]);
    };
    h.encode = [this](const std::vector<int32_t>& tokens) {
      encoded.push_back(tokens);
      log.push_back('E');
    };
    return h;
  }
};

EntropyBoundParams small_params(int64_t length, int64_t steps) {
  EntropyBoundParams p;
  p.canvas_length = length;
  p.max_denoising_steps = steps;
  p.max_new_tokens = length;
  p.eos_ids = {};
  p.seed = 3;
  return p;
}

// Independent twins of the sampler's arithmetic, in double.
double test_temperature(int64_t s, int64_t n, double t_min, double t_max) { return t_min + (t_max - t_min) * s / n; }

double entropy_of(const float* z, int64_t n) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < n; ++j) m = std::max(m, double(z[j]));
  double sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += std::exp(double(z[j]) - m);
  double h = 0;
  for (int64_t j = 0; j < n; ++j) {
    const double p = std::exp(double(z[j]) - m) / sum;
    if (p > 0) h -= p * std::log(p);
  }
  return h;
}

std::vector<double> tempered_entropies(const std::vector<float>& logits, int64_t length, int64_t vocab, double T) {
  std::vector<double> h(static_cast<size_t>(length));
  std::vector<float> z(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < length; ++i) {
    for (int64_t j = 0; j < vocab; ++j) z[size_t(j)] = float(double(logits[size_t(i * vocab + j)]) / T);
    h[size_t(i)] = entropy_of(z.data(), vocab);
  }
  return h;
}

// The doc's formula read literally: sort ascending (ties by position), cumsum, accept the longest
// prefix with cumsum - H_current <= bound, at least one. `include_current` is the off-by-one variant
// cumsum <= bound, used to show the hand-made cases tell the two apart.
std::vector<int64_t> reference_accept(const std::vector<double>& h, double bound, bool include_current = false) {
  std::vector<int64_t> order(h.size());
  std::iota(order.begin(), order.end(), int64_t(0));
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return h[size_t(a)] < h[size_t(b)]; });
  std::vector<double> cumsum(h.size());
  double running = 0;
  for (size_t k = 0; k < order.size(); ++k) cumsum[k] = running += h[size_t(order[k])];
  std::vector<int64_t> out;
  for (size_t k = 0; k < order.size(); ++k) {
    const double lhs = include_current ? cumsum[k] : cumsum[k] - h[size_t(order[k])];
    if (k > 0 && !(lhs <= bound)) break;
    out.push_back(order[k]);
  }
  return out;
}

std::vector<int64_t> sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

// ---- (a) acceptance rule ------------------------------------------------------------------------

TEST(EntropyBoundAccept, HandMadeEntropies) {
  // sorted: 0.02 (1), 0.02 (3), 0.04 (4), 0.05 (2), 0.3 (0), 0.9 (5); sums before: 0, .02, .04, .08, .13
  const std::vector<float> h = {0.3f, 0.02f, 0.05f, 0.02f, 0.04f, 0.9f};
  EXPECT_EQ(entropy_bound_accept(h, 0.1f), (std::vector<int64_t>{1, 3, 4, 2}));
  // The off-by-one reading (cumsum including the current <= bound) would stop one earlier.
  const std::vector<double> hd(h.begin(), h.end());
  EXPECT_EQ(reference_accept(hd, 0.1, true), (std::vector<int64_t>{1, 3, 4}));
  // Ties broken by position, and the cut falls inside the tie group: sums before 0, .06, .12.
  EXPECT_EQ(entropy_bound_accept({0.5f, 0.06f, 0.06f, 0.06f, 0.06f}, 0.1f), (std::vector<int64_t>{1, 2}));
  // The lowest entropy alone passes whatever it is (its sum-before is 0) ...
  EXPECT_EQ(entropy_bound_accept({0.7f, 0.5f, 0.9f}, 0.1f), (std::vector<int64_t>{1}));
  // ... and the at-least-one rule holds even for a bound no sum can meet.
  EXPECT_EQ(entropy_bound_accept({0.7f, 0.5f, 0.9f}, -1.f), (std::vector<int64_t>{1}));
  EXPECT_EQ(entropy_bound_accept({0.f, 0.f, 0.f}, 0.f), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(entropy_bound_accept({0.f, 0.f, 0.f}, -1.f), (std::vector<int64_t>{0}));
}

// Rows whose only non-zero logit is a peak of the given height at token 3 (the same token in every
// row, so rows of equal height are bitwise equal and their entropies tie exactly).
void peaked_rows(const std::vector<float>& heights, int64_t vocab, std::vector<float>& logits) {
  for (size_t i = 0; i < heights.size(); ++i) logits[i * size_t(vocab) + 3] = heights[i];
}

TEST(EntropyBoundAccept, LoopAcceptsTheRuleOnTemperedEntropies) {
  // Heights chosen so the sorted entropies are ~0, ~0, .0024, .0231 x4 (tied), .0404, .070, .2, .56, 1.28.
  const std::vector<float> heights = {3, 7, 6.5f, 9, 7, 4, 7, 12, 5, 7, 20, 6};
  for (const float bound : {0.1f, 0.04f}) {
    FakeModel m;
    m.length = int64_t(heights.size());
    m.make = [&](int64_t, int64_t, const std::vector<int32_t>&, std::vector<float>& l) {
      peaked_rows(heights, m.vocab, l);
    };
    EntropyBoundParams p = small_params(m.length, 2);
    p.entropy_bound = bound;
    std::vector<StepEvent> events;
    std::vector<std::vector<int32_t>> snapshots;
    DecodeCallbacks cb;
    cb.on_step = [&](const StepEvent& e) {
      events.push_back(e);
      snapshots.push_back(*e.canvas);
    };
    generate_entropy_bound(m.hooks(), p, cb);
    ASSERT_EQ(events.size(), 2u);

    const double T = test_temperature(2, 2, p.t_min, p.t_max);  // first step: s = N
    const std::vector<double> h = tempered_entropies(m.logits_out[0], m.length, m.vocab, T);
    const std::vector<int64_t> expected = reference_accept(h, bound);
    const std::vector<int64_t> off_by_one = reference_accept(h, bound, true);
    ASSERT_NE(sorted(expected), sorted(off_by_one)) << "the hand-made rows must separate the two readings";
    // The float entropies of the engine must not sit on the cut (last accepted, first rejected).
    double before = 0;
    for (int64_t k : expected) before += h[size_t(k)];
    EXPECT_GT(std::fabs(before - h[size_t(expected.back())] - bound), 1e-4);
    EXPECT_GT(std::fabs(before - bound), 1e-4);
    EXPECT_EQ(events[0].committed, expected) << "bound " << bound;
    if (bound == 0.04f) {
      EXPECT_EQ(expected, (std::vector<int64_t>{10, 7, 3, 1, 4}));  // the cut falls inside the tie
    } else {
      EXPECT_EQ(sorted(expected), (std::vector<int64_t>{1, 2, 3, 4, 6, 7, 9, 10}));
    }

    // The accepted tokens are what the next decode sees; the confidence is their untempered probability.
    ASSERT_EQ(events[0].confidence.size(), expected.size());
    for (size_t k = 0; k < expected.size(); ++k) {
      const int64_t i = expected[k];
      const int32_t y = snapshots[0][size_t(i)];
      EXPECT_EQ(m.canvases[1][size_t(i)], y);
      const float* row = &m.logits_out[0][size_t(i * m.vocab)];
      double sum = 0;
      for (int64_t j = 0; j < m.vocab; ++j) sum += std::exp(double(row[j]));
      EXPECT_NEAR(events[0].confidence[k], std::exp(double(row[y])) / sum, 1e-5);
    }
  }
}

TEST(EntropyBoundAccept, SamplesFollowTheTemperedSoftmax) {
  // Logits = T_s * base so that z = base at every step; accept everything so the canvas is y.
  FakeModel m;
  m.length = 64;
  m.vocab = 4;
  const std::vector<double> base = {0.0, 1.0, 2.0, 0.5};
  EntropyBoundParams p = small_params(m.length, 40);
  p.entropy_bound = 1e9f;
  p.confidence_threshold = 0.f;  // never stop early
  m.make = [&](int64_t, int64_t step, const std::vector<int32_t>&, std::vector<float>& l) {
    const double T = test_temperature(p.max_denoising_steps - step, p.max_denoising_steps, p.t_min, p.t_max);
    for (int64_t i = 0; i < m.length; ++i)
      for (int64_t j = 0; j < m.vocab; ++j) l[size_t(i * m.vocab + j)] = float(T * base[size_t(j)]);
  };
  std::vector<int64_t> counts(4, 0);
  DecodeCallbacks cb;
  cb.on_step = [&](const StepEvent& e) {
    EXPECT_EQ(int64_t(e.committed.size()), m.length);
    for (int32_t t : *e.canvas) ++counts[size_t(t)];
  };
  const EntropyBoundResult r = generate_entropy_bound(m.hooks(), p, cb);
  EXPECT_EQ(r.passes, 40);
  const double n = 64.0 * 40.0;
  double sum = 0;
  for (double b : base) sum += std::exp(b);
  for (int j = 0; j < 4; ++j) {
    const double q = std::exp(base[size_t(j)]) / sum;
    EXPECT_NEAR(double(counts[size_t(j)]) / n, q, 4.0 * std::sqrt(q * (1 - q) / n)) << "token " << j;
  }
  for (int32_t t : r.tokens) EXPECT_EQ(t, 2);  // the argmax is committed
}

TEST(EntropyBoundAccept, RejectedPositionsAreRenoised) {
  // Flat rows: every entropy is log V, the bound admits only the first (position 0, by the tie rule).
  FakeModel m;
  m.make = [](int64_t, int64_t, const std::vector<int32_t>&, std::vector<float>&) {};
  EntropyBoundParams p = small_params(m.length, 30);
  p.entropy_bound = 0.f;
  p.confidence_threshold = 0.f;
  std::vector<std::set<int32_t>> seen(size_t(m.length));
  DecodeCallbacks cb;
  cb.on_step = [&](const StepEvent& e) {
    EXPECT_EQ(e.committed, (std::vector<int64_t>{0}));
    for (size_t i = 0; i < e.canvas->size(); ++i) seen[i].insert((*e.canvas)[i]);
  };
  generate_entropy_bound(m.hooks(), p, cb);
  for (int64_t i = 1; i < m.length; ++i) EXPECT_GE(seen[size_t(i)].size(), 8u) << "position " << i;
  // The initial canvas is uniform noise too.
  std::set<int32_t> initial(m.canvases[0].begin(), m.canvases[0].end());
  EXPECT_GE(initial.size(), 3u);
}

// ---- (b) temperature schedule and self-conditioning --------------------------------------------

TEST(EntropyBoundSchedule, TemperatureFormula) {
  EXPECT_DOUBLE_EQ(entropy_bound_temperature(48, 48, 0.4f, 0.8f), double(0.4f) + (double(0.8f) - double(0.4f)));
  EXPECT_NEAR(entropy_bound_temperature(48, 48, 0.4f, 0.8f), 0.8, 1e-7);
  EXPECT_NEAR(entropy_bound_temperature(24, 48, 0.4f, 0.8f), 0.6, 1e-7);
  // s = 1 is the last step: t_min + (t_max - t_min) / N, one notch above t_min.
  EXPECT_NEAR(entropy_bound_temperature(1, 48, 0.4f, 0.8f), 0.4 + 0.4 / 48, 1e-7);
  EXPECT_NEAR(entropy_bound_temperature(0, 48, 0.4f, 0.8f), 0.4, 1e-7);
}

TEST(EntropyBoundSchedule, SelfConditioningIsThePreviousStepsTemperedLogits) {
  FakeModel m;
  m.length = 3;
  m.vocab = 5;
  // Logits that change with every call, so a stale or untempered buffer would show.
  m.make = [&](int64_t call, int64_t, const std::vector<int32_t>&, std::vector<float>& l) {
    for (size_t k = 0; k < l.size(); ++k) l[k] = float(3.0 * std::sin(double(k) * 1.7 + double(call) * 0.9));
  };
  EntropyBoundParams p = small_params(m.length, 4);
  p.max_new_tokens = 2 * m.length;
  p.confidence_threshold = 0.f;
  const EntropyBoundResult r = generate_entropy_bound(m.hooks(), p);
  ASSERT_EQ(r.passes, 8);
  ASSERT_EQ(m.canvases.size(), 8u);
  const double temps[4] = {0.8, 0.7, 0.6, 0.5};  // s = 4, 3, 2, 1 with N = 4
  for (size_t call = 0; call < 8; ++call) {
    const size_t step = call % 4;
    if (step == 0) {
      EXPECT_TRUE(m.self_cond_null[call]) << "first step of canvas " << call / 4 << " must get no self-conditioning";
      continue;
    }
    ASSERT_FALSE(m.self_cond_null[call]);
    const std::vector<float>& prev = m.logits_out[call - 1];
    const std::vector<float>& got = m.self_conds[call];
    ASSERT_EQ(got.size(), prev.size());
    for (size_t k = 0; k < prev.size(); ++k)
      EXPECT_NEAR(got[k], prev[k] / temps[step - 1], 1e-6) << "call " << call << " element " << k;
  }
}

// ---- (c) adaptive stop -------------------------------------------------------------------------

// Argmax canvas at step t (1-based) is the shift min(t, k - 1): the first t with A_t == A_{t-1} is k.
// Rows are confident (peak 40) from step j on, flat-ish (peak 1) before. Returns the steps taken.
int64_t steps_until_stop(int64_t k, int64_t j, int64_t stability = 1, int64_t steps = 10) {
  FakeModel m;
  m.make = [&](int64_t, int64_t step, const std::vector<int32_t>&, std::vector<float>& l) {
    const int64_t t = step + 1;
    const int64_t shift = std::min(t, k - 1);
    for (int64_t i = 0; i < m.length; ++i)
      l[size_t(i * m.vocab + (i + shift) % m.vocab)] = t >= j ? 40.f : 1.f;
  };
  EntropyBoundParams p = small_params(m.length, steps);
  p.stability_threshold = stability;
  const EntropyBoundResult r = generate_entropy_bound(m.hooks(), p);
  EXPECT_EQ(r.steps_per_canvas.size(), 1u);
  EXPECT_EQ(r.passes, r.steps_per_canvas[0]);
  return r.steps_per_canvas[0];
}

TEST(EntropyBoundStop, FiresWhenBothConditionsHold) {
  EXPECT_EQ(steps_until_stop(3, 5), 5);  // stable first, confident later
  EXPECT_EQ(steps_until_stop(6, 2), 6);  // confident first, stable later
  EXPECT_EQ(steps_until_stop(4, 4), 4);
  EXPECT_EQ(steps_until_stop(2, 1), 2);  // at least two steps: stability needs a previous argmax
}

TEST(EntropyBoundStop, RunsAllStepsWhenOneConditionNeverHolds) {
  EXPECT_EQ(steps_until_stop(2, 1000), 10);  // stable, never confident
  EXPECT_EQ(steps_until_stop(1000, 1), 10);  // confident, never stable
}

TEST(EntropyBoundStop, StabilityThresholdCountsConsecutiveRepeats) {
  EXPECT_EQ(steps_until_stop(3, 2, 2), 4);  // A_3 == A_2 and A_4 == A_3
  EXPECT_EQ(steps_until_stop(3, 6, 2), 6);
  EXPECT_EQ(steps_until_stop(5, 1, 3), 7);
  EXPECT_EQ(steps_until_stop(1000, 1, 0), 1);  // 0: the entropy test alone
}

TEST(EntropyBoundStop, UsesTheMeanEntropyOverTheCanvas) {
  // Constant argmax, z fixed (logits = T_s * base): seven rows near zero entropy, row 0 with entropy
  // ~0.023 (mean ~0.0029 < 0.005 although the max is above) or ~0.070 (mean ~0.0087 > 0.005).
  for (const float row0_peak : {8.75f, 7.5f}) {
    FakeModel m;
    EntropyBoundParams p = small_params(m.length, 10);
    m.make = [&](int64_t, int64_t step, const std::vector<int32_t>&, std::vector<float>& l) {
      const double T = test_temperature(p.max_denoising_steps - step, p.max_denoising_steps, p.t_min, p.t_max);
      for (int64_t i = 0; i < m.length; ++i)
        l[size_t(i * m.vocab + 2 * i % m.vocab + 1)] = float(T * (i == 0 ? row0_peak : 40.f));
    };
    std::vector<float> z(size_t(m.vocab), 0.f);
    z[1] = row0_peak;
    const double mean = entropy_of(z.data(), m.vocab) / double(m.length);
    const EntropyBoundResult r = generate_entropy_bound(m.hooks(), p);
    if (row0_peak == 8.75f) {
      ASSERT_LT(mean, 0.005);
      ASSERT_GT(entropy_of(z.data(), m.vocab), 0.005);
      EXPECT_EQ(r.steps_per_canvas[0], 2);
    } else {
      ASSERT_GT(mean, 0.005);
      EXPECT_EQ(r.steps_per_canvas[0], 10);
    }
  }
}

// ---- (d) the argmax canvas is committed and encoded --------------------------------------------

TEST(EntropyBoundCommit, CommitsAndEncodesTheArgmaxCanvas) {
  FakeModel m;
  m.length = 6;
  // Diffuse rows (p_top ~0.3) so the sampled canvas differs from the argmax one.
  auto pattern = [&](int64_t call, int64_t i) { return int32_t((3 * i + call + 2) % m.vocab); };
  m.make = [&](int64_t call, int64_t, const std::vector<int32_t>&, std::vector<float>& l) {
    for (int64_t i = 0; i < m.length; ++i) l[size_t(i * m.vocab + pattern(call, i))] = 1.5f;
  };
  EntropyBoundParams p = small_params(m.length, 3);
  p.max_new_tokens = 2 * m.length;
  p.entropy_bound = 1e9f;  // accept all: the canvas after the last step is the sampled y
  p.confidence_threshold = 0.f;
  p.pad_id = -1;
  std::vector<std::vector<int32_t>> snapshots;
  DecodeCallbacks cb;
  cb.on_step = [&](const StepEvent& e) { snapshots.push_back(*e.canvas); };
  const EntropyBoundResult r = generate_entropy_bound(m.hooks(), p, cb);
  ASSERT_EQ(r.passes, 6);
  ASSERT_EQ(r.tokens.size(), 12u);
  std::vector<int32_t> a2, a5;
  for (int64_t i = 0; i < m.length; ++i) a2.push_back(pattern(2, i)), a5.push_back(pattern(5, i));
  EXPECT_EQ(std::vector<int32_t>(r.tokens.begin(), r.tokens.begin() + 6), a2);
  EXPECT_EQ(std::vector<int32_t>(r.tokens.begin() + 6, r.tokens.end()), a5);
  // The sampled canvas of the last step is something else (so committing it would fail this test).
  EXPECT_NE(std::vector<int32_t>(snapshots[2].begin(), snapshots[2].begin() + 6), a2);
  // Encode gets canvas 0's argmax between its last decode and the next canvas; the last canvas is not
  // encoded.
  ASSERT_EQ(m.encoded.size(), 1u);
  EXPECT_EQ(m.encoded[0], a2);
  EXPECT_EQ(std::string(m.log.begin(), m.log.end()), "DDDEDDD");
  EXPECT_EQ(r.encoder_passes, 1);
  // Events of the second canvas show the committed first canvas in front of the current one.
  ASSERT_EQ(snapshots.size(), 6u);
  EXPECT_EQ(std::vector<int32_t>(snapshots[3].begin(), snapshots[3].begin() + 6), a2);
  EXPECT_EQ(snapshots[3].size(), 12u);
}

// Every row peaks at token 2 (logit 10), token 1 next (8), token 3 (6). Penalty 10: row 0's left
// neighbour is left_context (3, not its argmax: row 0 keeps 2); row 1's is row 0's 2 (10 -> 1, so 1
// wins); row 2's is row 1's 1 (8 -> 0.8, 2 still wins); and so on, alternating. Penalty 1 (off) leaves
// every row at 2.
TEST(EntropyBoundCommit, NeighborPenaltyActsOnTheLeftNeighboursArgmax) {
  FakeModel m;
  m.length = 5;
  m.vocab = 4;
  m.make = [&](int64_t, int64_t, const std::vector<int32_t>&, std::vector<float>& l) {
    for (int64_t i = 0; i < m.length; ++i) {
      l[size_t(i * m.vocab + 2)] = 10.f;
      l[size_t(i * m.vocab + 1)] = 8.f;
      l[size_t(i * m.vocab + 3)] = 6.f;
    }
  };
  EntropyBoundParams p = small_params(m.length, 4);
  p.t_min = p.t_max = 0.05f;
  p.pad_id = -1;
  p.left_context = 3;
  EXPECT_EQ(generate_entropy_bound(m.hooks(), p).tokens, (std::vector<int32_t>{2, 2, 2, 2, 2}));
  p.neighbor_penalty = 10.f;
  EXPECT_EQ(generate_entropy_bound(m.hooks(), p).tokens, (std::vector<int32_t>{2, 1, 2, 1, 2}));
  p.left_context = 2;  // now row 0 is penalised too
  EXPECT_EQ(generate_entropy_bound(m.hooks(), p).tokens, (std::vector<int32_t>{1, 2, 1, 2, 1}));

  // Negative logits are multiplied: token 0 at -1 beats 2 at -0.5 once 2 is penalised (-5).
  m.make = [&](int64_t, int64_t, const std::vector<int32_t>&, std::vector<float>& l) {
    for (int64_t i = 0; i < m.length; ++i) {
      l[size_t(i * m.vocab + 0)] = -1.f;
      l[size_t(i * m.vocab + 1)] = -9.f;
      l[size_t(i * m.vocab + 2)] = -0.5f;
      l[size_t(i * m.vocab + 3)] = -9.f;
    }
  };
  p.left_context = 3;
  EXPECT_EQ(generate_entropy_bound(m.hooks(), p).tokens, (std::vector<int32_t>{2, 0, 2, 0, 2}));

  // The streamed head has no logits to penalise: a clear error, as is a penalty that is not positive.
  const auto error_of = [&](const EntropyBoundParams& params) -> std::string {
    DiffusionModelHooks hooks = m.hooks();
    hooks.decode_stream = [](const std::vector<int32_t>&, const std::vector<float>*, const HeadStreamOptions&,
                             std::vector<HeadRowStats>&, std::vector<float>&) {};
    try {
      generate_entropy_bound(hooks, params);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  p.stream_head = true;
  EXPECT_NE(error_of(p).find("neighbor_penalty"), std::string::npos) << error_of(p);
  p.stream_head = false;
  p.neighbor_penalty = 0.f;
  EXPECT_NE(error_of(p).find("neighbor_penalty must be positive"), std::string::npos) << error_of(p);
}

// Freeze: rows 0-3 peak hard at a fixed token (accepted every step), rows 4-7 are flat (accepted at
// most a few at a time). Step 0 and 1 compute every row (step 0's input was noise: with seed 3 no row
// of it holds the token that row will be accepted with, so none is accepted unchanged); from step 2 on, rows 0-3 are frozen and only 4-7 are computed, until
// a refresh step computes all again.
TEST(EntropyBoundFreeze, SettledRowsAreSkippedUntilARefresh) {
  FakeModel m;
  m.length = 8;
  m.make = [&](int64_t, int64_t, const std::vector<int32_t>&, std::vector<float>& l) {
    for (int64_t i = 0; i < 4; ++i) l[size_t(i * m.vocab + 12 + i)] = 40.f;
  };
  EntropyBoundParams p = small_params(m.length, 5);
  p.confidence_threshold = 0.f;  // no early stop
  p.pad_id = -1;
  p.freeze = true;
  const EntropyBoundResult r = generate_entropy_bound(m.hooks(), p);
  const std::vector<int32_t> flat = {4, 5, 6, 7};
  ASSERT_EQ(m.rows_requested.size(), 5u);
  EXPECT_TRUE(m.rows_requested[0].empty());
  EXPECT_TRUE(m.rows_requested[1].empty());
  for (size_t k = 2; k < 5; ++k) EXPECT_EQ(m.rows_requested[k], flat) << "step " << k;
  EXPECT_EQ(m.log.size(), 5u);  // every pass went through decode_rows (which records through decode)
  EXPECT_EQ(r.rows_computed, 8 + 8 + 3 * 4);
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(r.tokens[size_t(i)], 12 + i);

  FakeModel again;
  again.length = 8;
  again.make = m.make;
  p.freeze_refresh = 2;
  generate_entropy_bound(again.hooks(), p);
  ASSERT_EQ(again.rows_requested.size(), 5u);
  EXPECT_TRUE(again.rows_requested[2].empty());  // refresh
  EXPECT_EQ(again.rows_requested[3], flat);
  EXPECT_TRUE(again.rows_requested[4].empty());  // refresh
}

// Refreshing every step is a full pass every step: the tokens, passes and RNG stream of no freeze.
TEST(EntropyBoundFreeze, RefreshEveryStepEqualsNoFreeze) {
  FakeModel a, b;
  auto make = [](FakeModel& m) {
    m.make = [&m](int64_t call, int64_t, const std::vector<int32_t>& canvas, std::vector<float>& l) {
      for (int64_t i = 0; i < m.length; ++i)
        l[size_t(i * m.vocab + (canvas[size_t(i)] + call + i) % m.vocab)] = 2.f + float(i % 3);
    };
  };
  make(a);
  make(b);
  EntropyBoundParams p = small_params(a.length, 6);
  p.max_new_tokens = 2 * a.length;
  const EntropyBoundResult plain = generate_entropy_bound(a.hooks(), p);
  p.freeze = true;
  p.freeze_refresh = 1;
  const EntropyBoundResult refreshed = generate_entropy_bound(b.hooks(), p);
  EXPECT_EQ(refreshed.tokens, plain.tokens);
  EXPECT_EQ(refreshed.passes, plain.passes);
  EXPECT_EQ(b.canvases, a.canvases);
  for (const auto& rows : b.rows_requested) EXPECT_TRUE(rows.empty());
}

// ---- (e) EOS, pad, continuation ----------------------------------------------------------------

// Argmax canvases given per (call); rows have peak 30 at the given token.
void scripted(FakeModel& m, const std::vector<std::vector<int32_t>>& by_call) {
  m.make = [&m, by_call](int64_t call, int64_t, const std::vector<int32_t>&, std::vector<float>& l) {
    if (size_t(call) >= by_call.size()) ADD_FAILURE() << "unexpected decode call " << call;
    const std::vector<int32_t>& a = by_call[std::min(size_t(call), by_call.size() - 1)];
    for (int64_t i = 0; i < m.length; ++i) l[size_t(i * m.vocab + a[size_t(i)])] = 30.f;
  };
}

TEST(EntropyBoundEos, PadsAfterTheFirstEosAndStops) {
  FakeModel m;
  const std::vector<int32_t> c0s0 = {2, 7, 4, 5, 6, 8, 9, 10};   // an EOS mid-canvas is no end
  const std::vector<int32_t> c0 = {2, 3, 4, 5, 6, 8, 9, 10};
  const std::vector<int32_t> c1 = {3, 4, 5, 11, 2, 8, 7, 9};     // first EOS (11) at 3, another at 6
  scripted(m, {c0s0, c0, c1, c1, c1, c1});
  EntropyBoundParams p = small_params(m.length, 2);
  p.eos_ids = {7, 11};
  p.confidence_threshold = 0.f;
  p.max_new_tokens = 100;
  const EntropyBoundResult r = generate_entropy_bound(m.hooks(), p);
  std::vector<int32_t> expected = c0;
  expected.insert(expected.end(), {3, 4, 5, 11, 0, 0, 0, 0});
  EXPECT_EQ(r.tokens, expected);
  EXPECT_EQ(r.passes, 4);  // no third canvas
  ASSERT_EQ(m.encoded.size(), 1u);
  EXPECT_EQ(m.encoded[0], c0);
  EXPECT_EQ(r.new_tokens, 12);
  EXPECT_DOUBLE_EQ(r.tokens_per_forward, 3.0);
}

TEST(EntropyBoundEos, ContinuesCanvasByCanvasAndTruncatesTheLast) {
  FakeModel m;
  const std::vector<int32_t> c0 = {2, 3, 4, 5, 6, 8, 9, 10};
  const std::vector<int32_t> c1 = {10, 9, 8, 6, 5, 4, 3, 2};
  const std::vector<int32_t> c2 = {4, 4, 5, 9, 9, 11, 3, 3};  // EOS beyond the three tokens kept
  scripted(m, {c0, c0, c1, c1, c2, c2});
  EntropyBoundParams p = small_params(m.length, 2);
  p.eos_ids = {11};
  p.confidence_threshold = 0.f;
  p.max_new_tokens = 2 * m.length + 3;
  const EntropyBoundResult r = generate_entropy_bound(m.hooks(), p);
  std::vector<int32_t> expected = c0;
  expected.insert(expected.end(), c1.begin(), c1.end());
  expected.insert(expected.end(), {4, 4, 5});
  EXPECT_EQ(r.tokens, expected);
  EXPECT_EQ(r.passes, 6);
  EXPECT_EQ(r.steps_per_canvas, (std::vector<int64_t>{2, 2, 2}));
  ASSERT_EQ(m.encoded.size(), 2u);
  EXPECT_EQ(m.encoded[0], c0);
  EXPECT_EQ(m.encoded[1], c1);
  EXPECT_EQ(std::string(m.log.begin(), m.log.end()), "DDEDDEDD");
}

TEST(EntropyBoundEos, ShortRequestIsOneTruncatedCanvas) {
  FakeModel m;
  const std::vector<int32_t> c0 = {2, 3, 4, 5, 6, 8, 9, 10};
  scripted(m, {c0, c0, c0});
  EntropyBoundParams p = small_params(m.length, 3);
  p.max_new_tokens = 5;
  const EntropyBoundResult r = generate_entropy_bound(m.hooks(), p);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{2, 3, 4, 5, 6}));
  EXPECT_EQ(r.passes, 2);  // confident and stable at step 2
  EXPECT_TRUE(m.encoded.empty());
}

// ---- (f) determinism ---------------------------------------------------------------------------

// A model that reads its canvas, so the random initial canvas and the sampled tokens matter.
void canvas_echo(FakeModel& m) {
  m.make = [&m](int64_t, int64_t, const std::vector<int32_t>& canvas, std::vector<float>& l) {
    for (int64_t i = 0; i < m.length; ++i) {
      float* row = &l[size_t(i * m.vocab)];
      row[canvas[size_t(i)]] += 2.f;
      row[(canvas[size_t(i)] + 1) % m.vocab] += 1.f;
      row[canvas[size_t((i + 1) % m.length)]] += 0.5f;
    }
  };
}

struct EchoRun {
  std::vector<int32_t> tokens;
  std::vector<std::vector<int32_t>> canvases;
};

EchoRun run_echo(uint64_t seed, ThreadPool* pool) {
  FakeModel m;
  m.length = 16;
  m.vocab = 32;
  canvas_echo(m);
  EntropyBoundParams p = small_params(m.length, 6);
  p.max_new_tokens = 40;
  p.seed = seed;
  p.eos_ids = {};
  const EntropyBoundResult r = generate_entropy_bound(m.hooks(), p, {}, pool);
  return {r.tokens, m.canvases};
}

TEST(EntropyBoundDeterminism, SameSeedSameTokensAnyThreadCount) {
  const EchoRun a = run_echo(7, nullptr), b = run_echo(7, nullptr);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.canvases, b.canvases);
  EXPECT_EQ(a.tokens.size(), 40u);
  ThreadPool pool(2);
  const EchoRun c = run_echo(7, &pool);
  EXPECT_EQ(a.tokens, c.tokens);
  EXPECT_EQ(a.canvases, c.canvases);
  const EchoRun d = run_echo(8, nullptr);
  EXPECT_NE(a.tokens, d.tokens);
}

// ---- (g) tokens per forward --------------------------------------------------------------------

TEST(EntropyBoundThroughput, TokensPerForwardCountsNonPadOverDecoderPasses) {
  FakeModel m;
  const std::vector<int32_t> c0 = {2, 0, 4, 5, 6, 8, 9, 10};  // the model's own pad (0) is not counted
  const std::vector<int32_t> c1a = {3, 4, 5, 6, 2, 8, 9, 10};
  const std::vector<int32_t> c1 = {3, 4, 5, 1, 2, 8, 9, 10};  // EOS 1 at 3
  // Canvas 0 stops at step 2 (stable and confident); canvas 1 keeps changing its argmax until the
  // last of N = 5 steps, so it runs all 5.
  scripted(m, {c0, c0, c1, c1a, c1, c1a, c1});
  EntropyBoundParams p = small_params(m.length, 5);
  p.max_new_tokens = 64;
  p.eos_ids = {1, 106, 50};
  const EntropyBoundResult r = generate_entropy_bound(m.hooks(), p);
  EXPECT_EQ(r.steps_per_canvas, (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(r.passes, 7);
  EXPECT_EQ(r.tokens.size(), 16u);
  EXPECT_EQ(r.new_tokens, 7 + 4);
  EXPECT_DOUBLE_EQ(r.tokens_per_forward, 11.0 / 7.0);
}

// ---- errors ------------------------------------------------------------------------------------

TEST(EntropyBoundErrors, BadInputIsAClearError) {
  FakeModel m;
  m.make = [](int64_t, int64_t, const std::vector<int32_t>&, std::vector<float>&) {};
  EntropyBoundParams p = small_params(m.length, 3);
  {
    EntropyBoundParams bad = p;
    bad.canvas_length = 0;
    EXPECT_THROW(generate_entropy_bound(m.hooks(), bad), Error);
    bad = p;
    bad.t_min = 0.f;
    EXPECT_THROW(generate_entropy_bound(m.hooks(), bad), Error);
    bad = p;
    bad.max_denoising_steps = 0;
    EXPECT_THROW(generate_entropy_bound(m.hooks(), bad), Error);
  }
  DiffusionModelHooks h = m.hooks();
  h.decode = [](const std::vector<int32_t>&, const std::vector<float>*, std::vector<float>& l) { l.resize(3); };
  EXPECT_THROW(generate_entropy_bound(h, p), Error);
  h.decode = [](const std::vector<int32_t>&, const std::vector<float>*, std::vector<float>& l) {
    std::fill(l.begin(), l.end(), 0.f);
    l[5 * 16 + 2] = std::numeric_limits<float>::quiet_NaN();
  };
  try {
    generate_entropy_bound(h, p);
    ADD_FAILURE() << "NaN logits must be an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("position 5"), std::string::npos) << e.what();
  }
  // -inf is a zero probability, not an error, unless the whole row is -inf.
  const float ninf = -std::numeric_limits<float>::infinity();
  h.decode = [&](const std::vector<int32_t>&, const std::vector<float>*, std::vector<float>& l) {
    std::fill(l.begin(), l.end(), ninf);
    for (int64_t i = 0; i < m.length; ++i) l[size_t(i * 16 + 4)] = l[size_t(i * 16 + 9)] = 0.f;
  };
  p.entropy_bound = 1e9f;
  DecodeCallbacks cb;
  cb.on_step = [](const StepEvent& e) {
    for (int32_t t : *e.canvas) EXPECT_TRUE(t == 4 || t == 9) << t;
  };
  EXPECT_NO_THROW(generate_entropy_bound(h, p, cb));
  h.decode = [&](const std::vector<int32_t>&, const std::vector<float>*, std::vector<float>& l) {
    std::fill(l.begin(), l.end(), 0.f);
    std::fill(l.begin() + 2 * 16, l.begin() + 3 * 16, ninf);
  };
  EXPECT_THROW(generate_entropy_bound(h, p), Error);
}

}  // namespace
}  // namespace canvas
