// The per-tensor description of every family: llama-style (llama, llada, dream, qwen2, llada-moe, and
// canvas's own models) and Gemma 4 / DiffusionGemma.
#include "model/tensors.h"

#include "core/error.h"
#include "model/gemma_names.h"

namespace canvas {

int64_t TensorSpec::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

struct SpecList {
  std::vector<TensorSpec>& out;
  int64_t layer = -1;
  void add(TensorRole role, std::string gguf, std::string hf, std::vector<int64_t> shape, TensorKind kind,
           TensorInit init, bool optional = false) {
    for (int64_t d : shape)
      check(d > 0, "model tensor '" + gguf + "': the configuration gives it a non-positive dimension");
    TensorSpec s;
    s.role = role;
    s.layer = layer;
    s.gguf = std::move(gguf);
    s.hf = std::move(hf);
    s.shape = std::move(shape);
    s.kind = kind;
    s.init = init;
    s.optional = optional;
    out.push_back(std::move(s));
  }
  // A Gemma tensor named by its canonical (Hugging Face) name; the GGUF name follows from the table.
  void gemma(TensorRole role, const std::string& canonical, std::vector<int64_t> shape, TensorKind kind,
             TensorInit init, bool optional = false) {
    const std::string gguf = gemma_names::to_gguf(canonical);
    check(!gguf.empty(), "model tensors: no GGUF name for '" + canonical + "'");
    add(role, gguf, canonical, std::move(shape), kind, init, optional);
  }
};

// Hugging Face names of the llama-style families, per published layout (docs/formats.md): LLaDA keeps
// OLMo's names, Dream / Qwen2 / Llama / LLaDA-MoE the transformers Llama names.
struct HfNames {
  enum class Layout { None, Olmo, Llama } layout = Layout::None;
  explicit HfNames(const std::string& arch) {
    if (arch == "llada") layout = Layout::Olmo;
    if (arch == "dream" || arch == "qwen2" || arch == "llama" || arch == "llada-moe") layout = Layout::Llama;
  }
  std::string global(const char* olmo, const char* llama) const {
    return layout == Layout::Olmo ? olmo : layout == Layout::Llama ? llama : "";
  }
  std::string layer(int64_t l, const char* olmo, const char* llama) const {
    if (layout == Layout::None) return "";
    const std::string n = std::to_string(l);
    return layout == Layout::Olmo ? "model.transformer.blocks." + n + "." + olmo : "model.layers." + n + "." + llama;
  }
};

void llama_tensors(const ModelConfig& c, std::vector<TensorSpec>& out) {
  const int64_t H = c.hidden;
  using K = TensorKind;
  using I = TensorInit;
  SpecList s{out};
  const HfNames hf(c.arch);
  s.add(TensorRole::TokenEmbd, "token_embd.weight", hf.global("model.transformer.wte.weight", "model.embed_tokens.weight"),
        {H, c.vocab}, K::Matrix, I::Normal);
  if (c.n_positions > 0)
    s.add(TensorRole::PositionEmbd, "position_embd.weight", "", {H, c.n_positions}, K::F32Matrix, I::Normal);
  if (c.self_conditioning) {
    s.add(TensorRole::SelfCondNorm, "self_cond.norm.weight", "", {H}, K::Vector, I::One);
    s.add(TensorRole::SelfCondGate, "self_cond.gate.weight", "", {H, c.ffn}, K::Matrix, I::Normal);
    s.add(TensorRole::SelfCondUp, "self_cond.up.weight", "", {H, c.ffn}, K::Matrix, I::Normal);
    s.add(TensorRole::SelfCondDown, "self_cond.down.weight", "", {c.ffn, H}, K::Matrix, I::Zero);
  }
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerAttention a = c.attention_of(l);
    const int64_t q_width = c.n_heads * a.head_dim, kv_width = a.n_kv_heads * a.head_dim;
    const std::string b = "blk." + std::to_string(l) + ".";
    s.layer = l;
    s.add(TensorRole::AttnNorm, b + "attn_norm.weight", hf.layer(l, "attn_norm.weight", "input_layernorm.weight"), {H},
          K::Vector, I::One);
    s.add(TensorRole::Wq, b + "attn_q.weight", hf.layer(l, "q_proj.weight", "self_attn.q_proj.weight"), {H, q_width},
          K::Matrix, I::Normal);
    s.add(TensorRole::Wk, b + "attn_k.weight", hf.layer(l, "k_proj.weight", "self_attn.k_proj.weight"), {H, kv_width},
          K::Matrix, I::Normal);
    s.add(TensorRole::Wv, b + "attn_v.weight", hf.layer(l, "v_proj.weight", "self_attn.v_proj.weight"), {H, kv_width},
          K::Matrix, I::Normal);
    if (c.qkv_bias) {
      s.add(TensorRole::Bq, b + "attn_q.bias", hf.layer(l, "q_proj.bias", "self_attn.q_proj.bias"), {q_width},
            K::Vector, I::Zero);
      s.add(TensorRole::Bk, b + "attn_k.bias", hf.layer(l, "k_proj.bias", "self_attn.k_proj.bias"), {kv_width},
            K::Vector, I::Zero);
      s.add(TensorRole::Bv, b + "attn_v.bias", hf.layer(l, "v_proj.bias", "self_attn.v_proj.bias"), {kv_width},
            K::Vector, I::Zero);
    }
    if (c.qk_norm) {  // LLaDA-MoE's qk_layernorm: one RMSNorm weight per head dim, shared by the heads
      s.add(TensorRole::QNorm, b + "attn_q_norm.weight", hf.layer(l, "q_norm.weight", "self_attn.q_norm.weight"),
            {a.head_dim}, K::Vector, I::One);
      s.add(TensorRole::KNorm, b + "attn_k_norm.weight", hf.layer(l, "k_norm.weight", "self_attn.k_norm.weight"),
            {a.head_dim}, K::Vector, I::One);
    }
    s.add(TensorRole::Wo, b + "attn_output.weight", hf.layer(l, "attn_out.weight", "self_attn.o_proj.weight"),
          {q_width, H}, K::Matrix, I::Residual);
    s.add(TensorRole::FfnNorm, b + "ffn_norm.weight", hf.layer(l, "ff_norm.weight", "post_attention_layernorm.weight"),
          {H}, K::Vector, I::One);
    if (c.is_moe()) {
      const int64_t E = c.n_experts, F = c.expert_ffn;
      s.add(TensorRole::Router, b + "ffn_gate_inp.weight", hf.layer(l, "mlp.gate.weight", "mlp.gate.weight"), {H, E},
            K::Matrix, I::Normal);
      s.add(TensorRole::GateExps, b + "ffn_gate_exps.weight",
            hf.layer(l, "mlp.experts.*.gate_proj.weight", "mlp.experts.*.gate_proj.weight"), {H, F, E}, K::Matrix,
            I::Normal);
      s.add(TensorRole::UpExps, b + "ffn_up_exps.weight",
            hf.layer(l, "mlp.experts.*.up_proj.weight", "mlp.experts.*.up_proj.weight"), {H, F, E}, K::Matrix,
            I::Normal);
      s.add(TensorRole::DownExps, b + "ffn_down_exps.weight",
            hf.layer(l, "mlp.experts.*.down_proj.weight", "mlp.experts.*.down_proj.weight"), {F, H, E}, K::Matrix,
            I::Residual);
    } else {
      s.add(TensorRole::Gate, b + "ffn_gate.weight", hf.layer(l, "ff_proj.weight", "mlp.gate_proj.weight"), {H, c.ffn},
            K::Matrix, I::Normal);
      s.add(TensorRole::Up, b + "ffn_up.weight", hf.layer(l, "up_proj.weight", "mlp.up_proj.weight"), {H, c.ffn},
            K::Matrix, I::Normal);
      s.add(TensorRole::Down, b + "ffn_down.weight", hf.layer(l, "ff_out.weight", "mlp.down_proj.weight"), {c.ffn, H},
            K::Matrix, I::Residual);
    }
  }
  s.layer = -1;
  s.add(TensorRole::OutputNorm, "output_norm.weight", hf.global("model.transformer.ln_f.weight", "model.norm.weight"),
        {H}, K::Vector, I::One);
  if (!c.tied_output)
    s.add(TensorRole::Output, "output.weight", hf.global("model.transformer.ff_out.weight", "lm_head.weight"),
          {H, c.vocab}, K::Matrix, I::Normal);
}

