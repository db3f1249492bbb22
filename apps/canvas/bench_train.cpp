// canvas bench --train: the speed of training steps of a config's model against the fp32 FMA roof
// measured in the same run.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "args.h"
#include "bench/roofs.h"
#include "bench/stats.h"
#include "commands.h"
#include "core/cpu.h"
#include "core/error.h"
#include "output_paths.h"
#include "train/trainer.h"

namespace canvas::cli {
namespace {

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return in ? one + " " + five + " " + fifteen : "";
}

// Model FLOPs of one training step (forward + backward), counted as
//   6 * matmul_weights_per_token * tokens          (forward 2 per weight and token; backward 4: dX and dW)
// + 12 * layers * n_heads * head_dim * pairs        (attention: q.k and P V forward, 2 FLOPs per multiply-add
//                                                     each, so 4 per (query, key) pair and head dimension;
//                                                     backward twice that)
// where pairs = sum over the step's sequences of length^2 (every key counted, masked or not). Not counted:
// norms, RoPE, activations, softmax, the loss, the optimizer, and the backward's recomputation of the
// attention probabilities.
double training_step_flops(const train::TrainingTiming& t, size_t step) {
  const ModelConfig& c = t.model;
  return 6.0 * double(t.matmul_weights_per_token) * double(t.step_tokens[step]) +
         12.0 * double(c.n_layers) * double(c.n_heads) * double(c.head_dim) * t.step_attention_pairs[step];
}

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
        {"-t,--threads", "T", "threads (default: all cores)"},
        {"--json", "FILE", "also write the report as one JSON object"},
    },
    "canvas bench --help describes the decoding benchmark."};

}  // namespace

