#!/usr/bin/env bash
# Runs one of the Python test files with the project's virtual environment (.venv, made by scripts/setup.sh).
# Usage:
#   run_tests.sh serve CANVAS_BINARY MODEL[,MODEL...] TEST_FILE   starts `canvas serve` on a free port of
#       127.0.0.1 (one -m per model) and runs TEST_FILE against it (CANVAS_SERVE_URL)
#   run_tests.sh unit CANVAS_TESTS_BINARY TEST_FILE                 TEST_FILE with the unit-test binary
#   run_tests.sh canvas CANVAS_BINARY TEST_FILE                     TEST_FILE with the canvas binary
#       (CANVAS_BINARY); the test makes its models and starts the server itself
#   run_tests.sh llamacpp CANVAS_BINARY SOURCE_DIR                 the llama.cpp compatibility tests
#   run_tests.sh real CANVAS_BINARY SOURCE_DIR                     the real checkpoints in models/real against
#       HF tokenizers, an f32 reference forward and llama.cpp (scripts/get-models.sh fetches them)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../../scripts/serve_port.sh"
python="$here/../../.venv/bin/python"
if [ ! -x "$python" ] || ! "$python" -c "import openai, playwright, llama_cpp, pytest, gguf, transformers" 2>/dev/null; then
  echo "tests/python: .venv lacks the test dependencies; run scripts/setup.sh" \
       "(python3 -m venv .venv && .venv/bin/pip install -r tests/python/requirements.txt)" >&2
  exit 1
fi
pytest=("$python" -m pytest -q -s -p no:cacheprovider --rootdir "$here")
what="$1"; shift
case "$what" in
  serve)
    binary="$1"; model="$2"; file="$3"
    log="$(mktemp)"
    model_args=()
    IFS=, read -r -a models <<<"$model"
    for m in "${models[@]}"; do model_args+=(-m "$m"); done
    "$binary" serve "${model_args[@]}" --port 0 --parallel 4 2>"$log" &
    pid=$!
    trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -f "$log"' EXIT
    port="$(serve_port "$log")"
    [ -n "$port" ] || { cat "$log" >&2; exit 1; }
    CANVAS_SERVE_URL="http://127.0.0.1:$port" "${pytest[@]}" "$here/$file"
    ;;
  unit)
    # A test file that checks JSON canvas_tests writes (CANVAS_TESTS_BINARY), without a server.
    CANVAS_TESTS_BINARY="$(realpath "$1")" "${pytest[@]}" "$here/$2"
    ;;
  canvas)
    CANVAS_BINARY="$(realpath "$1")" "${pytest[@]}" "$here/$2"
    ;;
  llamacpp | real)
    file="$here/test_llamacpp.py"; [ "$what" = real ] && file="$here/test_real_models.py"
    # ggml compiled with AMX instructions dies with SIGILL on the AMX Xeons of this machine kind (threads that
    # never asked the kernel for the tile state); scripts/setup.sh builds it without them.
    lib="$("$python" -c 'import llama_cpp, os; print(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-cpu.so"))')"
    if command -v objdump >/dev/null && [ -f "$lib" ] && objdump -d "$lib" | grep -qE 'tilezero|ldtilecfg|tdpb'; then
      echo "tests/python: $lib contains AMX instructions (built with -march=native?); run scripts/setup.sh --tests to rebuild it" >&2
      exit 1
    fi
    status=0
    CANVAS_BINARY="$(realpath "$1")" CANVAS_SOURCE="$(realpath "$2")" HF_HUB_OFFLINE=1 "${pytest[@]}" "$file" || status=$?
    if [ "$status" -gt 128 ]; then
      echo "tests/python: the test process died with signal $((status - 128)) (a crash inside llama-cpp-python or" \
           "another native library); rebuild the test dependencies with scripts/setup.sh --tests" >&2
    fi
    exit "$status"
    ;;
  *)
    echo "usage: run_tests.sh serve BINARY MODELS TEST_FILE | unit TESTS_BINARY TEST_FILE | canvas BINARY TEST_FILE | llamacpp BINARY SOURCE_DIR | real BINARY SOURCE_DIR" >&2
    exit 2
    ;;
esac
