// The trainable transformer: parameters from the model's tensor description (model/tensors.h),
// initialisation, the tape's executor of model/transformer.h and export to GGUF.
#include "train/train_model.h"

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include "core/error.h"
#include "core/rng.h"
#include "model/transformer.h"
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

// ---- forward: model/transformer.h's definition on the tape ------------------------------------------

// The training executor: each primitive records the tape ops of its value and gradient. Slots hold the
// tape's values (Var); an in-place primitive binds its slot to a new node. The batch's rows are every
// token of every sequence; attention reads the batch's layouts (visibility groups, sliding windows,
// DiffusionGemma's decoder rows) instead of a cache.
class TapeExecutor final : public TypedExecutor<TapeExecutor> {
 public:
  TapeExecutor(TrainModel& model, Tape& tape, const TokenBatch& batch, const std::vector<int32_t>& positions,
               const SequenceLayout& layout, const SequenceLayout& sliding_layout, const SelfConditioningInput* input)
      : m_(model), c_(model.config()), tape_(tape), batch_(batch), positions_(positions), layout_(layout),
        sliding_layout_(sliding_layout), input_(input) {
    for (size_t r = 0; r < batch_.decoder.size(); ++r)
      if (batch_.decoder[r]) decoder_rows_.push_back(int32_t(r));
    if (c_.has_decoder) {
      conditioned_ = decoder_rows_;
    } else {
      for (int64_t r = 0; r < batch_.rows(); ++r) conditioned_.push_back(int32_t(r));
    }
  }

  // Whether some row takes the self-conditioning input (run_transformer's self_conditioned).
  bool self_conditioned() const { return input_ && !conditioned_.empty(); }

  Var result() const { return logits_; }

  void read_slot(Slot s, std::vector<float>& data, int64_t& rows, int64_t& width) override {
    rows = tape_.rows(at(s));
    width = tape_.cols(at(s));
    data.assign(tape_.value(at(s)), tape_.value(at(s)) + rows * width);
  }
  void write_slot(Slot s, const float* data, int64_t rows, int64_t width) override {
    at(s) = tape_.input(rows, width, data);
  }

