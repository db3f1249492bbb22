// Draft-and-verify decoding: greedy, it writes exactly the tokens of AR decoding (whatever the draft length,
// draft passes, lookup and datastore drafts, repetition, presence and frequency penalties, logit bias and stop
// ids); sampling, its tokens follow AR's distribution (a chi-square test over 10^4 draws against the model's
// own conditional probabilities), with decoder drafts, with lookup drafts and with datastore drafts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>

#include "core/error.h"
#include "decode/ar.h"
#include "decode/sampling.h"
#include "decode/verify.h"
#include "gguf_copy.h"
#include "model/kv_cache.h"
#include "test_util.h"

namespace canvas {
namespace {

const std::vector<std::vector<int32_t>> kPrompts = {{2, 105, 17, 250, 33, 4, 198, 61}, {2, 33}, {2, 105, 17, 250, 9}};

// Draft-and-verify settings for the text of `ar` (its tokens, sampling and stop ids): k drafts a cycle,
// overlapped or not, lookup drafts of n-grams up to `lookup` (0: off), trees of up to `tree` tokens (0: off).
VerifyParams verify_like(const ArParams& ar, int64_t k, bool overlap, int64_t lookup, int64_t tree) {
  VerifyParams v;
  v.max_new_tokens = ar.max_new_tokens;
  v.sampling = ar.sampling;
  v.stop_ids = ar.stop_ids;
  v.draft_length = k;
  v.overlap = overlap;
  v.draft_lookup = lookup;
  v.draft_tree = tree;
  return v;
}

// Greedy draft-and-verify against AR decoding on every prompt, draft length and repetition penalty (AR's
// stop ids), plain (`draft_steps` draft passes, then one verify pass per cycle) or overlapped (one pass per
// cycle verifies and drafts the next cycle for every kept count), without lookup drafts and with them
// (n-grams of 3 and 2 tokens, and of 1; lookup drafts of 2 and 8 tokens), and with datastore drafts (alone
// and after lookup) from a tiny corpus: AR's greedy text of each prompt with every 5th token changed, so
// that its drafts are kept in part.
void expect_greedy_equals_ar(bool overlap, int64_t draft_steps) {
  const Model m = Model::load(test::fixture("tiny-diffusion-gemma"));
  ThreadPool pool(2);
  std::vector<int32_t> corpus;
  for (const auto& prompt : kPrompts) {
    ArParams ar;
    ar.max_new_tokens = 40;
    ar.stop_ids = {-1};
    const std::vector<int32_t> text = generate_ar(m, prompt, ar, &pool).tokens;
    for (size_t i = 0; i < text.size(); ++i)
      corpus.push_back(i % 5 == 4 ? int32_t((text[i] + 1) % m.config.vocab) : text[i]);
  }
  const Datastore datastore(corpus);
  int64_t lookup_cycles = 0, lookup_accepted = 0, decoder_cycles_with_lookup = 0;
  int64_t datastore_cycles = 0, datastore_accepted = 0, datastore_rejected = 0;
  int64_t tree_cycles = 0, tree_accepted = 0, tree_branching = 0, decoder_trees = 0;
  struct Drafting {
    int64_t lookup, lookup_length;
    bool datastore;
    int64_t tree = 0;
  };
  for (const auto& prompt : kPrompts)
    for (int64_t k : {1, 3, 8})
      for (float penalty : {1.f, 1.3f})
        for (const auto& [lookup, lookup_length, stored, tree] :
             std::vector<Drafting>{{0, 8, false}, {3, 8, false}, {1, 2, false}, {0, 8, true}, {3, 8, true},
                                   {3, 8, false, 5}, {3, 8, true, 12}}) {
          ArParams ar;
          ar.max_new_tokens = 40;
          ar.sampling.repeat_penalty = penalty;
          ar.stop_ids = {1, 106};
          VerifyParams v = verify_like(ar, k, overlap, lookup, tree);
          v.draft_steps = draft_steps;
          v.lookup_length = lookup_length;
          if (stored) {
            v.datastore = &datastore;
            v.datastore_draft.min_count = 1;
            v.datastore_length = 3;
          }
          v.tree.depth = 6;
          const GenerationResult a = generate_ar(m, prompt, ar, &pool);
          const VerifyResult b = generate_verify(m, prompt, v, &pool);
          const VerifyStats& stats = b.stats;
          const std::string where = "k " + std::to_string(k) + " steps " + std::to_string(draft_steps) +
                                    " penalty " + std::to_string(penalty) + " lookup " +
                                    std::to_string(lookup) + (stored ? " datastore" : "") +
                                    " tree " + std::to_string(tree) + (overlap ? " overlapped" : "");
          EXPECT_EQ(b.tokens, a.tokens) << where;
          EXPECT_EQ(stats.cycles, b.encoder_passes) << where;
          // (The decoder's trees are drafted by a decoder pass.)
          const int64_t decoder_cycles = stats.cycles - stats.lookup_cycles - stats.datastore_cycles -
                                         stats.tree_cycles + stats.decoder_tree_cycles;
          if (!stored || tree > 0) {
            EXPECT_EQ(stats.datastore_cycles, 0) << where;
          }
          if (tree > 0) {
            EXPECT_EQ(stats.lookup_cycles, 0) << where;  // trees replace the chains
            EXPECT_LE(stats.tree_drafted, stats.tree_cycles * tree) << where;
            EXPECT_LE(stats.tree_accepted, stats.tree_drafted) << where;
            // Plain: every decoder cycle.
            EXPECT_EQ(stats.decoder_tree_cycles, overlap ? 0 : decoder_cycles) << where;
          } else {
            EXPECT_EQ(stats.tree_cycles, 0) << where;
          }
          if (lookup == 0 && !stored && tree == 0) {
            // The prompt's pass, then per cycle the draft passes and one verify pass (overlapped: one pass).
            EXPECT_EQ(stats.lookup_cycles, 0) << where;
            EXPECT_EQ(b.passes, 1 + stats.cycles * (overlap ? 1 : 1 + draft_steps)) << where;
          } else if (!overlap) {
            // A lookup or datastore cycle is its verify pass alone.
            EXPECT_EQ(b.passes, 1 + stats.cycles + decoder_cycles * draft_steps) << where;
          } else {
            // A decoder cycle after a lookup or datastore cycle drafts in a pass of its own.
            EXPECT_GE(b.passes, 1 + stats.cycles) << where;
            EXPECT_LE(b.passes, 1 + stats.cycles + decoder_cycles) << where;
          }
          EXPECT_LE(stats.accepted, stats.drafted) << where;
          EXPECT_LE(stats.lookup_accepted, stats.lookup_drafted) << where;
          EXPECT_LE(stats.lookup_drafted, stats.lookup_cycles * lookup_length) << where;
          EXPECT_LE(stats.datastore_accepted, stats.datastore_drafted) << where;
          EXPECT_LE(stats.datastore_drafted, stats.datastore_cycles * 3) << where;
          // cycles_keeping counts the decoder's full-length cycles only.
          int64_t counted = 0;
          for (int64_t n : stats.cycles_keeping) counted += n;
          EXPECT_LE(counted, decoder_cycles) << where;
          // Each cycle commits its kept drafts plus one token of AR's own (fewer only when the run ends).
          EXPECT_LE(int64_t(b.tokens.size()), 1 + stats.accepted + stats.cycles) << where;
          lookup_cycles += stats.lookup_cycles;
          lookup_accepted += stats.lookup_accepted;
          if (lookup > 0) decoder_cycles_with_lookup += decoder_cycles;
          datastore_cycles += stats.datastore_cycles;
          datastore_accepted += stats.datastore_accepted;
          datastore_rejected += stats.datastore_drafted - stats.datastore_accepted;
          tree_cycles += stats.tree_cycles;
          tree_accepted += stats.tree_accepted;
          tree_branching += stats.tree_drafted > stats.tree_cycles * 6;  // more tokens than one path holds
          decoder_trees += stats.decoder_tree_cycles;
        }
  // Both kinds of cycle ran, and lookup drafts were kept (the tiny model's greedy text repeats itself).
  EXPECT_GT(lookup_cycles, 0);
  EXPECT_GT(lookup_accepted, 0);
  EXPECT_GT(decoder_cycles_with_lookup, 0);
  // Datastore drafts ran, and were both kept and rejected.
  EXPECT_GT(datastore_cycles, 0);
  EXPECT_GT(datastore_accepted, 0);
  EXPECT_GT(datastore_rejected, 0);
  // Trees ran, branched, and their drafts were kept.
  EXPECT_GT(tree_cycles, 0);
  EXPECT_GT(tree_accepted, 0);
  EXPECT_GT(tree_branching, 0);
  if (!overlap) {
    EXPECT_GT(decoder_trees, 0);
  }
}

TEST(Verify, GreedyEqualsArDecoding) {
  expect_greedy_equals_ar(false, 1);
  expect_greedy_equals_ar(false, 2);
}

TEST(Verify, OverlappedGreedyEqualsArDecoding) { expect_greedy_equals_ar(true, 1); }

// With the presence and frequency penalties and a logit bias (a ban on AR's unbiased first token, a push for
// another), greedy draft-and-verify still writes AR's tokens: every draft is checked against the row AR would
// shape, whatever drafted it (decoder, lookup, tree; plain or overlapped).
TEST(Verify, GreedyWithPenaltiesAndBiasEqualsArDecoding) {
  const Model m = Model::load(test::fixture("tiny-diffusion-gemma"));
  ThreadPool pool(2);
  int64_t accepted = 0;
  for (const auto& prompt : kPrompts) {
    ArParams ar;
    ar.max_new_tokens = 40;
    ar.stop_ids = {-1};
    const std::vector<int32_t> plain = generate_ar(m, prompt, ar, &pool).tokens;
    ar.sampling.frequency_penalty = 0.5f;
    ar.sampling.presence_penalty = 0.3f;
    ar.sampling.logit_bias = {{plain[0], -100.f}, {plain[3], 2.f}};
    const std::vector<int32_t> shaped = generate_ar(m, prompt, ar, &pool).tokens;
    EXPECT_NE(shaped, plain);
    EXPECT_EQ(std::count(shaped.begin(), shaped.end(), plain[0]), 0);
    for (bool overlap : {false, true})
      for (int64_t k : {1, 3, 8})
        for (int64_t lookup : {0, 3})
          for (int64_t tree : {0, 5}) {
            const VerifyResult b = generate_verify(m, prompt, verify_like(ar, k, overlap, lookup, tree), &pool);
            EXPECT_EQ(b.tokens, shaped) << "k " << k << " lookup " << lookup << " tree " << tree
                                        << (overlap ? " overlapped" : "");
            accepted += b.stats.accepted;
          }
  }
  EXPECT_GT(accepted, 0) << "no draft was ever kept: only AR's own tokens were compared";
}

// Each cycle's event shows the committed tokens, then the drafts about to be verified after final_end:
// --visual draws them dim, the committed ones bold. The last event has no drafts.
TEST(Verify, StepEventsShowTheDraftsAfterTheCommittedTokens) {
  const Model m = Model::load(test::fixture("tiny-diffusion-gemma"));
  for (bool overlap : {false, true})
    for (int64_t lookup : {0, 3}) {
      VerifyParams v;
      v.max_new_tokens = 20;
      v.draft_length = 3;
      v.overlap = overlap;
      v.draft_lookup = lookup;
      v.lookup_length = 3;  // lookup cycles show as many drafts as the decoder's
      v.stop_ids = {-1};
      std::vector<StepEvent> events;
      std::vector<std::vector<int32_t>> shown;
      DecodeCallbacks callbacks;
      callbacks.on_step = [&](const StepEvent& e) {
        events.push_back(e);
        shown.push_back(*e.canvas);
      };
      const VerifyResult r = generate_verify(m, kPrompts[0], v, nullptr, callbacks);
      ASSERT_GE(events.size(), 2u);
      int64_t committed = 0;
      for (size_t i = 0; i < events.size(); ++i) {
        const StepEvent& e = events[i];
        ASSERT_GE(e.final_end, 0);
        EXPECT_EQ(e.final_end, committed + int64_t(e.committed.size())) << i;
        for (int64_t c : e.committed) EXPECT_EQ(c, committed++);
        const int64_t drafts = int64_t(shown[i].size()) - e.final_end;
        EXPECT_EQ(drafts, i + 1 < events.size() ? std::min<int64_t>(3, 20 - e.final_end) : 0) << i;
        // The committed part is the run's text so far.
        EXPECT_TRUE(std::equal(shown[i].begin(), shown[i].begin() + e.final_end, r.tokens.begin())) << i;
      }
      EXPECT_EQ(committed, int64_t(r.tokens.size()));
    }
}

TEST(Verify, OverlapNeedsADecoderAndOneDraftStep) {
  VerifyParams v;
  v.overlap = true;
  v.draft_steps = 2;
  const Model dg = Model::load(test::fixture("tiny-diffusion-gemma"));
  EXPECT_THROW(generate_verify(dg, kPrompts[0], v, nullptr), Error);
}

TEST(Verify, RefusesModelsWithoutADiffusionDecoderPath) {
  const Model m = Model::load(test::fixture("tiny-llada.gguf"));
  VerifyParams v;
  EXPECT_THROW(generate_verify(m, {1, 2, 3}, v, nullptr), Error);
}

// The joint distribution of the first two tokens at T = 0.9 with top-k 4 (16 cells): the first comes from
// the prompt pass, the second through a draft and its verification (the tiny random model's decoder
// proposes nothing like the encoder's distribution, so rejections and residual draws are exercised).
// The joint distribution of the first `length` tokens at T = 0.9 with top-k 4 (4^length cells): the first
// comes from the prompt pass, the others through drafts and their verification (the tiny random model's
// decoder proposes nothing like the encoder's distribution, so rejections and residual draws are
// exercised). With overlap, the third token's draft comes from a candidate of the first cycle's pass.
//
// With `lookup`, the prompt is followed by its own greedy continuation, which repeats, so that the drafts
// come from lookup (single tokens' successors; a point-mass proposal) and are both kept and rejected. With
// `datastore` (and no lookup), the same drafts come from a datastore over that greedy text; with `tree`
// too, trees of up to `tree` tokens from a datastore of AR's own samples (several children per node).
//
// With `shaped`, the presence and frequency penalties and a logit bias shape every row, AR's and verify's.
void expect_ar_distribution(bool overlap, int length, int64_t lookup = 0, bool datastore = false, int64_t tree = 0,
                            bool shaped = false) {
  const Model m = Model::load(test::fixture("tiny-diffusion-gemma"));
  const ModelConfig& c = m.config;
  std::vector<int32_t> prompt = kPrompts[0];
  if (lookup > 0 || datastore) {
    ArParams ar;
    ar.max_new_tokens = 24;
    ar.stop_ids = {-1};
    const std::vector<int32_t> more = generate_ar(m, prompt, ar, nullptr).tokens;
    prompt.insert(prompt.end(), more.begin(), more.end());
  }
  SamplingParams s;
  // lookup and datastore: flatter, so that their drafts are often rejected too
  s.temperature = lookup > 0 || datastore ? 3.f : 0.9f;
  s.top_k = 4;
  if (shaped) {
    s.frequency_penalty = 0.8f;
    s.presence_penalty = 0.5f;
    s.logit_bias = {{prompt.back(), 1.5f}, {17, -0.7f}};
  }
  // Exact p(t1) p(t2 | t1) ... from causal passes (`generated`: the tokens after the prompt, which the
  // penalties count).
  auto next_distribution = [&](const std::vector<int32_t>& ids, const std::vector<int32_t>& generated = {}) {
    KvCache cache(c, int64_t(ids.size()));
    std::vector<int32_t> groups(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) groups[i] = int32_t(i);
    std::vector<float> logits(static_cast<size_t>(c.vocab));
    ForwardRequest req;
    req.tokens = ids.data();
    req.n = int64_t(ids.size());
    req.groups = groups.data();
    req.logit_rows = {int32_t(ids.size() - 1)};
    req.logits = logits.data();
    forward(m, cache, req, nullptr);
    return sampling_distribution(penalized_row(logits.data(), c.vocab, s, {nullptr, &generated}), c.vocab, s);
  };
  std::map<std::vector<int32_t>, double> expected;
  std::function<void(std::vector<int32_t>, double)> expand = [&](std::vector<int32_t> cell, double p) {
    if (int(cell.size()) == length) {
      expected[cell] = p;
      return;
    }
    std::vector<int32_t> ids = prompt;
    ids.insert(ids.end(), cell.begin(), cell.end());
    const std::vector<double> next = next_distribution(ids, cell);
    for (int32_t t = 0; t < c.vocab; ++t) {
      if (next[size_t(t)] == 0) continue;
      cell.push_back(t);
      expand(cell, p * next[size_t(t)]);
      cell.pop_back();
    }
  };
  expand({}, 1.0);
  const size_t cells = size_t(std::pow(4, length));
  ASSERT_EQ(expected.size(), cells);
  const int draws = 10000;
  std::map<std::vector<int32_t>, int> counts;
  VerifyParams v;
  v.max_new_tokens = length;
  v.draft_length = 2;
  v.overlap = overlap;
  v.draft_lookup = lookup;
  v.lookup_length = 2;
  // Trees: a datastore of AR's own samples after the prompt's last four tokens (80 of them), so that a
  // node's children are the several tokens AR draws there, each kept or rejected in turn.
  std::vector<int32_t> sampled;
  for (uint64_t seed = 1; tree > 0 && seed <= 80; ++seed) {
    ArParams ar;
    ar.max_new_tokens = length;
    ar.stop_ids = {-1};
    ar.sampling = s;
    ar.sampling.seed = 1000 + seed;
    const std::vector<int32_t> more = generate_ar(m, prompt, ar, nullptr).tokens;
    sampled.insert(sampled.end(), prompt.end() - 4, prompt.end());
    sampled.insert(sampled.end(), more.begin(), more.end());
  }
  const Datastore store(tree > 0 ? sampled : prompt);
  if (datastore) {
    v.datastore = &store;
    v.datastore_draft.min_count = 1;
    v.datastore_length = 2;
  }
  v.draft_tree = tree;
  v.sampling = s;
  v.stop_ids = {-1};  // nothing stops the run early
  int64_t accepted = 0, drafted = 0, lookup_accepted = 0, lookup_drafted = 0, stored_accepted = 0, stored_drafted = 0;
  int64_t tree_drafted = 0, tree_cycles = 0, tree_accepted = 0, decoder_trees = 0;
  for (int i = 0; i < draws; ++i) {
    v.sampling.seed = uint64_t(i) + 1;
    const VerifyResult r = generate_verify(m, prompt, v, nullptr);
    ASSERT_EQ(r.tokens.size(), size_t(length));
    ++counts[r.tokens];
    accepted += r.stats.accepted;
    drafted += r.stats.drafted;
    lookup_accepted += r.stats.lookup_accepted;
    lookup_drafted += r.stats.lookup_drafted;
    stored_accepted += r.stats.datastore_accepted;
    stored_drafted += r.stats.datastore_drafted;
    tree_drafted += r.stats.tree_drafted;
    tree_cycles += r.stats.tree_cycles;
    tree_accepted += r.stats.tree_accepted;
    decoder_trees += r.stats.decoder_tree_cycles;
  }
  double chi2 = 0;
  for (const auto& [cell, p] : expected) {
    const double e = p * draws, o = counts.count(cell) ? counts[cell] : 0;
    chi2 += (o - e) * (o - e) / e;
  }
  for (const auto& [cell, o] : counts) EXPECT_TRUE(expected.count(cell)) << "a token outside top-k was drawn";
  // P(chi2 > limit) = 0.001 when the distributions agree: 15 degrees of freedom 37.7, 63 ones 103.4.
  const double limit = cells == 16 ? 37.7 : 103.4;
  ASSERT_TRUE(cells == 16 || cells == 64);
  EXPECT_LT(chi2, limit) << "chi-square " << chi2;
  EXPECT_GT(accepted, 0) << "no draft was ever kept: the acceptance path is untested";
  EXPECT_LT(accepted, drafted) << "every draft was kept: the residual path is untested";
  if (lookup > 0) {
    EXPECT_GT(lookup_drafted, drafted / 2) << "most drafts should come from lookup";
    EXPECT_GT(lookup_accepted, 0) << "no lookup draft was ever kept";
    EXPECT_LT(lookup_accepted, lookup_drafted) << "every lookup draft was kept: its rejection is untested";
  }
  if (tree > 0) {
    EXPECT_GT(tree_drafted, drafted / 2) << "most drafts should come from trees";
    EXPECT_GT(tree_cycles, 0);
    EXPECT_GT(tree_accepted, 0) << "no tree draft was ever kept";
  }
  if (tree > 0 && !datastore) {
    EXPECT_GT(decoder_trees * 2, tree_cycles) << "without a datastore, the decoder drafts most trees";
  }
  if (tree > 0 && datastore) {
    // The first cycle's trees (after each first token that can be drawn) give their root several children,
    // so that a rejected child's mass is taken from the next one's.
    int branching = 0;
    const std::vector<double> first = next_distribution(prompt);
    for (int32_t t = 0; t < c.vocab; ++t) {
      if (first[size_t(t)] == 0) continue;
      std::vector<int32_t> context = prompt;
      context.push_back(t);
      DraftTreeParams tp = v.tree;
      tp.budget = tree;
      tp.depth = length - 1;
      const DraftTree drafts = draft_tree(context, &store, tp);
      branching += std::count(drafts.parents.begin(), drafts.parents.end(), -1) >= 2;
    }
    EXPECT_GE(branching, 2) << "the trees should branch at the root";
  } else if (datastore) {
    EXPECT_GT(stored_drafted, drafted / 2) << "most drafts should come from the datastore";
    EXPECT_GT(stored_accepted, 0) << "no datastore draft was ever kept";
    EXPECT_LT(stored_accepted, stored_drafted) << "every datastore draft was kept: its rejection is untested";
  }
}

TEST(Verify, SamplingFollowsTheArDistribution) { expect_ar_distribution(false, 2); }

TEST(Verify, OverlappedSamplingFollowsTheArDistribution) { expect_ar_distribution(true, 3); }

// The penalties and the bias shape verify's rows as AR's.
TEST(Verify, SamplingWithPenaltiesAndBiasFollowsTheArDistribution) {
  expect_ar_distribution(false, 3, 0, false, 0, true);
}

// Lookup drafts are point-mass proposals: kept with probability p(d), else drawn from p without d.
TEST(Verify, SamplingWithLookupDraftsFollowsTheArDistribution) { expect_ar_distribution(false, 3, 1); }

TEST(Verify, OverlappedSamplingWithLookupDraftsFollowsTheArDistribution) { expect_ar_distribution(true, 3, 1); }

// Datastore drafts are point-mass proposals too.
TEST(Verify, SamplingWithDatastoreDraftsFollowsTheArDistribution) { expect_ar_distribution(false, 3, 0, true); }

TEST(Verify, OverlappedSamplingWithDatastoreDraftsFollowsTheArDistribution) {
  expect_ar_distribution(true, 3, 0, true);
}

// A tree's children are point-mass proposals tried in turn, each against what the earlier ones left of p.
TEST(Verify, SamplingWithTreeDraftsFollowsTheArDistribution) { expect_ar_distribution(false, 3, 0, true, 12); }

TEST(Verify, OverlappedSamplingWithTreeDraftsFollowsTheArDistribution) { expect_ar_distribution(true, 3, 0, true, 12); }

// The decoder's trees: its three likeliest tokens at each position, point-mass proposals tried in turn.
TEST(Verify, SamplingWithTheDecodersTreesFollowsTheArDistribution) { expect_ar_distribution(false, 3, 0, false, 12); }

}  // namespace
}  // namespace canvas

