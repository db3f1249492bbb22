// logit_bias and OpenAI's presence and frequency penalties: the shaped row against a hand-computed twin, the
// shaped row read by greedy and sampled choice, AR on the shipped model (a forced token, a banned one, each
// step's choice the argmax of its penalised logits, less repetition), masked diffusion's bias, and the modes
// that refuse what they cannot honour.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "core/error.h"
#include "decode/ar.h"
#include "decode/generation.h"
#include "decode/sampling.h"
#include "test_util.h"

namespace canvas {
namespace {

const std::vector<float> kLogits = {0.5f, 2.0f, -1.0f, 1.0f, 0.0f, 3.0f, -0.5f, 0.25f};

// Bias first (id 2 twice: +1.5 and +0.5; id 5: -3), then the repetition penalty 1.5 on the recent ids {1, 3},
// then the counts of the generated {3, 3, 5, 3, 7}: frequency 0.4 per occurrence, presence 0.25 once.
SamplingParams shaping() {
  SamplingParams s;
  s.logit_bias = {{2, 1.5f}, {5, -3.f}, {2, 0.5f}};
  s.repeat_penalty = 1.5f;
  s.frequency_penalty = 0.4f;
  s.presence_penalty = 0.25f;
  return s;
}
const std::vector<int32_t> kRecent = {1, 3, 1}, kGenerated = {3, 3, 5, 3, 7};

TEST(SamplingPenalties, ShapedRowMatchesAHandComputedTwin) {
  const SamplingParams s = shaping();
  const float* row = penalized_row(kLogits.data(), 8, s, {&kRecent, &kGenerated});
  ASSERT_NE(row, kLogits.data());
  const double expected[8] = {
      0.5,                               // untouched
      2.0 / 1.5,                         // recent: divided by the repetition penalty
      -1.0 + 1.5 + 0.5,                  // both biases
      1.0 / 1.5 - (3 * 0.4 + 0.25),      // recent, and generated three times
      0.0,                               // untouched
      (3.0 - 3.0) - (1 * 0.4 + 0.25),    // biased, then generated once
      -0.5,                              // untouched
      0.25 - (1 * 0.4 + 0.25)};          // generated once
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(row[i], expected[i], 1e-6) << "id " << i;
  // Negative penalties raise what was generated (OpenAI's range is [-2, 2]).
  SamplingParams raise;
  raise.frequency_penalty = -0.5f;
  raise.presence_penalty = -1.f;
  const float* raised = penalized_row(kLogits.data(), 8, raise, {nullptr, &kGenerated});
  EXPECT_NEAR(raised[3], 1.0 + 3 * 0.5 + 1.0, 1e-6);
  EXPECT_NEAR(raised[0], 0.5, 0);
}

TEST(SamplingPenalties, NothingToShapeIsTheRawRow) {
  const std::vector<int32_t> none;
  SamplingParams s;
  EXPECT_EQ(penalized_row(kLogits.data(), 8, s, {&kRecent, &kGenerated}), kLogits.data());
  s.frequency_penalty = s.presence_penalty = 1.f;
  EXPECT_EQ(penalized_row(kLogits.data(), 8, s, {&kRecent, &none}), kLogits.data());  // nothing generated yet
  EXPECT_EQ(penalized_row(kLogits.data(), 8, s, {&kRecent, nullptr}), kLogits.data());
}

TEST(SamplingPenalties, GreedyAndSampledChoicesReadTheShapedRow) {
  Rng rng(1);
  SamplingParams s = shaping();
  // Raw argmax 5; shaped, id 1 (4/3) leads.
  EXPECT_EQ(choose_token(kLogits.data(), 8, SamplingParams{}, rng).token, 5);
  const TokenChoice greedy = choose_token(kLogits.data(), 8, s, rng, {&kRecent, &kGenerated});
  EXPECT_EQ(greedy.token, 1);
  EXPECT_EQ(greedy.stats.argmax, 1);
  // A ban (-inf) on the leader: id 2 (1.0) next.
  s.logit_bias.emplace_back(1, -std::numeric_limits<float>::infinity());
  EXPECT_EQ(choose_token(kLogits.data(), 8, s, rng, {&kRecent, &kGenerated}).token, 2);
  // Sampling at T = 1: a banned id is never drawn, a +100 one always.
  SamplingParams hot;
  hot.temperature = 1.f;
  hot.logit_bias = {{5, -std::numeric_limits<float>::infinity()}};
  std::set<int32_t> drawn;
  for (int i = 0; i < 2000; ++i) drawn.insert(choose_token(kLogits.data(), 8, hot, rng).token);
  EXPECT_EQ(drawn.count(5), 0u);
  EXPECT_GE(drawn.size(), 6u);
  hot.logit_bias = {{6, 100.f}};
  for (int i = 0; i < 200; ++i) ASSERT_EQ(choose_token(kLogits.data(), 8, hot, rng).token, 6);
}

std::vector<int32_t> and_god_said(const TextModel& m) { return m.tokenizer.encode("And God said", true); }

TextModel shipped(const std::string& name) {
  const std::string path = test::source_path("models/" + name);
  return TextModel::from(Model::load(path), path);
}

// n tokens after "And God said" in `mode`.
GenerationRequest request(const TextModel& m, DecodeMode mode, int64_t n) {
  GenerationRequest r;
  r.prompt = and_god_said(m);
  r.mode = mode;
  r.max_new_tokens = n;
  return r;
}

// Greedy AR on the shipped AR model: +100 on one id writes it everywhere; -100 on the unbiased text's first
// token keeps that token out of the whole text.
TEST(SamplingPenalties, GreedyArWritesAForcedTokenAndNeverABannedOne) {
  ThreadPool pool(2);
  const TextModel m = shipped("text-ar.gguf");
  GenerationRequest r = request(m, DecodeMode::Ar, 24);
  r.ignore_eos = true;
  const std::vector<int32_t> plain = Generator(m).run(r, &pool).tokens;
  ASSERT_EQ(plain.size(), 24u);
  r.sampling.logit_bias = {{plain[2], 100.f}};
  EXPECT_EQ(Generator(m).run(r, &pool).tokens, std::vector<int32_t>(24, plain[2]));
  r.sampling.logit_bias = {{plain[0], -100.f}};
  const std::vector<int32_t> banned = Generator(m).run(r, &pool).tokens;
  EXPECT_NE(banned[0], plain[0]);
  EXPECT_EQ(std::count(banned.begin(), banned.end(), plain[0]), 0);
}

// Each step of greedy AR with both penalties takes the argmax of its logits less frequency * count +
// presence * (count > 0) over the tokens generated before it (the whole row, from on_logprob, read exactly);
// and the frequency penalty writes measurably fewer repeated tokens than none.
TEST(SamplingPenalties, ArStepsTakeTheArgmaxOfThePenalisedLogits) {
  ThreadPool pool(2);
  const TextModel m = shipped("text-ar.gguf");
  const Model& model = m.model;
  const int64_t V = model.config.vocab;
  ArParams a;
  a.max_new_tokens = 64;
  a.stop_at_eos = false;
  a.sampling.frequency_penalty = 0.6f;
  a.sampling.presence_penalty = 0.3f;
  std::vector<std::vector<std::pair<int32_t, float>>> rows;
  DecodeCallbacks callbacks;
  callbacks.logprobs_top = V;
  callbacks.on_logprob = [&](int64_t, const TokenLogprob& lp) { rows.push_back(lp.top); };
  const std::vector<int32_t> prompt = and_god_said(m);
  const std::vector<int32_t> tokens = generate_ar(model, prompt, a, &pool, callbacks).tokens;
  ASSERT_EQ(tokens.size(), 64u);
  ASSERT_EQ(rows.size(), 64u);
  std::map<int32_t, int64_t> count;
  for (size_t i = 0; i < tokens.size(); ++i) {
    // (log-softmax: the logits less one constant; within rounding of the best, against float ties)
    double best = -INFINITY, chosen = -INFINITY;
    for (const auto& [id, logprob] : rows[i]) {
      const int64_t c = count.count(id) ? count[id] : 0;
      const double v = double(logprob) - (0.6 * double(c) + (c > 0 ? 0.3 : 0.0));
      best = std::max(best, v);
      if (id == tokens[i]) chosen = v;
    }
    EXPECT_GE(chosen, best - 1e-5) << "step " << i;
    ++count[tokens[i]];
  }
  // Repetition: the positions whose three tokens (characters, on this model) occurred before, with and
  // without the frequency penalty (greedy text loops: "The LORD said unto Moses, The LORD said unto Moses").
  auto repeats = [](const std::vector<int32_t>& t) {
    std::set<std::vector<int32_t>> seen;
    int64_t n = 0;
    for (size_t i = 0; i + 3 <= t.size(); ++i) n += !seen.insert({t.begin() + i, t.begin() + i + 3}).second;
    return n;
  };
  ArParams none = a;
  none.sampling.frequency_penalty = none.sampling.presence_penalty = 0;
  const int64_t plain = repeats(generate_ar(model, prompt, none, &pool).tokens);
  ArParams frequency = none;
  frequency.sampling.frequency_penalty = 0.5f;
  const int64_t penalised = repeats(generate_ar(model, prompt, frequency, &pool).tokens);
  EXPECT_LT(penalised * 3, plain) << "repeated trigrams: " << penalised << " penalised, " << plain << " plain";
}

// Masked diffusion takes the bias at every position's row; its penalties, and uniform-state diffusion's
// penalties and bias, are refused naming the mode; ids past the vocabulary are refused naming the id.
TEST(SamplingPenalties, DiffusionModesTakeWhatTheyCanAndRefuseTheRest) {
  ThreadPool pool(2);
  const Model masked = Model::load(test::fixture("tiny-llada.gguf"));
  const Generator g(masked, nullptr, SamplerDefaults{});
  GenerationRequest r;
  r.prompt = {5, 6, 7, 8};
  r.mode = DecodeMode::Diffusion;
  r.max_new_tokens = 8;
  r.diffusion.block_length = 4;
  r.ignore_eos = true;
  const std::vector<int32_t> plain = g.run(r, &pool).tokens;
  r.sampling.logit_bias = {{plain[1], 100.f}};
  EXPECT_EQ(g.run(r, &pool).tokens, std::vector<int32_t>(8, plain[1]));
  auto refusal = [&](const Generator& gen, const GenerationRequest& req) -> std::string {
    try {
      gen.check(req, int64_t(req.prompt.size()));
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  r.sampling.logit_bias = {{int32_t(masked.config.vocab), 1.f}};
  EXPECT_NE(refusal(g, r).find("token id " + std::to_string(masked.config.vocab) + " is outside the vocabulary"),
            std::string::npos)
      << refusal(g, r);
  r.sampling.logit_bias.clear();
  r.sampling.presence_penalty = 0.5f;
  EXPECT_NE(refusal(g, r).find("masked diffusion (--mode diffusion) has no such order"), std::string::npos)
      << refusal(g, r);
  r.mode = DecodeMode::Ar;
  EXPECT_EQ(refusal(g, r), "");

  const TextModel dg = shipped("text-dg.gguf");
  GenerationRequest u = request(dg, DecodeMode::Diffusion, 8);
  u.sampling.frequency_penalty = 0.5f;
  EXPECT_NE(refusal(Generator(dg), u).find("uniform-state diffusion (--mode diffusion) has no such order"),
            std::string::npos)
      << refusal(Generator(dg), u);
  u.sampling.frequency_penalty = 0;
  u.sampling.logit_bias = {{3, 1.f}};
  EXPECT_NE(refusal(Generator(dg), u).find("not uniform-state diffusion"), std::string::npos)
      << refusal(Generator(dg), u);
  for (DecodeMode mode : {DecodeMode::Ar, DecodeMode::Verify}) {
    u.mode = mode;
    u.sampling.frequency_penalty = 0.5f;
    EXPECT_EQ(refusal(Generator(dg), u), "") << decode_mode_name(mode);
  }
}

}  // namespace
}  // namespace canvas
