// The tensors of a model, one description each (role, GGUF and Hugging Face names, shape, dtype rule,
// initialisation): weight binding, the trainer's parameters and export all derive from this list.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace canvas {

// What a tensor is for. Global roles have layer -1; the rest are per layer.
enum class TensorRole : uint8_t {
  TokenEmbd, PositionEmbd, OutputNorm, Output, SelfCondNorm, SelfCondGate, SelfCondUp, SelfCondDown,
  AttnNorm, Wq, Wk, Wv, Wo, Bq, Bk, Bv, QNorm, KNorm, PostAttnNorm,
  FfnNorm, Gate, Up, Down, PostFfnNorm, PostFfnNorm1, PreFfnNorm2, PostFfnNorm2,
  Router, RouterScale, PerExpertScale, GateExps, UpExps, DownExps, GateUpExps,
  LayerScalar,         // the layer-output scalar (Gemma 4; DiffusionGemma's decoder)
  EncoderLayerScalar,  // DiffusionGemma's encoder copy of it
  Count
};
constexpr int kTensorRoles = int(TensorRole::Count);

enum class TensorKind : uint8_t {
  Matrix,     // any dtype the matmul kernels take
  F32Matrix,  // read directly as f32 (learned position embeddings)
  Vector,     // f32; f16 / bf16 are converted at load
  Scalar,     // one value (f32 / f16 / bf16), read at load
};

// How the trainer initialises a fresh tensor.
enum class TensorInit : uint8_t {
  One,       // norm weights, scales, layer scalars
  Zero,      // biases; the self-conditioning MLP's down projection (the path starts as exactly nothing)
  Normal,    // N(0, std)
  Residual,  // N(0, std / sqrt(2 * layers)): projections that write into the residual stream (GPT-2)
};

struct TensorSpec {
  TensorRole role = TensorRole::Count;
  int64_t layer = -1;
  std::string gguf;            // GGUF name, e.g. "blk.3.attn_q.weight"
  // Hugging Face name. Gemma 4: the canonical name (model/gemma_names.h adds the checkpoint's prefix).
  // llama-style families: the full name in the family's published layout (LLaDA's
  // "model.transformer.blocks.N.q_proj.weight", Dream's / Llama's "model.layers.N.self_attn.q_proj.weight");
  // an expert stack holds "*" where its per-expert 2-D tensors have the expert index
  // ("model.layers.N.mlp.experts.*.gate_proj.weight"). "" for a tensor the family's layout has no name for
  // (canvas's self-conditioning MLP and learned positions).
  std::string hf;
  std::vector<int64_t> shape;  // ggml order: shape[0] is contiguous
  TensorKind kind = TensorKind::Matrix;
  TensorInit init = TensorInit::Normal;
  bool optional = false;  // files may lack it (EncoderLayerScalar: then it equals LayerScalar)
  int64_t elements() const;
};

// Every tensor of a model with this configuration, in file order (embeddings, self-conditioning,
// layers, output). The config must be complete: for llama-family files the presence-detected fields
// (qkv_bias, tied_output, n_positions) are set; for Gemma 4 each layer's value_from_key. Throws Error
// for an inconsistent configuration.
std::vector<TensorSpec> model_tensors(const ModelConfig& config);

}  // namespace canvas
