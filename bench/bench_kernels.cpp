// Kernel micro-benchmarks: matvec bandwidth per weight type, matmul GFLOP/s per batch size, the
// streaming-read roof of the machine, OpenBLAS sgemm on the same shapes for the ratio, and the fused
// LM head against the materialised one.
//
// Threads: CANVAS_BENCH_THREADS (default 2). SIMD level: CANVAS_SIMD as everywhere.
// Run with OpenBLAS's own core-type override cleared, e.g.
//   env -u OPENBLAS_CORETYPE ./canvas_bench_kernels --benchmark_min_time=0.3
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "bench/stream_read.h"
#include "core/cpu.h"
#include "core/rng.h"
#include "core/timer.h"
#include "ops/gemm.h"
#include "ops/lm_head.h"
#include "ops/matmul.h"
#include "ops/ops.h"

#ifdef CANVAS_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace canvas {
namespace {

int bench_threads() {
  const char* env = std::getenv("CANVAS_BENCH_THREADS");
  return env ? std::max(1, std::atoi(env)) : 2;
}

ThreadPool& pool() {
  static ThreadPool p(bench_threads());
  return p;
}

// Weight matrices are built from 64 distinct random rows repeated (their values do not change the
// speed), kept for the whole run so each shape is built once.
struct Matrix {
  std::vector<uint8_t> bytes;
  TensorView view;
};

const Matrix& matrix(DType type, int64_t n, int64_t k) {
  static std::map<std::tuple<int, int64_t, int64_t>, std::unique_ptr<Matrix>> cache;
  auto& slot = cache[{int(type), n, k}];
  if (!slot) {
    slot = std::make_unique<Matrix>();
    const int64_t rb = row_bytes(type, k);
    slot->bytes.resize(size_t(rb * n));
    Rng rng(uint64_t(type) * 1000 + uint64_t(k));
    std::vector<float> row(static_cast<size_t>(k));
    const int64_t distinct = std::min<int64_t>(64, n);
    for (int64_t j = 0; j < distinct; ++j) {
      for (auto& v : row) v = float(rng.normal()) * 0.05f;
      quantize_row(type, row.data(), slot->bytes.data() + j * rb, k);
    }
    for (int64_t j = distinct; j < n; ++j) std::memcpy(slot->bytes.data() + j * rb, slot->bytes.data() + (j % distinct) * rb, size_t(rb));
    slot->view.name = "bench";
    slot->view.type = type;
    slot->view.ne = {k, n, 1, 1};
    slot->view.n_dims = 2;
    slot->view.data = slot->bytes.data();
    // As a loaded model holds them: Q4_0 / Q8_0 rearranged for the AVX-512 kernels.
    if (matmul_prefers_interleaved(slot->view)) interleave_for_matmul(slot->view, slot->bytes.data(), &pool());
  }
  return *slot;
}

std::vector<float> activations(int64_t m, int64_t k) {
  Rng rng(42);
  std::vector<float> x(static_cast<size_t>(m * k));
  for (auto& v : x) v = float(rng.normal());
  return x;
}

constexpr int64_t kBigN = 16384, kBigK = 8192;  // matvec matrix: far larger than the caches
constexpr int64_t kMatN = 4096, kMatK = 4096;    // matmul shapes

// ---- matvec: bandwidth ----------------------------------------------------------------------------

void BM_Matvec(benchmark::State& state, DType type) {
  const Matrix& w = matrix(type, kBigN, kBigK);
  const std::vector<float> x = activations(1, kBigK);
  std::vector<float> y(kBigN);
  for (auto _ : state) {
    matmul(w.view, x.data(), 1, y.data(), &pool());
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GB/s"] = benchmark::Counter(double(w.view.bytes()), benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::OneK::kIs1000);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * kBigN * kBigK, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::OneK::kIs1000);
  state.SetLabel(std::string(dtype_name(type)) + " " + std::to_string(kBigN) + "x" + std::to_string(kBigK) + " " +
                 simd_level_name(matmul_simd_level()) + " threads=" + std::to_string(pool().size()));
}

// A LLaDA AR step forwards 2 rows ([token, MASK]): as bandwidth-bound as matvec.
void BM_Matvec2(benchmark::State& state, DType type) {
  const Matrix& w = matrix(type, kBigN, kBigK);
  const std::vector<float> x = activations(2, kBigK);
  std::vector<float> y(2 * kBigN);
  for (auto _ : state) {
    matmul(w.view, x.data(), 2, y.data(), &pool());
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GB/s"] = benchmark::Counter(double(w.view.bytes()), benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::OneK::kIs1000);
  state.SetLabel(std::string(dtype_name(type)) + " m=2 " + std::to_string(kBigN) + "x" + std::to_string(kBigK));
}

// A decoder layer's Q/K/V (hidden 1024, LLaDA-small shapes) for 2 rows, as three calls and as one fused
// call: the difference is the cost of two parallel loops and two activation quantisations.
void BM_QkvSmall(benchmark::State& state, DType type, bool fused) {
  constexpr int64_t kHidden = 1024;
  // Three distinct matrices (different row counts key the cache) so the products stream 3x the bytes.
  const Matrix& wq = matrix(type, kHidden, kHidden);
  const Matrix& wk = matrix(type, kHidden + 16, kHidden);
  const Matrix& wv = matrix(type, kHidden + 32, kHidden);
  const std::vector<float> x = activations(2, kHidden);
  std::vector<float> q(2 * kHidden), k(2 * (kHidden + 16)), v(2 * (kHidden + 32));
  const MatmulTarget targets[] = {{&wq.view, q.data(), kHidden}, {&wk.view, k.data(), kHidden + 16},
                                  {&wv.view, v.data(), kHidden + 32}};
  for (auto _ : state) {
    if (fused) {
      matmul_fused(targets, 3, x.data(), kHidden, 2, &pool());
    } else {
      for (const MatmulTarget& t : targets) matmul(*t.w, x.data(), 2, t.y, &pool());
    }
    benchmark::DoNotOptimize(q.data());
  }
  state.counters["GB/s"] = benchmark::Counter(double(wq.view.bytes() + wk.view.bytes() + wv.view.bytes()), benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::OneK::kIs1000);
  state.SetLabel(std::string(dtype_name(type)) + (fused ? " fused" : " 3 calls"));
}

// ---- matmul: compute rate ------------------------------------------------------------------------

void BM_Matmul(benchmark::State& state, DType type) {
  const int64_t m = state.range(0);
  const Matrix& w = matrix(type, kMatN, kMatK);
  const std::vector<float> x = activations(m, kMatK);
  std::vector<float> y(static_cast<size_t>(m * kMatN));
  for (auto _ : state) {
    matmul(w.view, x.data(), m, y.data(), &pool());
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * double(m) * kMatN * kMatK,
                                                 benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::OneK::kIs1000);
  state.counters["GB/s"] = benchmark::Counter(double(w.view.bytes()), benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::OneK::kIs1000);
  state.SetLabel(std::string(dtype_name(type)) + " m=" + std::to_string(m) + " n=k=" + std::to_string(kMatN) + " " +
                 simd_level_name(matmul_simd_level()));
}

// ---- the machine's streaming-read roof -------------------------------------------------------------

// The streaming sum is the one canvas bench uses (src/bench/stream_read.h).
using bench::stream_sum_avx512;

// The two backward products of a training linear layer (ops/gemm.h): dX [m, k] = dY [m, n] W [n, k]
// (arg 0) and dW [n, k] = dY^T X (arg 1, dY read transposed in place), with the FFN shape of the Sudoku
// models (64 puzzles x 81 cells, width 128, ffn 512). Compare with the fp32 FMA roof (docs).
void BM_TrainGemm(benchmark::State& state) {
  constexpr int64_t kRows = 64 * 81, kIn = 512, kOut = 128;  // dY [kRows, kIn], W [kIn, kOut], X [kRows, kOut]
  const bool weight_grad = state.range(0) == 1;
  const std::vector<float> dy = activations(kRows, kIn), w = activations(kIn, kOut), x = activations(kRows, kOut);
  const int64_t M = weight_grad ? kIn : kRows, N = kOut, K = weight_grad ? kRows : kIn;
  std::vector<float> c(static_cast<size_t>(M * N));
  for (auto _ : state) {
    gemm(M, N, K, dy.data(), weight_grad ? 1 : K, weight_grad ? M : 1, weight_grad ? x.data() : w.data(), N, c.data(),
         N, false, &pool());
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * double(M) * double(N) * double(K),
                                                 benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::OneK::kIs1000);
  state.SetLabel(std::string(weight_grad ? "dW = dY^T X" : "dX = dY W") + " M=" + std::to_string(M) +
                 " N=" + std::to_string(N) + " K=" + std::to_string(K));
}

void BM_StreamReadRoof(benchmark::State& state) {
  if (!cpu_features().avx512f) {
    state.SkipWithError("no AVX-512");
    return;
  }
  constexpr int64_t kBytes = int64_t(1) << 30;
  constexpr int64_t n = kBytes / 4;
  static float* data = [] {
    float* p = static_cast<float*>(std::aligned_alloc(64, kBytes));
    for (int64_t i = 0; i < n; ++i) p[i] = 1.f;
    return p;
  }();
  std::vector<float> partial(size_t(pool().size()) * 16);
  for (auto _ : state) {
    pool().run([&](int t, int threads) {
      const int64_t b = n / threads * t, e = t + 1 == threads ? n : n / threads * (t + 1);
      partial[size_t(t) * 16] = stream_sum_avx512(data + b, e - b);
    });
    benchmark::DoNotOptimize(partial.data());
  }
  state.counters["GB/s"] = benchmark::Counter(double(kBytes), benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::OneK::kIs1000);
  state.SetLabel("1 GiB AVX-512 sum, threads=" + std::to_string(pool().size()));
}

// ---- the machine's int8 dot-product roof -----------------------------------------------------------

// 12 independent vpdpbusd chains (enough to cover the instruction's latency); 128 ops each
// (64 multiply-adds of u8 x s8 into 16 int32 lanes).
__attribute__((target("avx512f,avx512vnni"))) int vnni_chains(int64_t iterations) {
  __m512i acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_epi32(i);
  __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-5);
  for (int64_t it = 0; it < iterations; ++it) {
    // The asm keeps the compiler from folding the loop-invariant operands out.
    __asm__ volatile("" : "+v"(a), "+v"(b));
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
  }
  __m512i s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_epi32(s, acc[i]);
  alignas(64) int lanes[16];  // (not _mm512_reduce_add_epi32: GCC 12 warns inside it, bug 105593)
  _mm512_store_si512(lanes, s);
  int total = 0;
  for (int v : lanes) total += v;
  return total;
}

void BM_VnniRoof(benchmark::State& state) {
  if (!cpu_features().avx512vnni) {
    state.SkipWithError("no AVX-512 VNNI");
    return;
  }
  constexpr int64_t kIterations = 1 << 20;
  std::vector<int> out(size_t(pool().size()) * 16);
  for (auto _ : state) {
    pool().run([&](int t, int) { out[size_t(t) * 16] = vnni_chains(kIterations); });
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GOPS"] = benchmark::Counter(128.0 * 12 * double(kIterations) * pool().size(),
                                              benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::OneK::kIs1000);
  state.SetLabel("vpdpbusd zmm, 12 chains, threads=" + std::to_string(pool().size()));
}

// The 32-row quantised matmul against the int8 roof, timed alternately in one run (GOPS = 2 m n k / t).
void BM_QuantMatmulVsVnniRoof(benchmark::State& state, DType type) {
  if (!cpu_features().avx512vnni) {
    state.SkipWithError("no AVX-512 VNNI");
    return;
  }
  const int64_t m = state.range(0);
  const Matrix& w = matrix(type, kMatN, kMatK);
  const std::vector<float> x = activations(m, kMatK);
  std::vector<float> y(static_cast<size_t>(m * kMatN));
  std::vector<int> out(size_t(pool().size()) * 16);
  constexpr int64_t kIterations = 1 << 18;
  double t_mm = 0, t_roof = 0;
  for (auto _ : state) {
    const double t0 = now_ms();
    matmul(w.view, x.data(), m, y.data(), &pool());
    const double t1 = now_ms();
    pool().run([&](int t, int) { out[size_t(t) * 16] = vnni_chains(kIterations); });
    const double t2 = now_ms();
    t_mm += t1 - t0;
    t_roof += t2 - t1;
    benchmark::DoNotOptimize(y.data());
    benchmark::DoNotOptimize(out.data());
  }
  const double iters = double(state.iterations());
  const double gops = 2.0 * double(m) * kMatN * kMatK * iters / t_mm * 1e-6;
  const double roof = 128.0 * 12 * double(kIterations) * pool().size() * iters / t_roof * 1e-6;
  state.counters["GOPS"] = gops;
  state.counters["roof_GOPS"] = roof;
  state.counters["of_roof"] = gops / roof;
  state.SetLabel(std::string(dtype_name(type)) + " m=" + std::to_string(m) + " n=k=" + std::to_string(kMatN));
}

#ifdef CANVAS_HAVE_OPENBLAS
// ---- OpenBLAS sgemm on the same product (x row-major m x k, W row-major n x k, y = x W^T) -----------

void BM_OpenBlasSgemm(benchmark::State& state) {
  const int64_t m = state.range(0);
  openblas_set_num_threads(bench_threads());
  const Matrix& w = matrix(DType::F32, kMatN, kMatK);
  const std::vector<float> x = activations(m, kMatK);
  std::vector<float> y(static_cast<size_t>(m * kMatN));
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(kMatN), int(kMatK), 1.f, x.data(), int(kMatK),
                w.view.f32(), int(kMatK), 0.f, y.data(), int(kMatN));
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * double(m) * kMatN * kMatK,
                                                 benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::OneK::kIs1000);
  state.SetLabel("m=" + std::to_string(m) + " n=k=" + std::to_string(kMatN) + " threads=" + std::to_string(bench_threads()));
}

