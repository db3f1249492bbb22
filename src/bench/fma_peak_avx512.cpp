// AVX-512 FMA chains for the fp32 compute roof (compiled with AVX-512 flags; called only when the CPU has them).
#include <immintrin.h>

#include "bench/fma_peak.h"

namespace canvas::bench {

float fma_chains_avx512(int64_t iterations) {
  __m512 acc[kFmaChains];
  for (int i = 0; i < kFmaChains; ++i) acc[i] = _mm512_set1_ps(float(i));
  __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);
  for (int64_t it = 0; it < iterations; ++it) {
    // The asm keeps the compiler from folding the loop-invariant operands out of the loop.
    __asm__ volatile("" : "+v"(a), "+v"(b));
#pragma GCC unroll 12
    for (int i = 0; i < kFmaChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < kFmaChains; ++i) s = _mm512_add_ps(s, acc[i]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  float total = 0;
  for (float v : lanes) total += v;
  return total;
}

}  // namespace canvas::bench