namespace canvas {

TEST(VerifyCli, GenerateAndBench) {
  const std::string model = test::fixture("tiny-diffusion-gemma");
  auto ar = test::run_canvas("generate -m " + model + " -p 'the sea' -n 12 --mode ar --json -t 2", false);
  auto v = test::run_canvas("generate -m " + model + " -p 'the sea' -n 12 --mode verify --draft-length 3 --json -t 2", false);
  ASSERT_EQ(v.exit_code, 0) << v.output;
  EXPECT_EQ(test::json_tokens(v.output), test::json_tokens(ar.output));
  EXPECT_EQ(test::json_of(v.output)["mode"], "verify");
  EXPECT_FALSE(test::json_number(v.output, "accepted").empty()) << v.output;
  const auto refused = test::run_canvas("generate -m " + test::fixture("tiny-llada.gguf") + " -p hi -n 4 --mode verify");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.output.find("--mode verify needs"), std::string::npos) << refused.output;
  const auto bench = test::run_canvas("bench --synthetic diffusion-gemma:tiny --layers 2 -p 8 --block-length 16 --warmup 0 "
                                      "--repeats 1 -t 2 --no-roofs --modes ar,verify --draft-length 3");
  ASSERT_EQ(bench.exit_code, 0) << bench.output;
  EXPECT_NE(bench.output.find("verify cycle (decoder + causal pass, 4 rows each)"), std::string::npos) << bench.output;
  EXPECT_NE(bench.output.find("verify, draft 3, if 3 drafts are kept per cycle"), std::string::npos) << bench.output;
}

