#!/usr/bin/env bash
# One short run on a machine with an NVIDIA GPU: build canvas with the CUDA backend and compare every
# CUDA kernel with its CPU twin (tests/cuda_test.cpp). Prints the device, the test results and how long
# the build took. Usage: bash scripts/gpu-check.sh [BUILD_DIR]   (default build-cuda); extra CMake arguments
# (e.g. where GTest or cpp-httplib live on that machine) in CANVAS_CMAKE_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-cuda}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "nvidia-smi not available"
start=$(date +%s)
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCANVAS_CUDA=ON -DCANVAS_BENCH=OFF ${CANVAS_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j"$(nproc)" --target canvas_cuda_tests canvas
echo "build: $(( $(date +%s) - start )) s"
"$build/canvas_cuda_tests" --gtest_color=no