// Both in one run: canvas matmul (F32 and Q8_0 weights) against sgemm, timed alternately.
void BM_RatioVsOpenBlas(benchmark::State& state) {
  const int64_t m = state.range(0);
  openblas_set_num_threads(bench_threads());
  const Matrix& wf = matrix(DType::F32, kMatN, kMatK);
  const Matrix& wq = matrix(DType::Q8_0, kMatN, kMatK);
  const std::vector<float> x = activations(m, kMatK);
  std::vector<float> y(static_cast<size_t>(m * kMatN));
  double t_f32 = 0, t_q8 = 0, t_blas = 0;
  for (auto _ : state) {
    double t0 = now_ms();
    matmul(wf.view, x.data(), m, y.data(), &pool());
    double t1 = now_ms();
    matmul(wq.view, x.data(), m, y.data(), &pool());
    double t2 = now_ms();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(kMatN), int(kMatK), 1.f, x.data(), int(kMatK),
                wf.view.f32(), int(kMatK), 0.f, y.data(), int(kMatN));
    double t3 = now_ms();
    t_f32 += t1 - t0;
    t_q8 += t2 - t1;
    t_blas += t3 - t2;
    benchmark::DoNotOptimize(y.data());
  }
  const double flop = 2.0 * double(m) * kMatN * kMatK * double(state.iterations());
  state.counters["f32_GFLOP/s"] = flop / t_f32 * 1e-6;
  state.counters["q8_0_GFLOP/s"] = flop / t_q8 * 1e-6;
  state.counters["sgemm_GFLOP/s"] = flop / t_blas * 1e-6;
  state.counters["f32/sgemm"] = t_blas / t_f32;
  state.counters["q8_0/sgemm"] = t_blas / t_q8;
  state.SetLabel("m=" + std::to_string(m) + " n=k=" + std::to_string(kMatN));
}
#endif

