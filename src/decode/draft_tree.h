// Tree drafts for draft-and-verify: the likeliest continuations of the context, a mixture of its own earlier
// n-gram occurrences and a datastore's, grown best-first into a tree that one causal pass verifies.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "decode/datastore.h"

namespace canvas {

// A tree of drafts below the context's last token (the root). Nodes are numbered in the order they were
// chosen, best first, so every prefix of the node list is itself a tree.
struct DraftTree {
  std::vector<int32_t> tokens;  // node i's token
  // Node i's parent node, always < i; -1: a child of the root (the context's last token).
  std::vector<int32_t> parents;
  int64_t size() const { return int64_t(tokens.size()); }
};

struct DraftTreeParams {
  int64_t budget = 16;         // most nodes
  int64_t depth = 8;           // most tokens on a root-to-leaf path
  int64_t lookup_longest = 3;  // context n-grams tried: longest down to shortest (0: no context source)
  int64_t lookup_shortest = 2;
  int64_t lookup_occurrences = 8;  // the latest this many earlier occurrences
  double lookup_weight = 4;  // the context source's weight before normalisation (<= 0: no context source)
  int64_t datastore_longest = 5;  // datastore n-grams tried (each matched length is a source)
  // Single tokens' continuations cost 4-5x the tree's time (hundreds of next tokens) and kept no more
  // drafts on the held-out prompts (docs/experiments.md, 2026-12-07).
  int64_t datastore_shortest = 2;
};

// The draft tree after `context` (the prompt and the tokens generated so far), from a mixture of sources,
// each a set of occurrences whose continuations propose paths:
// - the context: for n = lookup_longest down to lookup_shortest, the earlier occurrences of the context's
//   last n tokens that at least one token follows; the first n that has any gives the source, its
//   lookup_occurrences latest occurrences, continued up to the context's end. Weight lookup_weight.
// - the datastore (when not null): each n from datastore_longest down to datastore_shortest (n <= the
//   context's length and kSortDepth) whose gram occurs in the corpus is a source of all its occurrences,
//   continued up to the corpus's end and kSortDepth tokens from the occurrence's start. The r-th such n
//   (r = 0 for the longest) weighs 2^-r * min(1, occurrences / 4): rare grams and shorter ones count less.
// The weights are normalised to sum 1 and each source's occurrences share its weight equally. A path's score
// is the weight of the occurrences whose continuation starts with it (summed source by source, in the order
// above: context, then the datastore's longest n first); a path proposed by several sources is one node.
// From the root (score 1), the best path found so far joins the tree and its one-token extensions (for
// paths shorter than `depth`) become candidates, until the tree has `budget` nodes or no candidate is left.
// Ties: the lower last token first, then the candidate found first. Empty when there is no source, budget < 1
// or depth < 1.
DraftTree draft_tree(std::span<const int32_t> context, const Datastore* datastore,
                     const DraftTreeParams& params);

}  // namespace canvas