// --draft-lookup N (0: off) and --draft-lookup-length L: AR's tokens either way, and the JSON says how many
// cycles drafted by lookup.
TEST(VerifyCli, DraftLookup) {
  const std::string model = test::fixture("tiny-diffusion-gemma");
  const std::string base = "generate -m " + model + " -p 'the sea' -n 40 --json -t 2 -s 1 ";
  const auto ar = test::run_canvas(base + "--mode ar", false);
  const auto off = test::run_canvas(base + "--mode verify --draft-lookup 0", false);
  const auto on = test::run_canvas(base + "--mode verify --draft-lookup 3 --draft-lookup-length 6", false);
  ASSERT_EQ(off.exit_code, 0) << off.output;
  ASSERT_EQ(on.exit_code, 0) << on.output;
  EXPECT_EQ(test::json_tokens(off.output), test::json_tokens(ar.output));
  EXPECT_EQ(test::json_tokens(on.output), test::json_tokens(ar.output));
  const auto j_off = test::json_of(off.output), j_on = test::json_of(on.output);
  EXPECT_EQ(j_off["draft_lookup"], 0);
  EXPECT_EQ(j_off["lookup_cycles"], 0);
  EXPECT_EQ(j_on["draft_lookup"], 3);
  EXPECT_GT(j_on["lookup_cycles"].get<int64_t>(), 0) << on.output;  // the tiny model's greedy text loops
  EXPECT_LE(j_on["lookup_cycles"].get<int64_t>(), j_on["encoder_passes"].get<int64_t>());
  EXPECT_LE(j_on["lookup_accepted"].get<int64_t>(), j_on["lookup_drafted"].get<int64_t>());
  EXPECT_LE(j_on["lookup_drafted"].get<int64_t>(), 6 * j_on["lookup_cycles"].get<int64_t>());
  // Without --json, the stats line says it too.
  const auto line = test::run_canvas("generate -m " + model + " -p 'the sea' -n 40 -t 2 -s 1 --mode verify -v");
  EXPECT_NE(line.output.find("cycles drafted by lookup"), std::string::npos) << line.output;
  for (const char* bad : {"--draft-lookup 65", "--draft-lookup -1", "--draft-lookup-length 0"}) {
    const auto r = test::run_canvas(base + "--mode verify " + bad);
    EXPECT_NE(r.exit_code, 0) << bad;
    EXPECT_NE(r.output.find("must be between"), std::string::npos) << r.output;
  }
}

}  // namespace canvas

