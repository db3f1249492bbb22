// Lookup drafts (decode/lookup_draft.h): which occurrence of which n-gram drafts, and what it copies.
#include "decode/lookup_draft.h"

#include <gtest/gtest.h>

#include <vector>

namespace canvas {
namespace {

using Tokens = std::vector<int32_t>;

TEST(LookupDraft, NothingWithoutARecurringNgram) {
  EXPECT_TRUE(lookup_draft(Tokens{}, 3, 1, 4).empty());
  EXPECT_TRUE(lookup_draft(Tokens{7}, 3, 1, 4).empty());
  EXPECT_TRUE(lookup_draft(Tokens{1, 2, 3, 4}, 3, 1, 4).empty());
  // The last token is never its own earlier occurrence.
  EXPECT_TRUE(lookup_draft(Tokens{1, 2}, 1, 1, 4).empty());
}

TEST(LookupDraft, CopiesWhatFollowedTheLatestOccurrence) {
  // (1, 2) occurs at 1 and at 4: the latest, at 4, is followed by 4 8 1 2.
  const Tokens context = {7, 1, 2, 3, 1, 2, 4, 8, 1, 2};
  EXPECT_EQ(lookup_draft(context, 2, 2, 3), (Tokens{4, 8, 1}));
  EXPECT_EQ(lookup_draft(context, 2, 2, 1), (Tokens{4}));
}

TEST(LookupDraft, TheLongestNgramWinsOverAMoreRecentShorterOne) {
  // (3, 2) occurs at 0, followed by 5 6; the single 2 occurs later, at 4, followed by 7.
  const Tokens context = {3, 2, 5, 6, 2, 7, 3, 2};
  EXPECT_EQ(lookup_draft(context, 2, 1, 3), (Tokens{5, 6, 2}));
  EXPECT_EQ(lookup_draft(context, 1, 1, 3), (Tokens{7, 3, 2}));
  // Longer than any match or than the context: the longest that matches still wins.
  EXPECT_EQ(lookup_draft(context, 64, 1, 2), (Tokens{5, 6}));
}

TEST(LookupDraft, ShorterNgramsThanShortestDoNotDraft) {
  const Tokens context = {4, 9, 1, 9};  // 9 recurs, (1, 9) does not
  EXPECT_EQ(lookup_draft(context, 3, 1, 2), (Tokens{1, 9}));
  EXPECT_TRUE(lookup_draft(context, 3, 2, 2).empty());
  EXPECT_TRUE(lookup_draft(context, 1, 2, 2).empty());  // longest < shortest
}

TEST(LookupDraft, ALoopShorterThanTheDraftRepeatsPastTheContextsEnd) {
  // (1, 2) at 1 is followed by 1 2 and then the context ends: the copy reads on into its own output.
  EXPECT_EQ(lookup_draft(Tokens{5, 1, 2, 1, 2}, 2, 2, 5), (Tokens{1, 2, 1, 2, 1}));
  // A run of one token: (7, 7) occurs at 0, overlapping the suffix itself.
  EXPECT_EQ(lookup_draft(Tokens{7, 7, 7}, 2, 2, 4), (Tokens{7, 7, 7, 7}));
  // Period 3 from a unigram match.
  EXPECT_EQ(lookup_draft(Tokens{9, 4, 5, 6, 4}, 1, 1, 7), (Tokens{5, 6, 4, 5, 6, 4, 5}));
}

TEST(LookupDraft, OffOrEmptyRequests) {
  const Tokens context = {1, 2, 1, 2};
  EXPECT_TRUE(lookup_draft(context, 0, 1, 4).empty());
  EXPECT_TRUE(lookup_draft(context, 3, 1, 0).empty());
  EXPECT_TRUE(lookup_draft(context, 3, 0, 4).empty());
}

}  // namespace
}  // namespace canvas
