// Training configs and run plumbing: every key's range, the resume identity, the task registry,
// warm-up longer than the run, resume notices, and a diverging run that keeps its last good checkpoint.
#include <dirent.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "io/gguf.h"
#include "sudoku/sudoku_task.h"
#include "test_util.h"
#include "train/task.h"
#include "train/trainer.h"

namespace canvas {
namespace {

// A config's default task is Sudoku's, which a program registers (as canvas does at start).
[[maybe_unused]] const bool kSudokuTaskRegistered = (register_sudoku_task(), true);

const char* kTiny = R"(task = sudoku
objective = masked
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

// The message of the Error that parsing `text` throws ("" when it parses).
std::string parse_error(const std::string& text) {
  try {
    train::parse_run_config(text, "x.cfg");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TrainConfig, EveryKeyHasARange) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"layers", "0"},
      {"layers", "100000"},
      {"hidden", "4294967328"},  // 2^32 + 32: no truncation
      {"heads", "-1"},
      {"kv_heads", "0"},
      {"ffn", "99999999999"},
      {"rope_theta", "0"},
      {"rope_theta", "-5"},
      {"rope_theta", "nan"},
      {"rope_theta", "1e400"},
      {"init_std", "0"},
      {"init_std", "inf"},
      {"lr", "-1e-3"},
      {"lr", "5"},
      {"min_lr", "-1"},
      {"warmup", "-1"},
      {"weight_decay", "2"},
      {"beta1", "1"},
      {"beta2", "-0.5"},
      {"beta2", "1.5"},
      {"adam_eps", "0"},
      {"grad_clip", "-1"},
      {"steps", "0"},
      {"steps", "99999999999999999999"},
      {"batch_size", "4294967298"},
      {"batch_size", "0"},
      {"accumulation", "0"},
      {"mask_eps", "0"},
      {"mask_eps", "1"},
      {"block_length", "0"},
      {"ar_weight", "-1"},
      {"draft_length", "-1"},
      {"draft_length", "1025"},
      {"draft_share", "1.5"},
      {"draft_noisy_first", "-0.1"},
      {"seed", "-1"},
      {"eval_every", "0"},
      {"checkpoint_every", "0"},
      {"threads", "4294967298"},
      {"threads", "-2"},
      {"eval_examples", "0"},
      {"sudoku_min_clues", "4294967313"},
      {"sudoku_max_clues", "81"},
      {"sudoku_min_clues", "16"},
      {"sudoku_hidden_weight", "0"},
      {"position_embedding", "yes"},
  };
  for (const auto& [key, value] : bad) {
    const std::string text = test::with_settings(kTiny, key + " = " + value + "\n");  // the last line
    const std::string error = parse_error(text);
    const std::string line = std::to_string(std::count(text.begin(), text.end(), '\n'));
    EXPECT_NE(error.find("x.cfg:" + line + ": " + key), std::string::npos) << key << " = " << value << ": " << error;
  }
  // The text task's keys; val_fraction must leave some text for training.
  for (const std::string line : {"val_fraction = 1", "val_fraction = -0.1", "val_fraction = 1.5",
                                 "seq_len = 1", "seq_len = 4294967298"}) {
    const std::string error = parse_error("task = text\n" + line + "\n");
    EXPECT_NE(error.find("x.cfg:2: " + line.substr(0, line.find(' '))), std::string::npos)
        << line << ": " << error;
  }
  EXPECT_EQ(parse_error("task = text\nval_fraction = 0\nseq_len = 64\n"), "");
  // Sizes each in range that together would need terabytes.
  EXPECT_NE(parse_error("layers = 1024\nhidden = 65536\nheads = 1024\nkv_heads = 1024\nffn = 1048576\n")
                .find("parameters; the trainer takes at most"),
            std::string::npos);
  EXPECT_NE(parse_error(std::string(kTiny) + "sudoku_min_clues = 40\nsudoku_max_clues = 30\n").find("above"),
            std::string::npos);
  EXPECT_NE(parse_error(std::string(kTiny) + "lr = 1e-4\nmin_lr = 1e-3\n").find("min_lr"), std::string::npos);
  // Values at the edges of their ranges are accepted.
  const train::RunConfig edge = train::parse_run_config(
      test::with_settings(kTiny, "lr = 0\nbeta1 = 0\nthreads = 0\nseed = 9223372036854775807\n"), "x.cfg");
  EXPECT_EQ(edge.optimizer.lr, 0.f);
  EXPECT_EQ(edge.optimizer.min_lr, 0.f);  // without its own min_lr, lr = 0 stays 0
  EXPECT_EQ(edge.seed, 9223372036854775807ull);
}

