// canvas bench --device cuda's floors, host side: the floor arithmetic, what a pass of each kind reads and
// computes, and the reports' device fields, from given roofs (no GPU is needed or touched).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>
#include <nlohmann/json.hpp>

#include "bench/decoder_passes.h"
#include "bench/device_floors.h"
#include "bench/harness.h"
#include "bench/synthetic.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "model/model.h"
#include "test_util.h"

namespace canvas {
namespace {

using bench::DeviceFloors;
using bench::PassRows;

// Roofs of a made-up device: 1000 GB/s, 100 TFLOP/s on f16, 10 on f32.
DeviceFloors made_up_device() {
  DeviceFloors d;
  d.name = "made-up GPU";
  d.memory_total_bytes = int64_t(80) << 30;
  d.memory_used_bytes = d.memory_peak_bytes = int64_t(5) << 30;
  d.read_gbps = 1000;
  d.read_buffer_bytes = int64_t(4) << 30;
  d.gemm_size = 8192;
  d.gemm_f16_tflops = 100;
  d.gemm_f32_tflops = 10;
  return d;
}

TEST(BenchDeviceFloor, FloorIsTheSlowerOfReadingAndComputing) {
  // 2 GB at 1000 GB/s: 2 ms; 1 TFLOP at 100 TFLOP/s: 10 ms.
  EXPECT_DOUBLE_EQ(bench::pass_floor_ms(2e9, 1e12, 1000, 100), 10.0);
  EXPECT_DOUBLE_EQ(bench::pass_floor_ms(2e9, 1e10, 1000, 100), 2.0);  // 0.1 ms of compute: bandwidth-bound
  EXPECT_DOUBLE_EQ(bench::pass_floor_ms(0, 0, 1000, 100), 0.0);
  // A roof not measured (NaN), zero or negative gives no floor, never a number.
  for (double bad : {DeviceFloors::kNotMeasured, 0.0, -1.0}) {
    EXPECT_TRUE(std::isnan(bench::pass_floor_ms(2e9, 1e12, bad, 100))) << bad;
    EXPECT_TRUE(std::isnan(bench::pass_floor_ms(2e9, 1e12, 1000, bad))) << bad;
  }
  EXPECT_TRUE(std::isnan(bench::pass_floor_ms(DeviceFloors::kNotMeasured, 1e12, 1000, 100)));

  EXPECT_DOUBLE_EQ(bench::fraction_of_floor(2.5, 10), 0.25);
  EXPECT_DOUBLE_EQ(bench::fraction_of_floor(10, 10), 1.0);
  EXPECT_TRUE(std::isnan(bench::fraction_of_floor(DeviceFloors::kNotMeasured, 10)));
  EXPECT_TRUE(std::isnan(bench::fraction_of_floor(2.5, 0)));
  EXPECT_TRUE(std::isnan(bench::fraction_of_floor(0, 10)));
}

TEST(BenchDeviceFloor, ComputeRoofFollowsTheWeightType) {
  const DeviceFloors d = made_up_device();
  EXPECT_DOUBLE_EQ(d.gemm_tflops_for(DType::F32), 10);
  for (DType t : {DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K}) EXPECT_DOUBLE_EQ(d.gemm_tflops_for(t), 100);
}

TEST(BenchDeviceFloor, MemoryPeakKeepsTheLargestSample) {
  DeviceFloors d = made_up_device();
  d.sample_memory();  // no sampler: unchanged
  EXPECT_EQ(d.memory_peak_bytes, int64_t(5) << 30);
  int64_t next = int64_t(7) << 30;
  d.memory_in_use = [&next] { return next; };
  d.sample_memory();
  next = int64_t(6) << 30;
  d.sample_memory();
  EXPECT_EQ(d.memory_peak_bytes, int64_t(7) << 30);
}

TEST(BenchDeviceFloor, JsonAndTextSayWhatWasNotMeasured) {
  const DeviceFloors d = made_up_device();
  const nlohmann::ordered_json j = bench::device_floors_json(d);
  for (const char* key : {"name", "memory_total_bytes", "memory_used_bytes", "memory_peak_bytes", "read_gbps",
                          "read_buffer_bytes", "gemm_f16_tflops", "gemm_f32_tflops"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["read_gbps"].get<double>(), 1000);
  EXPECT_FALSE(j.contains("not_measured"));
  EXPECT_NE(bench::device_floors_text(d).find("read 1000 GB/s (4.00 GiB buffer), GEMM f16 100.0 TFLOP/s"),
            std::string::npos)
      << bench::device_floors_text(d);

  DeviceFloors none;
  none.name = "made-up GPU";
  none.not_measured = "--no-roofs";
  const nlohmann::ordered_json k = bench::device_floors_json(none);
  EXPECT_TRUE(k["read_gbps"].is_null());
  EXPECT_TRUE(k["gemm_f16_tflops"].is_null());
  EXPECT_EQ(k["not_measured"], "--no-roofs");
  EXPECT_NE(bench::device_floors_text(none).find("floors not measured: --no-roofs"), std::string::npos);
  EXPECT_FALSE(k.contains("buffers_peak_bytes"));  // not known: left out, not made up

  // The backend's own high-water mark, read when the report is made.
  DeviceFloors known = made_up_device();
  int64_t peak = int64_t(3) << 30;
  known.buffers_peak = [&peak] { return peak; };
  peak = int64_t(13) << 30;
  EXPECT_EQ(bench::device_floors_json(known)["buffers_peak_bytes"].get<int64_t>(), int64_t(13) << 30);
  EXPECT_NE(bench::device_floors_text(known).find("canvas's own buffers at most 13.00 GiB"), std::string::npos)
      << bench::device_floors_text(known);
}

// DiffusionGemma's layout: fused [gate; up] experts and the self-conditioning MLP are counted, and each pass
// kind reads and computes what its rows go through.
TEST(BenchDeviceFloor, DiffusionGemmaFootprintCountsFusedExpertsAndSelfConditioning) {
  ThreadPool pool(2);
  auto tiny = bench::build_synthetic_model(bench::find_synthetic_shape("diffusion-gemma:tiny"), {}, &pool);
  const Model& m = tiny->model;
  const bench::ModelFootprint f = bench::model_footprint(m);
  int64_t expert_bytes = 0;
  for (const LayerWeights& w : m.layers)
    for (const TensorView* t : {&w.gate_exps, &w.up_exps, &w.gate_up_exps, &w.down_exps})
      if (t->data) expert_bytes += t->bytes();
  ASSERT_GT(expert_bytes, 0);
  EXPECT_EQ(f.expert_bytes * f.n_experts, expert_bytes);
  ASSERT_TRUE(m.self_conditioning.gate.data);
  const SelfConditioningWeights& sc = m.self_conditioning;
  EXPECT_EQ(f.self_cond_bytes, sc.gate.bytes() + sc.up.bytes() + sc.down.bytes());
  EXPECT_EQ(f.self_cond_parameters, sc.gate.elements() + sc.up.elements() + sc.down.elements());
  EXPECT_EQ(f.embedding_bytes, m.token_embd.bytes());

  const double c = 16;
  const std::vector<PassRows> plain = bench::decoder_pass_rows("diffusion", 4, 16, 3);
  const std::vector<PassRows> conditioned = bench::decoder_pass_rows("self-cond", 4, 16, 3);
  const std::vector<PassRows> streamed = bench::decoder_pass_rows("stream", 4, 16, 3);
  ASSERT_EQ(plain.size(), 1u);
  ASSERT_EQ(conditioned.size(), 1u);
  ASSERT_EQ(streamed.size(), 1u);
  // Self-conditioning on logits reads the MLP and E once more; a streamed pass reads the MLP (its soft
  // embedding is given, and the next is written from the table the head already reads).
  EXPECT_DOUBLE_EQ(f.pass_bytes(conditioned[0]),
                   f.pass_bytes(plain[0]) + double(f.self_cond_bytes) + double(f.embedding_bytes));
  EXPECT_DOUBLE_EQ(f.pass_bytes(streamed[0]), f.pass_bytes(plain[0]) + double(f.self_cond_bytes));
  EXPECT_DOUBLE_EQ(f.pass_flops(conditioned[0]), f.pass_flops(plain[0]) + 2 * c * double(f.self_cond_parameters) +
                                                     2 * c * double(f.embedding_parameters));
  EXPECT_DOUBLE_EQ(f.pass_flops(streamed[0]), f.pass_flops(streamed[0].rows, streamed[0].logit_rows) +
                                                  2 * c * double(f.self_cond_parameters) +
                                                  2 * c * double(f.embedding_parameters));
  // An AR step reads its top-k experts only.
  const std::vector<PassRows> ar = bench::decoder_pass_rows("ar", 4, 16, 3);
  ASSERT_EQ(ar.size(), 1u);
  EXPECT_NEAR(f.pass_bytes(ar[0]), double(f.dense_bytes + f.experts_used * f.expert_bytes + f.output_bytes), 1e-6);
}

TEST(BenchDeviceFloor, PassRowsOfEachKind) {
  const std::vector<PassRows> prompt = bench::decoder_pass_rows("prompt", 32, 256, 4);
  ASSERT_EQ(prompt.size(), 1u);
  EXPECT_EQ(prompt[0].rows, 32);
  EXPECT_EQ(prompt[0].logit_rows, 0);
  const std::vector<PassRows> verify = bench::decoder_pass_rows("verify", 32, 256, 4);
  ASSERT_EQ(verify.size(), 2u);  // a decoder pass and a causal pass of 5 rows, all with logits
  for (const PassRows& p : verify) {
    EXPECT_EQ(p.rows, 5);
    EXPECT_EQ(p.logit_rows, 5);
  }
  const std::vector<PassRows> overlap = bench::decoder_pass_rows("verify-overlap", 32, 256, 4);
  ASSERT_EQ(overlap.size(), 1u);
  EXPECT_EQ(overlap[0].rows, 5 + 5 * 5);   // the causal rows and 5 canvases of 5
  EXPECT_EQ(overlap[0].logit_rows, 5 + 5 * 4);
  EXPECT_THROW(bench::decoder_pass_rows("masked", 32, 256, 4), Error);
}

// The decoder-pass report with a device: each pass and projection against its floor, from the footprint
// and the roofs; without one, nothing of the device.
TEST(BenchDeviceFloor, DecoderPassReportGivesEachPassItsFraction) {
  bench::DecoderPassTimes t;
  t.prompt_ms = 5;
  t.ar = {4};
  t.stream = {20};
  t.verify = {10};
  t.threads = 16;
  bench::DecoderPassRun run;
  run.source = "synthetic x on cuda";
  run.layers = 2;
  run.prompt_tokens = 32;
  run.canvas = 256;
  run.draft_length = 4;
  run.repeats = 1;
  // Dense only, q4_0: 1 GB of layers and a 0.5 GB head; 0.5 G parameters in the layers, 1 G in the head.
  bench::ModelFootprint& f = run.footprint;
  f.dense_bytes = 1000000000;
  f.dense_parameters = 500000000;
  f.output_bytes = 500000000;
  f.output_parameters = 1000000000;
  f.weight_type = DType::Q4_0;
  const bench::DecoderPassReport cpu = bench::decoder_pass_report(t, run);
  EXPECT_FALSE(cpu.json.contains("device"));
  EXPECT_FALSE(cpu.json["passes"]["ar"].contains("fraction_of_floor"));
  EXPECT_FALSE(cpu.json["diffusion_projection"][0].contains("fraction_of_floor"));

  run.device = made_up_device();
  const bench::DecoderPassReport r = bench::decoder_pass_report(t, run);
  EXPECT_EQ(r.json["device"]["name"], "made-up GPU");
  // AR step: 1.5 GB at 1000 GB/s = 1.5 ms (3 GFLOP at 100 TFLOP/s is 0.03 ms); measured 4 ms.
  EXPECT_DOUBLE_EQ(r.json["passes"]["ar"]["bytes"].get<double>(), 1.5e9);
  EXPECT_DOUBLE_EQ(r.json["passes"]["ar"]["floor_ms"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(r.json["passes"]["ar"]["fraction_of_floor"].get<double>(), 1.5 / 4);
  EXPECT_NEAR(r.json["ar_floor_tokens_per_second"].get<double>(), 1000 / 1.5, 1e-9);
  // A streamed canvas of 256 (this footprint has no self-conditioning MLP or embedding):
  // 2 x (0.5 G + 1 G) x 256 = 768 GFLOP, 7.68 ms at 100 TFLOP/s, more than its 1.5 ms of reads.
  EXPECT_DOUBLE_EQ(r.json["passes"]["stream"]["floor_ms"].get<double>(), 7.68);
  EXPECT_DOUBLE_EQ(r.json["passes"]["stream"]["fraction_of_floor"].get<double>(), 7.68 / 20);
  // The projections made of stream passes carry its fraction; their floor speed is the speed over it.
  const auto& p16 = r.json["diffusion_projection"][1];
  EXPECT_EQ(p16["steps"], 16);
  EXPECT_DOUBLE_EQ(p16["fraction_of_floor"].get<double>(), 7.68 / 20);
  EXPECT_NEAR(p16["floor_tokens_per_second"].get<double>(), 256 * 1000.0 / (16 * 7.68), 1e-9);
  // A verify cycle is two passes of 5 rows: 2 x 1.5 ms of reads.
  EXPECT_DOUBLE_EQ(r.json["passes"]["verify"]["floor_ms"].get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(r.json["verify_projection"][0]["fraction_of_floor"].get<double>(), 0.3);
  EXPECT_NE(r.text.find("of floor"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("device: made-up GPU"), std::string::npos) << r.text;

  // Roofs not measured: the device is reported, no pass gets a floor.
  run.device->read_gbps = DeviceFloors::kNotMeasured;
  run.device->not_measured = "--no-roofs";
  const bench::DecoderPassReport unmeasured = bench::decoder_pass_report(t, run);
  EXPECT_TRUE(unmeasured.json["device"]["read_gbps"].is_null());
  EXPECT_FALSE(unmeasured.json["passes"]["ar"].contains("fraction_of_floor"));
  EXPECT_EQ(unmeasured.text.find("of floor"), std::string::npos) << unmeasured.text;
}

// --profile: after the timed passes, one more pass of each timed kind runs inside the device's profile
// hook (here a host stand-in that runs the pass and reports two ops), and the report lists each profiled
// pass with its wall time and ops. Without a hook that can profile, the timer refuses.
TEST(BenchDeviceFloor, ProfiledPassesRunInsideTheDeviceHook) {
  const Model m = Model::load(test::fixture("tiny-diffusion-gemma"));
  DeviceFloors device = made_up_device();
  int hooked = 0;
  device.profile = [&](const std::function<void()>& pass) {
    ++hooked;
    pass();
    return std::vector<bench::DeviceOpTime>{{"attention block", 0, 1.5, 2}, {"attention: kernel", 1, 0.5, 2}};
  };
  bench::DecoderPassOptions o;
  o.prompt_tokens = 6;
  o.canvas = 8;
  o.warmup = 0;
  o.repeats = 1;
  o.threads = 1;
  o.modes = {"ar", "stream", "verify"};
  o.device = &device;
  o.profile = true;
  const bench::DecoderPassTimes t = bench::time_decoder_passes(m, o);
  EXPECT_EQ(hooked, 2);  // stream and ar; verify is not profiled
  ASSERT_EQ(t.profiles.size(), 2u);
  EXPECT_EQ(t.profiles[0].what, "stream");
  EXPECT_EQ(t.profiles[1].what, "ar");
  for (const bench::DeviceProfile& pp : t.profiles) {
    EXPECT_GT(pp.wall_ms, 0);
    EXPECT_EQ(pp.passes, 1);
    EXPECT_EQ(pp.ops.size(), 2u);
  }
  bench::DecoderPassRun run;
  run.source = "tiny";
  run.canvas = 8;
  run.device = device;
  const bench::DecoderPassReport r = bench::decoder_pass_report(t, run);
  ASSERT_EQ(r.json["device_profile"].size(), 2u) << r.json.dump();
  EXPECT_EQ(r.json["device_profile"][0]["what"], "stream");
  EXPECT_EQ(r.json["device_profile"][0]["passes"], 1);
  EXPECT_EQ(r.json["device_profile"][0]["ops"][1]["op"], "attention: kernel");
  EXPECT_EQ(r.json["device_profile"][0]["ops"][1]["depth"], 1);
  EXPECT_DOUBLE_EQ(r.json["device_profile"][1]["ops"][0]["ms"].get<double>(), 1.5);
  EXPECT_NE(r.text.find("  ar: "), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("      attention: kernel"), std::string::npos) << r.text;  // indented by its depth
  // Without profiling nothing extra runs; a device without a hook cannot profile.
  o.profile = false;
  EXPECT_TRUE(bench::time_decoder_passes(m, o).profiles.empty());
  EXPECT_EQ(hooked, 2);
  device.profile = nullptr;
  o.profile = true;
  EXPECT_THROW(bench::time_decoder_passes(m, o), Error);
}

// The grid with a device: its floors replace the CPU roofs (not measured), every row gets its floor and
// fraction, and the memory sampler runs after every forward.
TEST(BenchDeviceFloor, GridRowsAgainstTheDeviceFloors) {
  ThreadPool pool(2);
  bench::SyntheticOptions so;
  so.layers = 1;
  auto tiny = bench::build_synthetic_model(bench::find_synthetic_shape("llada:tiny"), so, &pool);
  bench::BenchOptions o;
  o.prompt_tokens = 8;
  o.new_tokens = 8;
  o.block_lengths = {8};
  o.caches = {CacheMode::Prefix};
  o.warmup = 0;
  o.repeats = 1;
  o.threads = {2};
  DeviceFloors d = made_up_device();
  int samples = 0;
  d.memory_in_use = [&samples] { return (int64_t(6) << 30) + samples++; };
  o.device = d;
  const bench::BenchReport r = bench::run_bench(tiny->model, {"synthetic llada:tiny", 2}, o);
  EXPECT_TRUE(r.roofs.empty());  // the CPU's roofs are not the passes' roofs here
  ASSERT_TRUE(r.device);
  EXPECT_GT(samples, 8);  // at least one sample a pass
  EXPECT_EQ(r.device->memory_peak_bytes, (int64_t(6) << 30) + samples - 1);
  ASSERT_EQ(r.rows.size(), 2u);
  for (const bench::BenchRow& row : r.rows) {
    EXPECT_TRUE(std::isfinite(row.floor_ms_per_pass) && row.floor_ms_per_pass > 0) << row.label();
    EXPECT_TRUE(std::isfinite(row.fraction_of_floor) && row.fraction_of_floor > 0) << row.label();
    EXPECT_DOUBLE_EQ(row.gbs_fraction, row.gbs / 1000) << row.label();
  }
  const nlohmann::json j = bench::report_json(r);
  EXPECT_EQ(j["device"]["name"], "made-up GPU");
  EXPECT_TRUE(j["rows"][0].contains("fraction_of_floor"));
  EXPECT_NE(bench::report_table(r).find("floor ms/pass"), std::string::npos);

  EXPECT_FALSE(j["rows"][0].contains("device_profile"));

  // --profile: one more request of each row inside the device's profile hook (a host stand-in here that
  // runs it and reports one op of 2 ms), every forward of it counted; the table and JSON list them.
  int hooked = 0;
  o.device->profile = [&hooked](const std::function<void()>& run) {
    ++hooked;
    run();
    return std::vector<bench::DeviceOpTime>{{"attention block", 0, 2.0, 4}};
  };
  o.profile = true;
  const bench::BenchReport p = bench::run_bench(tiny->model, {"synthetic llada:tiny", 2}, o);
  EXPECT_EQ(hooked, 2);
  ASSERT_EQ(p.rows.size(), 2u);
  for (const bench::BenchRow& row : p.rows) {
    ASSERT_TRUE(row.profile) << row.label();
    EXPECT_GT(row.profile->wall_ms, 0);
    // AR: the prompt's pass yields the first token, then a pass a token; a prefix-cached block of 8: the
    // prompt's pass and then at least one pass.
    EXPECT_GE(row.profile->passes, row.mode == "ar" ? 8 : 2) << row.label();
    EXPECT_EQ(row.profile->what, row.mode == "ar" ? "ar" : "diffusion prefix");
  }
  const nlohmann::json pj = bench::report_json(p);
  EXPECT_EQ(pj["rows"][0]["device_profile"]["ops"][0]["op"], "attention block");
  EXPECT_EQ(pj["rows"][0]["device_profile"]["passes"], p.rows[0].profile->passes);
  EXPECT_NE(bench::report_table(p).find("per-op device timing"), std::string::npos);
  o.device->profile = nullptr;  // a device that cannot profile
  EXPECT_THROW(bench::run_bench(tiny->model, {"synthetic llada:tiny", 2}, o), Error);
  o.profile = false;

  // Without a device the rows and the JSON are as before.
  o.device.reset();
  o.measure_roofs = false;
  const bench::BenchReport cpu = bench::run_bench(tiny->model, {"synthetic llada:tiny", 2}, o);
  EXPECT_FALSE(cpu.device);
  const nlohmann::json k = bench::report_json(cpu);
  EXPECT_FALSE(k.contains("device"));
  EXPECT_FALSE(k["rows"][0].contains("fraction_of_floor"));
}

}  // namespace
}  // namespace canvas
