// Suffix arrays (decode/suffix_array.h) against a plain sort of the suffixes, and the check of one read back.
#include "decode/suffix_array.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "core/error.h"

namespace canvas {
namespace {

using Tokens = std::vector<int32_t>;

// The obviously-correct twin: every suffix compared in full (a prefix first).
Tokens sorted_suffixes(const Tokens& ids) {
  Tokens order(ids.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return std::lexicographical_compare(ids.begin() + a, ids.end(), ids.begin() + b, ids.end());
  });
  return order;
}

// Random texts of every small size over alphabets of 1 to 6 symbols (runs, repeats, LMS substrings that
// recur: the recursion), periodic texts, and ids far larger than the text (renamed before the buckets).
TEST(SuffixArray, EqualsAPlainSortOfTheSuffixes) {
  std::mt19937 rng(5);
  for (int32_t n = 0; n <= 120; ++n)
    for (int32_t alphabet = 1; alphabet <= 6; ++alphabet)
      for (int trial = 0; trial < 3; ++trial) {
        Tokens ids(static_cast<size_t>(n));
        for (auto& t : ids) t = int32_t(rng() % uint32_t(alphabet));
        const Tokens sa = suffix_array(ids);
        ASSERT_EQ(sa, sorted_suffixes(ids)) << "n " << n << " alphabet " << alphabet << " trial " << trial;
        EXPECT_TRUE(suffixes_are_sorted(ids, sa, 64));
      }
  for (int32_t period : {1, 2, 3, 7, 64, 100}) {
    Tokens ids(5000);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i % size_t(period)) * 3 % 11);
    EXPECT_EQ(suffix_array(ids), sorted_suffixes(ids)) << "period " << period;
  }
  const Tokens large = {262143, 5, 1000000, 5, 262143, 5, 7};
  EXPECT_EQ(suffix_array(large), sorted_suffixes(large));
  EXPECT_THROW(suffix_array(Tokens{1, -1, 2}), Error);
}

// A suffix array read back from a file is taken only when it is the text's positions, each once, in order
// to the depth asked; equal suffixes at that depth may be in any order.
TEST(SuffixArray, TheCheckRefusesAnythingButTheTextsPositionsInOrder) {
  const Tokens ids = {2, 1, 2, 1, 3, 1, 2};
  const Tokens good = suffix_array(ids);
  EXPECT_TRUE(suffixes_are_sorted(ids, good, 64));
  Tokens swapped = good;
  std::swap(swapped[2], swapped[3]);
  EXPECT_FALSE(suffixes_are_sorted(ids, swapped, 64));
  Tokens repeated = good;
  repeated[1] = repeated[0];
  EXPECT_FALSE(suffixes_are_sorted(ids, repeated, 64));
  for (int32_t bad : {-1, 7, 1 << 30}) {
    Tokens out_of_range = good;
    out_of_range[4] = bad;
    EXPECT_FALSE(suffixes_are_sorted(ids, out_of_range, 64));
  }
  EXPECT_FALSE(suffixes_are_sorted(ids, Tokens(good.begin(), good.end() - 1), 64));
  // A prefix sorts first: "1" (position 5's suffix is "1 2", position 6's "2") ...
  const Tokens ends = {1, 1};
  EXPECT_TRUE(suffixes_are_sorted(ends, Tokens{1, 0}, 64));
  EXPECT_FALSE(suffixes_are_sorted(ends, Tokens{0, 1}, 64));
  // ... unless both are as long as the depth: then they are equal there, in either order.
  EXPECT_TRUE(suffixes_are_sorted(ends, Tokens{0, 1}, 1));
}

}  // namespace
}  // namespace canvas
