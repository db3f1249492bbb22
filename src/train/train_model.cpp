// The trainable transformer: parameters, initialisation, the tape forward (mirroring model.cpp top to
// bottom) and export to GGUF.
#include "train/train_model.h"

#include <cmath>
#include <cstring>
#include <cstdio>

#include "core/error.h"
#include "core/rng.h"
#include "ops/matmul.h"

namespace canvas::train {
namespace {

std::string layer_prefix(int64_t i) {
  return "blk." + std::to_string(i) + ".";
}

// A parameter's value from a bound weight of any dtype or layout.
void copy_weight(const TensorView& src, Parameter& dst) {
  check(src.data != nullptr, "TrainModel: weight '" + dst.name + "' is missing");
  check(src.elements() == dst.size() && src.cols() == dst.cols(),
        "TrainModel: weight '" + dst.name + "' has shape " + src.shape_string());
  for (int64_t r = 0; r < src.rows(); ++r) get_row(src, r, dst.value.data() + r * src.cols());
}

}  // namespace

TrainModel::TrainModel(const ModelConfig& config) : config_(config), w_(std::make_unique<Weights>()) {
  const ModelConfig& c = config_;
  check(c.vocab > 0 && c.hidden > 0 && c.n_layers > 0 && c.n_heads > 0 && c.n_kv_heads > 0 && c.head_dim > 0,
        "TrainModel: vocab, hidden, layers, heads, kv heads and head dim must be positive");
  check(c.n_heads % c.n_kv_heads == 0, "TrainModel: heads must be a multiple of kv heads");
  check(
      c.is_moe() ? (c.n_experts_used > 0 && c.n_experts_used <= c.n_experts && c.expert_ffn > 0) : c.ffn > 0,
      "TrainModel: the MLP needs ffn > 0, or experts with 0 < used <= count and expert_ffn > 0");
  check(c.rope.head_dim == c.head_dim, "TrainModel: rope.head_dim must equal head_dim");
  check(!c.self_conditioning || c.ffn > 0, "TrainModel: self-conditioning needs ffn > 0 (its MLP's width)");
  check(!c.self_conditioning || c.layer_style == LayerStyle::PreNorm,
        "TrainModel: self-conditioning is for canvas's own (pre-norm) models");
  const int64_t H = c.hidden, q_width = c.n_heads * c.head_dim, kv_width = c.n_kv_heads * c.head_dim;
  w_->token_embd = Parameter("token_embd.weight", {H, c.vocab});
  if (c.n_positions > 0) w_->position_embd = Parameter("position_embd.weight", {H, c.n_positions});
  if (c.self_conditioning) {
    TrainSelfConditioning& s = w_->self_conditioning;
    s.norm = Parameter("self_cond.norm.weight", {H});
    s.gate = Parameter("self_cond.gate.weight", {H, c.ffn});
    s.up = Parameter("self_cond.up.weight", {H, c.ffn});
    s.down = Parameter("self_cond.down.weight", {c.ffn, H});
  }
  w_->output_norm = Parameter("output_norm.weight", {H});
  if (!c.tied_output) w_->output = Parameter("output.weight", {H, c.vocab});
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string b = layer_prefix(i);
    TrainLayer l;
    l.attn_norm = Parameter(b + "attn_norm.weight", {H});
    l.wq = Parameter(b + "attn_q.weight", {H, q_width});
    l.wk = Parameter(b + "attn_k.weight", {H, kv_width});
    l.wv = Parameter(b + "attn_v.weight", {H, kv_width});
    if (c.qkv_bias) {
      l.bq = Parameter(b + "attn_q.bias", {q_width});
      l.bk = Parameter(b + "attn_k.bias", {kv_width});
      l.bv = Parameter(b + "attn_v.bias", {kv_width});
    }
    l.wo = Parameter(b + "attn_output.weight", {q_width, H});
    l.ffn_norm = Parameter(b + "ffn_norm.weight", {H});
    if (c.is_moe()) {
      l.router = Parameter(b + "ffn_gate_inp.weight", {H, c.n_experts});
      l.gate_exps = Parameter(b + "ffn_gate_exps.weight", {H, c.expert_ffn, c.n_experts});
      l.up_exps = Parameter(b + "ffn_up_exps.weight", {H, c.expert_ffn, c.n_experts});
      l.down_exps = Parameter(b + "ffn_down_exps.weight", {c.expert_ffn, H, c.n_experts});
    } else {
      l.gate = Parameter(b + "ffn_gate.weight", {H, c.ffn});
      l.up = Parameter(b + "ffn_up.weight", {H, c.ffn});
      l.down = Parameter(b + "ffn_down.weight", {c.ffn, H});
    }
    w_->layers.push_back(std::move(l));
  }
}

