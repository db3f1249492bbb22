// The transformer, written once: every architecture family canvas runs (llama / LLaDA / Dream / LLaDA-MoE
// in the pre-norm layer, DiffusionGemma / Gemma 4 in the Gemma 4 layer) as a sequence of primitives on an
// Executor. The CPU's executor (model/cpu_executor.cpp), the training tape (train/train_model.cpp) and the
// CUDA backend's executor (cuda/cuda_backend.cpp) run this one definition, and model/placement.h's
// PlacedExecutor splits a pass between a backend's executor and the CPU's: a primitive is what a backend
// implements, the layers are not.
//
// Values live in the executor's slots (its registers): each primitive reads some slots and writes one. A
// slot holds rows x width floats; the rows are the pass's rows (every request's stacked, or the training
// batch's) except where a primitive says otherwise. What varies between executors (the KV cache and the
// masks of attention, which rows want logits, how the head samples, the self-conditioning input) stays
// behind coarse primitives; every row-wise computation of the model is spelled out here.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "model/config.h"
#include "model/tensors.h"

namespace canvas {

// The executor's registers. The names say what the definition keeps in them.
enum class Slot : uint8_t {
  X,        // the residual stream
  H,        // a normed copy of X (a sublayer's input)
  Q, K, V,  // one layer's queries, keys, values
  Attn,     // attention output, before the output projection
  Proj,     // a sublayer's output before it joins X
  G, U,     // a gated MLP's gate and up products
  Router,   // the router's input (Gemma 4)
  Experts,  // the experts' output (Gemma 4)
  Soft,     // the self-conditioning input rows: softmax(previous logits) @ E * embedding scale
  SoftMlp,  // the self-conditioning MLP's output on those rows
  Head,     // the rows that want logits, final-normed
  Count
};
constexpr int kSlots = int(Slot::Count);

// A weight by role and layer (-1 for global roles); role Count: none (a norm without a weight).
struct WeightRef {
  TensorRole role = TensorRole::Count;
  int64_t layer = -1;
  bool present() const { return role != TensorRole::Count; }
};

// The primitives, by name (placement, the conformance harness's cases and --list).
enum class Primitive : uint8_t {
  Embed, SelfConditioningInput, AddSelfConditioning, DecoderNorm, RmsNorm, RmsNormHeads, Matmul, Copy, Add,
  AddBias, GatedActivation, Rope, Attention, Moe, RouterInput, ScaledResidual, HeadRows, Logits, Count
};
constexpr int kPrimitives = int(Primitive::Count);
const char* primitive_name(Primitive p);

// One product of a matmul primitive: out = in @ weight^T.
struct Product {
  Slot out;
  WeightRef weight;
};

// The primitives. An executor runs each exactly as its kernels do; the definition fixes their order (a
// training tape's gradients depend on it).
class Executor {
 public:
  virtual ~Executor() = default;

  // Whether this executor runs primitive p with this weight (absent: p's weights, if any, whatever their
  // type); a placement runs what an executor does not on another (model/placement.h).
  virtual bool supports(Primitive p, WeightRef weight) const {
    (void)p;
    (void)weight;
    return true;
  }
  // A slot's contents as host floats, and a slot set from them: what placement copies between
  // executors, and what the conformance harness feeds and compares.
  virtual void read_slot(Slot s, std::vector<float>& data, int64_t& rows, int64_t& width) = 0;
  virtual void write_slot(Slot s, const float* data, int64_t rows, int64_t width) = 0;

  // X = the tokens' embeddings times config.embedding_scale, plus learned absolute positions.
  virtual void embed(Slot x) = 0;
  // Soft = softmax(previous logits) @ E * embedding_scale for the rows that take a self-conditioning input
  // (Soft has those rows only); false when no row does (Soft untouched).
  virtual bool self_conditioning_input(Slot soft) = 0;
  // X's self-conditioned rows (those of self_conditioning_input) += mlp (one row of mlp per such row).
  virtual void add_self_conditioning(Slot x, Slot mlp) = 0;
  // DiffusionGemma's decoder rows of X: a weightless RMSNorm (nothing when there are none).
  virtual void decoder_norm(Slot x) = 0;

  // out = RMSNorm(in) * weight (no weight: 1) over rows of in's width; out may be in.
  virtual void rms_norm(Slot out, Slot in, WeightRef weight) = 0;
  // RMSNorm over each head_dim-wide piece of every row of x, in place.
  virtual void rms_norm_heads(Slot x, int64_t head_dim, WeightRef weight) = 0;
  // Every product's out = in @ weight^T (one parallel loop for all of them where the executor can).
  virtual void matmul(std::span<const Product> products, Slot in) = 0;
  virtual void copy(Slot out, Slot in) = 0;  // out = in
  virtual void add(Slot x, Slot y) = 0;      // x += y
  virtual void add_bias(Slot x, WeightRef bias) = 0;
  // g = act(g) * u (SiLU or GELU per the config).
  virtual void gated_activation(Slot g, Slot u) = 0;
  // RoPE of layer `layer` on x's n_heads heads, at each row's position.
  virtual void rope(Slot x, int64_t n_heads, int64_t layer) = 0;
  // Attention of layer `layer` (its cache, masks, window and canvas are the executor's): out from q, k, v.
  virtual void attention(Slot out, Slot q, Slot k, Slot v, int64_t layer) = 0;
  // Mixture of experts of layer `layer`: each row of router_in routed to its top-k experts, which run on
  // that row of expert_in; out = the weighted sum in ascending expert order.
  virtual void moe(Slot out, Slot router_in, Slot expert_in, int64_t layer) = 0;
  // Gemma 4's router input: RMSNorm(in) (no weight) * router_scale / sqrt(hidden).
  virtual void router_input(Slot out, Slot in, int64_t layer) = 0;
  // Gemma 4's layer end: x = (x + y) * the layer's scalar (the encoder's on encoder rows, the decoder's on
  // decoder rows).
  virtual void scaled_residual(Slot x, Slot y, int64_t layer) = 0;
  // head = the rows of x whose logits are wanted.
  virtual void head_rows(Slot head, Slot x) = 0;
  // The logits of head's rows (head @ weight^T, soft-capped by config.logit_softcap), delivered where the
  // executor's caller wants them.
  virtual void logits(Slot head, WeightRef weight) = 0;
};

// Runs the model of `config` on the executor: the embedding and self-conditioning input, every layer, the
// head.
void run_transformer(const ModelConfig& config, Executor& ex);

}  // namespace canvas
