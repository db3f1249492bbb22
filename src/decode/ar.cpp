// Autoregressive generation loop with a KV cache.
#include "decode/ar.h"

#include <algorithm>
#include <memory>

#include "core/error.h"
#include "core/rng.h"
#include "core/timer.h"

namespace canvas {

GenerationResult generate_ar(const Model& model, const std::vector<int32_t>& prompt, const ArParams& params,
                             ThreadPool* pool, const DecodeCallbacks& callbacks) {
  const ModelConfig& c = model.config;
  const int64_t P = int64_t(prompt.size());
  const int64_t N = params.max_new_tokens;
  check(N > 0, "the number of tokens to generate must be positive");
  check(P >= 1, "autoregressive decoding needs a non-empty prompt");
  // Unshifted models (LLaDA) predict position p from a [MASK] placed at p; a uniform-state model's causal
  // (encoder) rows predict the next token, as an AR model's do.
  const bool feed_mask = !c.shift_logits && !c.uniform_state;
  check(!feed_mask || c.mask_token >= 0, "model predicts unshifted logits but has no mask token");
  std::unique_ptr<KvCache> own;
  int64_t reused = 0;
  KvCache& cache = params.prefix_cache ? params.prefix_cache->acquire(model, prompt, P + N + 1, &reused)
                                       : *(own = std::make_unique<KvCache>(c, P + N + 1));
  Rng rng(params.sampling.seed);
  GenerationResult result;
  result.prompt_tokens = P;
  std::vector<float> logits(static_cast<size_t>(c.vocab));
  std::vector<int32_t> generated;
  std::vector<int32_t> tokens(prompt), groups, recent;
  std::vector<char> allowed;
  std::vector<float> raw;  // the row before constraint masking, when log-probabilities are reported
  int32_t state = 0;
  if (params.constraint) {
    check(params.constraint->vocab_size() <= c.vocab, "the constraint's vocabulary is larger than the model's");
    check(params.constraint->fits(N), "no text of the constraint's language fits in " + std::to_string(N) +
                                          " tokens: raise -n");
    state = params.constraint->start();
  }

  const double t0 = now_ms();
  int64_t pos0 = reused;  // the cached prompt tokens are not run again
  double t_first = 0;
  while (int64_t(generated.size()) < N) {
    // New rows: the prompt on the first pass, then the last generated token; plus a [MASK] if needed.
    std::vector<int32_t> step_tokens(tokens.begin() + pos0, tokens.end());
    if (feed_mask) step_tokens.push_back(c.mask_token);
    groups.resize(step_tokens.size());
    for (size_t i = 0; i < groups.size(); ++i) groups[i] = int32_t(pos0 + int64_t(i));  // causal
    ForwardRequest req;
    req.tokens = step_tokens.data();
    req.n = int64_t(step_tokens.size());
    req.pos0 = pos0;
    req.groups = groups.data();
    req.logit_rows = {int32_t(step_tokens.size() - 1)};
    req.logits = logits.data();
    run_forward(callbacks, model, cache, req, pool);
    ++result.passes;
    if (generated.empty()) t_first = now_ms();
    if (params.constraint && callbacks.on_logprob) raw = logits;
    if (params.constraint) {
      params.constraint->allowed(state, N - int64_t(generated.size()), allowed);
      const bool may_end = params.constraint->complete(state);
      for (int64_t v = 0; v < c.vocab; ++v) {
        const bool stop_token = params.stop_ids.empty() ? v == c.eos_token
                                                        : std::find(params.stop_ids.begin(), params.stop_ids.end(),
                                                                    int32_t(v)) != params.stop_ids.end();
        const bool ok = stop_token ? may_end : (v < int64_t(allowed.size()) && allowed[size_t(v)]);
        if (!ok) logits[size_t(v)] = -1e30f;
      }
    }
    if (params.sampling.repeat_penalty != 1.f) {
      const int64_t from = std::max<int64_t>(0, int64_t(tokens.size()) - params.sampling.repeat_last_n);
      recent.assign(tokens.begin() + from, tokens.end());
    }
    const TokenChoice choice = choose_token(logits.data(), c.vocab, params.sampling, rng, &recent, int64_t(tokens.size()));
    const int32_t token = choice.token;
    pos0 = int64_t(tokens.size());
    tokens.push_back(token);
    generated.push_back(token);
    if (callbacks.on_logprob)
      callbacks.on_logprob(int64_t(generated.size()) - 1,
                           token_logprob(params.constraint ? raw.data() : logits.data(), c.vocab, token,
                                         callbacks.logprobs_top));
    if (callbacks.on_step) {
      StepEvent event;
      event.step = int64_t(generated.size()) - 1;
      event.passes = result.passes;
      event.canvas = &generated;
      event.committed = {int64_t(generated.size()) - 1};
      event.confidence = {choice.p_token};
      callbacks.on_step(event);
    }
    const bool stop = params.stop_ids.empty()
                          ? token == c.eos_token
                          : std::find(params.stop_ids.begin(), params.stop_ids.end(), token) != params.stop_ids.end();
    if (params.constraint) {
      if (stop) break;  // allowed only where the text is complete
      state = params.constraint->advance(state, token);
      check(state >= 0, "constrained decoding left its language (a bug)");
      if (params.constraint->finished(state)) break;
      continue;
    }
    if (params.stop_at_eos && stop) break;
    if (callbacks.should_stop && callbacks.should_stop()) break;
  }
  const double t_end = now_ms();
  // Every token but the last generated one has its K/V in the cache (an unshifted model's [MASK] row sits
  // where the last one goes, and is overwritten when it is run).
  if (params.prefix_cache) params.prefix_cache->keep(std::vector<int32_t>(tokens.begin(), tokens.end() - 1));
  result.cached_prompt_tokens = reused;
  result.prompt_ms = t_first - t0;
  result.decode_ms = t_end - t_first;
  result.tokens = generated;
  return result;
}

}  // namespace canvas
