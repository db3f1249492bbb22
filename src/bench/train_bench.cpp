// canvas bench --train: timed training steps against the fp32 FMA roof sampled in the same run.
#include "bench/train_bench.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "core/appendf.h"
#include "bench/roofs.h"
#include "bench/stats.h"
#include "core/cpu.h"
#include "core/error.h"

namespace canvas::bench {
namespace {

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return in ? one + " " + five + " " + fifteen : "";
}

}  // namespace

double training_step_flops(const train::TrainingTiming& t, size_t step) {
  const ModelConfig& c = t.model;
  return 6.0 * double(t.matmul_weights_per_token) * double(t.step_tokens[step]) +
         12.0 * double(c.n_layers) * double(c.n_heads) * double(c.head_dim) * t.step_attention_pairs[step];
}

TrainBench run_train_bench(const std::string& config_path, int64_t warmup, int64_t steps, ThreadPool& pool) {
  check(steps > 0, "--steps must be positive, got " + std::to_string(steps));
  check(warmup >= 0, "--warmup must be >= 0, got " + std::to_string(warmup));
  TrainBench b;
  b.config_path = config_path;
  b.threads = pool.size();
  b.warmup = warmup;
  b.steps = steps;
  const train::RunConfig config = train::load_run_config(config_path);
  b.load_before = load_average();
  auto sample_roof = [&] {
    double per_cpu = 0;
    b.roof_samples.push_back(measure_fma_peak(pool, 3, 80, &per_cpu));
    b.roof_cpu_samples.push_back(per_cpu);
  };
  sample_roof();
  b.timing = train::time_training_steps(config, warmup + steps, pool, [&](int64_t step) {
    if (step >= warmup) sample_roof();
  });
  sample_roof();
  b.load_after = load_average();
  const train::TrainingTiming& t = b.timing;
  for (size_t i = size_t(warmup); i < t.step_ms.size(); ++i) {
    b.ms.push_back(t.step_ms[i]);
    b.cpu_ms.push_back(t.step_cpu_ms[i]);
    b.tokens_per_s.push_back(double(t.step_tokens[i]) * 1000.0 / t.step_ms[i]);
    b.gflops.push_back(training_step_flops(t, i) / (t.step_ms[i] * 1e6));
    b.cpu_gflops.push_back(training_step_flops(t, i) / (std::max(t.step_cpu_ms[i], 1e-3) * 1e6));
  }
  b.roof = median(b.roof_samples);
  b.step_gflops = median(b.gflops);
  b.fraction = b.roof > 0 ? b.step_gflops / b.roof : 0;
  b.roof_cpu = median(b.roof_cpu_samples);
  b.step_cpu_gflops = median(b.cpu_gflops);
  b.fraction_cpu = b.roof_cpu > 0 ? b.step_cpu_gflops / b.roof_cpu : 0;
  return b;
}

std::string train_bench_text(const TrainBench& b) {
  const train::TrainingTiming& t = b.timing;
  const ModelConfig& c = t.model;
  std::string out;
  appendf(out, "canvas bench --train %s: %d threads, %s, load average %s\n", b.config_path.c_str(),
                           b.threads, simd_level_name(simd_level()), b.load_before.c_str());
  appendf(out, "model: %lld layers, hidden %lld, %lld heads of %lld (kv %lld), ffn %lld, vocab %lld; %lld parameters, "
                "%lld matmul weights per token\n",
                (long long)c.n_layers, (long long)c.hidden, (long long)c.n_heads, (long long)c.head_dim,
                (long long)c.n_kv_heads, (long long)c.ffn, (long long)c.vocab, (long long)t.parameters,
                (long long)t.matmul_weights_per_token);
  appendf(out, "%-6s %10s %10s %10s %12s %10s %10s\n", "step", "ms", "cpu ms", "tokens", "tokens/s", "GFLOP/s", "loss");
  for (size_t i = 0; i < t.step_ms.size(); ++i)
    appendf(out, "%-6s %10.1f %10.1f %10lld %12.0f %10.1f %10.4f\n",
                  (std::to_string(i + 1) + (int64_t(i) < b.warmup ? "w" : "")).c_str(), t.step_ms[i], t.step_cpu_ms[i],
                  (long long)t.step_tokens[i], double(t.step_tokens[i]) * 1000.0 / t.step_ms[i],
                  training_step_flops(t, i) / (t.step_ms[i] * 1e6), double(t.step_loss[i]));
  appendf(out, "median of %lld steps (w = warm-up, not counted): %.1f ms/step, %.0f tokens/s, %.1f GFLOP/s\n",
                (long long)b.steps, median(b.ms), median(b.tokens_per_s), b.step_gflops);
  appendf(out, "fp32 FMA roof (median of %zu in-run samples, %.0f to %.0f): %.1f GFLOP/s; fraction of roof %.3f\n",
                b.roof_samples.size(), *std::min_element(b.roof_samples.begin(), b.roof_samples.end()),
                *std::max_element(b.roof_samples.begin(), b.roof_samples.end()), b.roof, b.fraction);
  appendf(out, "per second of CPU time (all threads): training %.1f GFLOP/s, roof %.1f GFLOP/s, ratio %.3f "
                "(load average after: %s)\n",
                b.step_cpu_gflops, b.roof_cpu, b.fraction_cpu, b.load_after.c_str());
  return out;
}

nlohmann::json train_bench_json(const TrainBench& b) {
  using nlohmann::json;
  const train::TrainingTiming& t = b.timing;
  const ModelConfig& c = t.model;
  json j;
  j["format"] = "canvas-bench-train-1";
  j["config"] = b.config_path;
  j["threads"] = b.threads;
  j["simd"] = simd_level_name(simd_level());
  j["load_average_before"] = b.load_before;
  j["load_average_after"] = b.load_after;
  j["model"] = {{"layers", c.n_layers}, {"hidden", c.hidden},   {"heads", c.n_heads},
                {"kv_heads", c.n_kv_heads}, {"head_dim", c.head_dim}, {"ffn", c.ffn},
                {"vocab", c.vocab}, {"parameters", t.parameters},
                {"matmul_weights_per_token", t.matmul_weights_per_token}};
  j["warmup_steps"] = b.warmup;
  j["steps"] = b.steps;
  j["step_ms"] = b.ms;
  j["step_ms_median"] = median(b.ms);
  j["step_cpu_ms"] = b.cpu_ms;  // CPU time of all threads: below threads x wall when cores are shared or idle
  j["tokens_per_step"] = t.step_tokens.back();
  j["flops_per_step"] = training_step_flops(t, t.step_ms.size() - 1);
  j["flop_count"] =
      "6 * matmul_weights_per_token * tokens + 12 * layers * heads * head_dim * sum(sequence_length^2): "
      "forward + backward of the linear layers and of attention's two products";
  j["loss"] = std::vector<float>(t.step_loss.begin(), t.step_loss.end());
  j["train_tokens_per_second"] = median(b.tokens_per_s);
  j["train_gflops"] = b.step_gflops;
  j["fp32_roof_gflops"] = b.roof;
  j["fp32_roof_samples"] = b.roof_samples;
  j["fraction_of_roof"] = b.fraction;
  j["train_gflops_per_cpu_second"] = b.step_cpu_gflops;
  j["fp32_roof_gflops_per_cpu_second"] = b.roof_cpu;
  j["fraction_of_roof_cpu_time"] = b.fraction_cpu;
  return j;
}

}  // namespace canvas::bench
