// Uniform-state diffusion decoding of a canvas model (canvas's own uniform-state models): the prompt
// and each committed canvas go through the causal encoder into the KV cache; canvases are denoised by
// the entropy-bound sampler with bidirectional decoder passes over [cache ; canvas].
#pragma once
#include <cstdint>
#include <vector>

#include "decode/entropy_bound.h"
#include "model/model.h"

namespace canvas {

// Generates with generate_entropy_bound(). The decoder pass writes the canvas's K/V into the cache rows
// just past the committed tokens (its own visibility group, so committed rows never see it) and the
// encoder overwrites them when a canvas is committed. Models without a self-conditioning path ignore
// the self-conditioning logits. prompt_ms covers the prompt's encoder pass.
EntropyBoundResult generate_uniform_state(const Model& model, const std::vector<int32_t>& prompt,
                                          const EntropyBoundParams& params, ThreadPool* pool,
                                          const DecodeCallbacks& callbacks = {});

}  // namespace canvas
