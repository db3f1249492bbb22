// Streaming-read kernels for the bandwidth roof: sum a buffer of floats as fast as the ISA allows.
#pragma once
#include <cstdint>

namespace canvas::bench {

// Each returns the sum of p[0 .. n) (n a multiple of 64, p 64-byte aligned); the value only keeps the
// loads alive. The wide ones keep four independent accumulators so the adds never limit the loads.
float stream_sum_avx512(const float* p, int64_t n);
float stream_sum_avx2(const float* p, int64_t n);
float stream_sum_scalar(const float* p, int64_t n);

}  // namespace canvas::bench
