// init_from accepts any model canvas loads (a GGUF, a Hugging Face DiffusionGemma directory): the
// source's architecture and tokenizer win, a run with lr = 0 exports the source's function, and a
// DiffusionGemma-architecture run learns (from the checkpoint, and from scratch with model_config).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/gguf.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "ops/matmul.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "test_util.h"
#include "train/trainer.h"

namespace canvas::train {
namespace {

const std::string kGemmaDir = "tiny-diffusion-gemma";

// A small English corpus (the fixture tokenizers cover it with merges and byte fallback).
std::string write_corpus(const test::TempDir& dir) {
  const std::string path = dir.path("corpus.txt");
  std::ofstream out(path);
  const char* lines[] = {"In the beginning was the word, and the word was with the light.\n",
                         "And the evening and the morning were the first day.\n",
                         "The sea and the land, the sun and the moon, and every green thing.\n",
                         "Then the people went out to the field to gather the harvest.\n"};
  for (int i = 0; i < 120; ++i) out << lines[i % 4];
  return path;
}

RunConfig config_of(const std::string& text) { return parse_run_config(text, "test config"); }

// Encoder logits over `ids` (causal), then, for a model with a decoder, decoder logits over `canvas`.
std::vector<float> logits_of(const Model& model, const std::vector<int32_t>& ids, const std::vector<int32_t>& canvas) {
  const int64_t V = model.config.vocab, n = int64_t(ids.size());
  KvCache cache(model.config, n + int64_t(canvas.size()) + 1);
  std::vector<int32_t> groups(ids.size());
  for (size_t i = 0; i < groups.size(); ++i) groups[i] = int32_t(i);
  ForwardRequest req;
  req.tokens = ids.data();
  req.n = n;
  req.groups = groups.data();
  for (int32_t i = 0; i < int32_t(n); ++i) req.logit_rows.push_back(i);
  std::vector<float> out(size_t(n * V));
  req.logits = out.data();
  forward(model, cache, req, nullptr);
  if (model.config.has_decoder) {
    ForwardRequest d;
    d.tokens = canvas.data();
    d.n = int64_t(canvas.size());
    d.pos0 = n;
    d.decoder = true;
    for (int32_t i = 0; i < int32_t(canvas.size()); ++i) d.logit_rows.push_back(i);
    std::vector<float> dec(canvas.size() * size_t(V));
    d.logits = dec.data();
    forward(model, cache, d, nullptr);
    out.insert(out.end(), dec.begin(), dec.end());
  }
  return out;
}

// A run of `steps` steps; returns the losses.
std::vector<float> train(const RunConfig& r, const std::string& out_dir) {
  std::vector<float> losses;
  run_training(r, out_dir, [&](const StepReport& rep) { losses.push_back(rep.loss); });
  return losses;
}

void expect_lr0_export_equals_source(const std::string& source, const std::string& objective,
                                     const std::string& extra = "") {
  test::TempDir dir;
  // Architecture keys are ignored (with a notice): the source's architecture wins.
  const RunConfig r = config_of("task = text\ntext_corpus = " + write_corpus(dir) + "\nobjective = " + objective +
                                "\ninit_from = " + source +
                                "\nlayers = 9\nhidden = 8\nheads = 2\nkv_heads = 2\nffn = 16\n"
                                "seq_len = 24\nblock_length = 8\nbatch_size = 2\nsteps = 2\nlr = 0\nmin_lr = 0\n"
                                "warmup = 0\neval_every = 1\ncheckpoint_every = 1\nthreads = 2\n" + extra);
  train(r, dir.path("run"));
  const Model exported = Model::load(dir.path("run/model.gguf"));
  const Model original = Model::load(source);
  EXPECT_EQ(exported.config.n_layers, original.config.n_layers);
  EXPECT_EQ(exported.config.hidden, original.config.hidden);
  EXPECT_EQ(exported.config.vocab, original.config.vocab);
  const std::vector<int32_t> ids = {5, 17, 42, 7, 99, 3, 11, 64, 23, 8, 150, 77, 31, 2};
  const std::vector<int32_t> canvas = {9, 14, 200, 6, 45, 18};
  EXPECT_LT(test::relative_error(logits_of(exported, ids, canvas), logits_of(original, ids, canvas)), 1e-5) << source;
  // The export carries the source's tokenizer, so the usual commands read it.
  const auto file = GgufFile::open(dir.path("run/model.gguf"));
  EXPECT_FALSE(file->get_string("tokenizer.ggml.model", "").empty());
}

TEST(TrainInitFrom, DiffusionGemmaDirectoryWithLrZeroExportsTheSameModel) {
  expect_lr0_export_equals_source(test::fixture(kGemmaDir), "uniform", "self_conditioning = true\n");
}

// tiny-diffusion-gemma with its embedding padded by `extra` rows past its tokenizer's tokens, as Qwen2.5
// and Dream release theirs (151,665 tokens in 152,064 rows); the padding rows hold distinct values.
std::string padded_gemma_dir(const test::TempDir& dir, int64_t extra) {
  const std::filesystem::path src = test::fixture(kGemmaDir), dst = dir.path("padded");
  std::filesystem::create_directories(dst);
  for (const char* name : {"generation_config.json", "tokenizer.json"})
    std::filesystem::copy_file(src / name, dst / name, std::filesystem::copy_options::overwrite_existing);
  nlohmann::json config = load_json_file((src / "config.json").string());
  nlohmann::json& text = config.contains("text_config") ? config["text_config"] : config;
  text["vocab_size"] = text["vocab_size"].get<int64_t>() + extra;
  std::ofstream(dst / "config.json") << config.dump(2);
  const auto st = SafetensorsModel::open(src.string());
  std::vector<SafetensorsEntry> entries;
  std::vector<float> padded;
  for (const TensorView& t : st->tensors()) {
    SafetensorsEntry e{t.name, t.type, {}, t.data, size_t(t.bytes())};
    for (int d = t.n_dims - 1; d >= 0; --d) e.shape.push_back(t.ne[d]);
    if (t.name.find("embed_tokens.weight") != std::string::npos) {
      EXPECT_EQ(t.type, DType::F32);
      padded.assign(t.f32(), t.f32() + t.elements());
      for (int64_t i = 0; i < extra * t.ne[0]; ++i) padded.push_back(0.01f * float(i % 97) - 0.5f);
      e.shape[0] += extra;
      e.data = padded.data();
      e.bytes = padded.size() * sizeof(float);
    }
    entries.push_back(e);
  }
  write_safetensors((dst / "model.safetensors").string(), entries);
  return dst.string();
}

// Fine-tuning a released checkpoint whose embedding has more rows than its tokenizer has tokens: it trains,
// at lr 0 it exports the source's function, and with lr > 0 the padding rows stay exactly as they were.
TEST(TrainInitFrom, PaddedEmbeddingTrainsAndKeepsItsPaddingRows) {
  test::TempDir dir("_source");  // expect_lr0_export_equals_source makes (and removes) the test's own
  const std::string source = padded_gemma_dir(dir, 20);
  const Model original = Model::load(source);
  ASSERT_EQ(original.config.vocab, 320);
  expect_lr0_export_equals_source(source, "uniform", "self_conditioning = true\n");

  const RunConfig r = config_of("task = text\ntext_corpus = " + write_corpus(dir) + "\nobjective = uniform\n" +
                                "self_conditioning = true\ninit_from = " + source +
                                "\nseq_len = 24\nblock_length = 8\nbatch_size = 2\nsteps = 3\nlr = 0.01\n"
                                "warmup = 0\neval_every = 3\ncheckpoint_every = 3\nthreads = 2\n");
  const std::vector<float> losses = train(r, dir.path("run"));
  ASSERT_EQ(losses.size(), 3u);
  const Model tuned = Model::load(dir.path("run/model.gguf"));
  ASSERT_EQ(tuned.config.vocab, 320);
  const int64_t H = original.config.hidden;
  std::vector<float> a(static_cast<size_t>(H)), b(static_cast<size_t>(H));
  int64_t changed = 0;
  for (int64_t row = 0; row < 320; ++row) {
    get_row(original.token_embd, row, a.data());
    get_row(tuned.token_embd, row, b.data());
    if (row >= 300) EXPECT_EQ(a, b) << "padding row " << row << " changed";
    else changed += a != b;
  }
  EXPECT_GT(changed, 0) << "the run trained nothing";
}

TEST(TrainInitFrom, GgufWithLrZeroExportsTheSameModel) {
  expect_lr0_export_equals_source(test::fixture("tiny-llada.gguf"), "masked");
}

TEST(TrainInitFrom, DiffusionGemmaRefusesTheMaskedObjective) {
  test::TempDir dir;
  const RunConfig r = config_of("task = text\ntext_corpus = " + write_corpus(dir) + "\nobjective = masked\ninit_from = " +
                                test::fixture(kGemmaDir) + "\nseq_len = 24\nsteps = 1\n");
  try {
    train(r, dir.path("run"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mask token"), std::string::npos) << e.what();
  }
}

// DiffusionGemma's uniform-state block diffusion with self-conditioning learns, from the checkpoint
// (init_from) and from scratch (model_config: the architecture of its config.json, random weights).
TEST(TrainInitFrom, DiffusionGemmaConfigTrains) {
  for (const std::string key : {"init_from", "model_config"}) {
    test::TempDir dir;
    const std::string path = key == "init_from" ? test::fixture(kGemmaDir) : test::fixture(kGemmaDir + "/config.json");
    const RunConfig r = config_of("task = text\ntext_corpus = " + write_corpus(dir) +
                                  "\nobjective = uniform\nself_conditioning = true\n" + key + " = " + path +
                                  "\nseq_len = 32\nblock_length = 8\nbatch_size = 8\nsteps = 40\nlr = 3e-3\n"
                                  "min_lr = 3e-4\nwarmup = 5\neval_every = 40\ncheckpoint_every = 40\nthreads = 2\n"
                                  "seed = 3\n");
    const std::vector<float> losses = train(r, dir.path("run"));
    ASSERT_EQ(losses.size(), 40u) << key;
    double first = 0, last = 0;
    for (int i = 0; i < 5; ++i) {
      first += losses[size_t(i)] / 5;
      last += losses[losses.size() - 1 - size_t(i)] / 5;
    }
    std::printf("DiffusionGemma via %s: mean loss of steps 1-5 %.4f, of steps 36-40 %.4f\n", key.c_str(), first, last);
    EXPECT_LT(last, 0.8 * first) << key << ": loss " << first << " -> " << last;
    const Model trained = Model::load(dir.path("run/model.gguf"));
    EXPECT_EQ(trained.config.arch, "diffusion-gemma");
    EXPECT_TRUE(trained.config.has_decoder);
  }
}


// The shipped text model's recipe on a tiny config: stage 1 trains the DiffusionGemma architecture
// autoregressively through its causal encoder (model_config), stage 2 adapts that export to uniform-state
// block diffusion with self-conditioning and the encoder loss kept (init_from). Both stages learn, and the
// result keeps the architecture, decodes with the entropy-bound sampler and through the encoder.
TEST(TrainInitFromCli, TwoStageRecipeArThenUniform) {
  test::TempDir dir;
  const std::string corpus = write_corpus(dir);
  const std::string common = "task = text\ntext_corpus = " + corpus +
                             "\nseq_len = 32\nbatch_size = 8\nlr = 3e-3\nmin_lr = 3e-4\nwarmup = 5\n"
                             "eval_every = 30\ncheckpoint_every = 30\nthreads = 2\nseed = 5\n";
  const RunConfig ar = config_of(common + "objective = ar\nsteps = 30\nmodel_config = " +
                                 test::fixture(kGemmaDir + "/config.json") + "\n");
  const std::vector<float> ar_losses = train(ar, dir.path("stage1"));
  ASSERT_EQ(ar_losses.size(), 30u);
  EXPECT_LT(ar_losses.back(), 0.8 * ar_losses.front()) << "stage 1 (AR through the encoder) did not learn";
  const RunConfig uniform = config_of(common + "objective = uniform\nself_conditioning = true\nblock_length = 8\n"
                                      "ar_weight = 1\nsteps = 30\ninit_from = " + dir.path("stage1/model.gguf") + "\n");
  const std::vector<float> losses = train(uniform, dir.path("stage2"));
  ASSERT_EQ(losses.size(), 30u);
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i) {
    first += losses[size_t(i)] / 5;
    last += losses[losses.size() - 1 - size_t(i)] / 5;
  }
  EXPECT_LT(last, first) << "stage 2 (uniform-state adaptation) did not learn: " << first << " -> " << last;
  const Model stage2 = Model::load(dir.path("stage2/model.gguf"));
  EXPECT_EQ(stage2.config.arch, "diffusion-gemma");
  EXPECT_TRUE(stage2.config.has_decoder);  // DiffusionGemma's decoder carries the self-conditioning path
  const auto file = GgufFile::open(dir.path("stage2/model.gguf"));
  EXPECT_NE(file->find_tensor("self_cond_up.weight"), nullptr);
  EXPECT_EQ(file->get_int("diffusion.canvas_length", 0), 8);
  for (const std::string mode : {"diffusion", "ar"}) {
    const auto r = test::run_canvas("generate -m " + dir.path("stage2/model.gguf") + " -p 'In the beginning' -n 20 -t 1 -s 1 --json --mode " + mode);
    EXPECT_EQ(r.exit_code, 0) << mode << ": " << r.output;
    EXPECT_NE(r.output.find("\"passes\""), std::string::npos) << mode << ": " << r.output;
  }
}

}  // namespace
}  // namespace canvas::train
