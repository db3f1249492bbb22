// PrefixCache: K/V kept from one generation to the next (a chat's turns). A run that takes the prompt's
// leading tokens from the cache gives the tokens of a run that encodes the whole prompt; the cache grows
// keeping its K/V; and `canvas chat` encodes only each turn's new tokens.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "decode/ar.h"
#include "decode/prefix_cache.h"
#include "decode/uniform_state.h"
#include "decode/verify.h"
#include "entropy_bound_test_util.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "test_util.h"

namespace canvas {
namespace {

TEST(KvCacheGrow, KeepsTheFirstPositionsOfEveryHead) {
  const Model m = Model::load(test::fixture("tiny-llada.gguf"));
  KvCache cache(m.config, 8);
  const int64_t d = cache.head_stride(0) / 8;  // head dim
  const int64_t heads = m.config.attention_of(0).n_kv_heads;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t p = 0; p < 8; ++p)
      for (int64_t i = 0; i < d; ++i) cache.keys(0)[(h * 8 + p) * d + i] = float(1000 * h + 10 * p + i);
  for (int64_t p = 0; p < 8; ++p) cache.groups()[p] = int32_t(p);
  cache.grow(20, 5);
  EXPECT_EQ(cache.capacity(), 20);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t p = 0; p < 5; ++p)
      for (int64_t i = 0; i < d; ++i)
        ASSERT_EQ(cache.keys(0)[(h * 20 + p) * d + i], float(1000 * h + 10 * p + i)) << h << " " << p << " " << i;
  for (int64_t p = 0; p < 5; ++p) EXPECT_EQ(cache.groups()[p], p);
}

TEST(PrefixCache, ReusesTheLongestCommonPrefixButAlwaysRunsTheLastToken) {
  const Model m = Model::load(test::fixture("tiny-llada.gguf"));
  PrefixCache kept;
  int64_t reused = -1;
  kept.acquire(m, {1, 2, 3}, 16, &reused);
  EXPECT_EQ(reused, 0);
  kept.keep({1, 2, 3, 4, 5});
  kept.acquire(m, {1, 2, 3, 9}, 16, &reused);
  EXPECT_EQ(reused, 3);
  EXPECT_TRUE(kept.tokens().empty()) << "acquire forgets the record until the run keeps its tokens";
  kept.keep({1, 2, 3, 4, 5});
  kept.acquire(m, {1, 2, 3}, 16, &reused);
  EXPECT_EQ(reused, 2);  // the whole prompt is cached: its last token still runs
  kept.keep({1, 2, 3, 4, 5});
  kept.acquire(m, {1, 2, 3, 4, 5, 6}, 64, &reused);  // grown: the K/V are kept
  EXPECT_EQ(reused, 5);
}

// A conversation: turn 2's prompt is turn 1's prompt, its reply and new tokens. With the cache, turn 2 runs
// only what follows the cached tokens and gives the tokens a fresh run gives.
void check_ar_turns(const std::string& fixture) {
  SCOPED_TRACE(fixture);
  const Model m = Model::load(test::fixture(fixture));
  ThreadPool pool(2);
  ArParams ar;
  ar.max_new_tokens = 10;
  ar.stop_at_eos = false;
  PrefixCache kept;
  ArParams with_cache = ar;
  with_cache.prefix_cache = &kept;
  const std::vector<int32_t> first = {5, 72, 101, 108, 108, 111, 32, 119};
  const GenerationResult one = generate_ar(m, first, with_cache, &pool);
  EXPECT_EQ(one.cached_prompt_tokens, 0);
  EXPECT_EQ(one.tokens, generate_ar(m, first, ar, &pool).tokens);
  std::vector<int32_t> second = first;
  second.insert(second.end(), one.tokens.begin(), one.tokens.end());
  for (int32_t t : {44, 97, 110, 100}) second.push_back(t);
  ar.max_new_tokens = 12;
  with_cache.max_new_tokens = 12;
  const GenerationResult two = generate_ar(m, second, with_cache, &pool);
  EXPECT_EQ(two.cached_prompt_tokens, int64_t(first.size() + one.tokens.size()) - 1);
  EXPECT_EQ(two.tokens, generate_ar(m, second, ar, &pool).tokens);
}

TEST(PrefixCache, ArTurnsEqualFreshRuns) {
  check_ar_turns("tiny-llada.gguf");  // unshifted: [token, MASK] steps
  check_ar_turns("tiny-dream.gguf");  // shifted
}

