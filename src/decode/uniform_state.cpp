// Entropy-bound decoding bound to the model forward and its KV cache.
#include "decode/uniform_state.h"

#include "core/error.h"
#include "core/timer.h"

namespace canvas {

UniformStateSession::UniformStateSession(const Model& model, int64_t capacity, ThreadPool* pool)
    : model_(model), own_cache_(std::make_unique<KvCache>(model.config, capacity)), cache_(*own_cache_), pool_(pool) {
  check(model.config.uniform_state, "uniform-state decoding: model '" + model.config.arch +
                                        "' is not a uniform-state diffusion model");
}

UniformStateSession::UniformStateSession(const Model& model, KvCache& cache, std::vector<int32_t> tokens,
                                         ThreadPool* pool)
    : model_(model), cache_(cache), pool_(pool), cached_(int64_t(tokens.size())), cached_tokens_(std::move(tokens)) {
  check(model.config.uniform_state, "uniform-state decoding: model '" + model.config.arch +
                                        "' is not a uniform-state diffusion model");
  check(cached_ <= cache.capacity(), "uniform-state decoding: more cached tokens than the cache holds");
}

void UniformStateSession::encode(const std::vector<int32_t>& tokens) {
  const int64_t n = int64_t(tokens.size());
  if (n == 0) return;
  check(cached_ + n <= cache_.capacity(), "uniform-state decoding: " + std::to_string(cached_ + n) +
                                              " positions exceed the KV cache capacity " +
                                              std::to_string(cache_.capacity()));
  groups_.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) groups_[size_t(i)] = int32_t(cached_ + i);  // causal
  ForwardRequest req;
  req.tokens = tokens.data();
  req.n = n;
  req.pos0 = cached_;
  req.groups = groups_.data();
  run(req);
  cached_ += n;
  cached_tokens_.insert(cached_tokens_.end(), tokens.begin(), tokens.end());
}

ForwardRequest canvas_forward_request(const ModelConfig& c, const std::vector<int32_t>& canvas, int64_t cached,
                                      std::vector<int32_t>& groups) {
  const int64_t n = int64_t(canvas.size());
  check(n > 0, "uniform-state decoding: empty canvas");
  ForwardRequest req;
  req.tokens = canvas.data();
  req.n = n;
  req.pos0 = cached;
  req.logit_rows.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) req.logit_rows[size_t(i)] = int32_t(i);
  if (c.has_decoder) {
    req.decoder = true;
  } else {
    groups.assign(size_t(n), int32_t(cached));  // sees every committed row and the whole canvas
    req.groups = groups.data();
  }
  return req;
}

// The request both decode kinds share: the canvas after the committed tokens, every row's head wanted.
ForwardRequest UniformStateSession::canvas_request(const std::vector<int32_t>& canvas) {
  check(cached_ + int64_t(canvas.size()) <= cache_.capacity(), "uniform-state decoding: the canvas does not fit the KV cache");
  return canvas_forward_request(model_.config, canvas, cached_, groups_);
}

bool UniformStateSession::self_conditioned() const {
  return model_.config.has_decoder || model_.config.self_conditioning;
}

void UniformStateSession::run(const ForwardRequest& req) {
  if (forward_) {
    forward_(model_, cache_, std::span<const ForwardRequest>(&req, 1), pool_);
  } else {
    forward(model_, cache_, req, pool_);
  }
}

void UniformStateSession::run_for_logits(ForwardRequest& req, const std::vector<float>* self_cond,
                                         std::vector<float>& logits) {
  logits.resize(size_t(req.n) * size_t(model_.config.vocab));
  req.logits = logits.data();
  if (self_cond && self_conditioned()) {
    check(self_cond->size() == logits.size(), "uniform-state decoding: self-conditioning logits have " +
                                                  std::to_string(self_cond->size()) + " values, expected " +
                                                  std::to_string(logits.size()));
    req.self_cond = self_cond->data();
  }
  run(req);
}

void UniformStateSession::decode(const std::vector<int32_t>& canvas, const std::vector<float>* self_cond,
                                 std::vector<float>& logits) {
  ForwardRequest req = canvas_request(canvas);
  run_for_logits(req, self_cond, logits);
}

void UniformStateSession::decode_rows(const std::vector<int32_t>& canvas, const std::vector<int32_t>& rows,
                                      const std::vector<float>* self_cond, std::vector<float>& logits) {
  const ModelConfig& c = model_.config;
  const int64_t L = int64_t(canvas.size());
  ForwardRequest req = canvas_request(canvas);
  if (c.has_decoder) {
    if (!canvas_kv_ || canvas_kv_->capacity() != L) canvas_kv_ = std::make_unique<KvCache>(c, L);
    req.canvas_kv = canvas_kv_.get();
  }
  if (!rows.empty()) {
    const int64_t n = int64_t(rows.size());
    row_tokens_.resize(size_t(n));
    for (int64_t k = 0; k < n; ++k) {
      check(rows[size_t(k)] >= 0 && rows[size_t(k)] < L, "uniform-state decoding: canvas row out of range");
      row_tokens_[size_t(k)] = canvas[size_t(rows[size_t(k)])];
    }
    req.tokens = row_tokens_.data();
    req.n = n;
    req.logit_rows.resize(size_t(n));
    if (c.has_decoder) {
      req.canvas_rows = rows.data();
    } else {  // the canvas's K/V live in the cache rows past the committed tokens
      row_positions_.resize(size_t(n));
      for (int64_t k = 0; k < n; ++k) row_positions_[size_t(k)] = int32_t(cached_ + rows[size_t(k)]);
      req.positions = row_positions_.data();
      req.key_end = cached_ + L;
      groups_.assign(size_t(n), int32_t(cached_));
      req.groups = groups_.data();
    }
  }
  run_for_logits(req, self_cond, logits);
}

