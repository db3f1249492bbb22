#!/bin/bash
# canvas serve against llama-server on the same GGUF, closed loop (scripts/serve_load.py), 32 new tokens per
# request at temperature 0, at 1 and 16 clients, every server loaded in turn in one run (ROUNDS rounds, the
# order rotating each round), on a quiet machine and with one core kept busy by a spinning shell; prints the
# medians over the rounds (tokens/s, p50 and p95 latency) and each server's ratio to llama-server.
#   bash scripts/serve_vs_llama.sh LLAMA_SERVER [MODEL=models/text-ar.gguf] [OUT=runs/serve-vs-llama] [ROUNDS=5]
# Environment: BEFORE=CANVAS_BINARY also loads another canvas build (e.g. one built from an earlier commit),
# labelled "canvas-before"; LLAMA_ONE_THREAD=1 also loads llama-server with -t 1 ("llama-server-t1": with a
# core taken, its threads no longer wait for one another); CONDITIONS="quiet busy" (either or both);
# REQUESTS_1=300 and REQUESTS_16=960 requests per level.
# LLAMA_SERVER is a llama-server binary, e.g. built from the llama.cpp that llama-cpp-python's source carries:
#   .venv/bin/pip download --no-deps --no-binary :all: -d /tmp llama-cpp-python==0.3.36 && tar -C /tmp -xzf /tmp/llama_cpp_python-0.3.36.tar.gz &&
#   cmake -S /tmp/llama_cpp_python-0.3.36/vendor/llama.cpp -B /tmp/llama.cpp -DLLAMA_CURL=OFF -DGGML_NATIVE=ON &&
#   cmake --build /tmp/llama.cpp --target llama-server llama-bench -j2
# Every server gets every core (llama-server -t = cores, 16 slots of 1,024 context each; canvas serve
# --parallel 16). "busy": `while :; do :; done` pinned to the last core (taskset) while the level runs.
set -euo pipefail
LLAMA=${1:?usage: serve_vs_llama.sh LLAMA_SERVER [MODEL] [OUT] [ROUNDS]}
MODEL=${2:-models/text-ar.gguf}
OUT=${3:-runs/serve-vs-llama}
ROUNDS=${4:-5}
CONDITIONS=${CONDITIONS:-quiet busy}
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
unset OPENBLAS_CORETYPE
cores=$(nproc)
pids=()
spinner=""
trap 'kill ${pids[*]} $spinner 2>/dev/null || true; wait' EXIT
servers=(canvas:18080)
build/canvas serve -m "$MODEL" --port 18080 --parallel 16 > "$OUT/canvas.log" 2>&1 &
pids+=($!)
if [ -n "${BEFORE:-}" ]; then
  "$BEFORE" serve -m "$MODEL" --port 18082 --parallel 16 > "$OUT/canvas-before.log" 2>&1 &
  pids+=($!)
  servers+=(canvas-before:18082)
fi
"$LLAMA" -m "$MODEL" --port 18081 -np 16 -c 16384 -t "$cores" > "$OUT/llama.log" 2>&1 &
pids+=($!)
servers+=(llama-server:18081)
if [ -n "${LLAMA_ONE_THREAD:-}" ]; then
  "$LLAMA" -m "$MODEL" --port 18083 -np 16 -c 16384 -t 1 > "$OUT/llama-t1.log" 2>&1 &
  pids+=($!)
  servers+=(llama-server-t1:18083)
fi
for server in "${servers[@]}"; do
  for _ in $(seq 120); do
    curl -sf "http://127.0.0.1:${server#*:}/health" > /dev/null && break
    sleep 1
  done
done
echo "serve_vs_llama: load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for round in $(seq "$ROUNDS"); do
  for condition in $CONDITIONS; do
    # The order rotates each round, so no server always runs first (or right after another).
    n=${#servers[@]}
    for i in $(seq 0 $((n - 1))); do
      server=${servers[$(((i + round) % n))]}
      label=${server%%:*}
      for clients in 1 16; do
        requests=$([ "$clients" = 1 ] && echo "${REQUESTS_1:-300}" || echo "${REQUESTS_16:-960}")
        if [ "$condition" = busy ]; then
          taskset -c $((cores - 1)) bash -c 'while :; do :; done' &
          spinner=$!
        fi
        /usr/bin/python3 scripts/serve_load.py --url "http://127.0.0.1:${server#*:}" --levels "$clients" \
          --requests "$requests" --max-tokens 32 --label "$label $condition" \
          --out "$OUT/$label-$condition-c$clients-r$round.json"
        if [ -n "$spinner" ]; then
          kill "$spinner"
          wait "$spinner" 2>/dev/null || true
          spinner=""
        fi
      done
    done
  done
done
echo "serve_vs_llama: load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
/usr/bin/python3 - "$OUT" "$ROUNDS" "$CONDITIONS" "${servers[@]%%:*}" <<'PY'
import json, statistics, sys
out, rounds, conditions, labels = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4:]
def median(label, condition, clients, key):
    values = []
    for r in range(1, rounds + 1):
        with open(f"{out}/{label}-{condition}-c{clients}-r{r}.json") as f:
            values.append(json.load(f)["levels"][0][key])
    return statistics.median(values)
print(f"medians of {rounds} rounds; tokens/s (p50 ms / p95 ms); ratio: tokens/s over llama-server's")
print("| machine | clients | " + " | ".join(labels) + " | " +
      " | ".join(f"{l} / llama-server" for l in labels if l.startswith("canvas")) + " |")
print("|---|---:|" + "---:|" * (len(labels) + sum(l.startswith("canvas") for l in labels)))
for condition in conditions:
    for clients in (1, 16):
        cells, rates = [], {}
        for label in labels:
            rates[label] = median(label, condition, clients, "tokens_per_s")
            cells.append(f"{rates[label]:,.0f} ({median(label, condition, clients, 'p50_ms'):.1f} / "
                         f"{median(label, condition, clients, 'p95_ms'):.1f})")
        ratios = [f"{rates[l] / rates['llama-server']:.2f}" for l in labels if l.startswith("canvas")]
        name = "quiet" if condition == "quiet" else "one core busy"
        print(f"| {name} | {clients} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
PY
