// Model loading: weights bound from a GGUF or a Hugging Face checkpoint, checked against the model
// description (model/tensors.h). The forward pass is model/forward.cpp.
#include "model/model.h"
#include "model/weight_check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <unordered_set>
#include <thread>

#include "core/error.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "model/gemma_names.h"
#include "model/hf_families.h"
#include "model/tensors.h"
#include "ops/lm_head.h"
#include "ops/matmul.h"
#include "ops/ops.h"

namespace canvas {
namespace {

// Where weights come from (a GGUF or a safetensors checkpoint): a lookup by stored name and the path
// that messages name.
struct TensorSource {
  std::string path;
  std::function<const TensorView*(const std::string&)> find;
};

TensorSource source_of(const GgufFile& file) {
  return {file.path(), [&file](const std::string& name) { return file.find_tensor(name); }};
}

// Binds one tensor, checking its shape (ggml order) and that matmul/get_row can use its dtype.
TensorView bind_tensor(const TensorSource& src, const std::string& name, std::vector<int64_t> shape, bool required = true) {
  const TensorView* t = src.find(name);
  if (!t) {
    check(!required, src.path + ": missing tensor '" + name + "'");
    return TensorView{};
  }
  bool ok = t->n_dims == int(shape.size()) || (t->n_dims < int(shape.size()) && shape.back() == 1);
  for (size_t i = 0; i < shape.size() && ok; ++i) ok = t->ne[i] == shape[i];
  if (!ok) {
    std::string want = "[";
    for (size_t i = 0; i < shape.size(); ++i) want += (i ? ", " : "") + std::to_string(shape[i]);
    throw Error(src.path + ": tensor '" + name + "' has shape " + t->shape_string() + ", expected " + want + "]");
  }
  if (shape.size() > 1 || t->type != DType::F32) {
    check(matmul_supports(t->type),
          src.path + ": tensor '" + name + "' has unsupported dtype " + dtype_name(t->type));
  }
  return *t;
}
// ---- Gemma 4 / DiffusionGemma weights -------------------------------------------------------------

// An f32 vector of n values: the stored tensor when it is f32, else a converted copy owned by the model.
TensorView bind_f32_vector(Model& m, const TensorSource& src, const std::string& name, int64_t n,
                           bool required = true) {
  const TensorView* t = src.find(name);
  if (!t) {
    check(!required, src.path + ": missing tensor '" + name + "'");
    return TensorView{};
  }
  check(t->elements() == n && (t->n_dims == 1 || t->ne[0] == n),
        src.path + ": tensor '" + name + "' has shape " + t->shape_string() + ", expected [" + std::to_string(n) + "]");
  TensorView v = *t;
  if (t->type != DType::F32) {
    check(t->type == DType::F16 || t->type == DType::BF16,
          src.path + ": tensor '" + name + "' has unsupported dtype " + dtype_name(t->type) + " (f32, f16 or bf16)");
    m.converted->emplace_back(size_t(n));
    dequantize_row(t->type, t->data, m.converted->back().data(), n);
    v.type = DType::F32;
    v.data = m.converted->back().data();
  }
  v.ne = {n, 1, 1, 1};
  v.n_dims = 1;
  return v;
}

float read_scalar(Model& m, const TensorSource& src, const std::string& name) {
  return bind_f32_vector(m, src, name, 1).f32()[0];
}


// A count a config claims (layers, experts) is bounded by the tensors actually present before anything is
// sized by it: every layer and every stored expert holds at least one tensor, so a config claiming 10^9
// layers over a file of 20 tensors is refused at once instead of listing 10^9 layers of tensor names.
void check_counts_against_tensors(const ModelConfig& c, size_t n_tensors, const std::string& path) {
  check(c.n_layers <= int64_t(n_tensors), path + ": the config claims " + std::to_string(c.n_layers) +
                                              " layers but the weights hold only " + std::to_string(n_tensors) +
                                              " tensors (at least one per layer)");
}

// Binds every tensor model_tensors(m.config) describes; `stored` gives a description's name in the
// source (its GGUF name, or its Hugging Face name).
void bind_tensors(Model& m, const TensorSource& src, const std::function<std::string(const TensorSpec&)>& stored) {
  const ModelConfig& c = m.config;
  m.layers.assign(size_t(c.n_layers), LayerWeights{});
  std::vector<bool> has_encoder_scalar(size_t(c.n_layers), false);
  for (const TensorSpec& spec : model_tensors(c)) {
    const std::string name = stored(spec);
    switch (spec.kind) {
      case TensorKind::Matrix:
        *weight_slot(m, spec.role, spec.layer) = bind_tensor(src, name, spec.shape, !spec.optional);
        break;
      case TensorKind::F32Matrix: {
        TensorView t = bind_tensor(src, name, spec.shape, !spec.optional);
        check(!t.data || t.type == DType::F32, src.path + ": tensor '" + name + "' must be f32");
        *weight_slot(m, spec.role, spec.layer) = t;
        break;
      }
      case TensorKind::Vector:
        *weight_slot(m, spec.role, spec.layer) = bind_f32_vector(m, src, name, spec.shape[0], !spec.optional);
        break;
      case TensorKind::Scalar: {
        LayerWeights& w = m.layers[size_t(spec.layer)];
        if (spec.role == TensorRole::LayerScalar) {
          w.layer_scalar_decoder = read_scalar(m, src, name);
        } else if (src.find(name)) {
          w.layer_scalar_encoder = read_scalar(m, src, name);
          has_encoder_scalar[size_t(spec.layer)] = true;
        }
        break;
      }
    }
  }
  for (int64_t l = 0; l < c.n_layers; ++l) {
    LayerWeights& w = m.layers[size_t(l)];
    if (!has_encoder_scalar[size_t(l)]) w.layer_scalar_encoder = w.layer_scalar_decoder;
    // attention_k_eq_v has no key of its own: a stored v_proj on such a layer means another model.
    if (c.attention_of(l).value_from_key) {
      const std::string v = c.layer_style == LayerStyle::Gemma4
                                ? gemma_names::to_gguf("layers." + std::to_string(l) + ".self_attn.v_proj.weight")
                                : "blk." + std::to_string(l) + ".attn_v.weight";
      TensorSpec probe;
      probe.gguf = v;
      probe.hf = "layers." + std::to_string(l) + ".self_attn.v_proj.weight";
      check(src.find(stored(probe)) == nullptr, src.path + ": tensor '" + stored(probe) +
                                                    "' exists but the config shares K as V on layer " +
                                                    std::to_string(l) + " (attention_k_eq_v)");
    }
  }
  if (c.tied_output) m.output = m.token_embd;
}

// A stack of per-expert 2-D tensors ("...experts.*.gate_proj.weight" names expert e's with e for *) as
// one [cols, rows, E] tensor the model owns; a missing or mismatched expert throws Error naming it.
const TensorView* stacked_experts(Model& m, const SafetensorsModel& st, const std::string& pattern, int64_t experts,
                                  std::deque<TensorView>& views) {
  const size_t star = pattern.find('*');
  auto name_of = [&](int64_t e) { return pattern.substr(0, star) + std::to_string(e) + pattern.substr(star + 1); };
  const TensorView* first = st.find_tensor(name_of(0));
  check(first != nullptr, st.path() + ": missing tensor '" + name_of(0) + "'");
  check(first->n_dims == 2, st.path() + ": tensor '" + first->name + "' has shape " + first->shape_string() +
                                ", expected a 2-D expert matrix");
  const size_t bytes = size_t(first->bytes());
  m.converted->emplace_back((bytes * size_t(experts) + 3) / 4);
  uint8_t* out = reinterpret_cast<uint8_t*>(m.converted->back().data());
  for (int64_t e = 0; e < experts; ++e) {
    const TensorView* t = st.find_tensor(name_of(e));
    check(t != nullptr, st.path() + ": missing tensor '" + name_of(e) + "' (expert " + std::to_string(e) + " of " +
                            std::to_string(experts) + ")");
    check(t->type == first->type && t->ne == first->ne,
          st.path() + ": tensor '" + t->name + "' is " + dtype_name(t->type) + " " + t->shape_string() +
              ", unlike expert 0 (" + dtype_name(first->type) + " " + first->shape_string() + ")");
    std::memcpy(out + size_t(e) * bytes, t->data, bytes);
  }
  TensorView v = *first;
  v.name = pattern;
  v.n_dims = 3;
  v.ne = {first->ne[0], first->ne[1], experts, 1};
  v.data = out;
  views.push_back(v);
  return &views.back();
}

// LLaDA / LLaDA-MoE / Dream / Qwen2 / Llama checkpoints in their published layouts (model/tensors.h hf
// names): experts are stacked, and LLaDA's / Llama's Q/K rows are put in GGUF order (llama.cpp's
// conversion) so the model is the one its GGUF gives. Every tensor of the checkpoint must be read.
void bind_llama_family(Model& m) {
  const SafetensorsModel& st = *m.safetensors;
  ModelConfig& c = m.config;
  // The embedding's rows are the vocabulary (checkpoints pad it past the tokenizer's size).
  TensorSpec embd;
  for (const TensorSpec& spec : model_tensors(c))
    if (spec.role == TensorRole::TokenEmbd) embd = spec;
  const TensorView* e = st.find_tensor(embd.hf);
  check(e != nullptr, st.path() + ": missing tensor '" + embd.hf + "' (the token embedding of a '" + c.arch + "' model)");
  check(e->n_dims == 2 && e->ne[0] == c.hidden,
        st.path() + ": tensor '" + embd.hf + "' has shape " + e->shape_string() + ", expected [" +
            std::to_string(c.hidden) + ", vocabulary]");
  check(e->ne[1] >= c.vocab, st.path() + ": tensor '" + embd.hf + "' has " + std::to_string(e->ne[1]) +
                                 " rows, fewer than config.json's " + std::to_string(c.vocab) + " tokens");
  c.vocab = e->ne[1];
  check(c.mask_token < c.vocab, st.path() + ": mask token " + std::to_string(c.mask_token) + " is outside the " +
                                    std::to_string(c.vocab) + "-row embedding");

  auto stacks = std::make_shared<std::deque<TensorView>>();
  const TensorSource src{st.path(), [&m, &st, stacks, experts = c.n_experts](const std::string& name) -> const TensorView* {
                           if (name.find('*') != std::string::npos) return stacked_experts(m, st, name, experts, *stacks);
                           return st.find_tensor(name);
                         }};
  std::unordered_set<std::string> read;
  bind_tensors(m, src, [&read, experts = c.n_experts](const TensorSpec& t) {
    check(!t.hf.empty(), "tensor '" + t.gguf + "' has no Hugging Face name");
    if (t.hf.find('*') == std::string::npos) {
      read.insert(t.hf);
    } else {
      const size_t star = t.hf.find('*');
      for (int64_t e = 0; e < experts; ++e)
        read.insert(t.hf.substr(0, star) + std::to_string(e) + t.hf.substr(star + 1));
    }
    return t.hf;
  });
  // A tensor nothing reads means a model this configuration does not describe (biases, q/k norms the config
  // turns off, more layers or experts): refuse it rather than run another function.
  for (const TensorView& t : st.tensors()) {
    if (read.count(t.name) || t.name.find("rotary_emb.inv_freq") != std::string::npos) continue;
    throw Error(st.path() + ": tensor '" + t.name + "' is not used by a '" + c.arch + "' model with " +
                std::to_string(c.n_layers) + " layers and " + std::to_string(c.n_experts) +
                " experts as config.json describes it; refusing to run without it");
  }
  if (hf_rope_permuted(c.arch)) {
    for (LayerWeights& w : m.layers) {
      for (auto [view, heads] : {std::pair<TensorView*, int64_t>{&w.wq, c.n_heads}, {&w.wk, c.n_kv_heads},
                                 {&w.bq, c.n_heads}, {&w.bk, c.n_kv_heads}}) {
        if (!view->data) continue;
        m.converted->emplace_back(size_t((view->bytes() + 3) / 4));
        permute_rope_rows(*view, heads, c.head_dim, /*to_gguf=*/true, m.converted->back().data());
        view->data = m.converted->back().data();
      }
    }
  }
}

}  // namespace

Model Model::load(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path p(path);
  if (std::filesystem::is_directory(p, ec) || p.filename() == "config.json") return load_safetensors(path);
  return load_gguf(path);
}

namespace {

Model bind_safetensors(const std::string& path) {
  std::error_code ec;
  const bool is_dir = std::filesystem::is_directory(std::filesystem::path(path), ec);
  check(is_dir || std::filesystem::path(path).filename() == "config.json",
        path + ": expected a Hugging Face checkpoint directory or its config.json");
  const std::filesystem::path dir = is_dir ? std::filesystem::path(path) : std::filesystem::path(path).parent_path();
  Model m;
  m.converted = std::make_shared<std::deque<std::vector<float>>>();
  m.config = config_from_hf((dir / "config.json").string());
  m.safetensors = SafetensorsModel::open(dir.string());
  check_counts_against_tensors(m.config, m.safetensors->tensors().size(), m.safetensors->path());
  const SafetensorsModel& st = *m.safetensors;
  if (m.config.layer_style != LayerStyle::Gemma4) {
    bind_llama_family(m);
    return m;
  }
  // DiffusionGemma keeps its stack under model.decoder.; the multimodal and text-only Gemma 4 releases
  // under model.language_model. and model.
  const std::string prefix =
      gemma_names::decoder_prefix([&st](const std::string& name) { return st.find_tensor(name) != nullptr; });
  check(!prefix.empty(), st.path() + ": no embedding tensor (model.decoder.embed_tokens.weight)");
  const TensorSource src{st.path(), [&st](const std::string& name) { return st.find_tensor(name); }};
  bind_tensors(m, src, [&prefix](const TensorSpec& t) { return gemma_names::to_hf(t.hf, prefix); });
  // Expert weights in a checkpoint whose config turns the MoE block off would be silently ignored.
  if (!m.config.is_moe())
    for (const TensorView& t : st.tensors())
      check(t.name.find(".experts.") == std::string::npos && t.name.find(".router.") == std::string::npos,
            st.path() + ": tensor '" + t.name + "' holds MoE weights but config.json disables the MoE block " +
                "(enable_moe_block / num_experts)");
  // The bf16 reference rounds its embedding scale to bf16 (53.0 for hidden 2816).
  if (m.token_embd.type == DType::BF16) m.config.embedding_scale = bf16_to_f32(f32_to_bf16(m.config.embedding_scale));
  ThreadPool pool(0);  // the usable CPUs
  prepare_embedding_columns(m, &pool);
  return m;
}

}  // namespace

Model Model::load_safetensors(const std::string& path) {
  Model m = bind_safetensors(path);
  check_weights_finite(m, WeightScan::Sampled, path);  // every load: a sample of each large tensor
  return m;
}

namespace {

// Every matrix the model description names (model/tensors.h), for passes over all of them; a tied head
// comes last and shares the embedding's bytes.
std::vector<TensorView*> weight_views(Model& m) {
  std::vector<TensorView*> v;
  for (const TensorSpec& spec : model_tensors(m.config))
    if (spec.kind == TensorKind::Matrix) v.push_back(weight_slot(m, spec.role, spec.layer));
  if (m.config.tied_output) v.push_back(&m.output);
  return v;
}

// A tensor the forward never reads means the file describes a model this one is not (expert tensors in
// a file whose expert_count is 0, rope_freqs of a scaled llama RoPE, a layer past block_count): refuse it
// rather than run something else. What is read is what the model's description lists (model/tensors.h);
// Gemma 4 files also carry rope_freqs, which canvas derives from the config; a training checkpoint's
// optimizer state (adamw.*) is expected.
void check_every_tensor_bound(const Model& m, const GgufFile& f) {
  std::unordered_set<std::string> read;
  for (const TensorSpec& t : model_tensors(m.config)) read.insert(t.gguf);
  if (m.config.layer_style == LayerStyle::Gemma4) read.insert("rope_freqs.weight");
  for (const TensorView& t : f.tensors()) {
    if (t.name.rfind("adamw.", 0) == 0 || read.count(t.name)) continue;
    throw Error(f.path() + ": tensor '" + t.name + "' is not used by a '" + m.config.arch + "' model with " +
                std::to_string(m.config.n_layers) + " layers and " + std::to_string(m.config.n_experts) +
                " experts; refusing to run without it (a file for another configuration?)");
  }
}

Model bind_gguf(const std::string& path) {
  Model m;
  m.file = GgufFile::open(path);
  m.converted = std::make_shared<std::deque<std::vector<float>>>();
  const GgufFile& f = *m.file;
  ModelConfig& c = m.config;
  c = config_from_gguf(f);
  check_counts_against_tensors(c, f.tensors().size(), path);
  const TensorView* embd = f.find_tensor("token_embd.weight");
  check(embd != nullptr, path + ": missing tensor 'token_embd.weight'");
  c.vocab = embd->ne[1];
  check_token_ids(c, path);
  if (c.layer_style != LayerStyle::Gemma4) {
    // What llama-family files say by which tensors they hold rather than by keys.
    c.tied_output = f.find_tensor("output.weight") == nullptr;
    if (const TensorView* pe = f.find_tensor("position_embd.weight")) {
      check(pe->n_dims == 2, path + ": tensor 'position_embd.weight' must be 2-D, is " + pe->shape_string());
      c.n_positions = pe->ne[1];
      c.context_length = std::min(c.context_length, pe->ne[1]);
    }
    c.qkv_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
    c.qk_norm = f.find_tensor("blk.0.attn_q_norm.weight") != nullptr;  // LLaDA-MoE's qk_layernorm
  }
  bind_tensors(m, source_of(f), [](const TensorSpec& t) { return t.gguf; });
  check_every_tensor_bound(m, f);
  check_weights_finite(m, WeightScan::Sampled, path);  // every load: a sample of each large tensor
  return m;
}

}  // namespace

TensorView* weight_slot(Model& m, TensorRole role, int64_t layer) {
  SelfConditioningWeights& s = m.self_conditioning;
  switch (role) {
    case TensorRole::TokenEmbd: return &m.token_embd;
    case TensorRole::PositionEmbd: return &m.position_embd;
    case TensorRole::OutputNorm: return &m.output_norm;
    case TensorRole::Output: return &m.output;
    case TensorRole::SelfCondNorm: return &s.pre_norm;
    case TensorRole::SelfCondGate: return &s.gate;
    case TensorRole::SelfCondUp: return &s.up;
    case TensorRole::SelfCondDown: return &s.down;
    default: break;
  }
  LayerWeights& w = m.layers.at(size_t(layer));
  switch (role) {
    case TensorRole::AttnNorm: return &w.attn_norm;
    case TensorRole::Wq: return &w.wq;
    case TensorRole::Wk: return &w.wk;
    case TensorRole::Wv: return &w.wv;
    case TensorRole::Wo: return &w.wo;
    case TensorRole::Bq: return &w.bq;
    case TensorRole::Bk: return &w.bk;
    case TensorRole::Bv: return &w.bv;
    case TensorRole::QNorm: return &w.q_norm;
    case TensorRole::KNorm: return &w.k_norm;
    case TensorRole::PostAttnNorm: return &w.post_attn_norm;
    case TensorRole::FfnNorm: return &w.ffn_norm;
    case TensorRole::Gate: return &w.gate;
    case TensorRole::Up: return &w.up;
    case TensorRole::Down: return &w.down;
    case TensorRole::PostFfnNorm: return &w.post_ffn_norm;
    case TensorRole::PostFfnNorm1: return &w.post_ffn_norm_1;
    case TensorRole::PreFfnNorm2: return &w.pre_ffn_norm_2;
    case TensorRole::PostFfnNorm2: return &w.post_ffn_norm_2;
    case TensorRole::Router: return &w.router;
    case TensorRole::RouterScale: return &w.router_scale;
    case TensorRole::PerExpertScale: return &w.per_expert_scale;
    case TensorRole::GateExps: return &w.gate_exps;
    case TensorRole::UpExps: return &w.up_exps;
    case TensorRole::DownExps: return &w.down_exps;
    case TensorRole::GateUpExps: return &w.gate_up_exps;
    default: return nullptr;  // the scalars are floats (layer_scalar_*)
  }
}

const TensorView* weight_slot(const Model& m, TensorRole role, int64_t layer) {
  return weight_slot(const_cast<Model&>(m), role, layer);  // it only locates; nothing is written
}

TensorView model_weight(const Model& model, const TensorSpec& spec) {
  if (spec.kind == TensorKind::Scalar) {
    const LayerWeights& w = model.layers.at(size_t(spec.layer));
    TensorView v;
    v.name = spec.gguf;
    v.type = DType::F32;
    v.n_dims = 1;
    v.ne = {1, 1, 1, 1};
    v.data = spec.role == TensorRole::EncoderLayerScalar ? &w.layer_scalar_encoder : &w.layer_scalar_decoder;
    return v;
  }
  if (spec.layer >= int64_t(model.layers.size())) return TensorView{};
  return *weight_slot(model, spec.role, spec.layer);
}

void interleave_weights(Model& model, const std::function<uint8_t*(const TensorView&)>& writable, ThreadPool* pool) {
  std::vector<std::pair<const void*, TensorView>> done;  // original data -> the rearranged view
  for (TensorView* t : weight_views(model)) {
    if (t->data == nullptr) continue;
    auto it = std::find_if(done.begin(), done.end(), [t](const auto& d) { return d.first == t->data; });
    if (it != done.end()) {
      if (interleaved_base(it->second.type) == t->type && it->second.ne == t->ne) {
        t->type = it->second.type;
        t->data = it->second.data;
      }
      continue;
    }
    if (!matmul_prefers_interleaved(*t)) continue;
    const void* original = t->data;
    if (t->ne[1] % kInterleaveRows == 0) {
      interleave_for_matmul(*t, writable(*t), pool);
    } else {  // a padded copy (e.g. a head over an odd vocabulary), owned by the model
      if (!model.converted) model.converted = std::make_shared<std::deque<std::vector<float>>>();
      model.converted->emplace_back(size_t((interleaved_bytes(*t) + 3) / 4));
      interleave_for_matmul(*t, model.converted->back().data(), pool);
    }
    done.emplace_back(original, *t);
  }
}

Model Model::load_gguf_as_stored(const std::string& path) { return bind_gguf(path); }

Model Model::load_gguf(const std::string& path) {
  Model m = bind_gguf(path);
  GgufFile& file = *m.file;
  ThreadPool pool(0);  // the usable CPUs
  interleave_weights(m, [&file](const TensorView& t) { return file.writable(t); }, &pool);
  prepare_embedding_columns(m, &pool);
  return m;
}

int64_t Model::parameter_count() const {
  int64_t total = 0;
  for (const TensorView& t : file ? file->tensors() : safetensors->tensors()) total += t.elements();
  return total;
}

int64_t Model::weight_bytes() const {
  int64_t total = 0;
  for (const TensorView& t : file ? file->tensors() : safetensors->tensors()) total += t.bytes();
  return total;
}

}  // namespace canvas
