// canvas train: run (or resume) a training run described by a config file.
#include <cstdio>
#include <exception>
#include <string>

#include "cli/options.h"
#include "commands.h"
#include "core/error.h"
#include "train/curves.h"
#include "train/trainer.h"

namespace canvas::cli {
namespace {

const Command kTrain{
    "train",
    "canvas train --config FILE.cfg --out DIR [--steps N] [-t THREADS] [--stop-after N] [--force]",
    R"(Trains a small diffusion (objective = masked or uniform) or autoregressive (objective = ar) model on a
task (task = sudoku or text) as the config file describes (see configs/ and docs/training.md). Writes
into DIR:
  checkpoint.gguf   weights + AdamW state + step (atomic; a killed run resumes from it exactly)
  model.gguf        weights only, for canvas generate / canvas sudoku
  train.csv         step, lr, loss, grad_norm, val_loss, tokens_per_second, elapsed_s, task metrics
  curves.png        loss curves: training and validation loss per step (drawn at the end)
Running the same command again resumes from DIR/checkpoint.gguf (and says from which step). Another
run's files in DIR are refused before anything is written: a checkpoint made under other settings
(--steps included), or a model.gguf (with no checkpoint) that this run did not write; --force replaces
them, starting this run afresh. A step whose loss or weights are not finite stops the run with an
error, leaving the last good checkpoint.)",
    {
        {"--config", "FILE", "run configuration (key = value lines)"},
        {"--out", "DIR", "output directory"},
        {"--steps", "N",
         "override the config's total steps (the cosine schedule follows it; a warm-up\n"
         "that no longer fits is shortened in proportion, with a note)"},
        {"--stop-after", "N", "stop after step N (the run can be resumed later)"},
        {"-t,--threads", "N", "threads (default: the config's, else the CPUs this process may use)"},
        {"--force", "",
         "replace another run's files in DIR (a checkpoint under other settings, a model.gguf this\n"
         "run did not write) instead of refusing; the run starts from step 0"},
    },
    ""};

}  // namespace

int cmd_train(int argc, char** argv) {
  if (print_help_if_asked(kTrain, argc, argv)) return 0;
  Args args(kTrain, argc, argv, 2);
  check(args.has("config"), "no config given (--config FILE.cfg); see canvas train --help");
  check(args.has("out"), "no output directory given (--out DIR)");
  train::RunConfig config = train::load_run_config(args.get("config", ""));
  for (const std::string& notice : config.notices) std::fprintf(stderr, "note: %s\n", notice.c_str());
  if (args.has("steps")) {
    const std::string notice = train::set_total_steps(config, args.get_int("steps", config.steps));
    if (!notice.empty()) std::fprintf(stderr, "note: %s\n", notice.c_str());
  }
  if (args.has("threads")) {
    const int64_t threads = args.get_int("threads", 0);
    check(threads >= 0 && threads <= 4096, "--threads must be in [0, 4096] (0: every core)");
    config.threads = int(threads);
  }
  const int64_t stop_after = args.get_int("stop-after", 0);
  check(stop_after >= 0, "--stop-after must be a step number (0: run to the end)");
  const std::string out = args.get("out", "");
  // With init_from / model_config the architecture is that file's (its layers and width are in the notice).
  const std::string& model_file = !config.init_from.empty() ? config.init_from : config.model_config;
  const std::string shape = model_file.empty() ? std::to_string(config.layers) + " layers, hidden " +
                                                     std::to_string(config.hidden)
                                               : "the architecture of " + model_file;
  std::fprintf(stderr, "training %s/%s: %s, %lld steps of %lld x %lld sequences -> %s\n", config.task.c_str(),
               config.objective.c_str(), shape.c_str(), (long long)config.steps, (long long)config.batch_size,
               (long long)config.accumulation, out.c_str());
  float last_val = -1;
  train::run_training(
      config, out,
      [&](const train::StepReport& r) {
        if (r.has_val) last_val = r.val_loss;
        std::fprintf(stderr, "\r%s", train::step_progress_line(r, last_val).c_str());
      },
      stop_after, [](const std::string& notice) { std::fprintf(stderr, "%s\n", notice.c_str()); },
      args.has("force"));
  std::fprintf(stderr, "\nsaved %s/model.gguf and %s/checkpoint.gguf\n", out.c_str(), out.c_str());
  // The run is saved by now: a chart that cannot be drawn (a full disk) is reported, not a failed run.
  try {
    train::write_training_plot(out + "/train.csv", out + "/curves.png");
    std::fprintf(stderr, "plotted %s/curves.png\n", out.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "canvas train: no curves.png: %s\n", e.what());
  }
  return 0;
}

}  // namespace canvas::cli
