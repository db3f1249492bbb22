// canvas score: the causal log-likelihood equals the chain of AR decoding's token probabilities.
#include "decode/score.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "decode/ar.h"
#include "test_util.h"

namespace canvas {
namespace {

// AR decoding (KV cache, one token per pass) reports p(token | prefix) for every token it picks; scoring
// prompt + generated tokens in one pass must give the same -sum log p.
TEST(Score, EqualsTheChainOfArTokenProbabilities) {
  const Model model = Model::load(test::fixture("tiny-dream.gguf"));
  const std::vector<int32_t> prompt = {5, 17, 3, 101, 42};
  ArParams p;
  p.max_new_tokens = 12;
  p.stop_at_eos = false;
  p.sampling.temperature = 1.0f;
  p.sampling.seed = 3;
  double expected = 0, first_term = 0;
  DecodeCallbacks cb;
  cb.on_step = [&](const StepEvent& e) {
    const double term = -std::log(double(e.confidence[0]));
    if (e.step == 0) first_term = term;
    expected += term;
  };
  const GenerationResult r = generate_ar(model, prompt, p, nullptr, cb);
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), r.tokens.begin(), r.tokens.end());
  ThreadPool pool(2);
  const SequenceScore s = score_causal(model, all, int64_t(prompt.size()), &pool);
  EXPECT_EQ(s.scored, 12);
  EXPECT_NEAR(s.nll_nats, expected, 1e-4 * std::fabs(expected));
  // Scoring from one token later drops exactly the first generated token's term.
  const SequenceScore later = score_causal(model, all, int64_t(prompt.size()) + 1, &pool);
  EXPECT_EQ(later.scored, 11);
  EXPECT_NEAR(s.nll_nats - later.nll_nats, first_term, 1e-4 * std::fabs(expected));
}

TEST(Score, MaskedDiffusionModelsAreRefused) {
  const Model model = Model::load(test::fixture("tiny-llada.gguf"));
  EXPECT_THROW(score_causal(model, {1, 2, 3}, 1, nullptr), Error);
  const auto r = test::run_canvas("score -m " + test::fixture("tiny-llada.gguf") + " -p hello");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("left to right"), std::string::npos) << r.output;
}

TEST(Score, CliPrintsBitsPerByte) {
  const auto r = test::run_canvas("score -m " + test::fixture("tiny-dream.gguf") + " --context 'The cat' -p ' sat on the mat'", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\"bytes\": 15"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"bits_per_byte\": "), std::string::npos) << r.output;
}

}  // namespace
}  // namespace canvas
