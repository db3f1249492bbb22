// Compute-aware decoding: forward passes over scattered positions, and masked decoding with frozen
// committed positions (MaskedDiffusionParams::freeze).
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "decode/masked.h"
#include "model/model.h"
#include "test_util.h"

namespace canvas {
namespace {

// The model cut to its first layer. A layer's K/V are a function of the token and its position only,
// so in a one-layer model a position's cached K/V never go stale while its token stays the same.
Model first_layer_only(Model m) {
  m.config.n_layers = 1;
  m.layers.resize(1);
  return m;
}

std::vector<int32_t> tokens_of_length(int64_t n) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(int32_t(3 + (i * 37) % 120));
  return t;
}

// Logits of the given rows after a full contiguous pass over `tokens` (bidirectional: groups all 0).
std::vector<float> full_pass_logits(const Model& m, const std::vector<int32_t>& tokens,
                                    const std::vector<int32_t>& rows) {
  KvCache cache(m.config, int64_t(tokens.size()));
  std::vector<int32_t> groups(tokens.size(), 0);
  std::vector<float> logits(rows.size() * size_t(m.config.vocab));
  ForwardRequest req;
  req.tokens = tokens.data();
  req.n = int64_t(tokens.size());
  req.groups = groups.data();
  req.logit_rows = rows;
  req.logits = logits.data();
  forward(m, cache, req, nullptr);
  return logits;
}

// A full pass with wrong tokens at `scattered`, then a pass over just those positions with the right
// tokens: the scattered rows' logits.
std::vector<float> repaired_logits(const Model& m, const std::vector<int32_t>& tokens,
                                   const std::vector<int32_t>& scattered, ThreadPool* pool) {
  const int64_t n = int64_t(tokens.size());
  KvCache cache(m.config, n);
  std::vector<int32_t> wrong = tokens, groups(tokens.size(), 0);
  for (int32_t p : scattered) wrong[size_t(p)] = 1;
  ForwardRequest first;
  first.tokens = wrong.data();
  first.n = n;
  first.groups = groups.data();
  forward(m, cache, first, pool);

  std::vector<int32_t> sub_tokens, sub_groups(scattered.size(), 0), rows;
  for (size_t i = 0; i < scattered.size(); ++i) {
    sub_tokens.push_back(tokens[size_t(scattered[i])]);
    rows.push_back(int32_t(i));
  }
  std::vector<float> logits(scattered.size() * size_t(m.config.vocab));
  ForwardRequest req;
  req.tokens = sub_tokens.data();
  req.n = int64_t(sub_tokens.size());
  req.positions = scattered.data();
  req.groups = sub_groups.data();
  req.key_end = n;
  req.logit_rows = rows;
  req.logits = logits.data();
  forward(m, cache, req, pool);
  return logits;
}

TEST(ScatteredForward, OneLayerRepairEqualsAFullPassBitwise) {
  for (const char* name : {"tiny-llada", "tiny-dream", "tiny-llada-moe"}) {
    SCOPED_TRACE(name);
    const Model m = first_layer_only(Model::load(test::fixture(std::string(name) + ".gguf")));
    const std::vector<int32_t> tokens = tokens_of_length(20), scattered{0, 3, 7, 12, 19};
    ThreadPool pool(2);
    EXPECT_EQ(repaired_logits(m, tokens, scattered, &pool), full_pass_logits(m, tokens, scattered));
  }
}

TEST(ScatteredForward, DeeperModelsSeeTheStaleLayers) {
  // Negative control: with two layers the untouched positions' second-layer K/V still come from the
  // wrong tokens, so the repaired rows differ from a full pass.
  const Model m = Model::load(test::fixture("tiny-llada.gguf"));
  ASSERT_GE(m.config.n_layers, 2);
  const std::vector<int32_t> tokens = tokens_of_length(20), scattered{3, 7, 12};
  ThreadPool pool(2);
  EXPECT_NE(repaired_logits(m, tokens, scattered, &pool), full_pass_logits(m, tokens, scattered));
}

TEST(ScatteredForward, BadPositionsAreClearErrors) {
  const Model m = Model::load(test::fixture("tiny-llada.gguf"));
  KvCache cache(m.config, 16);
  const std::vector<int32_t> tokens{5, 6, 7}, groups{0, 0, 0};
  ForwardRequest req;
  req.tokens = tokens.data();
  req.n = 3;
  req.groups = groups.data();
  req.key_end = 16;
  const std::vector<int32_t> unordered{4, 2, 9}, beyond{4, 9, 16};
  req.positions = unordered.data();
  EXPECT_THROW(forward(m, cache, req, nullptr), Error);
  req.positions = beyond.data();
  EXPECT_THROW(forward(m, cache, req, nullptr), Error);
  const std::vector<int32_t> fine{1, 4, 9};
  req.positions = fine.data();
  req.key_end = 0;
  EXPECT_THROW(forward(m, cache, req, nullptr), Error);  // scattered positions need key_end
}

struct FreezeSetting {
  int64_t gen, block, steps;
  UnmaskOrder order;
  StepSchedule schedule;
  float threshold;
  CacheMode cache;
};

MaskedDiffusionParams blocks(int64_t gen, int64_t block, int64_t steps, CacheMode cache) {
  MaskedDiffusionParams p;
  p.gen_length = gen;
  p.block_length = block;
  p.steps = steps;
  p.cache = cache;
  return p;
}

GenerationResult decode(const Model& m, MaskedDiffusionParams p, bool freeze) {
  ThreadPool pool(2);
  p.freeze = freeze;
  return generate_masked(m, {5, 72, 101, 108, 108, 111, 32, 119}, p, &pool);
}

TEST(Freeze, OneLayerModelsGiveTheTokensOfFullRecomputation) {
  const FreezeSetting settings[] = {
      {24, 8, 24, UnmaskOrder::Confidence, StepSchedule::Llada, 0, CacheMode::Prefix},
      {24, 8, 24, UnmaskOrder::Margin, StepSchedule::Llada, 0, CacheMode::None},
      {24, 24, 12, UnmaskOrder::Entropy, StepSchedule::Llada, 0, CacheMode::Prefix},
      {32, 16, 10, UnmaskOrder::Confidence, StepSchedule::Dream, 0, CacheMode::Prefix},
      {24, 8, 24, UnmaskOrder::Confidence, StepSchedule::Llada, 0.05f, CacheMode::Dual},
  };
  for (const char* name : {"tiny-llada", "tiny-dream", "tiny-llada-moe"}) {
    const Model m = first_layer_only(Model::load(test::fixture(std::string(name) + ".gguf")));
    for (const FreezeSetting& s : settings) {
      SCOPED_TRACE(std::string(name) + " gen " + std::to_string(s.gen) + " block " + std::to_string(s.block));
      MaskedDiffusionParams p = blocks(s.gen, s.block, s.steps, s.cache);
      p.order = s.order;
      p.schedule = s.schedule;
      p.threshold = s.threshold;
      const GenerationResult full = decode(m, p, false), frozen = decode(m, p, true);
      EXPECT_EQ(frozen.tokens, full.tokens);
      EXPECT_EQ(frozen.passes, full.passes);
      // Fewer rows whenever some block takes more than one pass.
      if (full.passes > s.gen / s.block) {
        EXPECT_LT(frozen.rows_computed, full.rows_computed);
      } else {
        EXPECT_EQ(frozen.rows_computed, full.rows_computed);
      }
    }
  }
}

TEST(Freeze, RecomputesMaskedAndJustCommittedPositionsOnly) {
  // No prompt, one block of 16, one token per step: the first pass computes all 16 rows, step s > 0
  // computes the 16 - s masked positions and the one committed at step s - 1.
  const Model m = Model::load(test::fixture("tiny-llada.gguf"));
  MaskedDiffusionParams p = blocks(16, 16, 16, CacheMode::Prefix);
  ThreadPool pool(2);
  p.freeze = true;
  const GenerationResult frozen = generate_masked(m, {}, p, &pool);
  int64_t expected = 16;
  for (int64_t s = 1; s < 16; ++s) expected += (16 - s) + 1;
  EXPECT_EQ(frozen.rows_computed, expected);
  EXPECT_EQ(frozen.passes, 16);
  for (int32_t t : frozen.tokens) EXPECT_NE(t, m.config.mask_token);
  p.freeze = false;
  EXPECT_EQ(generate_masked(m, {}, p, &pool).rows_computed, 16 * 16);
}

TEST(Freeze, DeepModelsFillEveryPositionDeterministically) {
  const Model m = Model::load(test::fixture("tiny-dream.gguf"));
  MaskedDiffusionParams p = blocks(24, 8, 12, CacheMode::Prefix);
  p.sampling.temperature = 0.7f;
  p.sampling.seed = 3;
  const GenerationResult a = decode(m, p, true), b = decode(m, p, true);
  EXPECT_EQ(a.tokens, b.tokens);
  for (int32_t t : a.tokens) EXPECT_NE(t, m.config.mask_token);
}

TEST(Freeze, RefreshEveryStepIsFullRecomputation) {
  const Model m = Model::load(test::fixture("tiny-llada.gguf"));
  MaskedDiffusionParams p = blocks(24, 8, 24, CacheMode::Prefix);
  const GenerationResult full = decode(m, p, false);
  p.freeze_refresh = 1;
  const GenerationResult refreshed = decode(m, p, true);
  EXPECT_EQ(refreshed.tokens, full.tokens);
  EXPECT_EQ(refreshed.rows_computed, full.rows_computed);
  // Every fourth step: full passes at steps 0 and 4 of each 8-step block, subsets in between.
  p.freeze_refresh = 4;
  const GenerationResult sometimes = decode(m, p, true);
  p.freeze_refresh = 0;
  const GenerationResult never = decode(m, p, true);
  EXPECT_LT(never.rows_computed, sometimes.rows_computed);
  EXPECT_LT(sometimes.rows_computed, full.rows_computed);
}

}  // namespace
}  // namespace canvas
