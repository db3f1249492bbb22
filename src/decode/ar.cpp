// Autoregressive generation loop with a KV cache.
#include "decode/ar.h"

#include <algorithm>
#include <memory>

#include "core/error.h"
#include "core/timer.h"

namespace canvas {

ArDecoder::ArDecoder(const Model& model, const std::vector<int32_t>& prompt, const ArParams& params,
                     const DecodeCallbacks& callbacks)
    : model_(model), params_(params), callbacks_(callbacks), rng_(params.sampling.seed), tokens_(prompt) {
  const ModelConfig& c = model.config;
  const int64_t P = int64_t(prompt.size());
  const int64_t N = params.max_new_tokens;
  check(N > 0, "the number of tokens to generate must be positive");
  check(P >= 1, "autoregressive decoding needs a non-empty prompt");
  // Unshifted models (LLaDA) predict position p from a [MASK] placed at p; a uniform-state model's causal
  // (encoder) rows predict the next token, as an AR model's do.
  feed_mask_ = !c.shift_logits && !c.uniform_state;
  check(!feed_mask_ || c.mask_token >= 0, "model predicts unshifted logits but has no mask token");
  if (params.constraint) {
    check(params.constraint->vocab_size() <= c.vocab, "the constraint's vocabulary is larger than the model's");
    check(params.constraint->fits(N), "no text of the constraint's language fits in " + std::to_string(N) +
                                          " tokens: raise -n");
    state_ = params.constraint->start();
  }
  cache_ = params.prefix_cache ? &params.prefix_cache->acquire(model, prompt, P + N + 1, &reused_)
                               : (own_ = std::make_unique<KvCache>(c, P + N + 1)).get();
  result_.prompt_tokens = P;
  logits_.resize(size_t(c.vocab));
  generated_.reserve(size_t(N));
  tokens_.reserve(size_t(P + N));
  pos0_ = reused_;  // the cached prompt tokens are not run again
  pass_.logits = logits_.data();
  t0_ = now_ms();
}

bool ArDecoder::next() {
  if (ended_ || int64_t(generated_.size()) >= params_.max_new_tokens) return false;
  // New rows: the prompt on the first pass, then the last generated token; plus a [MASK] if needed.
  step_tokens_.assign(tokens_.begin() + pos0_, tokens_.end());
  if (feed_mask_) step_tokens_.push_back(model_.config.mask_token);
  groups_.resize(step_tokens_.size());
  for (size_t i = 0; i < groups_.size(); ++i) groups_[i] = int32_t(pos0_ + int64_t(i));  // causal
  pass_.tokens = step_tokens_.data();
  pass_.n = int64_t(step_tokens_.size());
  pass_.pos0 = pos0_;
  pass_.groups = groups_.data();
  pass_.logit_rows.assign(1, int32_t(step_tokens_.size() - 1));
  return true;
}

void ArDecoder::advance() {
  const ModelConfig& c = model_.config;
  const int64_t N = params_.max_new_tokens;
  ++result_.passes;
  if (generated_.empty()) t_first_ = now_ms();
  if (params_.constraint && callbacks_.on_logprob) raw_ = logits_;
  if (params_.constraint) {
    params_.constraint->allowed(state_, N - int64_t(generated_.size()), allowed_);
    const bool may_end = params_.constraint->complete(state_);
    for (int64_t v = 0; v < c.vocab; ++v) {
      const bool stop_token = params_.stop_ids.empty()
                                  ? v == c.eos_token
                                  : std::find(params_.stop_ids.begin(), params_.stop_ids.end(), int32_t(v)) !=
                                        params_.stop_ids.end();
      const bool ok = stop_token ? may_end : (v < int64_t(allowed_.size()) && allowed_[size_t(v)]);
      if (!ok) logits_[size_t(v)] = -1e30f;
    }
  }
  if (params_.sampling.repeat_penalty != 1.f) {
    const int64_t from = std::max<int64_t>(0, int64_t(tokens_.size()) - params_.sampling.repeat_last_n);
    recent_.assign(tokens_.begin() + from, tokens_.end());
  }
  const TokenChoice choice =
      choose_token(logits_.data(), c.vocab, params_.sampling, rng_, {&recent_, &generated_}, int64_t(tokens_.size()));
  const int32_t token = choice.token;
  pos0_ = int64_t(tokens_.size());
  tokens_.push_back(token);
  generated_.push_back(token);
  if (callbacks_.on_logprob)
    callbacks_.on_logprob(int64_t(generated_.size()) - 1,
                          token_logprob(params_.constraint ? raw_.data() : logits_.data(), c.vocab, token,
                                        callbacks_.logprobs_top));
  if (callbacks_.on_step) {
    StepEvent event;
    event.step = int64_t(generated_.size()) - 1;
    event.passes = result_.passes;
    event.canvas = &generated_;
    event.committed = {int64_t(generated_.size()) - 1};
    event.confidence = {choice.p_token};
    callbacks_.on_step(event);
  }
  const bool stop = params_.stop_ids.empty()
                        ? token == c.eos_token
                        : std::find(params_.stop_ids.begin(), params_.stop_ids.end(), token) != params_.stop_ids.end();
  if (params_.constraint) {
    if (stop) {  // allowed only where the text is complete
      ended_ = true;
      return;
    }
    state_ = params_.constraint->advance(state_, token);
    check(state_ >= 0, "constrained decoding left its language (a bug)");
    if (params_.constraint->finished(state_)) ended_ = true;
    return;
  }
  if (params_.stop_at_eos && stop) ended_ = true;
  else if (callbacks_.should_stop && callbacks_.should_stop()) ended_ = true;
}

GenerationResult ArDecoder::finish() {
  const double t_end = now_ms();
  ended_ = true;
  // Every token but the last generated one has its K/V in the cache (an unshifted model's [MASK] row sits
  // where the last one goes, and is overwritten when it is run).
  if (params_.prefix_cache) params_.prefix_cache->keep(std::vector<int32_t>(tokens_.begin(), tokens_.end() - 1));
  result_.cached_prompt_tokens = reused_;
  if (result_.passes == 0) t_first_ = t_end;  // stopped before its first pass
  result_.prompt_ms = t_first_ - t0_;
  result_.decode_ms = t_end - t_first_;
  result_.tokens = generated_;
  return std::move(result_);
}

GenerationResult generate_ar(const Model& model, const std::vector<int32_t>& prompt, const ArParams& params,
                             ThreadPool* pool, const DecodeCallbacks& callbacks) {
  ArDecoder decoder(model, prompt, params, callbacks);
  while (decoder.next()) {
    run_forward(callbacks, model, decoder.cache(), decoder.pass(), pool);
    decoder.advance();
  }
  return decoder.finish();
}

}  // namespace canvas
