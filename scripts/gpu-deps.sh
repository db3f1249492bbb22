#!/usr/bin/env bash
# Prepares, on this Debian machine, the libraries a GPU machine lacks to build canvas there (googletest,
# nlohmann-json, cpp-httplib with its brotli / OpenSSL / zlib): their Debian packages are downloaded into
# .gpu-deps/ (ignored by git), a GPU run carries that folder, and scripts/gpu-check.sh unpacks it into a
# private prefix (never into /) and builds against it. Debian 12's libraries need glibc 2.36, which
# newer images (Ubuntu 24.04: 2.39) satisfy.
# Usage: bash scripts/gpu-deps.sh   (then the device run names .gpu-deps in carry)
# The tracked tree is close to the 64 MiB a device run may carry (the shipped models are most of it):
# scripts/gpu-run.sh prepare runs this and takes the models out of the run.
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(libgtest-dev nlohmann-json3-dev libcpp-httplib-dev libcpp-httplib0.11 libbrotli1 libssl-dev libssl3
          zlib1g-dev zlib1g)
rm -rf .gpu-deps
mkdir -p .gpu-deps
grep -qx '/.gpu-deps/' .git/info/exclude 2>/dev/null || echo '/.gpu-deps/' >> .git/info/exclude
(cd .gpu-deps && apt-get download "${packages[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
ls .gpu-deps/*.deb >/dev/null
echo ".gpu-deps: $(ls .gpu-deps/*.deb | wc -l) packages, $(du -sh .gpu-deps | cut -f1)"
echo "tracked files: $(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1) bytes (a run carries at most 67108864)"
