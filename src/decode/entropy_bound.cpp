// Uniform-state entropy-bound generation loop (DiffusionGemma). Nothing here prints.
#include "decode/entropy_bound.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "core/error.h"
#include "core/rng.h"
#include "core/timer.h"
#include "decode/sampling.h"
#include "ops/ops.h"

namespace canvas {

double entropy_bound_temperature(int64_t s, int64_t steps, float t_min, float t_max) {
  return double(t_min) + (double(t_max) - double(t_min)) * double(s) / double(steps);
}

std::vector<int64_t> entropy_bound_accept(const std::vector<float>& entropies, float bound) {
  std::vector<int64_t> order(entropies.size());
  std::iota(order.begin(), order.end(), int64_t(0));
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const float ha = entropies[size_t(a)], hb = entropies[size_t(b)];
    return ha < hb || (ha == hb && a < b);
  });
  std::vector<int64_t> accepted;
  // Sums of a few hundred floats in double are exact in practice, so cumsum - H_k is the sum of the
  // entropies before k, as the formula reads.
  double cumsum = 0;
  for (int64_t k : order) {
    const double h = entropies[size_t(k)];
    cumsum += h;
    if (!accepted.empty() && !(cumsum - h <= double(bound))) break;
    accepted.push_back(k);
  }
  return accepted;
}

namespace {

// What one decoder step yields for one canvas position.
struct PositionResult {
  int32_t argmax = 0;
  int32_t sample = 0;
  float entropy = 0;
  bool finite = true;
};

// The same from a streamed head row: the tempered entropy, the Gumbel sample, the plain argmax.
PositionResult reduce_streamed(const HeadRowStats& st) {
  PositionResult r;
  r.finite = std::isfinite(st.plain.max) && std::isfinite(st.plain.logsumexp) && std::isfinite(st.tempered.logsumexp) &&
             std::isfinite(st.tempered.entropy) && std::isfinite(st.p_sample);
  r.argmax = st.plain.argmax;
  r.sample = st.sample;
  r.entropy = std::max(st.tempered.entropy, 0.f);
  return r;
}

// EntropyBoundParams' top_k / top_p / min_p: the candidates of an accepted position's draw.
struct CandidateFilter {
  int64_t top_k = 0;
  double top_p = 1, min_p = 0;
  bool active() const { return top_k > 0 || top_p < 1 || min_p > 0; }
  // One inverse-CDF draw (uniform u) from softmax(z) restricted to the candidates, renormalised; the
  // candidates in descending probability (ties: lower id first), so the draw does not depend on threads.
  int32_t draw(const float* z, int64_t vocab, double lse, int32_t argmax, double u) const {
    std::vector<int32_t> order(static_cast<size_t>(vocab));
    for (int64_t j = 0; j < vocab; ++j) order[size_t(j)] = int32_t(j);
    const int64_t keep = top_k > 0 ? std::min(top_k, vocab) : vocab;
    auto before = [&](int32_t a, int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); };
    std::partial_sort(order.begin(), order.begin() + keep, order.end(), before);
    const double p_max = std::exp(double(z[argmax]) - lse);
    std::vector<double> p;
    double mass = 0;
    for (int64_t k = 0; k < keep; ++k) {
      const double pk = std::exp(double(z[order[size_t(k)]]) - lse);
      if (k > 0 && (pk < min_p * p_max || mass >= top_p)) break;
      p.push_back(pk);
      mass += pk;
    }
    double cum = 0;
    for (size_t k = 0; k < p.size(); ++k) {
      cum += p[k] / mass;
      if (cum > u) return order[k];
    }
    return order[p.size() - 1];
  }
};

// z = row / T (written to z_row), then argmax, entropy and one inverse-CDF draw from softmax(z),
// reading the row a few times without storing probabilities.
PositionResult reduce_row(const float* row, float* z_row, int64_t vocab, double temperature, double u,
                          const CandidateFilter* filter) {
  PositionResult r;
  // NaN or +inf anywhere poisons the row (the SIMD reductions need not propagate them); -inf is a
  // legitimate zero probability as long as some logit is finite.
  bool poisoned = false;
  for (int64_t j = 0; j < vocab; ++j) {
    const float v = float(double(row[j]) / temperature);
    poisoned |= !(v < std::numeric_limits<float>::infinity());
    z_row[j] = v;
  }
  const RowStats st = row_stats(z_row, vocab);
  if (poisoned || !std::isfinite(st.max) || !std::isfinite(st.logsumexp) || !std::isfinite(st.entropy)) {
    r.finite = false;
    return r;
  }
  r.argmax = st.argmax;
  r.entropy = std::max(st.entropy, 0.f);
  const double lse = st.logsumexp;
  if (filter && filter->active()) {
    r.sample = filter->draw(z_row, vocab, lse, st.argmax, u);
    return r;
  }
  double cum = 0;
  int32_t pick = -1, last_positive = st.argmax;
  for (int64_t j = 0; j < vocab; ++j) {
    const double p = std::exp(double(z_row[j]) - lse);
    if (p > 0) last_positive = int32_t(j);
    cum += p;
    if (cum > u) {
      pick = int32_t(j);
      break;
    }
  }
  // Only when rounding leaves the total mass a hair below u.
  r.sample = pick >= 0 ? pick : last_positive;
  return r;
}

