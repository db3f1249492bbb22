#!/usr/bin/env bash
# CI: an AddressSanitizer + UndefinedBehaviorSanitizer build with Debian's clang (build-sanitize/) of what the
# unit tests and the fuzz harnesses need; runs `ctest -L unit` there (which also replays every fuzz corpus and
# crash file under the sanitizers), then each libFuzzer harness for FUZZ_SECONDS (default 20) from its corpus.
# Any sanitizer report, crash, leak, uncaught exception or allocation over 2 GB fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_SECONDS=${FUZZ_SECONDS:-20}
JOBS=${JOBS:-$(nproc)}
build=build-sanitize
sanitize="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS="$sanitize -fsanitize=fuzzer-no-link" -DCMAKE_EXE_LINKER_FLAGS="$sanitize" \
  -DCANVAS_BENCH=OFF -DCANVAS_CUDA=OFF -DCANVAS_LIBFUZZER=ON >/dev/null
harnesses=()
for f in fuzz/fuzz_*.cpp; do harnesses+=("$(basename "$f" .cpp)"); done
cmake --build "$build" -j"$JOBS" --target canvas_tests "${harnesses[@]}"

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_stack_use_after_return=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --test-dir "$build" -L unit --output-on-failure -j"$JOBS"

for h in "${harnesses[@]}"; do
  name=${h#fuzz_}
  work="$build/fuzz-work/$name"
  mkdir -p "$work/corpus" "$work/artifacts"
  echo "fuzzing $name for ${FUZZ_SECONDS}s"
  status=0
  "$build/$h" -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=10 \
    -max_len=65536 -print_final_stats=1 -artifact_prefix="$work/artifacts/" \
    "$work/corpus" "fuzz/corpus/$name" "fuzz/crashes/$name" >"$work/log.txt" 2>&1 || status=$?
  grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" "$work/log.txt" || true
  if [ "$status" -ne 0 ] || [ -n "$(ls -A "$work/artifacts")" ]; then
    tail -n 60 "$work/log.txt" >&2
    echo "fuzz_$name failed (exit $status); failing inputs: $(ls "$work/artifacts")" >&2
    exit 1
  fi
done