namespace canvas {

// --draft-datastore FILE: AR's tokens, datastore cycles in the JSON and the stats line, the corpus's ids
// cached in $XDG_CACHE_HOME/canvas (one file, reused by the next run).
TEST(VerifyCli, DraftDatastore) {
  test::TempDir dir;
  const std::string model = test::fixture("tiny-diffusion-gemma");
  const std::string base = "generate -m " + model + " -p 'the sea' -n 40 --json -t 2 -s 1 ";
  const std::string env = "XDG_CACHE_HOME=" + dir.path("cache");
  const auto ar = test::run_canvas(base + "--mode ar", false);
  ASSERT_EQ(ar.exit_code, 0) << ar.output;
  const std::string corpus = dir.path("corpus.txt");
  std::ofstream(corpus) << test::json_of(ar.output)["text"].get<std::string>() << "\nthe sea and the land\n";
  const std::string flags = "--mode verify --draft-lookup 0 --draft-datastore " + corpus + " --draft-datastore-count 1 ";
  for (int run = 0; run < 2; ++run) {
    const auto v = test::run_canvas(base + flags, false, env);
    ASSERT_EQ(v.exit_code, 0) << v.output;
    EXPECT_EQ(test::json_tokens(v.output), test::json_tokens(ar.output));
    const auto j = test::json_of(v.output);
    EXPECT_GT(j["datastore_cycles"].get<int64_t>(), 0) << v.output;
    EXPECT_EQ(j["lookup_cycles"], 0);
    EXPECT_LE(j["datastore_accepted"].get<int64_t>(), j["datastore_drafted"].get<int64_t>());
    EXPECT_LE(j["datastore_drafted"].get<int64_t>(), 4 * j["datastore_cycles"].get<int64_t>());
    int files = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir.path("cache") + "/canvas"))
      files += e.path().filename().string().rfind("datastore-", 0) == 0;
    EXPECT_EQ(files, 1);
  }
  const auto line = test::run_canvas("generate -m " + model + " -p 'the sea' -n 40 -t 2 -s 1 -v " + flags, true, env);
  EXPECT_NE(line.output.find("by the datastore"), std::string::npos) << line.output;
  // A text not yet cached says it is being tokenized (and how long it took); a cached one says nothing;
  // --quiet says nothing either.
  const std::string other = dir.path("other.txt");
  std::ofstream(other) << "the sea and the land and the sea\n";
  const std::string other_flags = "--mode verify --draft-datastore " + other + " ";
  const auto quiet = test::run_canvas("generate -m " + model + " -p 'the sea' -n 4 --quiet " + other_flags, true,
                                      "XDG_CACHE_HOME=" + dir.path("quiet-cache"));
  EXPECT_EQ(quiet.output.find("tokenizing"), std::string::npos) << quiet.output;
  const auto first = test::run_canvas("generate -m " + model + " -p 'the sea' -n 4 " + other_flags, true, env);
  EXPECT_NE(first.output.find("canvas: tokenizing " + other + " (0.0 MB) for --draft-datastore"), std::string::npos)
      << first.output;
  EXPECT_NE(first.output.find("tokenized and indexed "), std::string::npos) << first.output;
  const auto cached = test::run_canvas("generate -m " + model + " -p 'the sea' -n 4 " + other_flags, true, env);
  EXPECT_EQ(cached.output.find("tokenizing"), std::string::npos) << cached.output;
  // Without --draft-datastore the field is there, and 0.
  const auto off = test::run_canvas(base + "--mode verify", false, env);
  EXPECT_EQ(test::json_of(off.output)["datastore_cycles"], 0);
  for (const std::string& bad : std::vector<std::string>{"--mode verify --draft-datastore " + dir.path("missing.txt"),
                                "--mode verify --draft-datastore-count 2", "--mode ar --draft-datastore " + corpus}) {
    const auto r = test::run_canvas(base + bad, true, env);
    EXPECT_NE(r.exit_code, 0) << bad << "\n" << r.output;
  }
}

}  // namespace canvas

