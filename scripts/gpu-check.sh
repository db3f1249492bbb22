#!/usr/bin/env bash
# One short run on a machine with an NVIDIA GPU (a few minutes): build canvas with the CUDA backend,
# compare every CUDA kernel and whole forwards with their CPU twins (tests/cuda_test.cpp), then time the
# DiffusionGemma-26B-A4B shape (synthetic weights, Q4_0 dequantised to f16 on the GPU, and bf16): the
# prompt's encoder pass, a 256-token decoder pass with the fused head, an AR step, and the tokens/s of a
# 256-token canvas in 8 / 16 / 32 steps against AR (docs/performance.md, "On an NVIDIA H200").
# Usage: bash scripts/gpu-check.sh [BUILD_DIR]   (default build-cuda); extra CMake arguments (e.g. where
# GTest or cpp-httplib live on that machine) in CANVAS_CMAKE_ARGS; SKIP_BENCH=1 runs the tests only.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-cuda}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "nvidia-smi not available"
start=$(date +%s)
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCANVAS_CUDA=ON -DCANVAS_BENCH=OFF ${CANVAS_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j"$(nproc)" --target canvas_cuda_tests canvas
echo "build: $(( $(date +%s) - start )) s"
status=0
"$build/canvas_cuda_tests" --gtest_color=no || status=$?
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  for type in q4_0 bf16; do
    echo "== DiffusionGemma-26B-A4B shape, $type weights"
    timeout 300 "$build/canvas" bench --synthetic diffusion-gemma:26b-a4b --type "$type" --device cuda -p 32 \
      --warmup 1 --repeats 5 --modes ar,stream -t "$(nproc)" || status=$?
  done
fi
exit $status
