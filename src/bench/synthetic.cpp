// Synthetic models: the shape table and the fast random-weight builder.
#include "bench/synthetic.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/output_file.h"
#include "core/rng.h"
#include "io/gguf.h"
#include "io/hf_tokenizer.h"
#include "convert/convert.h"
#include "convert/retype.h"
#include "model/tensors.h"
#include "ops/matmul.h"

namespace canvas::bench {
namespace {

ModelConfig transformer(const std::string& arch, int64_t hidden, int64_t layers, int64_t heads, int64_t kv_heads,
                        int64_t ffn, int64_t vocab, float rope_theta, float rms_eps, RopeLayout layout) {
  ModelConfig c;
  c.arch = arch;
  c.hidden = hidden;
  c.n_layers = layers;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.head_dim = hidden / heads;
  c.ffn = ffn;
  c.vocab = vocab;
  c.rms_eps = rms_eps;
  c.rope.layout = layout;
  c.rope.head_dim = int(c.head_dim);
  c.rope.rot_dims = int(c.head_dim);
  c.rope.theta = rope_theta;
  c.context_length = 4096;
  c.causal = false;
  return c;
}

// Token ids only need to lie in the vocabulary (and the mask to differ from the others): they do not
// change the speed. Where the released model's ids are known they are used.
ModelConfig with_tokens(ModelConfig c, int32_t mask, int32_t bos, int32_t eos) {
  c.mask_token = mask;
  c.bos_token = bos;
  c.eos_token = eos;
  return c;
}

// DiffusionGemma-26B-A4B (docs/diffusiongemma.md section 2): 30 layers [sliding x5, full] x5; sliding
// head_dim 256 / 8 KV heads / theta 1e4 / window 1024; full head_dim 512 / 2 KV heads / theta 1e6 /
// proportional RoPE over the first 0.25 of the pairs / V from K; dense GeGLU 2112 in parallel with 128
// experts (top-8, width 704); tied head, soft-cap 30; the self-conditioning MLP of the decoder.
struct GemmaDims {
  int64_t vocab, hidden, layers, heads, sliding_kv_heads, sliding_head_dim, full_kv_heads, full_head_dim, window;
  int64_t ffn, experts, experts_used, expert_ffn;
};
constexpr GemmaDims kDiffusionGemma26B{262144, 2816, 30, 16, 8, 256, 2, 512, 1024, 2112, 128, 8, 704};
// The same layout at toy size (rows stay whole Q4_0 blocks), for tests of the builder.
constexpr GemmaDims kDiffusionGemmaTiny{320, 64, 6, 4, 2, 32, 1, 64, 8, 64, 8, 2, 32};

ModelConfig diffusion_gemma(const GemmaDims& d) {
  ModelConfig c;
  c.arch = "diffusion-gemma";
  c.vocab = d.vocab;
  c.hidden = d.hidden;
  c.n_layers = d.layers;
  c.n_heads = d.heads;
  c.n_kv_heads = d.sliding_kv_heads;
  c.head_dim = d.sliding_head_dim;
  c.ffn = d.ffn;
  c.n_experts = d.experts;
  c.n_experts_used = d.experts_used;
  c.expert_ffn = d.expert_ffn;
  c.expert_weights_norm = true;
  c.rms_eps = 1e-6f;
  c.tied_output = true;
  c.logit_softcap = 30.f;
  c.embedding_scale = std::sqrt(float(d.hidden));
  c.activation = Activation::GeluTanh;
  c.context_length = 262144;
  c.uniform_state = true;
  c.layer_style = LayerStyle::Gemma4;
  c.sliding_window = d.window;
  c.qk_norm = true;
  c.v_norm = true;
  c.layer_scalar = true;  // 1 in the built model (its float default); written as 1 by write_synthetic_gguf
  c.attention_scale = 1.f;
  c.dense_and_moe = true;
  c.router_norm = true;
  c.has_decoder = true;
  c.bos_token = 2;
  c.eos_token = 1;
  c.pad_token = 0;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    LayerAttention a;
    const bool full = l % 6 == 5;
    a.kind = full ? AttentionKind::Full : AttentionKind::Sliding;
    a.n_kv_heads = full ? d.full_kv_heads : d.sliding_kv_heads;
    a.head_dim = full ? d.full_head_dim : d.sliding_head_dim;
    a.value_from_key = full;
    a.rope.layout = RopeLayout::Neox;
    a.rope.head_dim = int(a.head_dim);
    a.rope.rot_dims = int(a.head_dim);
    a.rope.active_pairs = full ? int(0.25 * double(a.head_dim) / 2) : 0;  // partial_rotary_factor 0.25
    a.rope.theta = full ? 1e6f : 1e4f;
    c.layer_attention.push_back(a);
  }
  c.rope = c.layer_attention[0].rope;
  return c;
}

std::vector<SyntheticShape> make_shapes() {
  std::vector<SyntheticShape> shapes;
  // LLaDA-8B (GSAI-ML/LLaDA-8B-Base/Instruct): MHA, SwiGLU, untied head.
  shapes.push_back({"llada:8b", "LLaDA-8B (hidden 4096, 32 layers, 32 heads, ffn 12288, vocab 126464)",
                    with_tokens(transformer("llada", 4096, 32, 32, 32, 12288, 126464, 500000.f, 1e-5f,
                                            RopeLayout::Normal),
                                126336, 126080, 126081)});
  shapes.push_back({"llada:1b", "LLaDA-shaped ~1.3B (hidden 2048, 16 layers, 16 heads, ffn 5632, vocab 126464); "
                                "not a released model",
                    with_tokens(transformer("llada", 2048, 16, 16, 16, 5632, 126464, 500000.f, 1e-5f,
                                            RopeLayout::Normal),
                                126336, 126080, 126081)});
  shapes.push_back({"llada:small", "LLaDA-shaped ~166M (hidden 1024, 8 layers, 16 heads, ffn 2816, vocab 32000), "
                                   "the docs/performance.md bench model",
                    with_tokens(transformer("llada", 1024, 8, 16, 16, 2816, 32000, 500000.f, 1e-5f,
                                            RopeLayout::Normal),
                                31999, 31998, 31997)});
  shapes.push_back({"llada:tiny", "LLaDA-shaped toy (hidden 64, 2 layers, 4 heads, ffn 128, vocab 320), for tests",
                    with_tokens(transformer("llada", 64, 2, 4, 4, 128, 320, 500000.f, 1e-5f, RopeLayout::Normal),
                                318, 317, 316)});
  // Dream-v0-7B: the Qwen2.5-7B body (GQA 28/4, Q/K/V biases, untied head), shifted logits.
  {
    ModelConfig c = with_tokens(
        transformer("dream", 3584, 28, 28, 4, 18944, 152064, 1000000.f, 1e-6f, RopeLayout::Neox), 151666, 151643,
        151643);
    c.qkv_bias = true;
    c.shift_logits = true;
    shapes.push_back({"dream:7b", "Dream-7B (Qwen2.5-7B body: hidden 3584, 28 layers, 28/4 heads, ffn 18944, "
                                  "vocab 152064)",
                      c});
  }
  // LLaDA-MoE-7B-A1B: 64 experts, top 8, expert ffn 1024 (shape as we read its config; no QK norm here).
  {
    ModelConfig c = with_tokens(
        transformer("llada-moe", 2048, 16, 16, 16, 0, 157184, 50000.f, 1e-5f, RopeLayout::Neox), 156895, 156891,
        156892);
    c.n_experts = 64;
    c.n_experts_used = 8;
    c.expert_ffn = 1024;
    shapes.push_back({"llada-moe:7b-a1b", "LLaDA-MoE-7B-A1B (hidden 2048, 16 layers, 64 experts top-8, expert "
                                          "ffn 1024, vocab 157184)",
                      c});
  }
  // A tiny MoE for tests of the expert accounting.
  {
    ModelConfig c = with_tokens(
        transformer("llada-moe", 64, 2, 4, 2, 0, 320, 50000.f, 1e-5f, RopeLayout::Neox), 318, 317, 316);
    c.n_experts = 4;
    c.n_experts_used = 2;
    c.expert_ffn = 32;
    shapes.push_back({"llada-moe:tiny", "LLaDA-MoE-shaped toy (hidden 64, 2 layers, 4 experts top-2), for tests", c});
  }
  shapes.push_back({"diffusion-gemma:26b-a4b",
                    "DiffusionGemma-26B-A4B (hidden 2816, 30 layers [sliding x5, full] x5, 16 heads, 128 experts "
                    "top-8 width 704 + dense 2112, vocab 262144, tied)",
                    diffusion_gemma(kDiffusionGemma26B)});
  shapes.push_back({"diffusion-gemma:tiny", "DiffusionGemma-shaped toy (hidden 64, 6 layers, 8 experts top-2), for tests",
                    diffusion_gemma(kDiffusionGemmaTiny)});
  for (SyntheticShape& s : shapes) s.config.name = "synthetic " + s.name;
  return shapes;
}

int64_t available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) == 0) {
      std::istringstream fields(line.substr(13));
      int64_t kib = 0;
      fields >> kib;
      return kib * 1024;
    }
  }
  return -1;  // unknown: do not refuse
}

