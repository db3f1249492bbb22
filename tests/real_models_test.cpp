// docs/real-models.md walked through on tiny checkpoints in the published Hugging Face layouts (LLaDA,
// Dream, LLaDA-MoE, DiffusionGemma): run from the directory, convert, quantize, generate, and chat or serve
// where the guide does. The same commands as the guide, only the paths differ.
#include <gtest/gtest.h>

#include <string>

#include "test_util.h"

namespace canvas {
namespace {

struct Checkpoint {
  const char* fixture;  // tests/fixtures/<fixture>: config.json + model.safetensors + tokenizer.json
  const char* mode;     // what generate's default, auto, decodes it by (as its stats line names it)
};

TEST(RealModelsGuide, EveryCommandOnATinyCheckpointOfEachLayout) {
  const Checkpoint checkpoints[] = {
      {"tiny-llada-hf", "diffusion"},
      {"tiny-dream-hf", "diffusion"},
      {"tiny-llada-moe-hf", "diffusion"},
      // the release's form: whole canvases with its sampler, as transformers' generate()
      {"tiny-diffusion-gemma", "diffusion, entropy-bound sampler"},
  };
  for (const Checkpoint& c : checkpoints) {
    SCOPED_TRACE(c.fixture);
    test::TempDir dir;
    const std::string hf = test::fixture(c.fixture);
    // 1. Straight from the directory.
    auto r = test::run_canvas("generate -m " + hf + " -p 'Hello' -n 8 -t 1 -s 1 --cost-model none");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(std::string("[") + c.mode + " (auto): "), std::string::npos) << r.output;
    // 2. convert, 3. quantize.
    const std::string f16 = dir.path("model-f16.gguf"), q4 = dir.path("model-q4_0.gguf");
    r = test::run_canvas("convert --in " + hf + " --out " + f16 + " --type f16");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = test::run_canvas("quantize " + f16 + " " + q4 + " q4_0");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    // 4. generate from the GGUF (its tokenizer inside), AR on the same weights, and chat.
    r = test::run_canvas("generate -m " + q4 + " -p 'Hello' -n 8 -t 1 -s 1 --chat --json", false);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("\"finish_reason\""), std::string::npos) << r.output;
    r = test::run_canvas("generate -m " + q4 + " -p 'Hello' -n 8 -t 1 --mode ar");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = test::run_canvas("chat -m " + q4 + " -n 4 -t 1 -s 1 --verbose", true, "echo Hello |");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("new tokens, finish"), std::string::npos) << r.output;  // one reply
  }
}

}  // namespace
}  // namespace canvas
