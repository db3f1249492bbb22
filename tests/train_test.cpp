// canvas train end to end: a run killed at random moments resumes and continues exactly; configs are
// validated; the saved model loads for inference.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/rng.h"
#include "model/model.h"
#include "sudoku/sudoku_task.h"
#include "test_util.h"
#include "train/tape.h"
#include "train/trainer.h"
#include "train_test_util.h"

namespace canvas {
namespace {

// A config's default task is Sudoku's, which a program registers (as canvas does at start).
[[maybe_unused]] const bool kSudokuTaskRegistered = (register_sudoku_task(), true);

const char* kTinyConfig = R"(task = sudoku
objective = %s
layers = 2
hidden = 32
heads = 2
kv_heads = 2
ffn = 64
eval_examples = 16
batch_size = 4
steps = 24
warmup = 4
eval_every = 6
checkpoint_every = 2
threads = 2
)";

// extra: more config lines; name: the files' name (default: the objective).
std::string write_config(const std::string& objective, const std::string& extra = "", std::string name = "") {
  const std::string path = test::temp_path((name.empty() ? objective : name) + ".cfg");
  char buf[512];
  std::snprintf(buf, sizeof buf, kTinyConfig, objective.c_str());
  std::ofstream(path) << buf << extra;
  return path;
}

// The deterministic columns of train.csv (drops tokens/s and elapsed time).
std::vector<std::string> loss_columns(const std::string& csv) {
  std::vector<std::string> rows;
  std::istringstream in(test::read_text(csv));
  std::string line;
  while (std::getline(in, line)) {
    size_t cut = line.size();
    for (int commas = 0, i = 0; i < int(line.size()); ++i)
      if (line[size_t(i)] == ',' && ++commas == 5) cut = size_t(i);
    rows.push_back(line.substr(0, cut));
  }
  return rows;
}

void check_kill_and_resume(const std::string& objective, const std::string& extra = "", std::string name = "") {
  if (name.empty()) name = objective;
  const std::string config = write_config(objective, extra, name);
  const std::string whole = test::temp_path(name + "-whole"), killed = test::temp_path(name + "-killed");
  std::system(("rm -rf " + whole + " " + killed).c_str());
  const auto t0 = std::chrono::steady_clock::now();
  auto r = test::run_canvas("train --config " + config + " --out " + whole);
  const double whole_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<std::string> want = loss_columns(whole + "/train.csv");
  ASSERT_EQ(want.size(), 25u);  // header + 24 steps

  // Kill the same run with SIGKILL at random moments until it finishes; each restart resumes. The
  // delays adapt to the machine's speed: they start at a third of the uninterrupted run's time, and a
  // restart that made no progress gets a longer delay.
  Rng rng(static_cast<uint64_t>(::getpid()));  // not uint64_t(::getpid()): clang parses that as a declaration
  int kills = 0;
  double delay = whole_s / 3;
  size_t progress = 0;
  bool finished = false;
  for (int restart = 0; restart < 60 && !finished; ++restart) {
    const double d = delay * (0.5 + rng.uniform());
    const std::string cmd = "timeout -s KILL " + std::to_string(d) + " " + std::string(CANVAS_BINARY) +
                            " train --config " + config + " --out " + killed + " >/dev/null 2>&1";
    const int status = std::system(cmd.c_str());
    finished = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!finished) ++kills;
    const size_t rows = loss_columns(killed + "/train.csv").size();
    if (rows <= progress) delay *= 1.5;
    progress = std::max(progress, rows);
  }
  if (!finished) {
    ASSERT_EQ(test::run_canvas("train --config " + config + " --out " + killed).exit_code, 0);
  }
  EXPECT_GT(kills, 0) << "the run was never killed; the test proved nothing";
  EXPECT_EQ(loss_columns(killed + "/train.csv"), want);
  // The final weights are bit-identical too.
  EXPECT_EQ(test::read_text(killed + "/model.gguf"), test::read_text(whole + "/model.gguf"));
  const Model m = Model::load(whole + "/model.gguf");
  EXPECT_EQ(m.config.causal, objective == "ar");
  EXPECT_EQ(m.config.self_conditioning, extra.find("self_conditioning = true") != std::string::npos);
  EXPECT_EQ(m.config.n_positions, objective == "ar" ? 162 : 81);  // sequence vs infill layout
  std::system(("rm -rf " + whole + " " + killed + " " + config).c_str());
}

