// Uniform-state block diffusion: the training batch's layout and loss weights, its two views equal the
// inference encoder and decoder passes, and decoding through the KV cache equals recomputation.
#include <gtest/gtest.h>

#include <limits>
#include <set>

#include "core/rng.h"
#include "decode/uniform_state.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "test_util.h"
#include "train_test_util.h"
#include "train/data.h"
#include "train/objectives.h"
#include "train/train_model.h"

namespace canvas {
namespace {

using train::Example;
using train::ObjectiveBatch;
using train::UniformStateOptions;

constexpr int32_t kUnused = std::numeric_limits<int32_t>::max();

std::vector<Example> examples(int64_t n, int64_t length, int64_t vocab, int64_t prompt_len, uint64_t seed) {
  Rng rng(seed);
  std::vector<Example> out(static_cast<size_t>(n));
  for (Example& e : out) {
    for (int64_t i = 0; i < length; ++i) e.tokens.push_back(int32_t(rng.below(uint64_t(vocab))));
    e.prompt_len = prompt_len;
  }
  return out;
}

// The block start of sequence s: the group of its last row.
int64_t block_start(const ObjectiveBatch& b, int64_t s) { return b.input.groups[size_t((s + 1) * b.input.length - 1)]; }

TEST(UniformStateBatch, LayoutGroupsPositionsAndLossWeights) {
  const int64_t L = 20, B = 6, P = 3, V = 50;
  const auto ex = examples(64, L, V, P, 1);
  UniformStateOptions o;
  o.block_length = B;
  o.vocab = V;
  o.ar_weight = 0.5f;
  Rng rng(2);
  const ObjectiveBatch b = train::uniform_state_batch(ex, o, rng);
  ASSERT_EQ(b.input.rows(), 64 * L);
  std::set<int64_t> starts;
  int64_t corrupted = 0, block_rows = 0;
  double block_weight = 0, ar_weight = 0;
  for (int64_t s = 0; s < 64; ++s) {
    const int64_t start = block_start(b, s);
    starts.insert(start);
    ASSERT_GE(start, P);
    ASSERT_LE(start, L - B);
    const int64_t unused = L - start - B;
    for (int64_t r = 0; r < L; ++r) {
      const size_t row = size_t(s * L + r);
      const int32_t group = b.input.groups[row];
      if (r < unused) {  // never seen, never scored
        EXPECT_EQ(group, kUnused);
        EXPECT_EQ(b.weights[row], 0.f);
        continue;
      }
      const int64_t i = r - unused;  // token index
      EXPECT_EQ(b.input.positions[row], i);
      if (i < start) {  // clean, causal, next-token target
        EXPECT_EQ(group, i);
        EXPECT_EQ(b.input.tokens[row], ex[size_t(s)].tokens[size_t(i)]);
        if (i + 1 >= P) {
          EXPECT_EQ(b.targets[row], ex[size_t(s)].tokens[size_t(i + 1)]);
          EXPECT_GT(b.weights[row], 0.f);
          ar_weight += b.weights[row];
        } else {
          EXPECT_EQ(b.weights[row], 0.f);
        }
      } else {  // the block: one group, every position scored with weight 1 against the clean token
        EXPECT_EQ(group, start);
        EXPECT_EQ(b.targets[row], ex[size_t(s)].tokens[size_t(i)]);
        EXPECT_EQ(b.weights[row], 1.f);
        EXPECT_GE(b.input.tokens[row], 0);
        EXPECT_LT(b.input.tokens[row], V);
        corrupted += b.input.tokens[row] != ex[size_t(s)].tokens[size_t(i)];
        block_weight += 1;
        ++block_rows;
      }
    }
  }
  EXPECT_EQ(block_rows, 64 * B);
  EXPECT_FLOAT_EQ(float(block_weight), b.normaliser);             // block term: a flat mean
  EXPECT_NEAR(ar_weight, 0.5 * b.normaliser, 1e-3 * b.normaliser);  // AR term: ar_weight x its mean
  EXPECT_GT(starts.size(), 5u);  // the block start varies
  // t ~ U(eps, 1] and noise hits the clean token 1/V of the time: about half the block is changed.
  const double changed = double(corrupted) / double(block_rows);
  EXPECT_GT(changed, 0.35);
  EXPECT_LT(changed, 0.65);
}

// Draft examples (draft_length k): [clean token ; k noise tokens] right after a clean prefix, the first
// token given and unscored, the k others pure noise scored with weight block_length / k; the rest of the
// batch keeps the ordinary layout.
TEST(UniformStateBatch, DraftExamplesAreOneCleanTokenThenPureNoise) {
  const int64_t L = 24, B = 8, K = 4, V = 5000;
  const auto ex = examples(200, L, V, 0, 5);
  UniformStateOptions o;
  o.block_length = B;
  o.vocab = V;
  o.draft_length = K;
  o.draft_share = 0.5f;
  Rng rng(6);
  const ObjectiveBatch b = train::uniform_state_batch(ex, o, rng);
  int64_t drafts = 0, noise_kept = 0;
  double block_weight = 0;
  for (int64_t s = 0; s < 200; ++s) {
    const int64_t start = block_start(b, s);
    int64_t block_rows = 0;
    for (int64_t r = 0; r < L; ++r) block_rows += b.input.groups[size_t(s * L + r)] == start;
    ASSERT_TRUE(block_rows == B || block_rows == K + 1) << block_rows;
    const size_t first = size_t((s + 1) * L - block_rows);  // the block's first row
    for (int64_t i = 0; i < block_rows; ++i) block_weight += b.weights[first + size_t(i)];
    if (block_rows == B) continue;
    ++drafts;
    ASSERT_GE(start, 1);
    EXPECT_EQ(b.input.tokens[first], ex[size_t(s)].tokens[size_t(start)]);  // the given token
    EXPECT_EQ(b.weights[first], 0.f);
    for (int64_t i = 1; i <= K; ++i) {
      const size_t row = first + size_t(i);
      EXPECT_EQ(b.targets[row], ex[size_t(s)].tokens[size_t(start + i)]);
      EXPECT_FLOAT_EQ(b.weights[row], float(B) / float(K));
      noise_kept += b.input.tokens[row] == ex[size_t(s)].tokens[size_t(start + i)];
    }
  }
  EXPECT_GT(drafts, 70);   // about half of 200
  EXPECT_LT(drafts, 130);
  EXPECT_LE(noise_kept, 2);  // pure noise: the clean token survives only by a 1-in-5000 draw
  EXPECT_FLOAT_EQ(float(block_weight), b.normaliser);  // every example weighs one block
  EXPECT_FLOAT_EQ(b.normaliser, float(200 * B));
}

// With draft_noisy_first, that share of the drafts has its first token noised and scored as well, all k + 1
// positions weighted block_length / (k + 1).
TEST(UniformStateBatch, OverlapDraftsNoiseAndScoreTheFirstToken) {
  const int64_t L = 24, B = 8, K = 4, V = 5000;
  const auto ex = examples(200, L, V, 0, 5);
  UniformStateOptions o;
  o.block_length = B;
  o.vocab = V;
  o.draft_length = K;
  o.draft_share = 1.f;
  o.draft_noisy_first = 0.5f;
  Rng rng(7);
  const ObjectiveBatch b = train::uniform_state_batch(ex, o, rng);
  int64_t noisy = 0, given = 0;
  double block_weight = 0;
  for (int64_t s = 0; s < 200; ++s) {
    const int64_t start = block_start(b, s);
    const size_t first = size_t((s + 1) * L - (K + 1));
    for (int64_t i = 0; i <= K; ++i) block_weight += b.weights[first + size_t(i)];
    if (b.weights[first] == 0.f) {
      ++given;
      EXPECT_EQ(b.input.tokens[first], ex[size_t(s)].tokens[size_t(start)]);
      for (int64_t i = 1; i <= K; ++i) EXPECT_FLOAT_EQ(b.weights[first + size_t(i)], float(B) / float(K));
      continue;
    }
    ++noisy;
    for (int64_t i = 0; i <= K; ++i) {
      EXPECT_FLOAT_EQ(b.weights[first + size_t(i)], float(B) / float(K + 1));
      EXPECT_EQ(b.targets[first + size_t(i)], ex[size_t(s)].tokens[size_t(start + i)]);
    }
  }
  EXPECT_GT(noisy, 70);
  EXPECT_GT(given, 70);
  EXPECT_FLOAT_EQ(float(block_weight), b.normaliser);
  EXPECT_FLOAT_EQ(b.normaliser, float(200 * B));
}

TEST(UniformStateBatch, GivensAreNeverCorruptedNorScored) {
  auto ex = examples(32, 9, 30, 0, 3);
  for (Example& e : ex) e.fixed = {1, 0, 1, 0, 0, 1, 0, 0, 1};
  UniformStateOptions o;
  o.block_length = 9;
  o.vocab = 30;
  Rng rng(4);
  const ObjectiveBatch b = train::uniform_state_batch(ex, o, rng);
  for (size_t s = 0; s < ex.size(); ++s) {
    EXPECT_EQ(block_start(b, int64_t(s)), 0);
    for (size_t i = 0; i < 9; ++i) {
      const size_t row = s * 9 + i;
      if (ex[s].fixed[i]) {
        EXPECT_EQ(b.input.tokens[row], ex[s].tokens[i]);
        EXPECT_EQ(b.weights[row], 0.f);
      } else {
        EXPECT_EQ(b.weights[row], 1.f);
      }
    }
  }
}

ModelConfig uniform_config(int64_t vocab = 41) {
  ModelConfig c = test::tiny_llada_config(vocab, "uniform test");
  c.uniform_state = true;
  c.eos_token = int32_t(vocab - 1);
  return c;
}

// byte_vocab: the byte tokenizer's 258 ids and its metadata, as canvas train saves models.
std::string save_random_uniform_model(const test::TempDir& dir, float std = 0.3f, bool byte_vocab = false) {
  train::InitOptions init;
  init.seed = 5;
  init.std = std;
  ModelConfig c = uniform_config(byte_vocab ? train::kByteVocab : 41);
  if (byte_vocab) c.eos_token = train::kByteEos;
  train::TrainModel tm(c, init);
  const std::string path = dir.path("uniform.gguf");
  tm.save_gguf(path, byte_vocab ? train::byte_tokenizer_metadata(false) : std::vector<std::pair<std::string, GgufValue>>{});
  return path;
}

// Logits of rows [0, n) of one inference pass.
std::vector<float> pass(const Model& m, KvCache& cache, const int32_t* tokens, int64_t n, int64_t pos0,
                        const std::vector<int32_t>& groups) {
  ForwardRequest req;
  req.tokens = tokens;
  req.n = n;
  req.pos0 = pos0;
  req.groups = groups.data();
  for (int32_t i = 0; i < int32_t(n); ++i) req.logit_rows.push_back(i);
  std::vector<float> logits(size_t(n * m.config.vocab));
  req.logits = logits.data();
  forward(m, cache, req, nullptr);
  return logits;
}

TEST(UniformStateBatch, TrainingViewsAreTheInferenceEncoderAndDecoderPasses) {
  test::TempDir dir;
  const std::string path = save_random_uniform_model(dir);
  const Model model = Model::load(path);
  EXPECT_TRUE(model.config.uniform_state);
  EXPECT_EQ(model.config.mask_token, -1);
  auto tm = train::TrainModel::from_gguf(path);
  const int64_t L = 16, B = 5, V = model.config.vocab;
  const auto ex = examples(4, L, V, 2, 6);
  UniformStateOptions o;
  o.block_length = B;
  o.vocab = V;
  Rng rng(7);
  const ObjectiveBatch b = train::uniform_state_batch(ex, o, rng);
  train::Tape tape(nullptr);
  tape.set_grad_enabled(false);
  const train::Var logits = tm.forward(tape, b.input);
  for (int64_t s = 0; s < 4; ++s) {
    const int64_t start = block_start(b, s), unused = L - start - B;
    const float* got = tape.value(logits) + (s * L + unused) * V;
    KvCache cache(model.config, L);
    std::vector<int32_t> causal(static_cast<size_t>(start));
    for (int64_t i = 0; i < start; ++i) causal[size_t(i)] = int32_t(i);
    const std::vector<float> enc = pass(model, cache, ex[size_t(s)].tokens.data(), start, 0, causal);
    EXPECT_LT(test::relative_error(std::vector<float>(got, got + start * V), enc), 1e-5) << "encoder view " << s;
    const int32_t* noisy = b.input.tokens.data() + s * L + unused + start;
    const std::vector<float> dec = pass(model, cache, noisy, B, start, std::vector<int32_t>(size_t(B), int32_t(start)));
    EXPECT_LT(test::relative_error(std::vector<float>(got + start * V, got + (start + B) * V), dec), 1e-5)
        << "decoder view " << s;
  }
}

// generate_uniform_state reuses the cache; this twin recomputes [committed ; canvas] from scratch every
// pass. Same weights, same rows: the tokens must be identical.
EntropyBoundResult generate_by_recomputation(const Model& m, const std::vector<int32_t>& prompt,
                                             const EntropyBoundParams& p) {
  std::vector<int32_t> committed = prompt;
  DiffusionModelHooks hooks;
  hooks.vocab = m.config.vocab;
  hooks.decode = [&](const std::vector<int32_t>& canvas, const std::vector<float>*, std::vector<float>& logits) {
    const int64_t n = int64_t(committed.size()), C = int64_t(canvas.size());
    std::vector<int32_t> tokens = committed, groups(size_t(n + C), int32_t(n));
    tokens.insert(tokens.end(), canvas.begin(), canvas.end());
    for (int64_t i = 0; i < n; ++i) groups[size_t(i)] = int32_t(i);
    KvCache cache(m.config, n + C);
    const std::vector<float> all = pass(m, cache, tokens.data(), n + C, 0, groups);
    std::copy(all.begin() + n * m.config.vocab, all.end(), logits.begin());
  };
  hooks.encode = [&](const std::vector<int32_t>& tokens) { committed.insert(committed.end(), tokens.begin(), tokens.end()); };
  return generate_entropy_bound(hooks, p);
}

TEST(UniformStateDecode, CachedDecodingEqualsRecomputation) {
  test::TempDir dir;
  const Model model = Model::load(save_random_uniform_model(dir, 1.0f));
  EntropyBoundParams p;
  p.canvas_length = 6;
  p.max_new_tokens = 15;  // three canvases, the last cut short
  p.max_denoising_steps = 5;
  p.entropy_bound = 2.0f;
  p.eos_ids = {};
  p.seed = 11;
  const std::vector<int32_t> prompt = {3, 9, 27, 1};
  ThreadPool pool(2);
  const EntropyBoundResult cached = generate_uniform_state(model, prompt, p, &pool);
  const EntropyBoundResult recomputed = generate_by_recomputation(model, prompt, p);
  EXPECT_EQ(cached.tokens, recomputed.tokens);
  EXPECT_EQ(cached.passes, recomputed.passes);
  EXPECT_EQ(int64_t(cached.tokens.size()), 15);
  EXPECT_EQ(cached.steps_per_canvas.size(), 3u);
  ThreadPool one(1);
  EXPECT_EQ(generate_uniform_state(model, prompt, p, &one).tokens, cached.tokens);  // any thread count
}

TEST(UniformStateDecode, CliGeneratesInBothModes) {
  test::TempDir dir;
  const std::string model = save_random_uniform_model(dir, 0.3f, true);
  auto r = test::run_canvas("generate -m " + model + " -p abc -n 12 --block-length 6 --steps 4 --json", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\"tokens_per_pass\""), std::string::npos) << r.output;
  EXPECT_NE(test::json_number(r.output, "passes"), "") << r.output;
  r = test::run_canvas("generate -m " + model + " -p abc -n 5 --mode ar --json", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(test::json_number(r.output, "passes"), "5") << r.output;
  r = test::run_canvas("generate -m " + model + " -p abc -n 5 --t-min 0.9 --t-max 0.5");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--t-min"), std::string::npos) << r.output;
}

// A model file may name what --mode auto runs (GGUF diffusion.default_mode); a bad value is refused naming
// the file and the key.
TEST(UniformStateDecode, ModelFileNamesItsDefaultMode) {
  test::TempDir dir;
  train::InitOptions init;
  init.seed = 5;
  ModelConfig c = uniform_config(train::kByteVocab);
  c.eos_token = train::kByteEos;
  c.default_mode = "diffusion";
  train::TrainModel tm(c, init);
  const std::string path = dir.path("diffusion-default.gguf");
  tm.save_gguf(path, train::byte_tokenizer_metadata(false));
  EXPECT_EQ(Model::load(path).config.default_mode, "diffusion");
  auto r = test::run_canvas("generate -m " + path + " -p abc -n 6 --json --cost-model none", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json j = test::json_of(r.output);
  EXPECT_EQ(j["mode"], "diffusion");
  EXPECT_EQ(j["mode_reason"], "auto: the model file's diffusion.default_mode");
  EXPECT_EQ(j["modes"][0], "diffusion");
  r = test::run_canvas("generate -m " + path + " -p abc -n 6 --mode ar --json", false);  // asked for
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(test::json_of(r.output)["mode"], "ar");
  c.default_mode = "fast";
  train::TrainModel bad(c, init);
  try {
    bad.save_gguf(dir.path("bad.gguf"), train::byte_tokenizer_metadata(false));  // (saving reads it back)
    ADD_FAILURE() << "a default mode 'fast' was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("bad.gguf: diffusion.default_mode 'fast' must be diffusion, ar or verify"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace canvas