// Every tensor of the model (model_tensors, the same list the loaders bind) with the dtype it gets here,
// without allocating, so that sizing and building cannot disagree. Matrices take the chosen type, except
// the router, which stays f32 as converters leave it; norms, scales and biases are f32 vectors; layer
// scalars are floats in the model (left at 1).
struct TensorPlan {
  TensorSpec spec;
  DType type;
  bool ones;  // filled with 1 (norms, scales); otherwise random with standard deviation 0.02
};

std::vector<TensorPlan> plan(const ModelConfig& c, DType type) {
  std::vector<TensorPlan> out;
  for (const TensorSpec& spec : model_tensors(c)) {
    if (spec.kind == TensorKind::Scalar) continue;
    const bool matrix = spec.kind == TensorKind::Matrix && spec.role != TensorRole::Router;
    out.push_back({spec, matrix ? type : DType::F32, spec.init == TensorInit::One});
  }
  return out;
}

int64_t plan_bytes(const TensorPlan& t) {
  int64_t rows = 1;
  for (size_t d = 1; d < t.spec.shape.size(); ++d) rows *= t.spec.shape[d];
  return row_bytes(t.type, t.spec.shape[0]) * rows;
}

ModelConfig cut_config(const SyntheticShape& shape, const SyntheticOptions& options) {
  ModelConfig c = shape.config;
  check(options.layers >= 0, "--layers must not be negative");
  check(options.layers <= c.n_layers, "--layers " + std::to_string(options.layers) + ": " + shape.name + " has only " +
                                          std::to_string(c.n_layers) + " layers");
  if (options.layers > 0) {
    c.n_layers = options.layers;
    if (!c.layer_attention.empty()) c.layer_attention.resize(size_t(c.n_layers));
  }
  check(matmul_supports(options.type), std::string("synthetic models: weight type ") + dtype_name(options.type) +
                                           " is not supported by matmul");
  return c;
}

