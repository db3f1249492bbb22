#!/usr/bin/env bash
# Measures canvas serve under load: for each configuration (batched / one-at-a-time diffusion and AR,
# and threshold-decoding requests under diffusion and auto) starts a server on 127.0.0.1, runs scripts/serve_load.py
# at concurrency 1, 4, 16 and 64, and writes one JSON per configuration under OUT (default runs/serve-bench).
# Usage: scripts/serve_bench.sh [OUT] [REQUESTS_PER_LEVEL] [MAX_TOKENS] [CONFIG ...]
# CONFIG names one of the configurations below (default: all but auto-batched); ROUNDS=N runs the given
# configurations N times, every other round in reverse order (files NAME-rK.json), so that fixed modes
# and auto share the machine's moods; MODEL=FILE serves another model (default: the server's default).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/serve_port.sh
out="${1:-runs/serve-bench}"; requests="${2:-64}"; tokens="${3:-32}"
shift $(( $# >= 3 ? 3 : $# ))
mkdir -p "$out"
run() {  # label parallel mode [extra request fields as JSON]
  local label="$1${label_suffix:-}" parallel="$2" mode="$3" extra="${4:-{\}}" log port pid
  log="$out/$label.log"
  build/canvas serve ${MODEL:+-m "$MODEL"} --port 0 --parallel "$parallel" --queue 256 --mode "$mode" 2>"$log" &
  pid=$!
  port="$(serve_port "$log")"
  /usr/bin/python3 scripts/serve_load.py --url "http://127.0.0.1:$port" --levels 1,4,16,64 \
    --requests "$requests" --max-tokens "$tokens" --extra "$extra" --label "$label" --out "$out/$label.json"
  kill -TERM "$pid"; wait "$pid" || true
}
config() {  # name -> the arguments of run
  case "$1" in
    diffusion-batched) run "$1" 64 diffusion ;;
    diffusion-single) run "$1" 1 diffusion ;;
    ar-batched) run "$1" 64 ar ;;
    ar-single) run "$1" 1 ar ;;
    auto-batched) run "$1" 64 auto ;;
    # Routing: requests with Fast-dLLM threshold decoding (several tokens per pass), where diffusion can beat
    # AR at low load; AR ignores the threshold, so ar-batched is its fixed-mode twin.
    diffusion-threshold-batched) run "$1" 64 diffusion '{"threshold": 0.9}' ;;
    auto-threshold-batched) run "$1" 64 auto '{"threshold": 0.9}' ;;
    *) echo "unknown configuration '$1'" >&2; exit 2 ;;
  esac
}
configs=("$@")
[ ${#configs[@]} -eq 0 ] && configs=(diffusion-batched diffusion-single ar-batched ar-single diffusion-threshold-batched
                                     auto-threshold-batched)
rounds=${ROUNDS:-1}
for round in $(seq 1 "$rounds"); do
  order=("${configs[@]}")
  if [ $((round % 2)) -eq 0 ]; then  # every other round in reverse (A B, B A, ...): drift hits all alike
    order=(); for ((i = ${#configs[@]} - 1; i >= 0; i--)); do order+=("${configs[i]}"); done
  fi
  for c in "${order[@]}"; do
    if [ "$rounds" -gt 1 ]; then label_suffix="-r$round"; else label_suffix=""; fi
    config "$c"
  done
done
