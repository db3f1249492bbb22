// Generation loops on the tiny fixture models: cache exactness, schedules, threshold decoding,
// determinism across thread counts, and the AR KV cache against recomputation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "io/utf8.h"
#include "decode/ar.h"
#include "decode/masked.h"
#include "text/text_stream.h"
#include "io/text_tokenizer.h"
#include "io/gguf.h"
#include "model/model.h"
#include "test_util.h"

namespace canvas {
namespace {

std::vector<int32_t> prompt_ids() { return {5, 72, 101, 108, 108, 111, 32, 119}; }

GenerationResult run(const Model& m, MaskedDiffusionParams p, int threads = 2, DecodeCallbacks cb = {}) {
  ThreadPool pool(threads);
  return generate_masked(m, prompt_ids(), p, &pool, cb);
}

struct Setting {
  const char* name;
  int64_t gen, block, steps;
  UnmaskOrder order;
  StepSchedule schedule;
  float threshold, temp;
  int64_t top_k;
};

const Setting kSettings[] = {
    {"confidence_greedy", 24, 8, 24, UnmaskOrder::Confidence, StepSchedule::Llada, 0, 0, 0},
    {"margin_two_per_step", 24, 8, 12, UnmaskOrder::Margin, StepSchedule::Llada, 0, 0, 0},
    {"entropy_sampled", 16, 16, 8, UnmaskOrder::Entropy, StepSchedule::Llada, 0, 0.9f, 20},
    {"random_order", 24, 12, 12, UnmaskOrder::Random, StepSchedule::Llada, 0, 0.5f, 0},
    {"origin_dream_schedule", 24, 24, 10, UnmaskOrder::Origin, StepSchedule::Dream, 0, 0.7f, 0},
    {"dream_schedule", 32, 16, 10, UnmaskOrder::Confidence, StepSchedule::Dream, 0, 0, 0},
    {"threshold", 24, 8, 24, UnmaskOrder::Confidence, StepSchedule::Llada, 0.05f, 0, 0},
};

class CacheExactness : public ::testing::TestWithParam<std::tuple<const char*, Setting>> {};

TEST_P(CacheExactness, PrefixCacheGivesTheTokensOfNoCache) {
  const auto& [model_name, s] = GetParam();
  const Model m = Model::load(test::fixture(std::string(model_name) + ".gguf"));
  MaskedDiffusionParams p;
  p.gen_length = s.gen;
  p.block_length = s.block;
  p.steps = s.steps;
  p.order = s.order;
  p.schedule = s.schedule;
  p.threshold = s.threshold;
  p.sampling.temperature = s.temp;
  p.sampling.top_k = s.top_k;
  p.sampling.seed = 42;
  p.cache = CacheMode::None;
  const GenerationResult none = run(m, p);
  p.cache = CacheMode::Prefix;
  const GenerationResult prefix = run(m, p);
  ASSERT_EQ(none.tokens.size(), size_t(s.gen));
  EXPECT_EQ(none.tokens, prefix.tokens);
  EXPECT_EQ(none.passes, prefix.passes);
  for (int32_t t : none.tokens) EXPECT_NE(t, m.config.mask_token);
  // Dual reuses a stale suffix: it must still fill every position.
  p.cache = CacheMode::Dual;
  const GenerationResult dual = run(m, p);
  for (int32_t t : dual.tokens) EXPECT_NE(t, m.config.mask_token);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CacheExactness,
                         ::testing::Combine(::testing::Values("tiny-llada", "tiny-dream", "tiny-llada-moe"),
                                            ::testing::ValuesIn(kSettings)),
                         [](const auto& info) {
                           std::string name = std::string(std::get<0>(info.param)) + "_" + std::get<1>(info.param).name;
                           for (char& ch : name)
                             if (ch == '-') ch = '_';
                           return name;
                         });

// Counts per step, recorded through the event callback.
std::vector<std::vector<int64_t>> commits_per_block(const Model& m, const MaskedDiffusionParams& p) {
  std::vector<std::vector<int64_t>> counts(size_t(p.gen_length / p.block_length));
  DecodeCallbacks cb;
  cb.on_step = [&](const StepEvent& e) { counts[size_t(e.block)].push_back(int64_t(e.committed.size())); };
  run(m, p, 2, cb);
  return counts;
}

TEST(Schedule, LladaBlockScheduleCommitsFloorPlusRemainder) {
  const Model m = Model::load(test::fixture("tiny-llada.gguf"));
  MaskedDiffusionParams p;
  p.gen_length = 30;
  p.block_length = 10;
  p.steps = 12;  // 4 steps per block, 10 masked: 3, 3, 2, 2
  for (const auto& block : commits_per_block(m, p)) EXPECT_EQ(block, (std::vector<int64_t>{3, 3, 2, 2}));
  p.steps = 30;  // one per step
  for (const auto& block : commits_per_block(m, p)) EXPECT_EQ(block, std::vector<int64_t>(10, 1));
}

TEST(Schedule, DreamTimestepScheduleCommitsMaskedTimesOneMinusSOverT) {
  const Model m = Model::load(test::fixture("tiny-dream.gguf"));
  MaskedDiffusionParams p;
  p.gen_length = 32;
  p.block_length = 32;
  p.steps = 8;
  p.schedule = StepSchedule::Dream;
  const auto counts = commits_per_block(m, p);
  // Independent evaluation of the formula: t_i = linspace(1, eps, steps + 1).
  int64_t masked = 32;
  std::vector<int64_t> want;
  for (int i = 0; i < 8; ++i) {
    const double t = 1.0 - i / 8.0 * (1 - 1e-3), s = 1.0 - (i + 1) / 8.0 * (1 - 1e-3);
    const int64_t k = i == 7 ? masked : int64_t(masked * (1 - s / t));
    want.push_back(k);
    masked -= k;
  }
  std::vector<int64_t> got = counts[0];
  while (got.size() < want.size()) got.push_back(0);  // zero-commit steps emit no event only if the block is full
  EXPECT_EQ(got, want);
  EXPECT_EQ(tokens_to_commit(StepSchedule::Dream, 32, 32, 0, 8, 1e-3f), want[0]);
}

// A modified copy of a fixture. `scale` multiplies the output head, so distributions are peaked and
// threshold decoding commits several tokens per step. With `context_free_canvas`, every token id except
// the prompt's gets the [MASK] embedding, so committing a token leaves the model's input unchanged: the
// canvas has one consistent joint distribution (the premise of Fast-dLLM's theorem), while predictions
// still differ by position through attention to the prompt.
std::string modified_copy(const std::string& name, float scale, bool context_free_canvas) {
  auto file = GgufFile::open(test::fixture(name + ".gguf"));
  const Model original = Model::load(test::fixture(name + ".gguf"));
  GgufWriter writer;
  for (const auto& [key, value] : file->metadata()) writer.set(key, value);
  std::vector<float> output, embedding;
  const std::vector<int32_t> prompt = prompt_ids();
  for (const TensorView& t : file->tensors()) {
    std::vector<int64_t> shape(t.ne.begin(), t.ne.begin() + t.n_dims);
    const void* data = t.data;
    if (t.name == "output.weight") {
      output.assign(t.f32(), t.f32() + t.elements());
      for (float& v : output) v *= scale;
      data = output.data();
    } else if (t.name == "token_embd.weight" && context_free_canvas) {
      embedding.assign(t.f32(), t.f32() + t.elements());
      const int64_t H = t.ne[0];
      const int64_t mask = original.config.mask_token;
      for (int64_t id = 0; id < t.ne[1]; ++id)
        if (std::find(prompt.begin(), prompt.end(), id) == prompt.end())
          std::copy(&embedding[size_t(mask * H)], &embedding[size_t(mask * H + H)], &embedding[size_t(id * H)]);
      data = embedding.data();
    }
    writer.add_tensor(t.name, t.type, shape, data, uint64_t(t.bytes()));
  }
  const std::string path = test::temp_path(name + (context_free_canvas ? "-free.gguf" : "-sharp.gguf"));
  writer.write(path);
  return path;
}

MaskedDiffusionParams threshold_params() {
  MaskedDiffusionParams p;
  p.gen_length = 32;
  p.block_length = 16;
  p.threshold = 0.9f;
  p.cache = CacheMode::Prefix;
  return p;
}

TEST(Threshold, CommitsEveryPositionAboveTheThresholdOrTheSingleBest) {
  const std::string path = modified_copy("tiny-llada", 12.f, false);
  const Model m = Model::load(path);
  const MaskedDiffusionParams p = threshold_params();
  int64_t parallel_steps = 0;
  DecodeCallbacks cb;
  cb.on_step = [&](const StepEvent& e) {
    ASSERT_GE(e.committed.size(), 1u);
    if (e.committed.size() > 1) {
      ++parallel_steps;
      for (float c : e.confidence) EXPECT_GE(c, p.threshold);
    }
  };
  const GenerationResult r = run(m, p, 2, cb);
  EXPECT_GT(parallel_steps, 0);
  EXPECT_LT(r.passes, p.gen_length);
  std::remove(path.c_str());
}

TEST(Threshold, EqualsOneTokenPerStepGreedyWhenTheBoundHolds) {
  const std::string path = modified_copy("tiny-llada", 12.f, true);
  const Model m = Model::load(path);
  const MaskedDiffusionParams p = threshold_params();
  int64_t parallel_steps = 0;
  bool bound_holds = true;
  DecodeCallbacks cb;
  cb.on_step = [&](const StepEvent& e) {
    const int64_t n = int64_t(e.committed.size());
    if (n < 2) return;
    ++parallel_steps;
    float min_conf = 1;
    for (float c : e.confidence) min_conf = std::min(min_conf, c);
    bound_holds = bound_holds && (double(n) + 1) * (1.0 - min_conf) <= 1.0;
  };
  const GenerationResult fast = run(m, p, 2, cb);
  ASSERT_GT(parallel_steps, 0) << "the sharpened model should commit several tokens in some step";
  ASSERT_TRUE(bound_holds);
  EXPECT_LT(fast.passes, p.gen_length / 2);
  // The premise of the modified model: no generated token is a prompt token (those keep their embedding).
  const std::vector<int32_t> prompt = prompt_ids();
  for (int32_t t : fast.tokens) ASSERT_EQ(std::count(prompt.begin(), prompt.end(), t), 0);
  MaskedDiffusionParams greedy = p;
  greedy.threshold = 0;
  greedy.steps = p.gen_length;
  const GenerationResult slow = run(m, greedy);
  EXPECT_EQ(slow.passes, p.gen_length);
  EXPECT_EQ(fast.tokens, slow.tokens);
  std::remove(path.c_str());
}

TEST(Determinism, SameSeedSameTokensAtAnyThreadCount) {
  const Model m = Model::load(test::fixture("tiny-dream.gguf"));
  MaskedDiffusionParams p;
  p.gen_length = 24;
  p.block_length = 8;
  p.steps = 12;
  p.sampling.temperature = 1.0f;
  p.sampling.seed = 1234;
  for (CacheMode cache : {CacheMode::None, CacheMode::Prefix, CacheMode::Dual}) {
    p.cache = cache;
    const auto one = run(m, p, 1).tokens;
    EXPECT_EQ(one, run(m, p, 2).tokens);
    EXPECT_EQ(one, run(m, p, 3).tokens);
  }
  p.cache = CacheMode::Prefix;
  const auto a = run(m, p, 2).tokens;
  p.sampling.seed = 99;
  EXPECT_NE(a, run(m, p, 2).tokens) << "a different seed should change sampled tokens";

  ArParams ar;
  ar.max_new_tokens = 16;
  ar.stop_at_eos = false;
  ar.sampling.temperature = 1.0f;
  ar.sampling.seed = 5;
  ThreadPool p1(1), p2(2);
  EXPECT_EQ(generate_ar(m, prompt_ids(), ar, &p1).tokens, generate_ar(m, prompt_ids(), ar, &p2).tokens);
}

// Greedy AR with the KV cache equals recomputing the whole causal sequence for every token.
void check_ar_against_recompute(const std::string& name) {
  const Model m = Model::load(test::fixture(name + ".gguf"));
  ThreadPool pool(2);
  ArParams ar;
  ar.max_new_tokens = 12;
  ar.stop_at_eos = false;
  const GenerationResult got = generate_ar(m, prompt_ids(), ar, &pool);
  ASSERT_EQ(got.tokens.size(), 12u);
  std::vector<int32_t> seq = prompt_ids();
  for (int64_t i = 0; i < 12; ++i) {
    std::vector<int32_t> input = seq;
    if (!m.config.shift_logits) input.push_back(m.config.mask_token);
    const int64_t n = int64_t(input.size());
    KvCache cache(m.config, n);
    std::vector<int32_t> groups(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) groups[size_t(j)] = int32_t(j);
    std::vector<float> logits(size_t(m.config.vocab));
    ForwardRequest req;
    req.tokens = input.data();
    req.n = n;
    req.groups = groups.data();
    req.logit_rows = {int32_t(n - 1)};
    req.logits = logits.data();
    forward(m, cache, req, &pool);
    const int32_t best = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    ASSERT_EQ(got.tokens[size_t(i)], best) << "token " << i;
    seq.push_back(best);
  }
}

TEST(Autoregressive, KvCacheMatchesRecomputationShifted) { check_ar_against_recompute("tiny-dream"); }
TEST(Autoregressive, KvCacheMatchesRecomputationMaskFed) { check_ar_against_recompute("tiny-llada"); }

TEST(Errors, BadParametersAreClearErrors) {
  const Model m = Model::load(test::fixture("tiny-llada.gguf"));
  MaskedDiffusionParams p;
  p.gen_length = 30;
  p.block_length = 8;
  EXPECT_THROW(run(m, p), Error);  // 30 is not a multiple of 8
  p.block_length = 10;
  p.steps = 4;  // not a multiple of 3 blocks
  EXPECT_THROW(run(m, p), Error);
}

// A stream's pieces end on whole tokens: a stop string holds back only an end of the text that may begin
// it (with the token it falls in), and a character split across tokens is never sent in part.
TEST(TextStream, PiecesAreWholeTokensAndWholeCharacters) {
  const TextTokenizer tok = TextTokenizer::open(test::source_path("models/text-dg.gguf"));
  const std::string text = "And the LORD spake unto Moses, saying, Speak unto the children of Israel.";
  const std::vector<int32_t> ids = tok.encode(text, false);
  ASSERT_GT(ids.size(), 8u);
  std::vector<size_t> boundaries = {0};  // where the text of each prefix of ids ends
  for (size_t n = 1; n <= ids.size(); ++n)
    boundaries.push_back(tok.decode(std::vector<int32_t>(ids.begin(), ids.begin() + long(n))).size());
  std::vector<std::string> pieces;
  int64_t tokens_sent = 0;
  TextStream stream(&tok, {}, {"<turn|>", "\n\n"}, [&](const std::string& piece, int64_t tokens) {
    pieces.push_back(piece);
    tokens_sent = tokens;
  });
  for (size_t n = 1; n <= ids.size(); ++n) {
    stream.update(std::vector<int32_t>(ids.begin(), ids.begin() + long(n)));
    // Nothing of this text begins a stop string, so every token is sent as soon as it is final, and each
    // piece says so.
    EXPECT_EQ(stream.sent().size(), boundaries[n]) << n;
    EXPECT_EQ(tokens_sent, int64_t(n)) << n;
  }
  EXPECT_EQ(stream.finish(ids), text);
  for (const std::string& piece : pieces) EXPECT_FALSE(piece.empty());
  // An end that may begin a stop string waits, whole tokens with it; the stop string itself is never sent.
  // Each piece counts the tokens whose text it holds whole: not the held-back newline's.
  std::vector<int32_t> with_stop = tok.encode("And the LORD said\n", false);
  const int64_t said = int64_t(tok.encode("And the LORD said", false).size());
  int64_t held_tokens = -1;
  TextStream held(&tok, {}, {"\n\n"}, [&](const std::string&, int64_t tokens) { held_tokens = tokens; });
  held.update(with_stop);
  EXPECT_EQ(held.sent(), "And the LORD said");
  EXPECT_EQ(held_tokens, said);
  with_stop.push_back(tok.encode("\n", false).front());
  held.update(with_stop);
  EXPECT_EQ(held.sent(), "And the LORD said");
  EXPECT_TRUE(held.stop_string_seen());
  EXPECT_EQ(held.finish(with_stop), "And the LORD said");
  EXPECT_EQ(held_tokens, said);
  // A character whose bytes come in two tokens is sent once both are final.
  const std::vector<int32_t> snowman = tok.encode("a \xE2\x98\x83 b", false);
  TextStream chars(&tok, {}, {});
  for (size_t n = 1; n <= snowman.size(); ++n) {
    chars.update(std::vector<int32_t>(snowman.begin(), snowman.begin() + long(n)));
    EXPECT_EQ(complete_utf8_prefix(chars.sent()), chars.sent().size()) << n;
  }
}

}  // namespace
}  // namespace canvas
