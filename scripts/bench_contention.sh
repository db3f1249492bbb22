#!/usr/bin/env bash
# canvas generate on a quiet machine and with one busy process per spare core (a shell spinning), in one run:
# each mode (ar, verify, diffusion) at the default thread count and at -t 1, medians of REPEATS runs of
# 64 new tokens (the run's own prompt + decode time, from --json), the repeats taken round-robin over the
# configurations. With BEFORE=path/to/another/canvas the same
# rows for that binary too (e.g. a build of the previous commit), alternating with this one; with
# LLAMA_BENCH=path/to/llama-bench also llama.cpp's decode of models/text-ar.gguf (tg64) beside canvas's
# --mode ar on that file. Prints each row's busy / quiet ratio, then the default thread count against -t 1
# under each load. With LLAMA_SERVER=path/to/llama-server, then serve under load too: scripts/serve_vs_llama.sh
# (canvas serve against llama-server on models/text-ar.gguf at 1 and 16 clients, quiet and with one core busy;
# BEFORE is passed on). Nothing else should be running.
# Usage: scripts/bench_contention.sh [REPEATS=5] [OUT=runs/bench-contention.json]
set -euo pipefail
cd "$(dirname "$0")/.."
repeats="${1:-5}"; out="${2:-runs/bench-contention.json}"
mkdir -p "$(dirname "$out")"
binaries=("build/canvas")
[ -n "${BEFORE:-}" ] && binaries+=("$BEFORE")
spare=$(( $(nproc) - 1 )); [ "$spare" -ge 1 ] || spare=1
results="$(mktemp)"
spinners=()
stop_spinners() { for p in "${spinners[@]}"; do kill "$p" 2>/dev/null || true; done; spinners=(); }
trap 'stop_spinners; rm -f "$results"' EXIT

measure() {  # load binary model mode threads -> one line of JSON (one run)
  local load="$1" bin="$2" model="$3" mode="$4" threads="$5" t_arg=() ms
  [ "$threads" != default ] && t_arg=(-t "$threads")
  ms="$("$bin" generate -m "$model" -p "And God said" -n 64 --mode "$mode" --ignore-eos --json -s 1 "${t_arg[@]}" 2>/dev/null |
        python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["prompt_ms"] + d["decode_ms"])')"
  echo "{\"load\": \"$load\", \"binary\": \"$bin\", \"model\": \"$model\", \"mode\": \"$mode\", \"threads\": \"$threads\", \"ms\": $ms}" >> "$results"
}
llama_measure() {  # load -> llama-bench tg64 ms per run, REPEATS runs
  local load="$1"
  "$LLAMA_BENCH" -m models/text-ar.gguf -p 0 -n 64 -r "$repeats" -o json 2>/dev/null |
    python3 -c '
import json, sys
for r in json.load(sys.stdin):
    for ts in r["samples_ts"]:
        print(json.dumps({"load": sys.argv[1], "binary": "llama-bench", "model": "models/text-ar.gguf",
                          "mode": "ar", "threads": str(r["n_threads"]), "ms": 64 / ts * 1000}))' "$load" >> "$results"
}

for load in quiet busy; do
  if [ "$load" = busy ]; then
    for _ in $(seq 1 "$spare"); do sh -c 'while :; do :; done' & spinners+=($!); done
    sleep 0.5
  fi
  # One untimed run first (page cache, clocks); then the repeats round-robin over every configuration, so a
  # disturbance of the machine spreads over all of them instead of landing on one.
  "${binaries[0]}" generate -m models/text-dg.gguf -p "And God said" -n 64 --ignore-eos -s 1 >/dev/null 2>&1 || true
  for _ in $(seq 1 "$repeats"); do
    for mode in ar verify diffusion; do
      for threads in default 1; do
        for bin in "${binaries[@]}"; do measure "$load" "$bin" models/text-dg.gguf "$mode" "$threads"; done
      done
    done
    if [ -n "${LLAMA_BENCH:-}" ]; then
      for bin in "${binaries[@]}"; do measure "$load" "$bin" models/text-ar.gguf ar default; done
    fi
  done
  [ -n "${LLAMA_BENCH:-}" ] && llama_measure "$load"
  stop_spinners
done

python3 - "$results" "$out" <<'EOF'
import collections, json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
groups = collections.OrderedDict()
for r in rows:
    groups.setdefault((r["binary"], r["model"], r["mode"], r["threads"]), {}).setdefault(r["load"], []).append(r["ms"])
table = []
print(f"{'binary':28} {'model':22} {'mode':9} {'-t':>7} {'quiet ms':>9} {'busy ms':>9} {'busy/quiet':>10}")
for (binary, model, mode, threads), by_load in groups.items():
    q = statistics.median(by_load.get("quiet", [float("nan")]))
    b = statistics.median(by_load.get("busy", [float("nan")]))
    table.append({"binary": binary, "model": model, "mode": mode, "threads": threads, "quiet_ms": q, "busy_ms": b})
    print(f"{binary[-28:]:28} {model[-22:]:22} {mode:9} {threads:>7} {q:9.1f} {b:9.1f} {b / q:10.2f}")
# The default thread count against -t 1, each load, per binary and mode (the same run).
print(f"\n{'binary':28} {'model':22} {'mode':9} {'quiet default/-t1':>18} {'busy default/-t1':>17}")
by_key = {(r["binary"], r["model"], r["mode"], r["threads"]): r for r in table}
for r in table:
    one = by_key.get((r["binary"], r["model"], r["mode"], "1"))
    if r["threads"] != "default" or one is None:
        continue
    print(f"{r['binary'][-28:]:28} {r['model'][-22:]:22} {r['mode']:9} {r['quiet_ms'] / one['quiet_ms']:18.2f} "
          f"{r['busy_ms'] / one['busy_ms']:17.2f}")
json.dump({"rows": table, "samples": rows}, open(sys.argv[2], "w"), indent=1)
EOF
if [ -n "${LLAMA_SERVER:-}" ]; then
  echo
  bash scripts/serve_vs_llama.sh "$LLAMA_SERVER" models/text-ar.gguf "$(dirname "$out")/serve-vs-llama" "${SERVE_ROUNDS:-3}"
fi
