// canvas score: the causal log-likelihood equals the chain of AR decoding's token probabilities.
#include "decode/score.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "decode/ar.h"
#include "io/gguf.h"
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

// A text longer than the window: every token after `first` is scored exactly once, in the windows
// score_window_count says; a text that fits is one score_causal pass.
TEST(Score, WindowsScoreEveryTokenOnce) {
  const Model model = Model::load(test::fixture("tiny-dream.gguf"));
  ThreadPool pool(2);
  std::vector<int32_t> tokens;
  for (int i = 0; i < 40; ++i) tokens.push_back(int32_t(5 + (i * 7) % 90));
  int64_t windows = 0, calls = 0;
  const SequenceScore one = score_causal_windows(model, tokens, 3, 40, 20, &pool, &windows, [&] { ++calls; });
  const SequenceScore direct = score_causal(model, tokens, 3, &pool);
  EXPECT_EQ(windows, 1);
  EXPECT_EQ(one.scored, direct.scored);
  EXPECT_DOUBLE_EQ(one.nll_nats, direct.nll_nats);
  for (int64_t stride : {5, 7, 15}) {
    const SequenceScore w = score_causal_windows(model, tokens, 3, 16, stride, &pool, &windows, [&] { ++calls; });
    EXPECT_EQ(w.scored, 37) << stride;
    EXPECT_EQ(windows, score_window_count(40, 16, stride)) << stride;
    EXPECT_GT(w.nll_nats, 0) << stride;
  }
  EXPECT_EQ(calls, score_window_count(40, 16, 5) + score_window_count(40, 16, 7) + score_window_count(40, 16, 15));
  EXPECT_THROW(score_causal_windows(model, tokens, 3, 16, 16, &pool), Error);
}

// canvas score's job: the context (with BOS) is conditioned on, the text scored; without a context the
// first text token has nothing before it, and its bytes leave the count; a long text takes windows.
TEST(Score, TextJobScoresTheTextAfterItsContext) {
  const Model model = Model::load(test::fixture("tiny-dream.gguf"));
  const TextTokenizer tokenizer = TextTokenizer::from_gguf(*model.file);
  ThreadPool pool(2);
  const TextScoreJob job = plan_text_score(model, tokenizer, "The cat", " sat on the mat", 0);
  const std::vector<int32_t> context = tokenizer.encode("The cat", true);
  EXPECT_EQ(job.first, int64_t(context.size()));
  EXPECT_EQ(job.bytes, 15);  // " sat on the mat"
  EXPECT_EQ(job.window, model.config.context_length);
  EXPECT_EQ(job.stride, model.config.context_length / 2);
  EXPECT_EQ(job.windows, 1);
  const TextScore s = score_text(model, job, &pool);
  const SequenceScore direct = score_causal(model, job.tokens, job.first, &pool);
  EXPECT_EQ(s.score.scored, direct.scored);
  EXPECT_DOUBLE_EQ(s.score.nll_nats, direct.nll_nats);
  EXPECT_EQ(s.stride, 0);  // one window
  EXPECT_EQ(s.json().rfind("{\"tokens\": " + std::to_string(direct.scored) + ", \"bytes\": 15, ", 0), 0u) << s.json();

  const TextScoreJob bare = plan_text_score(model, tokenizer, "", " sat on the mat", 0);
  if (tokenizer.bos_id() < 0) {
    EXPECT_EQ(bare.first, 1);
    EXPECT_LT(bare.bytes, 15);
  }
  std::string long_text;
  for (int i = 0; i < 200; ++i) long_text += " the cat sat";
  const TextScoreJob windows = plan_text_score(model, tokenizer, "", long_text, 16);
  EXPECT_EQ(windows.windows, score_window_count(int64_t(windows.tokens.size()), windows.window, 16));
  EXPECT_GT(windows.windows, 1);
  EXPECT_EQ(score_text(model, windows, &pool).stride, 16);
  EXPECT_THROW(plan_text_score(model, tokenizer, "", long_text, model.config.context_length), Error);
  EXPECT_THROW(plan_text_score(model, tokenizer, "", "", 0), Error);
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