// A vocabulary of `n` tokens that canvas's and llama.cpp's gemma4 tokenizers both load: <pad> <eos> <bos>
// <unk> <mask>, the 256 byte tokens, t h th, printable ASCII (space as U+2581) where it fits, then
// "<unused_K>" up to n. One merge: text becomes about one token per character. Only its size matters to
// the speed.
HfVocab placeholder_vocab(const ModelConfig& c) {
  HfVocab v;
  const auto add = [&v](std::string text, HfVocab::Kind kind) {
    v.tokens.push_back(std::move(text));
    v.kinds.push_back(kind);
    v.normalized.push_back(false);
  };
  check(c.pad_token == 0 && c.eos_token == 1 && c.bos_token == 2,
        "placeholder vocabulary: expects <pad> 0, <eos> 1, <bos> 2 as Gemma has them");
  add("<pad>", HfVocab::Kind::Special);
  add("<eos>", HfVocab::Kind::Special);
  add("<bos>", HfVocab::Kind::Special);
  add("<unk>", HfVocab::Kind::Unknown);
  add("<mask>", HfVocab::Kind::Special);  // Gemma's id 4; llama-diffusion-cli requires a mask token id
  char hex[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    add(hex, HfVocab::Kind::Byte);
  }
  // One merge (t h -> th): both tokenizers refuse a BPE vocabulary without a merge list.
  for (const char* text : {"t", "h", "th"}) add(text, HfVocab::Kind::Normal);
  v.merges = {{"t", "h"}};
  if (c.vocab >= int64_t(v.tokens.size()) + 93) {  // (toy vocabularies: bytes only)
    add("\u2581", HfVocab::Kind::Normal);
    for (char ch = 33; ch < 127; ++ch)
      if (ch != 't' && ch != 'h') add(std::string(1, ch), HfVocab::Kind::Normal);
  }
  check(int64_t(v.tokens.size()) <= c.vocab, "placeholder vocabulary: the model's vocabulary is too small");
  for (int64_t k = 0; int64_t(v.tokens.size()) < c.vocab; ++k)
    add("<unused_" + std::to_string(k) + ">", HfVocab::Kind::Normal);
  v.replacements = {{" ", "\u2581"}};
  v.unknown_id = 3;
  v.bos_id = 2;
  v.eos_id = 1;
  v.pad_id = 0;
  v.add_bos = true;
  return v;
}

}  // namespace