namespace canvas {

// --draft-tree N: AR's tokens, tree cycles in the JSON and the stats line; the flag's range, its depth
// needing it, and the modes it does not apply to are clear errors.
TEST(VerifyCli, DraftTree) {
  const std::string model = test::fixture("tiny-diffusion-gemma");
  const std::string base = "generate -m " + model + " -p 'the sea' -n 40 --json -t 2 -s 1 ";
  const auto ar = test::run_canvas(base + "--mode ar", false);
  const auto on = test::run_canvas(base + "--mode verify --draft-tree 12 --draft-tree-depth 5", false);
  ASSERT_EQ(on.exit_code, 0) << on.output;
  EXPECT_EQ(test::json_tokens(on.output), test::json_tokens(ar.output));
  const auto j = test::json_of(on.output);
  EXPECT_EQ(j["draft_tree"], 12);
  EXPECT_GT(j["tree_cycles"].get<int64_t>(), 0) << on.output;  // the tiny model's greedy text loops
  EXPECT_EQ(j["lookup_cycles"], 0);
  EXPECT_LE(j["tree_accepted"].get<int64_t>(), j["tree_drafted"].get<int64_t>());
  EXPECT_LE(j["tree_drafted"].get<int64_t>(), 12 * j["tree_cycles"].get<int64_t>());
  // auto: giving it means verify.
  const auto chosen = test::run_canvas(base + "--draft-tree 12", false);
  ASSERT_EQ(chosen.exit_code, 0) << chosen.output;
  EXPECT_EQ(test::json_of(chosen.output)["mode"], "verify");
  const auto line = test::run_canvas("generate -m " + model + " -p 'the sea' -n 40 -t 2 -s 1 --mode verify --draft-tree 12 -v");
  EXPECT_NE(line.output.find(" trees, "), std::string::npos) << line.output;
  for (const char* bad : {"--mode verify --draft-tree 64", "--mode verify --draft-tree -1",
                          "--mode verify --draft-tree 8 --draft-tree-depth 0", "--mode verify --draft-tree-depth 4",
                          "--mode ar --draft-tree 8", "--mode diffusion --draft-tree 8"}) {
    const auto r = test::run_canvas(base + bad);
    EXPECT_NE(r.exit_code, 0) << bad;
    EXPECT_TRUE(r.output.find("must be between") != std::string::npos || r.output.find("needs --draft-tree") != std::string::npos ||
                r.output.find("applies to --mode verify") != std::string::npos)
        << bad << ": " << r.output;
  }
}

}  // namespace canvas

