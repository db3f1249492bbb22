// config.json of LLaDA (OLMo keys), LLaDA-MoE (OLMoE keys), Dream / Qwen2 / Llama (transformers keys).
#include "model/hf_families.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "io/json.h"
#include "model/limits.h"

namespace canvas {
namespace {

using Json = nlohmann::ordered_json;

bool lists_architecture(const JsonDocument& doc, const char* name) {
  const nlohmann::json* a = doc.find("architectures");
  if (!a || !a->is_array()) return false;
  for (const auto& v : *a)
    if (v.is_string() && v.get<std::string>() == name) return true;
  return false;
}

// The id of `text` among tokenizer.json's added tokens, or -1.
int32_t added_token_id(const std::string& tokenizer_json, const std::string& text) {
  if (tokenizer_json.empty()) return -1;
  const nlohmann::json root = load_json_file(tokenizer_json);
  if (!root.is_object() || !root.contains("added_tokens") || !root["added_tokens"].is_array()) return -1;
  for (const auto& t : root["added_tokens"])
    if (t.is_object() && t.contains("content") && t["content"].is_string() && t["content"].get<std::string>() == text &&
        t.contains("id") && t["id"].is_number_integer())
      return int32_t(t["id"].get<int64_t>());
  return -1;
}

struct Reader {
  const JsonDocument& doc;
  const std::string& path;
  void positive(int64_t v, const std::string& key) const {
    check(v > 0 && v < (int64_t(1) << 31), path + ": " + key + " has invalid value " + std::to_string(v));
  }
  // A key that must be absent (or null) or have the one value canvas computes.
  template <class T>
  void only(const std::string& key, const T& supported, const std::string& why) const {
    const nlohmann::json* v = doc.find(key);
    if (!v) return;
    bool ok = false;
    try {
      ok = v->get<T>() == supported;
    } catch (const std::exception&) {
      ok = false;
    }
    check(ok, path + ": " + key + " = " + json_excerpt(*v) + " is not supported (" + why + ")");
  }
};

// The shortest decimal that reads back as `v` (1e-05, not 9.999999747378752e-06) for config.json.
double short_decimal(float v) {
  char buf[32];
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, double(v));
    if (std::strtof(buf, nullptr) == v) break;
  }
  return std::strtod(buf, nullptr);
}

}  // namespace

std::string hf_llama_family(const JsonDocument& doc) {
  if (lists_architecture(doc, "LLaDAMoEModelLM") || lists_architecture(doc, "LLaDAMoEModel")) return "llada-moe";
  if (lists_architecture(doc, "LLaDAModelLM")) return "llada";
  if (lists_architecture(doc, "DreamModel")) return "dream";
  if (lists_architecture(doc, "Qwen2ForCausalLM")) return "qwen2";
  if (lists_architecture(doc, "LlamaForCausalLM")) return "llama";
  // A config that names another class (e.g. a Gemma 4 one) is not one of these, whatever model_type says.
  if (const nlohmann::json* a = doc.find("architectures"); a && a->is_array() && !a->empty()) return "";
  const std::string type = doc.get_string("model_type", "");
  if (type == "llada") return doc.has("d_model") ? "llada" : doc.has("num_experts") ? "llada-moe" : "";
  if (type == "lladamoe" || type == "llada_moe" || type == "llada-moe") return "llada-moe";
  if (type == "Dream" || type == "dream") return "dream";
  if (type == "qwen2") return "qwen2";
  if (type == "llama") return "llama";
  return "";
}

