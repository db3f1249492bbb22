// Log-probabilities reported by the generation library (GenerationRequest::logprobs): each text token's
// log-softmax under the pass that committed it, with the most likely alternatives of that row.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "decode/generation.h"
#include "decode/score.h"
#include "decode/text_model.h"
#include "test_util.h"

namespace canvas {
namespace {

// Every entry: its token, the alternatives in descending order, no more probability than 1.
void expect_well_formed(const GenerationOutput& out, int64_t top) {
  ASSERT_EQ(out.logprobs.size(), out.tokens.size());
  for (size_t i = 0; i < out.tokens.size(); ++i) {
    const TokenLogprob& lp = out.logprobs[i];
    EXPECT_EQ(lp.token, out.tokens[i]);
    EXPECT_LE(lp.logprob, 0.f);
    ASSERT_EQ(int64_t(lp.top.size()), top);
    double mass = 0;
    for (size_t k = 0; k < lp.top.size(); ++k) {
      mass += std::exp(double(lp.top[k].second));
      if (k > 0) {
        EXPECT_GE(lp.top[k - 1].second, lp.top[k].second);
      }
    }
    EXPECT_LE(mass, 1.0 + 1e-5);
  }
}

// A request for n tokens after a fixed prompt of ids, with `top` alternatives per token.
GenerationRequest ids_request(DecodeMode mode, int64_t n, int64_t top) {
  GenerationRequest r;
  r.prompt = {5, 17, 3, 101, 42};
  r.mode = mode;
  r.max_new_tokens = n;
  r.logprobs = top;
  return r;
}

// AR at temperature 0: each token is its row's most likely one, and the log-probabilities add up to the
// causal score of the generated tokens (canvas score's computation, in one pass).
TEST(GenerationLogprobs, ArGreedyIsTheTopAlternativeAndSumsToTheCausalScore) {
  const Model model = Model::load(test::fixture("tiny-dream.gguf"));
  const Generator generator(model, nullptr, SamplerDefaults{});
  GenerationRequest r = ids_request(DecodeMode::Ar, 10, 4);
  const GenerationOutput out = generator.run(r, nullptr);
  ASSERT_FALSE(out.tokens.empty());
  expect_well_formed(out, 4);
  double sum = 0;
  for (const TokenLogprob& lp : out.logprobs) {
    EXPECT_EQ(lp.top[0].first, lp.token);
    EXPECT_EQ(lp.top[0].second, lp.logprob);
    sum += lp.logprob;
  }
  std::vector<int32_t> all = r.prompt;
  all.insert(all.end(), out.tokens.begin(), out.tokens.end());
  const SequenceScore s = score_causal(model, all, int64_t(r.prompt.size()), nullptr);
  EXPECT_EQ(s.scored, int64_t(out.tokens.size()));
  EXPECT_NEAR(-sum, s.nll_nats, 1e-3 * std::max(1.0, s.nll_nats));

  // Off by default: nothing reported.
  r.logprobs = -1;
  EXPECT_TRUE(generator.run(r, nullptr).logprobs.empty());
}

// Masked diffusion: one entry per text token, each the probability its committing pass gave it.
TEST(GenerationLogprobs, MaskedDiffusionReportsEveryCommittedToken) {
  const Model model = Model::load(test::fixture("tiny-llada.gguf"));
  const Generator generator(model, nullptr, SamplerDefaults{});
  GenerationRequest r = ids_request(DecodeMode::Diffusion, 12, 2);
  r.diffusion.block_length = 4;
  r.sampling.temperature = 0.8f;
  r.sampling.seed = 7;
  std::vector<float> confidence(12, -1.f);
  r.on_step = [&](const StepEvent& e) {
    for (size_t k = 0; k < e.committed.size(); ++k) confidence[size_t(e.committed[k])] = e.confidence[k];
  };
  const GenerationOutput out = generator.run(r, nullptr);
  expect_well_formed(out, 2);
  for (size_t i = 0; i < out.logprobs.size(); ++i)  // the step's (untempered) confidence is the same number
    EXPECT_NEAR(std::exp(double(out.logprobs[i].logprob)), double(confidence[i]), 1e-5) << i;
}

// Draft-and-verify gives AR's tokens, and the verifier's rows give AR's log-probabilities.
TEST(GenerationLogprobs, VerifyEqualsAr) {
  const std::string path = test::source_path("models/text-dg.gguf");
  const TextModel m = TextModel::from(Model::load(path), path);
  const Generator generator(m);
  GenerationRequest r;
  r.text = "In the beginning";
  r.max_new_tokens = 12;
  r.logprobs = 3;
  r.temperature_given = true;
  r.mode = DecodeMode::Ar;
  const GenerationOutput ar = generator.run(r, nullptr);
  r.mode = DecodeMode::Verify;
  const GenerationOutput verify = generator.run(r, nullptr);
  ASSERT_EQ(ar.tokens, verify.tokens);
  expect_well_formed(verify, 3);
  for (size_t i = 0; i < ar.logprobs.size(); ++i) {
    EXPECT_NEAR(ar.logprobs[i].logprob, verify.logprobs[i].logprob, 1e-3) << i;
    EXPECT_EQ(ar.logprobs[i].top[0].first, verify.logprobs[i].top[0].first) << i;
  }
}

// Uniform-state diffusion: an entry per text token, from the last pass over its canvas.
TEST(GenerationLogprobs, UniformStateReportsCommittedCanvases) {
  const std::string path = test::source_path("models/text-dg.gguf");
  const TextModel m = TextModel::from(Model::load(path), path);
  const Generator generator(m);
  GenerationRequest r;
  r.text = "In the beginning";
  r.mode = DecodeMode::Diffusion;
  r.max_new_tokens = 20;
  r.logprobs = 1;
  const GenerationOutput out = generator.run(r, nullptr);
  expect_well_formed(out, 1);
  r.uniform_state.stream_head = true;
  EXPECT_THROW(generator.run(r, nullptr), Error);  // no materialised logits to read them from
}

}  // namespace
}  // namespace canvas
