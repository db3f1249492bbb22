// The trainable transformer: parameters from the model's tensor description (model/tensors.h),
// initialisation, the tape forward (mirroring model.cpp top to bottom) and export to GGUF.
#include "train/train_model.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include "core/error.h"
#include "core/rng.h"
#include "ops/matmul.h"

namespace canvas::train {
namespace {

// A parameter's value from a bound weight of any dtype or layout.
void copy_weight(const TensorView& src, Parameter& dst) {
  check(src.data != nullptr, "TrainModel: weight '" + dst.name + "' is missing");
  check(src.elements() == dst.size() && src.cols() == dst.cols(),
        "TrainModel: weight '" + dst.name + "' has shape " + src.shape_string());
  for (int64_t r = 0; r < src.rows(); ++r) get_row(src, r, dst.value.data() + r * src.cols());
}

// What the training forward cannot compute is refused here, before anything is trained as a different
// function.
void check_trainable(const ModelConfig& c) {
  const std::string what = "TrainModel: architecture '" + c.arch + "': ";
  if (c.layer_style == LayerStyle::Gemma4) {
    check(c.tied_output, what + "Gemma 4 needs a tied head");
    check(!c.is_moe() || c.dense_and_moe, what + "Gemma 4 experts run beside the dense MLP (dense_and_moe)");
    check(!c.is_moe() || c.router_norm, what + "Gemma 4 experts need the normed router (router_norm)");
  } else {
    check(!c.qk_norm && !c.v_norm && !c.dense_and_moe && !c.router_norm && !c.has_decoder,
          what + "q/k/v norms, a dense MLP beside experts, router norms and the decoder need the Gemma 4 layer");
    check(c.n_kv_heads > 0 && c.head_dim > 0 && c.n_heads % c.n_kv_heads == 0,
          what + "heads must be a multiple of KV heads, head dim positive");
    check(c.rope.head_dim == c.head_dim, what + "rope.head_dim must equal head_dim");
  }
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerAttention a = c.attention_of(l);
    check(a.rope.head_dim == a.head_dim, what + "layer " + std::to_string(l) + ": RoPE head dim " +
                                             std::to_string(a.rope.head_dim) + " != head dim " +
                                             std::to_string(a.head_dim));
    check(a.kind == AttentionKind::Full || c.sliding_window > 0,
          what + "layer " + std::to_string(l) + " is sliding but the sliding window is 0");
  }
  check(!c.self_conditioning || c.layer_style == LayerStyle::PreNorm,
        what + "canvas-style self-conditioning is for pre-norm models (DiffusionGemma has its decoder's)");
}

}  // namespace

bool is_residual_output(const std::string& name) {
  for (const char* suffix : {"attn_output.weight", "ffn_down.weight", "ffn_down_exps.weight"}) {
    const size_t n = std::strlen(suffix);
    if (name.size() >= n && name.compare(name.size() - n, n, suffix) == 0) return true;
  }
  return false;
}

TrainModel::TrainModel(const ModelConfig& config) : config_(config), w_(std::make_unique<Weights>()) {
  check_trainable(config_);
  w_->specs = model_tensors(config_);
  w_->params.reserve(w_->specs.size());
  w_->index.assign(size_t((config_.n_layers + 1) * kTensorRoles), -1);
  for (const TensorSpec& spec : w_->specs) {
    const size_t slot = size_t((spec.layer + 1) * kTensorRoles + int64_t(spec.role));
    check(w_->index[slot] < 0, "TrainModel: tensor '" + spec.gguf + "' described twice");
    w_->index[slot] = int32_t(w_->params.size());
    w_->params.emplace_back(spec.gguf, spec.shape);
  }
}

Parameter* TrainModel::weight(TensorRole role, int64_t layer) {
  const int32_t i = w_->index[size_t((layer + 1) * kTensorRoles + int64_t(role))];
  return i < 0 ? nullptr : &w_->params[size_t(i)];
}

Parameter& TrainModel::need(TensorRole role, int64_t layer) {
  Parameter* p = weight(role, layer);
  check(p != nullptr, "TrainModel: layer " + std::to_string(layer) + " has no tensor of role " +
                          std::to_string(int(role)));
  return *p;
}