namespace canvas {

// --draft-datastore without --mode: auto measures AR, then verify with the datastore's chains, run by run
// (kept in --cost-model's file), and writes AR's tokens either way.
TEST(VerifyCli, AutoWithADatastoreMeasuresArThenVerify) {
  test::TempDir dir;
  // The tiny DiffusionGemma as canvas's own checkpoints are (training.* keys: trained here with an AR loss),
  // whose auto chooses among ar and verify; in the release's form its auto would be diffusion.
  const std::string converted = dir.path("tiny-dg.gguf");
  ASSERT_EQ(test::run_canvas("convert --in " + test::fixture("tiny-diffusion-gemma") + " --out " + converted +
                             " --type f32").exit_code,
            0);
  const std::string model =
      test::gguf_with_keys(dir, "tiny-dg-own.gguf", converted, {{"training.identity", GgufValue::string("test")}});
  const std::string corpus = dir.path("corpus.txt");
  std::ofstream(corpus) << "the sea and the land, the sea and the sky, the sea and the land.\n";
  const std::string base = "generate -m " + model + " -p 'the sea' -n 40 --json -t 2 -s 1 --cost-model " +
                           dir.path("costs.json") + " --draft-datastore " + corpus;
  const auto first = test::run_canvas(base, false);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto j1 = test::json_of(first.output);
  EXPECT_EQ(j1["mode"], "ar");
  EXPECT_NE(j1["mode_reason"].get<std::string>().find("ar runs once to be measured against verify with the datastore"),
            std::string::npos) << first.output;
  const auto second = test::run_canvas(base, false);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  const auto j2 = test::json_of(second.output);
  EXPECT_EQ(j2["mode"], "verify");
  EXPECT_NE(j2["mode_reason"].get<std::string>().find("verify k=4 datastore runs to be measured"), std::string::npos)
      << second.output;
  EXPECT_EQ(j2["tokens"], j1["tokens"]);
}

}  // namespace canvas
