// Shared by the entropy-bound sampler tests on the tiny DiffusionGemma fixture.
#pragma once

#include "decode/entropy_bound.h"

namespace canvas::test {

// Three canvases of 16 (the last cut short), 6 steps each, every canvas run (no EOS ids: a random model
// emits them by chance).
inline EntropyBoundParams small_entropy_bound_params() {
  EntropyBoundParams p;
  p.canvas_length = 16;
  p.max_new_tokens = 40;
  p.max_denoising_steps = 6;
  p.entropy_bound = 1.0f;
  p.eos_ids = {};
  p.seed = 5;
  return p;
}

}  // namespace canvas::test