// EntropyBoundParams::neighbor_penalty over the [L x V] logits, in place: row i's logit of row i-1's
// argmax (after its own penalty; `left` before row 0) penalised, left to right. A row's argmax moves
// only when the penalised token was its argmax, so only those rows are searched again.
// Rows with computed[i] == 0 (frozen: stale and already penalised) are left alone; the argmax their
// last reduction found (last[i]) still penalises the row after them.
void penalize_neighbors(float* logits, int64_t L, int64_t V, int32_t left, float penalty, const uint8_t* computed,
                        const PositionResult* last, ThreadPool* pool) {
  std::vector<int32_t> top(static_cast<size_t>(L));
  parallel_for(pool, L, std::max<int64_t>(1, 65536 / V), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      top[size_t(i)] = computed[i] ? row_stats(logits + i * V, V).argmax : last[i].argmax;
  });
  for (int64_t i = 0; i < L; ++i) {
    float* row = logits + i * V;
    if (computed[i] && left >= 0 && left < V) {
      row[left] = penalize_logit(row[left], penalty);
      if (top[size_t(i)] == left) top[size_t(i)] = row_stats(row, V).argmax;
    }
    left = top[size_t(i)];
  }
}

void check_params(const DiffusionModelHooks& hooks, const EntropyBoundParams& p) {
  check(hooks.vocab > 0 && hooks.vocab <= INT32_MAX,
        "entropy-bound sampler: vocabulary size must be in [1, 2^31), got " + std::to_string(hooks.vocab));
  if (p.stream_head) {
    check(bool(hooks.decode_stream),
          "entropy-bound sampler: stream_head is set but the model hooks have no decode_stream function");
  } else {
    check(bool(hooks.decode), "entropy-bound sampler: the model hooks have no decode function");
  }
  check(bool(hooks.encode), "entropy-bound sampler: the model hooks have no encode function");
  check(p.canvas_length > 0, "entropy-bound sampler: canvas_length must be positive, got " +
                                 std::to_string(p.canvas_length));
  check(p.max_denoising_steps > 0, "entropy-bound sampler: max_denoising_steps must be positive, got " +
                                       std::to_string(p.max_denoising_steps));
  check(p.max_new_tokens > 0,
        "entropy-bound sampler: max_new_tokens must be positive, got " + std::to_string(p.max_new_tokens));
  check(p.t_min > 0.f && p.t_max > 0.f && std::isfinite(p.t_min) && std::isfinite(p.t_max),
        "entropy-bound sampler: temperatures must be positive and finite, got t_min " + std::to_string(p.t_min) +
            ", t_max " + std::to_string(p.t_max));
  check(!std::isnan(p.entropy_bound), "entropy-bound sampler: entropy_bound is NaN");
  check(p.stability_threshold >= 0, "entropy-bound sampler: stability_threshold must be >= 0, got " +
                                        std::to_string(p.stability_threshold));
  check(p.neighbor_penalty > 0.f && std::isfinite(p.neighbor_penalty),
        "entropy-bound sampler: neighbor_penalty must be positive and finite (1: off), got " +
            std::to_string(p.neighbor_penalty));
  check(p.neighbor_penalty == 1.f || !p.stream_head,
        "entropy-bound sampler: neighbor_penalty needs the materialised logits; it does not work with stream_head");
  check(!p.freeze || !p.stream_head, "entropy-bound sampler: freeze does not work with stream_head");
  check(p.top_k >= 0 && p.top_p > 0 && p.top_p <= 1 && p.min_p >= 0 && p.min_p <= 1,
        "entropy-bound sampler: need top_k >= 0, top_p in (0, 1] and min_p in [0, 1]");
  check(!p.stream_head || (!p.greedy && p.top_k == 0 && p.top_p == 1 && p.min_p == 0),
        "entropy-bound sampler: greedy, top_k, top_p and min_p need the materialised head, not stream_head");
  check(!p.freeze || bool(hooks.decode_rows),
        "entropy-bound sampler: freeze is set but the model hooks have no decode_rows function");
  check(!p.replay || (!p.stream_head && !p.freeze && !p.greedy),
        "entropy-bound sampler: a replayed run needs the materialised head, no freeze and sampled tokens");
  check(p.freeze_refresh >= 0, "entropy-bound sampler: freeze_refresh must be >= 0, got " +
                                   std::to_string(p.freeze_refresh));
}

}  // namespace

