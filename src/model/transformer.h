// The transformer, written once: every architecture family canvas runs (llama / LLaDA / Dream / LLaDA-MoE
// in the pre-norm layer, DiffusionGemma / Gemma 4 in the Gemma 4 layer) as a sequence of primitives on an
// Executor. The CPU's executor (model/cpu_executor.cpp), the training tape (train/train_model.cpp) and the
// CUDA backend's executor (cuda/cuda_backend.cpp) run this one definition, and model/placement.h's
// PlacedExecutor splits a pass between a backend's executor and the CPU's: a primitive is what a backend
// implements, the layers are not.
//
// Values live in the executor's slots (its registers): each primitive reads some slots and writes one
// (primitive_info's table says which of a call's slots; a call is an Op, so placement, the conformance
// harness and the profiler treat every primitive alike). A slot holds rows x width floats; the rows are
// the pass's rows (every request's stacked, or the training batch's) except where a primitive says
// otherwise. What varies between executors (the KV cache and the
// masks of attention, which rows want logits, how the head samples, the self-conditioning input) stays
// behind coarse primitives; every row-wise computation of the model is spelled out here.
#pragma once
#include <array>
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

// What an Op's weight is to its primitive.
enum class WeightUse : uint8_t {
  None,    // no weight
  Vector,  // a norm's or bias's vector (absent: a norm without weight)
  Matrix,  // a product's matrix (matmul: each product's own)
  Layer,   // op.layer's weights, which the primitive finds itself (experts, router scale, layer scalars)
};

// The primitives as data: what each reads and writes of an Op's slots, and what its weight is. Placement
// brings the slots read to the side that runs the call and marks the slots written as held there, the
// conformance harness compares the slots written, and every executor reads the same row.
struct PrimitiveInfo {
  const char* name;
  int reads;         // in[0 .. reads) are read
  bool reads_out;    // out is read too (in place, or accumulated into)
  bool writes_out;   // out is written (matmul writes its products' outs instead; logits no slot)
  WeightUse weight;
};
const PrimitiveInfo& primitive_info(Primitive p);
inline const char* primitive_name(Primitive p) { return primitive_info(p).name; }

// One product of a matmul primitive: out = in @ weight^T.
struct Product {
  Slot out;
  WeightRef weight;
};

// One call of a primitive: which slots, which weight, which layer. Made by Executor's typed calls below.
struct Op {
  static constexpr std::array<Slot, 3> kNoSlots{Slot::Count, Slot::Count, Slot::Count};
  Op(Primitive primitive_, Slot out_, std::array<Slot, 3> in_ = kNoSlots, WeightRef weight_ = {},
     int64_t layer_ = -1, int64_t size_ = 0, std::span<const Product> products_ = {})
      : primitive(primitive_), out(out_), in(in_), weight(weight_), layer(layer_), size(size_),
        products(products_) {}

  Primitive primitive;
  Slot out;  // the slot written (matmul: none, its products' outs)
  std::array<Slot, 3> in;
  WeightRef weight;    // the weight whose type an executor's supports() judges (matmul: the first product's)
  int64_t layer;       // the call's layer, -1 for global calls (what keep_on_cpu is asked)
  int64_t size;        // rms_norm_heads: head_dim; rope: the heads
  std::span<const Product> products;  // matmul
  const PrimitiveInfo& info() const { return primitive_info(primitive); }
};

// An executor of the primitives. It runs each Op exactly as its kernels do; the definition fixes their
// order (a training tape's gradients depend on it). A primitive reads only its Op's slots and the pass's
// inputs, and writes only its Op's slots (logits: the pass's outputs): nothing passes from one call to the
// next outside the slots, so a placement may run any call on any executor.
class Executor {
 public:
  virtual ~Executor() = default;

  // Whether this executor runs op (its weight's type, its layer); a placement runs what an executor does
  // not on another (model/placement.h).
  virtual bool supports(const Op& op) const {
    (void)op;
    return true;
  }
  virtual void run(const Op& op) = 0;
  // A slot's contents as host floats, and a slot set from them: what placement copies between
  // executors, and what the conformance harness feeds and compares.
  virtual void read_slot(Slot s, std::vector<float>& data, int64_t& rows, int64_t& width) = 0;
  virtual void write_slot(Slot s, const float* data, int64_t rows, int64_t width) = 0;

