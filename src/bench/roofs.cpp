// Streaming-read and matmul roofs of the machine.
#include "bench/roofs.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>

#include "bench/fma_peak.h"
#include "bench/stats.h"
#include "bench/stream_read.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/timer.h"
#include "ops/matmul.h"

namespace canvas::bench {
namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// 64-byte aligned, uninitialised: the first touch happens in the threads that use it.
std::unique_ptr<uint8_t, FreeDeleter> aligned_bytes(int64_t bytes, const std::string& what) {
  const size_t rounded = size_t((bytes + 63) / 64 * 64);
  void* p = std::aligned_alloc(64, rounded);
  check(p != nullptr, "bench: cannot allocate " + std::to_string(bytes >> 20) + " MiB for " + what);
  return std::unique_ptr<uint8_t, FreeDeleter>(static_cast<uint8_t*>(p));
}

float stream_sum(const float* p, int64_t n) {
  const SimdLevel level = simd_level();
  if (level == SimdLevel::Avx512) return stream_sum_avx512(p, n);
  if (level == SimdLevel::Avx2) return stream_sum_avx2(p, n);
  return stream_sum_scalar(p, n);
}

}  // namespace

float stream_sum_scalar(const float* p, int64_t n) {
  float a[8] = {};
  for (int64_t i = 0; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) a[j] += p[i + j];
  float s = 0;
  for (float v : a) s += v;
  return s;
}

RoofOptions RoofOptions::quick() {
  RoofOptions o;
  o.stream_bytes = int64_t(32) << 20;
  o.stream_repeats = 3;
  o.matmul_n = 256;
  o.matmul_k = 256;
  o.matmul_set_bytes = int64_t(2) << 20;
  o.rows = {1, 8};
  o.matmul_repeats = 3;
  o.matmul_max_ms = 200;
  return o;
}

std::vector<DType> matmul_dtypes() {
  static const DType kAll[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1,
                               DType::Q5_0, DType::Q5_1, DType::Q8_1, DType::Q2_K, DType::Q3_K, DType::Q4_K,
                               DType::Q5_K, DType::Q6_K, DType::Q8_K};
  std::vector<DType> out;
  for (DType t : kAll)
    if (matmul_supports(t)) out.push_back(t);
  return out;
}

double Roofs::matmul_gflops(DType type, double rows) const {
  double best = 0, best_distance = 1e300;
  for (const MatmulRoof& r : matmul) {
    if (r.type != type) continue;
    const double distance = std::fabs(std::log(std::max(rows, 1.0)) - std::log(double(r.m)));
    if (distance < best_distance) {
      best_distance = distance;
      best = r.gflops;
    }
  }
  return best;
}

double measure_stream_read(ThreadPool& pool, int64_t bytes, int repeats) {
  check(repeats > 0, "bench: stream-read repeats must be positive");
  const int threads = pool.size();
  // Each thread's share is a whole number of 64-float (256-byte) groups.
  const int64_t groups = bytes / 256 / threads;
  check(groups > 0, "bench: stream-read buffer of " + std::to_string(bytes) + " bytes is too small");
  const int64_t per_thread = groups * 64;  // floats
  auto buffer = aligned_bytes(per_thread * threads * 4, "the stream-read buffer");
  float* data = reinterpret_cast<float*>(buffer.get());
  // Each thread first-touches its own part (NUMA-friendly), with values that keep the sum finite.
  pool.run([&](int t, int) {
    float* p = data + int64_t(t) * per_thread;
    for (int64_t i = 0; i < per_thread; ++i) p[i] = 1.f;
  });
  std::vector<float> partial(size_t(threads) * 16);  // one cache line per thread
  std::vector<double> gbs;
  for (int r = 0; r < repeats + 1; ++r) {
    const double t0 = now_ms();
    pool.run([&](int t, int) { partial[size_t(t) * 16] = stream_sum(data + int64_t(t) * per_thread, per_thread); });
    const double ms = now_ms() - t0;
    check(partial[0] > 0, "bench: the stream-read sum is not positive: the kernel is broken");
    if (r > 0) gbs.push_back(double(per_thread * threads * 4) / (ms * 1e6));  // r = 0 warms up
  }
  return median(gbs);
}

double measure_fma_peak(ThreadPool& pool, int repeats, double ms_per_repeat, double* per_cpu_second) {
  check(repeats > 0 && ms_per_repeat > 0, "bench: FMA roof repeats and duration must be positive");
  const SimdLevel level = simd_level();
  const int lanes = level == SimdLevel::Avx512 ? 16 : level == SimdLevel::Avx2 ? 8 : 1;
  auto run = [level](int64_t iterations) {
    if (level == SimdLevel::Avx512) return fma_chains_avx512(iterations);
    if (level == SimdLevel::Avx2) return fma_chains_avx2(iterations);
    return fma_chains_scalar(iterations);
  };
  // Calibrate on one thread: iterations that take about ms_per_repeat.
  int64_t iterations = 1 << 16;
  for (;;) {
    const double t0 = now_ms();
    volatile float sink = run(iterations);
    (void)sink;
    const double ms = now_ms() - t0;
    if (ms >= ms_per_repeat / 4 || iterations >= (int64_t(1) << 34)) {
      iterations = std::max<int64_t>(1, int64_t(double(iterations) * ms_per_repeat / std::max(ms, 1e-3)));
      break;
    }
    iterations *= 4;
  }
  const int threads = pool.size();
  std::vector<float> out(size_t(threads) * 16);  // one cache line per thread
  std::vector<double> gflops, cpu_gflops;
  for (int r = 0; r < repeats + 1; ++r) {
    const std::clock_t cpu0 = std::clock();
    const double t0 = now_ms();
    pool.run([&](int t, int) { out[size_t(t) * 16] = run(iterations); });
    const double ms = now_ms() - t0;
    const double cpu_ms = double(std::clock() - cpu0) * 1000.0 / CLOCKS_PER_SEC;
    if (r == 0) continue;  // warms up (clocks, thread wake-up)
    const double flops = 2.0 * lanes * kFmaChains * double(iterations) * threads;
    gflops.push_back(flops / (ms * 1e6));
    cpu_gflops.push_back(flops / (std::max(cpu_ms, 1e-3) * 1e6));
  }
  if (per_cpu_second) *per_cpu_second = median(cpu_gflops);
  return median(gflops);
}

