// The model benchmark grid, its per-pass accounting, and its reports.
#include "bench/harness.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "bench/stats.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/timer.h"
#include "decode/generation.h"

namespace canvas::bench {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

const char* cache_name(CacheMode mode) {
  switch (mode) {
    case CacheMode::None: return "none";
    case CacheMode::Prefix: return "prefix";
    case CacheMode::Dual: return "dual";
  }
  return "?";
}

// One request's measurements.
struct Sample {
  double wall_ms = 0, prompt_ms = 0, decode_ms = 0;
  double passes = 0;        // decoding passes
  double decode_tokens = 0;
  double fixed_tokens = 0;  // tokens fixed by the decoding passes
  double rows = 0;          // rows forwarded by the decoding passes
  double bytes = 0, flops = 0;
  double floor_ms = 0;  // with a device: the decoding passes' floors, summed
  double peak_rss = 0;
  int64_t forwards = 0;  // forward passes of the request, the prompt's included
};

struct GridPoint {
  bool ar = false;
  CacheMode cache = CacheMode::None;
  int64_t block_length = 0, steps = 0;
  float threshold = 0;
  int threads = 0;  // the pool's actual size
  GenerationRequest request;
  std::vector<Sample> warmups, samples;
  std::optional<DeviceProfile> profile;
  std::vector<int32_t> tokens;  // the last run's
};

// The request a grid point runs: what `canvas generate` runs with the same options (--mode, -n, --cache,
// --block-length, --steps, --threshold, --seed), on the prompt's ids.
GenerationRequest request_of(const GridPoint& g, const std::vector<int32_t>& prompt, int64_t n,
                             uint64_t seed) {
  GenerationRequest r;
  r.prompt = prompt;
  r.mode = g.ar ? DecodeMode::Ar : DecodeMode::Diffusion;
  r.max_new_tokens = n;
  r.ignore_eos = true;  // random weights may pick EOS at any step; the bench wants all n tokens
  r.sampling.seed = seed;
  if (!g.ar) {
    r.masked.cache = g.cache;
    r.diffusion.block_length = g.block_length;
    r.diffusion.steps = g.threshold > 0 ? 0 : g.steps;
    r.masked.threshold = g.threshold;
  }
  return r;
}

// One request through the Generator. Its forward hook counts what each pass forwards (rows), asks logits
// of (logit rows) and self-conditions, from which the pass's weight bytes and FLOPs follow (and, with a
// device, its floor; the device's memory is sampled after each forward); passes, tokens and times are the
// GenerationOutput's.
Sample run_request(const Generator& generator, const ModelFootprint& fp, const GenerationRequest& request,
                   ThreadPool* pool, std::vector<int32_t>* tokens, DeviceFloors* device) {
  std::vector<PassRows> forwarded;
  GenerationRequest r = request;
  r.forward = [&forwarded, device](const Model& m, KvCache& cache, std::span<const ForwardRequest> reqs,
                                   ThreadPool* p) {
    PassRows pass;
    for (const ForwardRequest& req : reqs) {
      const double n = double(req.n), logit_rows = double(req.logit_rows.size());
      pass.rows += n;
      pass.logit_rows += logit_rows;
      if (req.self_cond || req.self_cond_soft) pass.self_cond_rows += n;
      if (req.self_cond) pass.self_cond_logit_rows += n;
      if (req.soft_embedding_out) pass.soft_embedding_rows += logit_rows;
    }
    forwarded.push_back(pass);
    forward_on(m, cache, reqs, p);
    if (device) device->sample_memory();
  };
  const double t0 = now_ms();
  GenerationOutput out = generator.run(r, pool);
  Sample s;
  s.wall_ms = now_ms() - t0;
  s.prompt_ms = out.prompt_ms;
  s.decode_ms = out.decode_ms;
  // The decoding passes are the last ones: the prompt's pass comes first (a masked run with a cache) or is
  // AR's first pass, which also yields the first token and is timed as the prompt (decode_tokens leaves its
  // token out).
  const int64_t decoding = out.mode == DecodeMode::Ar ? out.passes - 1 : out.passes;
  check(decoding >= 0 && decoding <= int64_t(forwarded.size()),
        "bench: the run's passes and its forwards disagree");
  for (size_t i = forwarded.size() - size_t(decoding); i < forwarded.size(); ++i) {
    const PassRows& pass = forwarded[i];
    const double bytes = fp.pass_bytes(pass), flops = fp.pass_flops(pass);
    s.rows += pass.rows;
    s.bytes += bytes;
    s.flops += flops;
    if (device) s.floor_ms += device->floor_ms(bytes, flops, fp.weight_type);
  }
  s.passes = double(decoding);
  s.forwards = int64_t(forwarded.size());
  s.decode_tokens = double(out.decode_tokens);
  s.fixed_tokens = s.decode_tokens;
  *tokens = std::move(out.tokens);
  return s;
}

template <typename F>
double median_of(const std::vector<Sample>& samples, F field) {
  std::vector<double> v;
  for (const Sample& s : samples) v.push_back(field(s));
  return median(v);
}

std::string format_double(double v, int decimals) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// A value with its fraction of a roof: "36.1 (74%)".
std::string with_fraction(double v, double fraction, int decimals) {
  std::string s = format_double(v, decimals);
  if (std::isfinite(fraction)) s += " (" + format_double(100 * fraction, 0) + "%)";
  return s;
}

std::string read_first_line_with(const std::string& path, const std::string& prefix) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(prefix, 0) == 0) return line;
  return "";
}

}  // namespace

