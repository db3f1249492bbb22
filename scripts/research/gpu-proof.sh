#!/usr/bin/env bash
# The diffusion-against-AR table of docs/performance.md on a machine with an NVIDIA GPU: builds canvas with
# the CUDA backend, then runs scripts/research/dg_proof.py with `--device cuda` (the scoring stays on the CPU).
# Usage: bash scripts/research/gpu-proof.sh SPLIT_DIR [MODEL] [OUT_DIR]
#   SPLIT_DIR holds train.txt and held.txt from `canvas tokenizer split --corpus kjv --train
#   SPLIT_DIR/train.txt --held-out SPLIT_DIR/held.txt`, made where Debian's bible-kjv is installed.
#   MODEL defaults to models/text-dg.gguf, OUT_DIR to runs/gpu-proof. Extra CMake arguments (where GTest
#   or cpp-httplib live on that machine) in CANVAS_CMAKE_ARGS; PROMPTS (default 10) and SETTINGS (a
#   dg_proof.py --settings file) as environment variables.
set -euo pipefail
cd "$(dirname "$0")/../.."
split=${1:?usage: bash scripts/research/gpu-proof.sh SPLIT_DIR [MODEL] [OUT_DIR]}
model=${2:-models/text-dg.gguf}
out=${3:-runs/gpu-proof}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || echo "nvidia-smi not available"
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DCANVAS_CUDA=ON -DCANVAS_BENCH=OFF ${CANVAS_CMAKE_ARGS:-} >/dev/null
cmake --build build-cuda -j"$(nproc)" --target canvas
python3 scripts/research/dg_proof.py --canvas build-cuda/canvas --model "$model" --judge models/text-ar.gguf \
  --prompts "${PROMPTS:-10}" -n 128 -t "$(nproc)" --device cuda --split "$split/train.txt" "$split/held.txt" \
  ${SETTINGS:+--settings "$SETTINGS"} --json "$out/proof-cuda.json" | tee "$out/proof-cuda.md"
