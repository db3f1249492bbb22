// Lookup drafts for draft-and-verify: the tokens that followed an earlier occurrence of the context's last
// n-gram (prompt-lookup decoding), proposed without a forward pass.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace canvas {

// The draft after `context` (the prompt and the tokens generated so far): for n = longest down to shortest,
// the latest earlier occurrence of the context's last n tokens, and the `length` tokens that followed it.
// The longest n with an occurrence wins; among its occurrences, the latest. The copy may run past the end of
// the context into the draft itself, so a loop shorter than `length` repeats ("x a b a b" drafts "a b a b"
// after "b"). Empty when no such n-gram recurs (a context of fewer than shortest + 1 tokens, shortest < 1,
// longest < shortest, length < 1).
std::vector<int32_t> lookup_draft(std::span<const int32_t> context, int64_t longest, int64_t shortest,
                                  int64_t length);

}  // namespace canvas