// ---- footprint -------------------------------------------------------------------------------------

double ModelFootprint::pass_bytes(const PassRows& pass) const {
  double b = double(dense_bytes);
  if (n_experts > 0 && pass.rows > 0) {
    const double e = double(n_experts), k = double(experts_used);
    const double distinct = e * (1.0 - std::pow(1.0 - k / e, pass.rows));
    b += distinct * double(expert_bytes);  // expert_bytes: one expert's bytes over all layers
  }
  if (pass.logit_rows > 0) b += double(output_bytes);
  if (pass.self_cond_rows > 0) b += double(self_cond_bytes);
  if (pass.self_cond_logit_rows > 0) b += double(embedding_bytes);
  return b;
}

double ModelFootprint::pass_flops(const PassRows& pass) const {
  return 2.0 * (double(dense_parameters) * pass.rows + double(experts_used) * double(expert_parameters) * pass.rows +
                double(output_parameters) * pass.logit_rows + double(self_cond_parameters) * pass.self_cond_rows +
                double(embedding_parameters) * (pass.self_cond_logit_rows + pass.soft_embedding_rows));
}

ModelFootprint model_footprint(const Model& model) {
  const ModelConfig& c = model.config;
  ModelFootprint f;
  std::map<DType, int64_t> bytes_by_type;
  auto count = [&](const TensorView& t) {
    if (!t.data) return;
    f.parameters += t.elements();
    f.bytes += t.bytes();
  };
  auto dense = [&](const TensorView& t) {
    if (!t.data) return;
    count(t);
    f.dense_parameters += t.elements();
    f.dense_bytes += t.bytes();
    bytes_by_type[interleaved_base(t.type)] += t.bytes();  // the file type, whatever the layout
  };
  auto experts = [&](const TensorView& t) {
    if (!t.data) return;
    count(t);
    f.expert_parameters += t.elements() / std::max<int64_t>(1, c.n_experts);
    f.expert_bytes += t.bytes() / std::max<int64_t>(1, c.n_experts);
    bytes_by_type[interleaved_base(t.type)] += t.bytes();  // the file type, whatever the layout
  };
  count(model.token_embd);  // looked up by row, streamed whole only for a soft embedding
  f.embedding_parameters = model.token_embd.elements();
  f.embedding_bytes = model.token_embd.bytes();
  count(model.output_norm);
  count(model.position_embd);
  if (!c.tied_output) count(model.output);
  f.output_parameters = model.output.elements();
  f.output_bytes = model.output.bytes();
  const SelfConditioningWeights& sc = model.self_conditioning;
  count(sc.pre_norm);
  for (const TensorView* t : {&sc.gate, &sc.up, &sc.down}) {
    if (!t->data) continue;
    count(*t);
    f.self_cond_parameters += t->elements();
    f.self_cond_bytes += t->bytes();
  }
  for (const LayerWeights& w : model.layers) {
    for (const TensorView* t : {&w.attn_norm, &w.ffn_norm, &w.bq, &w.bk, &w.bv}) count(*t);
    for (const TensorView* t : {&w.wq, &w.wk, &w.wv, &w.wo, &w.gate, &w.up, &w.down, &w.router}) dense(*t);
    for (const TensorView* t : {&w.gate_exps, &w.up_exps, &w.gate_up_exps, &w.down_exps}) experts(*t);
  }
  f.n_experts = c.n_experts;
  f.experts_used = c.n_experts_used;
  int64_t most = -1;
  for (const auto& [type, b] : bytes_by_type)
    if (b > most) {
      most = b;
      f.weight_type = type;
    }
  return f;
}

