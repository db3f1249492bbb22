// Causal scoring: one forward pass, log-softmax per row, the next token's log-probability.
#include "decode/score.h"

#include "core/error.h"
#include "ops/ops.h"

namespace canvas {

SequenceScore score_causal(const Model& model, const std::vector<int32_t>& tokens, int64_t first, ThreadPool* pool) {
  const ModelConfig& c = model.config;
  const int64_t n = int64_t(tokens.size());
  check(c.shift_logits || c.uniform_state,
        "this model predicts masked positions, not the next token: it cannot score text left to right "
        "(use an autoregressive or uniform-state model)");
  check(first >= 1 && first <= n, "score_causal: the scored range must start after at least one token");
  check(c.context_length <= 0 || n <= c.context_length,
        "text of " + std::to_string(n) + " tokens exceeds the model's context length " + std::to_string(c.context_length));
  SequenceScore s;
  if (first == n) return s;
  KvCache cache(c, n);
  std::vector<int32_t> groups(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) groups[size_t(i)] = int32_t(i);  // causal
  ForwardRequest req;
  req.tokens = tokens.data();
  req.n = n;
  req.groups = groups.data();
  for (int64_t i = first - 1; i < n - 1; ++i) req.logit_rows.push_back(int32_t(i));  // row i predicts i + 1
  std::vector<float> logits(req.logit_rows.size() * size_t(c.vocab)), logp(size_t(c.vocab));
  req.logits = logits.data();
  forward(model, cache, req, pool);
  for (size_t r = 0; r < req.logit_rows.size(); ++r) {
    log_softmax(logits.data() + r * size_t(c.vocab), c.vocab, logp.data());
    s.nll_nats -= double(logp[size_t(tokens[size_t(first) + r])]);
    ++s.scored;
  }
  return s;
}

}  // namespace canvas
