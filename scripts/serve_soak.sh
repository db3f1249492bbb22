#!/usr/bin/env bash
# Soak: `canvas serve` under SECONDS (default 600) of closed-loop load from CLIENTS (default 16) clients on
# 127.0.0.1, its resident memory sampled every 5 s; writes OUT (default runs/serve-soak.json) with the load
# result, the RSS samples (KiB) and the peak (VmHWM).
# Usage: scripts/serve_soak.sh [SECONDS] [CLIENTS] [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/serve_port.sh
seconds="${1:-600}"; clients="${2:-16}"; out="${3:-runs/serve-soak.json}"
mkdir -p "$(dirname "$out")"
log="$(mktemp)"
build/canvas serve --port 0 --parallel 16 --queue 64 2>"$log" &
pid=$!
trap 'kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -f "$log"' EXIT
port="$(serve_port "$log")"
samples="$(mktemp)"
( while kill -0 "$pid" 2>/dev/null; do
    echo "$(date +%s) $(sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\).*/\1/p' /proc/$pid/status)" >> "$samples"; sleep 5
  done ) &
sampler=$!
/usr/bin/python3 scripts/serve_load.py --url "http://127.0.0.1:$port" --levels "$clients" --requests 4096 \
  --time-limit "$seconds" --max-tokens 32 --mode diffusion --label soak --out "$out.load"
peak="$(sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\).*/\1/p' /proc/$pid/status)"
kill "$sampler" 2>/dev/null || true
/usr/bin/python3 - "$out" "$out.load" "$samples" "$peak" <<'PY'
import json, sys
out, load, samples, peak = sys.argv[1:]
rss = [[int(a), int(b)] for a, b in (l.split() for l in open(samples) if len(l.split()) == 2)]
t0 = rss[0][0] if rss else 0
json.dump({"load": json.load(open(load)), "rss_kib": [[t - t0, r] for t, r in rss], "peak_rss_kib": int(peak),
           "first_rss_kib": rss[0][1] if rss else 0, "last_rss_kib": rss[-1][1] if rss else 0},
          open(out, "w"), indent=1)
PY
rm -f "$out.load" "$samples"
echo "soak: peak RSS $((peak / 1024)) MiB; $out"
