// Weight binding and the transformer forward pass (one code path for every family and mode).
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
void add_bias(float* rows, int64_t n, int64_t width, const TensorView& bias) {
  if (!bias.data) return;
  const float* b = bias.f32();
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < width; ++i) rows[r * width + i] += b[i];
}

void rms_norm_rows(const float* x, int64_t n, int64_t width, const TensorView& w, float eps, float* y) {
  for (int64_t r = 0; r < n; ++r) rms_norm(x + r * width, w.data ? w.f32() : nullptr, width, eps, y + r * width);
}

// Gated MLP over rows: out = down(act(gate(x)) * up(x)).
void gated_mlp(const TensorView& gate, const TensorView& up, const TensorView& down, Activation act, const float* x,
               int64_t n, float* out, std::vector<float>& g, std::vector<float>& u, ThreadPool* pool) {
  const int64_t width = gate.rows();
  g.resize(size_t(n * width));
  u.resize(size_t(n * width));
  const MatmulTarget gate_up[] = {{&gate, g.data(), width}, {&up, u.data(), up.rows()}};
  matmul_fused(gate_up, 2, x, gate.cols(), n, pool);  // one parallel loop for both
  if (act == Activation::Silu) {
    swiglu(g.data(), u.data(), n * width, g.data());
  } else {
    geglu(g.data(), u.data(), n * width, g.data());
  }
  matmul(down, g.data(), n, out, pool);
}

// One expert's MLP over m gathered rows; a fused [gate; up] matrix (Gemma 4) is split after one product.
void expert_mlp(const ModelConfig& c, const LayerWeights& w, int64_t e, const float* x, int64_t m, float* out,
                std::vector<float>& g, std::vector<float>& u, std::vector<float>& gu, ThreadPool* pool) {
  if (!w.gate_up_exps.data) {
    gated_mlp(w.gate_exps.matrix(e), w.up_exps.matrix(e), w.down_exps.matrix(e), c.activation, x, m, out, g, u, pool);
    return;
  }
  const int64_t I = c.expert_ffn;
  gu.resize(size_t(m * 2 * I));
  g.resize(size_t(m * I));
  u.resize(size_t(m * I));
  matmul(w.gate_up_exps.matrix(e), x, m, gu.data(), pool);
  for (int64_t r = 0; r < m; ++r) {
    std::memcpy(&g[size_t(r * I)], &gu[size_t(r * 2 * I)], size_t(I) * 4);
    std::memcpy(&u[size_t(r * I)], &gu[size_t(r * 2 * I + I)], size_t(I) * 4);
  }
  if (c.activation == Activation::Silu) {
    swiglu(g.data(), u.data(), m * I, g.data());
  } else {
    geglu(g.data(), u.data(), m * I, g.data());
  }
  matmul(w.down_exps.matrix(e), g.data(), m, out, pool);
}

