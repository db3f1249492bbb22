// The ranked merges of a BPE vocabulary and the one loop that applies them, shared by the byte-level BPE
// (io/tokenizer.h) and the Gemma-style BPE with byte fallback (io/hf_tokenizer.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace canvas {

class BpeMerges {
 public:
  void reserve(size_t n) { merges_.reserve(n); }
  // left + right -> result at `rank` (lower merges first). A pair added again keeps its first rank.
  void add(int32_t left, int32_t right, int32_t rank, int32_t result) {
    merges_.emplace(key(left, right), Merge{rank, result});
  }
  size_t size() const { return merges_.size(); }

  // Merges `symbols` (token ids) in place as BPE encodes: again and again the adjacent pair with the lowest
  // rank (the leftmost among equals) becomes its result, until no adjacent pair has a merge. Negative
  // symbols never merge. Returns the positions of the symbols left, in order (a merged pair keeps its left
  // position; symbols[i] holds the result; the merged-away positions hold no token).
  std::vector<int32_t> apply(std::vector<int32_t>& symbols) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  static uint64_t key(int32_t left, int32_t right) { return (uint64_t(uint32_t(left)) << 32) | uint32_t(right); }
  const Merge* find(int32_t left, int32_t right) const {
    const auto it = merges_.find(key(left, right));
    return it == merges_.end() ? nullptr : &it->second;
  }
  std::unordered_map<uint64_t, Merge> merges_;  // (left id, right id) -> rank and result
};

}  // namespace canvas
