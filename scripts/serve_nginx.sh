#!/usr/bin/env bash
# Two (or REPLICAS) `canvas serve` replicas on 127.0.0.1 behind nginx (Debian's nginx-light) as the load
# balancer, all as an ordinary user in a temporary directory. Waits until every replica's /health says
# ok, then starts nginx on PORT and prints its URL.
#   scripts/serve_nginx.sh [--port 8090 (0: a free one)] [--replicas 2] [--check] [-- extra canvas serve flags]
# --check: send requests through nginx, verify each replica answered some of them (its /health counts
# its batched passes), stop everything and exit 0 / 1 (the test). Without it: serve until Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
port=8090; replicas=2; check=0; extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --port) port="$2"; shift 2 ;;
    --replicas) replicas="$2"; shift 2 ;;
    --check) check=1; shift ;;
    --) shift; extra=("$@"); break ;;
    *) echo "serve_nginx.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
if [ "$port" = 0 ]; then  # a free port
  port="$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
fi
nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"
[ -x "$nginx_bin" ] || { echo "serve_nginx.sh: nginx not installed (apt-get install nginx-light)" >&2; exit 1; }
canvas="${CANVAS_BINARY:-build/canvas}"
dir="$(mktemp -d)"
pids=()
cleanup() {
  [ -f "$dir/nginx.pid" ] && kill "$(cat "$dir/nginx.pid")" 2>/dev/null || true
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT
upstreams=""
ports=()
for i in $(seq 1 "$replicas"); do
  "$canvas" serve --port 0 "${extra[@]}" 2>"$dir/replica$i.log" &
  pids+=($!)
  rport=""
  for _ in $(seq 1 600); do
    rport="$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\)/.*|\1|p' "$dir/replica$i.log" 2>/dev/null || true)"
    [ -n "$rport" ] && break
    sleep 0.05
  done
  [ -n "$rport" ] || { cat "$dir/replica$i.log" >&2; exit 1; }
  ports+=("$rport")
  upstreams+="    server 127.0.0.1:$rport max_fails=3 fail_timeout=5s;"$'\n'
done
for rport in "${ports[@]}"; do  # ready = /health 200
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$rport/health" >/dev/null 2>&1 && break
    sleep 0.05
  done
done
mkdir -p "$dir"/{client_body,proxy,fastcgi,uwsgi,scgi}
awk -v prefix="$dir" -v port="$port" -v ups="$upstreams" \
  '{ gsub("@PREFIX@", prefix); gsub("@PORT@", port); if ($0 ~ /@UPSTREAMS@/) { printf "%s", ups } else print }' \
  deploy/nginx/canvas-serve.conf.in > "$dir/nginx.conf"
"$nginx_bin" -t -q -c "$dir/nginx.conf" -p "$dir" 2>&1 | grep -v "could not open error log" >&2 || true
"$nginx_bin" -c "$dir/nginx.conf" -p "$dir" 2>/dev/null
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break; sleep 0.05; done
echo "nginx on http://127.0.0.1:$port/ -> replicas on ports ${ports[*]}"
if [ "$check" = 0 ]; then
  wait "${pids[0]}"
  exit 0
fi
# The check: 8 concurrent requests (least_conn spreads them), one streamed, then every replica must have
# run passes.
status=0
clients=()
for i in $(seq 1 8); do
  curl -sf "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"prompt\": \"And God said\", \"max_tokens\": 16, \"seed\": $i}" -o "$dir/answer$i.json" &
  clients+=($!)
done
for c in "${clients[@]}"; do wait "$c" || status=1; done
for i in $(seq 1 8); do
  grep -q '"text_completion"' "$dir/answer$i.json" || { echo "request $i failed through nginx" >&2; status=1; }
done
curl -sfN "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "And", "max_tokens": 16, "stream": true}' | grep -q 'data: \[DONE\]' || { echo "stream failed" >&2; status=1; }
for rport in "${ports[@]}"; do
  # The replica's total over its models (/health's top-level count; "models" holds each model's own).
  passes="$(curl -sf "http://127.0.0.1:$rport/health" | python3 -c 'import json, sys; print(json.load(sys.stdin)["batched_passes"])')"
  echo "replica on port $rport: $passes batched passes"
  [ "${passes:-0}" -gt 0 ] || { echo "replica on port $rport got no requests" >&2; status=1; }
done
[ "$status" = 0 ] && echo "nginx check passed" || echo "nginx check FAILED" >&2
exit "$status"