bool is_residual_output(const std::string& name) {
  for (const char* suffix : {"attn_output.weight", "ffn_down.weight", "ffn_down_exps.weight"}) {
    const size_t n = std::strlen(suffix);
    if (name.size() >= n && name.compare(name.size() - n, n, suffix) == 0) return true;
  }
  return false;
}

TrainModel::TrainModel(const ModelConfig& config, const InitOptions& init) : TrainModel(config) {
  Rng rng(init.seed);
  const float residual_std =
      init.scale_residual ? init.std / std::sqrt(2.f * float(config_.n_layers)) : init.std;
  auto ends_with = [](const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  for (Parameter* p : parameters()) {
    if (ends_with(p->name, "norm.weight")) {
      std::fill(p->value.begin(), p->value.end(), 1.f);
    } else if (ends_with(p->name, ".bias") || p->name == "self_cond.down.weight") {  // TrainSelfConditioning
      std::fill(p->value.begin(), p->value.end(), 0.f);
    } else {
      const float std = is_residual_output(p->name) ? residual_std : init.std;
      for (float& v : p->value) v = float(rng.normal()) * std;
    }
  }
}

TrainModel TrainModel::from_model(const Model& model) {
  TrainModel m(model.config);
  const ModelConfig& c = m.config_;
  copy_weight(model.token_embd, m.w_->token_embd);
  if (c.n_positions > 0) copy_weight(model.position_embd, m.w_->position_embd);
  if (c.self_conditioning) {
    TrainSelfConditioning& s = m.w_->self_conditioning;
    copy_weight(model.self_conditioning.pre_norm, s.norm);
    copy_weight(model.self_conditioning.gate, s.gate);
    copy_weight(model.self_conditioning.up, s.up);
    copy_weight(model.self_conditioning.down, s.down);
  }
  copy_weight(model.output_norm, m.w_->output_norm);
  if (!c.tied_output) copy_weight(model.output, m.w_->output);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const LayerWeights& src = model.layers[size_t(i)];
    TrainLayer& l = m.w_->layers[size_t(i)];
    copy_weight(src.attn_norm, l.attn_norm);
    copy_weight(src.wq, l.wq);
    copy_weight(src.wk, l.wk);
    copy_weight(src.wv, l.wv);
    if (c.qkv_bias) {
      copy_weight(src.bq, l.bq);
      copy_weight(src.bk, l.bk);
      copy_weight(src.bv, l.bv);
    }
    copy_weight(src.wo, l.wo);
    copy_weight(src.ffn_norm, l.ffn_norm);
    if (c.is_moe()) {
      copy_weight(src.router, l.router);
      copy_weight(src.gate_exps, l.gate_exps);
      copy_weight(src.up_exps, l.up_exps);
      copy_weight(src.down_exps, l.down_exps);
    } else {
      copy_weight(src.gate, l.gate);
      copy_weight(src.up, l.up);
      copy_weight(src.down, l.down);
    }
  }
  return m;
}

// ---- forward (model.cpp's forward, on the tape) --------------------------------------------------

Var TrainModel::attention_block(Tape& tape, TrainLayer& l, Var x, const std::vector<int32_t>& positions,
                                const SequenceLayout& layout) {
  const ModelConfig& c = config_;
  Var h = rms_norm(tape, x, &l.attn_norm, c.rms_eps);
  Var q = linear(tape, h, l.wq);
  Var k = linear(tape, h, l.wk);
  Var v = linear(tape, h, l.wv);
  if (c.qkv_bias) {
    q = add_bias(tape, q, l.bq);
    k = add_bias(tape, k, l.bk);
    v = add_bias(tape, v, l.bv);
  }
  q = rope(tape, q, int(c.n_heads), positions, c.rope);
  k = rope(tape, k, int(c.n_kv_heads), positions, c.rope);
  AttentionShape shape;
  shape.n_heads = int(c.n_heads);
  shape.n_kv_heads = int(c.n_kv_heads);
  shape.head_dim = int(c.head_dim);
  shape.scale = 1.f / std::sqrt(float(c.head_dim));
  Var attended = attention(tape, q, k, v, shape, layout);
  return add(tape, x, linear(tape, attended, l.wo));
}

// Gated MLP: down(act(gate(h)) * up(h)).
Var TrainModel::mlp_block(Tape& tape, TrainLayer& l, Var h) {
  Var g = linear(tape, h, l.gate);
  Var u = linear(tape, h, l.up);
  return linear(tape, gated_activation(tape, g, u, config_.activation), l.down);
}