// canvas train's progress line: the bar fills with the steps; a validation step adds its metrics and ends
// the line.
TEST(Train, StepProgressLine) {
  train::StepReport r;
  r.step = 6;
  r.total = 24;
  r.loss = 1.5f;
  r.lr = 1e-3f;
  r.grad_norm = 0.25f;
  r.tokens_per_second = 1234;
  r.elapsed_s = 3725;
  r.eta_s = 59;
  EXPECT_EQ(train::step_progress_line(r, -1),
            "[######..................] 6/24 loss 1.5000 val - lr 1.00e-03 |g| 0.25 1234 tok/s elapsed 1:02:05 "
            "ETA 0:00:59   ");
  r.has_val = true;
  r.val_metrics = {{"solved", 0.5}};
  const std::string line = train::step_progress_line(r, 2.25f);
  EXPECT_NE(line.find(" loss 1.5000 val 2.2500 lr "), std::string::npos) << line;
  EXPECT_EQ(line.substr(line.size() - 22), "0:59   solved 0.5000 \n") << line;
}

TEST(Train, MaskedRunKilledAtRandomResumesExactly) { check_kill_and_resume("masked"); }
TEST(Train, ArRunKilledAtRandomResumesExactly) { check_kill_and_resume("ar"); }
TEST(Train, UniformRunKilledAtRandomResumesExactly) { check_kill_and_resume("uniform"); }
TEST(Train, SelfConditionedUniformRunKilledAtRandomResumesExactly) {
  check_kill_and_resume("uniform", "self_conditioning = true\n", "uniform-self-cond");
}

TEST(Train, TrainedModelSolvesThroughTheCli) {
  const std::string config = write_config("masked");
  const std::string dir = test::temp_path("solve");
  std::system(("rm -rf " + dir).c_str());
  ASSERT_EQ(test::run_canvas("train --config " + config + " --out " + dir + " --steps 2").exit_code, 0);
  const auto r = test::run_canvas("sudoku solve -m " + dir + "/model.gguf --steps 9 < " +
                                      test::source_path("data/sudoku/heldout-easy.txt") + " | head -3",
                                  false);
  ASSERT_EQ(r.exit_code, 0);
  std::istringstream lines(r.output);
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    EXPECT_EQ(line.size(), 81u) << line;
    ++n;
  }
  EXPECT_EQ(n, 3);
  std::system(("rm -rf " + dir + " " + config).c_str());
}

