#!/bin/bash
# canvas against llama.cpp's DiffusionGemma branch (llama-diffusion-cli) on the same GGUF: one 256-position
# canvas of the 26B-A4B shape (random weights, LAYERS of its 30 layers, written by `canvas bench --synthetic
# diffusion-gemma:26b-a4b --save` in the branch's layout), the release's entropy-bound sampler with STEPS
# steps pinned on both sides (stop disabled: confidence threshold 0; EOS ignored), THREADS threads, the two
# runs interleaved RUNS times; prints each run and the medians of tokens/s = 256 / (prompt + denoising time,
# as each engine reports it; model loading excluded) and canvas's ratio to llama.cpp, with each process's wall
# time (loading included).
#   bash scripts/dg_vs_llama.sh LLAMA_DIFFUSION_CLI [TYPES="q4_0 q8_0"] [OUT=runs/dg-vs-llama]
# Environment: CANVAS (default build/canvas), LAYERS (6), STEPS (8), THREADS (2), RUNS (3).
# LLAMA_DIFFUSION_CLI is llama-diffusion-cli built from the branch (warshanks/llama.cpp), outside canvas:
#   cmake -B build -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DGGML_NATIVE=ON && cmake --build build --target llama-diffusion-cli
set -euo pipefail
LLAMA=${1:?usage: dg_vs_llama.sh LLAMA_DIFFUSION_CLI [TYPES] [OUT]}
TYPES=${2:-q4_0 q8_0}
OUT=${3:-runs/dg-vs-llama}
CANVAS=${CANVAS:-build/canvas}
LAYERS=${LAYERS:-6}
STEPS=${STEPS:-8}
THREADS=${THREADS:-2}
RUNS=${RUNS:-3}
# llama-diffusion-cli wraps -p in a chat template (the file has none: its ChatML fallback) and has no flag to
# turn that off; canvas generate gets the same text already wrapped, so both encode the same 95 tokens.
PROMPT="Write a short story about a lighthouse keeper."
WRAPPED=$(printf '<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n' "$PROMPT")
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
unset OPENBLAS_CORETYPE
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-) ($(nproc) cores); load: $(uptime | sed 's/.*load/load/')"

median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

for type in $TYPES; do
  model="$OUT/dg-26b-a4b-${LAYERS}l-$type.gguf"
  [ -f "$model" ] || "$CANVAS" bench --synthetic diffusion-gemma:26b-a4b --layers "$LAYERS" --type "$type" --save "$model"
  : > "$OUT/$type.canvas" ; : > "$OUT/$type.llama"
  for run in $(seq "$RUNS"); do
    # canvas: prompt_ms + decode_ms of its --json line; wall = the whole process, loading included.
    t0=$(date +%s.%N)
    "$CANVAS" generate -m "$model" -p "$WRAPPED" --mode diffusion --steps "$STEPS" -n 256 -t "$THREADS" \
      --confidence-threshold 0 --ignore-eos --seed 1 --json > "$OUT/$type.canvas.$run.log" 2>&1
    python3 -c 'import json,sys; t=sys.stdin.read(); j=json.loads(t[t.index("{"):t.rindex("}")+1]); \
print(256e3/(j["prompt_ms"]+j["decode_ms"]), j["steps_per_canvas"][0], "steps,", j["prompt_tokens"], "prompt tokens")' \
      < "$OUT/$type.canvas.$run.log" | tee -a "$OUT/$type.canvas.steps" | cut -d' ' -f1 >> "$OUT/$type.canvas"
    t1=$(date +%s.%N); canvas_wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}')
    # llama-diffusion-cli: its "total time" of the turn (prompt prefill + every step). -v: without it the
    # last lines of its log (the timings) were lost at exit here; -no-cnv: one turn, no stdin.
    t0=$(date +%s.%N)
    "$LLAMA" -m "$model" -p "$PROMPT" -n 256 -t "$THREADS" -tb "$THREADS" --diffusion-eb-max-steps "$STEPS" \
      --diffusion-eb-confidence 0 --seed 1 -no-cnv -v < /dev/null > "$OUT/$type.llama.$run.log" 2>&1
    grep -o 'total time: [0-9.]*ms, time per step: [0-9.]*ms ([0-9]* steps' "$OUT/$type.llama.$run.log" |
      awk '{gsub("ms,","",$3); gsub("[(]","",$8); print 256e3/$3, $8}' | tee -a "$OUT/$type.llama.steps" | cut -d' ' -f1 >> "$OUT/$type.llama"
    t1=$(date +%s.%N); llama_wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}')
    echo "$type run $run: canvas $(tail -1 "$OUT/$type.canvas") tok/s ($(tail -1 "$OUT/$type.canvas.steps" | cut -d' ' -f2-)), llama-diffusion-cli $(tail -1 "$OUT/$type.llama") tok/s ($(tail -1 "$OUT/$type.llama.steps" | cut -d' ' -f2) steps); wall s: canvas $canvas_wall, llama $llama_wall; $(uptime | sed 's/.*load/load/')"
  done
  c=$(median < "$OUT/$type.canvas"); l=$(median < "$OUT/$type.llama")
  echo "$type median of $RUNS: canvas $c tok/s, llama-diffusion-cli $l tok/s, ratio $(awk -v c="$c" -v l="$l" 'BEGIN {printf "%.2f", c / l}')x"
done
echo "load after: $(uptime | sed 's/.*load/load/')"