// Mixture of experts: each row goes to its top-k experts; rows are grouped by expert so every expert's
// weights are read once per pass. A row's sum is taken in ascending expert order, so it does not
// depend on which other rows share the batch. The router reads router_in, the experts expert_in
// (the same rows except in Gemma 4, whose router and experts see differently normed inputs).
void moe(const ModelConfig& c, const LayerWeights& w, const float* router_in, const float* expert_in, int64_t n,
         float* out, ThreadPool* pool) {
  const int64_t E = c.n_experts, K = c.n_experts_used, H = c.hidden;
  std::vector<float> router_logits(size_t(n * E));
  matmul(w.router, router_in, n, router_logits.data(), pool);
  std::vector<std::vector<int32_t>> rows_of(static_cast<size_t>(E));
  std::vector<std::vector<float>> weights_of(static_cast<size_t>(E));
  std::vector<float> probs(static_cast<size_t>(E));
  const float* expert_scale = w.per_expert_scale.data ? w.per_expert_scale.f32() : nullptr;
  for (int64_t r = 0; r < n; ++r) {
    softmax(router_logits.data() + r * E, E, probs.data());
    std::vector<int32_t> top = top_k(probs.data(), E, K);
    float total = 0;
    for (int32_t e : top) total += probs[size_t(e)];
    for (int32_t e : top) {
      rows_of[size_t(e)].push_back(int32_t(r));
      float weight = c.expert_weights_norm ? probs[size_t(e)] / total : probs[size_t(e)];
      if (expert_scale) weight *= expert_scale[e];
      weights_of[size_t(e)].push_back(weight);
    }
  }
  std::fill(out, out + n * H, 0.f);
  std::vector<float> gathered, result, g, u, gu;
  for (int64_t e = 0; e < E; ++e) {
    const auto& rows = rows_of[size_t(e)];
    if (rows.empty()) continue;
    const int64_t m = int64_t(rows.size());
    gathered.resize(size_t(m * H));
    result.resize(size_t(m * H));
    for (int64_t i = 0; i < m; ++i)
      std::memcpy(&gathered[size_t(i * H)], expert_in + rows[size_t(i)] * H, size_t(H) * 4);
    expert_mlp(c, w, e, gathered.data(), m, result.data(), g, u, gu, pool);
    for (int64_t i = 0; i < m; ++i) {
      float* dst = out + rows[size_t(i)] * H;
      const float weight = weights_of[size_t(e)][size_t(i)];
      for (int64_t j = 0; j < H; ++j) dst[j] += weight * result[size_t(i * H + j)];
    }
  }
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

// The sampled finiteness check every load runs (model/weight_check.h), its error naming the file.
void check_loaded_weights(const Model& m, const std::string& path) {
  try {
    check_weights_finite(m, WeightScan::Sampled);
  } catch (const Error& e) {
    throw Error(path + ": " + e.what() + " (canvas reads a sample of each large tensor at load; "
                "--check-weights reads every weight)");
  }
}

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
  ThreadPool pool(std::max(1u, std::thread::hardware_concurrency()));
  prepare_embedding_columns(m, &pool);
  return m;
}

}  // namespace

