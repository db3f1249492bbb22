// Masked-diffusion generation loop. Nothing here prints: progress goes out through callbacks.
#include "decode/masked.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>

#include "core/error.h"
#include "core/rng.h"
#include "core/timer.h"

namespace canvas {

UnmaskOrder parse_unmask_order(const std::string& name) {
  if (name == "confidence" || name == "low_confidence" || name == "maskgit_plus") return UnmaskOrder::Confidence;
  if (name == "margin" || name == "topk_margin") return UnmaskOrder::Margin;
  if (name == "entropy") return UnmaskOrder::Entropy;
  if (name == "random") return UnmaskOrder::Random;
  if (name == "origin") return UnmaskOrder::Origin;
  throw Error("unknown unmasking order '" + name + "' (confidence, margin, entropy, random, origin)");
}

StepSchedule parse_step_schedule(const std::string& name) {
  if (name == "llada" || name == "block") return StepSchedule::Llada;
  if (name == "dream" || name == "timestep") return StepSchedule::Dream;
  throw Error("unknown step schedule '" + name + "' (llada, dream)");
}

CacheMode parse_cache_mode(const std::string& name) {
  if (name == "none") return CacheMode::None;
  if (name == "prefix") return CacheMode::Prefix;
  if (name == "dual") return CacheMode::Dual;
  throw Error("unknown cache mode '" + name + "' (none, prefix, dual)");
}

namespace {

double dream_time(int64_t step, int64_t steps, float eps) { return 1.0 - double(step) / double(steps) * (1.0 - eps); }

// Checks the model and the canvas geometry shared by every masked decoder; returns the block length.
int64_t checked_block_length(const Model& model, int64_t prompt_len, const MaskedDiffusionParams& params) {
  const ModelConfig& c = model.config;
  check(c.mask_token >= 0 && c.mask_token < c.vocab,
        "model has no mask token (tokenizer.ggml.mask_token_id): it cannot run masked diffusion");
  const int64_t L = params.gen_length;
  const int64_t B = params.block_length > 0 ? std::min(params.block_length, L) : L;
  check(L > 0, "generation length must be positive");
  check(L % B == 0, "generation length " + std::to_string(L) + " is not a multiple of the block length " + std::to_string(B));
  check(!c.shift_logits || prompt_len >= 1,
        "this model predicts each token from the row before it: the prompt must not be empty");
  return B;
}

// The canvas decoding starts from: params.initial_canvas (checked), else all masks.
std::vector<int32_t> starting_canvas(const Model& model, const MaskedDiffusionParams& params) {
  const int64_t L = params.gen_length;
  if (params.initial_canvas.empty()) return std::vector<int32_t>(size_t(L), model.config.mask_token);
  check(int64_t(params.initial_canvas.size()) == L, "the initial canvas has " +
                                                       std::to_string(params.initial_canvas.size()) +
                                                       " tokens, the generation length is " + std::to_string(L));
  for (int32_t id : params.initial_canvas)
    check(id >= 0 && id < model.config.vocab, "initial canvas token " + std::to_string(id) + " is outside the vocabulary");
  return params.initial_canvas;
}

// Block-causal groups with the active region starting at block b (see generate_masked).
void block_causal_groups(int64_t P, int64_t B, int64_t b, std::vector<int32_t>& groups) {
  for (int64_t p = 0; p < int64_t(groups.size()); ++p)
    groups[size_t(p)] = p < P ? 0 : int32_t(std::min((p - P) / B, b) + 1);
}

}  // namespace

int64_t tokens_to_commit(StepSchedule schedule, int64_t block_masked_at_start, int64_t masked_now, int64_t step,
                         int64_t steps, float eps) {
  if (step >= steps - 1) return masked_now;
  if (schedule == StepSchedule::Llada) {
    const int64_t base = block_masked_at_start / steps, extra = block_masked_at_start % steps;
    return std::min(masked_now, base + (step < extra ? 1 : 0));
  }
  const double t = dream_time(step, steps, eps), s = dream_time(step + 1, steps, eps);
  return std::min(masked_now, int64_t(double(masked_now) * (1.0 - s / t)));
}

GenerationResult generate_masked(const Model& model, const std::vector<int32_t>& prompt,
                                 const MaskedDiffusionParams& params, ThreadPool* pool,
                                 const DecodeCallbacks& callbacks) {
  if (params.beam_width > 1) return generate_masked_beam(model, prompt, params, pool, callbacks);
  const ModelConfig& c = model.config;
  const int32_t mask = c.mask_token;
  const int64_t P = int64_t(prompt.size());
  const int64_t L = params.gen_length;
  const int64_t B = checked_block_length(model, P, params);
  const int64_t n_blocks = L / B;
  const bool threshold = params.threshold > 0.f;
  int64_t steps_per_block = B;
  if (!threshold) {
    check(params.steps >= n_blocks && params.steps % n_blocks == 0,
          "steps (" + std::to_string(params.steps) + ") must be a positive multiple of the number of blocks (" +
              std::to_string(n_blocks) + ")");
    steps_per_block = params.steps / n_blocks;
  }
  const int64_t total = P + L;
  const int64_t V = c.vocab;

  std::vector<int32_t> seq(prompt);
  std::vector<int32_t> canvas = starting_canvas(model, params);
  seq.insert(seq.end(), canvas.begin(), canvas.end());
  std::vector<int32_t> groups(size_t(total), 0);
  KvCache cache(c, total);
  Rng rng(params.sampling.seed);
  GenerationResult result;
  result.prompt_tokens = P;

  // Logits of the row just before the current block (shifted models predict position p from row p-1);
  // that row belongs to the finished prefix, so it is fixed while the block is decoded.
  std::vector<float> boundary(static_cast<size_t>(V));
  const double t_start = now_ms();
  int64_t forward_from = 0;  // first position whose K/V in the cache is stale
  if (params.cache != CacheMode::None && P > 0) {
    ForwardRequest req;
    req.tokens = seq.data();
    req.n = P;
    req.groups = groups.data();
    if (c.shift_logits) req.logit_rows = {int32_t(P - 1)};
    req.logits = boundary.data();
    run_forward(callbacks, model, cache, req, pool);
    forward_from = P;
  }
  result.prompt_ms = params.cache != CacheMode::None ? now_ms() - t_start : 0;
  const double t_decode = now_ms();

  std::vector<float> logits;
  std::vector<int32_t> pass_tokens, pass_groups, pass_positions;  // the rows of a frozen (subset) pass
  std::vector<int64_t> row_of(size_t(total), -1);                 // position -> row of the current pass
  std::vector<char> committed_last(size_t(total), 0);             // committed by the previous step
  std::vector<int64_t> masked_positions;
  std::vector<TokenChoice> choices;
  std::vector<const float*> raw_rows;  // each masked position's logits row (log-probabilities reported)
  std::vector<double> scores;
  std::vector<int32_t> recent;  // ids the repetition penalty applies to (when on)
  std::vector<float> constrained_row;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const int64_t s0 = P + b * B, s1 = s0 + B;
    block_causal_groups(P, B, b, groups);  // the active region is [s0, total)
    const int64_t block_masked_at_start = std::count(seq.begin() + s0, seq.begin() + s1, mask);
    // With a constraint, a commit the schedule wanted may have been held back (its hole no longer allowed
    // it): extra steps, each committing everything still masked that is allowed, finish the block.
    for (int64_t step = 0; step < steps_per_block || params.constraint; ++step) {
      masked_positions.clear();
      for (int64_t p = s0; p < s1; ++p)
        if (seq[size_t(p)] == mask) masked_positions.push_back(p);
      if (masked_positions.empty()) break;

      int64_t start = 0, end = total;
      if (params.cache == CacheMode::Prefix) start = forward_from;
      if (params.cache == CacheMode::Dual) {
        start = step == 0 ? forward_from : s0;
        end = step == 0 ? total : s1;
      }
      ForwardRequest req;
      req.tokens = seq.data() + start;
      req.n = end - start;
      req.pos0 = start;
      req.groups = groups.data() + start;
      req.key_end = total;
      for (int64_t p = start; p < end; ++p) row_of[size_t(p)] = p - start;
      const bool refresh = params.freeze_refresh > 0 && step % params.freeze_refresh == 0;
      if (params.freeze && step > 0 && !refresh) {
        pass_tokens.clear();
        pass_groups.clear();
        pass_positions.clear();
        for (int64_t p = start; p < end; ++p) {
          const bool predicts_masked = c.shift_logits && p + 1 < total && seq[size_t(p + 1)] == mask;
          row_of[size_t(p)] = -1;
          if (seq[size_t(p)] != mask && !committed_last[size_t(p)] && !predicts_masked) continue;
          row_of[size_t(p)] = int64_t(pass_positions.size());
          pass_positions.push_back(int32_t(p));
          pass_tokens.push_back(seq[size_t(p)]);
          pass_groups.push_back(groups[size_t(p)]);
        }
        req.tokens = pass_tokens.data();
        req.n = int64_t(pass_positions.size());
        req.positions = pass_positions.data();
        req.groups = pass_groups.data();
      }
      std::fill(committed_last.begin(), committed_last.end(), 0);
      const bool refresh_boundary = c.shift_logits && s0 - 1 >= start && row_of[size_t(s0 - 1)] >= 0;
      if (refresh_boundary) req.logit_rows.push_back(int32_t(row_of[size_t(s0 - 1)]));
      for (int64_t p : masked_positions) {
        const int64_t row = c.shift_logits ? p - 1 : p;
        if (row >= s0 || !c.shift_logits) req.logit_rows.push_back(int32_t(row_of[size_t(row)]));
      }
      logits.resize(req.logit_rows.size() * size_t(V));
      req.logits = logits.data();
      run_forward(callbacks, model, cache, req, pool);
      ++result.passes;
      result.rows_computed += req.n;
      forward_from = s0;
      size_t next_row = 0;
      if (refresh_boundary) {
        std::copy(logits.begin(), logits.begin() + V, boundary.begin());
        next_row = 1;
      }

      choices.resize(masked_positions.size());
      scores.resize(masked_positions.size());
      if (params.sampling.repeat_penalty != 1.f) {
        // The penalty's "recent" tokens: the repeat_last_n positions before the block and every token
        // already committed in the active region.
        recent.clear();
        for (int64_t p = std::max<int64_t>(0, s0 - params.sampling.repeat_last_n); p < total; ++p)
          if (seq[size_t(p)] != mask) recent.push_back(seq[size_t(p)]);
      }
      if (params.constraint) params.constraint->update(canvas);
      if (callbacks.on_logprob) raw_rows.resize(masked_positions.size());
      for (size_t i = 0; i < masked_positions.size(); ++i) {
        const int64_t p = masked_positions[i];
        const float* row = (c.shift_logits && p == s0) ? boundary.data() : &logits[(next_row++) * size_t(V)];
        if (callbacks.on_logprob) raw_rows[i] = row;
        if (params.constraint && params.constraint->constrained(p - P)) {
          constrained_row.assign(row, row + V);
          params.constraint->mask_logits(p - P, constrained_row.data());
          row = constrained_row.data();
        }
        choices[i] = choose_token(row, V, params.sampling, rng, {&recent, nullptr}, p);
        const TokenChoice& ch = choices[i];
        switch (params.order) {
          case UnmaskOrder::Confidence: scores[i] = ch.p_token; break;
          case UnmaskOrder::Margin: scores[i] = double(ch.stats.p_top1) - double(ch.stats.p_top2); break;
          case UnmaskOrder::Entropy: scores[i] = -double(ch.stats.entropy); break;
          case UnmaskOrder::Random: scores[i] = rng.uniform(); break;
          case UnmaskOrder::Origin: scores[i] = 0; break;
        }
      }

      const int64_t masked_now = int64_t(masked_positions.size());
      std::vector<size_t> order(masked_positions.size());
      std::iota(order.begin(), order.end(), size_t(0));
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b2) { return scores[a] > scores[b2]; });
      std::vector<size_t> commit;
      if (threshold) {
        for (size_t i : order)
          if (choices[i].p_token >= params.threshold) commit.push_back(i);
        if (commit.empty()) commit.push_back(order[0]);
      } else if (params.order == UnmaskOrder::Origin) {
        // Each masked position is committed independently with the schedule's transfer probability.
        double prob = 1.0;
        if (step < steps_per_block - 1) {
          if (params.schedule == StepSchedule::Dream) {
            prob = 1.0 - dream_time(step + 1, steps_per_block, params.eps) / dream_time(step, steps_per_block, params.eps);
          } else {
            prob = double(tokens_to_commit(params.schedule, block_masked_at_start, masked_now, step, steps_per_block,
                                           params.eps)) / double(masked_now);
          }
        }
        for (size_t i = 0; i < masked_positions.size(); ++i)
          if (rng.uniform() < prob) commit.push_back(i);
      } else {
        const int64_t k = tokens_to_commit(params.schedule, block_masked_at_start, masked_now, step, steps_per_block,
                                           params.eps);
        commit.assign(order.begin(), order.begin() + k);
      }

