// Causal scoring: one forward pass, log-softmax per row, the next token's log-probability.
#include "decode/score.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/appendf.h"
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

int64_t score_window_count(int64_t n, int64_t window, int64_t stride) {
  return n <= window ? 1 : 1 + (n - window + stride - 1) / stride;
}

SequenceScore score_causal_windows(const Model& model, const std::vector<int32_t>& tokens, int64_t first,
                                   int64_t window, int64_t stride, ThreadPool* pool, int64_t* windows,
                                   const std::function<void()>& on_window) {
  check(stride >= 1 && stride < window, "score_causal_windows: the stride must be between 1 and the window - 1");
  const int64_t n = int64_t(tokens.size());
  if (n <= window) {
    if (windows) *windows = 1;
    return score_causal(model, tokens, first, pool);
  }
  SequenceScore total;
  int64_t count = 0;
  int64_t scored_until = first;  // tokens before this are scored (or not to be scored)
  for (int64_t begin = 0; scored_until < n; begin += stride) {
    const int64_t end = std::min(begin + window, n);
    if (end - begin < window && begin > 0) begin = std::max<int64_t>(0, end - window);  // last window: full length
    const std::vector<int32_t> part(tokens.begin() + begin, tokens.begin() + end);
    const SequenceScore s = score_causal(model, part, std::max<int64_t>(scored_until - begin, 1), pool);
    total.nll_nats += s.nll_nats;
    total.scored += s.scored;
    scored_until = end;
    ++count;
    if (on_window) on_window();
  }
  if (windows) *windows = count;
  return total;
}

TextScoreJob plan_text_score(const Model& model, const TextTokenizer& tokenizer, const std::string& context,
                             const std::string& text, int64_t stride) {
  TextScoreJob job;
  job.tokens = tokenizer.encode(context, true);
  const std::vector<int32_t> scored = tokenizer.encode(text, false);
  check(!scored.empty(), "the text encodes to no tokens");
  job.first = int64_t(job.tokens.size());
  job.bytes = int64_t(text.size());
  if (job.first == 0) {
    job.first = 1;
    job.bytes -= int64_t(tokenizer.decode({scored[0]}).size());
  }
  job.tokens.insert(job.tokens.end(), scored.begin(), scored.end());
  const int64_t n = int64_t(job.tokens.size());
  job.window = model.config.context_length > 0 ? model.config.context_length : n;
  job.stride = stride > 0 ? stride : std::max<int64_t>(1, job.window / 2);
  // A window shares window - stride tokens with the one before, so that its first scored token has context.
  check(job.stride >= 1 && job.stride < job.window,
        "--stride must be between 1 and the context length - 1 (" + std::to_string(job.window - 1) + ")");
  check(job.first < job.window, "the context (" + std::to_string(job.first) +
                                    " tokens) leaves no room in the model's context of " +
                                    std::to_string(job.window) + " tokens");
  job.windows = score_window_count(n, job.window, job.stride);
  return job;
}

TextScore score_text(const Model& model, const TextScoreJob& job, ThreadPool* pool,
                     const std::function<void()>& on_window) {
  TextScore r;
  r.score = score_causal_windows(model, job.tokens, job.first, job.window, job.stride, pool, &r.windows, on_window);
  r.bytes = job.bytes;
  r.stride = int64_t(job.tokens.size()) > job.window ? job.stride : 0;
  return r;
}

std::string TextScore::json() const {
  std::string out;
  appendf(out,
          "{\"tokens\": %lld, \"bytes\": %lld, \"nll_nats\": %.6f, \"nats_per_token\": %.6f, "
          "\"bits_per_byte\": %.6f, \"windows\": %lld, \"stride\": %lld}",
          (long long)score.scored, (long long)bytes, score.nll_nats, score.scored ? score.nll_nats / double(score.scored) : 0.0,
          bytes > 0 ? score.nll_nats / std::log(2.0) / double(bytes) : 0.0, (long long)windows, (long long)stride);
  return out;
}

}  // namespace canvas
