// canvas convert: a Hugging Face safetensors checkpoint (LLaDA, LLaDA-MoE, Dream, Qwen2, Llama, Gemma 4 /
// DiffusionGemma) to GGUF, optionally re-typed; or a GGUF model back to its family's Hugging Face layout.
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "cli/options.h"
#include "cli/output_paths.h"
#include "cli/progress.h"
#include "commands.h"
#include "core/error.h"
#include "convert/convert.h"
#include "ops/matmul.h"

namespace canvas::cli {
namespace {

const Command kConvert{
    "convert",
    "canvas convert --in HF_DIR --out FILE.gguf [--type TYPE]\n"
    "       canvas convert --in MODEL.gguf --out DIR --to hf [--type f32|f16|bf16]",
    R"(Converts a Hugging Face checkpoint (config.json + model.safetensors or a sharded
model.safetensors.index.json) to one GGUF file, or (--to hf) a GGUF model to a Hugging Face directory.

To GGUF: LLaDA (GSAI-ML/LLaDA-8B-*), LLaDA-MoE (inclusionAI/LLaDA-MoE-7B-A1B-*), Dream
(Dream-org/Dream-v0-*), Qwen2 and Llama checkpoints in their published layouts get llama.cpp's
llada / llada-moe / dream / qwen2 / llama names and keys (Q/K rows of LLaDA and Llama reordered for the
consecutive-pair RoPE, experts stacked); DiffusionGemma / Gemma 4 get llama.cpp's diffusion-gemma /
gemma4 names and keys (the layout of the community GGUF files). The checkpoint is loaded and checked
completely first. Vectors (norms, scales, layer scalars) stay f32; matrices get TYPE, except that rows a
block type cannot hold fall back (K-quants to q8_0, else f16); every fallback is listed with its reason,
and the summary counts the tensors of each stored type. Gemma 4's proportional RoPE on full layers is
written as the generated rope_freqs.weight (1 for rotating pairs, 1e30 for pairs at frequency 0).
generation_config.json, when present, fills DiffusionGemma's diffusion.* sampler keys. tokenizer.json,
when present, is copied as the GGUF tokenizer (byte-level BPE as tokenizer.ggml.model "gpt2" with its
pre-tokenizer's name; Gemma's as "gemma4"), so `canvas generate` / `chat` need no --tokenizer. A
malformed tokenizer.json is an error; one the GGUF form cannot hold exactly is skipped with a warning,
and the GGUF then runs with --tokenizer tokenizer.json.

To Hugging Face (--to hf; the default for a .gguf input): any llada, llada-moe, dream, qwen2 or llama
GGUF canvas reads or trains is written as DIR/model.safetensors + config.json + tokenizer.json in the
family's published layout, so PyTorch code for that family loads it. Quantised matrices are dequantised;
TYPE (default f32) is the stored float type. A model the layout cannot hold (self-conditioning, learned
position embeddings, uniform-state diffusion) is refused naming what is missing. DIR is written beside
(DIR.canvas-partial-PID, removed by the next run if this one is killed) and swapped in whole: an existing
DIR ends as the old checkpoint or the new one, never a mix; a DIR holding anything but checkpoint files (a
README, .git) is refused.
)",
    {
        {"--in", "PATH", "Hugging Face checkpoint directory (or its config.json), or a .gguf model with --to hf"},
        {"--out", "PATH", "output .gguf (written to FILE.PID.tmp, then renamed), or the output directory with --to hf\n"
                            "(written beside it, then swapped in whole)"},
        {"--to", "FORMAT", "gguf | hf (default: hf for a .gguf input, else gguf)"},
        {"--type", "TYPE", "f32 | f16 | bf16 | q8_0 | q4_0 | q4_1 | q5_0 | q5_1 | q4_k | q5_k | q6_k\n"
                           "(default: f32; tensors already of that type are copied as they are; 1-D tensors\n"
                           "stay f32; rows that are not whole 256-blocks fall back from K-quants to q8_0;\n"
                           "with --to hf only f32, f16 and bf16)"},
    },
    "IN and OUT may also be given as the first two positional arguments. To re-type a GGUF file, see "
    "canvas quantize."};

