#!/bin/bash
# canvas serve against llama-server on the same GGUF, closed loop (scripts/serve_load.py), 32 new tokens per
# request at temperature 0, at 1 and 16 clients, both servers loaded alternately in one run (ROUNDS rounds).
#   bash scripts/serve_vs_llama.sh LLAMA_SERVER [MODEL=models/text-ar.gguf] [OUT=runs/serve-vs-llama] [ROUNDS=2]
# LLAMA_SERVER is a llama-server binary, e.g. built from the llama.cpp that llama-cpp-python's source carries:
#   .venv/bin/pip download --no-deps --no-binary :all: -d /tmp llama-cpp-python==0.3.36 && tar -C /tmp -xzf /tmp/llama_cpp_python-0.3.36.tar.gz &&
#   cmake -S /tmp/llama_cpp_python-0.3.36/vendor/llama.cpp -B /tmp/llama.cpp -DLLAMA_CURL=OFF -DGGML_NATIVE=ON &&
#   cmake --build /tmp/llama.cpp --target llama-server llama-bench -j2
# Both get every core (llama-server -t = cores, 16 slots of 1,024 context each; canvas serve --parallel 16).
set -euo pipefail
LLAMA=${1:?usage: serve_vs_llama.sh LLAMA_SERVER [MODEL] [OUT] [ROUNDS]}
MODEL=${2:-models/text-ar.gguf}
OUT=${3:-runs/serve-vs-llama}
ROUNDS=${4:-2}
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
unset OPENBLAS_CORETYPE
cores=$(nproc)
build/canvas serve -m "$MODEL" --port 18080 --parallel 16 > "$OUT/canvas.log" 2>&1 &
canvas_pid=$!
"$LLAMA" -m "$MODEL" --port 18081 -np 16 -c 16384 -t "$cores" > "$OUT/llama.log" 2>&1 &
llama_pid=$!
trap 'kill $canvas_pid $llama_pid 2>/dev/null || true' EXIT
for _ in $(seq 120); do
  curl -sf http://127.0.0.1:18080/health > /dev/null && curl -sf http://127.0.0.1:18081/health > /dev/null && break
  sleep 1
done
for round in $(seq "$ROUNDS"); do
  for server in canvas:18080 llama-server:18081; do
    /usr/bin/python3 scripts/serve_load.py --url "http://127.0.0.1:${server#*:}" --levels 1,16 --requests 96 \
      --max-tokens 32 --label "${server%%:*}" --out "$OUT/${server%%:*}-$round.json"
  done
done