int cmd_bench_train(int argc, char** argv) {
  if (print_help_if_asked(kBenchTrain, argc, argv)) return 0;
  Args args(kBenchTrain, argc, argv, 2);
  check(args.positional().empty(), "unexpected argument '" + (args.positional().empty() ? "" : args.positional()[0]) +
                                       "'; see canvas bench --help");
  const std::string config_path = args.get("train", "");
  check(!config_path.empty(), "--train needs a config file (e.g. configs/bench-train-256.cfg)");
  check_output_is_not_input({"--json", args.get("json", "")}, {{"--train", config_path}});
  const int64_t steps = args.get_int("steps", 5), warmup = args.get_int("warmup", 2);
  check(steps > 0, "--steps must be positive, got " + std::to_string(steps));
  check(warmup >= 0, "--warmup must be >= 0, got " + std::to_string(warmup));
  const int64_t threads_flag = args.get_int("threads", 0);
  check(threads_flag >= 0 && threads_flag <= 1024, "-t must be between 0 (all cores) and 1024, got " +
                                                       std::to_string(threads_flag));
  train::RunConfig config = train::load_run_config(config_path);
  ThreadPool pool{int(threads_flag)};
  const std::string load_before = load_average();

  // The roof is sampled before every step (outside the step's time), so that the ratio compares the
  // two under the same load; its median over all samples is the run's roof.
  std::vector<double> roof_samples, roof_cpu_samples;
  auto sample_roof = [&] {
    double per_cpu = 0;
    roof_samples.push_back(bench::measure_fma_peak(pool, 3, 80, &per_cpu));
    roof_cpu_samples.push_back(per_cpu);
  };
  sample_roof();
  const train::TrainingTiming timing = train::time_training_steps(config, warmup + steps, pool, [&](int64_t step) {
    if (step >= warmup) sample_roof();
  });
  sample_roof();
  const std::string load_after = load_average();

  std::vector<double> ms, cpu_ms, tokens_per_s, gflops, cpu_gflops;
  for (size_t i = size_t(warmup); i < timing.step_ms.size(); ++i) {
    ms.push_back(timing.step_ms[i]);
    cpu_ms.push_back(timing.step_cpu_ms[i]);
    tokens_per_s.push_back(double(timing.step_tokens[i]) * 1000.0 / timing.step_ms[i]);
    gflops.push_back(training_step_flops(timing, i) / (timing.step_ms[i] * 1e6));
    cpu_gflops.push_back(training_step_flops(timing, i) / (std::max(timing.step_cpu_ms[i], 1e-3) * 1e6));
  }
  const double roof = bench::median(roof_samples), step_gflops = bench::median(gflops);
  const double fraction = roof > 0 ? step_gflops / roof : 0;
  // The same ratio per second of CPU time (all threads): free of the time the threads waited for a core
  // on a shared machine, but blind to a thread idling (blocked) while the other works.
  const double roof_cpu = bench::median(roof_cpu_samples), step_cpu_gflops = bench::median(cpu_gflops);
  const double fraction_cpu = roof_cpu > 0 ? step_cpu_gflops / roof_cpu : 0;
  const ModelConfig& c = timing.model;

  std::printf("canvas bench --train %s: %d threads, %s, load average %s\n", config_path.c_str(), pool.size(),
              simd_level_name(simd_level()), load_before.c_str());
  std::printf("model: %lld layers, hidden %lld, %lld heads of %lld (kv %lld), ffn %lld, vocab %lld; %lld parameters, "
              "%lld matmul weights per token\n",
              (long long)c.n_layers, (long long)c.hidden, (long long)c.n_heads, (long long)c.head_dim,
              (long long)c.n_kv_heads, (long long)c.ffn, (long long)c.vocab, (long long)timing.parameters,
              (long long)timing.matmul_weights_per_token);
  std::printf("%-6s %10s %10s %10s %12s %10s %10s\n", "step", "ms", "cpu ms", "tokens", "tokens/s", "GFLOP/s", "loss");
  for (size_t i = 0; i < timing.step_ms.size(); ++i)
    std::printf("%-6s %10.1f %10.1f %10lld %12.0f %10.1f %10.4f\n",
                (std::to_string(i + 1) + (int64_t(i) < warmup ? "w" : "")).c_str(), timing.step_ms[i], timing.step_cpu_ms[i],
                (long long)timing.step_tokens[i], double(timing.step_tokens[i]) * 1000.0 / timing.step_ms[i],
                training_step_flops(timing, i) / (timing.step_ms[i] * 1e6), timing.step_loss[i]);
  std::printf("median of %lld steps (w = warm-up, not counted): %.1f ms/step, %.0f tokens/s, %.1f GFLOP/s\n",
              (long long)steps, bench::median(ms), bench::median(tokens_per_s), step_gflops);
  std::printf("fp32 FMA roof (median of %zu in-run samples, %.0f to %.0f): %.1f GFLOP/s; fraction of roof %.3f\n",
              roof_samples.size(), *std::min_element(roof_samples.begin(), roof_samples.end()),
              *std::max_element(roof_samples.begin(), roof_samples.end()), roof, fraction);
  std::printf("per second of CPU time (all threads): training %.1f GFLOP/s, roof %.1f GFLOP/s, ratio %.3f "
              "(load average after: %s)\n",
              step_cpu_gflops, roof_cpu, fraction_cpu, load_after.c_str());

  if (args.has("json")) {
    using nlohmann::json;
    json j;
    j["format"] = "canvas-bench-train-1";
    j["config"] = config_path;
    j["threads"] = pool.size();
    j["simd"] = simd_level_name(simd_level());
    j["load_average_before"] = load_before;
    j["load_average_after"] = load_after;
    j["model"] = {{"layers", c.n_layers}, {"hidden", c.hidden},   {"heads", c.n_heads},
                  {"kv_heads", c.n_kv_heads}, {"head_dim", c.head_dim}, {"ffn", c.ffn},
                  {"vocab", c.vocab}, {"parameters", timing.parameters},
                  {"matmul_weights_per_token", timing.matmul_weights_per_token}};
    j["warmup_steps"] = warmup;
    j["steps"] = steps;
    j["step_ms"] = ms;
    j["step_ms_median"] = bench::median(ms);
    j["step_cpu_ms"] = cpu_ms;  // CPU time of all threads: below threads x wall when cores are shared or idle
    j["tokens_per_step"] = timing.step_tokens.back();
    j["flops_per_step"] = training_step_flops(timing, timing.step_ms.size() - 1);
    j["flop_count"] =
        "6 * matmul_weights_per_token * tokens + 12 * layers * heads * head_dim * sum(sequence_length^2): "
        "forward + backward of the linear layers and of attention's two products";
    j["loss"] = std::vector<float>(timing.step_loss.begin(), timing.step_loss.end());
    j["train_tokens_per_second"] = bench::median(tokens_per_s);
    j["train_gflops"] = step_gflops;
    j["fp32_roof_gflops"] = roof;
    j["fp32_roof_samples"] = roof_samples;
    j["fraction_of_roof"] = fraction;
    j["train_gflops_per_cpu_second"] = step_cpu_gflops;
    j["fp32_roof_gflops_per_cpu_second"] = roof_cpu;
    j["fraction_of_roof_cpu_time"] = fraction_cpu;
    const std::string path = args.get("json", "");
    std::ofstream out(path);
    check(bool(out), "--json: cannot write " + path);
    out << j.dump(2) << "\n";
    check(bool(out), "--json: error writing " + path);
  }
  return 0;
}

}  // namespace canvas::cli
