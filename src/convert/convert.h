// Checkpoint conversion: a Hugging Face safetensors directory to one GGUF file (optionally re-typed), and
// a GGUF model back to its family's Hugging Face layout.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/gguf.h"
#include "io/json.h"
#include "convert/retype.h"

namespace canvas {

// What convert_hf_to_gguf wrote.
struct GgufConversion {
  std::string arch;       // the GGUF architecture (llada, dream, gemma4, ...)
  RetypeReport report;    // tensors per stored type, and every fallback from the requested type
  int64_t skipped = 0;    // checkpoint tensors outside the text stack (e.g. a vision tower)
  std::string tokenizer;  // what became of tokenizer.json, e.g. "tokenizer 320 tokens, 60 merges"
};

// Writes the checkpoint at `in_path` (a directory, or its config.json) as one GGUF file `out_path`
// (written to OUT.tmp, then renamed) in llama.cpp's names and keys for its family. The checkpoint is loaded
// and checked completely first. Vectors stay f32; matrices get `type` (a type matmul_supports), except
// where stored_type falls back. generation_config.json fills DiffusionGemma's diffusion.* keys;
// tokenizer.json becomes the GGUF tokenizer when the GGUF form holds it exactly (else it is skipped and
// on_tokenizer_skipped says why; a malformed one is an Error).
GgufConversion convert_hf_to_gguf(const std::string& in_path, const std::string& out_path, DType type,
                                  const ConversionCallbacks& callbacks = {});

// DiffusionGemma's diffusion.* keys as llama.cpp's branch writes them: canvas_length, and the entropy-bound
// sampler's defaults from a generation_config.json `generation` (missing values: the branch's runtime
// defaults, max_denoising_steps 48, t 0.4..0.8, entropy_bound 0.1, stability 1, confidence 0.005).
void write_diffusion_gemma_keys(int64_t canvas_length, const JsonDocument& generation, GgufWriter& w);

// The files convert_hf_to_gguf may read for `in_path`: the checkpoint directory's .json and .safetensors
// files (config, generation config, tokenizer, weights and their shard index).
std::vector<std::string> hf_checkpoint_files(const std::string& in_path);

// What convert_gguf_to_hf wrote.
struct HfExport {
  std::string arch;       // canvas's architecture name
  std::string layout;     // the Hugging Face class (config.json's architectures[0])
  size_t tensors = 0;     // safetensors entries (an expert stack is one per expert)
  std::string tokenizer;  // "tokenizer.json 320 tokens" or "no tokenizer in the GGUF"
};

// Writes the GGUF model at `in_path` as out_dir/model.safetensors + config.json (+ tokenizer.json when the
// GGUF has a tokenizer) in its family's published layout (llada, llada-moe, dream, qwen2, llama). Quantised
// matrices are dequantised; `type` (f32, f16 or bf16) is the stored type. A model the layout cannot hold
// is refused naming what is missing (hf_config_json). The files are written into a sibling folder and swapped
// in whole: an existing out_dir ends as the old checkpoint or the new one, never a mix, and a failure leaves
// no partial files; an existing out_dir holding anything but checkpoint files (a README, .git, the input)
// is refused before anything is written.
HfExport convert_gguf_to_hf(const std::string& in_path, const std::string& out_dir, DType type);

}  // namespace canvas