// ---- machine and memory ----------------------------------------------------------------------------

MachineInfo describe_machine() {
  MachineInfo m;
  const std::string model_line = read_first_line_with("/proc/cpuinfo", "model name");
  const size_t colon = model_line.find(':');
  m.cpu = colon == std::string::npos ? "unknown" : model_line.substr(colon + 2);
  m.cores = int(std::thread::hardware_concurrency());
  m.simd = simd_level_name(simd_level());
  const std::string mem = read_first_line_with("/proc/meminfo", "MemTotal:");
  if (!mem.empty()) m.memory_gib = std::atof(mem.c_str() + 9) / 1048576.0;
  char buf[32];
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &utc);
  m.date = buf;
  return m;
}

bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  if (!out) return false;
  out << "5";
  out.flush();
  return bool(out);
}

int64_t peak_rss_bytes() {
  const std::string line = read_first_line_with("/proc/self/status", "VmHWM:");
  if (!line.empty()) return int64_t(std::atoll(line.c_str() + 6)) * 1024;
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return int64_t(usage.ru_maxrss) * 1024;
}

// ---- the grid --------------------------------------------------------------------------------------

std::string BenchRow::label() const {
  if (mode == "ar") return "ar";
  std::string s = "diffusion " + cache + " B=" + std::to_string(block_length);
  if (threshold > 0) return s + " threshold=" + format_double(threshold, 2);
  return s + " steps=" + std::to_string(steps);
}