// ---- LM head: streamed over the vocabulary vs materialised logits ----------------------------------

constexpr int64_t kHeadVocab = 65536, kHeadHidden = 1024;

// The head as the model and decoders run it without lm_head_stream: logits [m x V] from one matmul,
// row_stats per row, and with `soft` softmax(logits) @ E by self_conditioning_input's tile loop
// (model.cpp): each 1024-row tile of E dequantised, transposed and multiplied by the f32 matmul.
void materialised_head(const TensorView& w, const float* x, int64_t m, bool soft, std::vector<float>& logits,
                       std::vector<RowStats>& stats, std::vector<float>& soft_out) {
  const int64_t V = w.rows(), H = w.cols();
  matmul(w, x, m, logits.data(), &pool());
  parallel_for(&pool(), m, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) stats[size_t(i)] = row_stats(&logits[size_t(i * V)], V);
  });
  if (!soft) return;
  constexpr int64_t kTile = 1024;
  std::fill(soft_out.begin(), soft_out.end(), 0.f);
  std::vector<float> partial(size_t(m * H)), rows_tile(size_t(kTile * H)), columns_tile(size_t(kTile * H)),
      probs(size_t(m * kTile));
  for (int64_t v0 = 0; v0 < V; v0 += kTile) {
    const int64_t rows = std::min(kTile, V - v0);
    parallel_for(&pool(), rows, 16, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) get_row(w, v0 + r, &rows_tile[size_t(r * H)]);
    });
    parallel_for(&pool(), H, 64, [&](int64_t b, int64_t e) {
      for (int64_t j = b; j < e; ++j)
        for (int64_t r = 0; r < rows; ++r) columns_tile[size_t(j * rows + r)] = rows_tile[size_t(r * H + j)];
    });
    parallel_for(&pool(), m, 8, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const float* z = &logits[size_t(i * V + v0)];
        for (int64_t r = 0; r < rows; ++r)
          probs[size_t(i * rows + r)] = std::exp(z[r] - stats[size_t(i)].logsumexp);
      }
    });
    TensorView t;
    t.type = DType::F32;
    t.data = columns_tile.data();
    t.n_dims = 2;
    t.ne = {rows, H, 1, 1};
    matmul(t, probs.data(), rows, m, partial.data(), H, &pool());
    for (int64_t k = 0; k < m * H; ++k) soft_out[size_t(k)] += partial[size_t(k)];
  }
}

