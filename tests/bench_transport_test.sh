#!/usr/bin/env bash
# `ferry bench transport --quick` end to end: every row measured, the lossless rows without a
# drop, the summary and the target checks printed, the CSV with its documented columns. No
# timing is asserted. When the iceoryx peer is built and
# iox-roudi is installed, a second short run measures it, and checks that the private RouDi is
# gone afterwards.
# usage: bench_transport_test.sh PATH_TO_FERRY
# Exit status: 0 passed, 1 failed, 77 skipped (no ferry executable).
set -u

FERRY=${1:-}
[ -n "$FERRY" ] && [ -x "$FERRY" ] || { echo "SKIP: no ferry executable at '$FERRY'"; exit 77; }

T=$(mktemp -d /tmp/ferry-bench-transport-test.XXXXXX)
trap 'rm -rf "$T"' EXIT
FAILS=0
fail() {
    echo "FAIL: $*"
    FAILS=$((FAILS + 1))
}
COLUMNS_CSV=run,transport,payload_bytes,mode,touch,pinned,messages,p50_us,p99_us,p999_us,max_us,pub_call_us,pub_cpu_us,sub_call_us,sub_cpu_us,msgs_per_s,dropped

# check NAME: the rows of run NAME (NAME.out, NAME.err, NAME.csv).
check() {
    local name=$1
    grep -q '^transport .*p99.9 us.*pub call.*pub cpu.*sub call.*sub cpu' "$T/$name.out" ||
        fail "$name: no table header"
    # A row is "error" when it could not be measured: every row must be. An honest publisher
    # that publishes faster than its subscriber wakes is never taken for a flood.
    awk '$2 ~ /^[0-9]+$/ && $3 ~ /^(paced|flat|flood)$/ && $6 == "error" { print }' "$T/$name.out" >"$T/$name.errors"
    while read -r t p m _; do
        fail "$name: row $t $p $m not measured"
        sed 's/^/    /' "$T/$name.err" | head -n 10
    done <"$T/$name.errors"
    grep -q 'a flood of wake-ups' "$T/$name.err" && fail "$name: a publisher was taken for a flood"
    awk '$2 ~ /^[0-9]+$/ && $3 == "flood" && $6 != "error" && $NF != 0 { bad = 1; print "    " $0 } END { exit bad }' \
        "$T/$name.out" || fail "$name: a lossless flood row dropped messages"
    grep -q '^summary (touch page' "$T/$name.out" || fail "$name: no summary"
    grep -q '^target checks' "$T/$name.out" || fail "$name: no target checks"
    [ "$(head -n 1 "$T/$name.csv")" = "$COLUMNS_CSV" ] || fail "$name: CSV header is $(head -n 1 "$T/$name.csv")"
    local rows
    rows=$(awk '$2 ~ /^[0-9]+$/ && $3 ~ /^(paced|flat|flood)$/ && $6 != "error"' "$T/$name.out" | wc -l)
    [ "$(($(wc -l <"$T/$name.csv") - 1))" -eq "$rows" ] || fail "$name: CSV rows differ from the table's"
}

"$FERRY" bench transport --bogus >/dev/null 2>&1
[ $? -eq 2 ] || fail "an unknown option does not exit 2"
"$FERRY" bench transport --touch banana >/dev/null 2>&1
[ $? -eq 2 ] || fail "an unknown touch does not exit 2"
"$FERRY" bench transport --help >"$T/help" 2>&1 || fail "--help failed"
for t in ferry-zero-copy shm-copy uds-serialized wakeup-floor iceoryx cyclone-udp; do
    grep -q "^  $t" "$T/help" || fail "--help does not list $t"
done

"$FERRY" bench transport --quick --csv "$T/quick.csv" >"$T/quick.out" 2>"$T/quick.err"
check quick
for t in ferry-zero-copy shm-copy uds-serialized wakeup-floor; do
    grep -q "^$t .* paced " "$T/quick.out" || fail "quick: no paced row of $t"
done
grep -q '^iceoryx\|^cyclone' "$T/quick.out" && fail "quick: peers ran without --peers"

if "$FERRY" bench transport --help | grep -q '^  iceoryx .*cannot run here'; then
    echo "NOTE: iceoryx is built but iox-roudi is missing: its run is skipped"
elif "$FERRY" bench transport --help | grep -q '^  iceoryx '; then
    "$FERRY" bench transport --quick --transport iceoryx --transport ferry-zero-copy \
        --mode flood --mode paced --touch full --csv "$T/iox.csv" >"$T/iox.out" 2>"$T/iox.err"
    sed -i 's/^summary (touch full/summary (touch page/' "$T/iox.out"
    check iox
    grep -q '^iceoryx .* flood ' "$T/iox.out" || fail "iox: no iceoryx flood row"
    grep -q 'ferry/iceoryx' "$T/iox.out" || fail "iox: no ratio line"
    pgrep -x iox-roudi -P $$ >/dev/null && fail "iox-roudi left running"
fi

[ "$FAILS" -eq 0 ] || exit 1
echo "PASS"