TrainModel::TrainModel(const ModelConfig& config, const InitOptions& init) : TrainModel(config) {
  Rng rng(init.seed);
  const float residual_std =
      init.scale_residual ? init.std / std::sqrt(2.f * float(config_.n_layers)) : init.std;
  for (size_t i = 0; i < w_->specs.size(); ++i) {
    Parameter& p = w_->params[i];
    switch (w_->specs[i].init) {
      case TensorInit::One: std::fill(p.value.begin(), p.value.end(), 1.f); break;
      case TensorInit::Zero: std::fill(p.value.begin(), p.value.end(), 0.f); break;
      case TensorInit::Normal:
      case TensorInit::Residual: {
        const float std = w_->specs[i].init == TensorInit::Residual ? residual_std : init.std;
        for (float& v : p.value) v = float(rng.normal()) * std;
        break;
      }
    }
  }
}

TrainModel TrainModel::from_model(const Model& model) {
  TrainModel m(model.config);
  for (size_t i = 0; i < m.w_->specs.size(); ++i) {
    const TensorSpec& spec = m.w_->specs[i];
    copy_weight(model_weight(model, spec), m.w_->params[i]);
  }
  return m;
}

// ---- forward (model/forward.cpp's stages, on the tape) --------------------------------------------------

// Stage 2, per layer: attn_norm, Q, K, V (biases, Gemma's q/k norms per head and the no-weight v norm, V
// from K on attention_k_eq_v layers), RoPE, attention, output projection.
Var TrainModel::attention_block(Tape& tape, int64_t l, Var x, const std::vector<int32_t>& positions,
                                const SequenceLayout& layout) {
  const ModelConfig& c = config_;
  const LayerAttention la = c.attention_of(l);
  const Var h = rms_norm(tape, x, &need(TensorRole::AttnNorm, l), c.rms_eps);
  const int64_t rows = tape.rows(h), D = la.head_dim;
  Var q = linear(tape, h, need(TensorRole::Wq, l));
  Var k = linear(tape, h, need(TensorRole::Wk, l));
  Var v = la.value_from_key ? k : linear(tape, h, need(TensorRole::Wv, l));  // raw k_proj, before norm and RoPE
  if (c.qkv_bias) {
    q = add_bias(tape, q, need(TensorRole::Bq, l));
    k = add_bias(tape, k, need(TensorRole::Bk, l));
    v = add_bias(tape, v, need(TensorRole::Bv, l));
  }
  // RMSNorm over each head: the rows read as [rows * heads, head_dim].
  auto norm_heads = [&](Var x, int64_t heads, Parameter* w) {
    return reshape(tape, rms_norm(tape, reshape(tape, x, rows * heads, D), w, c.rms_eps), rows, heads * D);
  };
  if (c.qk_norm) {
    q = norm_heads(q, c.n_heads, &need(TensorRole::QNorm, l));
    k = norm_heads(k, la.n_kv_heads, &need(TensorRole::KNorm, l));
  }
  if (c.v_norm) v = norm_heads(v, la.n_kv_heads, nullptr);
  q = rope(tape, q, int(c.n_heads), positions, la.rope);
  k = rope(tape, k, int(la.n_kv_heads), positions, la.rope);
  AttentionShape shape;
  shape.n_heads = int(c.n_heads);
  shape.n_kv_heads = int(la.n_kv_heads);
  shape.head_dim = int(D);
  shape.scale = c.attention_scale > 0 ? c.attention_scale : 1.f / std::sqrt(float(D));
  Var attended = attention(tape, q, k, v, shape, layout);
  return linear(tape, attended, need(TensorRole::Wo, l));
}

// Gated MLP: down(act(gate(h)) * up(h)).
Var TrainModel::gated_mlp(Tape& tape, int64_t l, Var h) {
  Var g = linear(tape, h, need(TensorRole::Gate, l));
  Var u = linear(tape, h, need(TensorRole::Up, l));
  return linear(tape, gated_activation(tape, g, u, config_.activation), need(TensorRole::Down, l));
}

