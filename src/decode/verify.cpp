// Draft-and-verify decoding: decoder drafts, one causal pass verifies, AR's text exactly.
#include "decode/verify.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "core/error.h"
#include "core/rng.h"
#include "core/timer.h"
#include "decode/uniform_state.h"
#include "model/kv_cache.h"

namespace canvas {

bool supports_verify(const ModelConfig& c) { return c.uniform_state; }

namespace {

// The causal rows of `tokens` at positions pos0.. (each sees the cache before it and itself), logits of
// every row.
void causal_pass(const Model& model, KvCache& cache, const std::vector<int32_t>& tokens, int64_t pos0,
                 std::vector<float>& logits, ThreadPool* pool, const DecodeCallbacks& callbacks) {
  const int64_t n = int64_t(tokens.size());
  std::vector<int32_t> groups(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) groups[size_t(i)] = int32_t(pos0 + i);
  logits.resize(size_t(n) * size_t(model.config.vocab));
  ForwardRequest req;
  req.tokens = tokens.data();
  req.n = n;
  req.pos0 = pos0;
  req.groups = groups.data();
  req.logit_rows.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) req.logit_rows[size_t(i)] = int32_t(i);
  req.logits = logits.data();
  run_forward(callbacks, model, cache, req, pool);
}

// A draft pass over `canvas` after the first `cached` positions: the decoder (bidirectional over cache and
// canvas, never writing the cache) or, for a model without one, a pass with the whole canvas in one
// visibility group (its K/V land past the cached rows, where the verifying pass overwrites them).
void draft_pass(const Model& model, KvCache& cache, const std::vector<int32_t>& canvas, int64_t cached,
                const std::vector<float>* self_cond, std::vector<float>& logits, ThreadPool* pool,
                const DecodeCallbacks& callbacks) {
  const ModelConfig& c = model.config;
  std::vector<int32_t> groups;
  ForwardRequest req = canvas_forward_request(c, canvas, cached, groups);
  logits.resize(canvas.size() * size_t(c.vocab));
  req.logits = logits.data();
  if (self_cond && (c.has_decoder || c.self_conditioning)) req.self_cond = self_cond->data();
  run_forward(callbacks, model, cache, req, pool);
}

// softmax(row / T) in double.
std::vector<double> softmax(const float* row, int64_t vocab, double T) {
  std::vector<double> p(static_cast<size_t>(vocab));
  double top = -INFINITY, total = 0;
  for (int64_t j = 0; j < vocab; ++j) top = std::max(top, double(row[j]) / T);
  for (int64_t j = 0; j < vocab; ++j) total += p[size_t(j)] = std::exp(double(row[j]) / T - top);
  for (double& x : p) x /= total;
  return p;
}

// One draw from a distribution (inverse CDF with uniform u).
int32_t draw(const std::vector<double>& p, double u) {
  double total = 0;
  for (double x : p) total += x;
  double cum = 0;
  int32_t last = 0;
  for (size_t j = 0; j < p.size(); ++j) {
    if (p[j] <= 0) continue;
    last = int32_t(j);
    cum += p[j] / total;
    if (cum > u) return int32_t(j);
  }
  return last;
}

}  // namespace

