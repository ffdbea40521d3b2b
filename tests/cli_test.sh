#!/usr/bin/env bash
# The ferry command-line tool, end to end, in a private domain directory (FERRY_DIR).
# usage: cli_test.sh PATH_TO_FERRY
# Exit status: 0 passed, 1 failed, 77 skipped (no ferry binary or no python3 to check JSON).
set -u

FERRY=${1:-}
if [ -z "$FERRY" ] || [ ! -x "$FERRY" ]; then
    echo "cli_test: skipped, no ferry executable at '$FERRY'"
    exit 77
fi
PYTHON=$(command -v python3 || true)
if [ -z "$PYTHON" ]; then
    echo "cli_test: skipped, python3 is needed to check JSON"
    exit 77
fi

T=$(mktemp -d /tmp/ferry-cli-test-XXXXXX)
export FERRY_DIR=$T/root
export FERRY_DOMAIN=5
unset FERRY_TYPE
OUT=$T/out
mkdir -p "$OUT"
BG=()
BGOUT=()
LAST=none

cleanup() {
    local p
    # timeout(1) passes SIGTERM on to the ferry it runs; SIGKILL it would not.
    for p in "${BG[@]}"; do
        kill -TERM "$p" 2>/dev/null
    done
    sleep 0.2
    for p in "${BG[@]}"; do
        kill -KILL "$p" 2>/dev/null
    done
    wait 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT

fail() {
    echo "cli_test.sh:${BASH_LINENO[0]}: FAIL: $*" >&2
    for f in "$OUT/$LAST.out" "$OUT/$LAST.err" "${BGOUT[@]}"; do
        [ -s "$f" ] || continue
        echo "---- $(basename "$f")" >&2
        tail -n 20 "$f" >&2
    done
    exit 1
}

# run NAME CMD...: runs ferry with a timeout; stdout/stderr in $OUT/NAME.{out,err}; sets RC.
run() {
    local name=$1
    shift
    LAST=$name
    timeout 30 "$FERRY" "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"
    RC=$?
}

# Waits (up to 20 s) until `ferry topics` lists TOPIC with at least PUBS publishers and SUBS
# subscribers. There is no wait API in the shell, so this polls.
wait_topic() {
    local topic=$1 pubs=$2 subs=$3 deadline=$((SECONDS + 20))
    while [ "$SECONDS" -lt "$deadline" ]; do
        if timeout 10 "$FERRY" topics --json 2>/dev/null | "$PYTHON" -c '
import json, sys
t, p, s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
try:
    rows = [r for r in json.load(sys.stdin) if r["topic"] in (t, t.lstrip("/"))]
except ValueError:  # no domain directory yet: topics prints nothing and exits 1
    sys.exit(1)
sys.exit(0 if rows and rows[0]["publishers"] >= p and rows[0]["subscribers"] >= s else 1)
' "$topic" "$pubs" "$subs"; then
            return 0
        fi
        sleep 0.05
    done
    fail "$topic never showed $pubs publisher(s) and $subs subscriber(s) in 'ferry topics'"
}

endpoint_files() {
    find "$FERRY_DIR" \( -name '*.sock' -o -name '*.status' \) 2>/dev/null | wc -l
}

# --- help and usage errors ---------------------------------------------------------------------
run help --help
[ "$RC" -eq 0 ] || fail "ferry --help exited $RC"
grep -q '^usage: ferry' "$OUT/help.out" || fail "ferry --help printed no usage"
for cmd in pub echo hz delay topics info clean demo bench; do
    run "help_$cmd" "$cmd" --help
    [ "$RC" -eq 0 ] || fail "ferry $cmd --help exited $RC"
    grep -q "^usage: ferry $cmd" "$OUT/help_$cmd.out" || fail "ferry $cmd --help printed no usage"
done

# Usage errors are independent of each other: report each one and go on. Messages give the line
# of the script's own call, also when a helper below calls these.
check_usage_error() {
    local name=$1 why=""
    shift
    run "$name" "$@"
    if [ "$RC" -eq 0 ]; then
        why="exited 0"
    elif [ "$RC" -eq 124 ]; then
        why="hung"
    elif [ "$(wc -l <"$OUT/$name.err")" -ne 1 ]; then
        why="printed $(wc -l <"$OUT/$name.err") lines on stderr, expected a one-line message"
    elif [ -s "$OUT/$name.out" ]; then
        why="printed on stdout"
    fi
    if [ -n "$why" ]; then
        echo "cli_test.sh:${BASH_LINENO[-2]}: FAIL: ferry $*: $why (exit status $RC)" >&2
        head -n 3 "$OUT/$name.err" | sed 's/^/    /' >&2
        return 1
    fi
    return 0
}
USAGE_FAILS=0
check_usage_error bad_pub pub /t --bogus || USAGE_FAILS=$((USAGE_FAILS + 1))
check_usage_error bad_echo echo /t --bogus || USAGE_FAILS=$((USAGE_FAILS + 1))
check_usage_error bad_hz hz /t --bogus || USAGE_FAILS=$((USAGE_FAILS + 1))
check_usage_error bad_topics topics --bogus || USAGE_FAILS=$((USAGE_FAILS + 1))
check_usage_error bad_info info /t --bogus || USAGE_FAILS=$((USAGE_FAILS + 1))
check_usage_error bad_clean clean --bogus || USAGE_FAILS=$((USAGE_FAILS + 1))
check_usage_error bad_demo demo --bogus || USAGE_FAILS=$((USAGE_FAILS + 1))
check_usage_error bad_bench bench --bogus || USAGE_FAILS=$((USAGE_FAILS + 1))
check_usage_error bad_option --bogus || USAGE_FAILS=$((USAGE_FAILS + 1))
check_usage_error bad_command nosuchcommand || USAGE_FAILS=$((USAGE_FAILS + 1))
check_usage_error bad_size pub /t --size banana || USAGE_FAILS=$((USAGE_FAILS + 1))
check_usage_error bad_huge pub /t --huge-pages always || USAGE_FAILS=$((USAGE_FAILS + 1))
check_usage_error bad_domain topics --domain 1024 || USAGE_FAILS=$((USAGE_FAILS + 1))
check_usage_error no_topic echo || USAGE_FAILS=$((USAGE_FAILS + 1))
(export FERRY_DOMAIN=abc; check_usage_error bad_env_domain topics) || USAGE_FAILS=$((USAGE_FAILS + 1))

# A bad option value is a usage error whose one line names the option, the value and what it
# accepts: check_value_error NAME REGEX ARGS... (REGEX an extended grep pattern).
check_value_error() {
    local name=$1 pattern=$2 why
    shift 2
    check_usage_error "$name" "$@" || return 1
    if [ "$RC" -ne 2 ]; then
        why="exit status $RC, expected 2"
    elif ! grep -qE -- "$pattern" "$OUT/$name.err"; then
        why="the message does not match '$pattern'"
    else
        return 0
    fi
    echo "cli_test.sh:${BASH_LINENO[-2]}: FAIL: ferry $*: $why" >&2
    sed 's/^/    /' "$OUT/$name.err" >&2
    return 1
}
bad_value() {
    check_value_error "$@" || USAGE_FAILS=$((USAGE_FAILS + 1))
}
# --count 1 everywhere: a value wrongly accepted must not keep a command running.
bad_value pub_history '^ferry pub: --history 4096 is out of range: 0\.\.255 \(must also be' \
    pub /t --history 4096 --count 1
bad_value pub_history_max '^ferry pub: --history 4097 is out of range: 0\.\.4096 \(must also' \
    pub /t --history 4097 --count 1 --chunks 65536
bad_value pub_history_chunks '^ferry pub: --history 300 is out of range: 0\.\.299 \(.*, 300\)$' \
    pub /t --history 300 --chunks 300 --count 1
bad_value pub_chunks '^ferry pub: --chunks 65537 is out of range: 1\.\.65536$' \
    pub /t --chunks 65537 --count 1
bad_value pub_chunks_min '^ferry pub: --chunks 0 is out of range: 1\.\.65536$' \
    pub /t --chunks 0 --count 1
bad_value pub_pool '^ferry pub: --pool 1 is out of range: 8k\.\.4096G bytes$' \
    pub /t --pool 1 --count 1
bad_value pub_pool_max '^ferry pub: --pool 4097G is out of range: 8k\.\.4096G bytes$' \
    pub /t --pool 4097G --count 1
bad_value pub_size_max '^ferry pub: --size 18446744073709551615 is out of range: 64\.\.1024G' \
    pub /t --size 18446744073709551615 --count 1
bad_value pub_size_over '^ferry pub: --size 18446744073709551616 is out of range: 64\.\.1024G' \
    pub /t --size 18446744073709551616 --count 1
bad_value pub_size_suffix '^ferry pub: --size 17179869184G is out of range: 64\.\.1024G bytes$' \
    pub /t --size 17179869184G --count 1
bad_value pub_size_lib '^ferry pub: --size 1025G is out of range: 64\.\.1024G bytes$' \
    pub /t --size 1025G --count 1
bad_value pub_size_min '^ferry pub: --size 63 is out of range: 64\.\.1024G bytes$' \
    pub /t --size 63 --count 1
bad_value pub_size_text '^ferry pub: --size banana is not a size: 64\.\.1024G bytes$' \
    pub /t --size banana --count 1
bad_value pub_rate_low '^ferry pub: --rate 1e-9 is out of range: 0\.01\.\.100000 Hz, or 0 ' \
    pub /t --rate 1e-9 --count 1
bad_value pub_rate_high '^ferry pub: --rate 100001 is out of range: 0\.01\.\.100000 Hz' \
    pub /t --rate 100001 --count 1
bad_value pub_rate_nan '^ferry pub: --rate nan is not a number: 0\.01\.\.100000 Hz' \
    pub /t --rate nan --count 1
bad_value pub_rate_inf '^ferry pub: --rate inf is out of range: 0\.01\.\.100000 Hz' \
    pub /t --rate inf --count 1
bad_value pub_rate_neg '^ferry pub: --rate -1 is out of range: 0\.01\.\.100000 Hz' \
    pub /t --rate -1 --count 1
bad_value pub_count '^ferry pub: --count -1 is not a whole number: 0\.\.18446744073709551615$' \
    pub /t --count -1
bad_value pub_count_over '^ferry pub: --count 18446744073709551616 is out of range: 0\.\.' \
    pub /t --count 18446744073709551616
bad_value pub_image_small '^ferry pub: --image 63x1 is out of range: [0-9]+\.\.1024G bytes a frame' \
    pub /t --image 63x1 --encoding mono8 --count 1
bad_value pub_image_big '^ferry pub: --image 100000x10000000 is out of range: [0-9]+\.\.1024G' \
    pub /t --image 100000x10000000 --count 1
bad_value pub_image_side '^ferry pub: --image 0x5 is out of range: 1\.\.4294967295 pixels a side$' \
    pub /t --image 0x5 --count 1
bad_value pub_image_side_max '^ferry pub: --image 4294967296x1 is out of range: 1\.\.4294967295 ' \
    pub /t --image 4294967296x1 --count 1
bad_value pub_image_text '^ferry pub: --image -1x5 is not WIDTHxHEIGHT: 1\.\.4294967295 pixels' \
    pub /t --image -1x5 --count 1
bad_value pub_image_row '^ferry pub: --image 2000000000x1 does not fit rgb8: rows of at most' \
    pub /t --image 2000000000x1 --count 1
bad_value pub_image_odd '^ferry pub: --image 3x3 does not fit nv12: .*sides even' \
    pub /t --image 3x3 --encoding nv12 --count 1
bad_value pub_encoding '^ferry pub: --encoding foo is not an image encoding' \
    pub /t --image 64x64 --encoding foo --count 1
bad_value pub_cloud_small '^ferry pub: --cloud 1x3 is out of range: 4\.\.268435199 points \(16' \
    pub /t --cloud 1x3 --count 1
bad_value pub_cloud_big '^ferry pub: --cloud 65536x4097 is out of range: 4\.\.268435199 points' \
    pub /t --cloud 65536x4097 --count 1
bad_value pub_wait '^ferry pub: --wait-subscribers 1025 is out of range: 0\.\.1024$' \
    pub /t --wait-subscribers 1025 --count 1
bad_value pub_domain '^ferry pub: --domain 1024 is out of range: 0\.\.1023$' \
    pub /t --domain 1024 --count 1
bad_value echo_depth '^ferry echo: --depth 0 is out of range: 1\.\.4096$' \
    echo /t --depth 0 --timeout 0
bad_value echo_depth_max '^ferry echo: --depth 4097 is out of range: 1\.\.4096$' \
    echo /t --depth 4097 --timeout 0
bad_value echo_history '^ferry echo: --history 4097 is out of range: 0\.\.4096$' \
    echo /t --history 4097 --timeout 0
bad_value echo_timeout '^ferry echo: --timeout -1 is out of range: 0\.\.1000000000 s$' \
    echo /t --timeout -1
bad_value hz_window '^ferry hz: --window 1000001 is out of range: 2\.\.1000000$' \
    hz /t --window 1000001 --timeout 0
bad_value hz_timeout '^ferry hz: --timeout nan is not a number: 0\.\.1000000000 s$' \
    hz /t --timeout nan
LONG_TYPE=$(printf 't%.0s' $(seq 128))
bad_value echo_type "^ferry echo: invalid --type '' \\(1\\.\\.127 bytes\\)$" echo /t --type '' --timeout 0
bad_value hz_type "^ferry hz: invalid --type '$LONG_TYPE' \\(1\\.\\.127 bytes\\)$" \
    hz /t --type "$LONG_TYPE" --timeout 0
bad_value topics_domain '^ferry topics: --domain 1024 is out of range: 0\.\.1023$' \
    topics --domain 1024
bad_value info_domain '^ferry info: --domain x is not a whole number: 0\.\.1023$' info /t --domain x
bad_value clean_domain '^ferry clean: --domain 1024 is out of range: 0\.\.1023$' clean --domain 1024
(export FERRY_DOMAIN=1024
    check_value_error env_domain '^ferry topics: FERRY_DOMAIN 1024 is out of range: 0\.\.1023$' \
        topics) || USAGE_FAILS=$((USAGE_FAILS + 1))
# An empty --dir or FERRY_DIR would silently mean the default directory.
for cmd in "pub /t --count 1" "echo /t --timeout 0" "hz /t --timeout 0" topics "info /t" clean \
    "demo --seconds 1 --no-baseline --no-lidar --no-gpu"; do
    # shellcheck disable=SC2086 # the command and its operand are separate words
    bad_value "empty_dir_${cmd%% *}" "^ferry ${cmd%% *}: --dir is empty: give the path of" \
        $cmd --dir ''
done
(export FERRY_DIR=
    check_value_error empty_env_dir '^ferry topics: FERRY_DIR is set but empty: give a directory' \
        topics) || USAGE_FAILS=$((USAGE_FAILS + 1))
bad_value demo_seconds '^ferry demo: --seconds 3601 is out of range: 1\.\.3600$' demo --seconds 3601
bad_value demo_cameras '^ferry demo: --cameras 17 is out of range: 1\.\.16$' demo --cameras 17
bad_value demo_consumers '^ferry demo: --consumers 0 is out of range: 1\.\.16$' demo --consumers 0
# bridge and bench gpu exist in builds with Cyclone DDS and with CUDA only.
if "$FERRY" bridge --help >/dev/null 2>&1; then
    bad_value bridge_depth '^ferry bridge: --depth 4097 is out of range: 1\.\.4096$' \
        bridge --depth 4097 --seconds 0
    bad_value bridge_dds_domain '^ferry bridge: --dds-domain 233 is out of range: 0\.\.232$' \
        bridge --dds-domain 233 --seconds 0
    bad_value bridge_seconds '^ferry bridge: --seconds inf is out of range: 0\.\.1000000000 s$' \
        bridge --seconds inf
    bad_value bridge_topic "^ferry bridge: invalid --topic '' \\(a pattern of 1\\.\\.200 bytes\\)$" \
        bridge --topic '' --seconds 0
    bad_value empty_dir_bridge '^ferry bridge: --dir is empty: give the path of' \
        bridge --dir '' --seconds 0
fi
if "$FERRY" bench gpu --help >/dev/null 2>&1; then
    bad_value gpu_device '^ferry bench gpu: --device 1025 is out of range: 0\.\.1024$' \
        bench gpu --device 1025
fi

# --- the ends of the ranges are accepted -------------------------------------------------------
run ends_pub pub /ends --size 64 --rate 100000 --count 3 --history 255 --pool 8k \
    --wait-subscribers 0
[ "$RC" -eq 0 ] || fail "ferry pub at the ends of its ranges exited $RC"
run ends_pub_slow pub /ends --rate 0.01 --count 1 --size 64k
[ "$RC" -eq 0 ] || fail "ferry pub --rate 0.01 --count 1 exited $RC"
run ends_pub_history pub /ends --history 4096 --chunks 4097 --count 3 --size 64
[ "$RC" -eq 0 ] || fail "ferry pub --history 4096 --chunks 4097 exited $RC"
run ends_pub_chunks pub /ends --chunks 1 --count 3 --size 64
[ "$RC" -eq 0 ] || fail "ferry pub --chunks 1 exited $RC"
run ends_pub_image pub /ends_image --image 64x1 --encoding mono8 --count 1
[ "$RC" -eq 0 ] || fail "ferry pub --image 64x1 --encoding mono8 exited $RC"
run ends_pub_cloud pub /ends_cloud --cloud 2x2 --count 1
[ "$RC" -eq 0 ] || fail "ferry pub --cloud 2x2 exited $RC"
run ends_echo echo /ends --depth 4096 --history 4096 --timeout 0
[ "$RC" -eq 0 ] || fail "ferry echo at the ends of its ranges exited $RC"
run ends_hz hz /ends --window 1000000 --timeout 0
[ "$RC" -eq 0 ] || fail "ferry hz --window 1000000 exited $RC"
run ends_type echo /ends --type "${LONG_TYPE:1}" --timeout 0
[ "$RC" -eq 0 ] || fail "ferry echo --type with 127 bytes exited $RC"
run ends_topics topics --domain 1023
[ "$RC" -eq 0 ] || fail "ferry topics --domain 1023 exited $RC"

# --- a fresh domain is empty -------------------------------------------------------------------
run topics_empty topics
[ "$RC" -eq 0 ] || fail "ferry topics exited $RC"
[ ! -s "$OUT/topics_empty.out" ] || fail "ferry topics printed something for an empty domain"
run topics_empty_json topics --json
[ "$RC" -eq 0 ] || fail "ferry topics --json exited $RC"
"$PYTHON" -c 'import json,sys; sys.exit(0 if json.load(sys.stdin) == [] else 1)' \
    <"$OUT/topics_empty_json.out" || fail "ferry topics --json is not [] for an empty domain"

# --- pub + echo --verify -----------------------------------------------------------------------
# echo starts first and, without --type, waits for the publisher to learn the topic's type.
timeout 30 "$FERRY" echo /t --count 10 --verify >"$OUT/echo.out" 2>"$OUT/echo.err" &
ECHO=$!
BG+=("$ECHO")
BGOUT=("$OUT/echo.out" "$OUT/echo.err")
run pub pub /t --size 4096 --rate 200 --count 50 --wait-subscribers 1
[ "$RC" -eq 0 ] || fail "ferry pub exited $RC"
wait "$ECHO"
RC=$?
[ "$RC" -eq 0 ] || fail "ferry echo exited $RC"
lines=$(wc -l <"$OUT/echo.out")
[ "$lines" -eq 10 ] || fail "ferry echo --count 10 printed $lines lines"
okl=$(grep -cE '^seq=[0-9]+ size=4096 latency_us=[0-9.]+ publisher=[0-9a-fA-F]+ frame=[0-9]+ ok$' "$OUT/echo.out")
[ "$okl" -eq 10 ] || fail "ferry echo --verify printed $okl ok lines of 10"
# frame= is the sequence the frame was filled with by ferry pub: here the publisher's own.
awk '{ split($1, a, "="); split($5, b, "="); if (a[2] != b[2]) exit 1 }' "$OUT/echo.out" ||
    fail "echo --verify frame numbers are not the publisher's sequence"
awk -F'[= ]' '{ if (NR > 1 && $2 <= last) exit 1; last = $2 }' "$OUT/echo.out" ||
    fail "echo sequence numbers do not increase"
[ "$(endpoint_files)" -eq 0 ] || fail "endpoint files left after pub and echo ended"

# --- info --json, topics --json and hz while a publisher runs ---------------------------------
timeout 60 "$FERRY" pub /info --size 64k --rate 100 >"$OUT/pub_info.out" 2>"$OUT/pub_info.err" &
PUB=$!
BG+=("$PUB")
timeout 60 "$FERRY" echo /info --quiet >"$OUT/echo_info.out" 2>"$OUT/echo_info.err" &
ECHO=$!
BG+=("$ECHO")
BGOUT=("$OUT/pub_info.err" "$OUT/echo_info.err")
wait_topic /info 1 1

run info_json info /info --json
[ "$RC" -eq 0 ] || fail "ferry info --json exited $RC"
"$PYTHON" -m json.tool "$OUT/info_json.out" >/dev/null || fail "ferry info --json is not valid JSON"
"$PYTHON" -c '
import json, sys
d = json.load(sys.stdin)
assert len(d["publishers"]) == 1, d
assert len(d["subscribers"]) >= 1, d
p = d["publishers"][0]
assert p["huge_pages"] == "off" and p["huge_bytes"] == 0, p
' <"$OUT/info_json.out" || fail "ferry info --json does not list the publisher (4 KiB pages) and the subscriber"
run info info /info
[ "$RC" -eq 0 ] || fail "ferry info exited $RC"
grep -q '^publishers: 1' "$OUT/info.out" || fail "ferry info does not show 1 publisher"
grep -q '^    pages 4 KiB$' "$OUT/info.out" || fail "ferry info does not show the publisher's pages"
run topics_json topics --json
[ "$RC" -eq 0 ] || fail "ferry topics --json exited $RC"
"$PYTHON" -m json.tool "$OUT/topics_json.out" >/dev/null || fail "ferry topics --json is not valid JSON"
run topics topics
grep -q 'info' "$OUT/topics.out" || fail "ferry topics does not list /info"
run topics_other topics --domain 6
[ "$RC" -eq 0 ] || fail "ferry topics --domain 6 exited $RC"
[ ! -s "$OUT/topics_other.out" ] || fail "domain 6 shows the topics of domain 5"
run hz hz /info --count 1 --timeout 10
[ "$RC" -eq 0 ] || fail "ferry hz exited $RC"
grep -qE '^rate [0-9.]+ Hz' "$OUT/hz.out" || fail "ferry hz printed no rate"

kill -TERM "$PUB" "$ECHO"
wait "$PUB"
RC=$?
[ "$RC" -eq 0 ] || fail "ferry pub exited $RC after SIGTERM"
wait "$ECHO"
RC=$?
[ "$RC" -eq 0 ] || fail "ferry echo exited $RC after SIGTERM"
[ "$(endpoint_files)" -eq 0 ] || fail "endpoint files left after SIGTERM"
run topics_after topics
[ ! -s "$OUT/topics_after.out" ] || fail "ferry topics lists topics after everything stopped"

# --- clean after a crash -----------------------------------------------------------------------
# No timeout(1) wrapper here: SIGKILL must reach ferry itself.
"$FERRY" pub /crash --size 4k --rate 10 >"$OUT/pub_crash.out" 2>"$OUT/pub_crash.err" &
PUB=$!
BG+=("$PUB")
BGOUT=("$OUT/pub_crash.err")
wait_topic /crash 1 0
kill -KILL "$PUB"
wait "$PUB" 2>/dev/null
BG=()
[ "$(endpoint_files)" -ge 1 ] || fail "a killed publisher left no files (nothing for clean to do)"
run topics_dead topics
[ ! -s "$OUT/topics_dead.out" ] || fail "ferry topics lists a dead publisher's topic"
run clean clean
[ "$RC" -eq 0 ] || fail "ferry clean exited $RC"
grep -qE '^removed [1-9][0-9]* files' "$OUT/clean.out" || fail "ferry clean removed nothing"
[ "$(endpoint_files)" -eq 0 ] || fail "endpoint files left after ferry clean"
run clean_again clean
[ "$RC" -eq 0 ] || fail "second ferry clean exited $RC"
grep -q '^removed 0 files' "$OUT/clean_again.out" || fail "second ferry clean removed something"

if [ "$USAGE_FAILS" -ne 0 ]; then
    echo "cli_test: $USAGE_FAILS usage error check(s) failed; everything else passed" >&2
    exit 1
fi
echo "cli_test: ok"
exit 0