// The conversion's callbacks for the CLI: a progress line over the tensors, warnings on stderr.
struct ConvertProgress {
  std::optional<Progress> progress;
  ConversionCallbacks callbacks() {
    ConversionCallbacks c;
    c.on_tensor = [this](int64_t, int64_t total) {
      if (!progress) progress.emplace("tensors", total);
      progress->add();
    };
    c.on_tokenizer_skipped = [](const std::string& path, const std::string& problem) {
      std::fprintf(stderr, "warning: %s not copied: %s; run the GGUF with --tokenizer %s\n", path.c_str(),
                   problem.c_str(), path.c_str());
    };
    return c;
  }
  void finish() {
    if (progress) progress->finish();
  }
};

int convert_to_gguf(const std::string& in_path, const std::string& out_path, DType requested) {
  check(matmul_supports(requested),
        "--type must be one of f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k");
  ConvertProgress progress;
  const GgufConversion r = convert_hf_to_gguf(in_path, out_path, requested, progress.callbacks());
  progress.finish();
  std::fprintf(stderr, "wrote %s: %s, %s (requested %s), %lld tensors outside the text stack skipped, %s\n%s",
               out_path.c_str(), r.arch.c_str(), r.report.summary().c_str(), dtype_name(requested),
               (long long)r.skipped, r.tokenizer.c_str(), r.report.fallbacks().c_str());
  return 0;
}

int convert_to_hf(const std::string& in_path, const std::string& out_dir, DType type) {
  check(type == DType::F32 || type == DType::F16 || type == DType::BF16,
        "--type with --to hf must be f32, f16 or bf16 (safetensors holds floats)");
  check(!std::filesystem::exists(out_dir) || std::filesystem::is_directory(out_dir),
        "--out " + out_dir + " exists and is not a directory");
  const HfExport r = convert_gguf_to_hf(in_path, out_dir, type);
  std::fprintf(stderr, "wrote %s: %s in the %s layout, %zu tensors (%s), config.json, %s\n", out_dir.c_str(),
               r.arch.c_str(), r.layout.c_str(), r.tensors, dtype_name(type), r.tokenizer.c_str());
  return 0;
}

}  // namespace

int cmd_convert(int argc, char** argv) {
  if (print_help_if_asked(kConvert, argc, argv)) return 0;
  Args args(kConvert, argc, argv, 2);
  const std::vector<std::string>& pos = args.positional();
  check(pos.size() <= 2 && !(pos.size() >= 1 && args.has("in")) && !(pos.size() == 2 && args.has("out")),
        "unexpected argument '" + (pos.empty() ? "" : pos.back()) + "'; see canvas convert --help");
  const std::string in = args.has("in") ? args.get("in", "") : pos.empty() ? "" : pos[0];
  const std::string out = args.has("out") ? args.get("out", "") : pos.size() == 2 ? pos[1] : "";
  check(!in.empty(), "no input given (--in HF_DIR or --in MODEL.gguf); see canvas convert --help");
  check(!out.empty(), "no output given (--out FILE.gguf, or --out DIR with --to hf); see canvas convert --help");
  const bool gguf_input = !std::filesystem::is_directory(in) && std::filesystem::path(in).extension() == ".gguf";
  const std::string to = args.get("to", gguf_input ? "hf" : "gguf");
  check(to == "gguf" || to == "hf", "--to must be gguf or hf, not '" + to + "'");
  const DType type = dtype_from_name(args.get("type", "f32"));
  if (to == "hf") {
    check(gguf_input, "--to hf reads a .gguf model; " + in + " is not one");
    for (const char* name : {"model.safetensors", "config.json", "tokenizer.json"})
      check_output_is_not_input({"--out", (std::filesystem::path(out) / name).string()}, {{"--in", in}});
    return convert_to_hf(in, out, type);
  }
  check(!gguf_input, in + " is a GGUF file; to write a Hugging Face directory use --to hf (to re-type a GGUF, see "
                         "canvas quantize)");
  std::vector<NamedPath> inputs{{"--in", in}};
  for (const std::string& file : hf_checkpoint_files(in)) inputs.push_back({"the checkpoint's", file});
  check_output_is_not_input({"--out", out}, inputs);
  return convert_to_gguf(in, out, type);
}

}  // namespace canvas::cli