void write_synthetic_gguf(const SyntheticShape& shape, const SyntheticOptions& options, const std::string& path,
                          ThreadPool* pool) {
  const ModelConfig config = cut_config(shape, options);
  check(config.layer_style == LayerStyle::Gemma4, "--save writes Gemma-family shapes (llama.cpp's gemma4 / "
                                                  "diffusion-gemma layout); " + shape.name + " is not one");
  GgufWriter w;
  config_to_gguf(config, w);
  w.set("general.file_type", GgufValue::u32(llama_file_type(options.type)));
  for (auto& [key, value] : HfTokenizer::gguf_metadata(placeholder_vocab(config))) w.set(key, std::move(value));
  w.set("tokenizer.ggml.add_space_prefix", GgufValue::boolean(false));
  w.set("tokenizer.ggml.mask_token_id", GgufValue::u32(4));
  if (config.has_decoder)
    write_diffusion_gemma_keys(256, JsonDocument(nlohmann::json::object(), "synthetic"), w);  // the release's
  const std::vector<float> rope_freqs = gguf_rope_freqs(config);
  if (!rope_freqs.empty())
    w.add_tensor("rope_freqs.weight", DType::F32, {int64_t(rope_freqs.size())}, rope_freqs.data(),
                 rope_freqs.size() * 4);
  // Every tensor in file order, scalars (layer scales, 1) included; the data stays alive until write().
  std::vector<std::unique_ptr<uint8_t, FreeDeleter>> storage;
  uint64_t index = 0;
  for (const TensorSpec& spec : model_tensors(config)) {
    const bool matrix = spec.kind == TensorKind::Matrix && spec.role != TensorRole::Router;
    const TensorPlan t{spec, matrix ? options.type : DType::F32, spec.init == TensorInit::One};
    const int64_t bytes = plan_bytes(t);
    void* p = std::aligned_alloc(64, size_t((bytes + 63) / 64 * 64));
    check(p != nullptr, "synthetic " + shape.name + ": cannot allocate " + std::to_string(bytes) + " bytes");
    storage.emplace_back(static_cast<uint8_t*>(p));
    if (spec.kind == TensorKind::Scalar) {  // not in build_synthetic_model's plan: no seed index
      std::fill(static_cast<float*>(p), static_cast<float*>(p) + spec.elements(), 1.f);
      w.add_tensor(spec.gguf, t.type, spec.shape, p, size_t(bytes));
      continue;
    }
    if (t.ones) {
      std::fill(static_cast<float*>(p), static_cast<float*>(p) + spec.elements(), 1.f);
    } else {  // the same bytes as build_synthetic_model's
      fill_random(t.type, p, spec.elements(), 0.02f, options.seed * 1000003 + index, pool);
    }
    ++index;
    w.add_tensor(spec.gguf, t.type, spec.shape, p, size_t(bytes));
  }
  w.write(path);
}

const std::vector<SyntheticShape>& synthetic_shapes() {
  static const std::vector<SyntheticShape> shapes = make_shapes();
  return shapes;
}

const SyntheticShape& find_synthetic_shape(const std::string& name) {
  std::string known;
  for (const SyntheticShape& s : synthetic_shapes()) {
    if (s.name == name) return s;
    known += (known.empty() ? "" : ", ") + s.name;
  }
  throw Error("unknown synthetic model '" + name + "' (known: " + known + ")");
}

int64_t synthetic_model_bytes(const SyntheticShape& shape, const SyntheticOptions& options) {
  int64_t total = 0;
  for (const TensorPlan& t : plan(cut_config(shape, options), options.type)) total += plan_bytes(t);
  return total;
}