// Gemma 4 (diffusiongemma.md section 5): tied head, no biases, no learned positions.
void gemma_tensors(const ModelConfig& c, std::vector<TensorSpec>& out) {
  const int64_t H = c.hidden, F = c.ffn, E = c.n_experts, I_ = c.expert_ffn;
  using K = TensorKind;
  using I = TensorInit;
  check(c.tied_output, "model tensors: Gemma 4 ties the head to the embedding (tied_output must be set)");
  check(!c.qkv_bias && c.n_positions == 0 && !c.self_conditioning,
        "model tensors: Gemma 4 has no attention biases, learned positions or canvas-style self-conditioning");
  SpecList s{out};
  s.gemma(TensorRole::TokenEmbd, "embed_tokens.weight", {H, c.vocab}, K::Matrix, I::Normal);
  if (c.has_decoder) {
    s.gemma(TensorRole::SelfCondNorm, "self_conditioning.pre_norm.weight", {H}, K::Vector, I::One);
    s.gemma(TensorRole::SelfCondGate, "self_conditioning.gate_proj.weight", {H, F}, K::Matrix, I::Normal);
    s.gemma(TensorRole::SelfCondUp, "self_conditioning.up_proj.weight", {H, F}, K::Matrix, I::Normal);
    s.gemma(TensorRole::SelfCondDown, "self_conditioning.down_proj.weight", {F, H}, K::Matrix, I::Zero);
  }
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerAttention a = c.attention_of(l);
    const int64_t D = a.head_dim, q_width = c.n_heads * D, kv_width = a.n_kv_heads * D;
    const std::string b = "layers." + std::to_string(l) + ".";
    s.layer = l;
    s.gemma(TensorRole::AttnNorm, b + "input_layernorm.weight", {H}, K::Vector, I::One);
    s.gemma(TensorRole::Wq, b + "self_attn.q_proj.weight", {H, q_width}, K::Matrix, I::Normal);
    s.gemma(TensorRole::Wk, b + "self_attn.k_proj.weight", {H, kv_width}, K::Matrix, I::Normal);
    if (!a.value_from_key)
      s.gemma(TensorRole::Wv, b + "self_attn.v_proj.weight", {H, kv_width}, K::Matrix, I::Normal);
    s.gemma(TensorRole::Wo, b + "self_attn.o_proj.weight", {q_width, H}, K::Matrix, I::Residual);
    s.gemma(TensorRole::QNorm, b + "self_attn.q_norm.weight", {D}, K::Vector, I::One);
    s.gemma(TensorRole::KNorm, b + "self_attn.k_norm.weight", {D}, K::Vector, I::One);
    s.gemma(TensorRole::PostAttnNorm, b + "post_attention_layernorm.weight", {H}, K::Vector, I::One);
    s.gemma(TensorRole::FfnNorm, b + "pre_feedforward_layernorm.weight", {H}, K::Vector, I::One);
    s.gemma(TensorRole::PostFfnNorm, b + "post_feedforward_layernorm.weight", {H}, K::Vector, I::One);
    s.gemma(TensorRole::Gate, b + "mlp.gate_proj.weight", {H, F}, K::Matrix, I::Normal);
    s.gemma(TensorRole::Up, b + "mlp.up_proj.weight", {H, F}, K::Matrix, I::Normal);
    s.gemma(TensorRole::Down, b + "mlp.down_proj.weight", {F, H}, K::Matrix, I::Residual);
    if (c.is_moe()) {
      s.gemma(TensorRole::PostFfnNorm1, b + "post_feedforward_layernorm_1.weight", {H}, K::Vector, I::One);
      s.gemma(TensorRole::PreFfnNorm2, b + "pre_feedforward_layernorm_2.weight", {H}, K::Vector, I::One);
      s.gemma(TensorRole::PostFfnNorm2, b + "post_feedforward_layernorm_2.weight", {H}, K::Vector, I::One);
      s.gemma(TensorRole::Router, b + "router.proj.weight", {H, E}, K::Matrix, I::Normal);
      s.gemma(TensorRole::RouterScale, b + "router.scale", {H}, K::Vector, I::One);
      s.gemma(TensorRole::PerExpertScale, b + "router.per_expert_scale", {E}, K::Vector, I::One);
      s.gemma(TensorRole::GateUpExps, b + "experts.gate_up_proj", {H, 2 * I_, E}, K::Matrix, I::Normal);
      s.gemma(TensorRole::DownExps, b + "experts.down_proj", {I_, H, E}, K::Matrix, I::Residual);
    }
    if (c.layer_scalar) s.gemma(TensorRole::LayerScalar, b + "layer_scalar", {1}, K::Scalar, I::One);
    if (c.has_decoder)
      s.gemma(TensorRole::EncoderLayerScalar, "encoder." + b + "layer_scalar", {1}, K::Scalar, I::One, true);
  }
  s.layer = -1;
  s.gemma(TensorRole::OutputNorm, "norm.weight", {H}, K::Vector, I::One);
}

}  // namespace

