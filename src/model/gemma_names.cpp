// The Gemma 4 / DiffusionGemma name table: Hugging Face suffixes and their GGUF counterparts.
#include "model/gemma_names.h"

#include <cctype>
#include <cstring>

namespace canvas::gemma_names {
namespace {

struct NamePair {
  const char* hf;    // after "layers.N." (per layer) or at the top of the decoder
  const char* gguf;  // after "blk.N." (per layer) or the whole name
};

constexpr NamePair kLayerNames[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
    {"post_feedforward_layernorm_1.weight", "post_ffw_norm_1.weight"},
    {"pre_feedforward_layernorm_2.weight", "pre_ffw_norm_2.weight"},
    {"post_feedforward_layernorm_2.weight", "post_ffw_norm_2.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"router.proj.weight", "ffn_gate_inp.weight"},
    {"router.scale", "ffn_gate_inp.scale"},
    {"router.per_expert_scale", "ffn_down_exps.scale"},
    {"experts.gate_up_proj", "ffn_gate_up_exps.weight"},
    {"experts.down_proj", "ffn_down_exps.weight"},
    {"layer_scalar", "layer_output_scale.weight"},
};

constexpr NamePair kGlobalNames[] = {
    {"embed_tokens.weight", "token_embd.weight"},
    {"norm.weight", "output_norm.weight"},
    {"self_conditioning.pre_norm.weight", "self_cond_pre_norm.weight"},
    {"self_conditioning.gate_proj.weight", "self_cond_gate.weight"},
    {"self_conditioning.up_proj.weight", "self_cond_up.weight"},
    {"self_conditioning.down_proj.weight", "self_cond_down.weight"},
};

constexpr const char* kEncoderHfPrefix = "model.encoder.language_model.";

// "<prefix>N.<rest>" -> N and rest; false when the name does not have that form.
bool split_layer(const std::string& name, const std::string& prefix, std::string* index, std::string* rest) {
  if (name.compare(0, prefix.size(), prefix) != 0) return false;
  size_t i = prefix.size();
  const size_t start = i;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) ++i;
  if (i == start || i - start > 9 || i >= name.size() || name[i] != '.') return false;
  *index = name.substr(start, i - start);
  *rest = name.substr(i + 1);
  return true;
}

}  // namespace

std::string to_gguf(const std::string& canonical) {
  std::string index, rest;
  if (split_layer(canonical, "encoder.layers.", &index, &rest))
    return rest == "layer_scalar" ? "blk." + index + ".enc_layer_output_scale.weight" : "";
  if (split_layer(canonical, "layers.", &index, &rest)) {
    for (const NamePair& p : kLayerNames)
      if (rest == p.hf) return "blk." + index + "." + p.gguf;
    return "";
  }
  for (const NamePair& p : kGlobalNames)
    if (canonical == p.hf) return p.gguf;
  return "";
}

std::string to_hf(const std::string& canonical, const std::string& decoder_prefix) {
  if (canonical.compare(0, 8, "encoder.") == 0) return kEncoderHfPrefix + canonical.substr(8);
  return decoder_prefix + canonical;
}

std::string from_hf(const std::string& hf_name, const std::string& decoder_prefix) {
  std::string canonical;
  const std::string encoder_prefix = kEncoderHfPrefix;
  if (hf_name.compare(0, encoder_prefix.size(), encoder_prefix) == 0) {
    canonical = "encoder." + hf_name.substr(encoder_prefix.size());
  } else if (hf_name.compare(0, decoder_prefix.size(), decoder_prefix) == 0) {
    canonical = hf_name.substr(decoder_prefix.size());
  } else {
    return "";
  }
  return to_gguf(canonical).empty() ? "" : canonical;
}

std::string decoder_prefix(const std::function<bool(const std::string&)>& has_tensor) {
  for (const char* candidate : {"model.decoder.", "model.language_model.", "model."})
    if (has_tensor(std::string(candidate) + "embed_tokens.weight")) return candidate;
  return "";
}

}  // namespace canvas::gemma_names
