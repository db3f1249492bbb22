// A trainable transformer: f32 parameters under the GGUF tensor names, and a forward on the tape that
// computes the same function as the inference forward (model/model.cpp), piece by piece.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/gguf.h"
#include "model/config.h"
#include "model/model.h"
#include "train/tape.h"

namespace canvas::train {

// A batch of n_sequences independent sequences of `length` tokens each, row-major [sequence][token].
struct TokenBatch {
  int64_t n_sequences = 0;
  int64_t length = 0;
  std::vector<int32_t> tokens;     // [n_sequences * length]
  std::vector<int32_t> groups;     // visibility groups per token (see AttentionMask); empty: all 0
  std::vector<int32_t> positions;  // RoPE positions per token; empty: 0 .. length-1 in every sequence
  int64_t rows() const { return n_sequences * length; }
};

// The self-conditioning input of a forward (config.self_conditioning): an earlier pass's logits, held
// fixed (no gradient reaches them). Row r gets mlp(norm(softmax(logits[r]) @ E * embedding_scale))
// added to its input embedding, as the inference forward does with ForwardRequest::self_cond; a row
// that `rows` marks 0 gets zeros instead (soft = 0, which adds exactly nothing).
struct SelfConditioningInput {
  const float* logits = nullptr;  // [batch rows x vocab]
  std::vector<uint8_t> rows;      // [batch rows]: 1 = this row uses its logits; empty: every row does
};

struct InitOptions {
  uint64_t seed = 0;
  float std = 0.02f;           // normal init of every matrix; norm weights 1, biases 0
  bool scale_residual = true;  // attn_output and ffn_down(_exps) std / sqrt(2 * n_layers) (GPT-2)
};

// Whether a weight writes a layer's output into the residual stream (attn_output, ffn_down(_exps)):
// scaled down at init, and zero in a layer inserted as the identity (RunConfig::init_layers).
bool is_residual_output(const std::string& name);

struct TrainLayer {
  Parameter attn_norm, wq, wk, wv, wo;
  Parameter bq, bk, bv;  // present when config.qkv_bias
  Parameter ffn_norm;
  Parameter gate, up, down;                         // dense MLP
  Parameter router, gate_exps, up_exps, down_exps;  // MoE
};

// The self-conditioning MLP (config.self_conditioning), under the names model.h documents. `down` starts
// at zero: the term is then exactly zero, so a new model (or one started from a model without the path,
// init_from) computes what it would without it, and training grows the term from there (down gets a
// gradient at once, gate and up once down is non-zero).
struct TrainSelfConditioning {
  Parameter norm, gate, up, down;
};

class TrainModel {
 public:
  // Random initialisation for `config` (vocab, hidden, heads, ffn or experts, qkv_bias, tied_output).
  TrainModel(const ModelConfig& config, const InitOptions& init);
  // The f32 copy of a loaded model's weights (any weight dtype is dequantised).
  static TrainModel from_model(const Model& model);
  static TrainModel from_gguf(const std::string& path) { return from_model(Model::load(path)); }

  TrainModel(TrainModel&&) = default;
  TrainModel& operator=(TrainModel&&) = default;
  TrainModel(const TrainModel&) = delete;
  TrainModel& operator=(const TrainModel&) = delete;

  const ModelConfig& config() const { return config_; }

  // Logits [rows, vocab] for every token of the batch (row r = token r of the batch). self_cond: the
  // self-conditioning input (models with config.self_conditioning); null: none, i.e. zeros everywhere.
  Var forward(Tape& tape, const TokenBatch& batch, const SelfConditioningInput* self_cond = nullptr);

  // Every parameter, in GGUF order (token_embd, position_embd, self_cond.*, blk.0..., output_norm,
  // output). Pointers stay valid for the model's lifetime, moves included (the parameters live on the
  // heap).
  std::vector<Parameter*> parameters();
  std::vector<const Parameter*> parameters() const;
  Parameter* find(const std::string& name);
  int64_t parameter_count() const;
  void zero_grad();

  // F32 views of every tensor under its GGUF name and shape, for GgufWriter::add_tensor.
  std::vector<TensorView> tensor_views() const;
  // The metadata config_from_gguf() reads back into this config (architecture keys, tokens ids).
  void add_metadata(GgufWriter& writer) const;
  void add_tensors(GgufWriter& writer) const;
  // Metadata (+ extra keys, e.g. a tokenizer) and tensors to a GGUF that Model::load reads as this model.
  // Throws Error when the file would load as a different configuration (the RoPE layout, activation and
  // embedding scale follow from the architecture name, not from keys).
  void save_gguf(const std::string& path,
                 const std::vector<std::pair<std::string, GgufValue>>& extra_metadata = {}) const;

 private:
  explicit TrainModel(const ModelConfig& config);  // shapes only, zero values
  Var attention_block(Tape& tape, TrainLayer& layer, Var x, const std::vector<int32_t>& positions,
                      const SequenceLayout& layout);
  Var mlp_block(Tape& tape, TrainLayer& layer, Var h);
  Var moe_block(Tape& tape, TrainLayer& layer, Var h);
  Var self_conditioning_block(Tape& tape, Var x, const SelfConditioningInput& input);

  struct Weights {
    Parameter token_embd, output_norm, output;  // output unused when the head is tied
    Parameter position_embd;                    // learned absolute positions, when config.n_positions > 0
    TrainSelfConditioning self_conditioning;    // when config.self_conditioning
    std::vector<TrainLayer> layers;
  };
  ModelConfig config_;
  std::unique_ptr<Weights> w_;
};

}  // namespace canvas::train
