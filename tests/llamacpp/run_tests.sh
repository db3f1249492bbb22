#!/usr/bin/env bash
# Runs the llama.cpp compatibility tests (llamacpp.test.mjs) with node-llama-cpp's prebuilt CPU build of
# llama.cpp. Usage: run_tests.sh CANVAS_BINARY SOURCE_DIR. Exits 77 (ctest: skipped) with the reason when
# node-llama-cpp is not installed (scripts/setup.sh installs it on x86-64 Linux).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [ ! -d "$here/node_modules/node-llama-cpp" ] || [ ! -d "$here/node_modules/@node-llama-cpp/linux-x64" ]; then
  echo "SKIPPED: tests/llamacpp/node_modules lacks node-llama-cpp and its prebuilt linux-x64 llama.cpp;" \
       "run scripts/setup.sh (x86-64 Linux) or: cd tests/llamacpp && npm ci --omit=optional --ignore-scripts" >&2
  exit 77
fi
# Never download or build llama.cpp: the prebuilt CPU binaries or nothing.
export NODE_LLAMA_CPP_SKIP_DOWNLOAD=true NODE_LLAMA_CPP_GPU=false
export CANVAS_BINARY="$(realpath "$1")" CANVAS_SOURCE="$(realpath "$2")"
cd "$here"
exec node --test --test-concurrency=1 llamacpp.test.mjs