// What a benchmark variant asks of the head: statistics only (greedy), plus softmax(logits) @ E, or the
// full sampler step (temperature 0.7: tempered statistics, a Gumbel sample, tempered soft embedding).
enum class HeadWork { Stats, Soft, Sampled };

HeadStreamOptions head_options(HeadWork work) {
  HeadStreamOptions opt;
  opt.temperature = work == HeadWork::Stats ? 0.f : work == HeadWork::Soft ? 1.f : 0.7f;
  opt.seed = 7;
  return opt;
}

const char* head_work_name(HeadWork work) {
  return work == HeadWork::Stats ? "stats" : work == HeadWork::Soft ? "soft" : "sampled";
}

void BM_LmHeadStream(benchmark::State& state, HeadWork work) {
  const int64_t m = state.range(0);
  const Matrix& w = matrix(DType::Q4_0, kHeadVocab, kHeadHidden);
  const std::vector<float> x = activations(m, kHeadHidden);
  std::vector<HeadRowStats> stats(static_cast<size_t>(m));
  std::vector<float> soft(work == HeadWork::Stats ? 0 : size_t(m * kHeadHidden));
  const HeadStreamOptions opt = head_options(work);
  for (auto _ : state) {
    lm_head_stream(w.view, x.data(), m, kHeadHidden, opt, stats.data(), soft.empty() ? nullptr : soft.data(),
                   &pool());
    benchmark::DoNotOptimize(stats.data());
  }
  state.SetLabel(std::string("q4_0 V=65536 H=1024 m=") + std::to_string(m) + " " + head_work_name(work));
}

