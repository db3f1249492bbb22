// CPU feature detection, used to choose SIMD kernels at run time.
#pragma once
#include <string>

namespace canvas {

enum class SimdLevel { Scalar = 0, Avx2 = 1, Avx512 = 2 };

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512vnni = false, avx512bf16 = false;
};

const CpuFeatures& cpu_features();
// The best level this CPU supports, lowered by the CANVAS_SIMD environment variable
// ("scalar", "avx2", "avx512") so every path can be exercised on one machine.
SimdLevel simd_level();
const char* simd_level_name(SimdLevel level);

// The CPUs this process may use: those of its affinity mask (sched_getaffinity), lowered to the cgroup's
// CPU quota rounded up (cgroup v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us); at least 1. The
// default thread count: a container given 2 of a host's 64 cores runs 2 threads, not 64.
int usable_cpus();
// The same from the texts of an affinity count and a cgroup's files ("" when absent), for tests.
int usable_cpus_from(int affinity, const std::string& cpu_max, const std::string& cfs_quota,
                     const std::string& cfs_period);

}  // namespace canvas
