// A trainable transformer: f32 parameters under the GGUF tensor names, and its forward on the tape: the
// model's one definition (model/transformer.h) run by the tape's executor, so training computes what
// inference computes, primitive by primitive.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/gguf.h"
#include "model/config.h"
#include "model/model.h"
#include "model/tensors.h"
#include "train/tape.h"

namespace canvas::train {

class TapeExecutor;

// A batch of n_sequences independent sequences of `length` tokens each, row-major [sequence][token].
struct TokenBatch {
  int64_t n_sequences = 0;
  int64_t length = 0;
  std::vector<int32_t> tokens;     // [n_sequences * length]
  std::vector<int32_t> groups;     // visibility groups per token (see AttentionMask); empty: all 0
  std::vector<int32_t> positions;  // RoPE positions per token; empty: 0 .. length-1 in every sequence
  // DiffusionGemma (config.has_decoder): 1 = the row is a canvas token in the decoder's view (its input
  // goes through the self-conditioning MLP and the decoder norm, its layers use the decoder's scalars,
  // and on sliding layers it sees the canvas plus the last window - 1 positions before the canvas's
  // first one, as model.cpp's decoder pass does); 0 = the encoder's view. The canvas of a row is the
  // decoder rows of its sequence in its visibility group. Empty: every row is the encoder's.
  std::vector<uint8_t> decoder;
  int64_t rows() const { return n_sequences * length; }
};

// The self-conditioning input of a forward (config.self_conditioning, or DiffusionGemma's decoder
// rows): an earlier pass's logits, held fixed (no gradient reaches them). Row r gets
// mlp(norm(softmax(logits[r]) @ E * embedding_scale)) added to its input embedding, as the inference
// forward does with ForwardRequest::self_cond; a row that `rows` marks 0 gets zeros instead (soft = 0,
// which adds exactly nothing).
struct SelfConditioningInput {
  const float* logits = nullptr;  // [batch rows x vocab]
  std::vector<uint8_t> rows;      // [batch rows]: 1 = this row uses its logits; empty: every row does
};

struct InitOptions {
  uint64_t seed = 0;
  float std = 0.02f;           // normal init of every matrix; norm weights and scalars 1, biases 0
  bool scale_residual = true;  // attn_output and ffn_down(_exps) std / sqrt(2 * n_layers) (GPT-2)
};

// Whether a weight writes a layer's output into the residual stream (attn_output, ffn_down(_exps)):
// scaled down at init, and zero in a layer inserted as the identity (RunConfig::init_layers).
bool is_residual_output(const std::string& name);

// A transformer of any architecture canvas runs (model/tensors.h lists its tensors): one f32
// Parameter per described tensor, under its GGUF name, and model/transformer.h's forward on the tape.
class TrainModel {
 public:
  // Random initialisation for `config` (TensorSpec::init says how each tensor starts).
  TrainModel(const ModelConfig& config, const InitOptions& init);
  // The f32 copy of a loaded model's weights (any weight dtype is dequantised).
  static TrainModel from_model(const Model& model);
  // Any model Model::load reads: a GGUF, or a Hugging Face directory (DiffusionGemma / Gemma 4).
  static TrainModel from_file(const std::string& path) { return from_model(Model::load(path)); }
  static TrainModel from_gguf(const std::string& path) { return from_file(path); }

  TrainModel(TrainModel&&) = default;
  TrainModel& operator=(TrainModel&&) = default;
  TrainModel(const TrainModel&) = delete;
  TrainModel& operator=(const TrainModel&) = delete;

  const ModelConfig& config() const { return config_; }
  const std::vector<TensorSpec>& tensors() const { return w_->specs; }

  // Logits [rows, vocab] for every token of the batch (row r = token r of the batch). self_cond: the
  // self-conditioning input (models with config.self_conditioning, and DiffusionGemma's decoder rows);
  // null: none, i.e. zeros everywhere.
  Var forward(Tape& tape, const TokenBatch& batch, const SelfConditioningInput* self_cond = nullptr);

  // Every parameter, in the order model_tensors() lists them (GGUF order). Pointers stay valid for the
  // model's lifetime, moves included (the parameters live on the heap).
  std::vector<Parameter*> parameters();
  std::vector<const Parameter*> parameters() const;
  Parameter* find(const std::string& name);
  int64_t parameter_count() const;
  void zero_grad();

  // F32 views of every tensor under its GGUF name and shape, for GgufWriter::add_tensor.
  std::vector<TensorView> tensor_views() const;
  // config_to_gguf(config()): the metadata config_from_gguf reads back as this config.
  void add_metadata(GgufWriter& writer) const;
  // The parameters, and the generated tensors the format needs (Gemma 4's rope_freqs.weight).
  void add_tensors(GgufWriter& writer) const;
  // Metadata (+ extra keys, e.g. a tokenizer) and tensors to a GGUF that Model::load reads as this model.
  // Throws Error when the file would load as a different configuration.
  void save_gguf(const std::string& path,
                 const std::vector<std::pair<std::string, GgufValue>>& extra_metadata = {}) const;

 private:
  explicit TrainModel(const ModelConfig& config);  // shapes only, zero values
  // The parameter of a role (layer -1: a global one); null when this model has none.
  Parameter* weight(TensorRole role, int64_t layer = -1);
  Parameter& need(TensorRole role, int64_t layer = -1);
  friend class TapeExecutor;  // model/transformer.h's primitives on the tape (train_model.cpp)

  struct Weights {
    std::vector<TensorSpec> specs;
    std::vector<Parameter> params;  // [specs.size()], never resized after construction
    std::vector<int32_t> index;     // [(n_layers + 1) * kTensorRoles]: role -> params index, or -1
    std::vector<float> rope_freqs;  // generated GGUF tensor (gguf_rope_freqs), kept for export
  };
  ModelConfig config_;
  std::unique_ptr<Weights> w_;
};

}  // namespace canvas::train