TEST(PrefixCache, UniformStateTurnsEqualFreshRuns) {
  const Model m = Model::load(test::fixture("tiny-diffusion-gemma"));
  ThreadPool pool(2);
  const EntropyBoundParams p = test::small_entropy_bound_params();
  PrefixCache kept;
  const std::vector<int32_t> first = {2, 105, 17, 250, 33, 4, 198, 61, 77, 120, 9, 286};
  const EntropyBoundResult one = generate_uniform_state(m, first, p, &pool, {}, &kept);
  EXPECT_EQ(one.tokens, generate_uniform_state(m, first, p, &pool).tokens);
  EXPECT_GT(int64_t(kept.tokens().size()), int64_t(first.size()));  // the prompt and the committed canvases
  std::vector<int32_t> second(kept.tokens());
  for (int32_t t : {44, 97, 110}) second.push_back(t);
  const EntropyBoundResult two = generate_uniform_state(m, second, p, &pool, {}, &kept);
  EXPECT_EQ(two.cached_prompt_tokens, int64_t(second.size()) - 3);
  EXPECT_EQ(two.tokens, generate_uniform_state(m, second, p, &pool).tokens);
}

TEST(PrefixCache, VerifyTurnsEqualFreshRuns) {
  const Model m = Model::load(test::fixture("tiny-diffusion-gemma"));
  ThreadPool pool(2);
  for (int64_t lookup : {0, 3}) {
    VerifyParams v;
    v.max_new_tokens = 12;
    v.draft_length = 3;
    v.draft_lookup = lookup;
    PrefixCache kept;
    VerifyParams with_cache = v;
    with_cache.prefix_cache = &kept;
    const std::vector<int32_t> first = {2, 105, 17, 250, 33, 4, 198, 61, 77, 120, 9, 286};
    const VerifyResult one = generate_verify(m, first, with_cache, &pool);
    EXPECT_EQ(one.tokens, generate_verify(m, first, v, &pool).tokens);
    std::vector<int32_t> second = first;
    second.insert(second.end(), one.tokens.begin(), one.tokens.end());
    for (int32_t t : {44, 97}) second.push_back(t);
    const VerifyResult two = generate_verify(m, second, with_cache, &pool);
    // Every token of the first turn but its last, whose K/V no pass wrote: AR's own token. (Where the run
    // ended on a kept draft, as a lookup draft of the tiny model's looping text does here, the verify pass
    // wrote that one too.)
    const int64_t all = int64_t(first.size() + one.tokens.size());
    EXPECT_EQ(two.cached_prompt_tokens, lookup == 0 ? all - 1 : all) << lookup;
    EXPECT_EQ(two.tokens, generate_verify(m, second, v, &pool).tokens) << lookup;
  }
}

// canvas chat keeps the conversation's K/V: from the second turn on, the prompt's earlier turns are cached.
TEST(CliChat, EachTurnEncodesOnlyItsNewTokens) {
  test::TempDir dir;
  const std::string input = dir.path("in.txt");
  {
    std::ofstream out(input);
    for (int i = 0; i < 5; ++i) out << "Who was Moses, and what did he say unto the people?\n";
  }
  for (const char* mode : {"ar", "diffusion", "verify"}) {
    const auto r = test::run_canvas(std::string("chat --mode ") + mode + " -n 24 -t 2 -s 1 --verbose < " + input);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::regex stats("prompt (\\d+) tokens(?: \\((\\d+) cached\\))?");
    std::vector<std::pair<long, long>> turns;  // (prompt tokens, cached)
    for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), stats); it != std::sregex_iterator(); ++it)
      turns.emplace_back(std::stol((*it)[1]), (*it)[2].matched ? std::stol((*it)[2]) : 0L);
    ASSERT_EQ(turns.size(), 5u) << r.output;
    EXPECT_EQ(turns[0].second, 0) << r.output;
    for (size_t i = 1; i < turns.size(); ++i) {
      // Everything up to the previous prompt at least (its reply too, where it tokenizes the same).
      EXPECT_GE(turns[i].second, turns[i - 1].first) << mode << " turn " << i << "\n" << r.output;
      EXPECT_LT(turns[i].second, turns[i].first) << r.output;
    }
  }
}

}  // namespace
}  // namespace canvas
