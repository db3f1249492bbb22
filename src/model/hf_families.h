// The Hugging Face layouts of the llama-style families (LLaDA, LLaDA-MoE, Dream, and Qwen2 / Llama):
// config.json keys in and out, and the Q/K row order that differs between their layout and GGUF's.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/tensor.h"
#include "model/config.h"

namespace canvas {

class JsonDocument;

// The canvas architecture of a config.json in one of these layouts ("llada", "llada-moe", "dream",
// "qwen2", "llama"), from `architectures` (LLaDAModelLM, LLaDAMoEModelLM, DreamModel, Qwen2ForCausalLM,
// LlamaForCausalLM), or from `model_type` when `architectures` is absent or empty; "" when it is none of
// them (e.g. Gemma 4).
std::string hf_llama_family(const JsonDocument& doc);

// Reads such a config.json (keys per family in docs/formats.md). The result describes the checkpoint as
// canvas binds it after Model::load_safetensors has put Q/K rows in GGUF order (hf_rope_permuted): the
// same configuration a GGUF of that family gives. vocab is the config's (the embedding's rows decide at
// load). `tokenizer_json` (may be "") is searched for the mask token when the config names none.
// Throws Error naming the file and the key for a missing or invalid value and for a feature canvas does
// not compute (biases outside q/k/v, dense layers in LLaDA-MoE, a sigmoid router, RoPE scaling, ...).
ModelConfig llama_family_config_from_hf(const JsonDocument& doc, const std::string& arch,
                                        const std::string& tokenizer_json);

// The config.json of `c` in its family's published layout (plus architectures and model_type), for
// export. Throws Error naming what the layout cannot hold (canvas's self-conditioning, learned position
// embeddings, uniform-state diffusion, an architecture without a Hugging Face layout here).
nlohmann::ordered_json hf_config_json(const ModelConfig& c);

// Whether the family's Hugging Face Q/K rows are in the split-half order while its GGUF rows are in the
// consecutive-pair order (llama.cpp permutes LLaDA and Llama at conversion): true for "llada", "llama".
bool hf_rope_permuted(const std::string& arch);

// Reorders the rows of a Q or K projection (or its bias: a 1-row view whose elements are reordered) of
// `heads` heads of `head_dim` rows each between the two orders: to_gguf moves row h*D + j*D/2 + i to
// h*D + 2i + j; !to_gguf is the inverse. `out` receives t.bytes() bytes.
void permute_rope_rows(const TensorView& t, int64_t heads, int64_t head_dim, bool to_gguf, void* out);

}  // namespace canvas