ModelConfig llama_family_config_from_hf(const JsonDocument& doc, const std::string& arch,
                                        const std::string& tokenizer_json) {
  const std::string& path = doc.origin();
  const Reader r{doc, path};
  ModelConfig c;
  c.arch = arch;
  c.name = doc.get_string("_name_or_path", "");
  int32_t default_mask = -1;
  if (arch == "llada") {
    // OLMo's ModelConfig keys, as GSAI-ML/LLaDA-8B-* publish them.
    c.hidden = doc.require_int("d_model");
    c.n_layers = doc.require_int("n_layers");
    c.n_heads = doc.require_int("n_heads");
    c.n_kv_heads = doc.get_int("n_kv_heads", c.n_heads);
    c.ffn = doc.require_int("mlp_hidden_size");
    c.vocab = doc.get_int("embedding_size", doc.require_int("vocab_size"));
    // OLMo pads the embedding (embedding_size) past the tokenizer's vocab_size, never the other way.
    check(doc.require_int("vocab_size") <= c.vocab,
          path + ": vocab_size " + std::to_string(doc.require_int("vocab_size")) + " exceeds embedding_size " +
              std::to_string(c.vocab) + " (the embedding must have a row for every token)");
    c.context_length = checked_context_length(doc.get_int("max_sequence_length", 4096), path, "max_sequence_length");
    c.rms_eps = float(doc.get_float("rms_norm_eps", 1e-5));
    c.rope.theta = float(doc.get_float("rope_theta", 10000.0));
    c.tied_output = doc.get_bool("weight_tying", false);
    r.only("include_bias", false, "LLaDA with biases on every projection");
    r.only("include_qkv_bias", false, "q/k/v biases in the OLMo layout");
    r.only("block_type", std::string("llama"), "canvas computes the llama block");
    r.only("layer_norm_type", std::string("rms"), "canvas computes RMSNorm");
    r.only("activation_type", std::string("silu"), "canvas computes SwiGLU");
    r.only("rope", true, "LLaDA without RoPE");
    r.only("alibi", false, "ALiBi");
    r.only("attention_layer_norm", false, "attention layer norms");
    r.only("clip_qkv", nlohmann::json(nullptr), "q/k/v clipping");
    r.only("scale_logits", false, "scaled logits");
    default_mask = 126336;
  } else {
    c.hidden = doc.require_int("hidden_size");
    c.n_layers = doc.require_int("num_hidden_layers");
    c.n_heads = doc.require_int("num_attention_heads");
    c.n_kv_heads = doc.get_int("num_key_value_heads", c.n_heads);
    c.vocab = doc.require_int("vocab_size");
    c.context_length = checked_context_length(doc.get_int("max_position_embeddings", 4096), path, "max_position_embeddings");
    c.rms_eps = float(doc.get_float("rms_norm_eps", 1e-6));
    c.rope.theta = float(doc.get_float("rope_theta", 10000.0));
    c.tied_output = doc.get_bool("tie_word_embeddings", false);
    r.only("hidden_act", std::string("silu"), "canvas computes SwiGLU");
    r.only("rope_scaling", nlohmann::json(nullptr), "RoPE scaling");
    if (arch == "llada-moe") {
      // OLMoE keys as inclusionAI/LLaDA-MoE-7B-A1B-* publish them; every layer is a MoE layer.
      c.n_experts = doc.require_int("num_experts");
      c.n_experts_used = doc.require_int("num_experts_per_tok");
      c.expert_ffn = doc.require_int("expert_intermediate_size");
      c.ffn = std::max<int64_t>(0, doc.get_int("dense_intermediate_size", 0));
      c.qk_norm = doc.get_bool("qk_layernorm", false);
      c.expert_weights_norm = false;  // the published model hard-codes norm_topk_prob = False
      r.only("attention_bias", false, "attention biases (LLaDA-MoE's would include o_proj)");
      r.only("clip_qkv", nlohmann::json(nullptr), "q/k/v clipping");
      r.only("moe_router_score_function", std::string("softmax"), "canvas routes by softmax");
      r.only("moe_router_enable_expert_bias", false, "router expert bias");
      r.only("routed_scaling_factor", 1.0, "scaled expert outputs");
      if (const nlohmann::json* freq = doc.find("moe_layer_freq")) {
        check(freq->is_array(), path + ": moe_layer_freq must be an array");
        for (const auto& f : *freq)
          check(f.is_number_integer() && f.get<int64_t>() == 1,
                path + ": moe_layer_freq lists a dense layer; canvas computes LLaDA-MoE with experts in every layer");
      }
      if (const nlohmann::json* shared = doc.find("shared_expert_intermediate_size"))
        check(shared->is_number() && shared->get<double>() <= 0,
              path + ": shared_expert_intermediate_size " + json_excerpt(*shared) + ": shared experts are not supported");
      const double partial = doc.get_float("partial_rotary_factor", 1.0);
      check(partial == 1.0 || partial == -1.0, path + ": partial_rotary_factor " + std::to_string(partial) +
                                                   " is not supported (only full rotation)");
      default_mask = 156895;
    } else {
      c.ffn = doc.require_int("intermediate_size");
      // Qwen2 (and Dream) always have q/k/v biases; Llama's follow attention_bias (o_proj too, so refused).
      c.qkv_bias = arch == "dream" || arch == "qwen2";
      if (arch == "llama") {
        r.only("attention_bias", false, "attention biases (Llama's include o_proj)");
        r.only("mlp_bias", false, "MLP biases");
      }
      r.only("use_sliding_window", false, "sliding-window attention");
      if (arch == "dream") default_mask = 151666;
    }
  }
  r.positive(c.hidden, arch == "llada" ? "d_model" : "hidden_size");
  r.positive(c.n_layers, arch == "llada" ? "n_layers" : "num_hidden_layers");
  r.positive(c.n_heads, arch == "llada" ? "n_heads" : "num_attention_heads");
  r.positive(c.n_kv_heads, arch == "llada" ? "n_kv_heads" : "num_key_value_heads");
  r.positive(c.vocab, "vocab_size");
  check(c.n_heads % c.n_kv_heads == 0 && c.hidden % c.n_heads == 0,
        path + ": the hidden size " + std::to_string(c.hidden) + " and " + std::to_string(c.n_kv_heads) +
            " KV heads must divide into the " + std::to_string(c.n_heads) + " heads");
  c.head_dim = doc.get_int("head_dim", c.hidden / c.n_heads);
  r.positive(c.head_dim, "head_dim");
  check(c.head_dim % 2 == 0, path + ": head_dim " + std::to_string(c.head_dim) + " must be even for RoPE");
  if (c.is_moe()) {
    r.positive(c.n_experts, "num_experts");
    check(c.n_experts_used > 0 && c.n_experts_used <= c.n_experts,
          path + ": num_experts_per_tok must be in 1.." + std::to_string(c.n_experts));
    r.positive(c.expert_ffn, "expert_intermediate_size");
  } else {
    r.positive(c.ffn, arch == "llada" ? "mlp_hidden_size" : "intermediate_size");
  }
  check(std::isfinite(c.rms_eps) && c.rms_eps > 0, path + ": rms_norm_eps must be a positive finite number");
  check(std::isfinite(c.rope.theta) && c.rope.theta > 0, path + ": rope_theta must be a positive finite number");

  // The model as canvas binds it: Q/K rows in GGUF order, so the RoPE layout of that family's GGUF.
  c.rope.layout = hf_rope_permuted(arch) ? RopeLayout::Normal : RopeLayout::Neox;
  c.rope.head_dim = int(c.head_dim);
  c.rope.rot_dims = int(c.head_dim);
  c.causal = arch == "llama" || arch == "qwen2";
  c.shift_logits = c.causal || arch == "dream";  // Dream: row p-1 predicts token p

  auto token = [&](const char* key) {  // every id of a list in the vocabulary; the first is the one kept
    const std::vector<int64_t> ids = doc.get_int_or_int_array(key);
    for (const int64_t id : ids) checked_token_id(id, c.vocab, path, key);
    return ids.empty() ? int32_t(-1) : int32_t(ids[0]);
  };
  c.bos_token = token("bos_token_id");
  c.eos_token = token("eos_token_id");
  c.pad_token = token("pad_token_id");
  if (!c.causal) {
    c.mask_token = token("mask_token_id");
    if (c.mask_token < 0) c.mask_token = added_token_id(tokenizer_json, "<|mdm_mask|>");
    if (c.mask_token < 0 && default_mask < c.vocab) c.mask_token = default_mask;
    check(c.mask_token >= 0 && c.mask_token < c.vocab,
          path + ": mask_token_id " + std::to_string(c.mask_token) + " is missing or outside the vocabulary of " +
              std::to_string(c.vocab));
  }
  return c;
}

