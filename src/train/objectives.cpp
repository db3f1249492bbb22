// Objective batch builders.
#include "train/objectives.h"

#include <algorithm>
#include <limits>

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
    const double t = examples[s].mask_rate > 0 ? double(examples[s].mask_rate)
                                               : eps + (1.0 - eps) * (1.0 - rng.uniform());  // (eps, 1]
    for (int64_t i = 0; i < L; ++i) {
      if (examples[s].is_prompt(i)) continue;
      const size_t r = s * size_t(L) + size_t(i);
      ++scored_positions;
      if (rng.uniform() < t) {
        out.targets[r] = out.input.tokens[r];
        out.input.tokens[r] = mask_token;
        out.weights[r] = float(1.0 / t) * (examples[s].weight.empty() ? 1.f : examples[s].weight[size_t(i)]);
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

ObjectiveBatch uniform_state_batch(const std::vector<Example>& examples, const UniformStateOptions& o, Rng& rng) {
  check(o.block_length > 0 && o.vocab > 0, "uniform_state_batch: block_length and vocab must be positive");
  ObjectiveBatch out;
  const TokenBatch clean = batch_shape(examples);
  const int64_t L = clean.length;
  out.input.n_sequences = clean.n_sequences;
  out.input.length = L;
  const size_t rows = size_t(clean.rows());
  out.input.tokens.assign(rows, 0);
  out.input.groups.assign(rows, std::numeric_limits<int32_t>::max());  // unused rows: seen by no one
  out.input.positions.assign(rows, 0);
  if (o.decoder_view) out.input.decoder.assign(rows, 0);
  out.targets.assign(rows, 0);
  out.weights.assign(rows, 0.f);
  std::vector<size_t> ar_rows;
  double block_positions = 0;
  for (size_t s = 0; s < examples.size(); ++s) {
    const Example& e = examples[s];
    const int64_t P = std::min(e.prompt_len, L - 1);
    // A draft example: [clean token ; k noise tokens] after at least one clean token.
    const int64_t first = std::max<int64_t>(P, 1);
    const bool draft = o.draft_length > 0 && L - first >= 2 && rng.uniform() < o.draft_share;
    const int64_t B = draft ? std::min(o.draft_length + 1, L - first) : std::min(o.block_length, L - P);
    // An overlapped draft (verify --overlap): the first token is noise too, and scored.
    const bool noisy_first = draft && o.draft_noisy_first > 0 && rng.uniform() < o.draft_noisy_first;
    int64_t b = 0;
    if (draft) {
      b = first + int64_t(rng.below(uint64_t(L - first - B + 1)));
    } else {
      // An example with a prompt (SFT) puts its block right after the prompt half of the time, where
      // decoding puts the first canvas of a reply; otherwise, and for plain text, anywhere after it.
      const bool at_prompt = P > 0 && rng.below(2) == 0;
      b = at_prompt ? P : P + int64_t(rng.below(uint64_t(L - P - B + 1)));
    }
    const double t = draft ? 1.0 : o.eps + (1.0 - o.eps) * (1.0 - rng.uniform());  // (eps, 1]
    const float weight = draft ? float(o.block_length) / float(noisy_first ? B : B - 1) : 1.f;
    const size_t base = s * size_t(L) + size_t(L - b - B);  // row of clean token 0
    for (int64_t i = 0; i < b + B; ++i) {
      const size_t r = base + size_t(i);
      const int32_t token = e.tokens[size_t(i)];
      out.input.positions[r] = int32_t(i);
      out.input.tokens[r] = token;
      if (i < b) {
        out.input.groups[r] = int32_t(i);
        // The encoder's next-token loss: row i predicts token i + 1 (the block's first token for i = b - 1).
        if (i + 1 >= std::max<int64_t>(P, 1) && !e.is_prompt(i + 1)) {
          out.targets[r] = e.tokens[size_t(i + 1)];
          ar_rows.push_back(r);
        }
      } else {
        out.input.groups[r] = int32_t(b);
        if (o.decoder_view) out.input.decoder[r] = 1;
        // A draft's first token is given, not scored (unless noisy_first).
        if (e.is_prompt(i) || (draft && !noisy_first && i == b)) continue;
        if (rng.uniform() < t) out.input.tokens[r] = int32_t(rng.below(uint64_t(o.vocab)));
        out.targets[r] = token;
        out.weights[r] = weight;
        block_positions += weight;
      }
    }
  }
  // normaliser = block positions, so the block term is a flat mean; AR rows carry weights that make
  // their term ar_weight times the mean next-token CE.
  out.normaliser = float(std::max(block_positions, 1.0));
  if (!ar_rows.empty() && o.ar_weight > 0) {
    const float w = o.ar_weight * out.normaliser / float(ar_rows.size());
    for (size_t r : ar_rows) out.weights[r] = w;
  }
  return out;
}

}  // namespace canvas::train
