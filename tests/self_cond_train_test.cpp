// Self-conditioning for canvas's own uniform-state models: the training forward equals the inference
// forward with the same previous logits (and with zeros), its gradients against finite differences, a
// short two-pass run learns and decodes through the path, and resume refuses a changed setting.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <sstream>

#include "core/error.h"
#include "core/rng.h"
#include "decode/uniform_state.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "sudoku/sudoku_task.h"
#include "test_util.h"
#include "train_test_util.h"
#include "train/data.h"
#include "train/tape.h"
#include "train/train_model.h"
#include "train/trainer.h"

namespace canvas {
namespace {

// A config's default task is Sudoku's, which a program registers (as canvas does at start).
[[maybe_unused]] const bool kSudokuTaskRegistered = (register_sudoku_task(), true);

using train::Parameter;
using train::SelfConditioningInput;
using train::Tape;
using train::TokenBatch;
using train::TrainModel;
using train::Var;

ModelConfig self_cond_config() {
  ModelConfig c = test::tiny_llada_config(37, "self-conditioning test");
  c.uniform_state = true;
  c.self_conditioning = true;
  c.eos_token = 36;
  return c;
}

// Random and nudged, so the self-conditioning MLP (down starts at zero) is live.
TrainModel random_model(uint64_t seed) { return test::nudged_random_model(self_cond_config(), seed); }

// Two sequences of 7 tokens: bidirectional, and block-causal (blocks of 3).
TokenBatch two_sequences(int64_t vocab, uint64_t seed) {
  TokenBatch b;
  b.n_sequences = 2;
  b.length = 7;
  Rng rng(seed);
  for (int64_t i = 0; i < b.rows(); ++i) b.tokens.push_back(int32_t(rng.below(uint64_t(vocab))));
  for (int64_t s = 0; s < 2; ++s)
    for (int32_t t = 0; t < 7; ++t) b.groups.push_back(s == 0 ? 0 : t / 3);
  return b;
}

std::vector<float> random_logits(int64_t n, double std, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> z(static_cast<size_t>(n));
  for (float& v : z) v = float(rng.normal() * std);
  return z;
}

using test::inference_logits;

std::vector<float> rows_of(const Tape& tape, Var v, int64_t first, int64_t n) {
  const float* p = tape.value(v) + first * tape.cols(v);
  return std::vector<float>(p, p + n * tape.cols(v));
}

TEST(SelfCondTrainModel, ForwardEqualsInferenceWithLogitsAndWithZeros) {
  TrainModel tm = random_model(42);
  const ModelConfig& c = tm.config();
  test::TempDir dir;
  const std::string path = dir.path("self_cond.gguf");
  tm.save_gguf(path);
  const Model model = Model::load(path);
  ASSERT_TRUE(model.config.self_conditioning);
  ASSERT_NE(model.self_conditioning.down.data, nullptr);
  EXPECT_EQ(model.parameter_count(), tm.parameter_count());
  TrainModel back = TrainModel::from_gguf(path);  // reads the self-conditioning weights back exactly
  ASSERT_NE(back.find("self_cond.down.weight"), nullptr);
  EXPECT_EQ(back.find("self_cond.down.weight")->value, tm.find("self_cond.down.weight")->value);

  const TokenBatch batch = two_sequences(c.vocab, 7);
  const int64_t L = batch.length;
  const std::vector<float> z = random_logits(batch.rows() * c.vocab, 3.0, 8);
  ThreadPool pool(2);
  // Every row self-conditioned.
  {
    Tape tape(&pool);
    SelfConditioningInput input;
    input.logits = z.data();
    const Var logits = tm.forward(tape, batch, &input);
    for (int64_t s = 0; s < 2; ++s) {
      const std::vector<float> expect = inference_logits(model, batch, s, z.data() + s * L * c.vocab);
      EXPECT_LT(test::relative_error(rows_of(tape, logits, s * L, L), expect), 1e-5) << "sequence " << s;
      // The path is live: without it the logits differ.
      EXPECT_GT(test::relative_error(inference_logits(model, batch, s, nullptr), expect), 1e-3);
    }
  }
  // Sequence 0 with logits, sequence 1 with zeros (rows marked 0) = the inference forward with null.
  {
    Tape tape(&pool);
    SelfConditioningInput input;
    input.logits = z.data();
    input.rows.assign(size_t(batch.rows()), 0);
    for (int64_t r = 0; r < L; ++r) input.rows[size_t(r)] = 1;
    const Var logits = tm.forward(tape, batch, &input);
    EXPECT_LT(test::relative_error(rows_of(tape, logits, 0, L), inference_logits(model, batch, 0, z.data())),
              1e-5);
    EXPECT_LT(test::relative_error(rows_of(tape, logits, L, L), inference_logits(model, batch, 1, nullptr)),
              1e-5);
  }
  // No input at all: zeros everywhere.
  {
    Tape tape(&pool);
    const Var logits = tm.forward(tape, batch);
    for (int64_t s = 0; s < 2; ++s)
      EXPECT_LT(
          test::relative_error(rows_of(tape, logits, s * L, L), inference_logits(model, batch, s, nullptr)),
          1e-5);
  }
}

TEST(SelfCondTrainModel, ZeroInitialisedDownLeavesTheModelUnchanged) {
  train::InitOptions init;
  init.seed = 3;
  TrainModel tm(self_cond_config(), init);
  for (float v : tm.find("self_cond.down.weight")->value) ASSERT_EQ(v, 0.f);
  const TokenBatch batch = two_sequences(tm.config().vocab, 4);
  const std::vector<float> z = random_logits(batch.rows() * tm.config().vocab, 3.0, 5);
  SelfConditioningInput input;
  input.logits = z.data();
  Tape a, b;
  const Var with = tm.forward(a, batch, &input), without = tm.forward(b, batch);
  EXPECT_EQ(rows_of(a, with, 0, batch.rows()), rows_of(b, without, 0, batch.rows()));
}

// ---- gradients against central differences ------------------------------------------------------

using test::probe_sum;

// Checks d sum(graph() * probe) / d p against central differences for up to `samples` elements of each
// parameter (the largest-gradient element always among them), with tape_test.cpp's tolerance:
// |numeric - analytic| <= rtol * max(|numeric|, |analytic|) + rtol * max|analytic| / 4 + 1e-5.
void check_gradients(const std::vector<Parameter*>& params, const std::function<Var(Tape&)>& graph,
                     int samples = 60, double eps = 1e-3, double rtol = 1e-2) {
  std::vector<float> probe;
  auto loss = [&]() {
    Tape tape;
    tape.set_grad_enabled(false);
    const Var out = graph(tape);
    double s = 0;
    for (int64_t i = 0; i < tape.size(out); ++i) s += double(tape.value(out)[i]) * probe[size_t(i)];
    return s;
  };
  Tape tape;
  const Var out = graph(tape);
  Rng rng(99);
  probe.resize(size_t(tape.size(out)));
  for (float& v : probe) v = float(rng.normal());
  for (Parameter* p : params) p->zero_grad();
  tape.backward(probe_sum(tape, out, probe));
  for (Parameter* p : params) {
    ASSERT_EQ(p->grad.size(), p->value.size()) << p->name << " got no gradient";
    double largest = 0;
    size_t at_largest = 0;
    for (size_t i = 0; i < p->grad.size(); ++i)
      if (std::fabs(p->grad[i]) > largest) largest = std::fabs(p->grad[i]), at_largest = i;
    ASSERT_GT(largest, 0) << p->name << " has an all-zero gradient";
    std::vector<size_t> picks{at_largest};
    for (int k = 1; k < samples; ++k) picks.push_back(size_t(rng.below(p->value.size())));
    for (size_t i : picks) {
      const float keep = p->value[i];
      p->value[i] = keep + float(eps);
      const double up = loss();
      p->value[i] = keep - float(eps);
      const double down = loss();
      p->value[i] = keep;
      const double numeric = (up - down) / (2 * eps), analytic = p->grad[i];
      const double tolerance =
          rtol * std::max(std::fabs(numeric), std::fabs(analytic)) + rtol * largest / 4 + 1e-5;
      EXPECT_LE(std::fabs(numeric - analytic), tolerance)
          << p->name << "[" << i << "]: numeric " << numeric << ", analytic " << analytic;
    }
  }
}

TEST(SelfCondGradients, SoftEmbeddingMatchesFiniteDifferences) {
  Rng rng(11);
  Parameter table("table", {6, 9});  // 9 rows of width 6
  for (float& v : table.value) v = float(rng.normal());
  std::vector<float> mix(4 * 9);
  for (float& v : mix) v = float(rng.uniform());
  check_gradients({&table}, [&](Tape& tape) {
    return train::soft_embedding(tape, tape.input(4, 9, mix.data()), table, 1.7f);
  });
  // The gradient of the mixture weights themselves (e.g. for a caller that does not hold them fixed).
  Tape tape;
  const Var w = tape.input(4, 9, mix.data(), /*requires_grad=*/true);
  const Var y = train::soft_embedding(tape, w, table, 1.7f);
  std::vector<float> probe(size_t(tape.size(y)));
  for (float& v : probe) v = float(rng.normal());
  tape.backward(probe_sum(tape, y, probe));
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t v = 0; v < 9; ++v) {
      double expect = 0;  // d/dw[r, v] of sum_j probe[r, j] * 1.7 * sum_u w[r, u] T[u, j]
      for (int64_t j = 0; j < 6; ++j)
        expect += probe[size_t(r * 6 + j)] * 1.7 * table.value[size_t(v * 6 + j)];
      EXPECT_NEAR(tape.grad(w)[r * 9 + v], expect, 1e-4);
    }
}

TEST(SelfCondGradients, SelfConditionedForwardMatchesFiniteDifferences) {
  TrainModel tm = random_model(21);
  const TokenBatch batch = two_sequences(tm.config().vocab, 22);
  const std::vector<float> z = random_logits(batch.rows() * tm.config().vocab, 2.0, 23);
  SelfConditioningInput input;
  input.logits = z.data();
  input.rows.assign(size_t(batch.rows()), 1);
  input.rows[3] = input.rows[9] = 0;  // some rows with zeros
  std::vector<Parameter*> params;
  for (const char* name : {"token_embd.weight", "self_cond.norm.weight", "self_cond.gate.weight",
                           "self_cond.up.weight", "self_cond.down.weight"})
    params.push_back(tm.find(name));
  check_gradients(params, [&](Tape& tape) { return tm.forward(tape, batch, &input); });
}

// ---- a short run ------------------------------------------------------------------------------

const char* kTinyRun = R"(task = sudoku
objective = uniform
block_length = 9
layers = 2
hidden = 32
heads = 2
kv_heads = 2
ffn = 64
eval_examples = 16
batch_size = 8
steps = 30
lr = 3e-3
warmup = 3
eval_every = 30
checkpoint_every = 10
threads = 2
)";