TEST(TrainConfig, AMicroBatchTooLargeForMemoryIsRefused) {
  test::TempDir dir;
  try {
    train::run_training(train::parse_run_config(test::with_settings(kTiny, "batch_size = 65536\n"), "x.cfg"),
                        dir.path("run"), nullptr);
    FAIL() << "a micro-batch of 65536 Sudoku sequences was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokens a micro-batch may hold"), std::string::npos) << e.what();
  }
}

// A key set twice used to take its last value without a word; it is an error naming the key and both lines,
// for the generic keys, the task's keys and `task` itself, however the two lines are spelled.
TEST(TrainConfig, AKeySetTwiceIsAnErrorNamingBothLines) {
  const std::string twice = std::string(kTiny) + "# a comment line\n\nlr = 2e-3\n   lr=1e-3   # again\n";
  const std::string error = parse_error(twice);
  EXPECT_NE(error.find("x.cfg:18: key 'lr' is set twice, on lines 17 and 18"), std::string::npos) << error;
  EXPECT_EQ(std::count(error.begin(), error.end(), '\n'), 0) << error;
  EXPECT_NE(parse_error(std::string(kTiny) + "steps = 30\n").find("key 'steps' is set twice, on lines 10 and 15"),
            std::string::npos);
  EXPECT_NE(parse_error(std::string(kTiny) + "task = sudoku\n").find("key 'task' is set twice, on lines 1 and 15"),
            std::string::npos);
  EXPECT_NE(parse_error("task = text\nseq_len = 64\nseq_len = 64\n").find("key 'seq_len' is set twice, on lines 2 and 3"),
            std::string::npos);
  EXPECT_EQ(parse_error(kTiny), "");
}

TEST(TrainConfig, EmptyConfigIsAnError) {
  EXPECT_NE(parse_error("").find("no settings"), std::string::npos);
  EXPECT_NE(parse_error("# only a comment\n\n").find("no settings"), std::string::npos);
  test::TempDir dir;
  std::ofstream(dir.path("empty.cfg")).flush();
  EXPECT_THROW(train::load_run_config(dir.path("empty.cfg")), Error);
  EXPECT_THROW(train::load_run_config(dir.path("")), Error);  // a directory
  EXPECT_THROW(train::load_run_config(dir.path("missing.cfg")), Error);
}

// Every key with another valid value. The resume identity must change with each, except the three that
// change neither the weights nor the data.
const std::map<std::string, std::string> kOtherValues = {
    {"objective", "ar"},
    {"layers", "3"},
    {"hidden", "64"},
    {"heads", "4"},
    {"kv_heads", "1"},
    {"ffn", "32"},
    {"position_embedding", "false"},
    {"rope_theta", "500"},
    {"init_std", "0.03"},
    {"init_from", "x.gguf"},
    {"model_config", "other/config.json"},
    {"init_layers", "0,new"},
    {"eval_examples", "17"},
    {"lr", "2e-3"},
    {"min_lr", "2e-5"},
    {"warmup", "5"},
    {"weight_decay", "0.2"},
    {"beta1", "0.8"},
    {"beta2", "0.98"},
    {"adam_eps", "1e-6"},
    {"grad_clip", "0.5"},
    {"steps", "25"},
    {"batch_size", "5"},
    {"accumulation", "2"},
    {"mask_eps", "0.01"},
    {"block_length", "16"},
    {"ar_weight", "0.5"},
    {"draft_length", "4"},
    {"draft_share", "0.25"},
    {"draft_noisy_first", "0.5"},
    {"seed", "2"},
    {"self_conditioning", "true"},
    {"sudoku_format", "sequence"},
    {"sudoku_min_clues", "23"},
    {"sudoku_max_clues", "49"},
    {"sudoku_states", "singles"},
    {"sudoku_hidden_weight", "1"},
    {"held_out", "a.txt"},
    {"eval_every", "7"},
    {"checkpoint_every", "3"},
    {"threads", "1"},
};
const std::set<std::string> kNotInIdentity = {"eval_every", "checkpoint_every", "threads"};

std::set<std::string> identity_keys(const std::string& identity) {
  std::set<std::string> keys;
  std::istringstream in(identity);
  std::string line;
  while (std::getline(in, line))
    if (line.find(" = ") != std::string::npos) keys.insert(line.substr(0, line.find(" = ")));
  return keys;
}

