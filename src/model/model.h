// A transformer bound to its weights, and its forward pass over new tokens against a KV cache.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "model/config.h"
#include "model/kv_cache.h"

namespace canvas {

class GgufFile;

struct LayerWeights {
  TensorView attn_norm, wq, wk, wv, wo;
  TensorView bq, bk, bv;  // data == nullptr when absent
  TensorView ffn_norm;
  TensorView gate, up, down;                       // dense MLP
  TensorView router, gate_exps, up_exps, down_exps;  // MoE
};

struct Model {
  ModelConfig config;
  std::shared_ptr<GgufFile> file;  // keeps the memory map alive
  TensorView token_embd, output_norm, output;
  TensorView position_embd;  // optional learned absolute positions [hidden, n_positions] (GPT-2 style)
  std::vector<LayerWeights> layers;

  // Loads a GGUF; checks every tensor's presence, dtype and shape against the config.
  static Model load(const std::string& path);
  int64_t parameter_count() const;
  int64_t weight_bytes() const;
};

// One forward pass: n new tokens at positions pos0 .. pos0+n-1. Their K/V are written into the cache
// at those positions (with their visibility groups); attention then reads keys [0, key_end), which may
// include positions beyond the new tokens (already filled, e.g. a stale suffix). Key j is visible to a
// new token iff cache.group[j] <= that token's group.
struct ForwardRequest {
  const int32_t* tokens = nullptr;
  int64_t n = 0;
  int64_t pos0 = 0;
  const int32_t* groups = nullptr;  // [n]
  int64_t key_end = 0;              // 0: pos0 + n
  // Rows (indices into the n new tokens) whose logits are wanted, in this order; empty: none.
  std::vector<int32_t> logit_rows;
  float* logits = nullptr;          // [logit_rows.size()][vocab]
};

void forward(const Model& model, KvCache& cache, const ForwardRequest& request, ThreadPool* pool);

}  // namespace canvas
