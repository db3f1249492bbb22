// The training forward of every architecture canvas runs equals the inference forward (llama, llada,
// dream, llada-moe, gemma4, diffusion-gemma: encoder, decoder and self-conditioned decoder), at every
// SIMD level; export round trips; whole-model gradients of a Gemma 4 layer stack against central
// differences of a double-accumulated loss; what the trainer cannot express is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/error.h"
#include "core/rng.h"
#include "io/npy.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "ops/matmul.h"
#include "ops/ops.h"
#include "test_util.h"
#include "train/tape.h"
#include "train/train_model.h"
#include "train_test_util.h"

namespace canvas::train {
namespace {

const std::string kGemmaDir = "tiny-diffusion-gemma";

// Every SIMD level this machine runs, forced for both the ops and the matmul kernels.
std::vector<SimdLevel> levels() {
  std::vector<SimdLevel> out;
  for (SimdLevel l : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512})
    if (int(l) <= int(simd_level())) out.push_back(l);
  return out;
}
struct ForcedLevel {
  explicit ForcedLevel(SimdLevel l) {
    set_ops_simd_level(l);
    set_matmul_simd_level(l);
  }
  ~ForcedLevel() {
    reset_ops_simd_level();
    reset_matmul_simd_level();
  }
};

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(int32_t(rng.below(uint64_t(vocab))));
  return t;
}

std::vector<float> rows_of(const Tape& tape, Var v, int64_t first, int64_t n) {
  const float* p = tape.value(v) + first * tape.cols(v);
  return std::vector<float>(p, p + n * tape.cols(v));
}

// Inference: an encoder pass over `prefix` (causal groups), returning its logits; then, when `canvas` is
// not empty, a decoder pass over it (optionally self-conditioned), returning those logits in `decoder`.
std::vector<float> inference(const Model& model, const std::vector<int32_t>& prefix,
                             const std::vector<int32_t>& canvas = {}, std::vector<float>* decoder = nullptr,
                             const float* self_cond = nullptr) {
  const int64_t V = model.config.vocab, P = int64_t(prefix.size()), C = int64_t(canvas.size());
  KvCache cache(model.config, P + C + 1);
  std::vector<int32_t> groups(prefix.size());
  for (size_t i = 0; i < groups.size(); ++i) groups[i] = int32_t(i);
  ForwardRequest req;
  req.tokens = prefix.data();
  req.n = P;
  req.groups = groups.data();
  for (int32_t i = 0; i < int32_t(P); ++i) req.logit_rows.push_back(i);
  std::vector<float> logits(size_t(P * V));
  req.logits = logits.data();
  forward(model, cache, req, nullptr);
  if (!canvas.empty()) {
    ForwardRequest d;
    d.tokens = canvas.data();
    d.n = C;
    d.pos0 = P;
    d.decoder = true;
    d.self_cond = self_cond;
    for (int32_t i = 0; i < int32_t(C); ++i) d.logit_rows.push_back(i);
    decoder->assign(size_t(C * V), 0.f);
    d.logits = decoder->data();
    forward(model, cache, d, nullptr);
  }
  return logits;
}

// One training sequence holding both views: the prefix causal (encoder rows), then the canvas as one
// visibility group after it (decoder rows), as uniform_state_batch lays them out.
TokenBatch two_views(const std::vector<int32_t>& prefix, const std::vector<int32_t>& canvas) {
  TokenBatch b;
  b.n_sequences = 1;
  b.length = int64_t(prefix.size() + canvas.size());
  b.tokens = prefix;
  b.tokens.insert(b.tokens.end(), canvas.begin(), canvas.end());
  for (size_t i = 0; i < prefix.size(); ++i) {
    b.groups.push_back(int32_t(i));
    b.decoder.push_back(0);
  }
  for (size_t i = 0; i < canvas.size(); ++i) {
    b.groups.push_back(int32_t(prefix.size()));
    b.decoder.push_back(1);
  }
  return b;
}

