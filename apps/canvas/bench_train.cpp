// canvas bench --train: the speed of training steps of a config's model against the fp32 FMA roof
// measured in the same run.
#include <cstdio>
#include <string>

#include "bench/train_bench.h"
#include "cli/options.h"
#include "cli/output_paths.h"
#include "commands.h"
#include "core/error.h"
#include "core/output_file.h"
#include "core/thread_pool.h"

namespace canvas::cli {
namespace {

const Command kBenchTrain{
    "bench --train",
    "canvas bench --train CONFIG [--steps N] [--warmup N] [-t T] [--json FILE]",
    R"(Builds the data, model and AdamW of a training config (configs/*.cfg) in memory and times --warmup
then --steps full training steps (batch, forward, backward, optimizer), sampling the fp32 FMA roof
(register-only fused multiply-adds on every thread) before each measured step. Writes nothing to disk
but --json. Reports medians over the measured steps: train_tokens_per_second, train_gflops (model FLOPs
per second: 6 x matmul weights per token x tokens for the linear layers' forward and backward, plus
12 x layers x heads x head_dim x sum of sequence_length^2 for attention's q.k and PV products forward and
backward; norms, activations, softmax, loss and optimizer not counted), fp32_roof_gflops (median of the
roof samples) and fraction_of_roof = train_gflops / fp32_roof_gflops.)",
    {
        {"--train", "CONFIG", "the training config (e.g. configs/bench-train-256.cfg)"},
        {"--steps", "N", "measured training steps (default 5)"},
        {"--warmup", "N", "training steps run first and not measured (default 2)"},
        {"-t,--threads", "T", "threads (default: the CPUs this process may use)"},
        {"--json", "FILE", "also write the report as one JSON object"},
    },
    "canvas bench --help describes the decoding benchmark."};

}  // namespace

int cmd_bench_train(int argc, char** argv) {
  if (print_help_if_asked(kBenchTrain, argc, argv)) return 0;
  Args args(kBenchTrain, argc, argv, 2);
  args.check_no_positional("; see canvas bench --help");
  const std::string config_path = args.get("train", "");
  check(!config_path.empty(), "--train needs a config file (e.g. configs/bench-train-256.cfg)");
  check_output_is_not_input({"--json", args.get("json", "")}, {{"--train", config_path}});
  const int64_t threads = args.get_int("threads", 0);
  check(threads >= 0 && threads <= 1024, "-t must be between 0 (all cores) and 1024, got " + std::to_string(threads));
  ThreadPool pool{int(threads)};
  const bench::TrainBench b =
      bench::run_train_bench(config_path, args.get_int("warmup", 2), args.get_int("steps", 5), pool);
  std::fputs(bench::train_bench_text(b).c_str(), stdout);
  if (args.has("json")) {
    write_file(args.get("json", ""), bench::train_bench_json(b).dump(2) + "\n");
  }
  return 0;
}

}  // namespace canvas::cli
