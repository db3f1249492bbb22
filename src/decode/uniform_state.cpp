// Entropy-bound decoding bound to the model forward and its KV cache.
#include "decode/uniform_state.h"

#include "core/error.h"
#include "core/timer.h"

namespace canvas {

EntropyBoundResult generate_uniform_state(const Model& model, const std::vector<int32_t>& prompt,
                                          const EntropyBoundParams& params, ThreadPool* pool,
                                          const DecodeCallbacks& callbacks) {
  const ModelConfig& c = model.config;
  const int64_t P = int64_t(prompt.size());
  const int64_t C = params.canvas_length;
  check(P >= 1, "uniform-state decoding needs a non-empty prompt");
  check(C > 0 && params.max_new_tokens > 0, "canvas length and token count must be positive");
  const int64_t n_canvases = (params.max_new_tokens + C - 1) / C;
  const int64_t capacity = P + n_canvases * C;
  check(c.context_length <= 0 || capacity <= c.context_length,
        "prompt (" + std::to_string(P) + " tokens) + " + std::to_string(n_canvases) + " canvas(es) of " +
            std::to_string(C) + " exceed the model's context length " + std::to_string(c.context_length));
  KvCache cache(c, capacity);
  int64_t cached = 0;  // committed positions in the cache

  auto encode = [&](const std::vector<int32_t>& tokens) {
    std::vector<int32_t> groups(tokens.size());
    for (size_t i = 0; i < groups.size(); ++i) groups[i] = int32_t(cached + int64_t(i));  // causal
    ForwardRequest req;
    req.tokens = tokens.data();
    req.n = int64_t(tokens.size());
    req.pos0 = cached;
    req.groups = groups.data();
    forward(model, cache, req, pool);
    cached += int64_t(tokens.size());
  };

  const double t0 = now_ms();
  encode(prompt);
  const double t_prompt = now_ms();

  DiffusionModelHooks hooks;
  hooks.vocab = c.vocab;
  std::vector<int32_t> canvas_groups;
  hooks.decode = [&](const std::vector<int32_t>& canvas, const std::vector<float>* /*self_cond*/,
                     std::vector<float>& logits) {
    const int64_t n = int64_t(canvas.size());
    check(cached + n <= capacity, "uniform-state decoding: the canvas does not fit the cache");
    canvas_groups.assign(size_t(n), int32_t(cached));  // sees every committed row and the whole canvas
    ForwardRequest req;
    req.tokens = canvas.data();
    req.n = n;
    req.pos0 = cached;
    req.groups = canvas_groups.data();
    req.logit_rows.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) req.logit_rows[size_t(i)] = int32_t(i);
    req.logits = logits.data();
    forward(model, cache, req, pool);
  };
  hooks.encode = encode;

  EntropyBoundResult result = generate_entropy_bound(hooks, params, callbacks, pool);
  result.prompt_tokens = P;
  result.prompt_ms = t_prompt - t0;
  result.decode_ms = now_ms() - t_prompt;
  return result;
}

}  // namespace canvas
