// Model configuration: plain data read from a file's metadata. Families differ only in these values.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ops/ops.h"

namespace canvas {

class GgufFile;
class GgufWriter;

enum class Activation { Silu, GeluTanh };

// How a layer arranges its norms and MLPs around the residual stream.
enum class LayerStyle {
  PreNorm,  // x += attn(norm(x)); x += mlp_or_moe(norm(x))                (llama, llada, dream, qwen2)
  Gemma4,   // norms before and after attention and MLP, a dense MLP in parallel with the experts, and
            // the whole layer output (residual included) times a per-layer scalar (diffusion-gemma, gemma4;
            // gemma3 has the same layer without experts, v norm or scalar)
};

enum class AttentionKind { Full, Sliding };

// The attention geometry of one layer. Families whose layers all agree leave
// ModelConfig::layer_attention empty; Gemma 4 mixes sliding and full layers of different widths.
struct LayerAttention {
  AttentionKind kind = AttentionKind::Full;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  RopeParams rope;
  bool value_from_key = false;  // no v_proj: V is the raw k_proj output (Gemma 4 attention_k_eq_v)
};

struct ModelConfig {
  std::string arch;  // GGUF general.architecture, e.g. "llada", "dream", "llada-moe", "llama", "qwen2"
  std::string name;
  // GGUF diffusion.default_mode: the mode --mode auto runs ("" none: canvas chooses, Generator::resolve).
  std::string default_mode;
  // DiffusionGemma in the release's form (its HF directory, or a GGUF converted from one, with no
  // training.* keys of canvas's own trainer): --mode auto denoises whole canvases of canvas_length with the
  // reference's sampler, as transformers' generate() does (default_mode is "diffusion"). canvas's own
  // DiffusionGemma checkpoints were trained with an AR loss through the encoder and keep auto's measured
  // choice among ar and verify.
  bool release_form = false;
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
  // Uniform-state diffusion (no mask token; DiffusionGemma's sampler): canvas's own models say so with
  // diffusion.kind = "uniform"; row i of a causal (encoder) pass predicts token i + 1.
  bool uniform_state = false;
  // Self-conditioning for canvas's own (non-Gemma) models, GGUF diffusion.self_conditioning: a forward
  // given the previous step's logits adds mlp(norm(softmax(logits) @ E * embedding_scale)) to its input
  // embeddings (Model::self_conditioning, width ffn). DiffusionGemma's decoder has it through has_decoder.
  bool self_conditioning = false;
  int32_t bos_token = -1, eos_token = -1, pad_token = -1;

  // ---- per-layer attention and the Gemma 4 layer (defaults leave the other families unchanged) ----
  LayerStyle layer_style = LayerStyle::PreNorm;
  std::vector<LayerAttention> layer_attention;  // [n_layers], or empty: every layer is attention_of's default
  int64_t sliding_window = 0;  // sliding layers: query q sees keys j with 0 <= q - j < sliding_window
  bool qk_norm = false;        // RMSNorm with a weight over each head of q and of k, before RoPE
  bool v_norm = false;         // RMSNorm without weight over each head of v
  bool layer_scalar = false;   // Gemma 4: the layer output times layer_output_scale.weight (absent in Gemma 3)
  float attention_scale = 0;   // scale of q.k; 0: 1/sqrt(head_dim)
  bool dense_and_moe = false;  // Gemma4 style: dense MLP and experts in parallel in every layer
  bool router_norm = false;    // router input = rmsnorm_noweight(x) * router_scale / sqrt(hidden)
  bool has_decoder = false;    // DiffusionGemma: a bidirectional decoder mode with a self-conditioning MLP

  bool is_moe() const { return n_experts > 0; }
  // Layer l's attention geometry (from layer_attention, or the uniform n_kv_heads / head_dim / rope).
  LayerAttention attention_of(int64_t layer) const {
    if (!layer_attention.empty()) return layer_attention[size_t(layer)];
    LayerAttention a;
    a.n_kv_heads = n_kv_heads;
    a.head_dim = head_dim;
    a.rope = rope;
    return a;
  }
  bool is_diffusion() const { return !causal; }
};

// Reads the configuration of a llama.cpp-style GGUF (llada, llada-moe, dream, llama, qwen2); throws Error
// naming the key for a missing or inconsistent value and for an unsupported architecture.
// diffusion-gemma and gemma4 (llama.cpp PR #24423 keys) and gemma3 (llama.cpp's keys) are read here too.
ModelConfig config_from_gguf(const GgufFile& file);

// The twin of config_from_gguf: writes the metadata it reads back as `config` (architecture keys, token
// ids; canvas's own keys for uniform-state diffusion, self-conditioning and the embedding scale). Throws
// Error naming the field when a GGUF of this architecture cannot express the config (e.g. a llada
// model with the NEOX RoPE layout, or Gemma 4 sliding layers of different widths): such a file would
// load as a different model.
void config_to_gguf(const ModelConfig& config, GgufWriter& writer);

// Gemma 4's proportional RoPE on full layers is stored as the generated tensor rope_freqs.weight
// ([full head dim / 2] f32: 1 for a rotating pair, 1e30 for a pair at frequency 0). Its values for this
// config, or empty when every pair rotates (or the family has no such tensor).
std::vector<float> gguf_rope_freqs(const ModelConfig& config);

// A special token id (bos, eos, pad, mask) read from `key` of the file `origin`: negative values and values
// at or past `vocab` are an Error naming the file, the key and the vocabulary (an id outside it would index
// past the embedding, or drop EOS without a word). Returns it as an int32.
int32_t checked_token_id(int64_t id, int64_t vocab, const std::string& origin, const std::string& key);
// The config's bos, eos, pad and mask ids (where set: >= 0) checked so against c.vocab, as GGUF keys.
void check_token_ids(const ModelConfig& c, const std::string& origin);

// Reads a Hugging Face config.json: LLaDA, LLaDA-MoE, Dream, Qwen2 or Llama in their published layouts
// (model/hf_families.h, docs/formats.md), or a Gemma 4 / DiffusionGemma text config (nested under
// "text_config" or at the top level). `path` is the config.json itself; errors name it and the key at fault.
ModelConfig config_from_hf(const std::string& path);

}  // namespace canvas
