// canvas convert: a Hugging Face Gemma 4 / DiffusionGemma safetensors checkpoint to GGUF (llama.cpp
// PR #24423 names and keys), optionally re-typed to f16 / bf16 or a quantised type.
#include <cmath>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "args.h"
#include "progress.h"
#include "retype.h"
#include "commands.h"
#include "core/error.h"
#include "io/gguf.h"
#include "io/hf_tokenizer.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "model/gemma_names.h"
#include "model/model.h"
#include "model/tensors.h"
#include "ops/matmul.h"

namespace canvas::cli {
namespace {

const Command kConvert{
    "convert",
    "canvas convert --in HF_DIR --out FILE.gguf [--type TYPE]",
    R"(Converts a Hugging Face DiffusionGemma / Gemma 4 checkpoint (config.json + model.safetensors or a
sharded model.safetensors.index.json) to one GGUF file with llama.cpp's diffusion-gemma / gemma4 names
and keys (the layout of the community GGUF files), which `canvas logits` / `generate` read. The
checkpoint is loaded and checked completely first. Vectors (norms, scales, layer scalars) stay f32;
matrices get TYPE, except that rows a block type cannot hold fall back (K-quants to q8_0, else
f16); every fallback is listed with its reason, and the summary counts the tensors of each stored type. Full layers' proportional RoPE is written as the generated rope_freqs.weight (1 for rotating
pairs, 1e30 for pairs at frequency 0). generation_config.json, when present, fills the diffusion.*
sampler keys. tokenizer.json, when present, is copied as the GGUF tokenizer (tokenizer.ggml.model
"gemma4": tokens, token types, merges, placeholder scores, bos/eos/pad/unknown ids, add_bos), so
`canvas generate` / `chat` need no --tokenizer. A malformed tokenizer.json is an error; one the GGUF form
cannot hold exactly (another normalizer, special ids that disagree with config.json, more tokens than the
model's vocabulary) is skipped with a warning, and the GGUF then runs with --tokenizer tokenizer.json.
)",
    {
        {"--in", "DIR", "Hugging Face checkpoint directory (or its config.json)"},
        {"--out", "FILE", "output .gguf (written to FILE.tmp, then renamed)"},
        {"--type", "TYPE", "f32 | f16 | bf16 | q8_0 | q4_0 | q4_1 | q5_0 | q5_1 | q4_k | q5_k | q6_k\n"
                           "(default: f32; tensors already of that type are copied as they are; 1-D tensors\n"
                           "stay f32; rows that are not whole 256-blocks fall back from K-quants to q8_0)"},
    },
    "To re-type a GGUF file, see canvas quantize."};

// Copies HF_DIR/tokenizer.json into `w` when the GGUF form holds it exactly; returns what was done, for the
// summary line. A malformed tokenizer.json throws; one that GGUF cannot hold is skipped with a warning.
std::string copy_tokenizer(const std::filesystem::path& dir, const ModelConfig& c, GgufWriter& w) {
  const std::filesystem::path path = dir / "tokenizer.json";
  if (!std::filesystem::exists(path)) return "no tokenizer.json, no tokenizer";
  const HfVocab vocab = HfTokenizer::vocab_from_json(path.string());
  std::string problem = HfTokenizer::gguf_problem(vocab);
  // The tokenizer.ggml.*_token_id keys serve the model's config too: both must mean the same token.
  for (const auto& [name, config_id, vocab_id] :
       {std::tuple<const char*, int32_t, int32_t>{"bos", c.bos_token, vocab.bos_id},
        {"eos", c.eos_token, vocab.eos_id},
        {"pad", c.pad_token, vocab.pad_id}})
    if (problem.empty() && vocab_id >= 0 && vocab_id != config_id)
      problem = std::string("its ") + name + " token is " + std::to_string(vocab_id) + " but config.json's is " +
                std::to_string(config_id);
  if (problem.empty() && int64_t(vocab.tokens.size()) > c.vocab)
    problem = "it has " + std::to_string(vocab.tokens.size()) + " tokens, more than the model's vocabulary of " +
              std::to_string(c.vocab);
  if (!problem.empty()) {
    const std::string file = path.string();
    std::fprintf(stderr, "warning: %s not copied: %s; run the GGUF with --tokenizer %s\n", file.c_str(),
                 problem.c_str(), file.c_str());
    return "tokenizer not copied";
  }
  try {
    HfTokenizer::write_gguf(vocab, w);
  } catch (const Error& e) {
    throw Error(path.string() + ": " + e.what());
  }
  return "tokenizer " + std::to_string(vocab.tokens.size()) + " tokens, " + std::to_string(vocab.merges.size()) +
         " merges";
}

}  // namespace

