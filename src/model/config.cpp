// Reading a ModelConfig from llama.cpp-style GGUF metadata or a Hugging Face config.json.
#include "model/config.h"

#include <cmath>
#include <cstdint>
#include <filesystem>

#include "core/error.h"
#include "io/gguf.h"
#include "io/json.h"
#include "model/hf_families.h"
#include "model/limits.h"

namespace canvas {
namespace {

// A token id key of a GGUF, `fallback` when absent. An id past int32 (it would wrap) is an Error naming the
// file and key; bind_gguf checks it against the vocabulary (the embedding's rows) once that is known.
int32_t gguf_token_id(const GgufFile& file, const std::string& key, int64_t fallback) {
  const int64_t id = file.get_int(key, fallback);
  check(id >= -1 && id <= INT32_MAX, file.path() + ": " + key + " " + std::to_string(id) + " is not a token id");
  return int32_t(id);
}

struct ArchTraits {
  const char* arch;
  RopeLayout rope_layout;
  bool causal;         // native attention
  bool shift_default;  // diffusion.shift_logits when absent
};

// RoPE layouts follow llama.cpp's converters: llada/llama Q/K are permuted for the consecutive-pair
// rotation; dream, qwen2 and llada-moe keep the split-half (NEOX) rotation.
constexpr ArchTraits kArchs[] = {
    {"llada", RopeLayout::Normal, false, false},   {"llada-moe", RopeLayout::Neox, false, false},
    {"dream", RopeLayout::Neox, false, true},      {"llama", RopeLayout::Normal, true, false},
    {"qwen2", RopeLayout::Neox, true, false},
};

// GGUF diffusion.default_mode (any architecture): what --mode auto runs.
void read_default_mode(const GgufFile& file, ModelConfig& c) {
  c.default_mode = file.get_string("diffusion.default_mode", "");
  check(c.default_mode.empty() || c.default_mode == "diffusion" || c.default_mode == "ar" || c.default_mode == "verify",
        file.path() + ": diffusion.default_mode '" + c.default_mode + "' must be diffusion, ar or verify");
}
// See ModelConfig::release_form.
void set_release_form(ModelConfig& c) {
  c.release_form = true;
  if (c.default_mode.empty()) c.default_mode = "diffusion";
}
void write_default_mode(const ModelConfig& c, GgufWriter& w) {
  // A release-form file's "diffusion" is implied by its form; written out it would follow the weights into
  // checkpoints canvas trains from them.
  if (!c.default_mode.empty() && !c.release_form) w.set("diffusion.default_mode", GgufValue::string(c.default_mode));
}

bool is_gemma_arch(const std::string& arch) {
  return arch == "diffusion-gemma" || arch == "gemma4" || arch == "gemma3";
}

// What every Gemma 4 text stack shares, whatever file it came from. Gemma 3 has the same layer without
// the v norm and the layer scalar; its attention scale depends on the head width (gemma3_attention_scale).
void set_gemma_constants(ModelConfig& c) {
  const bool gemma3 = c.arch == "gemma3";
  c.layer_style = LayerStyle::Gemma4;
  c.activation = Activation::GeluTanh;
  c.qk_norm = true;
  c.v_norm = !gemma3;
  c.layer_scalar = !gemma3;
  c.attention_scale = 1.f;  // Gemma 4: q_norm and k_norm carry the scale
  c.expert_weights_norm = true;
  c.router_norm = true;
  c.tied_output = true;
  c.has_decoder = c.arch == "diffusion-gemma";
  c.uniform_state = c.has_decoder;  // DiffusionGemma is uniform-state: no mask token, the entropy-bound sampler
  // The AR Gemmas are causal; DiffusionGemma's native logits are the decoder's (row i = canvas token i).
  c.causal = c.arch == "gemma4" || gemma3;
  c.shift_logits = c.causal;
  c.embedding_scale = std::sqrt(float(c.hidden));
  c.rope.layout = RopeLayout::Neox;
}

// Floating-point hyper-parameters every family shares: a NaN or a non-positive epsilon / RoPE base gives
// NaN or garbage logits later, so it is refused at load naming the key.
void check_float_hyperparameters(const ModelConfig& c, const std::string& where, const std::string& eps_key,
                                 const std::string& theta_key) {
  check(std::isfinite(c.rms_eps) && c.rms_eps > 0,
        where + ": " + eps_key + " is " + std::to_string(c.rms_eps) + "; it must be a positive finite number");
  check(std::isfinite(c.rope.theta) && c.rope.theta > 0,
        where + ": " + theta_key + " is " + std::to_string(c.rope.theta) + "; it must be a positive finite number");
  check(std::isfinite(c.logit_softcap) && c.logit_softcap >= 0,
        where + ": final_logit_softcapping is " + std::to_string(c.logit_softcap) + "; it must be finite and >= 0");
}

// Checks shared by both readers once layer_attention is filled; `where` names the source.
void check_gemma_config(ModelConfig& c, const std::string& where) {
  auto positive = [&](int64_t v, const char* what) {
    check(v > 0 && v < (int64_t(1) << 31), where + ": " + what + " has invalid value " + std::to_string(v));
  };
  positive(c.hidden, "hidden size");
  positive(c.n_layers, "layer count");
  positive(c.n_heads, "attention head count");
  positive(c.ffn, "dense MLP width");
  check(int64_t(c.layer_attention.size()) == c.n_layers,
        where + ": " + std::to_string(c.layer_attention.size()) + " layer types for " + std::to_string(c.n_layers) +
            " layers");
  bool any_sliding = false;
  for (size_t l = 0; l < c.layer_attention.size(); ++l) {
    const LayerAttention& a = c.layer_attention[l];
    const std::string layer = where + ": layer " + std::to_string(l) + " ";
    check(a.n_kv_heads > 0 && c.n_heads % a.n_kv_heads == 0,
          layer + "has " + std::to_string(a.n_kv_heads) + " KV heads, not a divisor of " + std::to_string(c.n_heads) +
              " query heads");
    check(a.head_dim > 0 && a.head_dim % 2 == 0 && a.head_dim < 65536,
          layer + "head dim " + std::to_string(a.head_dim) + " must be positive and even");
    check(std::isfinite(a.rope.theta) && a.rope.theta > 0, layer + "RoPE theta must be positive and finite");
    any_sliding = any_sliding || a.kind == AttentionKind::Sliding;
  }
  if (any_sliding) positive(c.sliding_window, "sliding window");
  if (c.is_moe()) {
    check(c.n_experts_used > 0 && c.n_experts_used <= c.n_experts,
          where + ": experts used per token must be in 1.." + std::to_string(c.n_experts));
    positive(c.expert_ffn, "expert MLP width");
    c.dense_and_moe = true;
  }
  // Kept for code that reads the uniform fields (KV sizes of layer 0, the widest head for messages).
  c.n_kv_heads = c.layer_attention[0].n_kv_heads;
  c.head_dim = c.layer_attention[0].head_dim;
  c.rope = c.layer_attention[0].rope;
  check_float_hyperparameters(c, where, "rms_norm_eps", "rope_theta");
}

// Gemma 3 scales q.k by query_pre_attn_scalar^-1/2, which its GGUF files do not store: as llama.cpp reads
// them, hidden / heads for the 27B model (62 layers) and the head width for the other sizes.
float gemma3_attention_scale(const ModelConfig& c, int64_t head_dim) {
  const int64_t scalar = c.n_layers == 62 ? c.hidden / c.n_heads : head_dim;
  return 1.f / std::sqrt(float(scalar));
}

RopeParams gemma_rope(int64_t head_dim, double theta, int64_t active_pairs) {
  RopeParams r;
  r.layout = RopeLayout::Neox;
  r.head_dim = int(head_dim);
  r.rot_dims = int(head_dim);
  r.active_pairs = int(active_pairs);  // 0: every pair rotates
  r.theta = float(theta);
  return r;
}

// llama.cpp's diffusion-gemma / gemma4 keys (PR #24423). Proportional RoPE on full layers is stored as
// the generated `rope_freqs.weight`: per-pair frequency divisors, 1 for rotating pairs and a huge value
// (1e30) for the pairs whose frequency is 0.
ModelConfig gemma_config_from_gguf(const GgufFile& file, ModelConfig c) {
  const std::string p = c.arch + ".";
  c.name = file.get_string("general.name", "");
  c.hidden = file.require_int(p + "embedding_length");
  c.n_layers = file.require_int(p + "block_count");
  c.n_heads = file.require_int(p + "attention.head_count");
  c.ffn = file.require_int(p + "feed_forward_length");
  c.n_experts = file.get_int(p + "expert_count", 0);
  c.n_experts_used = file.get_int(p + "expert_used_count", 0);
  c.expert_ffn = file.get_int(p + "expert_feed_forward_length", 0);
  c.context_length = checked_context_length(file.get_int(p + "context_length", 131072), file.path(), p + "context_length");
  c.rms_eps = float(file.get_float(p + "attention.layer_norm_rms_epsilon", 1e-6));
  // Absent, llama.cpp's gemma4 / diffusion-gemma cap at 30 (its hparams default; the branch's converter writes
  // the key only when config.json has it, and the release's omits it) and its gemma3 does not cap. canvas's
  // older files (marked by embedding_scale, a key only canvas writes) left the key out to mean no cap.
  const bool llama_cpp_file = !file.find(p + "embedding_scale");
  const double softcap_default = llama_cpp_file && c.arch != "gemma3" ? 30.0 : 0.0;
  c.logit_softcap = float(file.get_float(p + "final_logit_softcapping", softcap_default));
  c.sliding_window = file.get_int(p + "attention.sliding_window", 0);
  // Gemma 4 E2B / E4B features (llama.cpp's keys) that this forward does not implement.
  for (const char* key : {"embedding_length_per_layer_input", "attention.shared_kv_layers"})
    check(file.get_int(p + key, 0) == 0, file.path() + ": key " + p + key + " = " +
                                             std::to_string(file.get_int(p + key, 0)) +
                                             " (per-layer inputs / KV sharing between layers) is not supported");
  set_gemma_constants(c);
  if (file.find(p + "embedding_scale")) {
    // canvas's converter records the scale the source checkpoint's reference used.
    c.embedding_scale = float(file.get_float(p + "embedding_scale", c.embedding_scale));
  } else if (const TensorView* e = file.find_tensor("token_embd.weight"); e && e->type == DType::BF16) {
    c.embedding_scale = bf16_to_f32(f32_to_bf16(c.embedding_scale));  // as the bf16 reference rounds it
  }
  check(c.n_layers > 0 && c.n_layers < 100000, file.path() + ": key " + p + "block_count has invalid value " +
                                                   std::to_string(c.n_layers));
  const size_t L = size_t(c.n_layers);

  std::vector<int64_t> kv_heads;
  const std::string kv_key = p + "attention.head_count_kv";
  const GgufValue* kv = file.find(kv_key);
  if (kv && kv->type == GgufType::Array) {
    kv_heads = file.get_int_array(kv_key);
    check(kv_heads.size() == L, file.path() + ": key " + kv_key + " has " + std::to_string(kv_heads.size()) +
                                    " entries for " + std::to_string(L) + " layers");
  } else {
    kv_heads.assign(L, file.get_int(kv_key, c.n_heads));
  }
  const std::string pattern_key = p + "attention.sliding_window_pattern";
  std::vector<bool> sliding(L, false);
  if (c.arch == "gemma3" && !file.find(pattern_key)) {
    // Gemma 3 files carry no pattern: five sliding layers, then a full one (llama.cpp's reading too).
    for (size_t l = 0; l < L; ++l) sliding[l] = (l + 1) % 6 != 0;
  } else if (const GgufValue* pat = file.find(pattern_key)) {
    if (pat->type == GgufType::Array) {
      const std::vector<int64_t> flags = file.get_int_array(pattern_key);
      check(flags.size() == L, file.path() + ": key " + pattern_key + " has " + std::to_string(flags.size()) +
                                   " entries for " + std::to_string(L) + " layers");
      for (size_t l = 0; l < L; ++l) sliding[l] = flags[l] != 0;
    } else {
      // Gemma 3 style period: every period-th layer is full.
      const int64_t period = file.get_int(pattern_key, 0);
      check(period > 0, file.path() + ": key " + pattern_key + " must be positive");
      for (size_t l = 0; l < L; ++l) sliding[l] = (int64_t(l) + 1) % period != 0;
    }
  }
  const int64_t full_dim = file.get_int(p + "attention.key_length", c.hidden / std::max<int64_t>(c.n_heads, 1));
  const int64_t swa_dim = file.get_int(p + "attention.key_length_swa", full_dim);
  const double full_theta = file.get_float(p + "rope.freq_base", 1000000.0);
  const double swa_theta = file.get_float(p + "rope.freq_base_swa", 10000.0);
  // Gemma 3 4B-27B stretch the full layers' positions (linear RoPE scaling); this forward has no such
  // scaling, so those files are refused rather than run wrong.
  const std::string scaling = file.get_string(p + "rope.scaling.type", "none");
  const double scaling_factor = file.get_float(p + "rope.scaling.factor", 1.0);
  check(scaling == "none" || scaling_factor == 1.0,
        file.path() + ": key " + p + "rope.scaling.type '" + scaling + "' with factor " +
            std::to_string(scaling_factor) + " (scaled RoPE positions) is not supported");

  int64_t full_active_pairs = 0;
  if (const TensorView* freqs = file.find_tensor("rope_freqs.weight")) {
    check(freqs->type == DType::F32 && freqs->elements() == full_dim / 2,
          file.path() + ": tensor 'rope_freqs.weight' must be f32 with " + std::to_string(full_dim / 2) +
              " values (full-layer head dim / 2), is " + dtype_name(freqs->type) + " " + freqs->shape_string());
    const float* f = freqs->f32();
    int64_t active = 0;
    while (active < full_dim / 2 && f[active] == 1.f) ++active;
    for (int64_t i = active; i < full_dim / 2; ++i)
      check(f[i] >= 1e10f, file.path() + ": tensor 'rope_freqs.weight' value " + std::to_string(f[i]) + " at " +
                               std::to_string(i) + " is neither 1 (rotating pair) nor >= 1e10 (pair at frequency 0)");
    full_active_pairs = active == full_dim / 2 ? 0 : active;
    check(active > 0, file.path() + ": tensor 'rope_freqs.weight' leaves no rotating pair");
  }
  for (size_t l = 0; l < L; ++l) {
    LayerAttention a;
    a.kind = sliding[l] ? AttentionKind::Sliding : AttentionKind::Full;
    a.n_kv_heads = kv_heads[l];
    a.head_dim = sliding[l] ? swa_dim : full_dim;
    a.rope = sliding[l] ? gemma_rope(swa_dim, swa_theta, 0) : gemma_rope(full_dim, full_theta, full_active_pairs);
    // attention_k_eq_v has no key of its own: a layer without attn_v shares K as V.
    a.value_from_key = file.find_tensor("blk." + std::to_string(l) + ".attn_v.weight") == nullptr;
    c.layer_attention.push_back(a);
  }
  if (c.arch == "gemma3") c.attention_scale = gemma3_attention_scale(c, full_dim);
  check_gemma_config(c, file.path());
  if (c.has_decoder && !file.find("training.identity") && !file.find("training.config")) set_release_form(c);
  c.bos_token = gguf_token_id(file, "tokenizer.ggml.bos_token_id", 2);
  c.eos_token = gguf_token_id(file, "tokenizer.ggml.eos_token_id", 1);
  c.pad_token = gguf_token_id(file, "tokenizer.ggml.padding_token_id", 0);
  return c;
}

}  // namespace

namespace {

// The head size and K/V head count of each full-attention layer of a Gemma 4 / DiffusionGemma config.json,
// in either of the forms transformers reads: global_head_dim (512 when absent) and
// num_global_key_value_heads (the sliding layers' count when absent; applied only with attention_k_eq_v),
// as the release publishes them, or per_layer_config, a sparse map from layer index ("05", zero-padded by
// transformers >= 5.15 when it re-saves a checkpoint) to the attributes that differ from the globals.
struct FullLayerShapes {
  std::vector<int64_t> head_dim, kv_heads;  // per layer; meaningful on full layers
};

FullLayerShapes full_layer_shapes(const JsonDocument& doc, const std::string& prefix, int64_t head_dim,
                                  int64_t kv_heads, bool k_eq_v, const std::string& path) {
  const int64_t n_layers = doc.require_int(prefix + "num_hidden_layers");
  check(n_layers > 0 && n_layers < 100000,
        path + ": " + prefix + "num_hidden_layers has invalid value " + std::to_string(n_layers));
  FullLayerShapes s;
  const nlohmann::json* per_layer = doc.find(prefix + "per_layer_config");
  if (!per_layer) {
    const int64_t global_head_dim = doc.get_int(prefix + "global_head_dim", 512);
    const int64_t global_kv = k_eq_v ? doc.get_int(prefix + "num_global_key_value_heads", kv_heads) : kv_heads;
    s.head_dim.assign(size_t(n_layers), global_head_dim);
    s.kv_heads.assign(size_t(n_layers), global_kv);
    return s;
  }
  const std::string where = path + ": " + prefix + "per_layer_config";
  check(per_layer->is_object(), where + " must be an object (layer index -> overrides), is " + json_type_name(*per_layer));
  s.head_dim.assign(size_t(n_layers), head_dim);
  s.kv_heads.assign(size_t(n_layers), kv_heads);
  for (const auto& [index, overrides] : per_layer->items()) {
    const bool digits = !index.empty() && index.size() <= 6 &&
                        index.find_first_not_of("0123456789") == std::string::npos;
    const int64_t l = digits ? std::stoll(index) : -1;
    check(l >= 0 && l < n_layers, where + ": key '" + index + "' is not a layer index in 0.." +
                                      std::to_string(n_layers - 1));
    check(overrides.is_object(), where + "." + index + " must be an object, is " + json_type_name(overrides));
    for (const auto& [name, value] : overrides.items()) {
      const std::string at = where + "." + index + "." + name;
      if (name == "head_dim" || name == "num_key_value_heads") {
        check(value.is_number_integer() && value.get<int64_t>() > 0,
              at + " must be a positive integer, is " + json_excerpt(value));
        (name == "head_dim" ? s.head_dim : s.kv_heads)[size_t(l)] = value.get<int64_t>();
      } else if (!value.is_null()) {
        throw Error(at + ": a per-layer '" + name +
                    "' is not supported (supported per-layer overrides: head_dim, num_key_value_heads)");
      }
    }
  }
  return s;
}

}  // namespace

int32_t checked_token_id(int64_t id, int64_t vocab, const std::string& origin, const std::string& key) {
  check(id >= 0 && id < vocab, origin + ": " + key + " " + std::to_string(id) + " is outside the vocabulary of " +
                                   std::to_string(vocab) + " tokens");
  return int32_t(id);
}

void check_token_ids(const ModelConfig& c, const std::string& origin) {
  for (const auto& [id, key] : {std::pair{c.bos_token, "bos"}, {c.eos_token, "eos"}, {c.pad_token, "padding"},
                                {c.mask_token, "mask"}})
    if (id >= 0) checked_token_id(id, c.vocab, origin, std::string("tokenizer.ggml.") + key + "_token_id");
}

ModelConfig config_from_hf(const std::string& path) {
  const JsonDocument doc = JsonDocument::load(path);
  if (const std::string family = hf_llama_family(doc); !family.empty()) {
    const std::filesystem::path tokenizer = std::filesystem::path(path).parent_path() / "tokenizer.json";
    return llama_family_config_from_hf(doc, family, std::filesystem::exists(tokenizer) ? tokenizer.string() : "");
  }
  ModelConfig c;
  const std::string model_type = doc.get_string("model_type", "");
  if (model_type.find("diffusion") != std::string::npos && model_type.find("gemma") != std::string::npos) {
    c.arch = "diffusion-gemma";
  } else if (model_type.rfind("gemma4", 0) == 0) {
    c.arch = "gemma4";
  } else {
    const nlohmann::json* archs = doc.find("architectures");
    throw Error(path + ": model_type '" + model_type + "' (architectures " + (archs ? json_excerpt(*archs) : "absent") +
                ") is not supported from safetensors (supported: LLaDAModelLM / llada, LLaDAMoEModelLM, DreamModel / "
                "Dream, Qwen2ForCausalLM / qwen2, LlamaForCausalLM / llama, diffusion_gemma, gemma4, gemma4_text)");
  }
  const std::string t = doc.has("text_config") ? "text_config." : "";
  auto key = [&](const char* k) { return t + k; };
  c.name = doc.get_string("_name_or_path", "");
  c.vocab = doc.require_int(key("vocab_size"));
  c.hidden = doc.require_int(key("hidden_size"));
  c.n_layers = doc.require_int(key("num_hidden_layers"));
  c.n_heads = doc.require_int(key("num_attention_heads"));
  c.ffn = doc.require_int(key("intermediate_size"));
  const int64_t kv_heads = doc.get_int(key("num_key_value_heads"), c.n_heads);
  const int64_t head_dim = doc.get_int(key("head_dim"), c.hidden / std::max<int64_t>(c.n_heads, 1));
  // DiffusionGemma's attention has no v_proj on its full layers (V is the raw K) whatever the config says;
  // Gemma 4 decides it by attention_k_eq_v (false when absent). configuration_diffusion_gemma.py reads a
  // missing attention_k_eq_v as true, which also lets num_global_key_value_heads apply.
  const bool diffusion_gemma = c.arch == "diffusion-gemma";
  const bool k_eq_v = doc.get_bool(key("attention_k_eq_v"), diffusion_gemma);
  const FullLayerShapes full = full_layer_shapes(doc, t, head_dim, kv_heads, k_eq_v, path);
  const bool moe = doc.get_bool(key("enable_moe_block"), doc.get_int(key("num_experts"), 0) > 0);
  if (moe) {
    c.n_experts = doc.require_int(key("num_experts"));
    // enable_moe_block decides (as in transformers); with it on, zero experts is a broken file, not a
    // dense model.
    check(c.n_experts > 0, path + ": " + key("enable_moe_block") + " is true but " + key("num_experts") + " is " +
                               std::to_string(c.n_experts));
    c.n_experts_used = doc.require_int(key("top_k_experts"));
    c.expert_ffn = doc.require_int(key("moe_intermediate_size"));
  }
  c.rms_eps = float(doc.get_float(key("rms_norm_eps"), 1e-6));
  // The reference's default cap: 30 for DiffusionGemma (a class attribute of its config), none for Gemma 4.
  c.logit_softcap = float(doc.get_float(key("final_logit_softcapping"), diffusion_gemma ? 30.0 : 0.0));
  c.context_length = checked_context_length(doc.get_int(key("max_position_embeddings"), 131072), path, key("max_position_embeddings"));
  c.sliding_window = doc.get_int(key("sliding_window"), 0);
  set_gemma_constants(c);

  // Features of other Gemma 4 sizes that this forward does not implement: refuse rather than run wrong.
  const std::string act = doc.get_string(key("hidden_activation"), "gelu_pytorch_tanh");
  check(act == "gelu_pytorch_tanh" || act == "gelu_tanh",
        path + ": " + key("hidden_activation") + " '" + act + "' is not supported (gelu_pytorch_tanh)");
  check(!doc.get_bool(key("attention_bias"), false), path + ": " + key("attention_bias") + " = true is not supported");
  // "vision" makes only image tokens bidirectional (text stays causal, and canvas runs text only); "all"
  // would make the encoder bidirectional and halve the sliding window.
  const std::string bidirectional = doc.get_string(key("use_bidirectional_attention"), "");
  check(bidirectional.empty() || bidirectional == "vision",
        path + ": " + key("use_bidirectional_attention") + " '" + bidirectional +
            "' is not supported (a bidirectional encoder; supported: absent, null or \"vision\")");
  check(doc.get_int(key("num_kv_shared_layers"), 0) == 0,
        path + ": " + key("num_kv_shared_layers") + " (KV sharing between layers) is not supported");
  check(doc.get_int(key("hidden_size_per_layer_input"), 0) == 0,
        path + ": " + key("hidden_size_per_layer_input") + " (per-layer inputs) is not supported");
  check(!doc.get_bool(key("use_double_wide_mlp"), false), path + ": " + key("use_double_wide_mlp") + " is not supported");
  check(doc.get_bool(key("tie_word_embeddings"), doc.get_bool("tie_word_embeddings", true)),
        path + ": tie_word_embeddings = false is not supported (Gemma 4 ties the head to the embedding)");

  check(c.n_layers > 0 && c.n_layers < 100000,
        path + ": " + key("num_hidden_layers") + " has invalid value " + std::to_string(c.n_layers));
  std::vector<std::string> types = doc.get_string_array(key("layer_types"));
  if (types.empty()) {
    const int64_t period = doc.get_int(key("sliding_window_pattern"), c.sliding_window > 0 ? 6 : 0);
    for (int64_t l = 0; l < c.n_layers; ++l)
      types.push_back(period > 0 && (l + 1) % period != 0 ? "sliding_attention" : "full_attention");
  }
  check(int64_t(types.size()) == c.n_layers, path + ": " + key("layer_types") + " has " +
                                                 std::to_string(types.size()) + " entries for " +
                                                 std::to_string(c.n_layers) + " layers");
  // As the reference's config does (with a warning there): the last layer is always a full one.
  types.back() = "full_attention";
  for (size_t l = 0; l < types.size(); ++l) {
    const bool sliding = types[l] == "sliding_attention";
    check(sliding || types[l] == "full_attention", path + ": " + key("layer_types") + "." + std::to_string(l) +
                                                       " is '" + types[l] +
                                                       "' (expected sliding_attention or full_attention)");
    const std::string rp = key("rope_parameters.") + types[l] + ".";
    // Gemma 4 configs give RoPE per layer type; without it a guessed base would run silently wrong.
    check(doc.has(key("rope_parameters.") + types[l]),
          path + ": missing key '" + key("rope_parameters.") + types[l] + "' (RoPE of " + types[l] + " layers)");
    const std::string rope_type = doc.get_string(rp + "rope_type", "default");
    const double factor = doc.get_float(rp + "partial_rotary_factor", 1.0);
    const double theta = doc.get_float(rp + "rope_theta", sliding ? 10000.0 : 1000000.0);
    LayerAttention a;
    a.kind = sliding ? AttentionKind::Sliding : AttentionKind::Full;
    a.n_kv_heads = sliding ? kv_heads : full.kv_heads[l];
    a.head_dim = sliding ? head_dim : full.head_dim[l];
    int64_t active_pairs = 0;
    if (rope_type == "proportional") {
      check(factor > 0 && factor <= 1, path + ": " + rp + "partial_rotary_factor must be in (0, 1]");
      // HF: inv_freq_i = theta^(-2i/head_dim) for the first factor*head_dim/2 pairs, 0 for the rest.
      active_pairs = int64_t(factor * double(a.head_dim) / 2.0);
      check(active_pairs > 0, path + ": " + rp + "partial_rotary_factor leaves no rotating pair");
      if (active_pairs == a.head_dim / 2) active_pairs = 0;
    } else {
      check(rope_type == "default", path + ": " + rp + "rope_type '" + rope_type +
                                        "' is not supported (default, proportional)");
      check(factor == 1.0, path + ": " + rp + "partial_rotary_factor with rope_type 'default' is not supported");
    }
    a.rope = gemma_rope(a.head_dim, theta, active_pairs);
    a.value_from_key = !sliding && (diffusion_gemma || k_eq_v);
    c.layer_attention.push_back(a);
  }
  check_gemma_config(c, path);
  if (c.has_decoder) set_release_form(c);
  check(c.vocab > 0 && c.vocab < (int64_t(1) << 31), path + ": " + key("vocab_size") + " has invalid value");
  const auto id = [&](const char* name, int64_t fallback) {
    const std::string at = doc.has(key(name)) ? key(name) : std::string(name);
    const std::vector<int64_t> ids = doc.get_int_or_int_array(at);
    for (const int64_t i : ids) checked_token_id(i, c.vocab, path, at);
    return checked_token_id(ids.empty() ? fallback : ids[0], c.vocab, path, at);
  };
  c.bos_token = id("bos_token_id", 2);
  c.pad_token = id("pad_token_id", 0);
  c.eos_token = id("eos_token_id", 1);
  return c;
}

ModelConfig config_from_gguf(const GgufFile& file) {
  ModelConfig c;
  check(file.find("general.architecture") || !file.find("tokenizer.ggml.model"),
        file.path() + " is a vocabulary-only GGUF (tokenizer.ggml.* keys, no model): give it with --tokenizer, or "
                      "to canvas tokenize / detokenize, and a model with -m");
  c.arch = file.require_string("general.architecture");
  read_default_mode(file, c);
  if (is_gemma_arch(c.arch)) return gemma_config_from_gguf(file, c);
  const ArchTraits* traits = nullptr;
  for (const ArchTraits& t : kArchs)
    if (c.arch == t.arch) traits = &t;
  if (!traits) {
    std::string known;
    for (const ArchTraits& t : kArchs) known += std::string(known.empty() ? "" : ", ") + t.arch;
    known += ", diffusion-gemma, gemma4, gemma3";
    throw Error(file.path() + ": unsupported architecture '" + c.arch + "' (supported: " + known + ")");
  }
  const std::string p = c.arch + ".";
  c.name = file.get_string("general.name", "");
  c.hidden = file.require_int(p + "embedding_length");
  c.n_layers = file.require_int(p + "block_count");
  c.n_heads = file.require_int(p + "attention.head_count");
  c.n_kv_heads = file.get_int(p + "attention.head_count_kv", c.n_heads);
  c.ffn = file.get_int(p + "feed_forward_length", 0);
  c.context_length = checked_context_length(file.get_int(p + "context_length", 4096), file.path(), p + "context_length");
  c.rms_eps = float(file.get_float(p + "attention.layer_norm_rms_epsilon", 1e-5));
  c.n_experts = file.get_int(p + "expert_count", 0);
  c.n_experts_used = file.get_int(p + "expert_used_count", 0);
  c.expert_ffn = file.get_int(p + "expert_feed_forward_length", c.ffn);
  c.expert_weights_norm = file.get_bool(p + "expert_weights_norm", false);
  c.logit_softcap = float(file.get_float(p + "final_logit_softcapping", 0.0));
  c.causal = file.get_bool(p + "attention.causal", traits->causal);
  c.shift_logits = file.get_bool("diffusion.shift_logits", traits->shift_default);
  if (c.causal) c.shift_logits = true;  // an AR model's row p predicts token p + 1

  auto positive = [&](int64_t v, const std::string& key) {
    check(v > 0 && v < (int64_t(1) << 31), file.path() + ": key " + key + " has invalid value " + std::to_string(v));
  };
  positive(c.hidden, p + "embedding_length");
  positive(c.n_layers, p + "block_count");
  positive(c.n_heads, p + "attention.head_count");
  positive(c.n_kv_heads, p + "attention.head_count_kv");
  check(c.n_heads % c.n_kv_heads == 0,
        file.path() + ": attention.head_count " + std::to_string(c.n_heads) +
            " is not a multiple of attention.head_count_kv " + std::to_string(c.n_kv_heads));
  c.head_dim = file.get_int(p + "attention.key_length", c.hidden / c.n_heads);
  positive(c.head_dim, p + "attention.key_length");
  if (c.is_moe()) {
    check(c.n_experts_used > 0 && c.n_experts_used <= c.n_experts,
          file.path() + ": expert_used_count must be in 1.." + std::to_string(c.n_experts));
    positive(c.expert_ffn, p + "expert_feed_forward_length");
  } else {
    positive(c.ffn, p + "feed_forward_length");
  }

  c.rope.layout = traits->rope_layout;
  c.rope.head_dim = int(c.head_dim);
  c.rope.rot_dims = int(file.get_int(p + "rope.dimension_count", c.head_dim));
  check(c.rope.rot_dims > 0 && c.rope.rot_dims <= c.head_dim && c.rope.rot_dims % 2 == 0,
        file.path() + ": rope.dimension_count " + std::to_string(c.rope.rot_dims) + " must be even and <= head dim " +
            std::to_string(c.head_dim));
  c.rope.theta = float(file.get_float(p + "rope.freq_base", 10000.0));
  check_float_hyperparameters(c, file.path(), p + "attention.layer_norm_rms_epsilon", p + "rope.freq_base");

  c.mask_token = gguf_token_id(file, "tokenizer.ggml.mask_token_id", -1);
  c.uniform_state = c.uniform_state || file.get_string("diffusion.kind", "") == "uniform";
  c.self_conditioning = file.get_bool("diffusion.self_conditioning", false);
  check(!c.self_conditioning || c.ffn > 0,
        file.path() + ": diffusion.self_conditioning needs " + p + "feed_forward_length (the MLP's width)");
  c.bos_token = gguf_token_id(file, "tokenizer.ggml.bos_token_id", -1);
  c.eos_token = gguf_token_id(file, "tokenizer.ggml.eos_token_id", -1);
  c.pad_token = gguf_token_id(file, "tokenizer.ggml.padding_token_id", -1);
  return c;
}

namespace {

// Gemma 4's GGUF holds one head dim, theta and RoPE fraction per layer kind (sliding / full).
struct GemmaKinds {
  const LayerAttention* sliding = nullptr;
  const LayerAttention* full = nullptr;
};

GemmaKinds gemma_kinds(const ModelConfig& c) {
  GemmaKinds k;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerAttention& a = c.layer_attention.at(size_t(l));
    const LayerAttention*& first = a.kind == AttentionKind::Sliding ? k.sliding : k.full;
    if (!first) {
      first = &a;
      continue;
    }
    const std::string what = std::string(a.kind == AttentionKind::Sliding ? "sliding" : "full") + " layer " +
                             std::to_string(l);
    check(a.head_dim == first->head_dim, "config_to_gguf: " + what + " has head dim " + std::to_string(a.head_dim) +
                                             "; a GGUF holds one per layer kind (" + std::to_string(first->head_dim) + ")");
    check(a.rope.theta == first->rope.theta && a.rope.active_pairs == first->rope.active_pairs,
          "config_to_gguf: " + what + " has other RoPE parameters than the first layer of its kind");
  }
  check(!k.sliding || k.sliding->rope.active_pairs == 0,
        "config_to_gguf: proportional RoPE on sliding layers cannot be stored in a GGUF");
  return k;
}

void check_expressible(bool ok, const ModelConfig& c, const std::string& what) {
  check(ok, "config_to_gguf: architecture '" + c.arch + "' cannot express this model's " + what +
                "; the file would load as a different model");
}

void gemma_config_to_gguf(const ModelConfig& c, GgufWriter& w) {
  ModelConfig expected = c;
  set_gemma_constants(expected);
  check_expressible(c.layer_style == LayerStyle::Gemma4, c, "layer style");
  check_expressible(c.activation == expected.activation, c, "activation");
  check_expressible(c.qk_norm && c.v_norm == expected.v_norm && c.layer_scalar == expected.layer_scalar, c,
                    "q/k/v norms and layer scalar");
  check_expressible(c.tied_output, c, "untied output head");
  check_expressible(!c.is_moe() || (c.expert_weights_norm && c.router_norm && c.dense_and_moe), c,
                    "expert routing (Gemma 4: renormalised top-k, normed router, dense MLP in parallel)");
  check_expressible(c.has_decoder == expected.has_decoder && c.uniform_state == expected.uniform_state &&
                        c.causal == expected.causal && c.shift_logits == expected.shift_logits,
                    c, "attention mode (causal / decoder / uniform-state)");
  check_expressible(!c.qkv_bias && c.n_positions == 0 && !c.self_conditioning && c.mask_token < 0, c,
                    "biases, learned positions, canvas self-conditioning or mask token");
  check_expressible(int64_t(c.layer_attention.size()) == c.n_layers, c, "per-layer attention (layer_attention)");
  for (const LayerAttention& a : c.layer_attention) check_expressible(a.rope.layout == RopeLayout::Neox, c, "RoPE layout");
  const GemmaKinds kinds = gemma_kinds(c);
  const LayerAttention& full = kinds.full ? *kinds.full : *kinds.sliding;
  const LayerAttention& swa = kinds.sliding ? *kinds.sliding : *kinds.full;
  check_expressible(c.arch == "gemma3" ? c.attention_scale == gemma3_attention_scale(c, full.head_dim)
                                       : c.attention_scale == 1.f,
                    c, "attention scale");
  check_expressible(swa.kind == AttentionKind::Full || c.sliding_window > 0, c, "sliding window (0)");
  const std::string p = c.arch + ".";
  auto u32 = [](int64_t v) { return GgufValue::u32(uint32_t(v)); };
  write_default_mode(c, w);
  w.set("general.architecture", GgufValue::string(c.arch));
  if (!c.name.empty()) w.set("general.name", GgufValue::string(c.name));
  w.set(p + "context_length", u32(c.context_length));
  w.set(p + "embedding_length", u32(c.hidden));
  // llama.cpp's gemma4 loader requires it (0: no per-layer inputs, as its converter writes for 26B-A4B / 31B).
  w.set(p + "embedding_length_per_layer_input", u32(0));
  w.set(p + "attention.shared_kv_layers", u32(0));  // as the branch's converter writes it (no KV sharing)
  // The decoder attends bidirectionally (llama.cpp's diffusion-gemma sets it itself; its converter writes it).
  if (c.has_decoder) w.set(p + "attention.causal", GgufValue::boolean(false));
  w.set(p + "block_count", u32(c.n_layers));
  w.set(p + "feed_forward_length", u32(c.ffn));
  if (c.is_moe()) {
    w.set(p + "expert_count", u32(c.n_experts));
    w.set(p + "expert_used_count", u32(c.n_experts_used));
    w.set(p + "expert_feed_forward_length", u32(c.expert_ffn));
  }
  w.set(p + "attention.head_count", u32(c.n_heads));
  std::vector<int64_t> kv_heads, sliding;
  for (const LayerAttention& a : c.layer_attention) {
    kv_heads.push_back(a.n_kv_heads);
    sliding.push_back(a.kind == AttentionKind::Sliding);
  }
  // int32, as the branch's converter writes it.
  w.set(p + "attention.head_count_kv", GgufValue::int_array(GgufType::Int32, kv_heads));
  w.set(p + "attention.key_length", u32(full.head_dim));
  w.set(p + "attention.value_length", u32(full.head_dim));
  w.set(p + "attention.key_length_swa", u32(swa.head_dim));
  w.set(p + "attention.value_length_swa", u32(swa.head_dim));
  w.set(p + "attention.sliding_window", u32(c.sliding_window));
  w.set(p + "attention.sliding_window_pattern", GgufValue::int_array(GgufType::Bool, sliding));
  w.set(p + "attention.layer_norm_rms_epsilon", GgufValue::f32(c.rms_eps));
  w.set(p + "rope.freq_base", GgufValue::f32(full.rope.theta));
  w.set(p + "rope.freq_base_swa", GgufValue::f32(swa.rope.theta));
  w.set(p + "rope.dimension_count", u32(full.head_dim));
  w.set(p + "rope.dimension_count_swa", u32(swa.head_dim));
  // Always written: llama.cpp's gemma4 / diffusion-gemma take an absent key as a cap of 30 (0 means none).
  w.set(p + "final_logit_softcapping", GgufValue::f32(c.logit_softcap));
  // Not a llama.cpp key: the scale the checkpoint's own reference uses (bf16-rounded for bf16 weights).
  w.set(p + "embedding_scale", GgufValue::f32(c.embedding_scale));
  w.set("tokenizer.ggml.bos_token_id", u32(c.bos_token));
  w.set("tokenizer.ggml.eos_token_id", u32(c.eos_token));
  w.set("tokenizer.ggml.padding_token_id", u32(c.pad_token));
}

}  // namespace

