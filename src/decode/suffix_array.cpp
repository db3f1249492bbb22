// Suffix arrays of token ids by induced sorting (SA-IS), and the check of one read back from a file.
#include "decode/suffix_array.h"

#include <algorithm>
#include <atomic>
#include <string>

#include "core/error.h"

namespace canvas {

namespace {

constexpr int32_t kEmpty = -1;

std::atomic<int64_t> built{0};

// Each symbol's bucket in the suffix array: where its suffixes start (ends false) or end (one past).
void bucket_bounds(const int32_t* s, int32_t n, std::vector<int32_t>& bucket, bool ends) {
  std::fill(bucket.begin(), bucket.end(), 0);
  for (int32_t i = 0; i < n; ++i) ++bucket[size_t(s[i])];
  int32_t sum = 0;
  for (int32_t& b : bucket) {
    const int32_t count = b;
    b = ends ? sum + count : sum;
    sum += count;
  }
}

// The suffixes after an end marker that sorts before every symbol: a suffix is S-type when it sorts before
// the next one, L-type otherwise; an LMS position is an S-type one after an L-type one.
struct SuffixTypes {
  std::vector<bool> s_type;
  bool lms(int32_t i) const { return i > 0 && s_type[size_t(i)] && !s_type[size_t(i - 1)]; }
};

// Induces the order of every suffix from the LMS suffixes placed in SA: the L-type ones left to right from
// their buckets' starts, then the S-type ones right to left from their buckets' ends.
void induce(const int32_t* s, int32_t n, int32_t* sa, const SuffixTypes& types,
            std::vector<int32_t>& bucket) {
  bucket_bounds(s, n, bucket, false);
  sa[bucket[size_t(s[n - 1])]++] = n - 1;  // the last suffix follows the end marker, the first of all
  for (int32_t i = 0; i < n; ++i) {
    const int32_t j = sa[i] - 1;
    if (sa[i] > 0 && !types.s_type[size_t(j)]) sa[bucket[size_t(s[j])]++] = j;
  }
  bucket_bounds(s, n, bucket, true);
  for (int32_t i = n - 1; i >= 0; --i) {
    const int32_t j = sa[i] - 1;
    if (sa[i] > 0 && types.s_type[size_t(j)]) sa[--bucket[size_t(s[j])]] = j;
  }
}

// Whether the LMS substrings at LMS positions a and b (from one to the next LMS position, both included)
// are equal; the one that reaches the end marker equals no other.
bool equal_lms_substrings(const int32_t* s, int32_t n, const SuffixTypes& types, int32_t a, int32_t b) {
  for (int32_t d = 0;; ++d) {
    if (a + d == n || b + d == n) return false;
    if (s[a + d] != s[b + d] || types.s_type[size_t(a + d)] != types.s_type[size_t(b + d)]) return false;
    if (d > 0 && (types.lms(a + d) || types.lms(b + d))) return types.lms(a + d) && types.lms(b + d);
  }
}

// SA-IS on s[0, n) over symbols [0, alphabet), into sa[0, n). The reduced problem (one name per distinct
// LMS substring, at most n/2 of them) lives in sa itself: its string in the tail, its array in the head.
void induced_sort(const int32_t* s, int32_t n, int32_t alphabet, int32_t* sa) {
  if (n == 0) return;
  if (n == 1) {
    sa[0] = 0;
    return;
  }
  SuffixTypes types{std::vector<bool>(size_t(n), false)};
  for (int32_t i = n - 2; i >= 0; --i)
    types.s_type[size_t(i)] = s[i] < s[i + 1] || (s[i] == s[i + 1] && types.s_type[size_t(i + 1)]);
  std::vector<int32_t> bucket(static_cast<size_t>(alphabet));

  // The LMS substrings sorted: LMS positions at their buckets' ends in any order, then induced.
  std::fill(sa, sa + n, kEmpty);
  bucket_bounds(s, n, bucket, true);
  for (int32_t i = 1; i < n; ++i)
    if (types.lms(i)) sa[--bucket[size_t(s[i])]] = i;
  induce(s, n, sa, types, bucket);

  // Their names, by rank among the distinct substrings: first gathered at sa[n1 + position / 2] (LMS
  // positions are at least two apart), then moved in position order to the tail.
  int32_t n1 = 0;
  for (int32_t i = 0; i < n; ++i)
    if (types.lms(sa[i])) sa[n1++] = sa[i];
  std::fill(sa + n1, sa + n, kEmpty);
  int32_t names = 0;
  for (int32_t i = 0, previous = -1; i < n1; ++i) {
    const int32_t position = sa[i];
    if (previous < 0 || !equal_lms_substrings(s, n, types, previous, position)) ++names;
    previous = position;
    sa[n1 + position / 2] = names - 1;
  }
  for (int32_t i = n - 1, j = n - 1; i >= n1; --i)
    if (sa[i] >= 0) sa[j--] = sa[i];

  // The LMS suffixes sorted: by recursion when two substrings share a name, else by their names alone.
  int32_t* reduced = sa + n - n1;
  if (names < n1) {
    induced_sort(reduced, n1, names, sa);
  } else {
    for (int32_t i = 0; i < n1; ++i) sa[reduced[i]] = i;
  }
  for (int32_t i = n - 1, j = n1; i >= 1; --i)  // reduced[k]: the k-th LMS position
    if (types.lms(i)) reduced[--j] = i;
  for (int32_t i = 0; i < n1; ++i) sa[i] = reduced[sa[i]];

  // Every suffix induced from the sorted LMS suffixes, placed at their buckets' ends from the largest down
  // (a suffix only moves right, so none is overwritten before it is moved).
  std::fill(sa + n1, sa + n, kEmpty);
  bucket_bounds(s, n, bucket, true);
  for (int32_t i = n1 - 1; i >= 0; --i) {
    const int32_t position = sa[i];
    sa[i] = kEmpty;
    sa[--bucket[size_t(s[position])]] = position;
  }
  induce(s, n, sa, types, bucket);
}

}  // namespace

std::vector<int32_t> suffix_array(std::span<const int32_t> ids) {
  check(ids.size() < size_t(INT32_MAX), "a suffix array holds fewer than 2^31 tokens");
  const int32_t n = int32_t(ids.size());
  std::vector<int32_t> sa(static_cast<size_t>(n));
  ++built;
  if (n == 0) return sa;
  const auto [low, high] = std::minmax_element(ids.begin(), ids.end());
  check(*low >= 0, "token id " + std::to_string(*low) + " in a suffix array's text: ids are non-negative");
  // Buckets take one int a symbol: ids far beyond the text's length (a few tokens of a large vocabulary)
  // are renamed to their ranks first, so that the buckets never outgrow the text.
  if (int64_t(*high) >= int64_t(n)) {
    std::vector<int32_t> alphabet(ids.begin(), ids.end());
    std::sort(alphabet.begin(), alphabet.end());
    alphabet.erase(std::unique(alphabet.begin(), alphabet.end()), alphabet.end());
    std::vector<int32_t> ranks(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i)
      ranks[size_t(i)] =
          int32_t(std::lower_bound(alphabet.begin(), alphabet.end(), ids[size_t(i)]) - alphabet.begin());
    induced_sort(ranks.data(), n, int32_t(alphabet.size()), sa.data());
  } else {
    induced_sort(ids.data(), n, *high + 1, sa.data());
  }
  return sa;
}

int64_t suffix_arrays_built() {
  return built.load();
}

bool suffixes_are_sorted(std::span<const int32_t> ids, std::span<const int32_t> suffixes, int32_t depth) {
  const size_t n = ids.size();
  if (suffixes.size() != n) return false;
  std::vector<bool> seen(n, false);
  for (const int32_t p : suffixes) {
    if (p < 0 || size_t(p) >= n || seen[size_t(p)]) return false;
    seen[size_t(p)] = true;
  }
  for (size_t k = 1; k < n; ++k) {
    const size_t a = size_t(suffixes[k - 1]), b = size_t(suffixes[k]);
    const size_t m = std::min({n - a, n - b, size_t(depth)});
    const auto differ =
        std::mismatch(ids.begin() + ptrdiff_t(a), ids.begin() + ptrdiff_t(a + m), ids.begin() + ptrdiff_t(b));
    if (differ.first != ids.begin() + ptrdiff_t(a + m)) {
      if (*differ.first > *differ.second) return false;
    } else if (m < size_t(depth) && n - a > n - b) {
      return false;  // equal as far as the shorter goes: the shorter must come first
    }
  }
  return true;
}

}  // namespace canvas
