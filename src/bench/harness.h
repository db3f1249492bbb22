// The model benchmark: AR and diffusion decoding over a grid of settings on one model, medians over
// repeats, achieved bandwidth and compute as fractions of roofs measured in the same run, the
// diffusion/AR speed ratio, and the report as a table or JSON. Every grid point is a GenerationRequest run
// by the Generator (decode/generation.h): the bench times exactly what `canvas generate` runs.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench/device_floors.h"
#include "bench/roofs.h"
#include "bench/synthetic.h"
#include "decode/masked.h"
#include "model/model.h"

namespace canvas::bench {

// The rows of one forward pass, by what they go through.
struct PassRows {
  double rows = 0;        // positions forwarded
  double logit_rows = 0;  // rows through the LM head
  // Self-conditioning (a decoder pass, or config.self_conditioning): rows through its MLP, and of them the
  // rows given as logits, which are first reduced to softmax(logits) @ E (a pass over the embedding).
  double self_cond_rows = 0, self_cond_logit_rows = 0;
  // Rows whose fused head also writes softmax(logits / T) @ E (soft_embedding_out): the head's multiply
  // over the tied embedding once more, on the table the head already reads.
  double soft_embedding_rows = 0;
};

// What one pass of a model reads and computes, from its tensor views (works for synthetic models too),
// counted in the weights' stored (file) types.
struct ModelFootprint {
  int64_t parameters = 0, bytes = 0;                // every tensor; a tied head counted once
  int64_t dense_parameters = 0, dense_bytes = 0;    // multiplied by every row: attention, dense MLP, router
  int64_t expert_parameters = 0, expert_bytes = 0;  // one expert (gate + up + down), summed over layers
  int64_t n_experts = 0, experts_used = 0;
  int64_t output_parameters = 0, output_bytes = 0;  // the head, multiplied by logit rows only
  int64_t self_cond_parameters = 0, self_cond_bytes = 0;  // the self-conditioning MLP (gate, up, down)
  int64_t embedding_parameters = 0, embedding_bytes = 0;  // the token embedding E
  DType weight_type = DType::F32;                   // the dtype holding most of the layer weight bytes

  // Weight bytes one pass streams when `rows` rows are forwarded and `logit_rows` of them produce
  // logits. With experts, the expected number of distinct experts hit by `rows` rows that each pick
  // experts_used of n_experts uniformly: E (1 - (1 - K/E)^rows) (one row: K; 256 rows of 8 of 128: all).
  // The self-conditioning MLP and E for its soft embedding are read when some rows need them.
  double pass_bytes(const PassRows& pass) const;
  double pass_bytes(double rows, double logit_rows) const { return pass_bytes(PassRows{rows, logit_rows}); }
  // 2 x the multiply-adds of every matmul in the pass (attention scores are not counted).
  double pass_flops(const PassRows& pass) const;
  double pass_flops(double rows, double logit_rows) const { return pass_flops(PassRows{rows, logit_rows}); }
};
ModelFootprint model_footprint(const Model& model);

struct BenchOptions {
  int64_t prompt_tokens = 32;  // random ids (seeded), never the mask
  int64_t new_tokens = 64;
  bool run_ar = true, run_diffusion = true;
  std::vector<CacheMode> caches = {CacheMode::None, CacheMode::Prefix, CacheMode::Dual};
  std::vector<int64_t> block_lengths = {32};  // each clamped to new_tokens
  std::vector<int64_t> steps;                 // total steps; empty: new_tokens (one token per pass)
  std::vector<float> thresholds;              // each adds Fast-dLLM threshold rows (steps then unused)
  std::vector<int> threads = {0};             // 0: all cores
  int warmup = 1, repeats = 3;
  uint64_t seed = 0;
  bool measure_roofs = true;
  RoofOptions roof;
  // The GPU the passes run on (--device cuda), with its floors measured before the run: every row is then
  // also reported as a fraction of its floor, and the device's memory is sampled after every forward.
  std::optional<DeviceFloors> device;
  // After the repeats, one more request of every grid point with the device's per-op timing on
  // (device->profile): where its passes' device time goes. Needs a device that profiles.
  bool profile = false;
};

struct BenchModelInfo {
  std::string source;  // the GGUF path, or "synthetic llada:8b"
  int64_t layers_total = 0;  // before --layers cut the depth
};

// The model a bench runs: a GGUF file (memory-mapped) or one of synthetic_shapes() built in memory with
// random weights of `type`, cut to its first `layers` layers when layers > 0.
struct BenchModelSpec {
  std::string file;       // a GGUF model, or
  std::string synthetic;  // a synthetic shape's name ("llada:8b")
  DType type = DType::Q4_0;  // synthetic weights only
  int64_t layers = 0;
  uint64_t seed = 0;  // of the synthetic weights
};
struct BenchModel {
  Model file_model;
  std::unique_ptr<SyntheticModel> synthetic;
  BenchModelInfo info;
  double build_seconds = 0;  // building the synthetic weights

