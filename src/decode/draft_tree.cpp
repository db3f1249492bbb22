// Tree drafts: the sources' occurrences (context positions, datastore suffix ranges), grown best-first.
#include "decode/draft_tree.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <queue>

namespace canvas {

namespace {

struct Source {
  bool in_context = false;  // the context's occurrences; else a datastore gram's
  int64_t gram = 0;  // the gram's length: a continuation's i-th token is at its occurrence's start + gram + i
  double weight = 0;  // before normalisation
  int64_t occurrences = 0;
  double per_occurrence = 0;  // the normalised weight each occurrence carries
};

// One source's occurrences that continue with a candidate's path: [first, last) of the context positions
// (a continuation's start each) or of the datastore's suffix array.
struct Part {
  int32_t source = 0;
  int64_t first = 0, last = 0;
};

// A path from the root: its last token, the tree node of the path without it, its length, and its parts
// ([parts_first, parts_last) of the parts, one a source that continues with it, in source order).
struct Candidate {
  int32_t token = 0;
  int32_t parent = -1;
  int64_t length = 0;
  int64_t parts_first = 0, parts_last = 0;
};

struct Ranked {
  double score = 0;
  int32_t token = 0;
  int64_t candidate = 0;  // its index: the order it was found in
  // The heap's top is the greatest: the best score, then the lower token, then the candidate found first.
  bool operator<(const Ranked& other) const {
    if (score != other.score) return score < other.score;
    if (token != other.token) return token > other.token;
    return candidate > other.candidate;
  }
};

// A part of a candidate-to-be: its source's occurrences that continue with `token`.
struct ChildPart {
  int32_t token = 0;
  Part part;
};

// A candidate-to-be: its score, its token and its parts (a range of the expansion's merged parts).
struct Child {
  double score = 0;
  int32_t token = 0;
  int64_t parts_first = 0, parts_last = 0;
};

// The context source: the latest `occurrences` earlier occurrences of the longest n-gram (lookup_longest down
// to lookup_shortest) that recurs with at least one token after it; their continuations' starts are appended
// to `positions`. False when none recurs.
bool find_context_occurrences(std::span<const int32_t> context, const DraftTreeParams& params, int64_t& gram,
                              std::vector<int64_t>& positions) {
  const int64_t L = int64_t(context.size());
  if (params.lookup_weight <= 0 || params.lookup_occurrences < 1) return false;
  for (int64_t n = std::min(params.lookup_longest, L - 1); n >= std::max<int64_t>(1, params.lookup_shortest);
       --n) {
    const auto suffix = context.end() - n;
    // Starts i with i + n <= L - 1: a token follows, and the suffix is not its own occurrence.
    for (int64_t i = L - n - 1; i >= 0 && int64_t(positions.size()) < params.lookup_occurrences; --i)
      if (std::equal(suffix, context.end(), context.begin() + i)) positions.push_back(i + n);
    if (!positions.empty()) {
      gram = n;
      return true;
    }
  }
  return false;
}

}  // namespace

DraftTree draft_tree(std::span<const int32_t> context, const Datastore* datastore,
                     const DraftTreeParams& params) {
  DraftTree tree;
  if (params.budget < 1 || params.depth < 1) return tree;
  const int64_t L = int64_t(context.size());

  std::vector<Source> sources;
  std::vector<Part> parts;         // every candidate's parts; the root's first
  std::vector<int64_t> positions;  // the context source's occurrences below every candidate; the root's first
  int64_t gram = 0;
  if (find_context_occurrences(context, params, gram, positions)) {
    sources.push_back({true, gram, params.lookup_weight, int64_t(positions.size())});
    parts.push_back({0, 0, int64_t(positions.size())});
  }
  if (datastore) {
    // Grams longer than kSortDepth have no continuation (and no exact range).
    const int64_t longest = std::min({params.datastore_longest, L, int64_t(Datastore::kSortDepth)});
    for (int64_t n = longest, rank = 0; n >= std::max<int64_t>(1, params.datastore_shortest); --n) {
      const Datastore::Range range = datastore->range(context.subspan(size_t(L - n)));
      if (range.size() == 0) continue;
      const double weight = std::ldexp(1.0, -int(rank++)) * std::min(1.0, double(range.size()) / 4.0);
      parts.push_back({int32_t(sources.size()), range.first, range.last});
      sources.push_back({false, n, weight, range.size()});
    }
  }
  if (sources.empty()) return tree;
  double total = 0;
  for (const Source& s : sources) total += s.weight;
  for (Source& s : sources) s.per_occurrence = s.weight / total / double(s.occurrences);

  std::vector<Candidate> candidates;
  std::priority_queue<Ranked> heap;
  std::vector<ChildPart> children;                        // each part's children, part by part, by token
  std::vector<std::pair<int64_t, int64_t>> lists;         // [first, last) of `children`: one part's children
  std::vector<std::pair<int32_t, int64_t>> context_next;  // (next token, continuation start)
  std::vector<Datastore::TokenRun> runs;
  std::vector<Part> merged;  // the children's parts, a child's together in source order
  std::vector<Child> found;
  std::vector<size_t> kept;  // the children that become candidates: indices into `found`
  // The children of the path of `length` tokens whose parts are [parts_first, parts_last) and which is tree
  // node `node` (-1: the root) become candidates: those that can still join a tree with `room` more nodes.
  auto expand = [&](int64_t parts_first, int64_t parts_last, int64_t length, int32_t node, int64_t room) {
    children.clear();
    lists.clear();
    for (int64_t p = parts_first; p < parts_last; ++p) {
      const Part part = parts[size_t(p)];
      const Source& source = sources[size_t(part.source)];
      const int64_t first = int64_t(children.size());
      if (source.in_context) {
        context_next.clear();
        for (int64_t i = part.first; i < part.last; ++i) {
          const int64_t at = positions[size_t(i)] + length;
          if (at < L) context_next.push_back({context[size_t(at)], positions[size_t(i)]});
        }
        std::sort(context_next.begin(), context_next.end());
        for (size_t i = 0; i < context_next.size();) {
          const int32_t token = context_next[i].first;
          const int64_t start = int64_t(positions.size());
          for (; i < context_next.size() && context_next[i].first == token; ++i)
            positions.push_back(context_next[i].second);
          children.push_back({token, {part.source, start, int64_t(positions.size())}});
        }
      } else {
        runs.clear();
        datastore->next_token_runs({part.first, part.last}, source.gram + length, runs);
        for (const Datastore::TokenRun& run : runs)
          children.push_back({run.token, {part.source, run.range.first, run.range.last}});
      }
      lists.push_back({first, int64_t(children.size())});
    }
    // Merge the parts' lists (each by token, the parts in source order): one child a token, its score summed
    // over its parts in source order.
    merged.clear();
    found.clear();
    for (;;) {
      int32_t token = INT32_MAX;
      bool any = false;
      for (const auto& [first, last] : lists)
        if (first < last) token = std::min(token, children[size_t(first)].token), any = true;
      if (!any) break;
      Child child{0, token, int64_t(merged.size()), 0};
      for (auto& [first, last] : lists)
        if (first < last && children[size_t(first)].token == token) {
          const Part& part = children[size_t(first++)].part;
          child.score += sources[size_t(part.source)].per_occurrence * double(part.last - part.first);
          merged.push_back(part);
        }
      child.parts_last = int64_t(merged.size());
      found.push_back(child);
    }
    // Siblings keep their order in the heap, so beyond the best `room` of them none can join the tree: each
    // would come after `room` better siblings, when the tree is full.
    kept.resize(found.size());
    for (size_t i = 0; i < kept.size(); ++i) kept[i] = i;
    if (int64_t(found.size()) > room) {
      std::nth_element(kept.begin(), kept.begin() + room, kept.end(), [&](size_t a, size_t b) {
        return found[a].score != found[b].score ? found[a].score > found[b].score
                                                : found[a].token < found[b].token;
      });
      kept.resize(size_t(room));
      std::sort(kept.begin(), kept.end());  // back to token order: candidates are numbered in the order found
    }
    for (size_t i : kept) {
      const Child& child = found[i];
      Candidate candidate{child.token, node, length + 1, int64_t(parts.size()), 0};
      parts.insert(parts.end(), merged.begin() + child.parts_first, merged.begin() + child.parts_last);
      candidate.parts_last = int64_t(parts.size());
      heap.push({child.score, child.token, int64_t(candidates.size())});
      candidates.push_back(candidate);
    }
  };

  expand(0, int64_t(parts.size()), 0, -1, params.budget);
  while (tree.size() < params.budget && !heap.empty()) {
    const Candidate best = candidates[size_t(heap.top().candidate)];
    heap.pop();
    const int32_t node = int32_t(tree.size());
    tree.tokens.push_back(best.token);
    tree.parents.push_back(best.parent);
    if (best.length < params.depth && tree.size() < params.budget)
      expand(best.parts_first, best.parts_last, best.length, node, params.budget - tree.size());
  }
  return tree;
}

}  // namespace canvas