TEST(TrainConfig, ResumeIdentityCoversEveryKeyThatChangesTheRun) {
  const std::string base = test::with_settings(kTiny, "objective = uniform\n");  // block_length and ar_weight count
  const std::string id = train::run_identity(train::parse_run_config(base, "x.cfg"));
  for (const auto& [key, value] : kOtherValues) {
    std::string extra = key + " = " + value + "\n";
    if (key == "init_layers") extra += "init_from = x.gguf\nlayers = 2\n";
    if (key == "sudoku_states")
      extra += "objective = masked\n";  // singles needs infill, which needs diffusion
    if (key == "sudoku_hidden_weight") extra = "objective = masked\nsudoku_states = decoder\n";
    const std::string with = train::run_identity(train::parse_run_config(test::with_settings(base, extra), "x.cfg"));
    if (key == "sudoku_hidden_weight") {  // decoder states, then the weight changes the run
      EXPECT_NE(
          train::run_identity(
              train::parse_run_config(test::with_settings(base, extra + "sudoku_hidden_weight = 3\n"), "x.cfg")),
          with);
      continue;
    }
    if (kNotInIdentity.count(key)) {
      EXPECT_EQ(with, id) << key;
    } else {
      EXPECT_NE(with, id) << key;
    }
  }
  // Completeness: every key the identity holds is listed above, so a new key cannot be missed here.
  for (const std::string& key : identity_keys(id)) {
    EXPECT_TRUE(key == "task" || kOtherValues.count(key)) << "add " << key << " to kOtherValues";
  }
  EXPECT_EQ(identity_keys(id).size() + kNotInIdentity.size(), kOtherValues.size() + 1);  // + task
  // A run whose architecture comes from a file does not record the (ignored) architecture keys.
  const std::set<std::string> from_file =
      identity_keys(train::run_identity(train::parse_run_config(test::with_settings(base, "init_from = x.gguf\n"), "x.cfg")));
  for (const char* key : {"layers", "hidden", "heads", "kv_heads", "ffn", "position_embedding", "rope_theta"}) {
    EXPECT_TRUE(identity_keys(id).count(key)) << key;
    EXPECT_FALSE(from_file.count(key)) << key;
  }
  EXPECT_TRUE(from_file.count("init_from"));
  // The text task's keys, and the task itself.
  const std::string text = "task = text\nseq_len = 64\n";
  const std::string text_id = train::run_identity(train::parse_run_config(text, "x.cfg"));
  for (const char* extra :
       {"seq_len = 65\n", "text_corpus = other.txt\n", "val_fraction = 0.1\n", "tokenizer = vocab.gguf\n"})
    EXPECT_NE(train::run_identity(train::parse_run_config(test::with_settings(text, extra), "x.cfg")), text_id)
        << extra;
  EXPECT_NE(text_id, id);
}

TEST(TrainConfig, EveryShippedConfigParses) {
  DIR* dir = ::opendir(test::source_path("configs").c_str());
  ASSERT_NE(dir, nullptr);
  int n = 0;
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (name.size() < 4 || name.substr(name.size() - 4) != ".cfg") continue;
    const train::RunConfig r = train::load_run_config(test::source_path("configs/" + name));
    EXPECT_TRUE(r.notices.empty()) << name;
    ++n;
  }
  ::closedir(dir);
  EXPECT_GT(n, 0);
}

TEST(TrainConfig, TasksOwnTheirKeys) {
  EXPECT_NE(parse_error("task = chess\n").find("unknown task 'chess' (known: sudoku, text)"),
            std::string::npos);
  EXPECT_NE(parse_error("task = text\nsudoku_min_clues = 30\n")
                .find("unknown key 'sudoku_min_clues' (for task = text)"),
            std::string::npos);
  EXPECT_NE(parse_error("task = sudoku\nseq_len = 30\n").find("unknown key 'seq_len'"), std::string::npos);
  // The task line may come anywhere.
  EXPECT_EQ(train::parse_run_config("seq_len = 64\ntask = text\n", "x.cfg").task_module->name(), "text");
  // Sudoku's default format follows the objective.
  EXPECT_EQ(train::parse_run_config("objective = ar\n", "x.cfg").task_module->settings()[0].second,
            "sequence");
  EXPECT_NE(parse_error("objective = ar\nsudoku_format = infill\n"), "");
}