std::vector<TensorSpec> model_tensors(const ModelConfig& c) {
  check(c.vocab > 0 && c.hidden > 0 && c.n_layers > 0 && c.n_heads > 0,
        "model tensors: vocab, hidden size, layers and heads must be positive");
  check(c.is_moe() ? (c.n_experts_used > 0 && c.n_experts_used <= c.n_experts && c.expert_ffn > 0) : c.ffn > 0,
        "model tensors: the MLP needs ffn > 0, or experts with 0 < used <= count and an expert width");
  check(!c.self_conditioning || c.ffn > 0, "model tensors: self-conditioning needs ffn > 0 (its MLP's width)");
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerAttention a = c.attention_of(l);
    check(a.n_kv_heads > 0 && a.head_dim > 0 && c.n_heads % a.n_kv_heads == 0,
          "model tensors: layer " + std::to_string(l) + " needs positive KV heads dividing the " +
              std::to_string(c.n_heads) + " query heads, and a positive head dim");
  }
  std::vector<TensorSpec> out;
  if (c.layer_style == LayerStyle::Gemma4) {
    check(c.ffn > 0, "model tensors: Gemma 4 needs the dense MLP width (ffn)");
    gemma_tensors(c, out);
  } else {
    llama_tensors(c, out);
  }
  return out;
}

}  // namespace canvas
