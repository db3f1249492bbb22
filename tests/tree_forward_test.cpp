// A tree of rows in one forward pass (ForwardRequest::tree_parents, tree verification): every row's logits
// are bit for bit those of a causal pass over its path alone, on dense, MoE and Gemma 4 (sliding-window)
// fixtures, with and without threads; a kept path moved to its positions (KvCache::copy_position) leaves
// the cache as a causal pass over it would; malformed trees are clear errors.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "core/rng.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "test_util.h"

namespace canvas {
namespace {

// A pass over `tokens` at pos0: a tree with `parents` (null: a causal pass, each row's parent the row
// before), each row's group its position; logits of every row.
std::vector<float> pass(const Model& m, KvCache& cache, const std::vector<int32_t>& tokens,
                        const std::vector<int32_t>* parents, int64_t pos0, ThreadPool* pool) {
  const int64_t n = int64_t(tokens.size());
  std::vector<int32_t> groups, depth;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t parent = parents ? (*parents)[size_t(i)] : int32_t(i - 1);
    depth.push_back(parent < 0 ? 0 : depth[size_t(parent)] + 1);
    groups.push_back(int32_t(pos0 + depth.back()));
  }
  std::vector<float> logits(size_t(n * m.config.vocab));
  ForwardRequest req;
  req.tokens = tokens.data();
  req.n = n;
  req.pos0 = pos0;
  req.groups = groups.data();
  req.tree_parents = parents ? parents->data() : nullptr;
  for (int64_t i = 0; i < n; ++i) req.logit_rows.push_back(int32_t(i));
  req.logits = logits.data();
  forward(m, cache, req, pool);
  return logits;
}
std::vector<float> causal(const Model& m, KvCache& cache, const std::vector<int32_t>& tokens, int64_t pos0,
                          ThreadPool* pool) {
  return pass(m, cache, tokens, nullptr, pos0, pool);
}
std::vector<float> tree(const Model& m, KvCache& cache, const std::vector<int32_t>& tokens,
                        const std::vector<int32_t>& parents, int64_t pos0, ThreadPool* pool) {
  return pass(m, cache, tokens, &parents, pos0, pool);
}

// Row `i`'s path from the root: the rows on it, in order.
std::vector<int32_t> path_of(const std::vector<int32_t>& parents, int32_t i) {
  std::vector<int32_t> path;
  for (int32_t r = i; r >= 0; r = parents[size_t(r)]) path.insert(path.begin(), r);
  return path;
}

// A random tree of n rows (row 0 the root; every other row's parent an earlier row, mostly the one before,
// so that paths outgrow the Gemma fixture's sliding window of 8), random tokens.
void random_tree(Rng& rng, int64_t n, int64_t vocab, std::vector<int32_t>& tokens, std::vector<int32_t>& parents) {
  tokens.clear();
  parents.clear();
  for (int64_t i = 0; i < n; ++i) {
    tokens.push_back(int32_t(rng.below(uint64_t(vocab))));
    parents.push_back(i == 0 ? -1 : rng.uniform() < 0.6 ? int32_t(i - 1) : int32_t(rng.below(uint64_t(i))));
  }
}

TEST(TreeForward, EveryRowEqualsACausalPassOverItsPathBitwise) {
  for (const char* name : {"tiny-llada.gguf", "tiny-llada-moe.gguf", "tiny-diffusion-gemma"}) {
    SCOPED_TRACE(name);
    const Model m = Model::load(test::fixture(name));
    const int64_t V = m.config.vocab;
    ThreadPool pool(2);
    Rng rng(7);
    const std::vector<int32_t> prompt{2, 17, 33, 9, 41, 5, 12};
    const int64_t P = int64_t(prompt.size());
    for (int64_t n : {1, 5, 23, 64}) {
      SCOPED_TRACE(n);
      std::vector<int32_t> tokens, parents;
      random_tree(rng, n, V, tokens, parents);
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        KvCache cache(m.config, P + 64);
        causal(m, cache, prompt, 0, p);
        const std::vector<float> logits = tree(m, cache, tokens, parents, P, p);
        for (int32_t i = 0; i < int32_t(n); ++i) {
          std::vector<int32_t> path_tokens;
          for (int32_t r : path_of(parents, i)) path_tokens.push_back(tokens[size_t(r)]);
          KvCache fresh(m.config, P + 64);
          causal(m, fresh, prompt, 0, p);
          const std::vector<float> want = causal(m, fresh, path_tokens, P, p);
          const std::vector<float> got(logits.begin() + i * V, logits.begin() + (i + 1) * V);
          ASSERT_EQ(got, std::vector<float>(want.end() - V, want.end())) << "row " << i;
        }
      }
    }
  }
}

