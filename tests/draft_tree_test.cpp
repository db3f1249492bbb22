// Tree drafts (decode/draft_tree.h): the shape of the tree, a hand-worked mixture, how the sources' weights
// order the nodes, where continuations stop, and the tree against a brute-force twin on a random corpus.
#include "decode/draft_tree.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <queue>
#include <random>
#include <set>

namespace canvas {
namespace {

using Tokens = std::vector<int32_t>;

// Datastore grams down to single tokens (the default stops at two).
DraftTreeParams sized(int64_t budget, int64_t depth) {
  DraftTreeParams p;
  p.budget = budget;
  p.depth = depth;
  p.datastore_shortest = 1;
  return p;
}

DraftTreeParams datastore_only(int64_t budget, int64_t depth) {
  DraftTreeParams p = sized(budget, depth);
  p.lookup_longest = 0;
  return p;
}

// Node i's path from the root, its tokens.
Tokens path_of(const DraftTree& tree, int64_t i) {
  Tokens path;
  for (int64_t at = i; at >= 0; at = tree.parents[size_t(at)])
    path.insert(path.begin(), tree.tokens[size_t(at)]);
  return path;
}

// Parents precede children, siblings differ, no path is longer than depth, no more nodes than budget.
void expect_well_formed(const DraftTree& tree, const DraftTreeParams& params) {
  ASSERT_EQ(tree.tokens.size(), tree.parents.size());
  EXPECT_LE(tree.size(), params.budget);
  std::set<std::pair<int32_t, int32_t>> siblings;  // (parent, token)
  for (int64_t i = 0; i < tree.size(); ++i) {
    const int32_t parent = tree.parents[size_t(i)];
    EXPECT_GE(parent, -1);
    EXPECT_LT(parent, i);
    EXPECT_TRUE(siblings.insert({parent, tree.tokens[size_t(i)]}).second)
        << "a repeated sibling at node " << i;
    EXPECT_LE(int64_t(path_of(tree, i).size()), params.depth);
  }
}

TEST(DraftTree, AHandWorkedMixture) {
  // The context's last bigram (1, 2) occurred once before, at 0: the context source, weight 4, continues
  // 3 9 1 2. (9, 1, 2) never occurred.
  const Tokens context = {1, 2, 3, 9, 1, 2};
  // In the corpus (9, 1, 2) does not occur; (1, 2) occurs twice (rank 0: weight min(1, 2/4) = 1/2),
  // followed by 4 5 0 ... and 4 6 0 ...; (2) occurs 3 times (rank 1: weight 1/2 * min(1, 3/4) = 3/8),
  // followed by 4 5 0 ..., 4 6 0 ... and 3 7.
  const Datastore store(Tokens{1, 2, 4, 5, 0, 1, 2, 4, 6, 0, 2, 3, 7});
  // In units of 1/39 (the weights sum to 4 + 1/2 + 3/8 = 39/8), each occurrence carries: the context's 32,
  // each of (1, 2)'s 2, each of (2)'s 1. The paths' scores:
  //   3: 32 + 1 = 33    3 9: 32    3 9 1: 32    3 7: 1
  //   4: 2 + 2 + 1 + 1 = 6    4 5: 2 + 1 = 3    4 5 0: 3    4 6: 3    4 6 0: 3
  // Best first with depth 3: 3, 3 9, 3 9 1 (depth 3: not extended), 4; then 4 5 and 4 6 tie at 3 (the lower
  // token, 5, first); then 4 5 0 ties with 4 6 (the lower token, 0, first), 4 6, 4 6 0, and last 3 7.
  DraftTreeParams params = sized(9, 3);
  params.datastore_longest = 3;
  const DraftTree tree = draft_tree(context, &store, params);
  EXPECT_EQ(tree.tokens, (Tokens{3, 9, 1, 4, 5, 0, 6, 0, 7}));
  EXPECT_EQ(tree.parents, (Tokens{-1, 0, 1, -1, 3, 4, 3, 6, 0}));
  // A smaller budget keeps the first nodes: the order is the order they were chosen in.
  const DraftTree small = draft_tree(context, &store, sized(4, 3));
  EXPECT_EQ(small.tokens, (Tokens{3, 9, 1, 4}));
  EXPECT_EQ(small.parents, (Tokens{-1, 0, 1, -1}));
  // Depth 1: the root's children only.
  const DraftTree flat = draft_tree(context, &store, sized(9, 1));
  EXPECT_EQ(flat.tokens, (Tokens{3, 4}));
  EXPECT_EQ(flat.parents, (Tokens{-1, -1}));
}

TEST(DraftTree, TheContextSourceOutweighsARareDatastoreContinuation) {
  // The context continues (5, 6) with 7; the corpus with 8, once (weights: 4 against 1/4 + 1/8).
  const Tokens context = {5, 6, 7, 5, 6};
  const Datastore store(Tokens{5, 6, 8});
  EXPECT_EQ(draft_tree(context, &store, sized(1, 1)).tokens, (Tokens{7}));
  EXPECT_EQ(draft_tree(context, &store, sized(2, 1)).tokens, (Tokens{7, 8}));
  // A light context source (1/10 against 3/8) comes second; none at all leaves the datastore's.
  DraftTreeParams light = sized(2, 1);
  light.lookup_weight = 0.1;
  EXPECT_EQ(draft_tree(context, &store, light).tokens, (Tokens{8, 7}));
  EXPECT_EQ(draft_tree(context, &store, datastore_only(2, 1)).tokens, (Tokens{8}));
  light.lookup_weight = 0;
  EXPECT_EQ(draft_tree(context, &store, light).tokens, (Tokens{8}));
  // Without a datastore the context alone drafts, up to its end: 7 5 6.
  const DraftTree alone = draft_tree(context, nullptr, sized(8, 8));
  EXPECT_EQ(alone.tokens, (Tokens{7, 5, 6}));
  EXPECT_EQ(alone.parents, (Tokens{-1, 0, 1}));
}

TEST(DraftTree, ARareGramWeighsLessThanOneSeenFourTimes) {
  // (1, 2) occurs once, followed by 3 (weight min(1, 1/4) = 1/4, all on that occurrence); (2) occurs 5 times,
  // 4 times followed by 4 (weight 1/2, 1/10 an occurrence). 3: 1/4 + 1/10 = 0.35; 4: 4/10 = 0.4.
  const Datastore rare(Tokens{1, 2, 3, 0, 2, 4, 0, 2, 4, 0, 2, 4, 0, 2, 4});
  EXPECT_EQ(draft_tree(Tokens{1, 2}, &rare, datastore_only(2, 1)).tokens, (Tokens{4, 3}));
  // Seen 4 times (weight 1, 1/4 an occurrence): 3 gets 1 + 4/16 against 4's 4/16.
  const Datastore common(
      Tokens{1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 2, 4, 0, 2, 4, 0, 2, 4, 0, 2, 4});
  EXPECT_EQ(draft_tree(Tokens{1, 2}, &common, datastore_only(2, 1)).tokens, (Tokens{3, 4}));
}

TEST(DraftTree, ShorterMatchedGramsWeighHalfAsMuchRankByRank) {
  // (1, 2, 3) occurs 4 times, followed by 7; (2, 3) and (3) 24 times each, 20 of them followed by 8.
  // (5, 1, 2, 3) does not occur and takes no rank. Weights 1, 1/2, 1/4 by rank: 7 gets 1 + 4/24 * 3/4 =
  // 1.125 and 8 gets 20/24 * 3/4 = 0.625. With equal weights 8 (40/24) would beat 7 (1 + 8/24).
  Tokens ids;
  for (int i = 0; i < 4; ++i) ids.insert(ids.end(), {1, 2, 3, 7, 0});
  for (int i = 0; i < 20; ++i) ids.insert(ids.end(), {2, 3, 8, 0});
  const Datastore store(ids);
  DraftTreeParams params = datastore_only(2, 1);
  params.datastore_longest = 4;
  EXPECT_EQ(draft_tree(Tokens{5, 1, 2, 3}, &store, params).tokens, (Tokens{7, 8}));
  // Up to bigrams: (2, 3) is rank 0 (weight 1) and (3) rank 1 (1/2): 7 gets 4/24 * 3/2, 8 20/24 * 3/2.
  params.datastore_longest = 2;
  EXPECT_EQ(draft_tree(Tokens{5, 1, 2, 3}, &store, params).tokens, (Tokens{8, 7}));
}

TEST(DraftTree, ContinuationsStopAtTheCorpusEndAndTheSortDepth) {
  const Datastore short_corpus(Tokens{4, 5, 6, 7});
  const DraftTree tail = draft_tree(Tokens{4, 5}, &short_corpus, datastore_only(10, 10));
  EXPECT_EQ(tail.tokens, (Tokens{6, 7}));
  EXPECT_EQ(tail.parents, (Tokens{-1, 0}));
  // (6, 7) and (7) occur, but at the corpus end: nothing follows.
  EXPECT_EQ(draft_tree(Tokens{6, 7}, &short_corpus, datastore_only(10, 10)).size(), 0);
  // A corpus of one passage repeated: continuations end kSortDepth tokens from their gram's start, 63 tokens
  // for the gram (1), 62 for (0, 1).
  Tokens ids;
  for (int i = 0; i < 600; ++i) ids.push_back(int32_t(i % 3));
  const Datastore repeated(ids);
  const DraftTree chain = draft_tree(Tokens{5, 0, 1}, &repeated, datastore_only(1000, 1000));
  ASSERT_EQ(chain.size(), Datastore::kSortDepth - 1);
  for (int64_t i = 0; i < chain.size(); ++i) {
    EXPECT_EQ(chain.tokens[size_t(i)], int32_t((i + 2) % 3));
    EXPECT_EQ(chain.parents[size_t(i)], int32_t(i - 1));
  }
  DraftTreeParams bigrams = datastore_only(1000, 1000);
  bigrams.datastore_shortest = 2;
  EXPECT_EQ(draft_tree(Tokens{5, 0, 1}, &repeated, bigrams).size(), Datastore::kSortDepth - 2);
  // The context's continuations end with it: no wrap-around into the draft (lookup_draft's loop).
  const DraftTree loop = draft_tree(Tokens{1, 2, 3, 1, 2}, nullptr, sized(10, 10));
  EXPECT_EQ(loop.tokens, (Tokens{3, 1, 2}));
}

TEST(DraftTree, EmptyInputsAndRequests) {
  const Datastore empty(Tokens{});
  const Datastore store(Tokens{1, 2, 3, 1, 2, 4});
  EXPECT_EQ(draft_tree(Tokens{1, 2, 1, 2}, &empty, datastore_only(8, 8)).size(), 0);
  EXPECT_EQ(draft_tree(Tokens{1, 2, 1, 2}, &empty, sized(8, 8)).tokens, (Tokens{1, 2}));  // the context alone
  EXPECT_EQ(draft_tree(Tokens{}, &store, sized(8, 8)).size(), 0);
  EXPECT_EQ(draft_tree(Tokens{}, nullptr, sized(8, 8)).size(), 0);
  EXPECT_EQ(draft_tree(Tokens{9, 8}, &store, sized(8, 8)).size(), 0);  // no gram occurs anywhere
  EXPECT_EQ(draft_tree(Tokens{1, 2}, &store, sized(0, 8)).size(), 0);
  EXPECT_EQ(draft_tree(Tokens{1, 2}, &store, sized(8, 0)).size(), 0);
  EXPECT_EQ(draft_tree(Tokens{1, 2}, &store, sized(-1, -1)).size(), 0);
  EXPECT_EQ(draft_tree(Tokens{1, 2}, &store, sized(8, 1)).tokens, (Tokens{3, 4}));
}

// A random corpus of a few ids (many repeats, long shared runs) with a long repeat inside.
Tokens random_corpus(std::mt19937& rng, int64_t size, int vocab) {
  Tokens ids(size_t(size), 0);
  for (auto& t : ids) t = int32_t(rng() % uint32_t(vocab));
  for (int64_t i = 0; i < 150 && 1000 + i < size; ++i) ids[size_t(1000 + i)] = ids[size_t(i)];
  return ids;
}

// A context: random ids (some never in the corpus), or a stretch of the corpus with random ids after it.
Tokens random_context(std::mt19937& rng, const Tokens& ids, int vocab) {
  Tokens context;
  if (rng() % 2) {
    const size_t start = rng() % (ids.size() - 20), length = rng() % 20;
    context.assign(ids.begin() + int64_t(start), ids.begin() + int64_t(start + length));
  }
  for (size_t i = rng() % 8; i > 0; --i) context.push_back(int32_t(rng() % uint32_t(vocab + 1)));
  return context;
}

TEST(DraftTree, TreesAreWellFormedAndGrowByBudget) {
  std::mt19937 rng(11);
  const Tokens ids = random_corpus(rng, 4000, 6);
  const Datastore store(ids);
  for (int trial = 0; trial < 50; ++trial) {
    const Tokens context = random_context(rng, ids, 6);
    const DraftTreeParams params = sized(64, 1 + int64_t(rng() % 10));
    const DraftTree tree = draft_tree(context, &store, params);
    expect_well_formed(tree, params);
    // A smaller budget gives the same tree's first nodes.
    const DraftTree smaller = draft_tree(context, &store, sized(17, params.depth));
    ASSERT_LE(smaller.size(), tree.size());
    EXPECT_TRUE(std::equal(smaller.tokens.begin(), smaller.tokens.end(), tree.tokens.begin())) << trial;
    EXPECT_TRUE(std::equal(smaller.parents.begin(), smaller.parents.end(), tree.parents.begin())) << trial;
  }
}

// The rule written out directly: every source's occurrences copied with their whole continuation, a path's
// score recounted from all of them, its children found by a scan; the same heap order.
DraftTree brute_draft_tree(const Tokens& context, const Tokens* corpus, const DraftTreeParams& params) {
  struct Source {
    double weight = 0;
    std::vector<Tokens> continuations;  // one an occurrence
  };
  std::vector<Source> sources;
  const int64_t L = int64_t(context.size());
  if (params.budget < 1 || params.depth < 1) return {};
  if (params.lookup_weight > 0) {
    for (int64_t n = std::min(params.lookup_longest, L - 1);
         n >= std::max<int64_t>(1, params.lookup_shortest); --n) {
      Source source{params.lookup_weight, {}};
      for (int64_t i = L - n - 1; i >= 0; --i)
        if (int64_t(source.continuations.size()) < params.lookup_occurrences &&
            Tokens(context.begin() + i, context.begin() + i + n) == Tokens(context.end() - n, context.end()))
          source.continuations.emplace_back(context.begin() + i + n, context.end());
      if (!source.continuations.empty()) {
        sources.push_back(source);
        break;
      }
    }
  }
  if (corpus) {
    const int64_t size = int64_t(corpus->size());
    int rank = 0;
    for (int64_t n = std::min<int64_t>({params.datastore_longest, L, Datastore::kSortDepth});
         n >= std::max<int64_t>(1, params.datastore_shortest); --n) {
      Source source;
      for (int64_t i = 0; i + n <= size; ++i)
        if (Tokens(corpus->begin() + i, corpus->begin() + i + n) == Tokens(context.end() - n, context.end()))
          source.continuations.emplace_back(
              corpus->begin() + i + n, corpus->begin() + std::min<int64_t>(size, i + Datastore::kSortDepth));
      if (source.continuations.empty()) continue;
      source.weight = std::ldexp(1.0, -rank++) * std::min(1.0, double(source.continuations.size()) / 4.0);
      sources.push_back(source);
    }
  }
  if (sources.empty()) return {};
  double total = 0;
  for (const Source& s : sources) total += s.weight;
  auto starts_with = [](const Tokens& continuation, const Tokens& path) {
    return continuation.size() >= path.size() && std::equal(path.begin(), path.end(), continuation.begin());
  };
  auto score = [&](const Tokens& path) {
    double sum = 0;
    for (const Source& s : sources) {
      int64_t matches = 0;
      for (const Tokens& c : s.continuations) matches += starts_with(c, path);
      sum += s.weight / total / double(s.continuations.size()) * double(matches);
    }
    return sum;
  };
  struct Entry {
    double score;
    int32_t token;
    int64_t pushed;
    Tokens path;
    int32_t parent;
  };
  auto worse = [](const Entry& a, const Entry& b) {
    if (a.score != b.score) return a.score < b.score;
    if (a.token != b.token) return a.token > b.token;
    return a.pushed > b.pushed;
  };
  std::priority_queue<Entry, std::vector<Entry>, decltype(worse)> heap(worse);
  int64_t pushed = 0;
  auto push_children = [&](const Tokens& path, int32_t node) {
    std::set<int32_t> next;
    for (const Source& s : sources)
      for (const Tokens& c : s.continuations)
        if (c.size() > path.size() && starts_with(c, path)) next.insert(c[path.size()]);
    for (int32_t token : next) {
      Tokens child = path;
      child.push_back(token);
      heap.push({score(child), token, pushed++, child, node});
    }
  };
  DraftTree tree;
  push_children({}, -1);
  while (tree.size() < params.budget && !heap.empty()) {
    const Entry best = heap.top();
    heap.pop();
    tree.tokens.push_back(best.token);
    tree.parents.push_back(best.parent);
    if (int64_t(best.path.size()) < params.depth) push_children(best.path, int32_t(tree.size() - 1));
  }
  return tree;
}

TEST(DraftTree, MatchesABruteForceTwinOnARandomCorpus) {
  std::mt19937 rng(5);
  const Tokens ids = random_corpus(rng, 2500, 6);
  const Datastore store(ids);
  int64_t nodes = 0;
  for (int trial = 0; trial < 30; ++trial) {
    const Tokens context = random_context(rng, ids, 6);
    for (int sources = 0; sources < 3; ++sources) {  // both, the datastore alone, the context alone
      DraftTreeParams params;
      params.lookup_occurrences = 1 + int64_t(rng() % 8);
      params.lookup_shortest = 1 + int64_t(rng() % 2);
      params.datastore_longest = 3 + int64_t(rng() % 4);
      if (sources == 1) params.lookup_longest = 0;
      const bool with_store = sources != 2;
      for (int64_t budget : {1, 5, 16, 40})
        for (int64_t depth : {1, 2, 8}) {
          params.budget = budget;
          params.depth = depth;
          const DraftTree tree = draft_tree(context, with_store ? &store : nullptr, params);
          const DraftTree twin = brute_draft_tree(context, with_store ? &ids : nullptr, params);
          EXPECT_EQ(tree.tokens, twin.tokens) << trial << " " << sources << " " << budget << " " << depth;
          EXPECT_EQ(tree.parents, twin.parents) << trial << " " << sources << " " << budget << " " << depth;
          expect_well_formed(tree, params);
          nodes += tree.size();
        }
    }
  }
  EXPECT_GT(nodes, 3000);  // the trees are not mostly empty
}

}  // namespace
}  // namespace canvas