// A task registered from outside the trainer: sequences counting up from a random start.
class CountingTask : public train::Task {
 public:
  std::string name() const override { return "counting"; }
  bool set(const std::string& key, const std::string& value, const std::string& where) override {
    if (key != "count_length") return false;
    length_ = train::config_int(value, where, key, 2, 100);
    return true;
  }
  void finish(const std::string&, const std::string&) override {}
  std::vector<std::pair<std::string, std::string>> settings() const override {
    return {{"count_length", std::to_string(length_)}};
  }
  std::unique_ptr<train::DataSource> make_source(const train::TaskContext& context) const override {
    struct Source : train::DataSource {
      int64_t length;
      std::vector<train::Example> val;
      train::Example sample(Rng& rng) const override {
        train::Example e;
        const int32_t start = int32_t(rng.below(100));
        for (int64_t i = 0; i < length; ++i) e.tokens.push_back(start + int32_t(i));
        return e;
      }
      const std::vector<train::Example>& validation() const override { return val; }
      int64_t sequence_length() const override { return length; }
    };
    auto source = std::make_unique<Source>();
    source->length = length_;
    Rng rng(context.seed);
    for (int64_t i = 0; i < context.eval_examples; ++i) source->val.push_back(source->sample(rng));
    return source;
  }
  std::vector<std::string> metric_names() const override { return {"count_accuracy"}; }
  std::vector<train::TaskMetric> validation_metrics(
      const std::vector<train::ScoredSequence>& s) const override {
    return {{"count_accuracy", train::scored_accuracy(s)}};
  }

 private:
  int64_t length_ = 12;
};

TEST(TrainConfig, ARegisteredTaskTrainsAndReportsItsMetric) {
  train::register_task("counting",
                       [] { return std::unique_ptr<train::Task>(std::make_unique<CountingTask>()); });
  const train::RunConfig r = train::parse_run_config(
      "task = counting\ncount_length = 10\nobjective = ar\nlayers = 1\nhidden = 16\nheads = 2\nkv_heads = 2\n"
      "ffn = 32\neval_examples = 4\nbatch_size = 2\nsteps = 3\nwarmup = 1\neval_every = 3\nthreads = 1\n",
      "count.cfg");
  test::TempDir dir;
  std::vector<train::StepReport> reports;
  train::run_training(r, dir.path("run"), [&](const train::StepReport& rep) { reports.push_back(rep); });
  ASSERT_EQ(reports.size(), 3u);
  ASSERT_EQ(reports[2].val_metrics.size(), 1u);
  EXPECT_EQ(reports[2].val_metrics[0].name, "count_accuracy");
  const std::string csv = test::read_text(dir.path("run/train.csv"));
  EXPECT_EQ(csv.substr(0, csv.find('\n')),
            "step,lr,loss,grad_norm,val_loss,tokens_per_second,elapsed_s,count_accuracy");
  EXPECT_NE(train::run_identity(r).find("count_length = 10"), std::string::npos);
}

// ---- through the binary ------------------------------------------------------------------------

std::string write_config(const std::string& name, const std::string& extra) {
  const std::string path = test::temp_path(name + ".cfg");
  std::ofstream(path) << test::with_settings(kTiny, extra);
  return path;
}

