// Autoregressive decoding with a KV cache, on the same weights (causal attention).
#pragma once
#include <vector>

#include "core/thread_pool.h"
#include "decode/constraint.h"
#include "decode/events.h"
#include "decode/prefix_cache.h"
#include "decode/sampling.h"
#include "model/model.h"

namespace canvas {

struct ArParams {
  int64_t max_new_tokens = 64;
  bool stop_at_eos = true;
  std::vector<int32_t> stop_ids;  // with stop_at_eos: tokens that end generation (empty: the config's eos)
  SamplingParams sampling;
  // Constrained generation (decode/constraint.h): each step's logits are restricted to the tokens that
  // keep the text a prefix of the constraint's language finishable within the tokens left; a stop token
  // is allowed only where the text is complete, and generation ends once nothing may follow. Throws
  // Error when no text of the language fits max_new_tokens.
  const PrefixConstraint* constraint = nullptr;
  // K/V kept between generations (a chat): the prompt's leading tokens found there are not run again,
  // and the run leaves its own tokens' K/V there. Null: a cache of the run's own.
  PrefixCache* prefix_cache = nullptr;
};

// For models whose row p predicts token p + 1 (AR models, Dream, and the causal encoder of a uniform-state
// model such as DiffusionGemma) one token is forwarded per step.
// For unshifted diffusion models (LLaDA) the next position is fed as [MASK] and its row read, so each
// step forwards [previous token, MASK] (the mask's K/V is overwritten by the real token next step).
GenerationResult generate_ar(const Model& model, const std::vector<int32_t>& prompt, const ArParams& params,
                             ThreadPool* pool, const DecodeCallbacks& callbacks = {});

}  // namespace canvas
