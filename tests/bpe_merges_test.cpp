// BpeMerges::apply against its obviously-correct twin: repeatedly merge the adjacent pair of the lowest rank
// (the leftmost among equals), on random symbol strings and random merge tables.
#include "io/bpe_merges.h"

#include <gtest/gtest.h>

#include <map>
#include <utility>

#include "core/rng.h"

namespace canvas {
namespace {

std::vector<int32_t> naive_bpe(std::vector<int32_t> sym, const std::map<std::pair<int32_t, int32_t>, std::pair<int32_t, int32_t>>& merges) {
  while (true) {
    int32_t best_rank = INT32_MAX;
    size_t best = 0;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      if (sym[i] < 0 || sym[i + 1] < 0) continue;
      const auto it = merges.find({sym[i], sym[i + 1]});
      if (it != merges.end() && it->second.first < best_rank) best_rank = it->second.first, best = i;
    }
    if (best_rank == INT32_MAX) return sym;
    sym[best] = merges.at({sym[best], sym[best + 1]}).second;
    sym.erase(sym.begin() + std::ptrdiff_t(best) + 1);
  }
}

TEST(BpeMerges, MatchesTheNaiveLoopOnRandomInputs) {
  Rng rng(7);
  for (int trial = 0; trial < 4000; ++trial) {
    // A small alphabet (so that pairs repeat and chains form), merges into fresh ids, some symbols -1.
    const int32_t alphabet = 2 + int32_t(rng.below(4));
    std::map<std::pair<int32_t, int32_t>, std::pair<int32_t, int32_t>> table;
    BpeMerges merges;
    int32_t next_id = alphabet;
    const int n_merges = 1 + int(rng.below(40));
    for (int r = 0; r < n_merges; ++r) {
      const int32_t left = int32_t(rng.below(uint64_t(next_id))), right = int32_t(rng.below(uint64_t(next_id)));
      if (table.count({left, right})) continue;
      table[{left, right}] = {r, next_id};
      merges.add(left, right, r, next_id);
      ++next_id;
    }
    std::vector<int32_t> sym(rng.below(48));
    for (int32_t& s : sym) s = rng.below(10) == 0 ? -1 : int32_t(rng.below(uint64_t(alphabet)));
    const std::vector<int32_t> expected = naive_bpe(sym, table);
    std::vector<int32_t> got_sym = sym;
    std::vector<int32_t> got;
    for (int32_t i : merges.apply(got_sym)) got.push_back(got_sym[size_t(i)]);
    ASSERT_EQ(got, expected) << "trial " << trial;
  }
  std::vector<int32_t> none;
  EXPECT_TRUE(BpeMerges().apply(none).empty());
}

}  // namespace
}  // namespace canvas
