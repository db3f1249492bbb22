#!/usr/bin/env bash
# One-time set-up on a fresh Debian machine: build dependencies from Debian's archive, then a Release build
# in ./build. Safe to run again (it only rebuilds what changed).
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(build-essential clang cmake ccache libgtest-dev libbenchmark-dev libopenblas-dev nlohmann-json3-dev libcpp-httplib-dev zlib1g-dev
          qqwing bible-kjv fortunes chromium nginx-light curl python3-jsonschema)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
# canvas serve's client tests run on Node (any install: Debian's nodejs + npm, or one that bundles npm).
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# The openai npm client and playwright-core (drives Debian's chromium) for tests/node, at the versions
# package-lock.json pins.
(cd tests/node && npm ci --no-audit --no-fund --loglevel=error)
# llama.cpp for the compatibility tests (tests/llamacpp): node-llama-cpp with its prebuilt CPU binaries for
# x86-64 Linux only (--omit=optional skips the CUDA/Vulkan/other-platform builds; --ignore-scripts and
# NODE_LLAMA_CPP_SKIP_DOWNLOAD: it never downloads or compiles llama.cpp). Elsewhere the test is skipped.
if [ "$(uname -s)-$(uname -m)" = "Linux-x86_64" ]; then
  (cd tests/llamacpp && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci --omit=optional --ignore-scripts --no-audit --no-fund --loglevel=error)
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