 private:
  friend TypedExecutor<TapeExecutor>;
  void embed(Slot x) {
    Var e = embedding(tape_, m_.need(TensorRole::TokenEmbd), batch_.tokens, c_.embedding_scale);
    if (Parameter* pe = m_.weight(TensorRole::PositionEmbd)) e = train::add(tape_, e, embedding(tape_, *pe, positions_));
    at(x) = e;
  }
  // The conditioned rows (conditioned_): DiffusionGemma's decoder rows, every row of canvas's
  // self-conditioned models.
  void self_conditioning_input(Slot soft) {
    // softmax(previous logits) as a constant of the tape (zeros for rows the input does not mark).
    const int64_t V = c_.vocab, n = int64_t(conditioned_.size());
    check(input_->logits != nullptr, "TrainModel::forward: self-conditioning input without logits");
    check(input_->rows.empty() || int64_t(input_->rows.size()) == batch_.rows(),
          "TrainModel::forward: self-conditioning rows size mismatch");
    Var probs = tape_.input(n, V);
    float* p = tape_.value(probs);
    for (int64_t i = 0; i < n; ++i) {
      const int32_t r = conditioned_[size_t(i)];
      if (!input_->rows.empty() && !input_->rows[size_t(r)]) continue;
      const float* z = input_->logits + int64_t(r) * V;
      const float log_sum = row_stats(z, V).logsumexp;
      for (int64_t v = 0; v < V; ++v) p[i * V + v] = std::exp(z[v] - log_sum);
    }
    at(soft) = soft_embedding(tape_, probs, m_.need(TensorRole::TokenEmbd), c_.embedding_scale);
  }
  void add_self_conditioning(Slot x, Slot mlp) {
    if (c_.has_decoder) {
      const Var sum = train::add(tape_, gather_rows(tape_, at(x), conditioned_), at(mlp));
      at(x) = replace_rows(tape_, at(x), conditioned_, sum);
    } else {
      at(x) = train::add(tape_, at(x), at(mlp));
    }
  }
  void decoder_norm(Slot x) {
    if (decoder_rows_.empty()) return;
    const Var normed = train::rms_norm(tape_, gather_rows(tape_, at(x), decoder_rows_), nullptr, c_.rms_eps);
    at(x) = replace_rows(tape_, at(x), decoder_rows_, normed);
  }
  void rms_norm(Slot out, Slot in, WeightRef w) { at(out) = train::rms_norm(tape_, at(in), param(w), c_.rms_eps); }
  // RMSNorm over each head: the rows read as [rows * heads, head_dim].
  void rms_norm_heads(Slot x, int64_t head_dim, WeightRef w) {
    const int64_t rows = tape_.rows(at(x)), width = tape_.cols(at(x));
    at(x) = reshape(tape_, train::rms_norm(tape_, reshape(tape_, at(x), rows * width / head_dim, head_dim), param(w),
                                           c_.rms_eps),
                    rows, width);
  }
  void matmul(std::span<const Product> products, Slot in) {
    for (const Product& p : products) at(p.out) = linear(tape_, at(in), need(p.weight));
  }
  void copy(Slot out, Slot in) { at(out) = at(in); }
  void add(Slot x, Slot y) { at(x) = train::add(tape_, at(x), at(y)); }
  void add_bias(Slot x, WeightRef bias) { at(x) = train::add_bias(tape_, at(x), need(bias)); }
  void gated_activation(Slot g, Slot u) { at(g) = train::gated_activation(tape_, at(g), at(u), c_.activation); }
  void rope(Slot x, int64_t n_heads, int64_t layer) {
    at(x) = train::rope(tape_, at(x), int(n_heads), positions_, c_.attention_of(layer).rope);
  }
  void attention(Slot out, Slot q, Slot k, Slot v, int64_t layer) {
    const LayerAttention la = c_.attention_of(layer);
    const SequenceLayout& layout = la.kind == AttentionKind::Sliding ? sliding_layout_ : layout_;
    at(out) = train::attention(tape_, at(q), at(k), at(v), attention_shape(c_, la), layout);
  }
  // Route each row to its top-k experts, run each expert's gated MLP on its rows, and sum the weighted
  // results in ascending expert order (as the CPU forward does). Gemma 4 fuses [gate; up] in one matrix
  // and scales each expert's weight by per_expert_scale.
  void moe(Slot out, Slot router_in, Slot expert_in, int64_t l) {
    Routing routing = route_top_k(tape_, linear(tape_, at(router_in), m_.need(TensorRole::Router, l)),
                                  c_.n_experts_used, c_.expert_weights_norm);
    if (Parameter* scale_e = m_.weight(TensorRole::PerExpertScale, l))
      routing.weights = scale_columns(tape_, routing.weights, *scale_e);
    Parameter* gate_up = m_.weight(TensorRole::GateUpExps, l);
    std::vector<Var> expert_out(size_t(c_.n_experts));
    for (int64_t e = 0; e < c_.n_experts; ++e) {
      const std::vector<int32_t>& rows = routing.rows_of[size_t(e)];
      if (rows.empty()) continue;
      Var xe = gather_rows(tape_, at(expert_in), rows);
      Var g, u;
      if (gate_up) {
        Var gu = linear(tape_, xe, *gate_up, e);
        g = slice_columns(tape_, gu, 0, c_.expert_ffn);
        u = slice_columns(tape_, gu, c_.expert_ffn, 2 * c_.expert_ffn);
      } else {
        g = linear(tape_, xe, m_.need(TensorRole::GateExps, l), e);
        u = linear(tape_, xe, m_.need(TensorRole::UpExps, l), e);
      }
      expert_out[size_t(e)] = linear(tape_, train::gated_activation(tape_, g, u, c_.activation),
                                     m_.need(TensorRole::DownExps, l), e);
    }
    at(out) = combine_experts(tape_, expert_out, routing);
  }
  void router_input(Slot out, Slot in, int64_t layer) {
    at(out) = scale(tape_, train::rms_norm(tape_, at(in), &m_.need(TensorRole::RouterScale, layer), c_.rms_eps),
                    1.f / std::sqrt(float(c_.hidden)));
  }
  // The decoder's scalar is layer_scalar; the encoder's its own copy (the decoder's when the model has none).
  void scaled_residual(Slot x, Slot y, int64_t layer) {
    const Var sum = train::add(tape_, at(x), at(y));
    Parameter& decoder_scalar = m_.need(TensorRole::LayerScalar, layer);
    Parameter* encoder_scalar = m_.weight(TensorRole::EncoderLayerScalar, layer);
    at(x) = encoder_scalar ? scale_rows_by_scalar(tape_, sum, *encoder_scalar, &decoder_scalar, batch_.decoder)
                           : scale_rows_by_scalar(tape_, sum, decoder_scalar, nullptr, {});
  }
  void head_rows(Slot head, Slot x) { at(head) = at(x); }  // every row's logits
  void logits(Slot head, WeightRef weight) {
    logits_ = linear(tape_, at(head), need(weight));
    if (c_.logit_softcap > 0) logits_ = softcap(tape_, logits_, c_.logit_softcap);
  }

  Var& at(Slot s) { return slots_[size_t(s)]; }
  Parameter* param(WeightRef w) { return w.present() ? m_.weight(w.role, w.layer) : nullptr; }
  Parameter& need(WeightRef w) { return m_.need(w.role, w.layer); }

  TrainModel& m_;
  const ModelConfig& c_;
  Tape& tape_;
  const TokenBatch& batch_;
  const std::vector<int32_t>& positions_;
  const SequenceLayout& layout_;
  const SequenceLayout& sliding_layout_;
  const SelfConditioningInput* input_;
  std::array<Var, kSlots> slots_;
  std::vector<int32_t> decoder_rows_;  // DiffusionGemma's decoder rows
  std::vector<int32_t> conditioned_;   // the rows self_conditioning_input gives an input
  Var logits_;
};

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
  // Sliding layers: a row's window is anchored as ForwardPlan::window_start's (model/model.h): an encoder
  // row at its position, a decoder row at its canvas's first position (it sees its whole canvas and the
  // window - 1 positions before it), both through sliding_window_start.
  SequenceLayout sliding_layout = layout;
  bool any_sliding = false;
  for (int64_t l = 0; l < c.n_layers; ++l) any_sliding = any_sliding || c.attention_of(l).kind == AttentionKind::Sliding;
  if (any_sliding) {
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
        sliding_layout.window_start[r] = sliding_window_start(c, anchor);
      }
    }
  }

  TapeExecutor executor(*this, tape, batch, positions, layout, sliding_layout, self_cond);
  run_transformer(c, executor, executor.self_conditioned());
  return executor.result();
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
