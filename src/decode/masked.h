// Masked (absorbing-state) diffusion generation: LLaDA block schedule, Dream timestep schedule,
// unmasking orders, Fast-dLLM threshold decoding, and the none / prefix / dual caches.
#pragma once
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "text/constraint.h"
#include "decode/events.h"
#include "decode/sampling.h"
#include "model/model.h"

namespace canvas {

enum class UnmaskOrder { Confidence, Margin, Entropy, Random, Origin };
enum class StepSchedule { Llada, Dream };
enum class CacheMode { None, Prefix, Dual };

UnmaskOrder parse_unmask_order(const std::string& name);
StepSchedule parse_step_schedule(const std::string& name);
CacheMode parse_cache_mode(const std::string& name);

struct MaskedDiffusionParams {
  int64_t gen_length = 64;
  int64_t steps = 64;          // total over all blocks; must be a multiple of the number of blocks
  int64_t block_length = 32;   // gen_length must be a multiple of it
  UnmaskOrder order = UnmaskOrder::Confidence;
  StepSchedule schedule = StepSchedule::Llada;
  float threshold = 0.f;       // > 0: Fast-dLLM threshold parallel decoding (ignores the schedule)
  float eps = 1e-3f;           // Dream schedule: t runs from 1 to eps
  CacheMode cache = CacheMode::None;
  // Compute-aware decoding (an approximation, off by default): after a block's first pass, a pass
  // recomputes only the masked positions and those committed by the previous step (and, for shifted
  // models, the rows that predict masked positions); every other position keeps the K/V its last pass
  // left in the cache, so a committed token is recomputed once after its commit and then frozen.
  bool freeze = false;
  int64_t freeze_refresh = 0;  // with freeze: also a full pass every this many steps of a block (0: none)
  SamplingParams sampling;
  // > 1: beam search over commit decisions (generate_masked_beam) instead of the schedule above.
  int64_t beam_width = 0;
  // Infilling: the starting canvas (gen_length ids); positions not holding the mask id are fixed and
  // never re-decided. Empty: everything masked.
  std::vector<int32_t> initial_canvas;
  // Constrained filling (text/constraint.h; not with beam search): each masked position's logits are
  // restricted to the tokens its hole still allows, and of several tokens committed in one step each
  // is re-checked after the ones before it (a token no longer allowed stays masked), so the finished
  // canvas satisfies every hole. Positions are indices into the generated region. The decoder updates
  // the constraint's state; one constraint serves one generation at a time.
  CanvasConstraint* constraint = nullptr;
};

// Tokens committed at step i of a block with `masked` masked positions left, under the schedule:
// LLaDA: floor(M/S) + (i < M mod S) with M the masked count at the start of the block;
// Dream: int(masked * (1 - s/t)) with t = 1 - i/S (1 - eps), s = t at i + 1; everything on the last step.
int64_t tokens_to_commit(StepSchedule schedule, int64_t block_masked_at_start, int64_t masked_now, int64_t step,
                         int64_t steps, float eps);

// Every mode attends with the block-causal view: the prompt sees the prompt, finished block i sees the
// prompt and blocks <= i, and the active region (current block and everything after it) sees all.
// So `prefix` (prompt and finished blocks computed once) is exact: it yields the tokens of `none`
// (everything recomputed every pass). `dual` also reuses the masked suffix's K/V within a block
// (Fast-dLLM's approximation).
GenerationResult generate_masked(const Model& model, const std::vector<int32_t>& prompt,
                                 const MaskedDiffusionParams& params, ThreadPool* pool,
                                 const DecodeCallbacks& callbacks = {});

// Beam search over commit decisions: every pass commits one token per beam; a beam's score is the sum
// of log p(token) over the tokens it committed (the likelihood of its canvas under the order it chose,
// which is the model's own joint, factorised along that order). Each step extends every beam by its
// `beam_width` best (position, token) choices (the two likeliest tokens of each masked position are
// candidates), keeps the `beam_width` best distinct canvases, and at the end returns the best.
// beam_width 1 is confidence-order greedy decoding with one token per pass. Every pass recomputes the
// whole sequence (no cache); blocks are decoded in order with the block-causal view of generate_masked.
// Uses gen_length, block_length, initial_canvas and beam_width of `params`; the step schedule,
// threshold, order, cache and sampling settings do not apply.
GenerationResult generate_masked_beam(const Model& model, const std::vector<int32_t>& prompt,
                                      const MaskedDiffusionParams& params, ThreadPool* pool,
                                      const DecodeCallbacks& callbacks = {});

}  // namespace canvas