std::vector<float> losses(const std::string& csv) {
  std::istringstream in(test::read_text(csv));
  std::string line;
  std::getline(in, line);  // header
  std::vector<float> out;
  while (std::getline(in, line)) {
    const size_t a = line.find(',') + 1, b = line.find(',', a) + 1;
    out.push_back(std::stof(line.substr(b, line.find(',', b) - b)));
  }
  return out;
}

TEST(SelfCondTrain, ShortRunLowersTheLossAndDecodesThroughThePath) {
  test::TempDir dir;
  const train::RunConfig r =
      train::parse_run_config(std::string(kTinyRun) + "self_conditioning = true\n", "tiny");
  train::run_training(r, dir.path("run"), nullptr);
  const std::vector<float> loss = losses(dir.path("run/train.csv"));
  ASSERT_EQ(loss.size(), 30u);
  EXPECT_LT(loss[27] + loss[28] + loss[29], 0.8f * (loss[0] + loss[1] + loss[2]));

  const Model model = Model::load(dir.path("run/model.gguf"));
  ASSERT_TRUE(model.config.self_conditioning);
  ASSERT_TRUE(model.config.uniform_state);
  // Self-conditioning logits change the canvas's logits: the trained path is live.
  UniformStateSession session(model, 32, nullptr);
  session.encode({'1', '2', '3', '4'});
  const std::vector<int32_t> canvas = {'5', '6', '7', '8', '9', '1', '2', '3', '4'};
  std::vector<float> plain, conditioned, again;
  session.decode(canvas, nullptr, plain);
  const std::vector<float> z = random_logits(int64_t(plain.size()), 3.0, 31);
  session.decode(canvas, &z, conditioned);
  session.decode(canvas, &z, again);
  EXPECT_GT(test::relative_error(conditioned, plain), 1e-4);
  EXPECT_EQ(conditioned, again);
  const std::vector<float> wrong_size(10);
  EXPECT_THROW(session.decode(canvas, &wrong_size, plain), Error);
  // The sampler runs through it (it hands every step after the first the previous logits).
  EntropyBoundParams p;
  p.canvas_length = 9;
  p.max_new_tokens = 18;
  p.max_denoising_steps = 4;
  p.eos_ids = {};
  ThreadPool pool(2);
  const EntropyBoundResult out = generate_uniform_state(model, {'1', '2', '3'}, p, &pool);
  EXPECT_EQ(int64_t(out.tokens.size()), 18);
  EXPECT_GT(out.passes, 2);
  ThreadPool one(1);
  EXPECT_EQ(generate_uniform_state(model, {'1', '2', '3'}, p, &one).tokens, out.tokens);  // any thread count
}