// Mixture of experts: route each row (router_in) to its top-k experts, run each expert's gated MLP on
// its rows of expert_in, and sum the weighted results in ascending expert order (as model.cpp does).
// Gemma 4 fuses [gate; up] in one matrix and scales each expert's weight by per_expert_scale.
Var TrainModel::moe(Tape& tape, int64_t l, Var router_in, Var expert_in) {
  const ModelConfig& c = config_;
  Routing routing =
      route_top_k(tape, linear(tape, router_in, need(TensorRole::Router, l)), c.n_experts_used, c.expert_weights_norm);
  if (Parameter* scale_e = weight(TensorRole::PerExpertScale, l)) routing.weights = scale_columns(tape, routing.weights, *scale_e);
  Parameter* gate_up = weight(TensorRole::GateUpExps, l);
  std::vector<Var> expert_out(size_t(c.n_experts));
  for (int64_t e = 0; e < c.n_experts; ++e) {
    const std::vector<int32_t>& rows = routing.rows_of[size_t(e)];
    if (rows.empty()) continue;
    Var xe = gather_rows(tape, expert_in, rows);
    Var g, u;
    if (gate_up) {
      Var gu = linear(tape, xe, *gate_up, e);
      g = slice_columns(tape, gu, 0, c.expert_ffn);
      u = slice_columns(tape, gu, c.expert_ffn, 2 * c.expert_ffn);
    } else {
      g = linear(tape, xe, need(TensorRole::GateExps, l), e);
      u = linear(tape, xe, need(TensorRole::UpExps, l), e);
    }
    expert_out[size_t(e)] = linear(tape, gated_activation(tape, g, u, c.activation), need(TensorRole::DownExps, l), e);
  }
  return combine_experts(tape, expert_out, routing);
}

// The Gemma 4 layer after attention (diffusiongemma.md section 2; model/forward.cpp's gemma_layer_rest):
//   h = x + post_attn_norm(a); m1 = post_ffn_norm_1(dense(pre_ffn_norm(h)));
//   m2 = post_ffn_norm_2(experts(pre_ffn_norm_2(h), router(h)));  out = (h + post_ffn_norm(m1 + m2)) * scalar
// with the encoder's scalar on encoder rows and the decoder's on decoder rows.
Var TrainModel::gemma_layer_rest(Tape& tape, int64_t l, Var x, Var a, const std::vector<uint8_t>& decoder_rows) {
  const ModelConfig& c = config_;
  Var h = add(tape, x, rms_norm(tape, a, &need(TensorRole::PostAttnNorm, l), c.rms_eps));
  Var m = gated_mlp(tape, l, rms_norm(tape, h, &need(TensorRole::FfnNorm, l), c.rms_eps));
  if (c.is_moe()) {
    m = rms_norm(tape, m, &need(TensorRole::PostFfnNorm1, l), c.rms_eps);
    // Router input: rmsnorm_noweight(h) * scale / sqrt(hidden).
    Var router_in = scale(tape, rms_norm(tape, h, &need(TensorRole::RouterScale, l), c.rms_eps),
                          1.f / std::sqrt(float(c.hidden)));
    Var experts = moe(tape, l, router_in, rms_norm(tape, h, &need(TensorRole::PreFfnNorm2, l), c.rms_eps));
    m = add(tape, m, rms_norm(tape, experts, &need(TensorRole::PostFfnNorm2, l), c.rms_eps));
  }
  Var out = add(tape, h, rms_norm(tape, m, &need(TensorRole::PostFfnNorm, l), c.rms_eps));
  // The decoder's scalar is layer_scalar; the encoder's its own copy (the decoder's when the model has none).
  Parameter& decoder_scalar = need(TensorRole::LayerScalar, l);
  Parameter* encoder_scalar = weight(TensorRole::EncoderLayerScalar, l);
  if (!encoder_scalar) return scale_rows_by_scalar(tape, out, decoder_scalar, nullptr, {});
  return scale_rows_by_scalar(tape, out, *encoder_scalar, &decoder_scalar, decoder_rows);
}

// Stage 3, per layer: the attention output joins the residual stream, then the feed-forward sublayer:
// Gemma 4's layer tail, or the pre-norm block's dense MLP or MoE.
Var TrainModel::feed_forward(Tape& tape, int64_t l, Var x, Var attention_out, const std::vector<uint8_t>& decoder_rows) {
  const ModelConfig& c = config_;
  if (c.layer_style == LayerStyle::Gemma4) return gemma_layer_rest(tape, l, x, attention_out, decoder_rows);
  x = add(tape, x, attention_out);
  Var h = rms_norm(tape, x, &need(TensorRole::FfnNorm, l), c.rms_eps);
  return add(tape, x, c.is_moe() ? moe(tape, l, h, h) : gated_mlp(tape, l, h));
}

// Stage 4: the final norm, the logits (soft-capped).
Var TrainModel::head(Tape& tape, Var x) {
  const ModelConfig& c = config_;
  Var h = rms_norm(tape, x, &need(TensorRole::OutputNorm), c.rms_eps);
  Var logits = linear(tape, h, c.tied_output ? need(TensorRole::TokenEmbd) : need(TensorRole::Output));
  if (c.logit_softcap > 0) logits = softcap(tape, logits, c.logit_softcap);
  return logits;
}