void BM_LmHeadMaterialised(benchmark::State& state, HeadWork work) {
  const int64_t m = state.range(0);
  const Matrix& w = matrix(DType::Q4_0, kHeadVocab, kHeadHidden);
  const std::vector<float> x = activations(m, kHeadHidden);
  std::vector<float> logits(size_t(m * kHeadVocab)), soft(size_t(m * kHeadHidden));
  std::vector<RowStats> stats(static_cast<size_t>(m));
  for (auto _ : state) {
    materialised_head(w.view, x.data(), m, work != HeadWork::Stats, logits, stats, soft);
    benchmark::DoNotOptimize(stats.data());
  }
  state.SetLabel(std::string("q4_0 V=65536 H=1024 m=") + std::to_string(m) + " " + head_work_name(work) +
                 " logits=" + std::to_string(m * kHeadVocab * 4 >> 20) + "MiB");
}

// Both in one run, timed alternately (the cores are shared, so only a ratio from one run means much).
void BM_LmHeadRatio(benchmark::State& state, HeadWork work) {
  const int64_t m = state.range(0);
  const Matrix& w = matrix(DType::Q4_0, kHeadVocab, kHeadHidden);
  const std::vector<float> x = activations(m, kHeadHidden);
  std::vector<float> logits(size_t(m * kHeadVocab)), soft(size_t(m * kHeadHidden));
  std::vector<RowStats> row(static_cast<size_t>(m));
  std::vector<HeadRowStats> stats(static_cast<size_t>(m));
  const HeadStreamOptions opt = head_options(work);
  double t_stream = 0, t_materialised = 0;
  for (auto _ : state) {
    const double t0 = now_ms();
    float* soft_out = work == HeadWork::Stats ? nullptr : soft.data();
    lm_head_stream(w.view, x.data(), m, kHeadHidden, opt, stats.data(), soft_out, &pool());
    const double t1 = now_ms();
    materialised_head(w.view, x.data(), m, work != HeadWork::Stats, logits, row, soft);
    const double t2 = now_ms();
    t_stream += t1 - t0;
    t_materialised += t2 - t1;
    benchmark::DoNotOptimize(stats.data());
    benchmark::DoNotOptimize(row.data());
  }
  const double iters = double(state.iterations());
  state.counters["stream_ms"] = t_stream / iters;
  state.counters["materialised_ms"] = t_materialised / iters;
  state.counters["speedup"] = t_materialised / t_stream;
  state.SetLabel(std::string("q4_0 V=65536 H=1024 m=") + std::to_string(m) + " " + head_work_name(work));
}