float fma_chains_scalar(int64_t iterations) {
  float acc[kFmaChains];
  for (int i = 0; i < kFmaChains; ++i) acc[i] = float(i);
  volatile float a_in = 0.999f, b_in = 0.001f;
  const float a = a_in, b = b_in;
  for (int64_t it = 0; it < iterations; ++it)
    for (int i = 0; i < kFmaChains; ++i) acc[i] = std::fma(acc[i], a, b);
  float s = 0;
  for (float v : acc) s += v;
  return s;
}

std::vector<MatmulRoof> measure_matmul(ThreadPool& pool, const RoofOptions& options) {
  const int64_t n = options.matmul_n, k = options.matmul_k;
  check(n > 0 && k > 0 && k % 256 == 0, "bench: matmul roof shape must have k a multiple of 256");
  std::vector<DType> types = options.types.empty() ? matmul_dtypes() : options.types;
  std::vector<MatmulRoof> out;
  const int64_t max_m = *std::max_element(options.rows.begin(), options.rows.end());
  Rng rng(7);
  std::vector<float> x(size_t(max_m * k)), y(size_t(max_m * n));
  for (float& v : x) v = float(rng.normal());
  for (DType type : types) {
    check(matmul_supports(type), std::string("bench: matmul does not support ") + dtype_name(type));
    const int64_t rb = row_bytes(type, k), matrix_bytes = rb * n;
    const int64_t copies = std::clamp<int64_t>((options.matmul_set_bytes + matrix_bytes - 1) / matrix_bytes, 1, 256);
    auto storage = aligned_bytes(matrix_bytes * copies, std::string("the ") + dtype_name(type) + " matmul roof");
    // 64 distinct random rows repeated: values do not change the speed, and building stays fast.
    std::vector<float> row(static_cast<size_t>(k));
    const int64_t distinct = std::min<int64_t>(64, n);
    for (int64_t j = 0; j < distinct; ++j) {
      for (float& v : row) v = float(rng.normal()) * 0.05f;
      quantize_row(type, row.data(), storage.get() + j * rb, k);
    }
    for (int64_t j = distinct; j < n * copies; ++j)
      std::memcpy(storage.get() + j * rb, storage.get() + (j % distinct) * rb, size_t(rb));
    std::vector<TensorView> views(static_cast<size_t>(copies));
    for (int64_t c = 0; c < copies; ++c) {
      TensorView& v = views[size_t(c)];
      v.name = "roof";
      v.type = type;
      v.ne = {k, n, 1, 1};
      v.n_dims = 2;
      v.data = storage.get() + c * matrix_bytes;
      // In the layout a loaded model's matrices have (Q4_0 / Q8_0 interleaved for the AVX-512 kernels).
      if (matmul_prefers_interleaved(v)) interleave_for_matmul(v, storage.get() + c * matrix_bytes, &pool);
    }
    int64_t next = 0;
    for (int64_t m : options.rows) {
      check(m > 0, "bench: matmul roof row counts must be positive");
      for (int64_t c = 0; c < copies; ++c) matmul(views[size_t(c)], x.data(), m, y.data(), &pool);  // warm-up
      std::vector<double> times;
      const double start = now_ms();
      const int64_t calls = std::max<int64_t>(options.matmul_repeats, m <= 8 ? copies : 0);
      for (int64_t i = 0; i < calls; ++i) {
        const TensorView& v = views[size_t(next++ % copies)];
        const double t0 = now_ms();
        matmul(v, x.data(), m, y.data(), &pool);
        times.push_back(now_ms() - t0);
        if (times.size() >= 3 && now_ms() - start > options.matmul_max_ms) break;
      }
      MatmulRoof r;
      r.type = type;
      r.m = m;
      r.n = n;
      r.k = k;
      r.ms = median(times);
      r.gflops = 2.0 * double(m) * double(n) * double(k) / (r.ms * 1e6);
      r.gbs = double(matrix_bytes) / (r.ms * 1e6);
      out.push_back(r);
    }
  }
  return out;
}

Roofs measure_roofs(ThreadPool& pool, const RoofOptions& options) {
  const ThreadPool::AllThreads every_thread(pool);  // a roof is what all the threads reach
  Roofs roofs;
  roofs.threads = pool.size();
  roofs.stream_bytes = options.stream_bytes;
  roofs.stream_gbs = measure_stream_read(pool, options.stream_bytes, options.stream_repeats);
  roofs.fma_gflops = measure_fma_peak(pool, options.fma_repeats);
  roofs.matmul = measure_matmul(pool, options);
  return roofs;
}

}  // namespace canvas::bench