EntropyBoundResult generate_entropy_bound(const DiffusionModelHooks& hooks, const EntropyBoundParams& params,
                                          const DecodeCallbacks& callbacks, ThreadPool* pool) {
  check_params(hooks, params);
  const int64_t L = params.canvas_length, V = hooks.vocab, N = params.max_denoising_steps;
  const bool streamed = params.stream_head;
  const size_t logits_size = size_t(L) * size_t(V);
  Rng rng(params.seed);
  EntropyBoundResult result;

  const size_t positions = size_t(L);
  std::vector<float> logits, z(streamed ? 0 : logits_size);  // the only [L x V] buffers (decode only)
  // Streamed path: per-position head stats, the soft embedding this step reads and the one it writes.
  std::vector<HeadRowStats> head_stats;
  std::vector<float> soft_in, soft_out;
  std::vector<uint64_t> row_ids(streamed ? positions : 0);
  std::vector<int32_t> canvas(positions), argmax(positions), prev_argmax(positions);
  CandidateFilter filter;
  filter.top_k = params.top_k;
  filter.top_p = params.top_p;
  filter.min_p = params.min_p;
  std::vector<int32_t> region;  // committed tokens followed by the current canvas (for events)
  std::vector<double> uniforms(positions);
  std::vector<PositionResult> rows(positions);
  std::vector<float> entropies(positions);
  std::vector<uint8_t> accepted_mask(positions);
  const int64_t grain = std::max<int64_t>(1, 65536 / V);
  // Freeze (compute-aware decoding): which rows this pass computes, which are frozen, and for how many
  // consecutive steps each was accepted unchanged as its argmax.
  std::vector<uint8_t> computed(positions, 1), frozen(positions);
  std::vector<int32_t> active, streak(positions), canvas_in;
  std::vector<float> part, z_part;
  std::vector<int64_t> computed_rows;

  const double t0 = now_ms();
  for (int64_t block = 0; int64_t(result.tokens.size()) < params.max_new_tokens; ++block) {
    const int64_t offset = int64_t(result.tokens.size());
    for (auto& t : canvas) t = int32_t(rng.below(uint64_t(V)));
    const EntropyBoundReplay::Canvas* replayed = nullptr;
    if (params.replay) {
      check(block < int64_t(params.replay->canvases.size()), "entropy-bound sampler: the replayed run has " +
                                                                 std::to_string(params.replay->canvases.size()) +
                                                                 " canvases; this run needs canvas " +
                                                                 std::to_string(block + 1));
      replayed = &params.replay->canvases[size_t(block)];
      check(int64_t(replayed->initial.size()) == L, "entropy-bound sampler: a replayed canvas has " +
                                                        std::to_string(replayed->initial.size()) + " tokens, not " +
                                                        std::to_string(L));
      canvas = replayed->initial;
    }
    region = result.tokens;
    region.insert(region.end(), canvas.begin(), canvas.end());
    std::fill(frozen.begin(), frozen.end(), uint8_t(0));
    std::fill(streak.begin(), streak.end(), 0);
    int64_t stable = 0, steps = 0;
    for (int64_t step = 0; step < N; ++step) {
      const int64_t s = N - step;
      const double T = entropy_bound_temperature(s, N, params.t_min, params.t_max);
      // The inverse-CDF uniforms; the streamed path draws them too (unused) so that both paths re-noise
      // with the same RNG sequence.
      for (auto& u : uniforms) u = rng.uniform();
      if (streamed) {
        HeadStreamOptions head;
        head.temperature = float(T);
        head.seed = params.seed;
        const uint64_t first_row = (uint64_t(block) * uint64_t(N) + uint64_t(step)) * uint64_t(L);
        for (size_t i = 0; i < positions; ++i) row_ids[i] = first_row + i;
        head.row_ids = row_ids.data();
        hooks.decode_stream(canvas, step == 0 ? nullptr : &soft_in, head, head_stats, soft_out);
        ++result.passes;
        ++steps;
        check(head_stats.size() == positions, "entropy-bound sampler: decode_stream wrote " +
                                                  std::to_string(head_stats.size()) +
                                                  " rows of statistics, expected canvas_length = " + std::to_string(L));
        for (size_t i = 0; i < positions; ++i) {
          const int32_t sample = head_stats[i].sample, top = head_stats[i].plain.argmax;
          if (!(sample >= 0 && sample < V && top >= 0 && top < V))
            check(false, "entropy-bound sampler: decode_stream returned a token outside the vocabulary at canvas "
                         "position " + std::to_string(i));
          rows[i] = reduce_streamed(head_stats[i]);
        }
        soft_in.swap(soft_out);  // the next step's self-conditioning input
        result.rows_computed += L;
      } else {
        // Freeze: the rows not frozen, unless this is a full pass (a canvas's first step, a refresh, or
        // every row frozen, or none).
        active.clear();
        const bool refresh = step == 0 || (params.freeze_refresh > 0 && step % params.freeze_refresh == 0);
        if (params.freeze && !refresh)
          for (int64_t i = 0; i < L; ++i)
            if (!frozen[size_t(i)]) active.push_back(int32_t(i));
        if (int64_t(active.size()) == L) active.clear();  // nothing frozen: a full pass
        logits.resize(logits_size);
        if (active.empty()) {  // a full pass also thaws every position (the rule re-freezes them)
          std::fill(computed.begin(), computed.end(), uint8_t(1));
          std::fill(frozen.begin(), frozen.end(), uint8_t(0));
          if (params.freeze) {
            hooks.decode_rows(canvas, active, step == 0 ? nullptr : &z, logits);
          } else {
            hooks.decode(canvas, step == 0 ? nullptr : &z, logits);
          }
          check(logits.size() == logits_size, "entropy-bound sampler: decode wrote " + std::to_string(logits.size()) +
                                                  " logits, expected canvas_length x vocab = " +
                                                  std::to_string(logits_size));
          result.rows_computed += L;
        } else {  // only the active rows: their self-conditioning rows in, their logits out
          const size_t n = active.size(), row = size_t(V);
          std::fill(computed.begin(), computed.end(), uint8_t(0));
          z_part.resize(n * row);
          for (size_t k = 0; k < n; ++k) {
            computed[size_t(active[k])] = 1;
            std::copy_n(&z[size_t(active[k]) * row], row, &z_part[k * row]);
          }
          hooks.decode_rows(canvas, active, &z_part, part);
          check(part.size() == n * row, "entropy-bound sampler: decode_rows wrote " + std::to_string(part.size()) +
                                            " logits, expected " + std::to_string(n) + " rows x vocab");
          for (size_t k = 0; k < n; ++k) std::copy_n(&part[k * row], row, &logits[size_t(active[k]) * row]);
          result.rows_computed += int64_t(n);
        }
        ++result.passes;
        ++steps;
        if (params.neighbor_penalty != 1.f)
          penalize_neighbors(logits.data(), L, V, result.tokens.empty() ? params.left_context : result.tokens.back(),
                             params.neighbor_penalty, computed.data(), rows.data(), pool);

        // The previous z has been consumed by decode: overwrite this step's rows of it row by row.
        computed_rows.clear();
        for (int64_t i = 0; i < L; ++i)
          if (computed[size_t(i)]) computed_rows.push_back(i);
        parallel_for(pool, int64_t(computed_rows.size()), grain, [&](int64_t begin, int64_t end) {
          for (int64_t k = begin; k < end; ++k) {
            const size_t i = size_t(computed_rows[size_t(k)]);
            rows[i] = reduce_row(&logits[i * size_t(V)], &z[i * size_t(V)], V, T, uniforms[i], &filter);
          }
        });
      }
      double entropy_sum = 0;
      for (int64_t i = 0; i < L; ++i) {
        const PositionResult& r = rows[size_t(i)];
        if (!r.finite)  // (the message is built only when needed: this runs for every row of every step)
          check(false, "entropy-bound sampler: decoder logits at canvas position " + std::to_string(i) + " (canvas " +
                           std::to_string(block) + ", step " + std::to_string(step) + ") are not finite");
        argmax[size_t(i)] = r.argmax;
        entropies[size_t(i)] = r.entropy;
        entropy_sum += r.entropy;
      }

      std::vector<int64_t> accepted = entropy_bound_accept(entropies, params.entropy_bound);
      std::fill(accepted_mask.begin(), accepted_mask.end(), uint8_t(0));
      for (int64_t i : accepted) accepted_mask[size_t(i)] = 1;
      for (int64_t i = 0; i < L; ++i)  // frozen positions stay accepted
        if (frozen[size_t(i)] && !accepted_mask[size_t(i)]) {
          accepted_mask[size_t(i)] = 1;
          accepted.push_back(i);
        }
      canvas_in = canvas;
      for (int64_t i = 0; i < L; ++i)  // re-noise in position order (fixes the RNG sequence)
        canvas[size_t(i)] = !accepted_mask[size_t(i)] ? int32_t(rng.below(uint64_t(V)))
                            : params.greedy                ? rows[size_t(i)].argmax
                                                           : rows[size_t(i)].sample;
      if (replayed) {
        check(step < int64_t(replayed->steps.size()), "entropy-bound sampler: the replayed canvas " +
                                                          std::to_string(block) + " has " +
                                                          std::to_string(replayed->steps.size()) +
                                                          " steps; this run takes step " + std::to_string(step + 1));
        const EntropyBoundReplay::Step& draw = replayed->steps[size_t(step)];
        check(int64_t(draw.sample.size()) == L && int64_t(draw.noise.size()) == L,
              "entropy-bound sampler: a replayed step must hold canvas_length sampled and re-noising tokens");
        for (int64_t i = 0; i < L; ++i)
          canvas[size_t(i)] = accepted_mask[size_t(i)] ? draw.sample[size_t(i)] : draw.noise[size_t(i)];
      }
      if (params.freeze)
        for (size_t i = 0; i < positions; ++i) {
          if (!computed[i]) continue;  // frozen: unchanged
          const bool same = accepted_mask[i] && canvas[i] == canvas_in[i] && rows[i].argmax == canvas[i];
          streak[i] = same ? streak[i] + 1 : 0;
          frozen[i] = streak[i] >= 1;
        }

      if (callbacks.on_step) {
        std::copy(canvas.begin(), canvas.end(), region.begin() + offset);
        StepEvent event;
        event.block = block;
        event.step = step;
        event.passes = result.passes;
        event.canvas = &region;
        event.committed.reserve(accepted.size());
        event.confidence.resize(accepted.size());
        for (int64_t i : accepted) event.committed.push_back(offset + i);
        if (streamed) {
          for (size_t k = 0; k < accepted.size(); ++k) event.confidence[k] = head_stats[size_t(accepted[k])].p_sample;
        } else {
          parallel_for(pool, int64_t(accepted.size()), grain, [&](int64_t begin, int64_t end) {
            for (int64_t k = begin; k < end; ++k) {
              const int64_t i = accepted[size_t(k)];
              const float* row = &logits[size_t(i) * size_t(V)];
              const float lse = row_stats(row, V).logsumexp;
              event.confidence[size_t(k)] = float(std::exp(double(row[canvas[size_t(i)]]) - double(lse)));
            }
          });
        }
        callbacks.on_step(event);
      }

      // Adaptive stop: the argmax canvas repeated enough times and the canvas is confident on average.
      stable = (step > 0 && argmax == prev_argmax) ? stable + 1 : 0;
      prev_argmax.swap(argmax);
      const double mean_entropy = entropy_sum / double(L);
      if (stable >= params.stability_threshold && mean_entropy < double(params.confidence_threshold)) break;
    }
    result.steps_per_canvas.push_back(steps);

    // Commit the last step's argmax canvas (now in prev_argmax), truncated to what is still wanted.
    const int64_t keep = std::min(L, params.max_new_tokens - offset);
    std::vector<int32_t> committed(prev_argmax.begin(), prev_argmax.begin() + keep);
    bool finished = offset + keep >= params.max_new_tokens;
    for (int64_t i = 0; i < keep; ++i) {
      if (std::find(params.eos_ids.begin(), params.eos_ids.end(), committed[size_t(i)]) != params.eos_ids.end()) {
        std::fill(committed.begin() + i + 1, committed.end(), params.pad_id);
        finished = true;
        break;
      }
    }
    // The committed tokens' log-probabilities under the last pass of the canvas (the materialised head only).
    if (callbacks.on_logprob && !streamed)
      for (int64_t i = 0; i < keep; ++i)
        callbacks.on_logprob(offset + i, token_logprob(&logits[size_t(i) * size_t(V)], V, committed[size_t(i)],
                                                       callbacks.logprobs_top));
    result.tokens.insert(result.tokens.end(), committed.begin(), committed.end());
    if (finished) break;
    hooks.encode(committed);
    ++result.encoder_passes;
  }
  result.decode_ms = now_ms() - t0;
  result.new_tokens = std::count_if(result.tokens.begin(), result.tokens.end(),
                                    [&](int32_t t) { return t != params.pad_id; });
  result.tokens_per_forward = result.passes > 0 ? double(result.new_tokens) / double(result.passes) : 0.0;
  return result;
}

}  // namespace canvas