// Mixture of experts: route each row to its top-k experts, run each expert's gated MLP on its rows,
// and sum the weighted results in ascending expert order (as model.cpp does).
Var TrainModel::moe_block(Tape& tape, TrainLayer& l, Var h) {
  const ModelConfig& c = config_;
  Routing routing = route_top_k(tape, linear(tape, h, l.router), c.n_experts_used, c.expert_weights_norm);
  std::vector<Var> expert_out(size_t(c.n_experts));
  for (int64_t e = 0; e < c.n_experts; ++e) {
    const std::vector<int32_t>& rows = routing.rows_of[size_t(e)];
    if (rows.empty()) continue;
    Var xe = gather_rows(tape, h, rows);
    Var g = linear(tape, xe, l.gate_exps, e);
    Var u = linear(tape, xe, l.up_exps, e);
    expert_out[size_t(e)] = linear(tape, gated_activation(tape, g, u, c.activation), l.down_exps, e);
  }
  return combine_experts(tape, expert_out, routing);
}

// Self-conditioning (model.cpp's self_conditioning_input without the Gemma decoder's norm):
// x + mlp(norm(softmax(logits) @ E * embedding_scale)), the probabilities a constant of the tape.
Var TrainModel::self_conditioning_block(Tape& tape, Var x, const SelfConditioningInput& input) {
  const ModelConfig& c = config_;
  const int64_t rows = tape.rows(x), V = c.vocab;
  check(c.self_conditioning, "TrainModel::forward: a self-conditioning input for a model without the path");
  check(input.logits != nullptr, "TrainModel::forward: self-conditioning input without logits");
  check(input.rows.empty() || int64_t(input.rows.size()) == rows,
        "TrainModel::forward: self-conditioning rows size mismatch");
  Var probs = tape.input(rows, V);  // zeros: rows without logits
  float* p = tape.value(probs);
  for (int64_t r = 0; r < rows; ++r) {
    if (!input.rows.empty() && !input.rows[size_t(r)]) continue;
    const float* z = input.logits + r * V;
    const float log_sum = row_stats(z, V).logsumexp;
    for (int64_t v = 0; v < V; ++v) p[r * V + v] = std::exp(z[v] - log_sum);
  }
  TrainSelfConditioning& s = w_->self_conditioning;
  Var h = rms_norm(tape, soft_embedding(tape, probs, w_->token_embd, c.embedding_scale), &s.norm, c.rms_eps);
  Var g = linear(tape, h, s.gate);
  Var u = linear(tape, h, s.up);
  return add(tape, x, linear(tape, gated_activation(tape, g, u, c.activation), s.down));
}

Var TrainModel::forward(Tape& tape, const TokenBatch& batch, const SelfConditioningInput* self_cond) {
  const ModelConfig& c = config_;
  const int64_t rows = batch.rows();
  check(rows > 0, "TrainModel::forward: empty batch");
  check(int64_t(batch.tokens.size()) == rows, "TrainModel::forward: " + std::to_string(batch.tokens.size()) +
                                                  " tokens for " + std::to_string(batch.n_sequences) + " x " +
                                                  std::to_string(batch.length));
  check(batch.groups.empty() || int64_t(batch.groups.size()) == rows,
        "TrainModel::forward: groups size mismatch");
  check(batch.positions.empty() || int64_t(batch.positions.size()) == rows,
        "TrainModel::forward: positions size mismatch");
  std::vector<int32_t> positions = batch.positions;
  if (positions.empty()) {
    positions.resize(size_t(rows));
    for (int64_t r = 0; r < rows; ++r) positions[size_t(r)] = int32_t(r % batch.length);
  }
  const SequenceLayout layout{batch.n_sequences, batch.length, batch.groups};

  Var x = embedding(tape, w_->token_embd, batch.tokens, c.embedding_scale);
  if (c.n_positions > 0) x = add(tape, x, embedding(tape, w_->position_embd, positions));
  if (self_cond) x = self_conditioning_block(tape, x, *self_cond);
  for (TrainLayer& l : w_->layers) {
    x = attention_block(tape, l, x, positions, layout);
    Var h = rms_norm(tape, x, &l.ffn_norm, c.rms_eps);
    x = add(tape, x, c.is_moe() ? moe_block(tape, l, h) : mlp_block(tape, l, h));
  }
  Var h = rms_norm(tape, x, &w_->output_norm, c.rms_eps);
  Var logits = linear(tape, h, c.tied_output ? w_->token_embd : w_->output);
  if (c.logit_softcap > 0) logits = softcap(tape, logits, c.logit_softcap);
  return logits;
}