TEST(TreeForward, AKeptPathMovedToItsPositionsIsWhatACausalPassLeaves) {
  const Model m = Model::load(test::fixture("tiny-diffusion-gemma"));
  const int64_t V = m.config.vocab;
  Rng rng(11);
  const std::vector<int32_t> prompt{2, 105, 17, 250, 33};
  const int64_t P = int64_t(prompt.size());
  std::vector<int32_t> tokens, parents;
  random_tree(rng, 20, V, tokens, parents);
  // The deepest row's path is kept: its rows' K/V move to positions P, P + 1, ... (in order: a row is
  // never stored before its position, so no move overwrites a row still to move).
  int32_t deepest = 0;
  for (int32_t i = 0; i < 20; ++i)
    if (path_of(parents, i).size() > path_of(parents, deepest).size()) deepest = i;
  const std::vector<int32_t> path = path_of(parents, deepest);
  ASSERT_GE(path.size(), 3u);
  KvCache cache(m.config, P + 40);
  causal(m, cache, prompt, 0, nullptr);
  tree(m, cache, tokens, parents, P, nullptr);
  std::vector<int32_t> path_tokens;
  for (size_t d = 0; d < path.size(); ++d) {
    cache.copy_position(P + path[d], P + int64_t(d));
    path_tokens.push_back(tokens[size_t(path[d])]);
  }
  KvCache reference(m.config, P + 40);
  causal(m, reference, prompt, 0, nullptr);
  causal(m, reference, path_tokens, P, nullptr);
  // The next tokens' logits read the moved K/V.
  const std::vector<int32_t> next{7, 8, 9};
  const int64_t at = P + int64_t(path.size());
  EXPECT_EQ(causal(m, cache, next, at, nullptr), causal(m, reference, next, at, nullptr));
}

TEST(TreeForward, MalformedTreesAreClearErrors) {
  const Model m = Model::load(test::fixture("tiny-llada.gguf"));
  KvCache cache(m.config, 80);
  const std::vector<int32_t> tokens{5, 6, 7}, groups{0, 1, 1};
  ForwardRequest req;
  req.tokens = tokens.data();
  req.n = 3;
  req.groups = groups.data();
  const std::vector<int32_t> later{-1, 2, 0}, self{-1, 1, 0}, below{-1, -2, 0}, fine{-1, 0, 0};
  for (const auto* bad : {&later, &self, &below}) {
    req.tree_parents = bad->data();
    EXPECT_THROW(forward(m, cache, req, nullptr), Error);
  }
  req.tree_parents = fine.data();
  EXPECT_NO_THROW(forward(m, cache, req, nullptr));
  const std::vector<int32_t> positions{0, 1, 2};
  req.positions = positions.data();
  req.key_end = 3;
  EXPECT_THROW(forward(m, cache, req, nullptr), Error);  // no explicit positions
  req.positions = nullptr;
  req.key_end = 10;
  EXPECT_THROW(forward(m, cache, req, nullptr), Error);  // keys end after the tree's rows
  req.key_end = 0;
  std::vector<int32_t> many(65, 5), many_parents(65, -1), many_groups(65, 0);
  req.tokens = many.data();
  req.n = 65;
  req.groups = many_groups.data();
  req.tree_parents = many_parents.data();
  EXPECT_THROW(forward(m, cache, req, nullptr), Error);  // at most 64 rows
}

}  // namespace
}  // namespace canvas