  // The primitives as typed calls, each one Op.
  // X = the tokens' embeddings times config.embedding_scale, plus learned absolute positions.
  void embed(Slot x) { run(Op(Primitive::Embed, x)); }
  // Soft = softmax(previous logits) @ E * embedding_scale for the rows that take a self-conditioning input
  // (Soft has those rows only; run only when some row does).
  void self_conditioning_input(Slot soft) { run(Op(Primitive::SelfConditioningInput, soft)); }
  // X's self-conditioned rows (those of self_conditioning_input) += mlp (one row of mlp per such row).
  void add_self_conditioning(Slot x, Slot mlp) { run(Op(Primitive::AddSelfConditioning, x, {mlp})); }
  // DiffusionGemma's decoder rows of X: a weightless RMSNorm (nothing when there are none).
  void decoder_norm(Slot x) { run(Op(Primitive::DecoderNorm, x)); }
  // out = RMSNorm(in) * weight (no weight: 1) over rows of in's width; out may be in.
  void rms_norm(Slot out, Slot in, WeightRef weight) {
    run(Op(Primitive::RmsNorm, out, {in}, weight, weight.layer));
  }
  // RMSNorm over each head_dim-wide piece of every row of x, in place.
  void rms_norm_heads(Slot x, int64_t head_dim, WeightRef weight) {
    run(Op(Primitive::RmsNormHeads, x, Op::kNoSlots, weight, weight.layer, head_dim));
  }
  // Every product's out = in @ weight^T (one parallel loop for all of them where the executor can).
  void matmul(std::span<const Product> products, Slot in) {
    const WeightRef first = products.front().weight;
    run(Op(Primitive::Matmul, Slot::Count, {in}, first, first.layer, 0, products));
  }
  void copy(Slot out, Slot in) { run(Op(Primitive::Copy, out, {in})); }  // out = in
  void add(Slot x, Slot y) { run(Op(Primitive::Add, x, {y})); }           // x += y
  void add_bias(Slot x, WeightRef bias) { run(Op(Primitive::AddBias, x, Op::kNoSlots, bias, bias.layer)); }
  // g = act(g) * u (SiLU or GELU per the config).
  void gated_activation(Slot g, Slot u) { run(Op(Primitive::GatedActivation, g, {u})); }
  // RoPE of layer `layer` on x's n_heads heads, at each row's position.
  void rope(Slot x, int64_t n_heads, int64_t layer) {
    run(Op(Primitive::Rope, x, Op::kNoSlots, WeightRef{}, layer, n_heads));
  }
  // Attention of layer `layer` (its cache, masks, window and canvas are the executor's): out from q, k, v.
  void attention(Slot out, Slot q, Slot k, Slot v, int64_t layer) {
    run(Op(Primitive::Attention, out, {q, k, v}, WeightRef{}, layer));
  }
  // Mixture of experts of layer `layer`: each row of router_in routed to its top-k experts, which run on
  // that row of expert_in; out = the weighted sum in ascending expert order.
  void moe(Slot out, Slot router_in, Slot expert_in, int64_t layer) {
    run(Op(Primitive::Moe, out, {router_in, expert_in}, {TensorRole::Router, layer}, layer));
  }
  // Gemma 4's router input: RMSNorm(in) (no weight) * router_scale / sqrt(hidden).
  void router_input(Slot out, Slot in, int64_t layer) {
    run(Op(Primitive::RouterInput, out, {in}, WeightRef{}, layer));
  }
  // Gemma 4's layer end: x = (x + y) * the layer's scalar (the encoder's on encoder rows, the decoder's on
  // decoder rows).
  void scaled_residual(Slot x, Slot y, int64_t layer) {
    run(Op(Primitive::ScaledResidual, x, {y}, WeightRef{}, layer));
  }
  // head = the rows of x whose logits are wanted.
  void head_rows(Slot head, Slot x) { run(Op(Primitive::HeadRows, head, {x})); }
  // The logits of head's rows (head @ weight^T, soft-capped by config.logit_softcap), delivered where the
  // executor's caller wants them.
  void logits(Slot head, WeightRef weight) { run(Op(Primitive::Logits, Slot::Count, {head}, weight)); }
};

[[noreturn]] void unknown_primitive(const Op& op);  // run's error for a primitive it does not know

// An executor whose run calls Self's typed primitive methods (the CPU's, the tape's, the CUDA executor's),
// one per primitive with the typed calls' signatures; Self befriends this class to keep them private.
template <typename Self> class TypedExecutor : public Executor {
 public:
  void run(const Op& op) override {
    Self& self = static_cast<Self&>(*this);
    const Slot out = op.out, a = op.in[0];
    switch (op.primitive) {
      case Primitive::Embed: return self.embed(out);
      case Primitive::SelfConditioningInput: return self.self_conditioning_input(out);
      case Primitive::AddSelfConditioning: return self.add_self_conditioning(out, a);
      case Primitive::DecoderNorm: return self.decoder_norm(out);
      case Primitive::RmsNorm: return self.rms_norm(out, a, op.weight);
      case Primitive::RmsNormHeads: return self.rms_norm_heads(out, op.size, op.weight);
      case Primitive::Matmul: return self.matmul(op.products, a);
      case Primitive::Copy: return self.copy(out, a);
      case Primitive::Add: return self.add(out, a);
      case Primitive::AddBias: return self.add_bias(out, op.weight);
      case Primitive::GatedActivation: return self.gated_activation(out, a);
      case Primitive::Rope: return self.rope(out, op.size, op.layer);
      case Primitive::Attention: return self.attention(out, a, op.in[1], op.in[2], op.layer);
      case Primitive::Moe: return self.moe(out, a, op.in[1], op.layer);
      case Primitive::RouterInput: return self.router_input(out, a, op.layer);
      case Primitive::ScaledResidual: return self.scaled_residual(out, a, op.layer);
      case Primitive::HeadRows: return self.head_rows(out, a);
      case Primitive::Logits: return self.logits(a, op.weight);
      case Primitive::Count: break;
    }
    unknown_primitive(op);
  }
};

// Runs the model of `config` on the executor: the embedding and self-conditioning input (self_conditioned:
// some row of the pass takes one), every layer, the head.
void run_transformer(const ModelConfig& config, Executor& ex, bool self_conditioned);

}  // namespace canvas
