// Gumbel-max sampling with top-k / top-p / min-p filtering, after logit biases and penalties.
#include "decode/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"

namespace canvas {

const float* penalized_row(const float* raw_logits, int64_t vocab, const SamplingParams& params,
                           const TokenHistory& history) {
  const bool repeat = params.repeat_penalty != 1.f && history.recent && !history.recent->empty();
  const bool counted = params.counts_penalized() && history.generated && !history.generated->empty();
  if (!repeat && !counted && params.logit_bias.empty()) return raw_logits;
  thread_local std::vector<float> penalized;
  penalized.assign(raw_logits, raw_logits + vocab);
  for (const auto& [id, bias] : params.logit_bias)
    if (id >= 0 && id < vocab) penalized[size_t(id)] += bias;
  // The ids of `tokens` in order, each once, with how many times it occurs.
  auto runs = [](const std::vector<int32_t>& tokens, auto&& each) {
    std::vector<int32_t> ids(tokens);
    std::sort(ids.begin(), ids.end());
    for (size_t i = 0, j = 0; i < ids.size(); i = j) {
      while (j < ids.size() && ids[j] == ids[i]) ++j;
      each(ids[i], int64_t(j - i));
    }
  };
  auto in_vocab = [&](int32_t id) { return id >= 0 && id < vocab; };
  if (repeat)
    runs(*history.recent, [&](int32_t id, int64_t) {
      if (in_vocab(id)) penalized[size_t(id)] = penalize_logit(penalized[size_t(id)], params.repeat_penalty);
    });
  if (counted)
    runs(*history.generated, [&](int32_t id, int64_t count) {
      if (in_vocab(id))
        penalized[size_t(id)] -= params.frequency_penalty * float(count) + params.presence_penalty;
    });
  return penalized.data();
}

std::vector<int32_t> sampling_candidates(const float* logits, int64_t vocab, const SamplingParams& params) {
  const double T = params.temperature;
  const int64_t k = params.top_k > 0 ? std::min<int64_t>(params.top_k, vocab) : vocab;
  std::vector<int32_t> candidates = top_k(logits, vocab, k);
  if (params.top_p < 1.f) {
    // Keep the smallest prefix (by descending probability at temperature T) whose mass reaches top_p.
    const double top = logits[candidates[0]];
    double total = 0;
    for (int32_t id : candidates) total += std::exp((double(logits[id]) - top) / T);
    double mass = 0;
    size_t keep = 0;
    while (keep < candidates.size()) {
      mass += std::exp((double(logits[candidates[keep]]) - top) / T) / total;
      ++keep;
      if (mass >= params.top_p) break;
    }
    candidates.resize(keep);
  }
  if (params.min_p > 0.f) {
    // p(id) >= min_p * p(top)  <=>  logit(id) >= logit(top) + log(min_p), on the untempered logits.
    const double floor = double(logits[candidates[0]]) + std::log(double(params.min_p));
    size_t keep = 1;
    while (keep < candidates.size() && double(logits[candidates[keep]]) >= floor) ++keep;
    candidates.resize(keep);
  }
  return candidates;
}

std::vector<double> sampling_distribution(const float* logits, int64_t vocab, const SamplingParams& params) {
  check(params.temperature > 0.f, "sampling_distribution needs a temperature above 0");
  const std::vector<int32_t> candidates = sampling_candidates(logits, vocab, params);
  std::vector<double> p(size_t(vocab), 0.0);
  const double top = logits[candidates[0]], T = params.temperature;
  double total = 0;
  for (int32_t id : candidates) total += p[size_t(id)] = std::exp((double(logits[id]) - top) / T);
  for (int32_t id : candidates) p[size_t(id)] /= total;
  return p;
}

TokenChoice choose_token(const float* raw_logits, int64_t vocab, const SamplingParams& params, Rng& rng,
                         const TokenHistory& history, int64_t position) {
  // NaN or +inf anywhere means broken weights or hyper-parameters (a NaN embedding, rms_eps = nan): fail
  // rather than print tokens picked from garbage. The SIMD reductions need not propagate NaN, so look at
  // the row itself: one pass, cheap next to the head's matmul that produced it. -inf is a legitimate zero
  // probability.
  bool poisoned = false;
  for (int64_t i = 0; i < vocab; ++i) poisoned |= !(raw_logits[i] < std::numeric_limits<float>::infinity());
  if (poisoned)  // (the message is built only when needed)
    check(false, "sampling: the model's logits" +
                     (position >= 0 ? " at position " + std::to_string(position) : std::string()) +
                     " are not finite (NaN or +inf): its weights or hyper-parameters are broken");
  const float* logits = penalized_row(raw_logits, vocab, params, history);
  TokenChoice choice;
  choice.stats = row_stats(logits, vocab);
  check(std::isfinite(choice.stats.logsumexp), "sampling: the model's logits are all -inf or overflow");
  choice.token = choice.stats.argmax;
  if (params.temperature > 0.f) {
    const double T = params.temperature;
    const bool filtered = (params.top_k > 0 && params.top_k < vocab) || params.top_p < 1.f || params.min_p > 0.f;
    double best = -std::numeric_limits<double>::infinity();
    if (!filtered) {
      for (int64_t i = 0; i < vocab; ++i) {
        const double v = double(logits[i]) + T * rng.gumbel();
        if (v > best) {
          best = v;
          choice.token = int32_t(i);
        }
      }
    } else {
      const std::vector<int32_t> candidates = sampling_candidates(logits, vocab, params);
      for (int32_t id : candidates) {
        const double v = double(logits[id]) + T * rng.gumbel();
        if (v > best) {
          best = v;
          choice.token = id;
        }
      }
    }
  }
  choice.p_token = float(std::exp(double(logits[choice.token]) - double(choice.stats.logsumexp)));
  return choice;
}

TokenLogprob token_logprob(const float* logits, int64_t vocab, int32_t token, int64_t top) {
  double max = -INFINITY;
  for (int64_t j = 0; j < vocab; ++j) max = std::max(max, double(logits[j]));
  double total = 0;
  for (int64_t j = 0; j < vocab; ++j) total += std::exp(double(logits[j]) - max);
  const double log_total = max + std::log(total);
  TokenLogprob out;
  out.token = token;
  out.logprob = float(double(logits[token]) - log_total);
  for (int32_t id : top_k(logits, vocab, top))
    out.top.emplace_back(id, float(double(logits[id]) - log_total));
  return out;
}

}  // namespace canvas
