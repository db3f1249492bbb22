// cpuid-based feature detection.
#include "core/cpu.h"

#include <cstdlib>
#include <cstring>

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

}  // namespace canvas
