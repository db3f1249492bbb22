// Draft-and-verify decoding on one set of weights: the diffusion decoder drafts the next k tokens in one or
// a few passes (or, where the text repeats itself, the tokens that followed the last n-gram's earlier
// occurrence, or the continuation a datastore's corpus votes for, are drafted without a pass), and one causal (AR) pass over them verifies: the longest prefix
// AR agrees with is kept, plus AR's own token where they first differ. The text is exactly what AR decoding
// writes (greedy: the same tokens; sampling: the same distribution, by speculative rejection sampling), with
// several tokens committed per AR pass. (On the CPU bit for bit. On a GPU a pass's products round by its row count: with quantised
// weights, 9 or more rows multiply on the tensor cores in f16 where a one-token AR step multiplies in f32,
// so at a near-tie the verify pass may choose another token than a separate AR step would.)
#pragma once
#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "decode/datastore.h"
#include "decode/draft_tree.h"
#include "decode/events.h"
#include "decode/prefix_cache.h"
#include "decode/sampling.h"
#include "model/model.h"

namespace canvas {

struct VerifyParams {
  int64_t max_new_tokens = 64;
  int64_t draft_length = 4;  // k: tokens drafted per cycle
  int64_t draft_steps = 1;   // decoder passes per draft (self-conditioned after the first)
  // The verifier's sampling (as generate_ar's): temperature 0 is greedy; otherwise speculative rejection
  // sampling with the drafter's softmax(logits / draft_temperature) as the proposal. Repeat penalty, top-k,
  // top-p and min-p shape the verifier's distribution exactly as they shape AR's.
  SamplingParams sampling;
  float draft_temperature = 1.f;  // sampling only: the proposal's temperature
  std::vector<int32_t> stop_ids;  // tokens that end generation (kept as the last token)
  bool stop_at_eos = true;        // false: the stop ids do not end generation (all max_new_tokens decoded)
  PrefixCache* prefix_cache = nullptr;  // K/V kept between generations (decode/prefix_cache.h)
  // One forward per cycle instead of two: the pass that verifies a cycle's drafts also drafts the next
  // cycle, once for every number of drafts that may be kept (j = 0..k: the decoder reads the cache up to
  // the j-th draft, which the same pass writes, and drafts the k positions after AR's token at j + 1, that
  // token's own position held as noise). (k + 1) + (k + 1)^2 rows per pass. Needs a decoder that reads the
  // cache without writing it (DiffusionGemma) and draft_steps 1.
  bool overlap = false;
  // Lookup drafts: a cycle whose context (prompt + generated) ends in an n-gram that occurred before, for
  // some n from draft_lookup down to 2 (1 when draft_lookup is 1), drafts the lookup_length tokens that
  // followed its latest occurrence (decode/lookup_draft.h) with no decoder pass; the other cycles draft
  // with the decoder. Sampling: such a draft is a point-mass proposal (kept with probability p(d), else a
  // draw from p without d). Overlapped, a lookup cycle's pass only verifies (no candidates) and a decoder
  // cycle after it drafts in a pass of its own. 0: off.
  int64_t draft_lookup = 3;
  int64_t lookup_length = 8;  // a lookup draft's tokens (fewer at the end of max_new_tokens)
  // Datastore drafts: a cycle that finds no lookup draft asks the datastore (decode/datastore.h) for the
  // voted continuation of the context's longest n-gram that occurs in its corpus often enough, drafted as
  // a lookup draft is (no decoder pass, a point-mass proposal, overlapped: a pass that only verifies).
  // Null: off.
  const Datastore* datastore = nullptr;
  DatastoreDraftParams datastore_draft;
  int64_t datastore_length = 4;  // a datastore draft's most tokens (8 keeps more per pass, costs more rows)
  // Tree drafts (instead of the lookup and datastore chains): each cycle drafts a tree of up to draft_tree
  // tokens (decode/draft_tree.h: the likely continuations that the context's own n-grams and the datastore's
  // vote for, best first, paths of at most tree.depth tokens) and verifies every path in one causal pass
  // with a tree mask (ForwardRequest::tree_parents): the longest path AR agrees with is kept, plus AR's token
  // after it. Sampling: a node's children are point-mass proposals tried in turn, best first (each kept with
  // its probability under what remains of AR's distribution, else removed from it; none kept: a draw from
  // the rest), so the kept or drawn token is distributed as AR's. A cycle whose tree is empty drafts with the
  // decoder, and plain (not overlapped) verifies a tree of the decoder's rows too: best first by the product
  // of its tokens' probabilities, each node's children the next position's three likeliest tokens (its own
  // second guesses where it is unsure). The CPU only. 0: off; at most 63.
  int64_t draft_tree = 0;
  DraftTreeParams tree;  // (its budget is draft_tree's)
};

// A draft-and-verify run's setting and what its cycles did: generate_verify fills it, GenerationOutput::verify
// holds it, the stats line and the JSON report it.
struct VerifyStats {
  int64_t draft_length = 0;  // k (VerifyParams::draft_length)
  bool overlap = false;      // overlapped cycles (VerifyParams::overlap)
  int64_t draft_lookup = 0;  // the longest n-gram of lookup drafts (VerifyParams::draft_lookup; 0: off)
  bool datastore = false;    // datastore drafts on (VerifyParams::datastore)
  int64_t draft_tree = 0;    // the most tokens of a tree of drafts (VerifyParams::draft_tree; 0: chains)
  int64_t cycles = 0;        // draft-and-verify cycles, one verifying pass each (VerifyResult::encoder_passes)
  int64_t drafted = 0, accepted = 0;  // draft tokens proposed and kept
  // [j]: the cycles that drafted the full draft_length tokens and kept j of them (draft_length + 1 entries;
  // the short cycles at the end of N are not counted; nor are lookup and datastore cycles): the acceptance of
  // the decoder's drafts, which --mode auto's cost model learns.
  std::vector<int64_t> cycles_keeping;
  int64_t lookup_cycles = 0;    // cycles drafted by lookup (VerifyParams::draft_lookup); the rest by the decoder
  int64_t lookup_drafted = 0, lookup_accepted = 0;  // ... their draft tokens proposed and kept (in drafted, accepted)
  int64_t datastore_cycles = 0;  // cycles drafted by the datastore (VerifyParams::datastore)
  int64_t datastore_drafted = 0, datastore_accepted = 0;  // ... their draft tokens (in drafted, accepted)
  int64_t tree_cycles = 0;  // cycles that verified a tree of drafts (VerifyParams::draft_tree)
  int64_t decoder_tree_cycles = 0;  // ... of them, trees of the decoder's rows (after a draft pass)
  int64_t tree_drafted = 0, tree_accepted = 0;  // ... the trees' tokens and the tokens kept (in drafted, accepted)
};

struct VerifyResult : GenerationResult {
  // passes counts every pass, the prompt's included (decoder drafts and verifying encoder passes; an
  // overlapped cycle is one pass); encoder_passes the verifying ones.
  int64_t encoder_passes = 0;
  VerifyStats stats;
};

// Models with a uniform-state diffusion path and a causal path on the same weights (DiffusionGemma:
// decoder + encoder; canvas's own uniform-state models). Throws Error for others.
bool supports_verify(const ModelConfig& config);

// StepEvent per cycle: canvas = the generated tokens, committed = the positions this cycle added.
// passes and rows_computed count the passes after the prompt's and the prompt pass's drafting rows.
VerifyResult generate_verify(const Model& model, const std::vector<int32_t>& prompt, const VerifyParams& params,
                             ThreadPool* pool, const DecodeCallbacks& callbacks = {});

}  // namespace canvas
