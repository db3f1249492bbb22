#!/usr/bin/env bash
# Starts `canvas serve` on a free port of 127.0.0.1 and runs the openai-client tests (and, with --page,
# the headless-Chromium page test, or its conversation with --page-chat) against it.
# Usage: run_tests.sh CANVAS_BINARY MODEL[,MODEL...] [--page | --page-chat] (several models: one -m each)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
binary="$1"; model="$2"; what="${3:-}"
if [ ! -d "$here/node_modules/openai" ]; then
  echo "tests/node: node_modules missing; run scripts/setup.sh (npm ci in tests/node)" >&2
  exit 1
fi
log="$(mktemp)"
model_args=()
IFS=, read -r -a models <<<"$model"
for m in "${models[@]}"; do model_args+=(-m "$m"); done
"$binary" serve "${model_args[@]}" --port 0 --parallel 4 2>"$log" &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -f "$log"' EXIT
port=""
for _ in $(seq 1 400); do
  port="$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\)/.*|\1|p' "$log")"
  [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  sleep 0.05
done
[ -n "$port" ] || { cat "$log" >&2; exit 1; }
cd "$here"
if [ "$what" = "--page" ]; then
  node page.test.mjs "http://127.0.0.1:$port" "${CANVAS_SCREENSHOT:-}"
elif [ "$what" = "--page-chat" ]; then
  node page.test.mjs "http://127.0.0.1:$port" --chat
else
  node openai_client.test.mjs "http://127.0.0.1:$port"
fi
