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

}  // namespace canvas