// Stage 1: token embeddings (scaled), learned positions, and the self-conditioning input (DiffusionGemma's
// decoder rows, or every row of a self-conditioned model).
Var TrainModel::embed(Tape& tape, const TokenBatch& batch, const std::vector<int32_t>& positions,
                      const SelfConditioningInput* self_cond) {
  const ModelConfig& c = config_;
  Var x = embedding(tape, need(TensorRole::TokenEmbd), batch.tokens, c.embedding_scale);
  if (Parameter* pe = weight(TensorRole::PositionEmbd)) x = add(tape, x, embedding(tape, *pe, positions));
  if (c.has_decoder) return decoder_input(tape, x, self_cond, batch.decoder);
  if (!self_cond) return x;
  std::vector<int32_t> all(static_cast<size_t>(batch.rows()));
  for (int64_t r = 0; r < batch.rows(); ++r) all[size_t(r)] = int32_t(r);
  return add(tape, x, self_conditioning_mlp(tape, x, *self_cond, all));
}

// The self-conditioning MLP over the given rows of x: mlp(norm(softmax(logits) @ E * embedding_scale)),
// the probabilities a constant of the tape (zeros for rows the input does not mark).
Var TrainModel::self_conditioning_mlp(Tape& tape, Var x, const SelfConditioningInput& input,
                                      const std::vector<int32_t>& rows) {
  const ModelConfig& c = config_;
  const int64_t V = c.vocab, n = int64_t(rows.size());
  check(input.logits != nullptr, "TrainModel::forward: self-conditioning input without logits");
  check(input.rows.empty() || int64_t(input.rows.size()) == tape.rows(x),
        "TrainModel::forward: self-conditioning rows size mismatch");
  Var probs = tape.input(n, V);  // zeros: rows without logits
  float* p = tape.value(probs);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t r = rows[size_t(i)];
    if (!input.rows.empty() && !input.rows[size_t(r)]) continue;
    const float* z = input.logits + int64_t(r) * V;
    const float log_sum = row_stats(z, V).logsumexp;
    for (int64_t v = 0; v < V; ++v) p[i * V + v] = std::exp(z[v] - log_sum);
  }
  Var h = rms_norm(tape, soft_embedding(tape, probs, need(TensorRole::TokenEmbd), c.embedding_scale),
                   &need(TensorRole::SelfCondNorm), c.rms_eps);
  Var g = linear(tape, h, need(TensorRole::SelfCondGate));
  Var u = linear(tape, h, need(TensorRole::SelfCondUp));
  return linear(tape, gated_activation(tape, g, u, c.activation), need(TensorRole::SelfCondDown));
}