// Checks the training forward of `tm` against the inference forward of `model` on encoder rows and,
// for a model with a decoder, decoder rows with and without self-conditioning, at every SIMD level.
void expect_same_function(TrainModel& tm, const Model& model, const std::string& what) {
  const ModelConfig& c = model.config;
  const int64_t V = c.vocab;
  const std::vector<int32_t> prefix = random_tokens(13, V, 3), canvas = random_tokens(6, V, 4);
  for (SimdLevel level : levels()) {
    ForcedLevel forced(level);
    const std::string where = what + " at " + simd_level_name(level);
    ThreadPool pool(2);
    if (!c.has_decoder) {
      // Causal, and bidirectional (all groups 0) when the model's attention allows either.
      for (bool causal : {true, false}) {
        TokenBatch b;
        b.n_sequences = 1;
        b.length = int64_t(prefix.size());
        b.tokens = prefix;
        for (size_t i = 0; i < prefix.size(); ++i) b.groups.push_back(causal ? int32_t(i) : 0);
        Tape tape(&pool);
        const Var logits = tm.forward(tape, b);
        const std::vector<float> expect = test::inference_logits(model, b, 0);
        EXPECT_LT(test::relative_error(rows_of(tape, logits, 0, b.length), expect), 1e-5)
            << where << (causal ? " causal" : " bidirectional");
      }
      continue;
    }
    const TokenBatch b = two_views(prefix, canvas);
    const int64_t P = int64_t(prefix.size()), C = int64_t(canvas.size());
    std::vector<float> decoder;
    const std::vector<float> encoder = inference(model, prefix, canvas, &decoder);
    {
      Tape tape(&pool);
      const Var logits = tm.forward(tape, b);
      EXPECT_LT(test::relative_error(rows_of(tape, logits, 0, P), encoder), 1e-5) << where << " encoder";
      EXPECT_LT(test::relative_error(rows_of(tape, logits, P, C), decoder), 1e-5) << where << " decoder";
    }
    // Self-conditioned decoder: the previous step's logits on the canvas rows.
    Rng rng(11);
    std::vector<float> previous(size_t((P + C) * V), 0.f);
    for (int64_t i = P * V; i < (P + C) * V; ++i) previous[size_t(i)] = float(rng.normal() * 3.0);
    std::vector<float> decoder_sc;
    inference(model, prefix, canvas, &decoder_sc, previous.data() + P * V);
    EXPECT_GT(test::relative_error(decoder_sc, decoder), 1e-4) << where << ": self-conditioning changes nothing";
    {
      Tape tape(&pool);
      SelfConditioningInput input;
      input.logits = previous.data();
      const Var logits = tm.forward(tape, b, &input);
      EXPECT_LT(test::relative_error(rows_of(tape, logits, 0, P), encoder), 1e-5) << where << " encoder (sc)";
      EXPECT_LT(test::relative_error(rows_of(tape, logits, P, C), decoder_sc), 1e-5)
          << where << " self-conditioned decoder";
    }
  }
}

// A Gemma 4 configuration from the fixture's config.json: DiffusionGemma, or the AR gemma4 stack.
ModelConfig gemma_config(bool diffusion) {
  ModelConfig c = config_from_hf(test::fixture(kGemmaDir + "/config.json"));
  if (!diffusion) {
    c.arch = "gemma4";
    c.has_decoder = false;
    c.uniform_state = false;
    c.causal = true;
    c.shift_logits = true;
  }
  c.name = "train forward test";
  c.context_length = 64;
  return c;
}

TEST(TrainForward, DiffusionGemmaCheckpointEqualsInference) {
  const Model model = Model::load(test::fixture(kGemmaDir));
  TrainModel tm = TrainModel::from_file(test::fixture(kGemmaDir));
  EXPECT_EQ(tm.parameter_count(), model.parameter_count());
  expect_same_function(tm, model, "diffusion-gemma checkpoint");
}

// Random weights (layer scalars, router and expert scales included) through export and Model::load.
TEST(TrainForward, EveryArchitectureEqualsInferenceAfterExport) {
  struct Case {
    std::string name;
    ModelConfig config;
  };
  std::vector<Case> cases;
  auto llama_family = [](const std::string& arch, bool moe) {
    ModelConfig c = test::tiny_llada_config(37, "train forward " + arch);
    c.arch = arch;
    c.rope.layout = arch == "llada" || arch == "llama" ? RopeLayout::Normal : RopeLayout::Neox;
    c.causal = arch == "llama";
    c.shift_logits = arch == "llama" || arch == "dream";
    c.qkv_bias = arch == "dream";
    if (moe) {
      c.ffn = 0;
      c.n_experts = 4;
      c.n_experts_used = 2;
      c.expert_ffn = 16;
      c.expert_weights_norm = true;
    }
    return c;
  };
  cases.push_back({"llama", llama_family("llama", false)});
  cases.push_back({"llada", llama_family("llada", false)});
  cases.push_back({"dream", llama_family("dream", false)});
  cases.push_back({"llada-moe", llama_family("llada-moe", true)});
  cases.push_back({"gemma4", gemma_config(false)});
  cases.push_back({"diffusion-gemma", gemma_config(true)});
  for (const Case& k : cases) {
    TrainModel tm = test::nudged_random_model(k.config, 17);
    test::TempDir dir;
    const std::string path = dir.path(k.name + ".gguf");
    tm.save_gguf(path);
    const Model model = Model::load(path);
    EXPECT_EQ(model.config.arch, k.config.arch);
    EXPECT_EQ(model.parameter_count(), tm.parameter_count() + (k.config.layer_style == LayerStyle::Gemma4 ? 16 : 0))
        << k.name << " (Gemma 4 adds the generated rope_freqs)";
    expect_same_function(tm, model, k.name);
    // The export reads back exactly.
    TrainModel back = TrainModel::from_file(path);
    std::vector<Parameter*> a = tm.parameters(), b = back.parameters();
    ASSERT_EQ(a.size(), b.size()) << k.name;
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i]->value, b[i]->value) << k.name << " " << a[i]->name;
  }
}

