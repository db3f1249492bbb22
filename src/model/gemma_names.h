// Tensor names of Gemma 4 / DiffusionGemma checkpoints: one canonical name per weight, and its names in
// Hugging Face safetensors and in llama.cpp's GGUF layout (PR #24423).
#pragma once
#include <functional>
#include <string>

namespace canvas::gemma_names {

// Canonical names are the Hugging Face names without the decoder prefix:
//   "embed_tokens.weight", "norm.weight", "layers.N.<suffix>" (e.g. "layers.3.self_attn.q_proj.weight",
//   "layers.3.experts.gate_up_proj", "layers.3.layer_scalar"), "self_conditioning.<suffix>", and
//   "encoder.layers.N.layer_scalar" for the encoder's copy of the layer scalar.

// The GGUF name ("blk.3.attn_q.weight"); "" for a name that is not a Gemma text-stack weight.
std::string to_gguf(const std::string& canonical);

// The Hugging Face name: decoder_prefix + canonical ("model.decoder." for DiffusionGemma), and
// "model.encoder.language_model.layers.N.layer_scalar" for the encoder scalars.
std::string to_hf(const std::string& canonical, const std::string& decoder_prefix);

// Inverse of to_hf; "" for a tensor outside the text stack (e.g. a vision tower) or unknown.
std::string from_hf(const std::string& hf_name, const std::string& decoder_prefix);

// The decoder prefix of a Hugging Face checkpoint: "model.decoder." (DiffusionGemma),
// "model.language_model." (multimodal Gemma 4) or "model." (text-only), whichever holds
// embed_tokens.weight; "" when none does.
std::string decoder_prefix(const std::function<bool(const std::string&)>& has_tensor);

}  // namespace canvas::gemma_names
