// ForwardPlan (model/model.h), the batch's metadata plan_forward works out once for every executor: rows
// and positions, sliding-window starts, each request's visible keys per layer kind (encoder, decoder
// canvas after a cache, kept canvas K/V), tree visibility bits (windowed on sliding layers), the Head
// slot's rows and the self-conditioned requests, on hand-made batches.
#include <gtest/gtest.h>

#include <vector>

#include "model/kv_cache.h"
#include "model/model.h"
#include "ops/lm_head.h"
#include "test_util.h"

namespace canvas {
namespace {

constexpr size_t kFull = size_t(AttentionKind::Full), kSliding = size_t(AttentionKind::Sliding);

ForwardRequest request(const std::vector<int32_t>& tokens, int64_t pos0, const std::vector<int32_t>& groups) {
  ForwardRequest req;
  req.tokens = tokens.data();
  req.n = int64_t(tokens.size());
  req.pos0 = pos0;
  req.groups = groups.data();
  return req;
}

TEST(ForwardPlan, SlidingWindowStartsOfAPromptLongerThanTheWindow) {
  const Model m = Model::load(test::fixture("tiny-diffusion-gemma"));
  ASSERT_EQ(m.config.sliding_window, 8);
  const std::vector<int32_t> tokens{2, 17, 33, 9, 41, 5, 12, 7, 8, 9, 10, 11}, groups(12, 0);
  KvCache cache(m.config, 32);
  KvCache* caches[] = {&cache};
  const ForwardRequest req = request(tokens, 0, groups);
  const ForwardPlan plan = plan_forward(m, caches, std::span<const ForwardRequest>(&req, 1));
  EXPECT_EQ(plan.n, 12);
  EXPECT_EQ(plan.row0, (std::vector<int64_t>{0, 12}));
  EXPECT_EQ(plan.key_ends, (std::vector<int64_t>{12}));
  ASSERT_EQ(plan.window_start.size(), 12u);
  for (int32_t i = 0; i < 12; ++i) EXPECT_EQ(plan.window_start[size_t(i)], i - 7) << i;
  // An encoder reads the cache from 0 on every kind (its rows are cut per row by window_start).
  EXPECT_EQ(plan.first_key[kFull], (std::vector<int64_t>{0}));
  EXPECT_EQ(plan.first_key[kSliding], (std::vector<int64_t>{0}));
  EXPECT_EQ(plan.canvas_keys, (std::vector<int64_t>{0}));
  EXPECT_TRUE(plan.slots.empty());
  EXPECT_TRUE(plan.tree_bits[kFull].empty() && plan.tree_bits[kSliding].empty());

  // A model without a sliding window has no window starts.
  const Model llada = Model::load(test::fixture("tiny-llada.gguf"));
  KvCache llada_cache(llada.config, 32);
  KvCache* llada_caches[] = {&llada_cache};
  EXPECT_TRUE(plan_forward(llada, llada_caches, std::span<const ForwardRequest>(&req, 1)).window_start.empty());
}

TEST(ForwardPlan, DecoderCanvasAfterACacheSeesTheWindowBeforeItAndItsWholeCanvas) {
  const Model m = Model::load(test::fixture("tiny-diffusion-gemma"));
  const std::vector<int32_t> prompt{2, 17, 33, 9, 41, 5, 12, 7, 8, 9, 10, 11}, groups(12, 0);
  const std::vector<int32_t> canvas{4, 4, 4, 4, 4, 4};
  KvCache cache(m.config, 32), other(m.config, 32), kept(m.config, 6);
  // An encoder pass extending `cache`, a decoder canvas after it, a decoder canvas after a 3-token cache,
  // and two rows of a kept canvas K/V of 6 rows after the 12-token cache.
  std::vector<ForwardRequest> reqs{request(prompt, 0, groups), request(canvas, 12, groups),
                                   request(canvas, 3, groups), request(canvas, 12, groups)};
  for (size_t s = 1; s < 4; ++s) reqs[s].decoder = true;
  const std::vector<int32_t> rows{1, 3};
  reqs[3].n = 2;
  reqs[3].canvas_kv = &kept;
  reqs[3].canvas_rows = rows.data();
  KvCache* caches[] = {&cache, &cache, &other, &cache};
  const ForwardPlan plan = plan_forward(m, caches, reqs);
  EXPECT_EQ(plan.row0, (std::vector<int64_t>{0, 12, 18, 24, 26}));
  EXPECT_EQ(plan.pos[size_t(12)], 12);
  EXPECT_EQ(plan.pos[size_t(24)], 13);
  EXPECT_EQ(plan.pos[size_t(25)], 15);
  EXPECT_EQ(plan.key_ends, (std::vector<int64_t>{12, 12, 3, 12}));
  // Decoder rows are anchored at their canvas's first position.
  for (int64_t r = 12; r < 18; ++r) EXPECT_EQ(plan.window_start[size_t(r)], 12 - 7);
  for (int64_t r = 18; r < 24; ++r) EXPECT_EQ(plan.window_start[size_t(r)], 3 - 7);
  for (int64_t r = 24; r < 26; ++r) EXPECT_EQ(plan.window_start[size_t(r)], 12 - 7);
  EXPECT_EQ(plan.first_key[kFull], (std::vector<int64_t>{0, 0, 0, 0}));
  EXPECT_EQ(plan.first_key[kSliding], (std::vector<int64_t>{0, 5, 0, 5}));
  EXPECT_EQ(plan.first_key_of(1, AttentionKind::Sliding), 5);
  EXPECT_EQ(plan.canvas_keys, (std::vector<int64_t>{0, 6, 6, 6}));
}

TEST(ForwardPlan, TreeBitsAreAncestorsAndOnSlidingLayersThoseInsideTheWindow) {
  const Model m = Model::load(test::fixture("tiny-diffusion-gemma"));
  // A chain of 10 rows from pos0 = 3 (deeper than the window of 8) and a branch off the root.
  std::vector<int32_t> parents{-1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0};
  const std::vector<int32_t> tokens(11, 5), groups(11, 3), prompt{2, 17, 33}, prompt_groups(3, 0);
  KvCache cache(m.config, 32);
  std::vector<ForwardRequest> reqs{request(prompt, 0, prompt_groups), request(tokens, 3, groups)};
  KvCache other(m.config, 32);
  reqs[1].tree_parents = parents.data();
  KvCache* caches[] = {&other, &cache};
  const ForwardPlan plan = plan_forward(m, caches, reqs);
  ASSERT_EQ(plan.tree_bits[kFull].size(), 14u);
  ASSERT_EQ(plan.tree_bits[kSliding].size(), 14u);
  for (int64_t r = 0; r < 3; ++r) EXPECT_EQ(plan.tree_bits[kFull][size_t(r)], 0u);  // not a tree
  EXPECT_EQ(plan.slot(3 + 10), 3 + 10);
  EXPECT_EQ(plan.pos[size_t(3 + 10)], 4);
  for (int64_t i = 0; i < 10; ++i) {
    SCOPED_TRACE(i);
    const uint64_t path = (uint64_t(1) << (i + 1)) - 1;  // rows 0..i
    EXPECT_EQ(plan.pos[size_t(3 + i)], 3 + i);
    EXPECT_EQ(*plan.tree_bits_of(3 + i, AttentionKind::Full), path);
    // Row i (position 3 + i) sees positions from 3 + i - 7 on: ancestors a >= i - 7.
    const uint64_t before_window = i >= 7 ? (uint64_t(1) << (i - 7)) - 1 : 0;
    EXPECT_EQ(*plan.tree_bits_of(3 + i, AttentionKind::Sliding), path & ~before_window);
  }
  EXPECT_EQ(plan.tree_bits[kFull][size_t(3 + 10)], (uint64_t(1) << 10) | 1u);
  EXPECT_EQ(plan.tree_bits[kSliding][size_t(3 + 10)], (uint64_t(1) << 10) | 1u);
}

TEST(ForwardPlan, HeadRowsPlainFirstThenFusedAndTheSelfConditionedRequests) {
  const Model m = Model::load(test::fixture("tiny-diffusion-gemma"));
  const std::vector<int32_t> prompt{2, 17, 33, 9}, groups(4, 0), canvas{4, 4, 4};
  KvCache a(m.config, 32), b(m.config, 32), c(m.config, 32);
  std::vector<float> logits(size_t(4 * m.config.vocab)), prev(size_t(3 * m.config.vocab));
  std::vector<HeadRowStats> stats(4);
  std::vector<ForwardRequest> reqs{request(canvas, 4, groups), request(prompt, 0, groups), request(canvas, 4, groups)};
  reqs[0].decoder = reqs[2].decoder = true;
  reqs[0].logit_rows = {2, 0};  // fused head
  reqs[0].head_stats = stats.data();
  reqs[0].self_cond = prev.data();
  reqs[1].logit_rows = {3};  // plain logits
  reqs[1].logits = logits.data();
  reqs[2].logit_rows = {1, 2};  // plain logits
  reqs[2].logits = logits.data();
  reqs[2].self_cond = prev.data();
  KvCache* caches[] = {&a, &b, &c};
  const ForwardPlan plan = plan_forward(m, caches, reqs);
  EXPECT_EQ(plan.row0, (std::vector<int64_t>{0, 3, 7, 10}));
  EXPECT_EQ(plan.head_order, (std::vector<int64_t>{1, 2, 0}));
  EXPECT_EQ(plan.head_row0, (std::vector<int64_t>{3, 0, 1}));
  EXPECT_EQ(plan.head_rows, (std::vector<int32_t>{3 + 3, 7 + 1, 7 + 2, 0 + 2, 0 + 0}));
  EXPECT_EQ(plan.plain_head_rows, 3);
  EXPECT_EQ(plan.conditioned, (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(plan.conditioned_rows, 6);
}

}  // namespace
}  // namespace canvas
