// canvas bench: statistics helpers, roofs, synthetic models, the grid harness and its reports, the CLI.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>

#include "bench/decoder_passes.h"
#include "bench/harness.h"
#include "bench/roofs.h"
#include "bench/stats.h"
#include "bench/synthetic.h"
#include "core/error.h"
#include "decode/generation.h"
#include "io/gguf.h"
#include "model/model.h"
#include "ops/matmul.h"
#include "test_util.h"

namespace canvas {
namespace {

using bench::BenchOptions;
using bench::BenchReport;
using bench::BenchRow;

// The decoder-pass report from known timings: the table's lines, and the projections' arithmetic (AR one
// step a token; a canvas in S passes of the faster later-step kind; verify cycles keeping 1, 2, all drafts).
TEST(BenchDecoderPasses, ReportProjectsTokensPerSecondFromThePasses) {
  bench::DecoderPassTimes t;
  t.prompt_ms = 5;
  t.ar = {10, 8, 12};             // median 10 ms: 100 tokens/s
  t.diffusion = {50};
  t.self_cond = {40, 40, 40};
  t.stream = {20, 30, 10};       // median 20 ms: faster than self-cond, so the projections use it
  t.verify = {25};               // k + 1 tokens per 25 ms cycle
  t.threads = 2;
  bench::DecoderPassRun run;
  run.source = "synthetic x";
  run.layers = 3;
  run.prompt_tokens = 6;
  run.canvas = 256;
  run.draft_length = 4;
  run.repeats = 3;
  run.weight_bytes = 1073741824;
  run.peak_rss_mib = 100;
  const bench::DecoderPassReport r = bench::decoder_pass_report(t, run);
  EXPECT_EQ(r.text.substr(0, r.text.find('\n')), "model: synthetic x, 3 layers, 2 threads");
  EXPECT_NE(r.text.find("peak RSS 100 MiB; weights 1.00 GiB\n"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("AR: 100.0 tokens/s (median step 10.00 ms)\n"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("diffusion, canvas 256 in 8 steps (stream passes): 1600.0 tokens/s, 16.00x AR\n"),
            std::string::npos) << r.text;
  EXPECT_NE(r.text.find("verify, draft 4, if 4 drafts are kept per cycle: 200.0 tokens/s, 2.00x AR\n"),
            std::string::npos) << r.text;
  EXPECT_EQ(r.text.find("verify --overlap"), std::string::npos) << r.text;  // not timed
  EXPECT_EQ(r.json["diffusion_pass"], "stream");
  EXPECT_DOUBLE_EQ(r.json["ar_tokens_per_second"].get<double>(), 100.0);
  ASSERT_EQ(r.json["diffusion_projection"].size(), 3u);
  EXPECT_DOUBLE_EQ(r.json["diffusion_projection"][2]["tokens_per_second"].get<double>(), 400.0);  // 32 steps
  ASSERT_EQ(r.json["verify_projection"].size(), 3u);
  EXPECT_DOUBLE_EQ(r.json["verify_projection"][0]["tokens_per_second"].get<double>(), 80.0);  // 1 kept: 2 tokens
  EXPECT_DOUBLE_EQ(r.json["verify_projection"][1]["vs_ar"].get<double>(), 1.2);
  EXPECT_FALSE(r.json.contains("verify_overlap_projection"));
  EXPECT_DOUBLE_EQ(r.json["passes"]["stream"]["min_ms"].get<double>(), 10.0);
  EXPECT_FALSE(r.json["passes"].contains("verify-overlap"));

  // Without AR there is nothing to project against; without later-step kinds the zeros pass is used.
  t.self_cond.clear();
  t.stream.clear();
  EXPECT_EQ(bench::decoder_pass_report(t, run).json["diffusion_pass"], "diffusion");
  t.ar.clear();
  const bench::DecoderPassReport no_ar = bench::decoder_pass_report(t, run);
  EXPECT_FALSE(no_ar.json.contains("ar_tokens_per_second"));
  EXPECT_EQ(no_ar.text.find("tokens/s"), std::string::npos) << no_ar.text;
}

// ---- statistics ------------------------------------------------------------------------------------

// The decoder-pass timer of models with a decoder: every asked kind timed `repeats` times (positive
// milliseconds), the others not at all; an unknown kind is refused.
TEST(BenchDecoderPasses, TimesTheAskedKindsOnly) {
  const Model m = Model::load(test::fixture("tiny-diffusion-gemma"));
  bench::DecoderPassOptions o;
  o.prompt_tokens = 6;
  o.canvas = 8;
  o.warmup = 1;
  o.repeats = 3;
  o.threads = 2;
  o.modes = {"ar", "self-cond", "verify"};
  o.draft_length = 3;
  const bench::DecoderPassTimes t = bench::time_decoder_passes(m, o);
  EXPECT_GT(t.prompt_ms, 0);
  for (const auto* timed : {&t.ar, &t.self_cond, &t.verify}) {
    ASSERT_EQ(timed->size(), 3u);
    for (double ms : *timed) EXPECT_GT(ms, 0);
  }
  EXPECT_TRUE(t.diffusion.empty());
  EXPECT_TRUE(t.stream.empty());
  EXPECT_EQ(t.threads, 2);
  // The report of a run: the timed kinds, named by its source.
  o.modes = {"ar", "diffusion"};
  o.repeats = 1;
  const bench::DecoderPassReport r = bench::bench_decoder_passes(m, o, "tiny", 1234);
  EXPECT_EQ(r.text.rfind("model: tiny, ", 0), 0u) << r.text;
  EXPECT_EQ(r.json["passes"].size(), 3u) << r.json.dump();  // the prompt, ar and diffusion
  EXPECT_TRUE(r.json["passes"].contains("diffusion"));
  EXPECT_EQ(r.json["canvas"], 8);
  o.modes = {"masked"};
  EXPECT_THROW(bench::time_decoder_passes(m, o), Error);
}

// The model a bench runs: a file (cut to --layers) or a synthetic shape; one of the two, never both.
TEST(BenchModel, FileOrSyntheticCutToItsLayers) {
  bench::BenchModelSpec spec;
  spec.file = test::fixture("tiny-llada.gguf");
  spec.layers = 1;
  bench::BenchModel file = bench::open_bench_model(spec);
  EXPECT_EQ(file.model().config.n_layers, 1);
  EXPECT_EQ(file.model().layers.size(), 1u);
  EXPECT_EQ(file.info.layers_total, 2);
  EXPECT_EQ(file.info.source, spec.file);
  EXPECT_FALSE(file.synthetic);
  spec.layers = 3;
  EXPECT_THROW(bench::open_bench_model(spec), Error);
  spec.synthetic = "llada:tiny";
  EXPECT_THROW(bench::open_bench_model(spec), Error);  // both
  spec.file.clear();
  spec.layers = 0;
  spec.type = DType::F32;
  bench::BenchModel synthetic = bench::open_bench_model(spec);
  ASSERT_TRUE(synthetic.synthetic);
  EXPECT_EQ(synthetic.info.source, "synthetic llada:tiny");
  EXPECT_EQ(synthetic.weight_bytes(), synthetic.synthetic->bytes);
  EXPECT_EQ(&synthetic.model(), &synthetic.synthetic->model);
  EXPECT_EQ(bench::model_footprint(synthetic.model()).weight_type, DType::F32);
  spec.synthetic.clear();
  EXPECT_THROW(bench::open_bench_model(spec), Error);  // neither
}

TEST(BenchStats, MedianAndPercentilesOfKnownArrays) {
  EXPECT_DOUBLE_EQ(bench::median({5, 1, 3}), 3);
  EXPECT_DOUBLE_EQ(bench::median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(bench::median({7}), 7);
  std::vector<double> hundred(100);
  std::iota(hundred.begin(), hundred.end(), 1.0);  // 1 .. 100
  EXPECT_NEAR(bench::percentile(hundred, 95), 95.05, 1e-9);  // numpy.percentile(range(1, 101), 95)
  EXPECT_NEAR(bench::percentile(hundred, 50), 50.5, 1e-9);
  EXPECT_DOUBLE_EQ(bench::percentile(hundred, 0), 1);
  EXPECT_DOUBLE_EQ(bench::percentile(hundred, 100), 100);
  EXPECT_NEAR(bench::percentile({10, 20, 30}, 95), 29, 1e-9);
  EXPECT_THROW(bench::percentile({}, 50), Error);
  EXPECT_THROW(bench::percentile({1, 2}, 101), Error);
  EXPECT_THROW(bench::percentile({1, std::nan("")}, 50), Error);
}

// ---- roofs -----------------------------------------------------------------------------------------

TEST(BenchRoofs, QuickRoofsArePositiveAndCoverEveryMatmulType) {
  ThreadPool pool(2);
  const bench::Roofs roofs = bench::measure_roofs(pool, bench::RoofOptions::quick());
  EXPECT_EQ(roofs.threads, 2);
  EXPECT_GT(roofs.stream_gbs, 0);
  EXPECT_TRUE(std::isfinite(roofs.stream_gbs));
  const std::vector<DType> types = bench::matmul_dtypes();
  for (DType t : {DType::F32, DType::Q8_0, DType::Q4_0})
    EXPECT_NE(std::find(types.begin(), types.end(), t), types.end()) << dtype_name(t);
  EXPECT_EQ(roofs.matmul.size(), types.size() * 2);  // quick: m = 1, 8
  for (const bench::MatmulRoof& r : roofs.matmul) {
    EXPECT_GT(r.gflops, 0) << dtype_name(r.type) << " m=" << r.m;
    EXPECT_TRUE(std::isfinite(r.gflops));
    EXPECT_NEAR(r.gflops, 2.0 * double(r.m * r.n * r.k) / (r.ms * 1e6), 1e-6 * r.gflops);
  }
}

TEST(BenchRoofs, MatmulRoofPicksTheNearestRowCountOfTheType) {
  bench::Roofs roofs;
  roofs.matmul = {{DType::Q4_0, 1, 8, 8, 1, 10, 0}, {DType::Q4_0, 8, 8, 8, 1, 80, 0},
                  {DType::Q4_0, 32, 8, 8, 1, 200, 0}, {DType::F32, 8, 8, 8, 1, 50, 0}};
  EXPECT_DOUBLE_EQ(roofs.matmul_gflops(DType::Q4_0, 1), 10);
  EXPECT_DOUBLE_EQ(roofs.matmul_gflops(DType::Q4_0, 2), 10);  // log-nearest: 2 is closer to 1 than to 8
  EXPECT_DOUBLE_EQ(roofs.matmul_gflops(DType::Q4_0, 5), 80);
  EXPECT_DOUBLE_EQ(roofs.matmul_gflops(DType::Q4_0, 1000), 200);
  EXPECT_DOUBLE_EQ(roofs.matmul_gflops(DType::F32, 1), 50);
  EXPECT_DOUBLE_EQ(roofs.matmul_gflops(DType::Q8_0, 8), 0);  // not measured
}

// ---- synthetic models ------------------------------------------------------------------------------

TEST(BenchSynthetic, FillIsDeterministicAcrossThreadCountsWithTheAskedSpread) {
  for (DType type : {DType::Q4_0, DType::Q8_0, DType::F32, DType::BF16}) {
    const int64_t n = 32 * 20000;  // several chunks
    std::vector<uint8_t> a(size_t(row_bytes(type, n))), b(a.size()), c(a.size());
    ThreadPool one(1), two(2);
    bench::fill_random(type, a.data(), n, 0.02f, 5, &one);
    bench::fill_random(type, b.data(), n, 0.02f, 5, &two);
    bench::fill_random(type, c.data(), n, 0.02f, 6, &two);
    EXPECT_EQ(a, b) << dtype_name(type);
    EXPECT_NE(a, c) << dtype_name(type);
    std::vector<float> values(static_cast<size_t>(n));
    dequantize_row(type, a.data(), values.data(), n);
    double sum = 0, sq = 0;
    for (float v : values) {
      ASSERT_TRUE(std::isfinite(v));
      sum += v;
      sq += double(v) * v;
    }
    const double mean = sum / double(n), sd = std::sqrt(sq / double(n) - mean * mean);
    EXPECT_NEAR(sd, 0.02, 0.003) << dtype_name(type);
  }
}

TEST(BenchSynthetic, ShapeTableSizesAndLookup) {
  const bench::SyntheticShape& s = bench::find_synthetic_shape("llada:8b");
  EXPECT_EQ(s.config.hidden, 4096);
  EXPECT_EQ(s.config.n_layers, 32);
  EXPECT_EQ(s.config.n_heads, 32);
  EXPECT_EQ(s.config.ffn, 12288);
  EXPECT_EQ(s.config.vocab, 126464);
  // Bytes at Q4_0: 18 bytes per 32 weights of every matrix, plus the f32 norms.
  const int64_t H = 4096, F = 12288, V = 126464;
  const int64_t per_layer = 4 * H * H + 3 * H * F;
  auto q4_bytes = [&](int64_t layers) { return (2 * V * H + layers * per_layer) / 32 * 18 + (1 + 2 * layers) * H * 4; };
  bench::SyntheticOptions o;
  EXPECT_EQ(bench::synthetic_model_bytes(s, o), q4_bytes(32));
  o.layers = 4;
  EXPECT_EQ(bench::synthetic_model_bytes(s, o), q4_bytes(4));
  o.layers = 33;
  EXPECT_THROW(bench::synthetic_model_bytes(s, o), Error);
  o.layers = 0;
  o.type = DType::I32;  // a dtype, but not one of weights
  EXPECT_THROW(bench::synthetic_model_bytes(s, o), Error);
  try {
    bench::find_synthetic_shape("llada:9000b");
    FAIL() << "no error for an unknown shape";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("llada:8b"), std::string::npos) << e.what();  // lists the known ones
  }
}

// Logits of rows `rows` of one forward pass over [1, 2, 3, MASK] (a fresh cache, one group).
std::vector<float> four_token_logits(const Model& model, const std::vector<int32_t>& rows, ThreadPool* pool) {
  const ModelConfig& c = model.config;
  KvCache cache(c, 8);
  std::vector<int32_t> tokens = {1, 2, 3, c.mask_token}, groups(4, 0);
  ForwardRequest req;
  req.tokens = tokens.data();
  req.n = 4;
  req.groups = groups.data();
  req.logit_rows = rows;
  std::vector<float> logits(rows.size() * size_t(c.vocab));
  req.logits = logits.data();
  forward(model, cache, req, pool);
  return logits;
}

TEST(BenchSynthetic, TinyModelsRunAForwardPassWithFiniteLogits) {
  ThreadPool pool(2);
  for (const char* name : {"llada:tiny", "llada-moe:tiny"}) {
    for (DType type : {DType::Q4_0, DType::F32}) {
      bench::SyntheticOptions o;
      o.type = type;
      auto m = bench::build_synthetic_model(bench::find_synthetic_shape(name), o, &pool);
      const bench::ModelFootprint f = bench::model_footprint(m->model);
      EXPECT_EQ(f.bytes, m->bytes) << name;
      EXPECT_EQ(f.weight_type, type) << name;
      const std::vector<float> logits = four_token_logits(m->model, {0, 3}, &pool);
      double spread = 0;
      for (float v : logits) {
        ASSERT_TRUE(std::isfinite(v)) << name;
        spread = std::max(spread, double(std::fabs(v - logits[0])));
      }
      EXPECT_GT(spread, 0) << name << ": constant logits";
    }
  }
}

// --save: the synthetic model as a GGUF in llama.cpp's DiffusionGemma layout, which loads back as the same
// model (the same logits as the one built in memory), with the release's 256-token canvas, a vocabulary of
// the model's size and llama-diffusion-cli's mask id; the CLI writes it and exits.
TEST(BenchSynthetic, SaveWritesTheModelAsABranchLayoutGguf) {
  test::TempDir dir;
  ThreadPool pool(2);
  const bench::SyntheticShape& shape = bench::find_synthetic_shape("diffusion-gemma:tiny");
  bench::SyntheticOptions o;
  o.type = DType::Q8_0;
  o.layers = 6;
  o.seed = 3;
  const std::string path = dir.path("dg.gguf");
  bench::write_synthetic_gguf(shape, o, path, &pool);
  const Model loaded = Model::load(path);
  const auto built = bench::build_synthetic_model(shape, o, &pool);
  const ModelConfig& c = loaded.config;
  EXPECT_EQ(c.arch, "diffusion-gemma");
  EXPECT_EQ(c.n_layers, 6);
  EXPECT_EQ(c.n_experts, built->model.config.n_experts);
  EXPECT_EQ(c.logit_softcap, 30.f);
  EXPECT_EQ(c.attention_of(5).kind, AttentionKind::Full);
  EXPECT_TRUE(c.attention_of(5).value_from_key);
  EXPECT_EQ(loaded.file->get_int("diffusion.canvas_length", 0), 256);
  EXPECT_EQ(loaded.file->get_int("tokenizer.ggml.mask_token_id", -1), 4);
  EXPECT_EQ(int64_t(loaded.file->get_string_array("tokenizer.ggml.tokens").size()), c.vocab);
  const auto logits = [&pool](const Model& m) {
    std::vector<int32_t> tokens = {2, 100, 200, 300}, groups = {0, 1, 2, 3};
    KvCache cache(m.config, 8);
    ForwardRequest req;
    req.tokens = tokens.data();
    req.n = 4;
    req.groups = groups.data();
    req.logit_rows = {0, 3};
    std::vector<float> out(2 * size_t(m.config.vocab));
    req.logits = out.data();
    forward(m, cache, req, &pool);
    return out;
  };
  EXPECT_EQ(logits(loaded), logits(built->model));

  const auto r = test::run_canvas("bench --synthetic diffusion-gemma:tiny --layers 2 --save " + dir.path("cli.gguf"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Model::load(dir.path("cli.gguf")).config.n_layers, 2);
  EXPECT_NE(test::run_canvas("bench --synthetic llada:tiny --save " + dir.path("llada.gguf")).exit_code, 0);
}

// A synthetic model's Q4_0 / Q8_0 matrices are interleaved for the AVX-512 kernels (built at the
// AVX-512 level) or left in the file layout (built at a lower level): the same logits, bit for bit.
TEST(BenchSynthetic, InterleavedWeightsGiveTheSameLogits) {
  ThreadPool pool(2);
  set_matmul_simd_level(SimdLevel::Avx512);
  const bool avx512 = matmul_simd_level() == SimdLevel::Avx512;
  reset_matmul_simd_level();
  if (!avx512) GTEST_SKIP() << "no AVX-512 VNNI: nothing is interleaved";
  for (const char* name : {"llada:tiny", "llada-moe:tiny"}) {
    for (DType type : {DType::Q4_0, DType::Q8_0}) {
      bench::SyntheticOptions o;
      o.type = type;
      std::vector<float> logits[2];
      for (int interleaved = 0; interleaved < 2; ++interleaved) {
        set_matmul_simd_level(interleaved ? SimdLevel::Avx512 : SimdLevel::Avx2);
        auto m = bench::build_synthetic_model(bench::find_synthetic_shape(name), o, &pool);
        reset_matmul_simd_level();
        EXPECT_EQ(m->model.layers[0].wq.type == type, !interleaved) << name;
        EXPECT_EQ(interleaved_base(m->model.layers[0].wq.type), type) << name;
        logits[interleaved] = four_token_logits(m->model, {0, 1, 2, 3}, &pool);
      }
      EXPECT_EQ(std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * 4), 0) << name << " " << dtype_name(type);
    }
  }
}

// ---- footprint -------------------------------------------------------------------------------------

TEST(BenchFootprint, MatchesTheFileAndCountsExpertsHitByRows) {
  const Model model = Model::load(test::fixture("tiny-llada.gguf"));
  const bench::ModelFootprint f = bench::model_footprint(model);
  EXPECT_EQ(f.parameters, model.parameter_count());
  EXPECT_EQ(f.bytes, model.weight_bytes());
  const int64_t H = 64, F = 128, V = model.config.vocab;
  EXPECT_EQ(f.dense_parameters, 2 * (4 * H * H + 3 * H * F));
  EXPECT_EQ(f.output_parameters, V * H);
  EXPECT_DOUBLE_EQ(f.pass_flops(3, 1), 2.0 * (3.0 * double(f.dense_parameters) + double(V * H)));
  EXPECT_DOUBLE_EQ(f.pass_bytes(3, 0), double(f.dense_bytes));
  EXPECT_DOUBLE_EQ(f.pass_bytes(3, 2), double(f.dense_bytes + f.output_bytes));

  const Model moe = Model::load(test::fixture("tiny-llada-moe.gguf"));
  const bench::ModelFootprint g = bench::model_footprint(moe);
  EXPECT_EQ(g.parameters, moe.parameter_count());
  EXPECT_EQ(g.n_experts, 4);
  EXPECT_EQ(g.experts_used, 2);
  EXPECT_EQ(g.expert_parameters, 2 * 3 * 64 * 32);  // 2 layers x (gate + up + down) of one expert
  // One row reads exactly its 2 experts; many rows read (almost) all 4.
  EXPECT_NEAR(g.pass_bytes(1, 0), double(g.dense_bytes + 2 * g.expert_bytes), 1e-6);
  EXPECT_NEAR(g.pass_bytes(100, 0), double(g.dense_bytes + 4 * g.expert_bytes), 1.0);
  EXPECT_DOUBLE_EQ(g.pass_flops(1, 0), 2.0 * double(g.dense_parameters + 2 * g.expert_parameters));
}

// ---- the grid --------------------------------------------------------------------------------------

BenchOptions quick_options() {
  BenchOptions o;
  o.prompt_tokens = 8;
  o.new_tokens = 8;
  o.block_lengths = {4};
  o.warmup = 0;
  o.repeats = 2;
  o.threads = {2};
  o.roof = bench::RoofOptions::quick();
  return o;
}

void expect_positive_finite(double v, const std::string& what) {
  EXPECT_TRUE(std::isfinite(v) && v > 0) << what << " = " << v;
}

const BenchRow* find_row(const BenchReport& r, const std::string& label) {
  for (const BenchRow& row : r.rows)
    if (row.label() == label) return &row;
  return nullptr;
}

void expect_sane_rows(const BenchReport& report) {
  ASSERT_FALSE(report.rows.empty());
  for (const BenchRow& r : report.rows) {
    const std::string l = r.label();
    for (auto [v, what] : std::initializer_list<std::pair<double, const char*>>{
             {r.passes, "passes"}, {r.decode_tokens_per_s, "decode tok/s"}, {r.ms_per_pass, "ms/pass"},
             {r.tokens_per_forward, "tokens/pass"}, {r.rows_per_pass, "rows/pass"}, {r.latency_p50_ms, "p50"},
             {r.latency_p95_ms, "p95"}, {r.peak_rss_mib, "peak RSS"}, {r.gbs, "GB/s"},
             {r.gbs_fraction, "GB/s fraction"}, {r.gflops, "GFLOP/s"}, {r.gflops_fraction, "GFLOP/s fraction"},
             {r.speedup_vs_ar, "vs AR"}})
      expect_positive_finite(v, l + " " + what);
    EXPECT_GE(r.latency_p95_ms, r.latency_p50_ms) << l;
    if (r.mode == "ar" || r.cache != "none") expect_positive_finite(r.prompt_tokens_per_s, l + " prompt tok/s");
    // With one repeat the medians are the sample itself, and the speeds agree exactly:
    // tokens/s = tokens per pass / seconds per pass.
    if (report.options.repeats == 1) {
      EXPECT_NEAR(r.decode_tokens_per_s, r.tokens_per_forward * 1000.0 / r.ms_per_pass,
                  1e-9 * r.decode_tokens_per_s)
          << l;
    }
  }
}

TEST(BenchHarness, QuickGridOnTinyLladaFile) {
  const Model model = Model::load(test::fixture("tiny-llada.gguf"));
  BenchOptions o = quick_options();
  o.thresholds = {0.9f};
  const BenchReport report = bench::run_bench(model, {"tiny-llada.gguf", 2}, o);
  expect_sane_rows(report);
  ASSERT_EQ(report.roofs.size(), 1u);
  // AR + 3 caches x (steps 8 + threshold 0.9).
  EXPECT_EQ(report.rows.size(), 7u);
  const BenchRow* ar = find_row(report, "ar");
  ASSERT_NE(ar, nullptr);
  EXPECT_EQ(ar->passes, 7);  // 8 tokens: the first comes from the prompt pass
  EXPECT_DOUBLE_EQ(ar->tokens_per_forward, 1);
  EXPECT_DOUBLE_EQ(ar->rows_per_pass, 2);  // LLaDA AR: [token, MASK]
  EXPECT_DOUBLE_EQ(ar->speedup_vs_ar, 1);
  // Rows forwarded per pass, from the caches' definitions (P = 8, N = 8, two blocks of 4, 8 passes):
  // none: all 16 positions every pass; prefix: the active region, from the previous block's start on a
  // block's first pass (8, 8, 8, 8, 8, 4, 4, 4); dual: 8 on a block's first pass, the block's 4 after.
  const BenchRow* none = find_row(report, "diffusion none B=4 steps=8");
  const BenchRow* prefix = find_row(report, "diffusion prefix B=4 steps=8");
  const BenchRow* dual = find_row(report, "diffusion dual B=4 steps=8");
  ASSERT_TRUE(none && prefix && dual);
  EXPECT_EQ(none->passes, 8);
  EXPECT_DOUBLE_EQ(none->rows_per_pass, 16);
  EXPECT_DOUBLE_EQ(prefix->rows_per_pass, 6.5);
  EXPECT_DOUBLE_EQ(dual->rows_per_pass, 5);
  EXPECT_DOUBLE_EQ(prefix->tokens_per_forward, 1);
  EXPECT_FALSE(std::isfinite(none->prompt_tokens_per_s));  // no separate prompt pass without a cache
  ASSERT_NE(find_row(report, "diffusion dual B=4 threshold=0.90"), nullptr);

  // The JSON report parses and holds the fields.
  const nlohmann::json j = nlohmann::json::parse(bench::report_json(report).dump());
  for (const char* key : {"machine", "model", "settings", "roofs", "rows"}) EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_GT(j["machine"]["cores"].get<int>(), 0);
  EXPECT_EQ(j["model"]["layers"], 2);
  EXPECT_EQ(j["model"]["weight_type"], "f32");
  EXPECT_GT(j["roofs"][0]["stream_read_gbs"].get<double>(), 0);
  EXPECT_FALSE(j["roofs"][0]["matmul"].empty());
  ASSERT_EQ(j["rows"].size(), report.rows.size());
  for (const auto& row : j["rows"]) {
    for (const char* key :
         {"label", "mode", "threads", "passes", "decode_tokens_per_s", "ms_per_pass", "tokens_per_pass",
          "tokens_per_forward", "latency_p50_ms", "latency_p95_ms", "peak_rss_mib", "gbs", "gbs_fraction",
          "gflops", "gflops_fraction", "speedup_vs_ar", "prompt_tokens_per_s"})
      EXPECT_TRUE(row.contains(key)) << key;
    EXPECT_GT(row["decode_tokens_per_s"].get<double>(), 0);
  }
  EXPECT_TRUE(j["rows"][1]["prompt_tokens_per_s"].is_null());  // the "none" row
  const std::string table = bench::report_table(report);
  EXPECT_NE(table.find("diffusion prefix B=4 steps=8"), std::string::npos) << table;
  EXPECT_NE(table.find("stream read"), std::string::npos) << table;
}

TEST(BenchHarness, SyntheticAndShiftedModelsAndSkippedPoints) {
  ThreadPool pool(2);
  bench::SyntheticOptions so;
  so.layers = 1;
  auto tiny = bench::build_synthetic_model(bench::find_synthetic_shape("llada-moe:tiny"), so, &pool);
  BenchOptions o = quick_options();
  o.caches = {CacheMode::Dual};
  o.block_lengths = {4, 3, 64};  // 3 does not divide 8; 64 clamps to 8
  o.steps = {8, 3};              // 3 is not a multiple of the 2 blocks of 4
  o.repeats = 1;
  const BenchReport r = bench::run_bench(tiny->model, {"synthetic llada-moe:tiny", 2}, o);
  expect_sane_rows(r);
  EXPECT_EQ(r.config.n_layers, 1);
  ASSERT_NE(find_row(r, "diffusion dual B=4 steps=8"), nullptr);
  ASSERT_NE(find_row(r, "diffusion dual B=8 steps=8"), nullptr);
  ASSERT_NE(find_row(r, "diffusion dual B=8 steps=3"), nullptr);  // one block: any step count
  EXPECT_EQ(r.rows.size(), 4u);
  EXPECT_EQ(r.notes.size(), 2u);  // B=3, and steps 3 with B=4

  // Dream predicts each token from the row before it (the shifted bookkeeping), GQA and biases.
  const Model dream = Model::load(test::fixture("tiny-dream.gguf"));
  BenchOptions d = quick_options();
  d.measure_roofs = false;
  const BenchReport rd = bench::run_bench(dream, {"tiny-dream.gguf", 2}, d);
  ASSERT_EQ(rd.rows.size(), 4u);
  for (const BenchRow& row : rd.rows) {
    expect_positive_finite(row.decode_tokens_per_s, row.label());
    EXPECT_FALSE(std::isfinite(row.gbs_fraction)) << "no roofs, no fraction";
  }
  EXPECT_DOUBLE_EQ(find_row(rd, "ar")->rows_per_pass, 1);  // shifted: no [MASK] row

  BenchOptions bad = quick_options();
  bad.new_tokens = 1000;  // beyond the 256-token context
  EXPECT_THROW(bench::run_bench(dream, {"tiny-dream.gguf", 2}, bad), Error);
}

// The bench runs the one generation path: each row's tokens are the Generator's for the request `canvas
// generate` fills from the same options (--mode, -n, --cache, --block-length, --steps, --threshold, --seed;
// EOS ignored) on the bench's prompt, and its passes are the output's (AR's prompt pass left out). Dream's
// rows decode with Dream's own step schedule, as generate does.
TEST(BenchHarness, RowsGenerateWhatTheGeneratorGenerates) {
  ThreadPool pool(2);
  for (const char* file : {"tiny-llada.gguf", "tiny-dream.gguf"}) {
    const Model model = Model::load(test::fixture(file));
    BenchOptions o = quick_options();
    o.repeats = 1;
    o.measure_roofs = false;
    o.steps = {8, 4};
    o.thresholds = {0.5f};
    o.seed = 3;
    const BenchReport report = bench::run_bench(model, {file, 2}, o);
    ASSERT_EQ(report.prompt.size(), 8u);
    EXPECT_EQ(report.rows.size(), 10u) << file;  // AR + 3 caches x (steps 8, steps 4, threshold 0.5)
    const Generator generator(model, nullptr, SamplerDefaults{});
    for (const BenchRow& row : report.rows) {
      GenerationRequest r;
      r.prompt = report.prompt;
      r.max_new_tokens = 8;
      r.ignore_eos = true;
      r.sampling.seed = 3;
      r.mode = row.mode == "ar" ? DecodeMode::Ar : DecodeMode::Diffusion;
      if (row.mode == "diffusion") {
        r.masked.cache = parse_cache_mode(row.cache);
        r.diffusion.block_length = row.block_length;
        if (row.threshold > 0)
          r.masked.threshold = row.threshold;
        else
          r.diffusion.steps = row.steps;
      }
      const GenerationOutput out = generator.run(r, &pool);
      EXPECT_EQ(row.tokens.size(), 8u) << file << " " << row.label();
      EXPECT_EQ(row.tokens, out.tokens) << file << " " << row.label();
      EXPECT_EQ(row.passes, double(out.passes - (row.mode == "ar" ? 1 : 0))) << file << " " << row.label();
    }
  }
}

TEST(BenchHarness, PeakRssCanBeResetAndRead) {
  EXPECT_GT(bench::peak_rss_bytes(), 0);
  if (!bench::reset_peak_rss()) GTEST_SKIP() << "/proc/self/clear_refs is not writable here";
  const int64_t before = bench::peak_rss_bytes();
  std::vector<uint8_t> big(size_t(64) << 20, 1);  // 64 MiB touched
  const int64_t after = bench::peak_rss_bytes();
  EXPECT_GE(after - before, int64_t(60) << 20) << big[12345];
}

// ---- the command line ------------------------------------------------------------------------------

TEST(BenchCli, QuickSyntheticRunWritesJsonAndTable) {
  test::TempDir dir;
  const std::string json_path = dir.path("bench.json"), png = dir.path("bench.png");
  const auto r = test::run_canvas("bench --synthetic llada:tiny --type q8_0 --quick -t 2 --cache prefix,dual "
                                  "--block-length 4 --json " + json_path + " --plot " + png);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("diffusion dual B=4 steps=8"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("decode tok/s"), std::string::npos) << r.output;
  const nlohmann::json j = nlohmann::json::parse(test::read_text(json_path));
  EXPECT_EQ(j["model"]["source"], "synthetic llada:tiny");
  EXPECT_EQ(j["model"]["weight_type"], "q8_0");
  EXPECT_EQ(j["rows"].size(), 3u);
  // canvas draws the plot itself: it is always there (tests/plots_cli_test.cpp looks inside).
  EXPECT_TRUE(std::filesystem::exists(png)) << r.output;
  EXPECT_NE(r.output.find("plotted " + png), std::string::npos) << r.output;
}

// A model with a decoder is timed pass by pass: --json gets those numbers, the canvas is the model's own
// (64 for the shipped text model), and --plot (the masked grid's chart) is refused, not skipped silently.
TEST(BenchCli, DecoderModelWritesJsonAtItsCanvasLength) {
  test::TempDir dir;
  const std::string json_path = dir.path("dg.json");
  const auto r = test::run_canvas("bench -m " + test::source_path("models/text-dg.gguf") +
                                  " --quick --no-roofs -t 2 --modes ar,diffusion,verify --json " + json_path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("decoder, canvas 64,"), std::string::npos) << r.output;
  const nlohmann::json j = nlohmann::json::parse(test::read_text(json_path));
  EXPECT_EQ(j["canvas"], 64);
  for (const char* pass : {"prompt", "diffusion", "ar", "verify"})
    EXPECT_GT(j["passes"][pass]["median_ms"].get<double>(), 0.0) << pass;
  EXPECT_EQ(j["verify_projection"].size(), 3u);
  const auto plot = test::run_canvas("bench -m " + test::source_path("models/text-dg.gguf") + " --quick --plot " +
                                     dir.path("p.png"));
  EXPECT_EQ(plot.exit_code, 1) << plot.output;
  EXPECT_NE(plot.output.find("--json FILE"), std::string::npos) << plot.output;
  EXPECT_FALSE(std::filesystem::exists(dir.path("p.png")));
}

TEST(BenchCli, BadInputGivesClearErrors) {
  struct Case {
    std::string args, message;
  };
  const Case cases[] = {
      {"bench -m " + test::source_path("models/text-dg.gguf") + " --synthetic llada:tiny", "give exactly one of"},
      {"bench --synthetic nope:1", "unknown synthetic model 'nope:1'"},
      {"bench --synthetic llada:tiny --type i32 --quick", "not supported by matmul"},
      {"bench --synthetic llada:tiny --layers 9 --quick", "has only 2 layers"},
      {"bench --synthetic llada:tiny --cache warm --quick", "unknown cache mode"},
      {"bench --synthetic llada:tiny --modes fast --quick", "unknown mode 'fast'"},
      {"bench --synthetic llada:tiny --block-length x --quick", "not an integer"},
      {"bench --synthetic llada:tiny -n 5000 --quick --no-roofs", "context length"},
      {"bench -m /nonexistent.gguf --quick", "/nonexistent.gguf"},
  };
  for (const Case& c : cases) {
    const auto r = test::run_canvas(c.args);
    EXPECT_EQ(r.exit_code, 1) << c.args << ": " << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.args << ": " << r.output;
  }
  const auto list = test::run_canvas("bench --list");
  EXPECT_EQ(list.exit_code, 0);
  EXPECT_NE(list.output.find("llada:8b"), std::string::npos) << list.output;
}

}  // namespace
}  // namespace canvas