TEST(Train, ConfigErrorsNameTheLine) {
  EXPECT_THROW(train::parse_run_config("layers = two\n", "x.cfg"), Error);
  try {
    train::parse_run_config("task = sudoku\nlayer = 2\n", "x.cfg");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("x.cfg:2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("unknown key 'layer'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(train::parse_run_config("hidden = 30\nheads = 4\n", "x.cfg"), Error);
  EXPECT_THROW(train::parse_run_config("objective = diffusion\n", "x.cfg"), Error);
}

TEST(Train, ResumingWithAnotherConfigIsRefused) {
  const std::string config = write_config("masked");
  const std::string dir = test::temp_path("mismatch");
  std::system(("rm -rf " + dir).c_str());
  ASSERT_EQ(test::run_canvas("train --config " + config + " --out " + dir + " --steps 2").exit_code, 0);
  const std::string changed = test::with_settings(test::read_text(config), "hidden = 64\n");
  std::ofstream(config, std::ios::trunc) << changed;
  const auto r = test::run_canvas("train --config " + config + " --out " + dir);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("different configuration"), std::string::npos) << r.output;
  std::system(("rm -rf " + dir + " " + config).c_str());
}

// The logits of `model` on two fixed sequences of the tiny test vocabulary.
std::vector<float> tiny_logits(train::TrainModel& model) {
  train::TokenBatch batch;
  batch.n_sequences = 2;
  batch.length = 9;
  Rng rng(4);
  for (int64_t i = 0; i < batch.rows(); ++i) batch.tokens.push_back(int32_t(rng.below(29)));
  ThreadPool pool(2);
  train::Tape tape(&pool);
  const train::Var logits = model.forward(tape, batch);
  return std::vector<float>(tape.value(logits), tape.value(logits) + tape.size(logits));
}

// Depth growth (init_layers): donor layers are copied where the map says, new layers start as the
// identity (residual output projections zero, everything else freshly random), so the grown model
// computes exactly the donor's logits; duplicating layers instead changes them.
TEST(Train, GrownModelStartsAsExactlyTheDonor) {
  const ModelConfig small = test::tiny_llada_config(29, "donor");
  train::TrainModel donor = test::nudged_random_model(small, 11);
  test::TempDir dir;
  const std::string path = dir.path("donor.gguf");
  donor.save_gguf(path);
  ModelConfig big = small;
  big.n_layers = 4;
  auto grow = [&](const std::string& layers) {
    return train::initial_model(
        train::parse_run_config("layers = 4\ninit_from = " + path + "\ninit_layers = " + layers + "\n", "grow.cfg"),
        big);
  };
  train::TrainModel grown = grow("0, new, 1, new");
  EXPECT_EQ(grown.find("blk.2.ffn_up.weight")->value, donor.find("blk.1.ffn_up.weight")->value);
  EXPECT_EQ(grown.find("blk.0.attn_q.weight")->value, donor.find("blk.0.attn_q.weight")->value);
  EXPECT_EQ(grown.find("token_embd.weight")->value, donor.find("token_embd.weight")->value);
  for (const char* name : {"blk.1.attn_output.weight", "blk.1.ffn_down.weight", "blk.3.ffn_down.weight"})
    for (float v : grown.find(name)->value) ASSERT_EQ(v, 0.f) << name;
  const std::vector<float>& fresh = grown.find("blk.3.attn_q.weight")->value;
  EXPECT_GT(std::count_if(fresh.begin(), fresh.end(), [](float v) { return v != 0.f; }), int64_t(fresh.size()) / 2);
  const std::vector<float> expect = tiny_logits(donor);
  EXPECT_EQ(tiny_logits(grown), expect);
  train::TrainModel doubled = grow("0,0,1,1");
  EXPECT_EQ(doubled.find("blk.1.attn_output.weight")->value, donor.find("blk.0.attn_output.weight")->value);
  EXPECT_NE(tiny_logits(doubled), expect);
  EXPECT_THROW(grow("0,new,7,new"), Error);  // the donor has layers 0 and 1
}

TEST(Train, InitLayersConfigIsChecked) {
  EXPECT_THROW(train::parse_run_config("layers = 2\ninit_layers = 0,new\n", "x.cfg"), Error);  // no init_from
  EXPECT_THROW(train::parse_run_config("layers = 3\ninit_from = a.gguf\ninit_layers = 0,new\n", "x.cfg"), Error);
  EXPECT_THROW(train::parse_run_config("layers = 2\ninit_from = a.gguf\ninit_layers = 0,old\n", "x.cfg"), Error);
  EXPECT_EQ(train::parse_run_config("layers = 2\ninit_from = a.gguf\ninit_layers = 1, new\n", "x.cfg").init_layers,
            (std::vector<std::string>{"1", "new"}));
}

}  // namespace
}  // namespace canvas