Model Model::load_safetensors(const std::string& path) {
  Model m = bind_safetensors(path);
  check_loaded_weights(m, path);
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
  check_loaded_weights(m, path);
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

TensorView model_weight(const Model& model, const TensorSpec& spec) {
  Model& m = const_cast<Model&>(model);  // weight_slot() only locates; nothing is written
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
  return *weight_slot(m, spec.role, spec.layer);
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
  ThreadPool pool(std::max(1u, std::thread::hardware_concurrency()));
  interleave_weights(m, [&file](const TensorView& t) { return file.writable(t); }, &pool);
  prepare_embedding_columns(m, &pool);
  return m;
}

namespace {
// The token embedding's rows v0 .. v0 + count dequantised and written transposed: out[j * ld + r] =
// E[v0 + r][j] (ld >= count).
void transpose_embedding_rows(const Model& model, int64_t v0, int64_t count, float* out, int64_t ld,
                              ThreadPool* pool) {
  const int64_t H = model.config.hidden;
  parallel_for(pool, count, 64, [&](int64_t b, int64_t e) {
    std::vector<float> row(static_cast<size_t>(H));
    for (int64_t r = b; r < e; ++r) {
      get_row(model.token_embd, v0 + r, row.data());
      for (int64_t j = 0; j < H; ++j) out[j * ld + r] = row[size_t(j)];
    }
  });
}
}  // namespace

void prepare_embedding_columns(Model& model, ThreadPool* pool) {
  const ModelConfig& c = model.config;
  model.embedding_columns.reset();
  model.embedding_columns_of = nullptr;
  const int64_t H = c.hidden, V = c.vocab;
  if (!(c.has_decoder || c.self_conditioning) || !model.token_embd.data || H <= 0 || V <= 0 ||
      V * H * int64_t(sizeof(float)) > kMaxEmbeddingColumnsBytes)
    return;
  auto columns = std::make_shared<std::vector<float>>(size_t(V * H));
  transpose_embedding_rows(model, 0, V, columns->data(), V, pool);
  model.embedding_columns = std::move(columns);
  model.embedding_columns_of = model.token_embd.data;
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

namespace {

// softmax(prev_logits) @ E for n rows into soft [n x hidden], as one matmul per tile of vocabulary rows:
// the tile of E is dequantised and transposed once ([H, tile]) and multiplied with the [n, tile]
// probabilities by the f32 matmul kernel, so E streams through memory once per pass instead of once per
// canvas row, and no [n, vocab] probability array is stored. The sum over tiles runs in a fixed order,
// so the result does not depend on the thread count.
// With model.embedding_columns (E transposed to f32 [H x V], made at load) it is softmax row by row and
// one matmul per chunk of rows instead: nothing is dequantised or transposed per pass.
void soft_embedding_of_logits(const Model& model, const float* prev_logits, int64_t n, std::vector<float>& soft,
                              ThreadPool* pool) {
  const ModelConfig& c = model.config;
  const int64_t H = c.hidden, V = c.vocab;
  // An f32 [H x cols] matrix (H rows of cols values) as a matmul weight.
  const auto columns_view = [H](const float* data, int64_t cols) {
    TensorView w;
    w.type = DType::F32;
    w.data = data;
    w.n_dims = 2;
    w.ne[0] = cols;
    w.ne[1] = H;
    return w;
  };
  if (model.embedding_columns && model.embedding_columns_of == model.token_embd.data) {
    const TensorView w = columns_view(model.embedding_columns->data(), V);
    const int64_t chunk = std::max<int64_t>(1, (int64_t(1) << 22) / V);  // <= 16 MiB of probabilities
    soft.resize(size_t(n * H));
    std::vector<float> probs(size_t(std::min(n, chunk) * V));
    for (int64_t r0 = 0; r0 < n; r0 += chunk) {
      const int64_t rows = std::min(chunk, n - r0);
      parallel_for(pool, rows, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) softmax(prev_logits + (r0 + i) * V, V, &probs[size_t(i * V)]);
      });
      matmul(w, probs.data(), V, rows, soft.data() + r0 * H, H, pool);
    }
    return;
  }
  std::vector<float> log_sum(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) log_sum[size_t(i)] = row_stats(prev_logits + i * V, V).logsumexp;
  constexpr int64_t kTile = 1024;
  soft.assign(size_t(n * H), 0.f);
  std::vector<float> partial(size_t(n * H));
  std::vector<float> columns_tile(size_t(kTile * H)), probs(size_t(n * kTile));
  for (int64_t v0 = 0; v0 < V; v0 += kTile) {
    const int64_t rows = std::min(kTile, V - v0);
    transpose_embedding_rows(model, v0, rows, columns_tile.data(), rows, pool);  // [H, rows]
    parallel_for(pool, n, 8, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const float* z = prev_logits + i * V + v0;
        for (int64_t r = 0; r < rows; ++r) probs[size_t(i * rows + r)] = std::exp(z[r] - log_sum[size_t(i)]);
      }
    });
    matmul(columns_view(columns_tile.data(), rows), probs.data(), rows, n, partial.data(), H, pool);
    for (int64_t i = 0; i < n * H; ++i) soft[size_t(i)] += partial[size_t(i)];
  }
}

// DiffusionGemma's decoder input (diffusiongemma.md section 2). On entry x holds E[canvas] * scale; on
// return rmsnorm_noweight(E[canvas] * scale + mlp(pre_norm(soft * scale))), soft = softmax(prev) @ E
// computed from the previous logits (prev_logits, [n x vocab]) or given (prev_soft, [n x hidden]); the
// MLP term is zero when neither is given. canvas's own models (config.self_conditioning) add the same
// term without the trailing norm (decoder_norm false), which belongs to the Gemma decoder, not to the
// llada-family layer.
void self_conditioning_input(const Model& model, const float* prev_logits, const float* prev_soft, int64_t n,
                             float* x, bool decoder_norm, ThreadPool* pool) {
  const ModelConfig& c = model.config;
  const int64_t H = c.hidden;
  if (prev_logits || prev_soft) {
    std::vector<float> soft;
    if (prev_logits) {
      soft_embedding_of_logits(model, prev_logits, n, soft, pool);
    } else {
      soft.assign(prev_soft, prev_soft + n * H);
    }
    for (float& value : soft) value *= c.embedding_scale;
    const SelfConditioningWeights& sc = model.self_conditioning;
    rms_norm_rows(soft.data(), n, H, sc.pre_norm, c.rms_eps, soft.data());
    std::vector<float> mlp(size_t(n * H)), g, u;
    gated_mlp(sc.gate, sc.up, sc.down, c.activation, soft.data(), n, mlp.data(), g, u, pool);
    for (int64_t i = 0; i < n * H; ++i) x[i] += mlp[size_t(i)];
  }
  if (decoder_norm) rms_norm_rows(x, n, H, TensorView{}, c.rms_eps, x);
}

