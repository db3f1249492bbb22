// Register-only fused multiply-add kernels for the fp32 compute roof: no memory traffic, so their rate
// is the most f32 arithmetic the cores can do (the ceiling every f32 matmul and training step is held to).
#pragma once
#include <cstdint>

namespace canvas::bench {

// Each runs `iterations` rounds of kFmaChains independent FMA chains over whole vectors and returns a
// value that keeps them alive. FLOPs done: 2 * lanes * kFmaChains * iterations (lanes 16 / 8 / 1).
constexpr int kFmaChains = 12;  // enough independent chains to cover the FMA latency on both pipes
float fma_chains_avx512(int64_t iterations);
float fma_chains_avx2(int64_t iterations);
float fma_chains_scalar(int64_t iterations);

}  // namespace canvas::bench