void fill_random(DType type, void* dst, int64_t elements, float stddev, uint64_t seed, ThreadPool* pool) {
  const DTypeInfo& info = dtype_info(type);
  check(elements % info.block_size == 0, std::string("fill_random: ") + std::to_string(elements) +
                                             " elements are not a whole number of " + info.name + " blocks");
  const int64_t blocks = elements / info.block_size;
  const int64_t chunk = info.block_size == 1 ? 65536 : 4096;  // blocks per task
  const int64_t chunks = (blocks + chunk - 1) / chunk;
  uint8_t* out = static_cast<uint8_t*>(dst);
  parallel_for(pool, chunks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> values;
    for (int64_t ch = begin; ch < end; ++ch) {
      // Each chunk has its own stream: the bytes do not depend on how chunks are split over threads.
      Rng rng(seed * 0x9e3779b97f4a7c15ull + uint64_t(ch));
      const int64_t b0 = ch * chunk, b1 = std::min(blocks, b0 + chunk);
      uint8_t* p = out + b0 * info.block_bytes;
      if (type == DType::Q4_0 || type == DType::Q8_0) {
        // Uniform codes: q - 8 in [-8, 7] has standard deviation 4.61, int8 in [-128, 127] 73.9.
        const uint16_t d = f32_to_f16(stddev / (type == DType::Q4_0 ? 4.61f : 73.9f));
        const size_t code_bytes = size_t(info.block_bytes) - 2;
        for (int64_t b = b0; b < b1; ++b, p += info.block_bytes) {
          std::memcpy(p, &d, 2);
          for (size_t i = 0; i < code_bytes; i += 8) {
            const uint64_t r = rng.next();
            std::memcpy(p + 2 + i, &r, std::min<size_t>(8, code_bytes - i));
          }
        }
      } else {
        // Uniform in [-a, a] with a = sqrt(3) stddev, converted to the type.
        const float a = stddev * 1.7320508f;
        values.resize(size_t((b1 - b0) * info.block_size));
        for (float& v : values) v = a * (float(rng.next() >> 40) * 0x1.0p-23f - 1.f);
        if (type == DType::F32) {
          std::memcpy(p, values.data(), values.size() * 4);
        } else {
          quantize_row(type, values.data(), p, int64_t(values.size()));
        }
      }
    }
  });
}

std::unique_ptr<SyntheticModel> build_synthetic_model(const SyntheticShape& shape, const SyntheticOptions& options,
                                                      ThreadPool* pool) {
  const ModelConfig config = cut_config(shape, options);
  const std::vector<TensorPlan> tensors = plan(config, options.type);
  int64_t total = 0;
  for (const TensorPlan& t : tensors) total += plan_bytes(t);
  const int64_t available = available_memory_bytes();
  if (available > 0 && double(total) > 0.9 * double(available)) {
    char msg[512];
    std::snprintf(msg, sizeof msg,
                  "synthetic %s at %s needs %.2f GiB, but only %.2f GiB of memory is available (try --type q4_0 or "
                  "--layers N)",
                  shape.name.c_str(), dtype_name(options.type), double(total) / 1073741824.0,
                  double(available) / 1073741824.0);
    throw Error(msg);
  }

  auto out = std::make_unique<SyntheticModel>();
  out->model.config = config;
  out->bytes = total;
  Model& m = out->model;
  m.layers.assign(size_t(config.n_layers), LayerWeights{});
  uint64_t index = 0;
  for (const TensorPlan& t : tensors) {
    const int64_t bytes = plan_bytes(t);
    void* p = std::aligned_alloc(64, size_t((bytes + 63) / 64 * 64));
    check(p != nullptr, "synthetic " + shape.name + ": cannot allocate " + std::to_string(bytes) + " bytes for '" +
                            t.spec.gguf + "'");
    out->storage.emplace_back(static_cast<uint8_t*>(p));
    const int64_t elements = t.spec.elements();
    if (t.ones) {
      float* f = static_cast<float*>(p);
      std::fill(f, f + elements, 1.f);
    } else {
      fill_random(t.type, p, elements, 0.02f, options.seed * 1000003 + index, pool);
    }
    ++index;
    TensorView v;
    v.name = t.spec.gguf;
    v.type = t.type;
    v.n_dims = int(t.spec.shape.size());
    for (size_t d = 0; d < t.spec.shape.size(); ++d) v.ne[d] = t.spec.shape[d];
    v.data = p;
    TensorView* slot = weight_slot(m, t.spec.role, t.spec.layer);
    check(slot != nullptr, "synthetic " + shape.name + ": internal error: no place for '" + t.spec.gguf + "'");
    *slot = v;
  }
  if (config.tied_output) m.output = m.token_embd;
  // As Model::load_gguf leaves a loaded model: matrices in the layout the kernels read fastest.
  const auto writable = [](const TensorView& t) { return static_cast<uint8_t*>(const_cast<void*>(t.data)); };
  interleave_weights(m, writable, pool);
  prepare_embedding_columns(m, pool);
  return out;
}

}  // namespace canvas::bench