std::vector<float> gguf_rope_freqs(const ModelConfig& c) {
  if (c.layer_style != LayerStyle::Gemma4 || c.layer_attention.empty()) return {};
  const GemmaKinds kinds = gemma_kinds(c);
  if (!kinds.full || kinds.full->rope.active_pairs == 0) return {};
  std::vector<float> freqs(size_t(kinds.full->head_dim / 2), 1e30f);
  for (int64_t i = 0; i < kinds.full->rope.active_pairs; ++i) freqs[size_t(i)] = 1.f;
  return freqs;
}

void config_to_gguf(const ModelConfig& c, GgufWriter& w) {
  check(!c.arch.empty(), "config_to_gguf: the config has no architecture name");
  if (is_gemma_arch(c.arch)) return gemma_config_to_gguf(c, w);
  const ArchTraits* traits = nullptr;
  for (const ArchTraits& t : kArchs)
    if (c.arch == t.arch) traits = &t;
  check(traits != nullptr, "config_to_gguf: unsupported architecture '" + c.arch + "'");
  check_expressible(c.layer_style == LayerStyle::PreNorm && c.layer_attention.empty(), c,
                    "Gemma 4 layer (pre/post norms, per-layer attention)");
  check_expressible(c.rope.layout == traits->rope_layout, c, "RoPE layout");
  check_expressible(c.rope.active_pairs == 0, c, "RoPE active pairs (proportional RoPE)");
  check_expressible(c.activation == Activation::Silu, c, "activation");
  check_expressible(c.embedding_scale == 1.f, c, "embedding scale");
  // llama.cpp's llada-moe holds LLaDA-MoE's per-head q/k norms (attn_q_norm / attn_k_norm, found by presence).
  check_expressible(c.arch == "llada-moe" || !c.qk_norm, c, "q/k norms");
  check_expressible(!c.v_norm && c.sliding_window == 0 && !c.dense_and_moe && !c.router_norm &&
                        !c.has_decoder,
                    c, "v norm, sliding window, dense-and-experts MLP, router norm or decoder");
  check_expressible(c.attention_scale == 0 || c.attention_scale == 1.f / std::sqrt(float(c.head_dim)), c,
                    "attention scale");
  check_expressible(!c.causal || c.shift_logits, c, "shift_logits (causal models always shift)");
  const std::string a = c.arch + ".";
  auto u32 = [](int64_t v) { return GgufValue::u32(uint32_t(v)); };
  w.set("general.architecture", GgufValue::string(c.arch));
  if (!c.name.empty()) w.set("general.name", GgufValue::string(c.name));
  if (c.context_length > 0) w.set(a + "context_length", u32(c.context_length));
  w.set(a + "vocab_size", u32(c.vocab));
  w.set(a + "embedding_length", u32(c.hidden));
  w.set(a + "block_count", u32(c.n_layers));
  if (c.ffn > 0) w.set(a + "feed_forward_length", u32(c.ffn));
  w.set(a + "attention.head_count", u32(c.n_heads));
  w.set(a + "attention.head_count_kv", u32(c.n_kv_heads));
  w.set(a + "attention.key_length", u32(c.head_dim));
  w.set(a + "attention.layer_norm_rms_epsilon", GgufValue::f32(c.rms_eps));
  w.set(a + "attention.causal", GgufValue::boolean(c.causal));
  w.set(a + "rope.freq_base", GgufValue::f32(c.rope.theta));
  w.set(a + "rope.dimension_count", u32(c.rope.rot_dims > 0 ? c.rope.rot_dims : c.head_dim));
  if (c.is_moe()) {
    w.set(a + "expert_count", u32(c.n_experts));
    w.set(a + "expert_used_count", u32(c.n_experts_used));
    w.set(a + "expert_feed_forward_length", u32(c.expert_ffn));
    w.set(a + "expert_weights_norm", GgufValue::boolean(c.expert_weights_norm));
  }
  if (c.logit_softcap > 0) w.set(a + "final_logit_softcapping", GgufValue::f32(c.logit_softcap));
  w.set("diffusion.shift_logits", GgufValue::boolean(c.shift_logits));
  if (c.uniform_state) w.set("diffusion.kind", GgufValue::string("uniform"));
  if (c.self_conditioning) w.set("diffusion.self_conditioning", GgufValue::boolean(true));
  write_default_mode(c, w);
  auto token = [&](const char* key, int32_t id) {
    if (id >= 0) w.set(key, u32(id));
  };
  token("tokenizer.ggml.mask_token_id", c.mask_token);
  token("tokenizer.ggml.bos_token_id", c.bos_token);
  token("tokenizer.ggml.eos_token_id", c.eos_token);
  token("tokenizer.ggml.padding_token_id", c.pad_token);
}

}  // namespace canvas
