#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (-fsanitize=fuzzer,address,undefined) in build-fuzz
# and runs each for SECONDS_PER_TARGET seconds (default 17) on a copy of its corpus, so that the
# corpus kept in tests/fuzz/corpus changes only when someone copies new inputs back on purpose.
# Prints the executions and any finding; exits non-zero when a target crashed, 77 when clang or
# its fuzzer runtime is missing. Installs nothing.
#
#   tests/fuzz/run.sh [SECONDS_PER_TARGET]
#   FERRY_FUZZ_BUILD=dir  build directory (default build-fuzz)
#   FERRY_FUZZ_KEEP=dir   keep the working corpora and crash files there instead of a temp dir
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
seconds=${1:-17}
build=${FERRY_FUZZ_BUILD:-build-fuzz}
targets=(fuzz_proto fuzz_conn fuzz_conn_seg fuzz_mcap fuzz_ros2_types)
max_len=2048

if ! command -v clang >/dev/null 2>&1; then
  echo "fuzz: clang not found; skipped" >&2
  exit 77
fi
if ! echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { (void)d; (void)n; return 0; }' |
     clang -x c -fsanitize=fuzzer -o /dev/null - >/dev/null 2>&1; then
  echo "fuzz: clang has no libFuzzer runtime (libclang-rt-dev); skipped" >&2
  exit 77
fi

generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
if [ ! -f "$build/CMakeCache.txt" ]; then
  CC=clang cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DFERRY_FUZZ=ON >/dev/null || exit 1
fi
cmake --build "$build" --target "${targets[@]}" -j "$(nproc)" >/dev/null || {
  echo "fuzz: build failed" >&2
  cmake --build "$build" --target "${targets[@]}" -j 1 2>&1 | tail -40 >&2
  exit 1
}

if [ -n "${FERRY_FUZZ_KEEP:-}" ]; then
  work=$FERRY_FUZZ_KEEP
  mkdir -p "$work"
else
  work=$(mktemp -d /tmp/ferry-fuzz-run.XXXXXX)
  trap 'rm -rf "$work"' EXIT
fi

status=0
for t in "${targets[@]}"; do
  mkdir -p "$work/$t/corpus" "$work/$t/crashes"
  cp -n "$root/tests/fuzz/corpus/$t/"* "$work/$t/corpus/" 2>/dev/null || true
  log="$work/$t/log"
  # -print_funcs=0: naming a newly covered function starts the sanitizer's symbolizer process,
  # whose pipes would show up in the targets' check that every descriptor ferry opened is closed.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$build/tests/$t" "$work/$t/corpus" -max_total_time="$seconds" -max_len="$max_len" \
    -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -print_funcs=0 \
    -artifact_prefix="$work/$t/crashes/" >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
  corpus=$(ls "$work/$t/corpus" | wc -l)
  echo "fuzz: $t: ${execs:-?} executions in ${seconds}s, ${cov:-cov: ?}, corpus $corpus inputs, exit $rc"
  crashes=$(ls "$work/$t/crashes" 2>/dev/null)
  if [ "$rc" -ne 0 ] || [ -n "$crashes" ]; then
    status=1
    echo "fuzz: $t FOUND A PROBLEM; the end of its log:" >&2
    grep -v '^#[0-9]' "$log" | tail -60 >&2
    for c in $crashes; do
      echo "fuzz: $t crash input: $work/$t/crashes/$c ($(stat -c %s "$work/$t/crashes/$c") bytes)" >&2
      base64 -w 0 "$work/$t/crashes/$c" >&2
      echo >&2
    done
  fi
done
exit $status
