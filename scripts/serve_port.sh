# Sourced by the scripts that start `canvas serve --port 0`: serve_port LOG prints the port that the server
# whose stderr is LOG listens on, once its /health answers (20 s at most), or nothing when it did not come up.
serve_port() {
  local log="$1" port=""
  for _ in $(seq 1 400); do
    port="$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\)/.*|\1|p' "$log")"
    if [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then
      echo "$port"
      return 0
    fi
    sleep 0.05
  done
}
