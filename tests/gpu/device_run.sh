#!/usr/bin/env bash
# Builds ferry with the GPU module on a machine with an NVIDIA GPU and runs its GPU tests, the
# tests again under compute-sanitizer (memcheck, racecheck) and the GPU benchmark. Run from the
# repository root. Every step runs even when an earlier one failed; the exit status is 1 when
# any failed. The whole run stays under 9 minutes (sanitizer runs are cut short to leave time
# for the benchmark).
#
# Output in $OUT (default ./gpu-out): build.log, tests.log (nvidia-smi first, then ctest),
# sanitizer.log, bench.log, and the benchmark's CSVs: gpu.csv (adapter), gpu-ingest.csv and
# gpu-xproc.csv; gpu-full*.csv instead with --full.
#
#   --full          run the full benchmark instead of the quick one (about 5 minutes: use it
#                   with --bench-only to stay under 9 minutes)
#   --bench-only    build, then the benchmark only (no ctest, no sanitizer)
#   --no-sanitizer  skip compute-sanitizer
#   BUILD=dir       build directory, configured afresh (default: build)
set -u

full=0
tests=1
sanitize=1
for arg in "$@"; do
  case $arg in
    --full) full=1 ;;
    --bench-only) tests=0; sanitize=0 ;;
    --no-sanitizer) sanitize=0 ;;
    -h|--help) sed -n "2,16p" "$0"; exit 0 ;;
    *) echo "device_run.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done

start=$(date +%s)
limit=530 # seconds for the whole run
left() { echo $(( limit - ($(date +%s) - start) )); }

OUT=${OUT:-$PWD/gpu-out}
BUILD=${BUILD:-build}
mkdir -p "$OUT"
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
generator=(-G Ninja)
command -v ninja >/dev/null 2>&1 || generator=()

declare -a summary=()
failed=0
note() { # step status
  summary+=("$(printf '%-44s %s' "$1" "$2")")
  case $2 in ok*|skipped*) ;; *) failed=1 ;; esac
}

# --- build -----------------------------------------------------------------------------------
(
  echo "== $(date -u +%FT%TZ) configure and build in $BUILD"
  rm -rf "$BUILD"
  cmake -S . -B "$BUILD" "${generator[@]}" -DFERRY_GPU=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DFERRY_WERROR=OFF \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo
  rc=$?
  if [ $rc -eq 0 ]; then
    timeout 300 cmake --build "$BUILD" -j "$(nproc)"
    rc=$?
  fi
  echo "== build exit status $rc"
  exit $rc
) > "$OUT/build.log" 2>&1
build_rc=$?
tail -n 3 "$OUT/build.log"
if [ $build_rc -eq 0 ]; then note build ok; else note build "FAILED ($build_rc, see build.log)"; fi

# --- tests -----------------------------------------------------------------------------------
if [ $tests -eq 1 ]; then
  {
    echo "== nvidia-smi"
    nvidia-smi 2>&1 || echo "(nvidia-smi failed)"
    echo
    echo "== $(date -u +%FT%TZ) ctest -R 'gpu|tensor|examples|demo'"
    (cd "$BUILD" && timeout 400 ctest -R "gpu|tensor|examples|demo" -V --output-on-failure --timeout 120)
    echo "== ctest exit status $?"
  } > "$OUT/tests.log" 2>&1
  if grep -q "== ctest exit status 0" "$OUT/tests.log" && grep -q "tests passed" "$OUT/tests.log"; then
    note "ctest (GPU, examples, demo)" "ok ($(grep -E 'tests passed' "$OUT/tests.log" | tail -n 1))"
  else
    note "ctest (GPU, examples, demo)" "FAILED (see tests.log)"
  fi
  grep -E "tests passed|tests failed|Skipped|Failed|\*\*\*" "$OUT/tests.log" | tail -n 8
else
  { echo "== nvidia-smi"; nvidia-smi 2>&1; echo "(tests not run: --bench-only)"; } > "$OUT/tests.log"
fi