TEST(TrainCli, EmptyOrDirectoryConfigIsAnError) {
  test::TempDir dir;
  std::ofstream(dir.path("empty.cfg")).flush();
  auto r = test::run_canvas("train --config " + dir.path("empty.cfg") + " --out " + dir.path("run"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("is empty"), std::string::npos) << r.output;
  r = test::run_canvas("train --config " + dir.path("") + " --out " + dir.path("run"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("is a directory"), std::string::npos) << r.output;
  r = test::run_canvas("train --config " + write_config("threads-overflow", "threads = 4294967298\n") +
                       " --out " + dir.path("run"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("threads must be an integer in [0, 4096]"), std::string::npos) << r.output;
}

// steps sets the cosine schedule: resuming under other steps is refused, naming the key; the same
// steps resume and say from where.
TEST(TrainCli, ResumeUnderOtherStepsIsRefusedAndAResumeSaysFromWhere) {
  test::TempDir dir;
  const std::string config = write_config("resume-steps", "");
  const std::string run = "train --config " + config + " --out " + dir.path("run");
  auto r = test::run_canvas(run + " --steps 6 --stop-after 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("resumed"), std::string::npos) << r.output;
  r = test::run_canvas(run + " --steps 8");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("steps: the checkpoint's run has '6', this run '8'"), std::string::npos)
      << r.output;
  r = test::run_canvas(run);  // the config's 24 steps
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("this run '24'"), std::string::npos) << r.output;
  r = test::run_canvas(run + " --steps 6");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from step 2 of 6"), std::string::npos) << r.output;
  std::remove(config.c_str());
}

// --stop-after between two checkpoints still leaves one at the step it stopped, and the run resumes there.
TEST(TrainCli, StopAfterBetweenCheckpointsSavesWhereItStopped) {
  test::TempDir dir;
  std::string text = kTiny;
  const std::string every = "checkpoint_every = 2";
  text.replace(text.find(every), every.size(), "checkpoint_every = 10");
  const std::string config = test::temp_path("stop-between.cfg");
  std::ofstream(config) << text;
  const std::string run = "train --config " + config + " --out " + dir.path("run");
  auto r = test::run_canvas(run + " --stop-after 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = test::run_canvas(run + " --stop-after 5");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from step 3 of 24"), std::string::npos) << r.output;
  std::remove(config.c_str());
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Issue 35: `canvas train --out DIR` onto a folder holding another run's model.gguf overwrote it without a
// word. Another run's files (a model.gguf without a checkpoint, from another config or from elsewhere; a
// checkpoint under other settings) are refused before anything is written unless --force, which starts
// this run afresh in their place; the same run still resumes, or restarts over its own model.gguf.
TEST(TrainCli, OutDirHoldingAnotherRunIsRefusedUnlessForced) {
  test::TempDir dir;
  const std::string a = write_config("force-a", ""), b = write_config("force-b", "hidden = 64\n");
  const std::string run = dir.path("run");
  auto train = [&](const std::string& config, const std::string& extra) {
    return test::run_canvas("train --config " + config + " --out " + run + " --steps 2 " + extra);
  };
  auto identity = [](const std::string& config) {  // of a run of `config` with --steps 2
    train::RunConfig r = train::load_run_config(config);
    train::set_total_steps(r, 2);
    return train::run_identity(r);
  };
  ASSERT_EQ(train(a, "").exit_code, 0);
  std::remove((run + "/checkpoint.gguf").c_str());  // a finished run whose checkpoint was deleted
  const std::string model_a = file_bytes(run + "/model.gguf"), csv_a = file_bytes(run + "/train.csv");
  auto r = train(b, "");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(run + "/model.gguf belongs to another run (hidden: its run has '32', this run '64')"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("--force"), std::string::npos) << r.output;
  EXPECT_EQ(file_bytes(run + "/model.gguf"), model_a);
  EXPECT_EQ(file_bytes(run + "/train.csv"), csv_a);
  // The same run over its own model.gguf goes ahead, as before.
  r = train(a, "");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // A model that no canvas train run wrote.
  const std::string other = dir.path("other");
  std::filesystem::create_directories(other);
  std::filesystem::copy_file(test::fixture("tiny-llada.gguf"), other + "/model.gguf");
  r = test::run_canvas("train --config " + a + " --out " + other + " --steps 2");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("belongs to another run (it records no canvas train run)"), std::string::npos) << r.output;
  EXPECT_EQ(file_bytes(other + "/model.gguf"), file_bytes(test::fixture("tiny-llada.gguf")));
  // --force replaces it with this run's.
  r = test::run_canvas("train --config " + a + " --out " + other + " --steps 2 --force");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--force: replacing"), std::string::npos) << r.output;
  EXPECT_EQ(GgufFile::open(other + "/model.gguf")->get_string("training.identity", ""), identity(a));
  // A checkpoint under other settings: refused (as before), and --force starts the new run from step 0.
  r = train(b, "");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("different configuration"), std::string::npos) << r.output;
  r = train(b, "--force");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("resumed"), std::string::npos) << r.output;
  EXPECT_EQ(GgufFile::open(run + "/checkpoint.gguf")->require_int("training.step"), 2);
  EXPECT_EQ(GgufFile::open(run + "/model.gguf")->get_string("training.identity", ""), identity(b));
  // The same run resumes, --force or not.
  r = train(b, "--force");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from step 2 of 2"), std::string::npos) << r.output;
  EXPECT_NE(test::run_canvas("train --help").output.find("--force"), std::string::npos);
  std::remove(a.c_str());
  std::remove(b.c_str());
}

