// The suffix array of a sequence of token ids, built in linear time and in place (SA-IS), and its check.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace canvas {

// The positions of `ids` ordered by the suffix that starts at each (a suffix that is a prefix of another
// sorts first). Induced sorting (SA-IS, Nong, Zhang and Chan 2009): O(n) time however repetitive the ids
// (a token repeated a million times costs what a million tokens of prose cost), and besides the array
// itself, only buckets the size of the alphabet and a bit per position, so a corpus of n tokens takes about
// 8 bytes a token with its ids. ids must be non-negative and fewer than 2^31 (Error otherwise).
std::vector<int32_t> suffix_array(std::span<const int32_t> ids);
// How many suffix arrays this process has built (a load from a cache must add none).
int64_t suffix_arrays_built();

// Whether `suffixes` is a permutation of the positions of `ids` whose suffixes are in order to their first
// `depth` tokens (each pair of neighbours compared that far: O(n * depth) at most, no sort). A suffix
// array read back from a file is checked with this before it is used.
bool suffixes_are_sorted(std::span<const int32_t> ids, std::span<const int32_t> suffixes, int32_t depth);

}  // namespace canvas