// ---- parameters ----------------------------------------------------------------------------------

std::vector<Parameter*> TrainModel::parameters() {
  std::vector<Parameter*> out{&w_->token_embd};
  if (config_.n_positions > 0) out.push_back(&w_->position_embd);
  if (config_.self_conditioning) {
    TrainSelfConditioning& s = w_->self_conditioning;
    for (Parameter* p : {&s.norm, &s.gate, &s.up, &s.down}) out.push_back(p);
  }
  for (TrainLayer& l : w_->layers) {
    for (Parameter* p : {&l.attn_norm, &l.wq, &l.wk, &l.wv}) out.push_back(p);
    if (config_.qkv_bias)
      for (Parameter* p : {&l.bq, &l.bk, &l.bv}) out.push_back(p);
    for (Parameter* p : {&l.wo, &l.ffn_norm}) out.push_back(p);
    if (config_.is_moe()) {
      for (Parameter* p : {&l.router, &l.gate_exps, &l.up_exps, &l.down_exps}) out.push_back(p);
    } else {
      for (Parameter* p : {&l.gate, &l.up, &l.down}) out.push_back(p);
    }
  }
  out.push_back(&w_->output_norm);
  if (!config_.tied_output) out.push_back(&w_->output);
  return out;
}

std::vector<const Parameter*> TrainModel::parameters() const {
  std::vector<const Parameter*> out;
  for (Parameter* p : const_cast<TrainModel*>(this)->parameters()) out.push_back(p);
  return out;
}

Parameter* TrainModel::find(const std::string& name) {
  for (Parameter* p : parameters())
    if (p->name == name) return p;
  return nullptr;
}

int64_t TrainModel::parameter_count() const {
  int64_t n = 0;
  for (const Parameter* p : parameters()) n += p->size();
  return n;
}

void TrainModel::zero_grad() {
  for (Parameter* p : parameters()) p->zero_grad();
}

// ---- export --------------------------------------------------------------------------------------

std::vector<TensorView> TrainModel::tensor_views() const {
  std::vector<TensorView> views;
  for (const Parameter* p : parameters()) views.push_back(p->view());
  return views;
}

void TrainModel::add_metadata(GgufWriter& w) const {
  const ModelConfig& c = config_;
  check(!c.arch.empty(), "TrainModel::add_metadata: the config has no architecture name");
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
  auto token = [&](const char* key, int32_t id) {
    if (id >= 0) w.set(key, u32(id));
  };
  token("tokenizer.ggml.mask_token_id", c.mask_token);
  token("tokenizer.ggml.bos_token_id", c.bos_token);
  token("tokenizer.ggml.eos_token_id", c.eos_token);
  token("tokenizer.ggml.padding_token_id", c.pad_token);
}

void TrainModel::add_tensors(GgufWriter& w) const {
  for (const Parameter* p : parameters())
    w.add_tensor(p->name, DType::F32, p->shape, p->value.data(), uint64_t(p->size()) * sizeof(float));
}

void TrainModel::save_gguf(const std::string& path,
                           const std::vector<std::pair<std::string, GgufValue>>& extra_metadata) const {
  GgufWriter w;
  add_metadata(w);
  for (const auto& [key, value] : extra_metadata) w.set(key, value);
  add_tensors(w);
  w.write(path);
  // Read the configuration back: what the file cannot say (the RoPE layout, activation and embedding
  // scale are implied by the architecture name) must already agree.
  const ModelConfig back = config_from_gguf(*GgufFile::open(path));
  const ModelConfig& c = config_;
  std::string wrong;
  if (back.rope.layout != c.rope.layout) wrong = "RoPE layout";
  if (back.rope.active_pairs != c.rope.active_pairs) wrong = "RoPE active pairs";
  if (back.activation != c.activation) wrong = "activation";
  if (back.embedding_scale != c.embedding_scale) wrong = "embedding scale";
  if (back.shift_logits != c.shift_logits) wrong = "shift_logits (causal models always shift)";
  if (back.uniform_state != c.uniform_state) wrong = "uniform-state diffusion";
  if (back.self_conditioning != c.self_conditioning) wrong = "self-conditioning";
  if (!wrong.empty()) {
    std::remove(path.c_str());
    throw Error(path + ": architecture '" + c.arch + "' cannot express this model's " + wrong +
                "; the file would load as a different model");
  }
}

}  // namespace canvas::train
