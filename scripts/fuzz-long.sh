#!/usr/bin/env bash
# A long fuzzing campaign: builds every harness with libFuzzer and UndefinedBehaviorSanitizer but without
# AddressSanitizer (build-fuzz/; ASan slows these parsers 5-10x, and CI's scripts/ci-sanitize.sh already
# replays every corpus and runs each fuzzer under ASan), then runs each harness in turn until RUNS executions
# (default 10^7) or SECONDS seconds (default 1800), whichever comes first, growing a corpus in
# build-fuzz/fuzz-work/NAME/corpus from fuzz/corpus/NAME and fuzz/crashes/NAME. Prints one table row per
# harness (executions, exec/s, final coverage, findings) and keeps each log. Crashing inputs land in
# build-fuzz/fuzz-work/NAME/artifacts; add them to fuzz/crashes/NAME with the fix.
# Usage: scripts/fuzz-long.sh [RUNS] [SECONDS] [HARNESS ...]   (JOBS=N builds with N jobs)
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10000000}; seconds=${2:-1800}; shift $(( $# >= 2 ? 2 : $# ))
build=build-fuzz
flags="-fsanitize=undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g"
harnesses=("$@")
if [ ${#harnesses[@]} -eq 0 ]; then
  for f in fuzz/fuzz_*.cpp; do harnesses+=("$(basename "$f" .cpp)"); done
fi
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS="$flags -fsanitize=fuzzer-no-link" -DCMAKE_EXE_LINKER_FLAGS="$flags" \
  -DCANVAS_BENCH=OFF -DCANVAS_CUDA=OFF -DCANVAS_TESTS=OFF -DCANVAS_LIBFUZZER=ON >/dev/null || exit 1
cmake --build "$build" -j"${JOBS:-$(nproc)}" --target "${harnesses[@]}" >/dev/null || exit 1
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
echo "| harness | executions | exec/s | final cov | findings |"
echo "|---|---:|---:|---:|---|"
failed=0
for h in "${harnesses[@]}"; do
  name=${h#fuzz_}
  work="$build/fuzz-work/$name"
  mkdir -p "$work/corpus" "$work/artifacts"
  status=0
  "$build/$h" -runs="$runs" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$work/artifacts/" \
    "$work/corpus" "fuzz/corpus/$name" "fuzz/crashes/$name" >"$work/log.txt" 2>&1 || status=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log.txt" | tail -n 1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/log.txt" | tail -n 1)
  cov=$(grep -o 'cov: [0-9]*' "$work/log.txt" | tail -n 1 | cut -d' ' -f2)
  findings="none"
  if [ "$status" -ne 0 ] || [ -n "$(ls -A "$work/artifacts")" ]; then
    findings="exit $status: $(ls "$work/artifacts" | tr '\n' ' ')"
    failed=1
  fi
  echo "| $h | ${execs:-?} | ${rate:-?} | ${cov:-?} | $findings |"
done
exit $failed