// RMSNorm over each head_dim-wide head of every row, with an optional weight (q_norm / k_norm / v_norm).
void norm_heads(float* x, int64_t n, int64_t n_heads, int64_t head_dim, const TensorView& w, float eps) {
  rms_norm_rows(x, n * n_heads, head_dim, w, eps, x);
}

// The Gemma 4 layer after attention (diffusiongemma.md section 2): x holds the layer input and proj
// the attention output; on return x is the layer output.
//   h = x + post_attn_norm(a); m1 = post_ffn_norm_1(dense(pre_ffn_norm(h)));
//   m2 = post_ffn_norm_2(experts(pre_ffn_norm_2(h), router(h)));  out = (h + post_ffn_norm(m1 + m2)) * scalar
void gemma_layer_rest(const ModelConfig& c, const LayerWeights& w, float layer_scalar, int64_t n, float* x,
                      float* proj, float* h, std::vector<float>& g, std::vector<float>& u, ThreadPool* pool) {
  const int64_t H = c.hidden;
  rms_norm_rows(proj, n, H, w.post_attn_norm, c.rms_eps, proj);
  for (int64_t i = 0; i < n * H; ++i) x[i] += proj[i];
  rms_norm_rows(x, n, H, w.ffn_norm, c.rms_eps, h);
  gated_mlp(w.gate, w.up, w.down, c.activation, h, n, proj, g, u, pool);
  if (c.dense_and_moe) {
    rms_norm_rows(proj, n, H, w.post_ffn_norm_1, c.rms_eps, proj);
    std::vector<float> router_in(size_t(n * H)), experts_out(size_t(n * H));
    rms_norm_rows(x, n, H, TensorView{}, c.rms_eps, router_in.data());
    if (c.router_norm) {
      const float* scale = w.router_scale.f32();
      const float inv_sqrt_hidden = 1.f / std::sqrt(float(H));
      for (int64_t r = 0; r < n; ++r)
        for (int64_t j = 0; j < H; ++j) router_in[size_t(r * H + j)] *= scale[j] * inv_sqrt_hidden;
    }
    rms_norm_rows(x, n, H, w.pre_ffn_norm_2, c.rms_eps, h);
    moe(c, w, router_in.data(), h, n, experts_out.data(), pool);
    rms_norm_rows(experts_out.data(), n, H, w.post_ffn_norm_2, c.rms_eps, experts_out.data());
    for (int64_t i = 0; i < n * H; ++i) proj[i] += experts_out[size_t(i)];
  }
  rms_norm_rows(proj, n, H, w.post_ffn_norm, c.rms_eps, proj);
  for (int64_t i = 0; i < n * H; ++i) x[i] = (x[i] + proj[i]) * layer_scalar;
}

}  // namespace

void forward(const Model& model, KvCache& cache, const ForwardRequest& req, ThreadPool* pool) {
  KvCache* caches[] = {&cache};
  forward_batch(model, caches, std::span<const ForwardRequest>(&req, 1), pool);
}

AttentionShape attention_shape(const ModelConfig& c, const LayerAttention& la) {
  AttentionShape shape;
  shape.n_heads = int(c.n_heads);
  shape.n_kv_heads = int(la.n_kv_heads);
  shape.head_dim = int(la.head_dim);
  shape.scale = c.attention_scale > 0 ? c.attention_scale : 1.f / std::sqrt(float(la.head_dim));
  return shape;
}