// Rewrites a checkpoint as an older canvas wrote it: an identity that does not list every setting.
void make_legacy_checkpoint(const std::string& path) {
  auto file = GgufFile::open(path);
  GgufWriter w;
  for (const auto& [key, value] : file->metadata())
    w.set(key, key == "training.identity" ? GgufValue::string("sudoku|masked|2|32") : value);
  for (const TensorView& t : file->tensors())
    w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims), t.data,
                 uint64_t(t.bytes()));
  w.write(path + ".legacy");
  ASSERT_EQ(std::rename((path + ".legacy").c_str(), path.c_str()), 0);
}

// A checkpoint from before full identities is checked against the config text it stored.
TEST(TrainCli, OlderCheckpointsAreCheckedAgainstTheirStoredConfig) {
  test::TempDir dir;
  const std::string config = write_config("legacy", "");
  const std::string run = "train --config " + config + " --out " + dir.path("run");
  ASSERT_EQ(test::run_canvas(run + " --stop-after 2").exit_code, 0);
  make_legacy_checkpoint(dir.path("run/checkpoint.gguf"));
  auto r = test::run_canvas(run + " --steps 30 --stop-after 3");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("steps: the checkpoint's run has '24', this run '30'"), std::string::npos)
      << r.output;
  r = test::run_canvas(run + " --stop-after 4");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("predates checkpoints that record every setting"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("resumed from step 2 of 24"), std::string::npos) << r.output;
  std::remove(config.c_str());
}

// The lr column of train.csv.
std::vector<double> lr_column(const std::string& csv) {
  std::vector<double> lr;
  std::istringstream in(test::read_text(csv));
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) lr.push_back(std::atof(line.substr(line.find(',') + 1).c_str()));
  return lr;
}

// A warm-up longer than the run never reaches lr: it is shortened, with a notice, and the run reaches lr.
TEST(TrainCli, WarmupLongerThanTheRunIsShortenedWithANotice) {
  test::TempDir dir;
  const std::string config = write_config("long-warmup", "lr = 2e-3\nwarmup = 12\n");
  auto r = test::run_canvas("train --config " + config + " --out " + dir.path("a") + " --steps 4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // 12 of 24 steps: half of the 4-step run.
  EXPECT_NE(
      r.output.find("note: the warm-up of 12 steps is longer than the 4-step run; shortened to 2 steps"),
      std::string::npos)
      << r.output;
  std::vector<double> lr = lr_column(dir.path("a/train.csv"));
  ASSERT_EQ(lr.size(), 4u);
  EXPECT_NEAR(lr[1], 2e-3, 1e-9);
  // In the config itself (the default warm-up is 100 steps): a tenth of the run.
  const std::string short_run = write_config("short-run", "lr = 2e-3\nwarmup = 100\nsteps = 20\n");
  r = test::run_canvas("train --config " + short_run + " --out " + dir.path("b") + " --stop-after 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("warm-up of 100 steps is longer than the 20-step run; shortened to 2 steps"),
            std::string::npos)
      << r.output;
  lr = lr_column(dir.path("b/train.csv"));
  ASSERT_EQ(lr.size(), 3u);
  EXPECT_NEAR(lr[1], 2e-3, 1e-9);
  std::remove(config.c_str());
  std::remove(short_run.c_str());
}

// lr 1 with beta2 0 and no clipping diverges within a few steps: the run must fail, and the checkpoint
// on disk must be the last one written before the divergence, with finite weights.
TEST(TrainCli, DivergingRunFailsAndKeepsTheLastGoodCheckpoint) {
  test::TempDir dir;
  const std::string config = write_config(
      "diverge",
      "lr = 1\nbeta2 = 0\ngrad_clip = 0\nweight_decay = 0\ninit_std = 1\nsteps = 60\ncheckpoint_every = 1\n");
  const auto r = test::run_canvas("train --config " + config + " --out " + dir.path("run"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("is not finite (the run diverged"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("keeps the last good checkpoint"), std::string::npos) << r.output;
  const size_t at = r.output.find("error: step ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const int64_t failed = std::atoll(r.output.c_str() + at + 12);
  ASSERT_GT(failed, 1);
  for (const char* name : {"checkpoint.gguf", "model.gguf"}) {
    auto file = GgufFile::open(dir.path(std::string("run/") + name));
    EXPECT_EQ(file->require_int("training.step"), failed - 1) << name;
    for (const TensorView& t : file->tensors()) {
      ASSERT_EQ(t.type, DType::F32);
      const float* v = static_cast<const float*>(t.data);
      for (int64_t i = 0; i < t.elements(); ++i) ASSERT_TRUE(std::isfinite(v[i])) << name << " " << t.name;
    }
  }
  std::remove(config.c_str());
}

}  // namespace
}  // namespace canvas
