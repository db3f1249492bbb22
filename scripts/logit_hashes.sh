#!/bin/bash
# The logit-hash driver: one line per (model, pass, threads) with the sha256 of the logits `canvas logits`
# writes, over every shipped model, the real checkpoints (when scripts/get-models.sh fetched them) and the
# test fixtures: causal and bidirectional passes, and for DiffusionGemma files the encoder, the decoder and the
# self-conditioned decoder; each at 1 and 2 threads. Two builds that compute the same arithmetic print the same
# lines, so a refactor of the forward is checked by diffing their outputs:
#   CANVAS=old/canvas bash scripts/logit_hashes.sh > before.txt
#   CANVAS=build/canvas bash scripts/logit_hashes.sh > after.txt && diff before.txt after.txt
# Environment: CANVAS (default build/canvas), THREADS (default "1 2").
set -euo pipefail
cd "$(dirname "$0")/.."
CANVAS=${CANVAS:-build/canvas}
THREADS=${THREADS:-1 2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

ids=1,5,9,14,3,27,8,2,11,6,4,19
canvas_ids=7,3,12,5,9,2,8,4

hash_of() { sha256sum "$1" | cut -c1-16; }

run() {  # run NAME ARGS...: one line "NAME tT HASH" per thread count, or "NAME tT refused" when canvas refuses
  local name=$1; shift
  for t in $THREADS; do
    if "$CANVAS" logits "$@" -t "$t" --out "$work/out.npy" >/dev/null 2>"$work/err"; then
      echo "$name t$t $(hash_of "$work/out.npy")"
    else
      echo "$name t$t refused: $(head -c 120 "$work/err" | tr '\n' ' ')"
    fi
  done
}

models=(models/*.gguf models/real/*.gguf tests/fixtures/*.gguf tests/fixtures/dg-release/*.gguf)
for dir in tests/fixtures/hf tests/fixtures/tiny-*-hf tests/fixtures/tiny-diffusion-gemma \
           tests/fixtures/dg-release/published tests/fixtures/dg-release/resaved; do
  [ -f "$dir/config.json" ] && models+=("$dir")
done

for m in "${models[@]}"; do
  [ -e "$m" ] || continue
  case "$m" in */tokenizer*.gguf|*.grads.gguf) continue ;; esac
  if "$CANVAS" logits -m "$m" --ids "$ids" --canvas-ids "$canvas_ids" -t 1 --out "$work/probe.npy" >/dev/null 2>&1; then
    # DiffusionGemma: the encoder, the decoder, and the decoder conditioned on its own first logits.
    run "$m encoder" -m "$m" --ids "$ids"
    run "$m decoder" -m "$m" --ids "$ids" --canvas-ids "$canvas_ids"
    cp "$work/probe.npy" "$work/prev.npy"
    run "$m decoder+self-cond" -m "$m" --ids "$ids" --canvas-ids "$canvas_ids" --self-cond "$work/prev.npy"
  else
    run "$m causal" -m "$m" --ids "$ids" --causal
    run "$m bidirectional" -m "$m" --ids "$ids"
  fi
done
