// init_from accepts any model canvas loads (a GGUF, a Hugging Face DiffusionGemma directory): the
// source's architecture and tokenizer win, a run with lr = 0 exports the source's function, and a
// DiffusionGemma-architecture run learns (from the checkpoint, and from scratch with model_config).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/gguf.h"
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

}  // namespace
}  // namespace canvas::train