const int64_t kBatchSizes[] = {1, 8, 32, 64, 256};

void register_all() {
  for (DType type : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                     DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K})
    benchmark::RegisterBenchmark((std::string("Matvec/") + dtype_name(type)).c_str(), BM_Matvec, type)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  for (DType type : {DType::F32, DType::Q8_0, DType::Q4_0, DType::F16, DType::BF16, DType::Q4_1, DType::Q5_0,
                     DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    auto* b = benchmark::RegisterBenchmark((std::string("Matmul/") + dtype_name(type)).c_str(), BM_Matmul, type);
    const bool all_sizes = type == DType::F32 || type == DType::Q8_0 || type == DType::Q4_0;  // the rest: m = 32
    for (int64_t m : kBatchSizes)
      if (all_sizes || m == 32) b->Arg(m);
    b->UseRealTime()->Unit(benchmark::kMillisecond);
  }
  benchmark::RegisterBenchmark("TrainGemm", BM_TrainGemm)->Arg(0)->Arg(1)->UseRealTime();
  benchmark::RegisterBenchmark("StreamReadRoof", BM_StreamReadRoof)->UseRealTime()->Unit(benchmark::kMillisecond);
  for (DType type : {DType::Q8_0, DType::Q4_0}) {
    benchmark::RegisterBenchmark((std::string("Matvec2/") + dtype_name(type)).c_str(), BM_Matvec2, type)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    for (bool fused : {false, true})
      benchmark::RegisterBenchmark((std::string("QkvSmall/") + dtype_name(type) + (fused ? "/fused" : "/calls")).c_str(),
                                   BM_QkvSmall, type, fused)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
  }
  benchmark::RegisterBenchmark("VnniRoof", BM_VnniRoof)->UseRealTime()->Unit(benchmark::kMillisecond);
  for (DType type : {DType::Q8_0, DType::Q4_0})
    benchmark::RegisterBenchmark((std::string("QuantMatmulVsVnniRoof/") + dtype_name(type)).c_str(),
                                 BM_QuantMatmulVsVnniRoof, type)
        ->Arg(32)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  for (HeadWork work : {HeadWork::Stats, HeadWork::Soft, HeadWork::Sampled}) {
    const std::string name = std::string("/") + head_work_name(work);
    std::vector<benchmark::internal::Benchmark*> runs = {
        benchmark::RegisterBenchmark(("LmHeadStream" + name).c_str(), BM_LmHeadStream, work)};
    if (work != HeadWork::Sampled) {  // the materialised head has no sampler to compare with
      runs.push_back(
          benchmark::RegisterBenchmark(("LmHeadMaterialised" + name).c_str(), BM_LmHeadMaterialised, work));
      runs.push_back(benchmark::RegisterBenchmark(("LmHeadRatio" + name).c_str(), BM_LmHeadRatio, work));
    }
    for (auto* b : runs) {
      if (work == HeadWork::Stats) b->Arg(1);  // an AR decode step
      b->Arg(32)->Arg(256)->UseRealTime()->Unit(benchmark::kMillisecond);
    }
  }
#ifdef CANVAS_HAVE_OPENBLAS
  // Last: OpenBLAS's threads keep spinning for a while after each call.
  auto* s = benchmark::RegisterBenchmark("OpenBlasSgemm", BM_OpenBlasSgemm);
  for (int64_t m : kBatchSizes) s->Arg(m);
  s->UseRealTime()->Unit(benchmark::kMillisecond);
  auto* r = benchmark::RegisterBenchmark("RatioVsOpenBlas", BM_RatioVsOpenBlas);
  for (int64_t m : {32, 64, 256}) r->Arg(m);
  r->UseRealTime()->Unit(benchmark::kMillisecond);
#endif
}

}  // namespace
}  // namespace canvas

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  canvas::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