ForwardPlan plan_forward(const Model& model, std::span<KvCache* const> caches, std::span<const ForwardRequest> requests) {
  const ModelConfig& c = model.config;
  const int64_t segments = int64_t(requests.size());
  check(segments > 0, "forward: no requests");
  check(caches.size() == requests.size(), "forward_batch: one KV cache per request");
  // Rows of all requests are stacked: segment s holds rows [row0[s], row0[s] + requests[s].n).
  ForwardPlan plan;
  std::vector<int64_t>& row0 = plan.row0;
  std::vector<int32_t>& pos = plan.pos;
  std::vector<int64_t>& key_ends = plan.key_ends;
  row0.assign(size_t(segments + 1), 0);
  key_ends.resize(size_t(segments));
  for (int64_t s = 0; s < segments; ++s) {
    const ForwardRequest& req = requests[size_t(s)];
    const KvCache& cache = *caches[size_t(s)];
    const int64_t n = req.n;
    const bool decoder = req.decoder;
    check(n > 0, "forward: no tokens");
    check(!decoder || c.has_decoder, "forward: decoder mode needs a model with a decoder (diffusion-gemma); '" +
                                         c.arch + "' has none");
    check(!decoder || !req.positions, "forward: explicit positions are for encoder passes only");
    check(decoder || (!req.canvas_kv && !req.canvas_rows), "forward: canvas K/V are for decoder passes only");
    check(!req.canvas_rows || req.canvas_kv, "forward: canvas rows need canvas_kv");
    if (req.canvas_kv) {
      check(!model.backend, "forward: kept canvas K/V (freezing settled positions) are not supported on this device");
      const int64_t length = req.canvas_kv->capacity();
      check(req.canvas_rows ? n <= length : n == length,
            "forward: " + std::to_string(n) + " canvas rows for a canvas K/V store of " + std::to_string(length));
      // (Increasing rows are increasing positions, which the loop below checks.)
      for (int64_t i = 0; req.canvas_rows && i < n; ++i)
        check(req.canvas_rows[i] >= 0 && req.canvas_rows[i] < length, "forward: canvas rows must be inside the canvas");
    }
    for (int64_t i = 0; i < n; ++i) {
      pos.push_back(req.positions     ? req.positions[i]
                    : req.canvas_rows ? int32_t(req.pos0 + req.canvas_rows[i])
                                      : int32_t(req.pos0 + i));
      check(i == 0 || pos.back() > pos[pos.size() - 2], "forward: positions must be strictly increasing");
    }
    check(!req.positions || req.key_end > 0, "forward: explicit positions need key_end");
    const int64_t first = pos[size_t(row0[size_t(s)])], last = pos.back();
    const int64_t key_end = decoder ? req.pos0 : req.key_end > 0 ? req.key_end : req.pos0 + n;
    key_ends[size_t(s)] = key_end;
    if (decoder) {
      check(req.pos0 >= 0 && req.pos0 <= cache.capacity(),
            "forward: decoder canvas after " + std::to_string(req.pos0) +
                " cached positions exceeds the KV cache capacity " + std::to_string(cache.capacity()));
    } else {
      check(first >= 0 && last < key_end && key_end <= cache.capacity(),
            "forward: positions " + std::to_string(first) + ".." + std::to_string(last + 1) + " (keys to " +
                std::to_string(key_end) + ") exceed the KV cache capacity " + std::to_string(cache.capacity()));
    }
    for (int64_t i = 0; i < n; ++i)
      check(req.tokens[i] >= 0 && req.tokens[i] < c.vocab, "token id " + std::to_string(req.tokens[i]) +
                                                               " is outside the vocabulary (size " +
                                                               std::to_string(c.vocab) + ")");
    check(!(req.self_cond || req.self_cond_soft) || decoder || c.self_conditioning,
          "forward: self-conditioning logits given to a model without a self-conditioning input");
    check(!(req.self_cond && req.self_cond_soft),
          "forward: give the self-conditioning input as logits (self_cond) or as a soft embedding (self_cond_soft), "
          "not both");
    check(!req.soft_embedding_out || req.head_stats,
          "forward: a soft embedding output needs head_stats (the fused head)");
    check(req.logit_rows.empty() || req.logits != nullptr || req.head_stats != nullptr,
          "forward: logit rows requested without an output buffer");
    for (int32_t row : req.logit_rows) check(row >= 0 && row < n, "forward: logit row out of range");
    check(decoder == requests[0].decoder, "forward_batch: decoder and encoder passes cannot share a batch");
    row0[size_t(s + 1)] = row0[size_t(s)] + n;
  }
  plan.n = row0[size_t(segments)];
  return plan;
}

