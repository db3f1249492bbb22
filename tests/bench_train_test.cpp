// canvas bench --train: the JSON report's fields are present and consistent with each other and with the
// config's model, nothing but --json is written, and bad input gives a clear error.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench/train_bench.h"
#include "test_util.h"

namespace canvas {
namespace {

// A tiny Sudoku model (81 tokens per sequence) so that the run takes well under a second per step.
const char* kTinyConfig = R"(task = sudoku
objective = masked
layers = 2
hidden = 16
heads = 2
kv_heads = 1
ffn = 32
batch_size = 2
steps = 100
eval_examples = 4
)";

// The FLOP count, by hand: 6 per matmul weight and token, 12 per layer, head, head dimension and
// (query, key) pair.
TEST(BenchTrain, StepFlopsCountWeightsAndAttentionPairs) {
  train::TrainingTiming t;
  t.model.n_layers = 2;
  t.model.n_heads = 3;
  t.model.head_dim = 4;
  t.matmul_weights_per_token = 1000;
  t.step_tokens = {10, 20};
  t.step_attention_pairs = {50, 200};
  EXPECT_DOUBLE_EQ(bench::training_step_flops(t, 0), 6.0 * 1000 * 10 + 12.0 * 2 * 3 * 4 * 50);
  EXPECT_DOUBLE_EQ(bench::training_step_flops(t, 1), 6.0 * 1000 * 20 + 12.0 * 2 * 3 * 4 * 200);
}

TEST(BenchTrainCli, ReportsConsistentFieldsAndWritesNothingElse) {
  test::TempDir dir;
  const std::string config = dir.path("tiny.cfg"), json_path = dir.path("train.json");
  std::ofstream(config) << kTinyConfig;
  // Run inside the temporary directory so that any stray output (runs/, checkpoints) would show up there.
  const std::filesystem::path cwd = std::filesystem::current_path();
  std::filesystem::current_path(std::filesystem::path(config).parent_path());
  const auto r = test::run_canvas("bench --train tiny.cfg --steps 3 --warmup 1 -t 2 --json train.json");
  std::filesystem::current_path(cwd);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("fraction of roof"), std::string::npos) << r.output;
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(config).parent_path()))
    files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"tiny.cfg", "train.json"}));

  const nlohmann::json j = nlohmann::json::parse(test::read_text(json_path));
  for (const char* key : {"train_tokens_per_second", "train_gflops", "fp32_roof_gflops", "fraction_of_roof",
                          "flops_per_step", "tokens_per_step", "step_ms", "model", "threads"})
    ASSERT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["threads"], 2);
  EXPECT_EQ(j["steps"], 3);
  EXPECT_EQ(j["step_ms"].size(), 3u);
  EXPECT_EQ(j["tokens_per_step"], 2 * 81);
  const double roof = j["fp32_roof_gflops"], gflops = j["train_gflops"], fraction = j["fraction_of_roof"];
  EXPECT_GT(roof, 0);
  EXPECT_GT(gflops, 0);
  EXPECT_NEAR(fraction, gflops / roof, 1e-9 * fraction);
  // Model FLOPs: 6 x matmul weights x tokens + 12 x layers x heads x head_dim x length^2 per sequence.
  const nlohmann::json& m = j["model"];
  const int64_t hidden = 16, head_dim = 8, kv = 1, ffn = 32, layers = 2, vocab = m["vocab"];
  const int64_t weights = layers * (hidden * hidden * 2 + 2 * hidden * kv * head_dim + 3 * hidden * ffn) + hidden * vocab;
  EXPECT_EQ(m["matmul_weights_per_token"], weights);
  const double flops = 6.0 * double(weights) * 162 + 12.0 * layers * 2 * head_dim * (2.0 * 81 * 81);
  EXPECT_NEAR(double(j["flops_per_step"]), flops, 1e-9 * flops);
  // The medians: tokens/s and GFLOP/s follow from the median step time (3 steps: the middle one).
  std::vector<double> ms = j["step_ms"];
  std::sort(ms.begin(), ms.end());
  EXPECT_NEAR(double(j["train_tokens_per_second"]), 162 * 1000.0 / ms[1], 1e-6 * double(j["train_tokens_per_second"]));
  EXPECT_NEAR(gflops, flops / (ms[1] * 1e6), 1e-6 * gflops);
}

TEST(BenchTrainCli, BadInputGivesClearErrors) {
  test::TempDir dir;
  const std::string config = dir.path("tiny.cfg"), bad = dir.path("bad.cfg");
  std::ofstream(config) << kTinyConfig;
  std::ofstream(bad) << "layers = 2\nwidth = 16\n";
  struct Case {
    std::string args, message;
  };
  const Case cases[] = {
      {"bench --train /nonexistent.cfg", "cannot open config /nonexistent.cfg"},
      {"bench --train " + bad, "unknown key 'width'"},
      {"bench --train " + config + " --steps 0", "--steps must be positive"},
      {"bench --train " + config + " --warmup -1", "--warmup must be >= 0"},
      {"bench --train " + config + " -t two", "'two' is not an integer"},
      {"bench --train " + config + " --json /nonexistent-dir/x.json --steps 1 --warmup 0", "cannot write"},
  };
  for (const Case& c : cases) {
    const auto r = test::run_canvas(c.args);
    EXPECT_EQ(r.exit_code, 1) << c.args << ": " << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.args << ": " << r.output;
  }
}

}  // namespace
}  // namespace canvas