Json hf_config_json(const ModelConfig& c) {
  const std::string what = "Hugging Face export of a '" + c.arch + "' model: ";
  check(c.layer_style == LayerStyle::PreNorm && c.layer_attention.empty(),
        what + "the Gemma 4 layer is not written by this exporter");
  check(c.arch == "llada" || c.arch == "llada-moe" || c.arch == "dream" || c.arch == "qwen2" || c.arch == "llama",
        what + "no Hugging Face layout for this architecture (llada, llada-moe, dream, qwen2, llama)");
  check(!c.self_conditioning, what + "the family's layout has no self-conditioning MLP (diffusion.self_conditioning)");
  check(c.n_positions == 0, what + "the family's layout has no learned position embeddings (position_embd.weight)");
  check(!c.uniform_state, what + "uniform-state diffusion has no key in the family's config.json");
  check(c.logit_softcap == 0 && c.embedding_scale == 1.f && c.activation == Activation::Silu && !c.v_norm &&
            c.sliding_window == 0 && !c.dense_and_moe && !c.router_norm && !c.has_decoder,
        what + "the model has features the family's layout cannot express");
  check(c.rope.rot_dims == 0 || c.rope.rot_dims == c.head_dim, what + "partial RoPE is not expressible");
  check(c.rope.layout == (hf_rope_permuted(c.arch) ? RopeLayout::Normal : RopeLayout::Neox),
        what + "the RoPE layout differs from the family's");
  check(!c.qk_norm || c.arch == "llada-moe", what + "q/k norms exist only in LLaDA-MoE's layout");
  check(c.arch == "llada-moe" ? c.is_moe() : !c.is_moe(), what + "experts exist only in LLaDA-MoE's layout");
  check(!c.is_moe() || !c.expert_weights_norm,
        what + "LLaDA-MoE's published model does not renormalise the top-k router weights");
  const bool wants_bias = c.arch == "dream" || c.arch == "qwen2";
  check(c.qkv_bias == wants_bias, what + (wants_bias ? "the layout needs q/k/v biases" : "the layout has no q/k/v biases"));
  const bool diffusion = !c.causal;
  check(diffusion == (c.arch == "llada" || c.arch == "llada-moe" || c.arch == "dream"),
        what + "the attention mode (causal / bidirectional) is not the family's");
  check(c.shift_logits == (c.causal || c.arch == "dream"), what + "shift_logits is not the family's");

  Json j;
  auto ids = [&](const char* key, int32_t id) {
    if (id >= 0) j[key] = id;
  };
  if (c.arch == "llada") {
    j["architectures"] = {"LLaDAModelLM"};
    j["model_type"] = "llada";
    j["d_model"] = c.hidden;
    j["n_heads"] = c.n_heads;
    j["n_kv_heads"] = c.n_kv_heads;
    j["n_layers"] = c.n_layers;
    j["mlp_hidden_size"] = c.ffn;
    j["vocab_size"] = c.vocab;
    j["embedding_size"] = c.vocab;
    j["max_sequence_length"] = c.context_length > 0 ? c.context_length : 4096;
    j["rope"] = true;
    j["rope_theta"] = short_decimal(c.rope.theta);
    j["rms_norm_eps"] = short_decimal(c.rms_eps);
    j["weight_tying"] = c.tied_output;
    j["include_bias"] = false;
    j["include_qkv_bias"] = false;
    j["block_type"] = "llama";
    j["layer_norm_type"] = "rms";
    j["activation_type"] = "silu";
    j["alibi"] = false;
    j["attention_layer_norm"] = false;
    j["scale_logits"] = false;
    j["use_cache"] = false;
  } else {
    if (c.arch == "llada-moe") {
      j["architectures"] = {"LLaDAMoEModelLM"};
      j["model_type"] = "llada";
    } else if (c.arch == "dream") {
      j["architectures"] = {"DreamModel"};
      j["model_type"] = "Dream";
    } else if (c.arch == "qwen2") {
      j["architectures"] = {"Qwen2ForCausalLM"};
      j["model_type"] = "qwen2";
    } else {
      j["architectures"] = {"LlamaForCausalLM"};
      j["model_type"] = "llama";
    }
    j["hidden_size"] = c.hidden;
    j["num_hidden_layers"] = c.n_layers;
    j["num_attention_heads"] = c.n_heads;
    j["num_key_value_heads"] = c.n_kv_heads;
    if (c.head_dim != c.hidden / c.n_heads) j["head_dim"] = c.head_dim;
    if (c.is_moe()) {
      j["dense_intermediate_size"] = c.ffn > 0 ? c.ffn : c.expert_ffn;
      j["expert_intermediate_size"] = c.expert_ffn;
      j["num_experts"] = c.n_experts;
      j["num_experts_per_tok"] = c.n_experts_used;
      j["moe_layer_freq"] = std::vector<int>(size_t(c.n_layers), 1);
      j["moe_router_score_function"] = "softmax";
      j["moe_router_enable_expert_bias"] = false;
      j["norm_topk_prob"] = false;
      j["qk_layernorm"] = c.qk_norm;
      j["attention_bias"] = false;
      j["partial_rotary_factor"] = 1;
      j["routed_scaling_factor"] = 1;
    } else {
      j["intermediate_size"] = c.ffn;
      if (c.arch == "llama") j["attention_bias"] = false;
    }
    j["hidden_act"] = "silu";
    j["vocab_size"] = c.vocab;
    j["max_position_embeddings"] = c.context_length > 0 ? c.context_length : 4096;
    j["rms_norm_eps"] = short_decimal(c.rms_eps);
    j["rope_theta"] = short_decimal(c.rope.theta);
    j["rope_scaling"] = nullptr;
    j["tie_word_embeddings"] = c.tied_output;
  }
  ids("mask_token_id", c.mask_token);
  ids("bos_token_id", c.bos_token);
  ids("eos_token_id", c.eos_token);
  ids("pad_token_id", c.pad_token);
  j["torch_dtype"] = "float32";
  return j;
}

