// Autoregressive decoding with a KV cache, on the same weights (causal attention).
#pragma once
#include <memory>
#include <vector>

#include "core/rng.h"
#include "core/thread_pool.h"
#include "text/constraint.h"
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
  // Constrained generation (text/constraint.h): each step's logits are restricted to the tokens that
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

// generate_ar's loop, one pass at a time: generate_ar is while (next()) { run_forward(pass() on cache());
// advance(); } finish(). The callbacks' forward is not used; the others are called from advance().
class ArDecoder {
 public:
  // Throws Error as generate_ar does (an empty prompt, no tokens to generate, a constraint that cannot fit).
  ArDecoder(const Model& model, const std::vector<int32_t>& prompt, const ArParams& params,
            const DecodeCallbacks& callbacks);
  // True while there is a pass to run (then pass() is it, on cache()); false once the run has ended.
  bool next();
  const ForwardRequest& pass() const { return pass_; }
  KvCache& cache() { return *cache_; }
  // After the pass ran: chooses the token and reports it (on_logprob, on_step); callbacks may throw.
  void advance();
  // The result (call once, after next() said false or to stop early); leaves the K/V in the prefix cache.
  GenerationResult finish();

 private:
  const Model& model_;
  const ArParams& params_;
  const DecodeCallbacks& callbacks_;
  std::unique_ptr<KvCache> own_;
  KvCache* cache_ = nullptr;
  Rng rng_;
  GenerationResult result_;
  int64_t reused_ = 0, pos0_ = 0;
  bool feed_mask_ = false, ended_ = false;
  std::vector<float> logits_, raw_;  // raw: the row before constraint masking, for log-probabilities
  std::vector<int32_t> generated_, tokens_, step_tokens_, groups_, recent_;
  std::vector<char> allowed_;
  int32_t state_ = 0;
  ForwardRequest pass_;
  double t0_ = 0, t_first_ = 0;
};

}  // namespace canvas