void forward_batch(const Model& model, std::span<KvCache* const> caches, std::span<const ForwardRequest> requests,
                   ThreadPool* pool) {
  ForwardPlan plan = plan_forward(model, caches, requests);
  if (model.backend) {
    model.backend->forward_batch(model, caches, requests, plan);
    return;
  }
  const ModelConfig& c = model.config;
  const int64_t H = c.hidden;
  const int64_t segments = int64_t(requests.size());
  const std::vector<int64_t>& row0 = plan.row0;
  const std::vector<int32_t>& pos = plan.pos;
  const std::vector<int64_t>& key_ends = plan.key_ends;
  const int64_t n = row0[size_t(segments)];  // rows of the whole batch

  // Keeps the pool's workers spinning between this pass's parallel loops instead of sleeping.
  const ThreadPool::Busy busy(pool);

  // Buffers sized for the widest layer (Gemma 4's full layers are wider than its sliding ones).
  int64_t max_q_width = 0, max_kv_width = 0;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerAttention a = c.attention_of(l);
    max_q_width = std::max(max_q_width, c.n_heads * a.head_dim);
    max_kv_width = std::max(max_kv_width, a.n_kv_heads * a.head_dim);
  }
  std::vector<float> x(size_t(n * H)), h(size_t(n * H)), q(size_t(n * max_q_width)), k(size_t(n * max_kv_width)),
      v(size_t(n * max_kv_width)), attn(size_t(n * max_q_width)), proj(size_t(n * H)), g, u;
  std::vector<float> canvas_keys, canvas_values;  // decoder: [visible cache ; canvas] K/V of one layer
  for (int64_t s = 0; s < segments; ++s) {
    const ForwardRequest& req = requests[size_t(s)];
    for (int64_t i = 0; i < req.n; ++i) {
      const int64_t r = row0[size_t(s)] + i;
      get_row(model.token_embd, req.tokens[i], &x[size_t(r * H)]);
      if (c.embedding_scale != 1.f)
        for (int64_t j = 0; j < H; ++j) x[size_t(r * H + j)] *= c.embedding_scale;
      if (model.position_embd.data) {
        check(pos[size_t(r)] < model.position_embd.ne[1], "position " + std::to_string(pos[size_t(r)]) +
                                                               " is beyond the model's position embeddings (" +
                                                               std::to_string(model.position_embd.ne[1]) + ")");
        const float* pe = model.position_embd.f32() + int64_t(pos[size_t(r)]) * H;
        for (int64_t j = 0; j < H; ++j) x[size_t(r * H + j)] += pe[j];
      }
    }
    float* xs = &x[size_t(row0[size_t(s)] * H)];
    if (req.decoder) {
      self_conditioning_input(model, req.self_cond, req.self_cond_soft, req.n, xs, /*decoder_norm=*/true, pool);
    } else if (req.self_cond || req.self_cond_soft) {  // neither: zeros, which leave x as it is
      self_conditioning_input(model, req.self_cond, req.self_cond_soft, req.n, xs, /*decoder_norm=*/false, pool);
    }
    if (!req.decoder) {
      int32_t* groups = caches[size_t(s)]->groups();
      for (int64_t i = 0; i < req.n; ++i) groups[pos[size_t(row0[size_t(s)] + i)]] = req.groups[i];
    }
  }
  // Sliding layers: query at position p sees keys j >= p - window + 1 (and its group's rule).
  std::vector<int32_t> window_start;
  if (c.sliding_window > 0)
    for (int64_t i = 0; i < n; ++i) window_start.push_back(int32_t(pos[size_t(i)] - c.sliding_window + 1));

  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = model.layers[size_t(l)];
    const LayerAttention la = c.attention_of(l);
    const int64_t D = la.head_dim, q_width = c.n_heads * D, kv_width = la.n_kv_heads * D;
    const bool sliding = la.kind == AttentionKind::Sliding;
    rms_norm_rows(x.data(), n, H, w.attn_norm, c.rms_eps, h.data());
    // Q, K and V in one parallel loop (a decode step is a chain of short loops; each wait costs).
    const MatmulTarget qkv[] = {{&w.wq, q.data(), w.wq.rows()}, {&w.wk, k.data(), w.wk.rows()},
                                {&w.wv, v.data(), w.wv.rows()}};
    matmul_fused(qkv, la.value_from_key ? 2 : 3, h.data(), H, n, pool);
    if (la.value_from_key)
      std::copy(k.begin(), k.begin() + n * kv_width, v.begin());  // raw k_proj output, before k_norm and RoPE
    add_bias(q.data(), n, q_width, w.bq);
    add_bias(k.data(), n, kv_width, w.bk);
    add_bias(v.data(), n, kv_width, w.bv);
    if (c.qk_norm) {
      norm_heads(q.data(), n, c.n_heads, D, w.q_norm, c.rms_eps);
      norm_heads(k.data(), n, la.n_kv_heads, D, w.k_norm, c.rms_eps);
    }
    if (c.v_norm) norm_heads(v.data(), n, la.n_kv_heads, D, TensorView{}, c.rms_eps);
    rope(q.data(), n, int(c.n_heads), pos.data(), la.rope);
    rope(k.data(), n, int(la.n_kv_heads), pos.data(), la.rope);

    const AttentionShape shape = attention_shape(c, la);
    // Attention is the one per-request part of a layer: each request reads its own cache.
    for (int64_t s = 0; s < segments; ++s) {
      const ForwardRequest& req = requests[size_t(s)];
      KvCache& cache = *caches[size_t(s)];
      const int64_t r0 = row0[size_t(s)], ns = req.n;
      const float* qs = &q[size_t(r0 * q_width)];
      const float* ks_new = &k[size_t(r0 * kv_width)];
      const float* vs_new = &v[size_t(r0 * kv_width)];
      float* out = &attn[size_t(r0 * q_width)];
      float* kc = cache.keys(l);
      float* vc = cache.values(l);
      const int64_t stride = cache.head_stride(l);
      if (!req.decoder) {
        for (int64_t i = 0; i < ns; ++i)
          for (int64_t hh = 0; hh < la.n_kv_heads; ++hh) {
            const int64_t dst = hh * stride + int64_t(pos[size_t(r0 + i)]) * D;
            std::memcpy(kc + dst, &ks_new[size_t(i * kv_width + hh * D)], size_t(D) * 4);
            std::memcpy(vc + dst, &vs_new[size_t(i * kv_width + hh * D)], size_t(D) * 4);
          }
        AttentionMask mask;
        mask.key_group = cache.groups();
        mask.query_group = req.groups;
        if (sliding) mask.window_start = window_start.data() + r0;
        attention(qs, ns, q_width, kc, vc, key_ends[size_t(s)], stride, mask, shape, out, q_width, pool);
      } else {
        // The canvas sees the cache (sliding layers: its last window - 1 positions) and itself, both ways;
        // its own K/V go to scratch (or to the kept canvas K/V) so the cache stays as the encoder left it.
        const int64_t first = sliding ? std::max<int64_t>(0, req.pos0 - (c.sliding_window - 1)) : 0;
        KvCache* kept = req.canvas_kv;
        const int64_t canvas_rows = kept ? kept->capacity() : ns;
        const int64_t cached = req.pos0 - first, keys = cached + canvas_rows;
        if (kept)
          for (int64_t i = 0; i < ns; ++i) {
            const int64_t row = req.canvas_rows ? req.canvas_rows[i] : i;
            for (int64_t hh = 0; hh < la.n_kv_heads; ++hh) {
              const int64_t dst = hh * kept->head_stride(l) + row * D;
              std::memcpy(kept->keys(l) + dst, &ks_new[size_t(i * kv_width + hh * D)], size_t(D) * 4);
              std::memcpy(kept->values(l) + dst, &vs_new[size_t(i * kv_width + hh * D)], size_t(D) * 4);
            }
          }
        canvas_keys.resize(size_t(la.n_kv_heads * keys * D));
        canvas_values.resize(size_t(la.n_kv_heads * keys * D));
        for (int64_t hh = 0; hh < la.n_kv_heads; ++hh) {
          float* ks = &canvas_keys[size_t(hh * keys * D)];
          float* vs = &canvas_values[size_t(hh * keys * D)];
          std::memcpy(ks, kc + hh * stride + first * D, size_t(cached * D) * 4);
          std::memcpy(vs, vc + hh * stride + first * D, size_t(cached * D) * 4);
          if (kept) {
            std::memcpy(ks + cached * D, kept->keys(l) + hh * kept->head_stride(l), size_t(canvas_rows * D) * 4);
            std::memcpy(vs + cached * D, kept->values(l) + hh * kept->head_stride(l), size_t(canvas_rows * D) * 4);
            continue;
          }
          for (int64_t i = 0; i < ns; ++i) {
            std::memcpy(ks + (cached + i) * D, &ks_new[size_t(i * kv_width + hh * D)], size_t(D) * 4);
            std::memcpy(vs + (cached + i) * D, &vs_new[size_t(i * kv_width + hh * D)], size_t(D) * 4);
          }
        }
        attention(qs, ns, q_width, canvas_keys.data(), canvas_values.data(), keys, keys * D, AttentionMask{}, shape,
                  out, q_width, pool);
      }
    }
    matmul(w.wo, attn.data(), n, proj.data(), pool);

    if (c.layer_style == LayerStyle::Gemma4) {
      // The decoder's layer scalar belongs to decoder passes; a batch is all-decoder or all-encoder.
      gemma_layer_rest(c, w, requests[0].decoder ? w.layer_scalar_decoder : w.layer_scalar_encoder, n, x.data(),
                       proj.data(), h.data(), g, u, pool);
      continue;
    }
    for (int64_t i = 0; i < n * H; ++i) x[size_t(i)] += proj[size_t(i)];

    rms_norm_rows(x.data(), n, H, w.ffn_norm, c.rms_eps, h.data());
    if (c.is_moe()) {
      moe(c, w, h.data(), h.data(), n, proj.data(), pool);
    } else {
      gated_mlp(w.gate, w.up, w.down, c.activation, h.data(), n, proj.data(), g, u, pool);
    }
    for (int64_t i = 0; i < n * H; ++i) x[size_t(i)] += proj[size_t(i)];
  }

  // The head: the plain logit rows of every request in one matmul; fused-head requests one by one (each
  // has its own temperature and noise).
  std::vector<float> selected, batch_logits;
  int64_t plain_rows = 0;
  for (const ForwardRequest& req : requests)
    if (!req.head_stats) plain_rows += int64_t(req.logit_rows.size());
  selected.resize(size_t(plain_rows * H));
  int64_t r = 0;
  for (int64_t s = 0; s < segments; ++s) {
    const ForwardRequest& req = requests[size_t(s)];
    const int64_t rows = int64_t(req.logit_rows.size());
    if (rows == 0) continue;
    if (req.head_stats) {
      // The soft embedding is softmax @ output; it is the self-conditioning's softmax @ E only when tied.
      check(!req.soft_embedding_out ||
                (model.output.data == model.token_embd.data && model.output.type == model.token_embd.type),
            "forward: a soft embedding output needs a head tied to the token embedding; '" + c.arch +
                "' has its own output matrix");
      std::vector<float> own(size_t(rows * H));
      for (int64_t i = 0; i < rows; ++i)
        rms_norm(&x[size_t((row0[size_t(s)] + req.logit_rows[size_t(i)]) * H)], model.output_norm.f32(), H,
                 c.rms_eps, &own[size_t(i * H)]);
      HeadStreamOptions head = req.head;
      head.softcap = std::max(c.logit_softcap, 0.f);
      lm_head_stream(model.output, own.data(), rows, H, head, req.head_stats, req.soft_embedding_out, pool);
      continue;
    }
    for (int64_t i = 0; i < rows; ++i, ++r)
      rms_norm(&x[size_t((row0[size_t(s)] + req.logit_rows[size_t(i)]) * H)], model.output_norm.f32(), H, c.rms_eps,
               &selected[size_t(r * H)]);
  }
  if (plain_rows == 0) return;
  // One request writes its own buffer directly; a batch goes through one array and is scattered.
  const bool direct = segments == 1;
  if (!direct) batch_logits.resize(size_t(plain_rows * c.vocab));
  float* logits = direct ? requests[0].logits : batch_logits.data();
  matmul(model.output, selected.data(), plain_rows, logits, pool);
  if (c.logit_softcap > 0) {
    const float cap = c.logit_softcap;
    const int64_t V = c.vocab;
    parallel_for(pool, plain_rows, std::max<int64_t>(1, 16384 / V), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) softcap(logits + i * V, V, cap);
    });
  }
  if (direct) return;
  r = 0;
  for (const ForwardRequest& req : requests) {
    if (req.head_stats || req.logit_rows.empty()) continue;
    const int64_t rows = int64_t(req.logit_rows.size());
    std::copy(logits + r * c.vocab, logits + (r + rows) * c.vocab, req.logits);
    r += rows;
  }
}

}  // namespace canvas
