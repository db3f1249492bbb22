// One forward pass's logits over given ids (pass_logits.h).
#include "model/pass_logits.h"

#include "core/error.h"
#include "model/kv_cache.h"

namespace canvas {

void check_pass_logits(const ModelConfig& c, int64_t n, const std::vector<int32_t>* canvas, bool self_cond) {
  const int64_t canvas_n = canvas ? int64_t(canvas->size()) : 0;
  check(n + canvas_n <= c.context_length,
        std::to_string(n) + " ids" + (canvas ? " + " + std::to_string(canvas_n) + " canvas ids" : std::string()) +
            " exceed the model's context length " + std::to_string(c.context_length));
  check(!canvas || c.has_decoder,
        "--canvas-ids needs a model with a decoder (DiffusionGemma); '" + c.arch + "' has none");
  check(canvas || !self_cond, "--self-cond needs --canvas-ids");
}

std::vector<float> pass_logits(const Model& model, const std::vector<int32_t>& ids, bool causal,
                               const std::vector<int32_t>* canvas, const float* self_cond, ThreadPool* pool) {
  const ModelConfig& c = model.config;
  const int64_t n = int64_t(ids.size());
  check_pass_logits(c, n, canvas, self_cond != nullptr);
  KvCache cache(c, n);
  std::vector<int32_t> groups(size_t(n), 0);
  if (causal)
    for (int64_t i = 0; i < n; ++i) groups[size_t(i)] = int32_t(i);
  ForwardRequest req;
  req.tokens = ids.data();
  req.n = n;
  req.groups = groups.data();
  std::vector<float> logits;
  if (!canvas) {
    for (int64_t i = 0; i < n; ++i) req.logit_rows.push_back(int32_t(i));
    logits.resize(size_t(n * c.vocab));
    req.logits = logits.data();
  }
  forward(model, cache, req, pool);
  if (canvas) {
    const int64_t rows = int64_t(canvas->size());
    ForwardRequest dec;
    dec.tokens = canvas->data();
    dec.n = rows;
    dec.pos0 = n;
    dec.decoder = true;
    dec.self_cond = self_cond;
    for (int64_t i = 0; i < rows; ++i) dec.logit_rows.push_back(int32_t(i));
    logits.resize(size_t(rows * c.vocab));
    dec.logits = logits.data();
    forward(model, cache, dec, pool);
  }
  return logits;
}

}  // namespace canvas
