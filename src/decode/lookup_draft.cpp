// Lookup drafts: the continuation of the latest earlier occurrence of the context's last n-gram.
#include "decode/lookup_draft.h"

#include <algorithm>

namespace canvas {

std::vector<int32_t> lookup_draft(std::span<const int32_t> context, int64_t longest, int64_t shortest,
                                  int64_t length) {
  const int64_t L = int64_t(context.size());
  if (length < 1 || shortest < 1) return {};
  for (int64_t n = std::min(longest, L - 1); n >= shortest; --n) {
    const auto suffix = context.end() - n;
    // Occurrences start at i with i + n <= L - 1: at least one token follows, and the suffix is not its own.
    for (int64_t i = L - n - 1; i >= 0; --i) {
      if (!std::equal(suffix, context.end(), context.begin() + i)) continue;
      // What followed; past the context's end the copy reads the draft it is writing (a loop of period L - n
      // - i).
      std::vector<int32_t> draft;
      draft.reserve(size_t(length));
      for (int64_t j = 0; j < length; ++j) {
        const int64_t from = i + n + j;
        draft.push_back(from < L ? context[size_t(from)] : draft[size_t(from - L)]);
      }
      return draft;
    }
  }
  return {};
}

}  // namespace canvas