BenchReport run_bench(const Model& model, const BenchModelInfo& info, const BenchOptions& options,
                      const std::function<void(const std::string&)>& progress) {
  const ModelConfig& c = model.config;
  const int64_t P = options.prompt_tokens, N = options.new_tokens;
  check(P >= 1, "the prompt must have at least one token (-p)");
  check(N >= 1, "the number of new tokens must be positive (-n)");
  check(P + N + 1 <= c.context_length, "prompt (" + std::to_string(P) + ") + new tokens (" + std::to_string(N) +
                                           ") exceed the model's context length " + std::to_string(c.context_length));
  check(options.repeats >= 1, "--repeats must be at least 1");
  check(options.warmup >= 0, "--warmup must not be negative");
  check(!options.threads.empty(), "no thread counts given");
  check(options.run_ar || options.run_diffusion, "no mode to run (--modes)");
  auto say = [&](const std::string& line) {
    if (progress) progress(line);
  };

  BenchReport report;
  report.machine = describe_machine();
  report.model_info = info;
  report.config = c;
  report.footprint = model_footprint(model);
  report.options = options;
  report.device = options.device;
  DeviceFloors* device = report.device ? &*report.device : nullptr;
  check(!options.profile || (device && device->profile), "--profile needs a device that profiles (--device cuda)");

  // Pools by thread count (0 = all cores), each created once.
  std::map<int, std::unique_ptr<ThreadPool>> pools;
  std::vector<int> thread_counts;
  for (int t : options.threads) {
    check(t >= 0 && t <= 1024, "thread counts must be between 0 and 1024");
    auto pool = std::make_unique<ThreadPool>(t);
    const int size = pool->size();
    if (pools.count(size)) continue;
    pools[size] = std::move(pool);
    thread_counts.push_back(size);
  }

  // With a device the passes run there, and its floors (measured by the caller) are the roofs.
  if (options.measure_roofs && !device) {
    for (int t : thread_counts) {
      say("measuring roofs with " + std::to_string(t) + " threads");
      report.roofs.push_back(measure_roofs(*pools[t], options.roof));
    }
  }

  // Prompt: seeded random ids, never the mask.
  Rng rng(options.seed + 17);
  std::vector<int32_t> prompt(static_cast<size_t>(P));
  for (int32_t& id : prompt) {
    do id = int32_t(rng.below(uint64_t(c.vocab)));
    while (id == c.mask_token && c.vocab > 1);
  }
  report.prompt = prompt;

  // The one generation path: every grid point is a GenerationRequest the Generator runs, as `canvas generate`
  // runs it. No tokenizer (the prompt is ids) and the default sampler settings (the grid runs AR and masked
  // diffusion, which read none of them).
  const Generator generator(model, nullptr, SamplerDefaults{});
  std::vector<GridPoint> grid;
  // Points given twice (e.g. two block lengths that both clamp to -n) are run once.
  auto add = [&grid](const GridPoint& g) {
    for (const GridPoint& h : grid)
      if (h.ar == g.ar && h.cache == g.cache && h.block_length == g.block_length && h.steps == g.steps &&
          h.threshold == g.threshold && h.threads == g.threads)
        return;
    grid.push_back(g);
  };
  // A diffusion point as the Generator will run it (its block length and steps resolved by the Generator's
  // rules), or a note saying why the Generator refuses it.
  auto add_diffusion = [&](GridPoint g) {
    g.request = request_of(g, prompt, N, options.seed);
    try {
      generator.check(g.request, P);
    } catch (const Error& e) {
      BenchRow row;
      row.mode = "diffusion";
      row.cache = cache_name(g.cache);
      row.block_length = g.block_length;
      row.steps = g.steps;
      row.threshold = g.threshold;
      report.notes.push_back(row.label() + " skipped: " + e.what());
      return;
    }
    const MaskedDiffusionParams plan = generator.masked_params(g.request, N, P);
    g.block_length = plan.block_length;
    g.steps = plan.steps;
    add(g);
  };
  for (int t : thread_counts) {
    if (options.run_ar) {
      GridPoint g;
      g.ar = true;
      g.threads = t;
      g.request = request_of(g, prompt, N, options.seed);
      generator.check(g.request, P);  // a bad -p / -n is an error, not a skipped point
      add(g);
    }
    if (!options.run_diffusion) continue;
    if (c.mask_token < 0 || c.mask_token >= c.vocab) {
      report.notes.push_back("diffusion skipped: the model has no mask token");
      continue;
    }
    for (CacheMode cache : options.caches)
      for (int64_t block : options.block_lengths) {
        check(block > 0, "block lengths must be positive");
        // The grid keeps to whole blocks (generate would pad the last one and decode the padding too, which
        // the -n tokens the speeds count leave out).
        const int64_t B = std::min(block, N);
        if (N % B != 0) {
          report.notes.push_back("block length " + std::to_string(B) + " skipped: " + std::to_string(N) +
                                 " new tokens are not a multiple of it");
          continue;
        }
        std::vector<int64_t> steps = options.steps.empty() ? std::vector<int64_t>{0} : options.steps;
        for (int64_t s : steps) {
          GridPoint g;
          g.cache = cache;
          g.block_length = B;
          g.steps = s;  // 0: the Generator's default (one token per step)
          g.threads = t;
          add_diffusion(g);
        }
        for (float th : options.thresholds) {
          check(th > 0 && th <= 1, "thresholds must be in (0, 1]");
          GridPoint g;
          g.cache = cache;
          g.block_length = B;
          g.threshold = th;
          g.threads = t;
          add_diffusion(g);
        }
      }
  }
  check(!grid.empty(), "the grid is empty: every point was skipped (" +
                           (report.notes.empty() ? std::string("no points") : report.notes.front()) + ")");

  const ModelFootprint& fp = report.footprint;
  auto run_point = [&](GridPoint& g) {
    ThreadPool* pool = pools[g.threads].get();
    reset_peak_rss();
    Sample s = run_request(generator, fp, g.request, pool, &g.tokens, device);
    s.peak_rss = double(peak_rss_bytes());
    return s;
  };
  // Progress: runs done of all (warm-up and repeats), their rate and the time left at that rate.
  const int64_t runs_total = int64_t(grid.size()) * (options.warmup + options.repeats);
  int64_t runs_done = 0;
  const double runs_start = now_ms();
  auto count_run = [&] {
    ++runs_done;
    const double seconds = (now_ms() - runs_start) / 1000.0, rate = seconds > 0 ? double(runs_done) / seconds : 0;
    char line[160];
    std::snprintf(line, sizeof line, "%lld/%lld runs, %.2f runs/s, ETA %.0f s", (long long)runs_done,
                  (long long)runs_total, rate, rate > 0 ? double(runs_total - runs_done) / rate : 0.0);
    say(line);
  };
  for (int w = 0; w < options.warmup; ++w)
    for (GridPoint& g : grid) {
      say("warm-up " + std::to_string(w + 1) + "/" + std::to_string(options.warmup) + ": " +
          (g.ar ? std::string("ar") : std::string("diffusion ") + cache_name(g.cache)) + ", " +
          std::to_string(g.threads) + " threads");
      g.warmups.push_back(run_point(g));
      count_run();
    }
  for (int r = 0; r < options.repeats; ++r) {
    say("repeat " + std::to_string(r + 1) + "/" + std::to_string(options.repeats) + " over " +
        std::to_string(grid.size()) + " grid points");
    for (GridPoint& g : grid) {
      g.samples.push_back(run_point(g));
      count_run();
    }
  }

  // One more request of each grid point with the device's per-op timing on.
  for (GridPoint& g : grid) {
    if (!options.profile) break;
    DeviceProfile profile;
    profile.what = g.ar ? std::string("ar") : std::string("diffusion ") + cache_name(g.cache);
    say("profile: " + profile.what + ", " + std::to_string(g.threads) + " threads");
    Sample s;
    const double start = now_ms();
    profile.ops = device->profile([&] { s = run_point(g); });
    profile.wall_ms = now_ms() - start;
    profile.passes = s.forwards;
    g.profile = std::move(profile);
  }

  const bool floors_measured = device && device->floors_measured(fp.weight_type);
  std::map<int, double> ar_speed;
  for (const GridPoint& g : grid) {
    BenchRow row;
    row.mode = g.ar ? "ar" : "diffusion";
    row.cache = g.ar ? "" : cache_name(g.cache);
    row.block_length = g.block_length;
    row.steps = g.steps;
    row.threshold = g.threshold;
    row.threads = g.threads;
    row.tokens = g.tokens;
    row.profile = g.profile;
    const auto& s = g.samples;
    row.passes = median_of(s, [](const Sample& x) { return x.passes; });
    const bool has_prompt_pass = g.ar || g.cache != CacheMode::None;
    row.prompt_tokens_per_s =
        has_prompt_pass ? median_of(s, [&](const Sample& x) { return x.prompt_ms > 0 ? double(P) * 1000.0 / x.prompt_ms : kNaN; })
                        : kNaN;
    row.decode_tokens_per_s =
        median_of(s, [](const Sample& x) { return x.decode_ms > 0 ? x.decode_tokens * 1000.0 / x.decode_ms : kNaN; });
    row.ms_per_pass = median_of(s, [](const Sample& x) { return x.passes > 0 ? x.decode_ms / x.passes : kNaN; });
    row.tokens_per_forward =
        median_of(s, [](const Sample& x) { return x.passes > 0 ? x.fixed_tokens / x.passes : kNaN; });
    row.rows_per_pass = median_of(s, [](const Sample& x) { return x.passes > 0 ? x.rows / x.passes : kNaN; });
    std::vector<double> latency, rss;
    for (const Sample& x : s) {
      latency.push_back(x.wall_ms);
      rss.push_back(x.peak_rss);
    }
    row.latency_p50_ms = percentile(latency, 50);
    row.latency_p95_ms = percentile(latency, 95);
    row.peak_rss_mib = *std::max_element(rss.begin(), rss.end()) / 1048576.0;
    row.gbs = median_of(s, [](const Sample& x) { return x.decode_ms > 0 ? x.bytes / (x.decode_ms * 1e6) : kNaN; });
    row.gflops = median_of(s, [](const Sample& x) { return x.decode_ms > 0 ? x.flops / (x.decode_ms * 1e6) : kNaN; });
    row.gbs_fraction = row.gflops_fraction = row.gflops_roof = row.floor_ms_per_pass = row.fraction_of_floor = kNaN;
    if (device) {  // the passes ran there: its roofs are theirs
      if (floors_measured) {
        row.floor_ms_per_pass = median_of(s, [](const Sample& x) { return x.passes > 0 ? x.floor_ms / x.passes : kNaN; });
        row.fraction_of_floor = median_of(s, [](const Sample& x) { return fraction_of_floor(x.floor_ms, x.decode_ms); });
      }
      if (device->read_gbps > 0) row.gbs_fraction = row.gbs / device->read_gbps;
      const double roof = device->gemm_tflops_for(fp.weight_type) * 1000;
      if (roof > 0) {
        row.gflops_roof = roof;
        row.gflops_fraction = row.gflops / roof;
      }
    }
    for (const Roofs& roofs : report.roofs) {
      if (roofs.threads != g.threads) continue;
      if (roofs.stream_gbs > 0) row.gbs_fraction = row.gbs / roofs.stream_gbs;
      const double roof = roofs.matmul_gflops(fp.weight_type, row.rows_per_pass);
      if (roof > 0) {
        row.gflops_roof = roof;
        row.gflops_fraction = row.gflops / roof;
      }
    }
    if (g.ar) ar_speed[g.threads] = row.decode_tokens_per_s;
    report.rows.push_back(row);
  }
  for (BenchRow& row : report.rows) {
    auto it = ar_speed.find(row.threads);
    row.speedup_vs_ar = it != ar_speed.end() && it->second > 0 ? row.decode_tokens_per_s / it->second : kNaN;
  }
  return report;
}