bool hf_rope_permuted(const std::string& arch) { return arch == "llada" || arch == "llama"; }

void permute_rope_rows(const TensorView& t, int64_t heads, int64_t head_dim, bool to_gguf, void* out) {
  const bool vector = t.ne[1] * t.ne[2] * t.ne[3] == 1;
  const int64_t units = vector ? t.ne[0] : t.rows();  // elements of a bias, rows of a matrix
  const size_t unit_bytes = size_t(vector ? row_bytes(t.type, 1) : t.row_size());
  check(units == heads * head_dim && head_dim % 2 == 0,
        "tensor '" + t.name + "' " + t.shape_string() + " is not " + std::to_string(heads) + " heads of " +
            std::to_string(head_dim) + " rows");
  const int64_t half = head_dim / 2;
  const auto* src = static_cast<const uint8_t*>(t.data);
  auto* dst = static_cast<uint8_t*>(out);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t k = 0; k < 2; ++k) {
        const int64_t gguf_row = h * head_dim + 2 * i + k, hf_row = h * head_dim + k * half + i;
        const int64_t from = to_gguf ? hf_row : gguf_row, to = to_gguf ? gguf_row : hf_row;
        std::memcpy(dst + size_t(to) * unit_bytes, src + size_t(from) * unit_bytes, unit_bytes);
      }
}

}  // namespace canvas
