#!/usr/bin/env bash
# `ferry demo` end to end, in short runs: exit status, the final table (every stream's row, no
# bad frame, the fusion and GPU lines, the comparison line), no progress line when piped, the
# PNG of --plot when gnuplot is installed (and the message when it is not), --pin and --rt
# (which must not fail where they are not permitted) and usage errors.
# usage: demo_test.sh PATH_TO_FERRY
# Exit status: 0 passed, 1 failed, 77 skipped (no ferry binary).
set -u

FERRY=${1:-}
if [ -z "$FERRY" ] || [ ! -x "$FERRY" ]; then
    echo "demo_test: skipped, no ferry executable at '$FERRY'"
    exit 77
fi
T=$(mktemp -d /tmp/ferry-demo-test-XXXXXX)
trap 'rm -rf "$T"' EXIT
unset FERRY_DIR FERRY_DOMAIN
FAILS=0

fail() {
    echo "FAIL: $*"
    FAILS=$((FAILS + 1))
}

# run NAME EXPECTED_STATUS ARGS...: runs the demo, output in $T/NAME.out (stdout and stderr).
run() {
    local name=$1 want=$2
    shift 2
    timeout -s INT 120 "$FERRY" demo "$@" >"$T/$name.out" 2>&1
    local got=$?
    if [ "$got" -ne "$want" ]; then
        fail "$name: 'ferry demo $*' exited $got, expected $want"
        sed 's/^/    /' "$T/$name.out"
        return 1
    fi
    return 0
}

expect() {
    local name=$1 pattern=$2
    grep -qE -- "$pattern" "$T/$name.out" || {
        fail "$name: no line matching '$pattern'"
        sed 's/^/    /' "$T/$name.out"
    }
}

# Rows whose stream is a topic: frames published, nothing bad, received + dropped == frames per
# consumer (one consumer here), latency columns filled in.
check_rows() {
    local name=$1 transport=$2 want=$3
    local rows
    rows=$(awk -v t="$transport" '$1 == t && $2 ~ /^\// { n++ } END { print n + 0 }' "$T/$name.out")
    [ "$rows" -eq "$want" ] || fail "$name: $rows $transport rows, expected $want"
    awk -v t="$transport" '
        $1 == t && $2 ~ /^\// {
            if ($3 == 0 || $6 != 0 || $4 + $5 != $3 || $7 <= 0 || $9 < $7) {
                print "bad row: " $0; bad = 1
            }
        }
        END { exit bad }' "$T/$name.out" || fail "$name: a $transport row is wrong"
}

# 1. The ferry pipeline alone: three cameras, the LiDAR, fusion, the GPU line.
if run main 0 --seconds 2 --no-baseline; then
    check_rows main ferry 4
    expect main '^ferry +/camera/0/image_raw +60 '
    expect main '^ferry +/camera/2/image_raw +60 '
    expect main '^ferry +/lidar/points +20 '
    expect main '^ferry +all cameras +180 '
    expect main '^GPU consumer: |^ferry +GPU <- /camera/0 '
    expect main '^fusion: .*: ([1-9][0-9]*) pairs of 20 clouds; stamp skew p50 [0-9.]+ ms'
    expect main '^real-time controls: off'
    expect main '^result: every frame arrived intact'
    grep -q '^shm-copy ' "$T/main.out" && fail "main: --no-baseline still ran the baseline"
    grep -q $'\r' "$T/main.out" && fail "main: a progress line was printed into a pipe"
    pairs=$(sed -nE 's/^fusion: .*: ([0-9]+) pairs of.*/\1/p' "$T/main.out")
    [ "${pairs:-0}" -ge 15 ] || fail "main: only ${pairs:-0} of 20 clouds paired"
    ls -d /dev/shm/ferry-demo-* /tmp/ferry-demo-?????? 2>/dev/null | while read -r d; do
        grep -q "$d" "$T/main.out" && fail "main: $d was left behind"
    done
fi

# 2. With the baseline, one camera: both transports and the comparison line.
if run baseline 0 --seconds 1 --cameras 1 --no-lidar; then
    check_rows baseline ferry 1
    check_rows baseline shm-copy 1
    expect baseline '^ferry vs shm-copy \(cameras\): latency p50 [0-9.]+ vs [0-9.]+ us'
    grep -q '^fusion:' "$T/baseline.out" && fail "baseline: fusion ran with --no-lidar"
fi

# 3. --plot: a PNG when gnuplot is there; a clear message when it is not.
if command -v gnuplot >/dev/null 2>&1; then
    if run plot 0 --seconds 1 --cameras 1 --plot "$T/latency.png"; then
        expect plot "^plot: $T/latency.png"
        if [ ! -s "$T/latency.png" ]; then
            fail "plot: no $T/latency.png"
        elif [ "$(head -c 8 "$T/latency.png" | od -An -tx1 | tr -d ' \n')" != "89504e470d0a1a0a" ]; then
            fail "plot: $T/latency.png is not a PNG"
        fi
    fi
else
    echo "demo_test: gnuplot not installed, --plot checked for its message only"
fi
PATH=/nonexistent "$FERRY" demo --seconds 1 --plot "$T/none.png" >"$T/noplot.out" 2>&1
got=$?
if [ "$got" -ne 1 ]; then
    fail "noplot: 'ferry demo --plot' without gnuplot exited $got, expected 1"
else
    expect noplot 'gnuplot-nox'
    grep -q 'camera processes' "$T/noplot.out" && fail "noplot: ran the demo before refusing --plot"
    [ -e "$T/none.png" ] && fail "noplot: a PNG without gnuplot"
fi

# 4. --rt (implies --pin): applied where permitted, reported and left out where not.
if run rt 0 --seconds 1 --cameras 1 --no-baseline --rt; then
    expect rt '^real-time controls: '
    expect rt '^result: every frame arrived intact'
fi

# 5. Usage errors: exit 2, one line.
run zero 2 --seconds 0 && expect zero 'seconds'
run unknown 2 --bogus && expect unknown "unknown option '--bogus'"
run novalue 2 --plot && expect novalue "needs a value"
run extra 2 stray && expect extra "unexpected argument"
run help 0 --help && expect help '--plot FILE'

if [ "$FAILS" -ne 0 ]; then
    echo "demo_test: $FAILS failure(s)"
    exit 1
fi
echo "demo_test: passed"
exit 0
