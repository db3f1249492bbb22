// canvas bench --train: timed training steps of a config's model against the fp32 FMA roof sampled in the
// same run, as medians, a printed report and one JSON object.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/thread_pool.h"
#include "train/trainer.h"

namespace canvas::bench {

// Model FLOPs of one training step (forward + backward), counted as
//   6 * matmul_weights_per_token * tokens          (forward 2 per weight and token; backward 4: dX and dW)
// + 12 * layers * n_heads * head_dim * pairs        (attention: q.k and P V forward, 2 FLOPs per multiply-add
//                                                     each, so 4 per (query, key) pair and head dimension;
//                                                     backward twice that)
// where pairs = sum over the step's sequences of length^2 (every key counted, masked or not). Not counted:
// norms, RoPE, activations, softmax, the loss, the optimizer, and the backward's recomputation of the
// attention probabilities.
double training_step_flops(const train::TrainingTiming& t, size_t step);

struct TrainBench {
  std::string config_path;
  int threads = 0;
  int64_t warmup = 0, steps = 0;
  std::string load_before, load_after;  // /proc/loadavg's three figures
  train::TrainingTiming timing;         // every step, warm-up first
  // Per measured step:
  std::vector<double> ms, cpu_ms, tokens_per_s, gflops, cpu_gflops;
  std::vector<double> roof_samples, roof_cpu_samples;  // one before each measured step, and around the run
  double step_gflops = 0, roof = 0, fraction = 0;      // medians; fraction = step_gflops / roof
  // The same per second of CPU time (all threads): free of the time the threads waited for a core on a
  // shared machine, but blind to a thread idling (blocked) while the other works.
  double step_cpu_gflops = 0, roof_cpu = 0, fraction_cpu = 0;
};

// Builds the config's data, model and optimizer in memory and times `warmup` then `steps` training steps,
// sampling the fp32 FMA roof before each measured step (outside the step's time), so that the ratio compares
// the two under the same load.
TrainBench run_train_bench(const std::string& config_path, int64_t warmup, int64_t steps, ThreadPool& pool);

// The printed report (a table of every step, then the medians and the roof) and the JSON report
// ("canvas-bench-train-1").
std::string train_bench_text(const TrainBench& b);
nlohmann::json train_bench_json(const TrainBench& b);

}  // namespace canvas::bench
