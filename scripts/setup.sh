#!/usr/bin/env bash
# One-time set-up on a fresh Debian machine: build dependencies from Debian's archive, then a Release build
# in ./build. Safe to run again (it only rebuilds what changed).
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(build-essential clang cmake ccache libgtest-dev libbenchmark-dev libopenblas-dev nlohmann-json3-dev qqwing bible-kjv)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
