// The one definition of canvas's transformers (model/transformer.h): the input, the pre-norm layer (llama,
// LLaDA, Dream, LLaDA-MoE), the Gemma 4 layer (DiffusionGemma, Gemma 4) and the head, as primitives.
#include "model/transformer.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace canvas {
namespace {

using R = TensorRole;

WeightRef global(R role) { return {role, -1}; }

// out = down(act(gate(in)) * up(in)).
void gated_mlp(Executor& ex, Slot out, Slot in, WeightRef gate, WeightRef up, WeightRef down) {
  const Product gate_up[] = {{Slot::G, gate}, {Slot::U, up}};
  ex.matmul(gate_up, in);
  ex.gated_activation(Slot::G, Slot::U);
  const Product projection[] = {{out, down}};
  ex.matmul(projection, Slot::G);
}

// Token embeddings (scaled), learned positions, and the self-conditioning input: X's rows that take one
// get mlp(norm(softmax(previous logits) @ E * scale)); DiffusionGemma's decoder rows are then normed.
void input(const ModelConfig& c, Executor& ex, bool self_conditioned) {
  ex.embed(Slot::X);
  if (self_conditioned) {
    ex.self_conditioning_input(Slot::Soft);
    ex.rms_norm(Slot::Soft, Slot::Soft, global(R::SelfCondNorm));
    gated_mlp(ex, Slot::SoftMlp, Slot::Soft, global(R::SelfCondGate), global(R::SelfCondUp), global(R::SelfCondDown));
    ex.add_self_conditioning(Slot::X, Slot::SoftMlp);
  }
  if (c.has_decoder) ex.decoder_norm(Slot::X);
}

// Attention sublayer: attn_norm, Q/K/V (biases, q/k norms per head, Gemma's weightless v norm, V as K's raw
// product on K = V layers), RoPE, attention, the output projection into Proj.
void attention_block(const ModelConfig& c, Executor& ex, int64_t l) {
  const LayerAttention la = c.attention_of(l);
  ex.rms_norm(Slot::H, Slot::X, {R::AttnNorm, l});
  const Product qkv[] = {{Slot::Q, {R::Wq, l}}, {Slot::K, {R::Wk, l}}, {Slot::V, {R::Wv, l}}};
  ex.matmul(std::span<const Product>(qkv, la.value_from_key ? 2 : 3), Slot::H);
  if (la.value_from_key) ex.copy(Slot::V, Slot::K);
  if (c.qkv_bias) {
    ex.add_bias(Slot::Q, {R::Bq, l});
    ex.add_bias(Slot::K, {R::Bk, l});
    ex.add_bias(Slot::V, {R::Bv, l});
  }
  if (c.qk_norm) {
    ex.rms_norm_heads(Slot::Q, la.head_dim, {R::QNorm, l});
    ex.rms_norm_heads(Slot::K, la.head_dim, {R::KNorm, l});
  }
  if (c.v_norm) ex.rms_norm_heads(Slot::V, la.head_dim, {});
  ex.rope(Slot::Q, c.n_heads, l);
  ex.rope(Slot::K, la.n_kv_heads, l);
  ex.attention(Slot::Attn, Slot::Q, Slot::K, Slot::V, l);
  const Product output[] = {{Slot::Proj, {R::Wo, l}}};
  ex.matmul(output, Slot::Attn);
}

// The pre-norm layer's feed-forward: x += attention; x += mlp(ffn_norm(x)) (dense, or the experts).
void pre_norm_feed_forward(const ModelConfig& c, Executor& ex, int64_t l) {
  ex.add(Slot::X, Slot::Proj);
  ex.rms_norm(Slot::H, Slot::X, {R::FfnNorm, l});
  if (c.is_moe()) {
    ex.moe(Slot::Proj, Slot::H, Slot::H, l);
  } else {
    gated_mlp(ex, Slot::Proj, Slot::H, {R::Gate, l}, {R::Up, l}, {R::Down, l});
  }
  ex.add(Slot::X, Slot::Proj);
}

// The Gemma 4 layer after attention (diffusiongemma.md section 2):
//   h = x + post_attn_norm(a); m1 = post_ffn_norm_1(dense(pre_ffn_norm(h)));
//   m2 = post_ffn_norm_2(experts(pre_ffn_norm_2(h), router(h)));  out = (h + post_ffn_norm(m1 + m2)) * scalar
void gemma4_feed_forward(const ModelConfig& c, Executor& ex, int64_t l) {
  ex.rms_norm(Slot::Proj, Slot::Proj, {R::PostAttnNorm, l});
  ex.add(Slot::X, Slot::Proj);
  ex.rms_norm(Slot::H, Slot::X, {R::FfnNorm, l});
  gated_mlp(ex, Slot::Proj, Slot::H, {R::Gate, l}, {R::Up, l}, {R::Down, l});
  if (c.dense_and_moe) {
    ex.rms_norm(Slot::Proj, Slot::Proj, {R::PostFfnNorm1, l});
    ex.router_input(Slot::Router, Slot::X, l);
    ex.rms_norm(Slot::H, Slot::X, {R::PreFfnNorm2, l});
    ex.moe(Slot::Experts, Slot::Router, Slot::H, l);
    ex.rms_norm(Slot::Experts, Slot::Experts, {R::PostFfnNorm2, l});
    ex.add(Slot::Proj, Slot::Experts);
  }
  ex.rms_norm(Slot::Proj, Slot::Proj, {R::PostFfnNorm, l});
  ex.scaled_residual(Slot::X, Slot::Proj, l);
}

}  // namespace

const PrimitiveInfo& primitive_info(Primitive p) {
  using W = WeightUse;
  // name, in[0 .. reads) read, out read, out written, the weight.
  static const PrimitiveInfo table[kPrimitives + 1] = {
      {"embed", 0, false, true, W::None},
      {"self_conditioning_input", 0, false, true, W::None},
      {"add_self_conditioning", 1, true, true, W::None},
      {"decoder_norm", 0, true, true, W::None},
      {"rms_norm", 1, false, true, W::Vector},
      {"rms_norm_heads", 0, true, true, W::Vector},
      {"matmul", 1, false, false, W::Matrix},
      {"copy", 1, false, true, W::None},
      {"add", 1, true, true, W::None},
      {"add_bias", 0, true, true, W::Vector},
      {"gated_activation", 1, true, true, W::None},
      {"rope", 0, true, true, W::None},
      {"attention", 3, false, true, W::None},
      {"moe", 2, false, true, W::Layer},
      {"router_input", 1, false, true, W::Layer},
      {"scaled_residual", 1, true, true, W::Layer},
      {"head_rows", 1, false, true, W::None},
      {"logits", 1, false, false, W::Matrix},
      {"?", 0, false, false, W::None},
  };
  return table[std::min(int(p), kPrimitives)];
}

void unknown_primitive(const Op& op) {
  throw Error("executor: no primitive " + std::to_string(int(op.primitive)));
}

void run_transformer(const ModelConfig& c, Executor& ex, bool self_conditioned) {
  input(c, ex, self_conditioned);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    attention_block(c, ex, l);
    if (c.layer_style == LayerStyle::Gemma4) {
      gemma4_feed_forward(c, ex, l);
    } else {
      pre_norm_feed_forward(c, ex, l);
    }
  }
  ex.head_rows(Slot::Head, Slot::X);
  ex.rms_norm(Slot::Head, Slot::Head, global(R::OutputNorm));
  ex.logits(Slot::Head, global(c.tied_output ? R::TokenEmbd : R::Output));
}

}  // namespace canvas