TEST(SelfCondTrain, ResumeRefusesAChangedSelfConditioningSetting) {
  test::TempDir dir;
  const std::string base = test::with_settings(kTinyRun, "steps = 2\n");
  train::run_training(train::parse_run_config(base, "tiny"), dir.path("run"), nullptr);
  try {
    train::run_training(train::parse_run_config(base + "self_conditioning = true\n", "tiny"), dir.path("run"),
                        nullptr);
    FAIL() << "resumed a checkpoint made without self-conditioning";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("different configuration"), std::string::npos) << e.what();
  }
  // The same setting resumes (here: finds the run finished).
  EXPECT_NO_THROW(train::run_training(train::parse_run_config(base, "tiny"), dir.path("run"), nullptr));
}

TEST(SelfCondTrain, ConfigKeyNeedsTheUniformObjective) {
  EXPECT_FALSE(train::parse_run_config("objective = uniform\n", "x.cfg").self_conditioning);
  EXPECT_TRUE(
      train::parse_run_config("objective = uniform\nself_conditioning = true\n", "x.cfg").self_conditioning);
  EXPECT_THROW(train::parse_run_config("objective = masked\nself_conditioning = true\n", "x.cfg"), Error);
  EXPECT_THROW(train::parse_run_config("objective = uniform\nself_conditioning = yes\n", "x.cfg"), Error);
}

}  // namespace
}  // namespace canvas
