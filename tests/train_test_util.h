// Helpers shared by the training tests: a tiny llada-family config, randomly nudged models, and the
// probe scalar the gradient checks differentiate.
#pragma once
#include <string>
#include <vector>

#include "core/rng.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "train/tape.h"
#include "train/train_model.h"

namespace canvas::test {

// hidden 32, 2 layers, 4 heads over 2 KV heads of 8, ffn 48, context 64, RoPE (normal layout).
inline ModelConfig tiny_llada_config(int64_t vocab, const std::string& name) {
  ModelConfig c;
  c.arch = "llada";
  c.name = name;
  c.vocab = vocab;
  c.hidden = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.ffn = 48;
  c.context_length = 64;
  c.rope.layout = RopeLayout::Normal;
  c.rope.head_dim = 8;
  c.rope.rot_dims = 8;
  c.rope.theta = 10000.f;
  return c;
}

// Random init, then every value nudged (norms, biases and zero-initialised matrices included) so no
// parameter is trivially 1 or 0.
inline train::TrainModel nudged_random_model(const ModelConfig& c, uint64_t seed) {
  train::InitOptions init;
  init.seed = seed;
  init.std = 0.25f;
  train::TrainModel m(c, init);
  Rng rng(seed + 1);
  for (train::Parameter* p : m.parameters())
    for (float& v : p->value) v += float(0.1 * rng.normal());
  return m;
}

// sum(out * probe) in double, recorded on the tape like any op, so backward seeds dOut = probe.
inline train::Var probe_sum(train::Tape& tape, train::Var x, const std::vector<float>& probe) {
  train::Var y = tape.make(1, 1, tape.requires_grad(x));
  double s = 0;
  for (int64_t i = 0; i < tape.size(x); ++i) s += double(tape.value(x)[i]) * probe[size_t(i)];
  tape.value(y)[0] = float(s);
  tape.record([&tape, x, y, probe] {
    const float g = tape.grad_or_null(y)[0];
    float* dx = tape.grad(x);
    for (int64_t i = 0; i < tape.size(x); ++i) dx[i] += g * probe[size_t(i)];
  });
  return y;
}

// Logits [length x vocab] of sequence s of the batch through the inference forward (one call with all
// its tokens and visibility groups), with optional self-conditioning logits [length x vocab].
inline std::vector<float> inference_logits(const Model& model, const train::TokenBatch& b, int64_t s,
                                           const float* self_cond = nullptr) {
  KvCache cache(model.config, b.length);
  ForwardRequest req;
  req.tokens = b.tokens.data() + s * b.length;
  req.n = b.length;
  req.groups = b.groups.data() + s * b.length;
  for (int32_t i = 0; i < int32_t(b.length); ++i) req.logit_rows.push_back(i);
  std::vector<float> logits(size_t(b.length * model.config.vocab));
  req.logits = logits.data();
  req.self_cond = self_cond;
  forward(model, cache, req, nullptr);
  return logits;
}

}  // namespace canvas::test
