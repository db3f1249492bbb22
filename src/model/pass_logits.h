// The logits of one forward pass over given token ids, as `canvas logits` writes them for comparison with a
// reference implementation: every id's row, or the decoder's rows of a canvas after the ids.
#pragma once
#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "model/model.h"

namespace canvas {

// Without `canvas`: one pass over `ids` with every row's logits, [ids.size(), vocab]; each id attends to
// those before it when `causal`, else to all of them. With `canvas` (models with a decoder): `ids` encoded
// causally into the cache, then one decoder pass over the canvas that follows them, [canvas->size(), vocab],
// self-conditioned by `self_cond` ([canvas->size(), vocab]; null: zeros, as on a canvas's first step).
// Throws Error when the ids (and the canvas) exceed the context length (positions past it have no trained
// meaning, nor a learned position embedding), for a canvas on a model without a decoder, and for a
// `self_cond` without a canvas (check_pass_logits).
std::vector<float> pass_logits(const Model& model, const std::vector<int32_t>& ids, bool causal,
                               const std::vector<int32_t>* canvas, const float* self_cond, ThreadPool* pool);

// The checks of pass_logits, for a caller that reads more input before the pass (canvas logits reads the
// self-conditioning file): `canvas` null without canvas ids.
void check_pass_logits(const ModelConfig& config, int64_t ids, const std::vector<int32_t>* canvas, bool self_cond);

}  // namespace canvas