// The equality above can fail: a decoder row that gets the encoder's layer scalars, or a window one
// position off, changes the logits.
TEST(TrainForward, DecoderViewMatters) {
  const Model model = Model::load(test::fixture(kGemmaDir));
  TrainModel tm = TrainModel::from_file(test::fixture(kGemmaDir));
  const std::vector<int32_t> prefix = random_tokens(13, 300, 3), canvas = random_tokens(6, 300, 4);
  std::vector<float> decoder;
  inference(model, prefix, canvas, &decoder);
  TokenBatch b = two_views(prefix, canvas);
  std::fill(b.decoder.begin(), b.decoder.end(), 0);  // the canvas read as encoder rows
  Tape tape;
  const Var logits = tm.forward(tape, b);
  EXPECT_GT(test::relative_error(rows_of(tape, logits, 13, 6), decoder), 1e-3);
}

TEST(TrainForward, RefusesWhatItCannotExpress) {
  ModelConfig c = gemma_config(true);
  c.tied_output = false;
  EXPECT_THROW(TrainModel(c, InitOptions{}), Error);
  ModelConfig d = test::tiny_llada_config(37, "x");
  d.qk_norm = true;  // q/k norms exist only in the Gemma 4 layer
  EXPECT_THROW(TrainModel(d, InitOptions{}), Error);
  ModelConfig e = gemma_config(false);
  TrainModel tm(e, InitOptions{});
  TokenBatch b = two_views(random_tokens(3, 300, 1), random_tokens(2, 300, 2));  // decoder rows, no decoder
  Tape tape;
  EXPECT_THROW(tm.forward(tape, b), Error);
  // A Gemma 4 stack whose sliding layers differ in width cannot be written as a GGUF.
  ModelConfig f = gemma_config(true);
  f.layer_attention[1].head_dim = 8;
  f.layer_attention[1].rope.head_dim = 8;
  f.layer_attention[1].rope.rot_dims = 8;
  TrainModel odd(f, InitOptions{});
  test::TempDir dir;
  EXPECT_THROW(odd.save_gguf(dir.path("odd.gguf")), Error);
}

// The same through the command line: `canvas logits` on the exported GGUF (encoder rows, decoder rows,
// self-conditioned decoder rows) against the training forward of the model that wrote it.
TEST(TrainForwardCli, DiffusionGemmaEqualsCanvasLogits) {
  TrainModel tm = test::nudged_random_model(gemma_config(true), 29);
  test::TempDir dir;
  const std::string path = dir.path("dg.gguf");
  tm.save_gguf(path);
  const int64_t V = tm.config().vocab;
  const std::vector<int32_t> prefix = random_tokens(12, V, 7), canvas = random_tokens(5, V, 8);
  auto list = [](const std::vector<int32_t>& ids) {
    std::string s;
    for (int32_t id : ids) s += (s.empty() ? "" : ",") + std::to_string(id);
    return s;
  };
  const TokenBatch b = two_views(prefix, canvas);
  const int64_t P = int64_t(prefix.size()), C = int64_t(canvas.size());
  Rng rng(12);
  std::vector<float> previous(size_t((P + C) * V), 0.f);
  for (int64_t i = P * V; i < (P + C) * V; ++i) previous[size_t(i)] = float(rng.normal() * 3.0);
  write_npy(dir.path("prev.npy"), previous.data() + P * V, {C, V});
  for (bool self_cond : {false, true}) {
    Tape tape;
    SelfConditioningInput input;
    input.logits = previous.data();
    const Var logits = tm.forward(tape, b, self_cond ? &input : nullptr);
    const std::string base = "logits -m " + path + " --ids " + list(prefix) + " -t 2 --out ";
    auto run = [&](const std::string& extra, const std::string& out) {
      const auto r = test::run_canvas(base + dir.path(out) + " " + extra);
      EXPECT_EQ(r.exit_code, 0) << r.output;
      return read_npy(dir.path(out)).data;
    };
    EXPECT_LT(test::relative_error(rows_of(tape, logits, 0, P), run("", "encoder.npy")), 1e-5);
    const std::string decoder_flags =
        "--canvas-ids " + list(canvas) + (self_cond ? " --self-cond " + dir.path("prev.npy") : "");
    EXPECT_LT(test::relative_error(rows_of(tape, logits, P, C), run(decoder_flags, "decoder.npy")), 1e-5)
        << (self_cond ? "self-conditioned decoder" : "decoder");
  }
}