# --- compute-sanitizer -----------------------------------------------------------------------
bench_reserve=$(( full == 1 ? 420 : 240 ))
: > "$OUT/sanitizer.log"
if [ $sanitize -eq 1 ]; then
  cs=$(command -v compute-sanitizer || true)
  for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
    [ -z "$cs" ] && [ -x "$c" ] && cs=$c
  done
  if [ -z "$cs" ]; then
    echo "compute-sanitizer not found" >> "$OUT/sanitizer.log"
    note "compute-sanitizer" "FAILED (not found)"
  else
    mapfile -t bins < <(find "$BUILD/tests" -maxdepth 1 -type f -perm -u+x -name 'gpu_*test' | sort)
    [ ${#bins[@]} -eq 0 ] && note "compute-sanitizer" "FAILED (no gpu_*test binaries)"
    for tool in memcheck racecheck; do
      for bin in "${bins[@]}"; do
        name="$tool $(basename "$bin")"
        budget=$(( $(left) - bench_reserve ))
        if [ $budget -lt 30 ]; then
          echo "== $name: skipped, no time left" >> "$OUT/sanitizer.log"
          note "$name" "skipped (time)"
          continue
        fi
        [ $budget -gt 180 ] && budget=180
        # API errors are behaviour under test (an allocation the device refuses), and the
        # stream-ordered pools are left out of the sanitizer runs (see docs/gpu.md).
        extra=(--report-api-errors no)
        [ $tool = memcheck ] && extra+=(--leak-check full)
        if [ $tool = racecheck ] && [ "$(basename "$bin")" = gpu_cache_test ]; then
          # racecheck checks shared-memory hazards; the cache test's kernels use none and its
          # spinning readers make the run exceed any budget.
          note "$name" "skipped (no shared memory)"
          continue
        fi
        {
          echo "== $(date -u +%FT%TZ) $name (short mode, at most ${budget}s)"
          FERRY_GPU_TEST_SHORT=1 FERRY_GPU_TEST_BACKENDS=cache,malloc FERRY_GPU_NO_DELIBERATE_FAULTS=1 \
            timeout "$budget" "$cs" --tool "$tool" "${extra[@]}" \
            --error-exitcode 99 "$bin"
          echo "== $name exit status $?"
        } >> "$OUT/sanitizer.log" 2>&1
        rc=$(grep -E "^== $name exit status" "$OUT/sanitizer.log" | tail -n 1 | awk '{print $NF}')
        case $rc in
          0) note "$name" ok ;;
          77) note "$name" "skipped (no device)" ;;
          124) note "$name" "FAILED (timeout ${budget}s)" ;;
          99) note "$name" "FAILED (sanitizer errors)" ;;
          *) note "$name" "FAILED (exit $rc)" ;;
        esac
      done
    done
    grep -E "ERROR SUMMARY|exit status" "$OUT/sanitizer.log"
  fi
else
  echo "(sanitizer not run)" > "$OUT/sanitizer.log"
fi

# --- benchmark -------------------------------------------------------------------------------
: > "$OUT/bench.log"
run_bench() { # label csv seconds args...
  local label=$1 csv=$2 secs=$3
  shift 3
  echo "== $(date -u +%FT%TZ) ferry bench gpu $* --csv $csv (at most ${secs}s)" >> "$OUT/bench.log"
  timeout "$secs" "$BUILD/ferry" bench gpu "$@" --csv "$csv" >> "$OUT/bench.log" 2>&1
  local rc=$?
  echo "== exit status $rc" >> "$OUT/bench.log"
  case $rc in
    0) note "$label" ok ;;
    124) note "$label" "FAILED (timeout ${secs}s)" ;;
    *) note "$label" "FAILED (exit $rc)" ;;
  esac
}
if [ -x "$BUILD/ferry" ]; then
  secs=$(( $(left) - 5 ))
  [ $secs -lt 60 ] && secs=60
  if [ $full -eq 1 ]; then
    run_bench "bench gpu (full)" "$OUT/gpu-full.csv" "$secs"
  else
    [ $secs -gt 300 ] && secs=300
    run_bench "bench gpu --quick" "$OUT/gpu.csv" "$secs" --quick
  fi
  grep -E "target|integrity|FAIL|error" "$OUT/bench.log" | head -n 40
else
  echo "no $BUILD/ferry: build failed" >> "$OUT/bench.log"
  note "bench gpu" "FAILED (no binary)"
fi

# --- summary ---------------------------------------------------------------------------------
{
  echo
  echo "== summary ($(( $(date +%s) - start ))s)"
  printf '%s\n' "${summary[@]}"
} | tee -a "$OUT/tests.log"
exit $failed
