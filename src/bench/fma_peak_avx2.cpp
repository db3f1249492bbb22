// AVX2 FMA chains for the fp32 compute roof (compiled with AVX2 + FMA flags; called only when the CPU has them).
#include <immintrin.h>

#include "bench/fma_peak.h"

namespace canvas::bench {

float fma_chains_avx2(int64_t iterations) {
  __m256 acc[kFmaChains];
  for (int i = 0; i < kFmaChains; ++i) acc[i] = _mm256_set1_ps(float(i));
  __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
  for (int64_t it = 0; it < iterations; ++it) {
    __asm__ volatile("" : "+x"(a), "+x"(b));  // keeps the operands from being folded out
#pragma GCC unroll 12
    for (int i = 0; i < kFmaChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  __m256 s = acc[0];
  for (int i = 1; i < kFmaChains; ++i) s = _mm256_add_ps(s, acc[i]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  float total = 0;
  for (float v : lanes) total += v;
  return total;
}

}  // namespace canvas::bench
