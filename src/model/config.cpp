// Reading a ModelConfig from llama.cpp-style GGUF metadata.
#include "model/config.h"

#include "core/error.h"
#include "io/gguf.h"

namespace canvas {
namespace {

struct ArchTraits {
  const char* arch;
  RopeLayout rope_layout;
  bool causal;         // native attention
  bool shift_default;  // diffusion.shift_logits when absent
};

// RoPE layouts follow llama.cpp's converters: llada/llama Q/K are permuted for the consecutive-pair
// rotation; dream, qwen2 and llada-moe keep the split-half (NEOX) rotation.
constexpr ArchTraits kArchs[] = {
    {"llada", RopeLayout::Normal, false, false},   {"llada-moe", RopeLayout::Neox, false, false},
    {"dream", RopeLayout::Neox, false, true},      {"llama", RopeLayout::Normal, true, false},
    {"qwen2", RopeLayout::Neox, true, false},
};

}  // namespace

ModelConfig config_from_gguf(const GgufFile& file) {
  ModelConfig c;
  c.arch = file.require_string("general.architecture");
  const ArchTraits* traits = nullptr;
  for (const ArchTraits& t : kArchs)
    if (c.arch == t.arch) traits = &t;
  if (!traits) {
    std::string known;
    for (const ArchTraits& t : kArchs) known += std::string(known.empty() ? "" : ", ") + t.arch;
    throw Error(file.path() + ": unsupported architecture '" + c.arch + "' (supported: " + known + ")");
  }
  const std::string p = c.arch + ".";
  c.name = file.get_string("general.name", "");
  c.hidden = file.require_int(p + "embedding_length");
  c.n_layers = file.require_int(p + "block_count");
  c.n_heads = file.require_int(p + "attention.head_count");
  c.n_kv_heads = file.get_int(p + "attention.head_count_kv", c.n_heads);
  c.ffn = file.get_int(p + "feed_forward_length", 0);
  c.context_length = file.get_int(p + "context_length", 4096);
  c.rms_eps = float(file.get_float(p + "attention.layer_norm_rms_epsilon", 1e-5));
  c.n_experts = file.get_int(p + "expert_count", 0);
  c.n_experts_used = file.get_int(p + "expert_used_count", 0);
  c.expert_ffn = file.get_int(p + "expert_feed_forward_length", c.ffn);
  c.expert_weights_norm = file.get_bool(p + "expert_weights_norm", false);
  c.logit_softcap = float(file.get_float(p + "final_logit_softcapping", 0.0));
  c.causal = file.get_bool(p + "attention.causal", traits->causal);
  c.shift_logits = file.get_bool("diffusion.shift_logits", traits->shift_default);
  if (c.causal) c.shift_logits = true;  // an AR model's row p predicts token p + 1

  auto positive = [&](int64_t v, const std::string& key) {
    check(v > 0 && v < (int64_t(1) << 31), file.path() + ": key " + key + " has invalid value " + std::to_string(v));
  };
  positive(c.hidden, p + "embedding_length");
  positive(c.n_layers, p + "block_count");
  positive(c.n_heads, p + "attention.head_count");
  positive(c.n_kv_heads, p + "attention.head_count_kv");
  check(c.n_heads % c.n_kv_heads == 0,
        file.path() + ": attention.head_count " + std::to_string(c.n_heads) +
            " is not a multiple of attention.head_count_kv " + std::to_string(c.n_kv_heads));
  c.head_dim = file.get_int(p + "attention.key_length", c.hidden / c.n_heads);
  positive(c.head_dim, p + "attention.key_length");
  if (c.is_moe()) {
    check(c.n_experts_used > 0 && c.n_experts_used <= c.n_experts,
          file.path() + ": expert_used_count must be in 1.." + std::to_string(c.n_experts));
    positive(c.expert_ffn, p + "expert_feed_forward_length");
  } else {
    positive(c.ffn, p + "feed_forward_length");
  }

  c.rope.layout = traits->rope_layout;
  c.rope.head_dim = int(c.head_dim);
  c.rope.rot_dims = int(file.get_int(p + "rope.dimension_count", c.head_dim));
  check(c.rope.rot_dims > 0 && c.rope.rot_dims <= c.head_dim && c.rope.rot_dims % 2 == 0,
        file.path() + ": rope.dimension_count " + std::to_string(c.rope.rot_dims) + " must be even and <= head dim " +
            std::to_string(c.head_dim));
  c.rope.theta = float(file.get_float(p + "rope.freq_base", 10000.0));

  c.mask_token = int32_t(file.get_int("tokenizer.ggml.mask_token_id", -1));
  c.bos_token = int32_t(file.get_int("tokenizer.ggml.bos_token_id", -1));
  c.eos_token = int32_t(file.get_int("tokenizer.ggml.eos_token_id", -1));
  c.pad_token = int32_t(file.get_int("tokenizer.ggml.padding_token_id", -1));
  return c;
}

}  // namespace canvas