      StepEvent event;
      event.block = b;
      event.step = step;
      event.passes = result.passes;
      event.canvas = &canvas;
      for (size_t k = 0; k < commit.size(); ++k) {
        const size_t i = commit[k];
        const int64_t p = masked_positions[i];
        if (params.constraint && k > 0) {
          // The commits before this one may have used up what its hole allowed it.
          params.constraint->update(canvas);
          if (!params.constraint->allows(p - P, choices[i].token)) continue;
        }
        seq[size_t(p)] = choices[i].token;
        canvas[size_t(p - P)] = choices[i].token;
        if (callbacks.on_logprob)
          callbacks.on_logprob(p - P, token_logprob(raw_rows[i], V, choices[i].token, callbacks.logprobs_top));
        committed_last[size_t(p)] = 1;
        event.committed.push_back(p - P);
        event.confidence.push_back(choices[i].p_token);
      }
      if (callbacks.on_step) callbacks.on_step(event);
    }
    if (b + 1 < n_blocks && callbacks.should_stop && callbacks.should_stop()) {
      canvas.resize(size_t(s1 - P));  // the finished blocks; the rest was never decoded
      break;
    }
  }
  result.decode_ms = now_ms() - t_decode;
  result.tokens = canvas;
  return result;
}

GenerationResult generate_masked_beam(const Model& model, const std::vector<int32_t>& prompt,
                                      const MaskedDiffusionParams& params, ThreadPool* pool,
                                      const DecodeCallbacks& callbacks) {
  const ModelConfig& c = model.config;
  const int32_t mask = c.mask_token;
  const int64_t P = int64_t(prompt.size()), L = params.gen_length;
  const int64_t B = checked_block_length(model, P, params);
  const int64_t W = std::max<int64_t>(params.beam_width, 1), total = P + L, V = c.vocab;
  check(params.constraint == nullptr, "beam search does not support constrained filling");
  check(W <= 256, "beam width must be at most 256");

  struct Beam {
    std::vector<int32_t> seq;  // prompt + canvas
    double score = 0;          // sum of log p of the committed tokens
  };
  struct Candidate {
    size_t beam;
    int64_t pos;
    int32_t token;
    double score;
    float p;
  };
  std::vector<Beam> beams(1);
  beams[0].seq = prompt;
  const std::vector<int32_t> start = starting_canvas(model, params);
  beams[0].seq.insert(beams[0].seq.end(), start.begin(), start.end());

  GenerationResult result;
  result.prompt_tokens = P;
  const double t0 = now_ms();
  KvCache cache(c, total);
  std::vector<int32_t> groups(size_t(total), 0);
  std::vector<float> logits;
  std::vector<Candidate> candidates;
  int64_t step = 0;
  for (int64_t b = 0; b < L / B; ++b) {
    const int64_t s0 = P + b * B, s1 = s0 + B;
    block_causal_groups(P, B, b, groups);
    for (;; ++step) {
      // Every beam has committed the same number of tokens, all in the earliest block with masks.
      const auto block = beams[0].seq.begin() + s0;
      if (std::find(block, block + B, mask) == block + B) break;
      candidates.clear();
      for (size_t bi = 0; bi < beams.size(); ++bi) {
        const Beam& beam = beams[bi];
        ForwardRequest req;
        req.tokens = beam.seq.data();
        req.n = total;
        req.groups = groups.data();
        for (int64_t p = s0; p < s1; ++p)
          if (beam.seq[size_t(p)] == mask) req.logit_rows.push_back(int32_t(c.shift_logits ? p - 1 : p));
        logits.resize(req.logit_rows.size() * size_t(V));
        req.logits = logits.data();
        run_forward(callbacks, model, cache, req, pool);
        ++result.passes;
        result.rows_computed += total;
        size_t row = 0;
        for (int64_t p = s0; p < s1; ++p) {
          if (beam.seq[size_t(p)] != mask) continue;
          const float* x = &logits[(row++) * size_t(V)];
          const RowStats st = row_stats(x, V);
          for (int64_t j = 0; j < V; ++j)
            check(x[j] < std::numeric_limits<float>::infinity(),
                  "beam search: the model's logits are not finite (NaN or +inf): its weights or "
                  "hyper-parameters are broken");
          for (int32_t tok : top_k(x, V, 2)) {
            if (tok == mask) continue;
            const double lp = double(x[tok]) - double(st.logsumexp);
            candidates.push_back({bi, p, tok, beam.score + lp, float(std::exp(lp))});
          }
        }
      }
      std::stable_sort(candidates.begin(), candidates.end(),
                       [](const Candidate& a, const Candidate& b2) { return a.score > b2.score; });
      std::vector<Beam> next;
      std::set<std::vector<int32_t>> seen;
      for (const Candidate& cand : candidates) {
        if (int64_t(next.size()) == W) break;
        Beam nb{beams[cand.beam].seq, cand.score};
        nb.seq[size_t(cand.pos)] = cand.token;
        if (!seen.insert(nb.seq).second) continue;
        if (callbacks.on_step && next.empty()) {  // the best beam's commit
          StepEvent event;
          const std::vector<int32_t> canvas(nb.seq.begin() + P, nb.seq.end());
          event.block = b;
          event.step = step;
          event.passes = result.passes;
          event.canvas = &canvas;
          event.committed = {cand.pos - P};
          event.confidence = {cand.p};
          callbacks.on_step(event);
        }
        next.push_back(std::move(nb));
      }
      check(!next.empty(), "beam search: no position can be committed (every candidate is the mask token)");
      beams = std::move(next);
    }
  }
  result.decode_ms = now_ms() - t0;
  result.tokens.assign(beams[0].seq.begin() + P, beams[0].seq.end());
  return result;
}

}  // namespace canvas