// ---- reports ---------------------------------------------------------------------------------------

nlohmann::json report_json(const BenchReport& report) {
  using nlohmann::json;
  // NaN (not applicable) becomes null.
  auto num = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
  json j;
  j["format"] = "canvas-bench-1";
  const MachineInfo& m = report.machine;
  j["machine"] = {{"cpu", m.cpu}, {"cores", m.cores}, {"simd", m.simd}, {"memory_gib", num(m.memory_gib)},
                  {"date", m.date}};
  const ModelConfig& c = report.config;
  const ModelFootprint& f = report.footprint;
  j["model"] = {{"source", report.model_info.source},
                {"arch", c.arch},
                {"layers", c.n_layers},
                {"layers_total", report.model_info.layers_total},
                {"hidden", c.hidden},
                {"heads", c.n_heads},
                {"kv_heads", c.n_kv_heads},
                {"ffn", c.ffn},
                {"experts", c.n_experts},
                {"experts_used", c.n_experts_used},
                {"vocab", c.vocab},
                {"weight_type", dtype_name(f.weight_type)},
                {"parameters", f.parameters},
                {"bytes", f.bytes},
                {"dense_parameters", f.dense_parameters},
                {"output_parameters", f.output_parameters}};
  const BenchOptions& o = report.options;
  j["settings"] = {{"prompt_tokens", o.prompt_tokens}, {"new_tokens", o.new_tokens}, {"warmup", o.warmup},
                   {"repeats", o.repeats}, {"seed", o.seed}};
  j["roofs"] = json::array();
  for (const Roofs& r : report.roofs) {
    json mm = json::array();
    for (const MatmulRoof& x : r.matmul)
      mm.push_back({{"type", dtype_name(x.type)}, {"m", x.m}, {"n", x.n}, {"k", x.k}, {"ms", num(x.ms)},
                    {"gflops", num(x.gflops)}, {"gbs", num(x.gbs)}});
    j["roofs"].push_back({{"threads", r.threads}, {"stream_bytes", r.stream_bytes},
                          {"stream_read_gbs", num(r.stream_gbs)}, {"fp32_fma_gflops", num(r.fma_gflops)},
                          {"matmul", mm}});
  }
  if (report.device) j["device"] = json(device_floors_json(*report.device));
  j["rows"] = json::array();
  for (const BenchRow& r : report.rows) {
    json row = {{"label", r.label()},
                {"mode", r.mode},
                {"threads", r.threads},
                {"passes", num(r.passes)},
                {"prompt_tokens_per_s", num(r.prompt_tokens_per_s)},
                {"decode_tokens_per_s", num(r.decode_tokens_per_s)},
                {"ms_per_pass", num(r.ms_per_pass)},
                {"tokens_per_pass", num(r.tokens_per_forward)},  // the older name, kept for readers of it
                {"tokens_per_forward", num(r.tokens_per_forward)},
                {"rows_per_pass", num(r.rows_per_pass)},
                {"latency_p50_ms", num(r.latency_p50_ms)},
                {"latency_p95_ms", num(r.latency_p95_ms)},
                {"peak_rss_mib", num(r.peak_rss_mib)},
                {"gbs", num(r.gbs)},
                {"gbs_fraction", num(r.gbs_fraction)},
                {"gflops", num(r.gflops)},
                {"gflops_fraction", num(r.gflops_fraction)},
                {"gflops_roof", num(r.gflops_roof)},
                {"speedup_vs_ar", num(r.speedup_vs_ar)}};
    if (report.device) {
      row["floor_ms_per_pass"] = num(r.floor_ms_per_pass);
      row["fraction_of_floor"] = num(r.fraction_of_floor);
    }
    if (r.profile) row["device_profile"] = json(device_profile_json(*r.profile));
    if (r.mode == "diffusion") {
      row["cache"] = r.cache;
      row["block_length"] = r.block_length;
      if (r.threshold > 0) {
        row["threshold"] = r.threshold;
      } else {
        row["steps"] = r.steps;
      }
    }
    j["rows"].push_back(row);
  }
  j["notes"] = report.notes;
  return j;
}

