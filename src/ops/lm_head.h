// Fused LM head: logits = x W^T streamed over vocabulary tiles and reduced on the fly to per-row softmax
// statistics, a Gumbel-max sample and optionally softmax(logits / T) W, never storing [rows x vocab].
#pragma once
#include <cmath>
#include <cstdint>

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "ops/ops.h"

namespace canvas {

struct HeadStreamOptions {
  float softcap = 0;      // > 0: logit = softcap * tanh(logit / softcap) (Gemma)
  float temperature = 1;  // the tempered distribution is softmax(logit / T); 0 = greedy (no noise)
  uint64_t seed = 0;      // Gumbel noise of (seed, row_ids[i], vocabulary index): see head_noise_uniform
  const uint64_t* row_ids = nullptr;  // [m] ids mixed into the noise (null: 0..m-1)
};

struct HeadRowStats {
  RowStats plain;      // of softmax(logit); same meaning as row_stats()
  RowStats tempered;   // of softmax(logit / T) (T = 0: equal to plain)
  int32_t sample = 0;  // argmax(logit / T + Gumbel) (T = 0: plain.argmax)
  float p_sample = 0;  // plain softmax probability of `sample`
};

// For m rows x (f32, [m x hidden], already final-normed) and a head / tied embedding table w of any
// dtype matmul() supports (w.rows() = vocab, w.cols() = hidden):
//   stats[i]                 the row statistics above, of logit[i] = softcap(x[i] . w[v]);
//   soft_embedding[i] (opt.) sum_v softmax(logit[i] / T)[v] * w[v] as f32, [m x hidden], the next step's
//                            self-conditioning input (softmax(logit[i]) at T = 0); null to skip.
// Bad arguments (hidden != w.cols(), T < 0 or NaN, softcap < 0, null stats) throw Error.
//
// Streaming: the vocabulary is cut into tiles (256-1024 entries, ~512 KiB of weight rows) and tiles
// into lanes of 8. Each lane runs on one thread: one matmul for its [m x lane] logits, then per tile
// each row's softmax sums are merged with online max rescaling (as in flash attention). Lanes are
// folded into the totals in lane order. Memory: O(m x lane) per thread plus a bounded wave of lane
// results, never [m x vocab].
//
// Determinism: tile and lane sizes depend on w's row size only, and every row's result is a fixed
// sequence of operations over its tiles and lanes in vocabulary order, so it is bitwise the same
// whatever the thread count, m and the other rows (given the SIMD level, as for every kernel here). The
// sample never depends on tiling either: the Gumbel noise is a hash of (seed, row id, vocabulary index).
void lm_head_stream(const TensorView& w, const float* x, int64_t m, int64_t hidden,
                    const HeadStreamOptions& opt, HeadRowStats* stats, float* soft_embedding,
                    ThreadPool* pool);

// The noise behind the sample: row i draws u = head_noise_uniform(head_noise_key(seed, row_id), v) for
// vocabulary entry v, and Gumbel noise -log(-log(u)). The key starts a splitmix64 stream and u is its
// v-th output, so every (seed, row id, index) gets an independent uniform in (0, 1).
inline uint64_t head_noise_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
inline uint64_t head_noise_key(uint64_t seed, uint64_t row_id) {
  return head_noise_mix(seed ^ head_noise_mix(row_id + 0x9e3779b97f4a7c15ull));
}
inline double head_noise_uniform(uint64_t key, int64_t index) {
  const uint64_t bits = head_noise_mix(key + uint64_t(index + 1) * 0x9e3779b97f4a7c15ull);
  return (double(bits >> 12) + 0.5) * 0x1.0p-52;  // 52 bits + 0.5 are exact: never 0, never 1
}
inline double head_gumbel(double u) {
  return -std::log(-std::log(u));
}

namespace reference {
// The obviously-correct twin: all logits materialised with matmul_reference, everything else in double
// with plain loops, the same noise. Tests compare lm_head_stream against it.
void lm_head_stream(const TensorView& w, const float* x, int64_t m, int64_t hidden,
                    const HeadStreamOptions& opt, HeadRowStats* stats, float* soft_embedding);
}  // namespace reference

}  // namespace canvas