// DiffusionGemma's decoder input on its rows (model.cpp's self_conditioning_input with the decoder
// norm): rmsnorm_noweight(E[canvas] * scale + mlp(...)); the MLP term is absent without an input.
Var TrainModel::decoder_input(Tape& tape, Var x, const SelfConditioningInput* input,
                              const std::vector<uint8_t>& decoder_rows) {
  std::vector<int32_t> rows;
  for (size_t r = 0; r < decoder_rows.size(); ++r)
    if (decoder_rows[r]) rows.push_back(int32_t(r));
  if (rows.empty()) return x;
  Var xd = gather_rows(tape, x, rows);
  if (input) xd = add(tape, xd, self_conditioning_mlp(tape, x, *input, rows));
  return replace_rows(tape, x, rows, rms_norm(tape, xd, nullptr, config_.rms_eps));
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
  check(batch.decoder.empty() || int64_t(batch.decoder.size()) == rows,
        "TrainModel::forward: decoder rows size mismatch");
  bool any_decoder = false;
  for (uint8_t d : batch.decoder) any_decoder = any_decoder || d;
  check(!any_decoder || c.has_decoder, "TrainModel::forward: decoder rows for '" + c.arch +
                                           "', which has no decoder (only diffusion-gemma has one)");
  check(!self_cond || c.self_conditioning || any_decoder,
        "TrainModel::forward: a self-conditioning input for a model without the path (or without decoder rows)");
  std::vector<int32_t> positions = batch.positions;
  if (positions.empty()) {
    positions.resize(size_t(rows));
    for (int64_t r = 0; r < rows; ++r) positions[size_t(r)] = int32_t(r % batch.length);
  }
  SequenceLayout layout(batch.n_sequences, batch.length, batch.groups);
  // Sliding layers: an encoder row at position p sees keys at p - window + 1 on; a decoder row sees its
  // whole canvas and the window - 1 positions before the canvas's first (model.cpp's decoder pass).
  SequenceLayout sliding_layout = layout;
  bool any_sliding = false;
  for (int64_t l = 0; l < c.n_layers; ++l) any_sliding = any_sliding || c.attention_of(l).kind == AttentionKind::Sliding;
  if (any_sliding) {
    const int64_t W = c.sliding_window;
    sliding_layout.positions = positions;
    sliding_layout.window_start.resize(size_t(rows));
    for (int64_t s = 0; s < batch.n_sequences; ++s) {
      std::map<int32_t, int32_t> canvas_start;  // group -> first position of its decoder rows
      for (int64_t i = 0; i < batch.length; ++i) {
        const size_t r = size_t(s * batch.length + i);
        if (!any_decoder || !batch.decoder[r]) continue;
        const int32_t g = batch.groups.empty() ? 0 : batch.groups[r];
        auto it = canvas_start.find(g);
        if (it == canvas_start.end() || positions[r] < it->second) canvas_start[g] = positions[r];
      }
      for (int64_t i = 0; i < batch.length; ++i) {
        const size_t r = size_t(s * batch.length + i);
        const bool dec = any_decoder && batch.decoder[r];
        const int64_t anchor = dec ? canvas_start[batch.groups.empty() ? 0 : batch.groups[r]] : positions[r];
        sliding_layout.window_start[r] = int32_t(anchor - W + 1);
      }
    }
  }

  Var x = embed(tape, batch, positions, self_cond);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const SequenceLayout& lay = c.attention_of(l).kind == AttentionKind::Sliding ? sliding_layout : layout;
    x = feed_forward(tape, l, x, attention_block(tape, l, x, positions, lay), batch.decoder);
  }
  return head(tape, x);
}

// ---- parameters ----------------------------------------------------------------------------------

std::vector<Parameter*> TrainModel::parameters() {
  std::vector<Parameter*> out;
  for (Parameter& p : w_->params) out.push_back(&p);
  return out;
}

std::vector<const Parameter*> TrainModel::parameters() const {
  std::vector<const Parameter*> out;
  for (const Parameter& p : w_->params) out.push_back(&p);
  return out;
}

Parameter* TrainModel::find(const std::string& name) {
  for (Parameter& p : w_->params)
    if (p.name == name) return &p;
  return nullptr;
}

int64_t TrainModel::parameter_count() const {
  int64_t n = 0;
  for (const Parameter& p : w_->params) n += p.size();
  return n;
}

void TrainModel::zero_grad() {
  for (Parameter& p : w_->params) p.zero_grad();
}

// ---- export --------------------------------------------------------------------------------------

std::vector<TensorView> TrainModel::tensor_views() const {
  std::vector<TensorView> views;
  for (const Parameter& p : w_->params) views.push_back(p.view());
  return views;
}

void TrainModel::add_metadata(GgufWriter& w) const { config_to_gguf(config_, w); }

void TrainModel::add_tensors(GgufWriter& w) const {
  w_->rope_freqs = gguf_rope_freqs(config_);  // kept by the model until the writer has written it
  if (!w_->rope_freqs.empty())
    w.add_tensor("rope_freqs.weight", DType::F32, {int64_t(w_->rope_freqs.size())}, w_->rope_freqs.data(),
                 w_->rope_freqs.size() * sizeof(float));
  for (const Parameter& p : w_->params)
    w.add_tensor(p.name, DType::F32, p.shape, p.value.data(), uint64_t(p.size()) * sizeof(float));
}

void TrainModel::save_gguf(const std::string& path,
                           const std::vector<std::pair<std::string, GgufValue>>& extra_metadata) const {
  GgufWriter w;
  add_metadata(w);  // throws for a config the file cannot express
  for (const auto& [key, value] : extra_metadata) w.set(key, value);
  add_tensors(w);
  w.write(path);
  // Read the configuration back: config_to_gguf refuses what it knows it cannot express; this catches
  // anything it missed.
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
  if (back.has_decoder != c.has_decoder) wrong = "decoder";
  if (back.sliding_window != c.sliding_window) wrong = "sliding window";
  if (!wrong.empty()) {
    std::remove(path.c_str());
    throw Error(path + ": architecture '" + c.arch + "' cannot express this model's " + wrong +
                "; the file would load as a different model");
  }
}

}  // namespace canvas::train