std::string report_table(const BenchReport& report) {
  std::ostringstream out;
  const ModelConfig& c = report.config;
  const ModelFootprint& f = report.footprint;
  char buf[512];
  std::snprintf(buf, sizeof buf, "machine: %s, %d cores, %s, %.1f GiB, %s\n", report.machine.cpu.c_str(),
                report.machine.cores, report.machine.simd.c_str(), report.machine.memory_gib,
                report.machine.date.c_str());
  out << buf;
  std::snprintf(buf, sizeof buf,
                "model: %s (%s, %lld of %lld layers, hidden %lld, vocab %lld), %.3f B parameters, %s, %.1f MiB\n",
                report.model_info.source.c_str(), c.arch.c_str(), (long long)c.n_layers,
                (long long)report.model_info.layers_total, (long long)c.hidden, (long long)c.vocab,
                double(f.parameters) * 1e-9, dtype_name(f.weight_type), double(f.bytes) / 1048576.0);
  out << buf;
  std::snprintf(buf, sizeof buf, "prompt %lld tokens, %lld new tokens, %d warm-up + %d repeats (medians)\n",
                (long long)report.options.prompt_tokens, (long long)report.options.new_tokens,
                report.options.warmup, report.options.repeats);
  out << buf;
  for (const Roofs& r : report.roofs) {
    std::snprintf(buf, sizeof buf,
                  "roofs, %d threads: stream read %.1f GB/s (%lld MiB); fp32 FMA %.0f GFLOP/s; matmul GFLOP/s",
                  r.threads, r.stream_gbs, (long long)(r.stream_bytes >> 20), r.fma_gflops);
    out << buf;
    DType last = DType::I64;
    for (const MatmulRoof& m : r.matmul) {
      if (m.type != last) {
        std::snprintf(buf, sizeof buf, "%s %s [%lldx%lld]", last == DType::I64 ? ":" : ";", dtype_name(m.type),
                      (long long)m.n, (long long)m.k);
        out << buf;
        last = m.type;
      }
      std::snprintf(buf, sizeof buf, " m=%lld %.0f", (long long)m.m, m.gflops);
      out << buf;
    }
    out << "\n";
  }
  if (report.device) out << device_floors_text(*report.device);
  out << "\n";
  std::vector<std::string> head = {"mode", "t", "passes", "tok/pass", "rows/pass", "ms/pass", "prompt tok/s",
                                         "decode tok/s", "vs AR", "p50 ms", "p95 ms", "GB/s (roof)",
                                         "GFLOP/s (roof)", "RSS MiB"};
  std::vector<std::vector<std::string>> cells;
  for (const BenchRow& r : report.rows) {
    cells.push_back({r.label(), std::to_string(r.threads), format_double(r.passes, 0),
                     format_double(r.tokens_per_forward, 2), format_double(r.rows_per_pass, 1),
                     format_double(r.ms_per_pass, 2), format_double(r.prompt_tokens_per_s, 1),
                     format_double(r.decode_tokens_per_s, 2),
                     std::isfinite(r.speedup_vs_ar) ? format_double(r.speedup_vs_ar, 2) + "x" : "-",
                     format_double(r.latency_p50_ms, 1), format_double(r.latency_p95_ms, 1),
                     with_fraction(r.gbs, r.gbs_fraction, 1), with_fraction(r.gflops, r.gflops_fraction, 1),
                     format_double(r.peak_rss_mib, 0)});
    if (report.device) cells.back().push_back(with_fraction(r.floor_ms_per_pass, r.fraction_of_floor, 2));
  }
  if (report.device) head.push_back("floor ms/pass (of pass)");
  std::vector<size_t> width(head.size());
  for (size_t i = 0; i < head.size(); ++i) {
    width[i] = head[i].size();
    for (const auto& row : cells) width[i] = std::max(width[i], row[i].size());
  }
  auto line = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size(); ++i) {
      const size_t pad = width[i] - row[i].size();
      if (i == 0) {
        out << row[i] << std::string(pad, ' ');  // labels left-aligned, numbers right-aligned
      } else {
        out << "  " << std::string(pad, ' ') << row[i];
      }
    }
    out << "\n";
  };
  line(head);
  for (const auto& row : cells) line(row);
  bool profiled = false;
  for (const BenchRow& row : report.rows) {
    if (!row.profile) continue;
    if (!profiled) out << "one more request of each row with per-op device timing:\n";
    profiled = true;
    out << device_profile_text(*row.profile);
  }
  for (const std::string& note : report.notes) out << "note: " << note << "\n";
  return out.str();
}

