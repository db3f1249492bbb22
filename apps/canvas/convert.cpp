// canvas convert: a Hugging Face safetensors checkpoint (LLaDA, LLaDA-MoE, Dream, Qwen2, Llama, Gemma 4 /
// DiffusionGemma) to GGUF, optionally re-typed; or a GGUF model back to its family's Hugging Face layout.
#include <cmath>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "args.h"
#include "progress.h"
#include "retype.h"
#include "commands.h"
#include "core/error.h"
#include "io/gguf.h"
#include "io/bpe_json.h"
#include "io/hf_tokenizer.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "model/gemma_names.h"
#include "model/hf_families.h"
#include "model/model.h"
#include "model/tensors.h"
#include "ops/matmul.h"
#include "output_paths.h"

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
position embeddings, uniform-state diffusion) is refused naming what is missing.
)",
    {
        {"--in", "PATH", "Hugging Face checkpoint directory (or its config.json), or a .gguf model with --to hf"},
        {"--out", "PATH", "output .gguf (written to FILE.tmp, then renamed), or the output directory with --to hf"},
        {"--to", "FORMAT", "gguf | hf (default: hf for a .gguf input, else gguf)"},
        {"--type", "TYPE", "f32 | f16 | bf16 | q8_0 | q4_0 | q4_1 | q5_0 | q5_1 | q4_k | q5_k | q6_k\n"
                           "(default: f32; tensors already of that type are copied as they are; 1-D tensors\n"
                           "stay f32; rows that are not whole 256-blocks fall back from K-quants to q8_0;\n"
                           "with --to hf only f32, f16 and bf16)"},
    },
    "IN and OUT may also be given as the first two positional arguments. To re-type a GGUF file, see "
    "canvas quantize."};

// A byte-level BPE tokenizer.json (LLaDA, Dream, LLaDA-MoE) as tokenizer.ggml.model "gpt2"; the special
// ids come from config.json (config_to_gguf writes them). The vocabulary is padded to the model's rows.
std::string copy_byte_level_tokenizer(const std::string& path, const ModelConfig& c, GgufWriter& w) {
  const BpeVocab v = bpe_vocab_from_json(path, c.vocab);
  if (int64_t(v.tokens.size()) > c.vocab) {
    std::fprintf(stderr, "warning: %s not copied: it has %zu tokens, more than the model's vocabulary of %lld; run the "
                 "GGUF with --tokenizer %s\n", path.c_str(), v.tokens.size(), (long long)c.vocab, path.c_str());
    return "tokenizer not copied";
  }
  std::vector<int64_t> types(v.token_types.begin(), v.token_types.end());
  w.set("tokenizer.ggml.model", GgufValue::string("gpt2"));
  w.set("tokenizer.ggml.pre", GgufValue::string(v.pre));
  w.set("tokenizer.ggml.tokens", GgufValue::string_array(v.tokens));
  w.set("tokenizer.ggml.token_type", GgufValue::int_array(GgufType::Int32, types));
  w.set("tokenizer.ggml.merges", GgufValue::string_array(v.merges));
  w.set("tokenizer.ggml.add_bos_token", GgufValue::boolean(v.add_bos));
  return "tokenizer " + std::to_string(v.tokens.size()) + " tokens (" + v.pre + "), " +
         std::to_string(v.merges.size()) + " merges";
}

