// How a model samples when a request does not say (decode/default_sampling.h): the model's own values,
// else llama.cpp's defaults for pretrained AR models; greedy for canvas's trained models and diffusion models.
#include "decode/default_sampling.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "gguf_copy.h"
#include "test_util.h"

namespace canvas {
namespace {

std::string pretrained_copy(const test::TempDir& dir, const std::vector<std::pair<std::string, GgufValue>>& keys) {
  return test::pretrained_ar_model(dir, "pretrained.gguf", keys);
}

DefaultSampling of(const std::string& path) { return default_sampling(Model::load(path), path); }

TEST(DefaultSampling, CanvasTrainedAndDiffusionModelsStayGreedy) {
  for (const std::string& path : {test::source_path("models/text-ar.gguf"), test::source_path("models/text-masked.gguf"),
                                 test::source_path("models/text-dg-chat.gguf"), test::fixture("tiny-llada.gguf")}) {
    const DefaultSampling d = of(path);
    EXPECT_EQ(d.params.temperature, 0.f) << path;
    EXPECT_EQ(d.params.top_k, 0) << path;
    EXPECT_EQ(d.params.top_p, 1.f) << path;
  }
}

TEST(DefaultSampling, PretrainedModelsSampleAsLlamaCppOrAsTheirFileSays) {
  test::TempDir dir;
  DefaultSampling d = of(pretrained_copy(dir, {}));
  EXPECT_EQ(d.params.temperature, 0.8f);
  EXPECT_EQ(d.params.top_k, 40);
  EXPECT_EQ(d.params.top_p, 0.95f);
  EXPECT_EQ(d.params.min_p, 0.05f);
  EXPECT_EQ(d.source, "llama.cpp's defaults");
  // llama.cpp's converter writes general.sampling.* from generation_config.json: they win, key by key.
  d = of(pretrained_copy(dir, {{"general.sampling.temp", GgufValue::f32(0.6f)},
                               {"general.sampling.top_k", GgufValue::i32(20)}}));
  EXPECT_FLOAT_EQ(d.params.temperature, 0.6f);
  EXPECT_EQ(d.params.top_k, 20);
  EXPECT_EQ(d.params.top_p, 0.95f);
  EXPECT_NE(d.source.find("pretrained.gguf"), std::string::npos) << d.source;
  EXPECT_THROW(of(pretrained_copy(dir, {{"general.sampling.top_p", GgufValue::f32(2.f)}})), Error);
}

TEST(DefaultSamplingCli, CheckpointsReadGenerationConfig) {
  test::TempDir dir;
  const std::string ckpt = dir.path("ckpt");
  const auto converted = test::run_canvas("convert --in " + test::source_path("models/text-ar.gguf") + " --out " + ckpt +
                                          " --to hf");
  ASSERT_EQ(converted.exit_code, 0) << converted.output;
  EXPECT_EQ(of(ckpt).params.temperature, 0.8f);  // no generation_config.json: llama.cpp's
  std::ofstream(ckpt + "/generation_config.json") << R"({"do_sample": true, "temperature": 0.7, "top_p": 0.9})";
  DefaultSampling d = of(ckpt);
  EXPECT_FLOAT_EQ(d.params.temperature, 0.7f);
  EXPECT_FLOAT_EQ(d.params.top_p, 0.9f);
  EXPECT_EQ(d.params.top_k, 40);
  std::ofstream(ckpt + "/generation_config.json") << R"({"do_sample": false, "temperature": 0.7})";
  EXPECT_EQ(of(ckpt).params.temperature, 0.f);
}

TEST(DefaultSampling, GivenSettingsWin) {
  SamplingParams defaults;
  defaults.temperature = 0.8f;
  defaults.top_k = 40;
  defaults.top_p = 0.95f;
  defaults.min_p = 0.05f;
  SamplingParams s;
  s.temperature = 0.f;  // --temp 0: greedy stays greedy
  s.top_k = 5;
  apply_default_sampling(s, defaults, {.temperature = true, .top_k = true});
  EXPECT_EQ(s.temperature, 0.f);
  EXPECT_EQ(s.top_k, 5);
  EXPECT_EQ(s.top_p, 0.95f);
  EXPECT_EQ(s.min_p, 0.05f);
  SamplingParams none;
  apply_default_sampling(none, defaults, {});
  EXPECT_EQ(none.temperature, 0.8f);
}

}  // namespace
}  // namespace canvas
