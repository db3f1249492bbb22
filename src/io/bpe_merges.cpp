#include "io/bpe_merges.h"

#include <climits>
#include <functional>
#include <queue>

namespace canvas {

namespace {
constexpr int32_t kDead = INT32_MIN;
}  // namespace

std::vector<int32_t> BpeMerges::apply(std::vector<int32_t>& sym) const {
  // Symbols form a linked list; candidate merges wait in a min-heap keyed by (rank, position), so the
  // lowest-ranked pair merges first and, among equal ranks, the leftmost. A popped candidate is stale when
  // either symbol changed since it was pushed.
  const int32_t n = int32_t(sym.size());
  std::vector<int32_t> prev(static_cast<size_t>(n)), next(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    prev[size_t(i)] = i - 1;
    next[size_t(i)] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank, left, left_id, right_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  const auto push = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = next[size_t(left)];
    if (right < 0 || sym[size_t(left)] < 0 || sym[size_t(right)] < 0) return;
    if (const Merge* m = find(sym[size_t(left)], sym[size_t(right)]))
      heap.push({m->rank, left, sym[size_t(left)], sym[size_t(right)]});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const int32_t right = next[size_t(c.left)];
    if (sym[size_t(c.left)] != c.left_id || right < 0 || sym[size_t(right)] != c.right_id) continue;  // stale
    sym[size_t(c.left)] = find(c.left_id, c.right_id)->result;
    sym[size_t(right)] = kDead;  // off the list: candidates that still name it as their left are stale
    next[size_t(c.left)] = next[size_t(right)];
    if (next[size_t(right)] >= 0) prev[size_t(next[size_t(right)])] = c.left;
    push(prev[size_t(c.left)]);
    push(c.left);
  }
  std::vector<int32_t> kept;
  for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = next[size_t(i)]) kept.push_back(i);
  return kept;
}

}  // namespace canvas
