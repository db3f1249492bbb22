// Hugging Face safetensors checkpoints to GGUF and GGUF models back to the Hugging Face layout.
#include "convert/convert.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <filesystem>
#include <set>
#include <tuple>

#include "core/error.h"
#include "core/output_file.h"
#include "io/bpe_json.h"
#include "io/hf_tokenizer.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "model/gemma_names.h"
#include "model/hf_families.h"
#include "model/model.h"
#include "model/tensors.h"
#include "ops/matmul.h"

namespace canvas {
namespace {

// A byte-level BPE tokenizer.json (LLaDA, Dream, LLaDA-MoE) as tokenizer.ggml.model "gpt2"; the special
// ids come from config.json (config_to_gguf writes them). The vocabulary is padded to the model's rows.
std::string copy_byte_level_tokenizer(const std::string& path, const ModelConfig& c, GgufWriter& w,
                                      const ConversionCallbacks& callbacks) {
  const BpeVocab v = bpe_vocab_from_json(path, c.vocab);
  if (int64_t(v.tokens.size()) > c.vocab) {
    if (callbacks.on_tokenizer_skipped)
      callbacks.on_tokenizer_skipped(path, "it has " + std::to_string(v.tokens.size()) +
                                               " tokens, more than the model's vocabulary of " +
                                               std::to_string(c.vocab));
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

// Copies DIR/tokenizer.json into `w` when the GGUF form holds it exactly; returns what was done, for the
// summary line. A malformed tokenizer.json throws; one that GGUF cannot hold is skipped (reported).
std::string copy_tokenizer(const std::filesystem::path& dir, const ModelConfig& c, GgufWriter& w,
                           const ConversionCallbacks& callbacks) {
  const std::filesystem::path path = dir / "tokenizer.json";
  if (!std::filesystem::exists(path)) return "no tokenizer.json, no tokenizer";
  if (is_byte_level_tokenizer_json(path.string()))
    return copy_byte_level_tokenizer(path.string(), c, w, callbacks);
  const HfVocab vocab = HfTokenizer::vocab_from_json(path.string());
  std::string problem = HfTokenizer::gguf_problem(vocab);
  // The tokenizer.ggml.*_token_id keys serve the model's config too: both must mean the same token.
  for (const auto& [name, config_id, vocab_id] :
       {std::tuple<const char*, int32_t, int32_t>{"bos", c.bos_token, vocab.bos_id},
        {"eos", c.eos_token, vocab.eos_id},
        {"pad", c.pad_token, vocab.pad_id}})
    if (problem.empty() && vocab_id >= 0 && vocab_id != config_id)
      problem = std::string("its ") + name + " token is " + std::to_string(vocab_id) +
                " but config.json's is " + std::to_string(config_id);
  if (problem.empty() && int64_t(vocab.tokens.size()) > c.vocab)
    problem = "it has " + std::to_string(vocab.tokens.size()) +
              " tokens, more than the model's vocabulary of " + std::to_string(c.vocab);
  if (!problem.empty()) {
    if (callbacks.on_tokenizer_skipped) callbacks.on_tokenizer_skipped(path.string(), problem);
    return "tokenizer not copied";
  }
  try {
    HfTokenizer::write_gguf(vocab, w);
    w.set("tokenizer.ggml.add_space_prefix", GgufValue::boolean(false));  // as the branch's converter writes it
  } catch (const Error& e) {
    throw Error(path.string() + ": " + e.what());
  }
  // tokenizer_config.json's mask_token, as llama.cpp's converter (gguf-py's SpecialVocab) takes it: its
  // llama-diffusion-cli needs a mask id even for DiffusionGemma, whose sampler never writes one.
  if (const std::filesystem::path config = dir / "tokenizer_config.json"; std::filesystem::exists(config)) {
    const JsonDocument t = JsonDocument::load(config.string());
    const nlohmann::json* m = t.find("mask_token");  // a string, or an added-token object with "content"
    const std::string mask = !m                ? ""
                             : m->is_string() ? m->get<std::string>()
                                              : t.get_string("mask_token.content", "");
    const auto it = std::find(vocab.tokens.begin(), vocab.tokens.end(), mask);
    if (!mask.empty() && it != vocab.tokens.end())
      w.set("tokenizer.ggml.mask_token_id", GgufValue::u32(uint32_t(it - vocab.tokens.begin())));
  }
  return "tokenizer " + std::to_string(vocab.tokens.size()) + " tokens, " +
         std::to_string(vocab.merges.size()) + " merges";
}

// The checkpoint directory of IN (a directory, or a file in it).
std::filesystem::path checkpoint_dir(const std::string& in_path) {
  std::error_code ec;
  return std::filesystem::is_directory(in_path, ec) ? std::filesystem::path(in_path)
                                                    : std::filesystem::path(in_path).parent_path();
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

}  // namespace

void write_diffusion_gemma_keys(int64_t canvas_length, const JsonDocument& g, GgufWriter& w) {
  w.set("diffusion.canvas_length", GgufValue::u32(uint32_t(canvas_length)));
  w.set("diffusion.eb_max_steps", GgufValue::u32(uint32_t(g.get_int("max_denoising_steps", 48))));
  w.set("diffusion.eb_t_min", GgufValue::f32(float(g.get_float("t_min", 0.4))));
  w.set("diffusion.eb_t_max", GgufValue::f32(float(g.get_float("t_max", 0.8))));
  w.set("diffusion.eb_entropy_bound",
        GgufValue::f32(float(g.get_float("sampler_config.entropy_bound", g.get_float("entropy_bound", 0.1)))));
  w.set("diffusion.eb_stability_threshold", GgufValue::u32(uint32_t(g.get_int("stability_threshold", 1))));
  w.set("diffusion.eb_confidence_threshold", GgufValue::f32(float(g.get_float("confidence_threshold", 0.005))));
}

std::vector<std::string> hf_checkpoint_files(const std::string& in_path) {
  std::vector<std::string> files;
  std::error_code ec;
  const std::filesystem::path dir = checkpoint_dir(in_path);
  for (const auto& entry : std::filesystem::directory_iterator(dir.empty() ? "." : dir, ec)) {
    const std::string ext = entry.path().extension().string();
    if (ext == ".json" || ext == ".safetensors") files.push_back(entry.path().string());
  }
  return files;
}

GgufConversion convert_hf_to_gguf(const std::string& in_path, const std::string& out_path, DType requested,
                                  const ConversionCallbacks& callbacks) {
  check(matmul_supports(requested),
        std::string("cannot convert to ") + dtype_name(requested) +
            ": the types are f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k");
  // Loading binds and checks every tensor against the config before anything is written.
  const Model model = Model::load_safetensors(in_path);
  const ModelConfig& c = model.config;
  const SafetensorsModel& st = *model.safetensors;
  const std::filesystem::path in = checkpoint_dir(in_path);

  GgufConversion out;
  out.arch = c.arch;
  GgufWriter w;
  config_to_gguf(c, w);
  w.set("general.file_type", GgufValue::u32(llama_file_type(requested)));
  out.tokenizer = copy_tokenizer(in, c, w, callbacks);

  const std::filesystem::path generation = in / "generation_config.json";
  if (c.has_decoder) {
    // As llama.cpp's DiffusionGemma converter writes them: the canvas length from config.json (the model's
    // setting; canvas's older files kept it in generation_config.json), the sampler's defaults from
    // generation_config.json, entropy_bound nested in sampler_config as transformers saves it.
    const JsonDocument config = JsonDocument::load((in / "config.json").string());
    const JsonDocument g = std::filesystem::exists(generation) ? JsonDocument::load(generation.string())
                                                               : JsonDocument(nlohmann::json::object(), "none");
    const int64_t canvas_length = config.get_int("canvas_length", g.get_int("canvas_length", 256));
    check(canvas_length > 0 && canvas_length < (int64_t(1) << 24),
          config.origin() + ": canvas_length is " + std::to_string(canvas_length) + "; it must be positive");
    write_diffusion_gemma_keys(canvas_length, g, w);
  }

  const std::vector<float> rope_freqs = gguf_rope_freqs(c);
  if (!rope_freqs.empty())
    w.add_tensor("rope_freqs.weight", DType::F32, {int64_t(rope_freqs.size())}, rope_freqs.data(),
                 rope_freqs.size() * 4);

  // Every tensor the model description names, under its GGUF name; the rest of the checkpoint (e.g. a
  // vision tower) is skipped. llama-style families come from the bound model (experts stacked, Q/K rows
  // in GGUF order); Gemma's straight from the checkpoint.
  const bool gemma = c.layer_style == LayerStyle::Gemma4;
  const std::string prefix = gemma ? gemma_names::decoder_prefix([&st](const std::string& name) {
    return st.find_tensor(name) != nullptr;
  })
                                   : "";
  std::deque<std::vector<uint8_t>> converted;  // re-typed tensors, alive until write()
  int64_t written = 0;
  if (!rope_freqs.empty()) out.report.note("rope_freqs.weight", TensorView{}, DType::F32, DType::F32, "");
  const std::vector<TensorSpec> specs = model_tensors(c);
  int64_t done = 0;
  for (const TensorSpec& spec : specs) {
    if (callbacks.on_tensor) callbacks.on_tensor(++done, int64_t(specs.size()));
    TensorView bound;
    const TensorView* found =
        gemma ? st.find_tensor(gemma_names::to_hf(spec.hf, prefix)) : &(bound = model_weight(model, spec));
    if (!found || !found->data)
      continue;  // optional (e.g. the encoder's layer scalars); Model::load checked the rest
    const TensorView& t = *found;
    std::string reason;
    const DType type = stored_type(t, requested, &reason);
    add_retyped(w, spec.gguf, t, type, converted);
    out.report.note(spec.gguf, t, requested, type, reason);
    ++written;
  }
  // Outside the text stack (e.g. a vision tower); llama-style checkpoints were checked to hold nothing else.
  out.skipped = gemma ? int64_t(st.tensors().size()) - written : 0;
  w.write(out_path);
  return out;
}

namespace {

// The files a Hugging Face checkpoint folder is made of (weights, their index, config, generation config,
// tokenizer): what an export replaces as a whole.
bool is_checkpoint_file(const std::string& name) {
  static const std::set<std::string> names = {
      "config.json",          "generation_config.json",  "model.safetensors", "model.safetensors.index.json",
      "pytorch_model.bin",    "pytorch_model.bin.index.json", "tokenizer.json", "tokenizer_config.json",
      "special_tokens_map.json", "added_tokens.json",    "vocab.json",        "merges.txt",
      "tokenizer.model",      "chat_template.jinja"};
  auto shard = [&](const char* prefix, const char* suffix) {
    const std::string p = prefix, x = suffix;
    return name.size() > p.size() + x.size() && name.rfind(p, 0) == 0 &&
           name.compare(name.size() - x.size(), x.size(), x) == 0;
  };
  return names.count(name) > 0 || shard("model-", ".safetensors") || shard("pytorch_model-", ".bin");
}

// Refuses an existing --out folder that holds anything but a checkpoint (a README, a .git folder, the input
// GGUF): the export replaces the folder whole, and must not take other files with it.
void check_replaceable(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) return;
  check(std::filesystem::is_directory(dir, ec), dir.string() + " exists and is not a directory");
  std::vector<std::string> others;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file(ec) || entry.is_symlink(ec) || !is_checkpoint_file(name)) others.push_back(name);
  }
  check(!ec, "cannot list " + dir.string() + ": " + ec.message());
  std::sort(others.begin(), others.end());
  std::string list;
  for (size_t i = 0; i < others.size() && i < 5; ++i) list += (i ? ", " : "") + others[i];
  if (others.size() > 5) list += ", ...";
  check(others.empty(), dir.string() + " holds files that are not part of a Hugging Face checkpoint (" + list +
                            "): the new checkpoint replaces the folder whole, so give a new or empty folder, or one "
                            "that holds only a checkpoint");
}

// Puts the finished folder `fresh` in the place of `dir` in one step: the folder is the old checkpoint or the
// new one, never a mix. Linux exchanges the two atomically; elsewhere the old one is moved aside first.
void swap_in(const std::filesystem::path& fresh, const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) {
    std::filesystem::rename(fresh, dir);
    return;
  }
#ifdef RENAME_EXCHANGE
  if (::renameat2(AT_FDCWD, fresh.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
    std::filesystem::remove_all(fresh);  // now the old checkpoint
    return;
  }
#endif
  const std::filesystem::path old = dir.string() + ".canvas-old-" + std::to_string(::getpid());
  std::filesystem::rename(dir, old);
  try {
    std::filesystem::rename(fresh, dir);
  } catch (...) {
    std::filesystem::rename(old, dir);
    throw;
  }
  std::filesystem::remove_all(old);
}

}  // namespace

HfExport convert_gguf_to_hf(const std::string& in_path, const std::string& out_dir, DType type) {
  check(type == DType::F32 || type == DType::F16 || type == DType::BF16,
        std::string("cannot export ") + dtype_name(type) + " tensors: safetensors holds f32, f16 or bf16");
  const Model model = Model::load_gguf_as_stored(in_path);
  const ModelConfig& c = model.config;
  const nlohmann::ordered_json config = hf_config_json(c);  // refuses what the layout cannot hold
  std::filesystem::path final_dir = std::filesystem::absolute(out_dir).lexically_normal();
  if (!final_dir.has_filename()) final_dir = final_dir.parent_path();  // "out/"
  check_replaceable(final_dir);
  // Written beside the folder (the same file system, so that the swap is a rename), then swapped in whole: a
  // failure (a full disk, a tokenizer that cannot be written) leaves the old checkpoint as it was and no
  // partial files.
  // A run killed mid-write left its partial folder (up to a whole checkpoint): those of dead runs go now.
  remove_dead_scratch(final_dir.string(), ".canvas-partial-", "");
  const std::filesystem::path dir = scratch_path_for(final_dir.string(), ".canvas-partial-", "");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  HfExport out;
  try {
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
        entries.push_back({spec.hf.substr(0, star) + std::to_string(x) + spec.hf.substr(star + 1),
                           type,
                           {t.ne[1], t.ne[0]},
                           bytes.data() + size_t(x) * one,
                           one});
    }
    write_safetensors((dir / "model.safetensors").string(), entries);
    write_file((dir / "config.json").string(), config.dump(2) + "\n");
    out.arch = c.arch;
    out.layout = config["architectures"][0].get<std::string>();
    out.tensors = entries.size();
    out.tokenizer = "no tokenizer in the GGUF";
    if (model.file->find("tokenizer.ggml.model")) {
      write_file((dir / "tokenizer.json").string(), bpe_json_from_gguf(*model.file));
      out.tokenizer = "tokenizer.json " +
                      std::to_string(model.file->get_string_array("tokenizer.ggml.tokens").size()) + " tokens";
    }
    swap_in(dir, final_dir);
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    throw;
  }
  return out;
}

}  // namespace canvas