// Copies HF_DIR/tokenizer.json into `w` when the GGUF form holds it exactly; returns what was done, for the
// summary line. A malformed tokenizer.json throws; one that GGUF cannot hold is skipped with a warning.
std::string copy_tokenizer(const std::filesystem::path& dir, const ModelConfig& c, GgufWriter& w) {
  const std::filesystem::path path = dir / "tokenizer.json";
  if (!std::filesystem::exists(path)) return "no tokenizer.json, no tokenizer";
  if (is_byte_level_tokenizer_json(path.string())) return copy_byte_level_tokenizer(path.string(), c, w);
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

// The files a conversion to GGUF may read: IN itself and the checkpoint directory's .json and
// .safetensors files (config, generation config, tokenizer, weights and their shard index).
std::vector<NamedPath> checkpoint_files(const std::string& in_path) {
  std::vector<NamedPath> files{{"--in", in_path}};
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::is_directory(in_path, ec)
                                        ? std::filesystem::path(in_path)
                                        : std::filesystem::path(in_path).parent_path();
  for (const auto& entry : std::filesystem::directory_iterator(dir.empty() ? "." : dir, ec)) {
    const std::string ext = entry.path().extension().string();
    if (ext == ".json" || ext == ".safetensors") files.push_back({"the checkpoint's", entry.path().string()});
  }
  return files;
}

int convert_to_gguf(const std::string& in_path, const std::string& out_path, DType requested) {
  check(matmul_supports(requested),
        "--type must be one of f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k");
  // Loading binds and checks every tensor against the config before anything is written.
  const Model model = Model::load_safetensors(in_path);
  const ModelConfig& c = model.config;
  const SafetensorsModel& st = *model.safetensors;
  const std::filesystem::path in = std::filesystem::is_directory(in_path) ? std::filesystem::path(in_path)
                                                                           : std::filesystem::path(in_path).parent_path();

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
  // vision tower) is skipped. llama-style families come from the bound model (experts stacked, Q/K rows
  // in GGUF order); Gemma's straight from the checkpoint.
  const bool gemma = c.layer_style == LayerStyle::Gemma4;
  const std::string prefix =
      gemma ? gemma_names::decoder_prefix([&st](const std::string& name) { return st.find_tensor(name) != nullptr; })
            : "";
  std::deque<std::vector<uint8_t>> converted;  // re-typed tensors, alive until write()
  int64_t written = 0;
  RetypeReport report;
  if (!rope_freqs.empty()) report.note("rope_freqs.weight", TensorView{}, DType::F32, DType::F32, "");
  const std::vector<TensorSpec> specs = model_tensors(c);
  Progress progress("tensors", int64_t(specs.size()));
  for (const TensorSpec& spec : specs) {
    progress.add();
    TensorView bound;
    const TensorView* found = gemma ? st.find_tensor(gemma_names::to_hf(spec.hf, prefix)) : &(bound = model_weight(model, spec));
    if (!found || !found->data) continue;  // optional (e.g. the encoder's layer scalars); Model::load checked the rest
    const TensorView& t = *found;
    std::string reason;
    const DType type = stored_type(t, requested, &reason);
    add_retyped(w, spec.gguf, t, type, converted);
    report.note(spec.gguf, t, requested, type, reason);
    ++written;
  }
  progress.finish();
  // Outside the text stack (e.g. a vision tower); llama-style checkpoints were checked to hold nothing else.
  const int64_t skipped = gemma ? int64_t(st.tensors().size()) - written : 0;
  w.write(out_path);
  std::fprintf(stderr, "wrote %s: %s, %s (requested %s), %lld tensors outside the text stack skipped, %s\n%s",
               out_path.c_str(), c.arch.c_str(), report.summary().c_str(), dtype_name(requested),
               (long long)skipped, tokenizer.c_str(), report.fallbacks().c_str());
  return 0;
}

// One tensor of the export: its bytes as `type` (Q/K rows back in the family's order when it differs).
std::vector<uint8_t> export_bytes(const TensorView& t, DType type, int64_t rope_heads, int64_t head_dim) {
  const int64_t rows = t.rows(), cols = t.cols();
  std::vector<float> f32(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) dequantize_row(t.type, t.row(r), &f32[size_t(r * cols)], cols);
  if (rope_heads > 0) {
    TensorView v = t;
    v.type = DType::F32;
    v.data = f32.data();
    std::vector<float> permuted(f32.size());
    permute_rope_rows(v, rope_heads, head_dim, /*to_gguf=*/false, permuted.data());
    f32.swap(permuted);
  }
  std::vector<uint8_t> out(size_t(rows) * size_t(row_bytes(type, cols)));
  for (int64_t r = 0; r < rows; ++r)
    quantize_row(type, &f32[size_t(r * cols)], &out[size_t(r) * size_t(row_bytes(type, cols))], cols);
  return out;
}

int convert_to_hf(const std::string& in_path, const std::string& out_dir, DType type) {
  check(type == DType::F32 || type == DType::F16 || type == DType::BF16,
        "--type with --to hf must be f32, f16 or bf16 (safetensors holds floats)");
  const Model model = Model::load_gguf_as_stored(in_path);
  const ModelConfig& c = model.config;
  const nlohmann::ordered_json config = hf_config_json(c);  // refuses what the layout cannot hold
  check(!std::filesystem::exists(out_dir) || std::filesystem::is_directory(out_dir),
        "--out " + out_dir + " exists and is not a directory");
  std::filesystem::create_directories(out_dir);
  const std::filesystem::path dir(out_dir);

  std::deque<std::vector<uint8_t>> storage;
  std::vector<SafetensorsEntry> entries;
  const bool permuted = hf_rope_permuted(c.arch);
  for (const TensorSpec& spec : model_tensors(c)) {
    const TensorView t = model_weight(model, spec);
    check(t.data != nullptr, in_path + ": tensor '" + spec.gguf + "' is not bound");
    int64_t rope_heads = 0;
    if (permuted && (spec.role == TensorRole::Wq || spec.role == TensorRole::Bq)) rope_heads = c.n_heads;
    if (permuted && (spec.role == TensorRole::Wk || spec.role == TensorRole::Bk)) rope_heads = c.n_kv_heads;
    // Vectors (norms, biases) are f32 in canvas; they keep f32 unless a smaller type was asked for.
    storage.push_back(export_bytes(t, type, rope_heads, c.head_dim));
    const std::vector<uint8_t>& bytes = storage.back();
    const size_t star = spec.hf.find('*');
    if (star == std::string::npos) {
      SafetensorsEntry e{spec.hf, type, {}, bytes.data(), bytes.size()};
      for (int d = t.n_dims - 1; d >= 0; --d) e.shape.push_back(t.ne[size_t(d)]);
      entries.push_back(e);
      continue;
    }
    // An expert stack [cols, rows, E] -> E tensors [rows, cols] named with the expert's index.
    const size_t one = bytes.size() / size_t(t.ne[2]);
    for (int64_t x = 0; x < t.ne[2]; ++x)
      entries.push_back({spec.hf.substr(0, star) + std::to_string(x) + spec.hf.substr(star + 1), type,
                         {t.ne[1], t.ne[0]}, bytes.data() + size_t(x) * one, one});
  }
  write_safetensors((dir / "model.safetensors").string(), entries);
  {
    std::ofstream out(dir / "config.json");
    out << config.dump(2) << "\n";
    check(bool(out), (dir / "config.json").string() + ": write failed");
  }
  std::string tokenizer = "no tokenizer in the GGUF";
  if (model.file->find("tokenizer.ggml.model")) {
    const std::string json = bpe_json_from_gguf(*model.file);
    std::ofstream out(dir / "tokenizer.json");
    out << json;
    check(bool(out), (dir / "tokenizer.json").string() + ": write failed");
    tokenizer = "tokenizer.json " + std::to_string(model.file->get_string_array("tokenizer.ggml.tokens").size()) + " tokens";
  }
  std::fprintf(stderr, "wrote %s: %s in the %s layout, %zu tensors (%s), config.json, %s\n", out_dir.c_str(),
               c.arch.c_str(), config["architectures"][0].get<std::string>().c_str(), entries.size(), dtype_name(type),
               tokenizer.c_str());
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
  check_output_is_not_input({"--out", out}, checkpoint_files(in));
  return convert_to_gguf(in, out, type);
}

}  // namespace canvas::cli
