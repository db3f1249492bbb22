// cpuid-based feature detection.
#include "core/cpu.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace canvas {

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = [] {
    CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    f.avx2 = __builtin_cpu_supports("avx2");
    f.fma = __builtin_cpu_supports("fma");
    f.f16c = true;  // every AVX2 CPU we target has F16C; checked with avx2 below
    f.avx512f = __builtin_cpu_supports("avx512f");
    f.avx512bw = __builtin_cpu_supports("avx512bw");
    f.avx512vl = __builtin_cpu_supports("avx512vl");
    f.avx512dq = __builtin_cpu_supports("avx512dq");
    f.avx512vnni = __builtin_cpu_supports("avx512vnni");
    f.avx512bf16 = __builtin_cpu_supports("avx512bf16");
#endif
    return f;
  }();
  return features;
}

SimdLevel simd_level() {
  static const SimdLevel level = [] {
    const CpuFeatures& f = cpu_features();
    SimdLevel best = SimdLevel::Scalar;
    if (f.avx2 && f.fma) best = SimdLevel::Avx2;
    if (best == SimdLevel::Avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512vnni &&
        f.avx512bf16)
      best = SimdLevel::Avx512;
    if (const char* env = std::getenv("CANVAS_SIMD")) {
      SimdLevel cap = best;
      if (!std::strcmp(env, "scalar")) cap = SimdLevel::Scalar;
      if (!std::strcmp(env, "avx2")) cap = SimdLevel::Avx2;
      if (int(cap) < int(best)) best = cap;
    }
    return best;
  }();
  return level;
}

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::Avx512: return "avx512";
    case SimdLevel::Avx2: return "avx2";
    default: return "scalar";
  }
}

namespace {

std::string read_small_file(const char* path) {
  std::ifstream in(path);
  std::ostringstream text;
  if (in) text << in.rdbuf();
  return text.str();
}

// ceil(quota / period) for positive numbers, else 0 (no limit).
int quota_cpus(double quota, double period) {
  if (!(quota > 0) || !(period > 0)) return 0;
  return int(std::min(1e6, std::ceil(quota / period)));
}

}  // namespace

int usable_cpus_from(int affinity, const std::string& cpu_max, const std::string& cfs_quota,
                     const std::string& cfs_period) {
  int cpus = std::max(1, affinity);
  int limit = 0;
  std::istringstream v2(cpu_max);  // "max 100000" or "200000 100000"
  std::string quota;
  double period = 0;
  if (v2 >> quota >> period && quota != "max") limit = quota_cpus(std::atof(quota.c_str()), period);
  if (limit == 0 && !cfs_quota.empty()) limit = quota_cpus(std::atof(cfs_quota.c_str()), std::atof(cfs_period.c_str()));
  if (limit > 0) cpus = std::min(cpus, limit);
  return std::max(1, cpus);
}

int usable_cpus() {
  static const int cpus = [] {
    int affinity = int(std::thread::hardware_concurrency());
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0) affinity = CPU_COUNT(&set);
    return usable_cpus_from(affinity, read_small_file("/sys/fs/cgroup/cpu.max"),
                            read_small_file("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"),
                            read_small_file("/sys/fs/cgroup/cpu/cpu.cfs_period_us"));
  }();
  return cpus;
}

}  // namespace canvas