void UniformStateSession::decode_stream(const std::vector<int32_t>& canvas, const std::vector<float>* self_cond_soft,
                                        const HeadStreamOptions& head, std::vector<HeadRowStats>& stats,
                                        std::vector<float>& soft_embedding) {
  ForwardRequest req = canvas_request(canvas);
  const size_t soft_size = canvas.size() * size_t(model_.config.hidden);
  stats.resize(canvas.size());
  req.head_stats = stats.data();
  req.head = head;
  if (self_conditioned()) {
    soft_embedding.resize(soft_size);
    req.soft_embedding_out = soft_embedding.data();
    if (self_cond_soft) {
      check(self_cond_soft->size() == soft_size, "uniform-state decoding: the self-conditioning soft embedding has " +
                                                     std::to_string(self_cond_soft->size()) + " values, expected " +
                                                     std::to_string(soft_size));
      req.self_cond_soft = self_cond_soft->data();
    }
  } else {
    soft_embedding.clear();  // nothing would read it
  }
  run(req);
}

DiffusionModelHooks UniformStateSession::hooks() {
  DiffusionModelHooks h;
  h.vocab = model_.config.vocab;
  h.decode = [this](const std::vector<int32_t>& canvas, const std::vector<float>* self_cond,
                    std::vector<float>& logits) { decode(canvas, self_cond, logits); };
  h.decode_stream = [this](const std::vector<int32_t>& canvas, const std::vector<float>* self_cond_soft,
                           const HeadStreamOptions& head, std::vector<HeadRowStats>& stats,
                           std::vector<float>& soft_embedding) {
    decode_stream(canvas, self_cond_soft, head, stats, soft_embedding);
  };
  h.decode_rows = [this](const std::vector<int32_t>& canvas, const std::vector<int32_t>& rows,
                         const std::vector<float>* self_cond,
                         std::vector<float>& logits) { decode_rows(canvas, rows, self_cond, logits); };
  h.encode = [this](const std::vector<int32_t>& tokens) { encode(tokens); };
  return h;
}

int64_t uniform_state_capacity(int64_t prompt_tokens, const EntropyBoundParams& params) {
  const int64_t C = params.canvas_length;
  const int64_t n_canvases = (params.max_new_tokens + C - 1) / C;
  return prompt_tokens + n_canvases * C;
}

EntropyBoundResult generate_uniform_state(const Model& model, const std::vector<int32_t>& prompt,
                                          const EntropyBoundParams& params, ThreadPool* pool,
                                          const DecodeCallbacks& callbacks, PrefixCache* prefix_cache) {
  const ModelConfig& c = model.config;
  const int64_t P = int64_t(prompt.size());
  const int64_t C = params.canvas_length;
  check(P >= 1, "uniform-state decoding needs a non-empty prompt");
  check(C > 0 && params.max_new_tokens > 0, "canvas length and token count must be positive");
  const int64_t capacity = uniform_state_capacity(P, params);
  check(c.context_length <= 0 || capacity <= c.context_length,
        "prompt (" + std::to_string(P) + " tokens) + " + std::to_string((capacity - P) / C) + " canvas(es) of " +
            std::to_string(C) + " exceed the model's context length " + std::to_string(c.context_length));
  int64_t reused = 0;
  std::unique_ptr<UniformStateSession> made;
  if (prefix_cache) {
    KvCache& cache = prefix_cache->acquire(model, prompt, capacity, &reused);
    made = std::make_unique<UniformStateSession>(
        model, cache, std::vector<int32_t>(prompt.begin(), prompt.begin() + reused), pool);
  } else {
    made = std::make_unique<UniformStateSession>(model, capacity, pool);
  }
  UniformStateSession& session = *made;
  session.set_forward(callbacks.forward);

  const double t0 = now_ms();
  session.encode(std::vector<int32_t>(prompt.begin() + reused, prompt.end()));
  const double t_prompt = now_ms();
  EntropyBoundParams run = params;
  if (run.left_context < 0) run.left_context = prompt.back();
  EntropyBoundResult result = generate_entropy_bound(session.hooks(), run, callbacks, pool);
  result.prompt_tokens = P;
  result.cached_prompt_tokens = reused;
  if (prefix_cache) prefix_cache->keep(session.cached_tokens());
  result.prompt_ms = t_prompt - t0;
  result.decode_ms = now_ms() - t_prompt;
  return result;
}

}  // namespace canvas
