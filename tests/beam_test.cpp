// Beam search over commit decisions (generate_masked_beam) on the tiny fixture models: width 1 is
// confidence-order greedy decoding, and a beam wide enough to keep every partial canvas finds the
// likeliest canvas over all commit orders, checked against an exhaustive search written here.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "decode/masked.h"
#include "model/model.h"
#include "ops/ops.h"
#include "test_util.h"

namespace canvas {
namespace {

const std::vector<int32_t> kPrompt = {5, 72, 101, 108, 108, 111, 32, 119};

TEST(Beam, WidthOneIsConfidenceGreedyOneTokenPerPass) {
  for (const char* name : {"tiny-llada", "tiny-dream"}) {
    const Model m = Model::load(test::fixture(std::string(name) + ".gguf"));
    ThreadPool pool(2);
    MaskedDiffusionParams greedy;
    greedy.gen_length = 16;
    greedy.block_length = 8;
    greedy.steps = 16;
    MaskedDiffusionParams beam = greedy;
    beam.beam_width = 1;
    const GenerationResult a = generate_masked(m, kPrompt, greedy, &pool);
    const GenerationResult b = generate_masked_beam(m, kPrompt, beam, &pool);
    EXPECT_EQ(a.tokens, b.tokens) << name;
    EXPECT_EQ(b.passes, 16) << name;
  }
}

struct Best {
  double score = -std::numeric_limits<double>::infinity();
  std::vector<int32_t> seq;
};

// Every order of committing the masked positions, each with either of the two likeliest tokens of its
// row (the beam's candidates), scored by the sum of log p of the commits; the best finished sequence.
void exhaustive(const Model& m, std::vector<int32_t>& seq, const std::vector<int32_t>& groups, double score,
                ThreadPool* pool, Best& best) {
  const int32_t mask = m.config.mask_token;
  std::vector<int32_t> masked;
  for (size_t p = kPrompt.size(); p < seq.size(); ++p)
    if (seq[p] == mask) masked.push_back(int32_t(p));
  if (masked.empty()) {
    if (score > best.score) best = {score, seq};
    return;
  }
  KvCache cache(m.config, int64_t(seq.size()));
  ForwardRequest req;
  req.tokens = seq.data();
  req.n = int64_t(seq.size());
  req.groups = groups.data();
  req.logit_rows = masked;
  const int64_t V = m.config.vocab;
  std::vector<float> logits(masked.size() * size_t(V));
  req.logits = logits.data();
  forward(m, cache, req, pool);
  for (size_t i = 0; i < masked.size(); ++i) {
    const float* row = &logits[i * size_t(V)];
    const double lse = row_stats(row, V).logsumexp;
    for (int32_t tok : top_k(row, V, 2)) {
      if (tok == mask) continue;
      seq[size_t(masked[i])] = tok;
      exhaustive(m, seq, groups, score + double(row[tok]) - lse, pool, best);
      seq[size_t(masked[i])] = mask;
    }
  }
}

TEST(Beam, WideBeamFindsTheLikeliestCanvasOverAllOrders) {
  const Model m = Model::load(test::fixture("tiny-llada.gguf"));
  ThreadPool pool(2);
  const int32_t mask = m.config.mask_token;
  MaskedDiffusionParams p;
  p.gen_length = 8;
  p.block_length = 8;
  p.initial_canvas = {40, mask, 41, mask, 42, 43, mask, 44};  // three positions to fill
  std::vector<int32_t> seq = kPrompt;
  seq.insert(seq.end(), p.initial_canvas.begin(), p.initial_canvas.end());
  std::vector<int32_t> groups(seq.size(), 1);
  std::fill(groups.begin(), groups.begin() + int64_t(kPrompt.size()), 0);
  Best best;
  exhaustive(m, seq, groups, 0.0, &pool, best);
  ASSERT_FALSE(best.seq.empty());
  const std::vector<int32_t> want(best.seq.begin() + int64_t(kPrompt.size()), best.seq.end());

  // Depth 1 has at most 3 x 2 partial canvases and depth 2 at most 6 x 4 (a row's two likeliest tokens
  // depend on what else is filled), so a width of 32 prunes nothing.
  p.beam_width = 32;
  const GenerationResult wide = generate_masked(m, kPrompt, p, &pool);
  EXPECT_EQ(wide.tokens, want);
  EXPECT_GE(wide.passes, 1 + 6 + 12);  // one pass per live beam at each depth
  EXPECT_LE(wide.passes, 1 + 6 + 24);

}

}  // namespace
}  // namespace canvas