int cmd_convert(int argc, char** argv) {
  if (print_help_if_asked(kConvert, argc, argv)) return 0;
  Args args(kConvert, argc, argv, 2);
  check(args.positional().empty(), "unexpected argument '" + (args.positional().empty() ? "" : args.positional()[0]) +
                                       "'; see canvas convert --help");
  check(args.has("in"), "no input given (--in HF_DIR); see canvas convert --help");
  check(args.has("out"), "no output given (--out FILE.gguf); see canvas convert --help");
  const DType requested = dtype_from_name(args.get("type", "f32"));
  check(matmul_supports(requested),
        "--type must be one of f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k");

  // Loading binds and checks every tensor against the config before anything is written.
  const Model model = Model::load_safetensors(args.get("in", ""));
  const ModelConfig& c = model.config;
  const SafetensorsModel& st = *model.safetensors;
  const std::filesystem::path in = std::filesystem::is_directory(args.get("in", ""))
                                       ? std::filesystem::path(args.get("in", ""))
                                       : std::filesystem::path(args.get("in", "")).parent_path();

  GgufWriter w;
  config_to_gguf(c, w);
  w.set("general.file_type", GgufValue::u32(llama_file_type(requested)));
  const std::string tokenizer = copy_tokenizer(in, c, w);

  const std::filesystem::path generation = in / "generation_config.json";
  if (c.has_decoder && std::filesystem::exists(generation)) {
    const JsonDocument g = JsonDocument::load(generation.string());
    w.set("diffusion.canvas_length", GgufValue::u32(uint32_t(g.get_int("canvas_length", 256))));
    w.set("diffusion.eb_max_steps", GgufValue::u32(uint32_t(g.get_int("max_denoising_steps", 48))));
    w.set("diffusion.eb_t_min", GgufValue::f32(float(g.get_float("t_min", 0.4))));
    w.set("diffusion.eb_t_max", GgufValue::f32(float(g.get_float("t_max", 0.8))));
    w.set("diffusion.eb_entropy_bound", GgufValue::f32(float(g.get_float("entropy_bound", 0.1))));
    w.set("diffusion.eb_stability_threshold", GgufValue::u32(uint32_t(g.get_int("stability_threshold", 1))));
    w.set("diffusion.eb_confidence_threshold", GgufValue::f32(float(g.get_float("confidence_threshold", 0.005))));
  }

  const std::vector<float> rope_freqs = gguf_rope_freqs(c);
  if (!rope_freqs.empty())
    w.add_tensor("rope_freqs.weight", DType::F32, {int64_t(rope_freqs.size())}, rope_freqs.data(),
                 rope_freqs.size() * 4);

  // Every tensor the model description names, under its GGUF name; the rest of the checkpoint (e.g. a
  // vision tower) is skipped.
  const std::string prefix =
      gemma_names::decoder_prefix([&st](const std::string& name) { return st.find_tensor(name) != nullptr; });
  std::deque<std::vector<uint8_t>> converted;  // re-typed tensors, alive until write()
  int64_t written = 0;
  RetypeReport report;
  if (!rope_freqs.empty()) report.note("rope_freqs.weight", TensorView{}, DType::F32, DType::F32, "");
  const std::vector<TensorSpec> specs = model_tensors(c);
  Progress progress("tensors", int64_t(specs.size()));
  for (const TensorSpec& spec : specs) {
    progress.add();
    const TensorView* found = st.find_tensor(gemma_names::to_hf(spec.hf, prefix));
    if (!found) continue;  // optional (e.g. the encoder's layer scalars); Model::load checked the rest
    const TensorView& t = *found;
    std::string reason;
    const DType type = stored_type(t, requested, &reason);
    add_retyped(w, spec.gguf, t, type, converted);
    report.note(spec.gguf, t, requested, type, reason);
    ++written;
  }
  progress.finish();
  const int64_t skipped = int64_t(st.tensors().size()) - written;  // outside the text stack (e.g. a vision tower)
  w.write(args.get("out", ""));
  std::fprintf(stderr, "wrote %s: %s, %s (requested %s), %lld tensors outside the text stack skipped, %s\n%s",
               args.get("out", "").c_str(), c.arch.c_str(), report.summary().c_str(), dtype_name(requested),
               (long long)skipped, tokenizer.c_str(), report.fallbacks().c_str());
  return 0;
}

}  // namespace canvas::cli