VerifyResult generate_verify(const Model& model, const std::vector<int32_t>& prompt, const VerifyParams& params,
                             ThreadPool* pool, const DecodeCallbacks& callbacks) {
  const ModelConfig& c = model.config;
  check(supports_verify(c), "--mode verify needs a model with a diffusion decoder and a causal path on the same "
                            "weights (DiffusionGemma, or a uniform-state model); '" + c.arch + "' has not");
  const int64_t P = int64_t(prompt.size()), N = params.max_new_tokens, K = params.draft_length;
  check(P >= 1, "draft-and-verify decoding needs a non-empty prompt");
  check(N > 0, "the number of tokens to generate must be positive");
  check(K >= 1 && K <= 1024, "--draft-length must be between 1 and 1024");
  check(params.draft_steps >= 1 && params.draft_steps <= 64, "--draft-steps must be between 1 and 64");
  check(std::isfinite(params.draft_temperature) && params.draft_temperature > 0, "the draft temperature must be > 0");
  const int64_t V = c.vocab;
  const bool sampled = params.sampling.temperature > 0.f;
  std::unique_ptr<KvCache> own;
  int64_t reused = 0;
  KvCache& cache = params.prefix_cache ? params.prefix_cache->acquire(model, prompt, P + N + K + 2, &reused)
                                       : *(own = std::make_unique<KvCache>(c, P + N + K + 2));
  Rng rng(params.sampling.seed);                       // the verifier's draws (as generate_ar's)
  Rng draft_rng(params.sampling.seed ^ 0x9e3779b97f4a7c15ull);  // the drafter's noise and proposals
  VerifyResult result;
  result.prompt_tokens = P;
  std::vector<int32_t> tokens(prompt), generated, recent;
  auto is_stop = [&](int32_t t) {
    return params.stop_ids.empty() ? t == c.eos_token
                                   : std::find(params.stop_ids.begin(), params.stop_ids.end(), t) != params.stop_ids.end();
  };
  auto recent_of = [&]() -> const std::vector<int32_t>* {
    if (params.sampling.repeat_penalty == 1.f) return nullptr;
    const int64_t from = std::max<int64_t>(0, int64_t(tokens.size()) - params.sampling.repeat_last_n);
    recent.assign(tokens.begin() + from, tokens.end());
    return &recent;
  };
  bool done = false;
  // Commits t, drawn from the verifier's `row` (or the draft it checked).
  auto commit = [&](int32_t t, const float* row) {
    tokens.push_back(t);
    generated.push_back(t);
    if (callbacks.on_logprob)
      callbacks.on_logprob(int64_t(generated.size()) - 1, token_logprob(row, V, t, callbacks.logprobs_top));
    done = (params.stop_at_eos && is_stop(t)) || int64_t(generated.size()) >= N;
  };

  const double t0 = now_ms();
  std::vector<float> logits, draft_logits, self_cond;
  causal_pass(model, cache, std::vector<int32_t>(prompt.begin() + reused, prompt.end()), reused, logits, pool,
              callbacks);
  ++result.passes;
  const double t_first = now_ms();
  const float* first_row = &logits[size_t(P - 1 - reused) * size_t(V)];
  commit(choose_token(first_row, V, params.sampling, rng, recent_of(), P).token, first_row);
  int64_t cached = P;  // positions whose K/V are final; the last generated token is not among them yet
  std::vector<int32_t> canvas, verify_tokens;
  std::vector<std::vector<double>> proposal;
  while (!done) {
    const int64_t k = std::min<int64_t>(K, N - int64_t(generated.size()));
    // Draft: [last token ; k noise tokens], the last token held fixed, refined by draft_steps passes.
    canvas.assign(size_t(k + 1), 0);
    canvas[0] = generated.back();
    for (int64_t i = 1; i <= k; ++i) canvas[size_t(i)] = int32_t(draft_rng.below(uint64_t(V)));
    for (int64_t s = 0; s < params.draft_steps; ++s) {
      draft_pass(model, cache, canvas, cached, s == 0 ? nullptr : &self_cond, draft_logits, pool, callbacks);
      ++result.passes;
      const bool last = s + 1 == params.draft_steps;
      if (last && sampled) proposal.assign(size_t(k), {});
      for (int64_t i = 1; i <= k; ++i) {
        const float* row = &draft_logits[size_t(i) * size_t(V)];
        if (last && sampled) {
          proposal[size_t(i - 1)] = softmax(row, V, params.draft_temperature);
          canvas[size_t(i)] = draw(proposal[size_t(i - 1)], draft_rng.uniform());
        } else {
          canvas[size_t(i)] = int32_t(std::max_element(row, row + V) - row);
        }
      }
      if (!last) {
        self_cond.resize(draft_logits.size());
        for (size_t j = 0; j < draft_logits.size(); ++j) self_cond[j] = draft_logits[j] / params.draft_temperature;
      }
    }
    result.drafted += k;
    // Verify: one causal pass over [last token ; draft]; row i is AR's distribution after canvas[0..i].
    verify_tokens = canvas;
    causal_pass(model, cache, verify_tokens, cached, logits, pool, callbacks);
    ++result.passes;
    ++result.encoder_passes;
    ++result.cycles;
    const int64_t before = int64_t(generated.size());
    int64_t kept = 0;
    for (int64_t i = 0; i <= k && !done; ++i) {
      const float* row = &logits[size_t(i) * size_t(V)];
      if (i == k) {  // every draft kept: AR's next token comes free
        commit(choose_token(row, V, params.sampling, rng, recent_of(), P + int64_t(generated.size())).token, row);
        break;
      }
      const int32_t d = canvas[size_t(i + 1)];
      if (!sampled) {
        const int32_t t = choose_token(row, V, params.sampling, rng, recent_of(), P + int64_t(generated.size())).token;
        commit(t, row);
        if (t != d) break;
        ++kept;
        continue;
      }
      // Speculative rejection sampling: keep d with probability min(1, p(d) / q(d)); otherwise draw from
      // the residual max(0, p - q), renormalised. The kept or drawn token is distributed as p exactly.
      const float* shaped = penalized_row(row, V, params.sampling, recent_of());
      const std::vector<double> p = sampling_distribution(shaped, V, params.sampling);
      const std::vector<double>& q = proposal[size_t(i)];
      if (rng.uniform() * q[size_t(d)] < p[size_t(d)]) {
        commit(d, row);
        ++kept;
        continue;
      }
      std::vector<double> residual(static_cast<size_t>(V));
      for (int64_t j = 0; j < V; ++j) residual[size_t(j)] = std::max(0.0, p[size_t(j)] - q[size_t(j)]);
      commit(draw(residual, rng.uniform()), row);
      break;
    }
    result.accepted += kept;
    cached += 1 + kept;  // the last token and the kept drafts; the token committed last is next cycle's first
    if (callbacks.on_step) {
      StepEvent event;
      event.step = result.cycles - 1;
      event.passes = result.passes;
      event.canvas = &generated;
      for (int64_t i = before; i < int64_t(generated.size()); ++i) event.committed.push_back(i);
      event.confidence.assign(event.committed.size(), 1.f);
      callbacks.on_step(event);
    }
    if (!done && callbacks.should_stop && callbacks.should_stop()) break;
  }
  result.prompt_ms = t_first - t0;
  result.decode_ms = now_ms() - t_first;
  result.tokens = generated;
  result.cached_prompt_tokens = reused;
  if (params.prefix_cache) params.prefix_cache->keep(std::vector<int32_t>(tokens.begin(), tokens.begin() + cached));
  return result;
}

}  // namespace canvas
