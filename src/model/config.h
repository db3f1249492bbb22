// Model configuration: plain data read from a file's metadata. Families differ only in these values.
#pragma once
#include <cstdint>
#include <string>

#include "ops/ops.h"

namespace canvas {

class GgufFile;

enum class Activation { Silu, GeluTanh };

struct ModelConfig {
  std::string arch;  // GGUF general.architecture, e.g. "llada", "dream", "llada-moe", "llama", "qwen2"
  std::string name;
  int64_t vocab = 0;
  int64_t hidden = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t ffn = 0;             // dense MLP width (0 when every layer is MoE)
  int64_t n_experts = 0;       // 0: dense MLP
  int64_t n_experts_used = 0;  // router top-k
  int64_t expert_ffn = 0;
  bool expert_weights_norm = false;  // renormalise the top-k router weights to sum 1
  float rms_eps = 1e-5f;
  RopeParams rope;
  bool qkv_bias = false;
  bool tied_output = false;
  float logit_softcap = 0;      // > 0: logits = c * tanh(logits / c)
  float embedding_scale = 1;
  Activation activation = Activation::Silu;
  bool causal = false;          // the model's native attention (false for diffusion models)
  bool shift_logits = false;    // Dream: row p-1 predicts token p
  int64_t context_length = 0;
  int64_t n_positions = 0;      // learned absolute position embeddings (position_embd.weight); 0: none
  int32_t mask_token = -1;      // absorbing-state [MASK] id (-1: none)
  int32_t bos_token = -1, eos_token = -1, pad_token = -1;

  bool is_moe() const { return n_experts > 0; }
  bool is_diffusion() const { return !causal; }
};

// Reads the configuration of a llama.cpp-style GGUF (llada, llada-moe, dream, llama, qwen2); throws Error
// naming the key for a missing or inconsistent value and for an unsupported architecture.
ModelConfig config_from_gguf(const GgufFile& file);

}  // namespace canvas
