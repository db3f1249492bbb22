// The machine's roofs, measured in the same run as the model: streaming-read bandwidth and the
// matmul rate per weight dtype and row count. Model results are reported as fractions of these.
#pragma once
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace canvas::bench {

struct RoofOptions {
  int64_t stream_bytes = int64_t(1) << 30;  // far larger than any L3, so the sum reads DRAM
  int stream_repeats = 7;
  int fma_repeats = 5;
  int64_t matmul_n = 4096, matmul_k = 4096;  // LLaDA-8B's attention projection
  // Copies of the matrix are cycled through until their total reaches this, so a small-m product
  // streams its weights from DRAM, as in a real forward pass, instead of finding them in cache.
  int64_t matmul_set_bytes = int64_t(256) << 20;
  std::vector<int64_t> rows = {1, 8, 32, 256};
  std::vector<DType> types;  // empty: every dtype matmul_supports
  int matmul_repeats = 5;
  double matmul_max_ms = 1500;  // per (type, rows): stop repeating after this (at least 3 calls)

  // Small sizes for tests and CI: numbers are then cache rates, not DRAM roofs.
  static RoofOptions quick();
};

struct MatmulRoof {
  DType type = DType::F32;
  int64_t m = 0, n = 0, k = 0;
  double ms = 0;      // median time of one product
  double gflops = 0;  // 2 m n k / time
  double gbs = 0;     // weight bytes / time
};

struct Roofs {
  int threads = 0;
  double fma_gflops = 0;  // fp32 FMA peak of all threads (0 when not measured)
  int64_t stream_bytes = 0;
  double stream_gbs = 0;  // median over repeats
  std::vector<MatmulRoof> matmul;

  // The matmul rate for weights of `type` at the measured row count nearest (in log scale) to `rows`;
  // 0 when that type was not measured.
  double matmul_gflops(DType type, double rows) const;
};

// Every dtype that matmul accepts, in a fixed order (f32 first, then halves, then quantised).
std::vector<DType> matmul_dtypes();

// Median GB/s of an all-threads SIMD sum over `bytes` (rounded down to a whole number of 64-float groups).
double measure_stream_read(ThreadPool& pool, int64_t bytes, int repeats);
// The fp32 compute roof: median GFLOP/s of register-only FMA chains (the widest vectors the CPU has)
// run on every thread of the pool at once, each repeat lasting about `ms_per_repeat`. per_cpu_second,
// when given, receives the median rate per second of process CPU time (all threads), which does not
// count time the threads spent waiting for a core on a shared machine.
double measure_fma_peak(ThreadPool& pool, int repeats = 5, double ms_per_repeat = 40,
                        double* per_cpu_second = nullptr);
std::vector<MatmulRoof> measure_matmul(ThreadPool& pool, const RoofOptions& options);
Roofs measure_roofs(ThreadPool& pool, const RoofOptions& options);

}  // namespace canvas::bench