BenchModel open_bench_model(const BenchModelSpec& spec) {
  check(spec.file.empty() != spec.synthetic.empty(),
        "give exactly one of -m MODEL.gguf and --synthetic ARCH:SIZE; see canvas bench --help");
  check(spec.layers >= 0, "--layers must not be negative");
  BenchModel b;
  if (!spec.synthetic.empty()) {
    const SyntheticShape& shape = find_synthetic_shape(spec.synthetic);
    SyntheticOptions options;
    options.type = spec.type;
    options.layers = spec.layers;
    options.seed = spec.seed;
    ThreadPool pool(0);
    const double t0 = now_ms();
    b.synthetic = build_synthetic_model(shape, options, &pool);
    b.build_seconds = (now_ms() - t0) / 1000;
    b.info.source = "synthetic " + shape.name;
    b.info.layers_total = shape.config.n_layers;
    return b;
  }
  b.file_model = Model::load(spec.file);
  b.info.source = spec.file;
  b.info.layers_total = b.file_model.config.n_layers;
  if (spec.layers > 0) {
    check(spec.layers <= b.file_model.config.n_layers, "--layers " + std::to_string(spec.layers) +
                                                           ": the model has only " +
                                                           std::to_string(b.file_model.config.n_layers) + " layers");
    b.file_model.layers.resize(size_t(spec.layers));
    b.file_model.config.n_layers = spec.layers;
  }
  return b;
}

}  // namespace canvas::bench