  Model& model() { return synthetic ? synthetic->model : file_model; }
  const Model& model() const { return synthetic ? synthetic->model : file_model; }
  int64_t weight_bytes() const { return synthetic ? synthetic->bytes : file_model.weight_bytes(); }
};
// Throws Error unless exactly one of file and synthetic is given, for an unknown shape, or for more
// layers than the file has.
BenchModel open_bench_model(const BenchModelSpec& spec);

struct MachineInfo {
  std::string cpu;
  int cores = 0;
  std::string simd;
  double memory_gib = 0;
  std::string date;  // UTC, ISO 8601
};
MachineInfo describe_machine();

// One grid point. Every number is the median over the repeats; NaN where it does not apply
// (prompt tokens/s without a prompt pass, fractions without roofs, the ratio without an AR row).
struct BenchRow {
  std::string mode;   // "ar" | "diffusion"
  std::string cache;  // "none" | "prefix" | "dual" ("" for ar)
  int64_t block_length = 0, steps = 0;
  float threshold = 0;
  int threads = 0;
  double passes = 0;            // decoding passes per request (the AR prompt pass excluded)
  double prompt_tokens_per_s = 0;
  double decode_tokens_per_s = 0;
  double ms_per_pass = 0;
  double tokens_per_forward = 0;  // tokens fixed per decoding pass (JSON: also as tokens_per_pass)
  double rows_per_pass = 0;     // positions forwarded per decoding pass
  double latency_p50_ms = 0, latency_p95_ms = 0;  // one request: prompt + decode, wall clock
  double peak_rss_mib = 0;      // the process's peak resident memory during this row's requests
  double gbs = 0, gbs_fraction = 0;        // weight bytes read / decode time; / the stream-read roof
  double gflops = 0, gflops_fraction = 0;  // matmul FLOPs / decode time; / the matmul roof
  double gflops_roof = 0;                  // the matmul roof used (its dtype, nearest row count)
  double speedup_vs_ar = 0;     // decode tokens/s over the AR row's at the same thread count
  // With a device: the least ms a decoding pass can take there (its passes' pass_floor_ms, summed, over
  // their count) and that over ms_per_pass; NaN without one.
  double floor_ms_per_pass = 0, fraction_of_floor = 0;
  std::optional<DeviceProfile> profile;  // BenchOptions::profile: its one profiled request, every pass
  std::vector<int32_t> tokens;  // the tokens of the row's last run (for checks; not in the reports)
  std::string label() const;    // "diffusion prefix B=32 steps=64" / "ar"
};

struct BenchReport {
  MachineInfo machine;
  BenchModelInfo model_info;
  ModelConfig config;
  ModelFootprint footprint;
  BenchOptions options;
  std::vector<Roofs> roofs;  // one per thread count
  std::vector<int32_t> prompt;  // the random prompt every row decodes after
  std::vector<BenchRow> rows;
  std::vector<std::string> notes;  // grid points skipped and why
  std::optional<DeviceFloors> device;  // options.device, its memory peak updated by the run
};

// Runs the roofs (if asked) and then the grid, round-robin: every grid point once per repeat, so slow
// drift on a shared machine spreads over all rows instead of biasing one. `progress` gets one line per
// stage (may be empty).
BenchReport run_bench(const Model& model, const BenchModelInfo& info, const BenchOptions& options,
                      const std::function<void(const std::string&)>& progress = {});

nlohmann::json report_json(const BenchReport& report);
std::string report_table(const BenchReport& report);

// Peak resident memory. reset_peak_rss() restarts the count (Linux /proc/self/clear_refs) and returns
// false where that is not possible; peak_rss_bytes() reads VmHWM (getrusage as a fallback).
bool reset_peak_rss();
int64_t peak_rss_bytes();

}  // namespace canvas::bench