// ---- whole-model gradients -------------------------------------------------------------------------

// d sum(logits * probe) / d parameter against central differences of the same sum accumulated in
// double, on a sample of every parameter's elements: covers sliding and full layers, q/k/v norms,
// proportional RoPE, attention_k_eq_v, MoE top-k with the dense branch and router / expert scales,
// layer scalars of both views, the self-conditioning MLP and the logit soft-cap.
TEST(TrainForwardGradients, DiffusionGemmaMatchesCentralDifferences) {
  ModelConfig c = gemma_config(true);
  c.vocab = 40;
  c.hidden = 16;
  c.ffn = 12;
  c.expert_ffn = 8;
  c.n_experts = 4;
  c.n_experts_used = 2;
  c.n_layers = 2;
  c.layer_attention.erase(c.layer_attention.begin() + 1, c.layer_attention.end() - 1);  // sliding, full
  c.sliding_window = 4;
  c.logit_softcap = 5.f;
  c.embedding_scale = 4.f;
  TrainModel tm = test::nudged_random_model(c, 23);
  for (Parameter* p : tm.parameters())
    if (p->shape == std::vector<int64_t>{1}) p->value[0] = 0.7f + 0.1f * float(p->name.size() % 3);
  const std::vector<int32_t> prefix = random_tokens(7, c.vocab, 5), canvas = random_tokens(4, c.vocab, 6);
  const TokenBatch b = two_views(prefix, canvas);
  Rng rng(9);
  std::vector<float> previous(size_t(b.rows() * c.vocab)), probe(size_t(b.rows() * c.vocab));
  for (float& v : previous) v = float(rng.normal());
  for (float& v : probe) v = float(rng.normal());
  SelfConditioningInput input;
  input.logits = previous.data();
  auto loss = [&](bool backward) {
    Tape tape;
    tape.set_grad_enabled(backward);
    const Var logits = tm.forward(tape, b, &input);
    double s = 0;
    for (int64_t i = 0; i < tape.size(logits); ++i) s += double(tape.value(logits)[i]) * probe[size_t(i)];
    if (backward) tape.backward(test::probe_sum(tape, logits, probe));
    return s;
  };
  tm.zero_grad();
  loss(true);
  int checked = 0, failed = 0;
  for (Parameter* p : tm.parameters()) {
    ASSERT_EQ(p->grad.size(), p->value.size()) << p->name << " got no gradient";
    double largest = 0;
    for (float g : p->grad) largest = std::max(largest, std::fabs(double(g)));
    for (int64_t k = 0; k < std::min<int64_t>(p->size(), 4); ++k) {
      const size_t i = size_t((k * 7919) % p->size());
      const float saved = p->value[i];
      // Two step sizes; the closer one counts (a step can move a row across a top-k routing boundary,
      // where the loss is not differentiable, and f32 rounding of the loss dominates tiny steps).
      double numeric = 0, best = 1e30;
      const double analytic = p->grad[i];
      for (double step : {1e-3, 3e-3}) {
        const double eps = step * std::max(1.0, std::fabs(double(saved)));
        p->value[i] = float(saved + eps);
        const double up = loss(false);
        p->value[i] = float(saved - eps);
        const double down = loss(false);
        p->value[i] = saved;
        const double estimate = (up - down) / (2 * eps);
        if (std::fabs(estimate - analytic) < best) {
          best = std::fabs(estimate - analytic);
          numeric = estimate;
        }
      }
      const double tolerance = 2e-2 * std::max(std::fabs(numeric), std::fabs(analytic)) + 2e-3 * largest + 5e-3;
      ++checked;
      if (std::fabs(numeric - analytic) > tolerance) {
        ++failed;
        ADD_FAILURE() << p->name << "[" << i << "]: analytic " << analytic << ", numeric " << numeric;
      }
    }
  }
  EXPECT_GT(checked, 100);
  EXPECT_EQ(failed, 0);
}

}  // namespace
}  // namespace canvas::train
