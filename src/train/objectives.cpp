// Objective batch builders.
#include "train/objectives.h"

#include "core/error.h"

namespace canvas::train {
namespace {

TokenBatch batch_shape(const std::vector<Example>& examples) {
  check(!examples.empty(), "empty training batch");
  TokenBatch b;
  b.n_sequences = int64_t(examples.size());
  b.length = int64_t(examples[0].tokens.size());
  for (const Example& e : examples)
    check(int64_t(e.tokens.size()) == b.length, "training examples in one batch must have equal lengths");
  b.tokens.reserve(size_t(b.rows()));
  for (const Example& e : examples) b.tokens.insert(b.tokens.end(), e.tokens.begin(), e.tokens.end());
  return b;
}

}  // namespace

ObjectiveBatch masked_diffusion_batch(const std::vector<Example>& examples, int32_t mask_token, float eps, Rng& rng) {
  ObjectiveBatch out;
  out.input = batch_shape(examples);
  const int64_t L = out.input.length;
  out.targets.assign(size_t(out.input.rows()), 0);
  out.weights.assign(size_t(out.input.rows()), 0.f);
  int64_t scored_positions = 0;
  for (size_t s = 0; s < examples.size(); ++s) {
    const double t = eps + (1.0 - eps) * (1.0 - rng.uniform());  // (eps, 1]
    for (int64_t i = 0; i < L; ++i) {
      if (examples[s].is_prompt(i)) continue;
      const size_t r = s * size_t(L) + size_t(i);
      ++scored_positions;
      if (rng.uniform() < t) {
        out.targets[r] = out.input.tokens[r];
        out.input.tokens[r] = mask_token;
        out.weights[r] = float(1.0 / t);
      }
    }
  }
  out.normaliser = float(std::max<int64_t>(scored_positions, 1));
  return out;
}

ObjectiveBatch autoregressive_batch(const std::vector<Example>& examples) {
  ObjectiveBatch out;
  out.input = batch_shape(examples);
  const int64_t L = out.input.length;
  out.input.groups.resize(size_t(out.input.rows()));
  out.targets.assign(size_t(out.input.rows()), 0);
  out.weights.assign(size_t(out.input.rows()), 0.f);
  int64_t scored = 0;
  for (size_t s = 0; s < examples.size(); ++s)
    for (int64_t i = 0; i < L; ++i) {
      const size_t r = s * size_t(L) + size_t(i);
      out.input.groups[r] = int32_t(i);  // causal
      if (i + 1 < L && i + 1 >= std::max<int64_t>(examples[s].prompt_len, 1)) {
        out.targets[r] = out.input.tokens[r + 1];
        out.weights[r] = 1.f;
        ++scored;
      }
    }
  out.normaliser = float(std::max<int64_t>(scored, 1));
  return out;
}

}  // namespace canvas::train
