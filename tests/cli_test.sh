#!/usr/bin/env bash
# The ferry command-line tool, end to end, in a private domain directory (FERRY_DIR).
# usage: cli_test.sh PATH_TO_FERRY
# Exit status: 0 passed, 1 failed, 77 skipped (no ferry binary or no python3 to check JSON).
set -u

FERRY=${1:-}
NAME=cli_test
if [ -z "$FERRY" ] || [ ! -x "$FERRY" ]; then
    echo "cli_test: skipped, no ferry executable at '$FERRY'"
    exit 77
fi
# shellcheck source=tests/cli_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"

T=$(mktemp -d /tmp/ferry-cli-test-XXXXXX)
export FERRY_DIR=$T/root
export FERRY_DOMAIN=5
unset FERRY_TYPE
OUT=$T/out
mkdir -p "$OUT"
cli_lib_init

endpoint_files() {
    find "$FERRY_DIR" \( -name '*.sock' -o -name '*.status' \) 2>/dev/null
}

# expect_no_endpoint_files WHAT: no *.sock or *.status file is left in the domain directories.
expect_no_endpoint_files() {
    endpoint_files >"$OUT/endpoint_files.out"
    expect_empty "$OUT/endpoint_files.out" "$1"
}

# --- help and usage errors ---------------------------------------------------------------------
run help --help
expect_rc 0 "ferry --help"
expect_line "$OUT/help.out" '^usage: ferry' "ferry --help printed no usage"
for cmd in pub echo hz delay topics info clean demo bench; do
    run "help_$cmd" "$cmd" --help
    expect_rc 0 "ferry $cmd --help"
    expect_line "$OUT/help_$cmd.out" "^usage: ferry $cmd" "ferry $cmd --help printed no usage"
done

# Usage errors are independent of each other: report each one and go on. Messages give the line
# of the script's own call, also when a helper below calls these.
check_usage_error() {
    local name=$1 why=""
    shift
    run "$name" "$@"
    if [ "$RC" -eq 0 ]; then
        why="exited 0, expected a usage error"
    elif [ "$RC" -eq 124 ]; then
        why="hung, expected a usage error"
    elif [ "$(wc -l <"$OUT/$name.err")" -ne 1 ]; then
        why="printed $(wc -l <"$OUT/$name.err") lines on stderr, expected a one-line message"
    elif [ -s "$OUT/$name.out" ]; then
        why="printed on stdout, expected nothing there"
    fi
    if [ -n "$why" ]; then
        echo "cli_test.sh:$(where_from): FAIL: ferry $*: $why ($(status_text "$RC"))" >&2
        show_file "$OUT/$name.err"
        show_file "$OUT/$name.out"
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
        why="$(status_text "$RC"), expected exit status 2"
    elif ! grep -qE -- "$pattern" "$OUT/$name.err"; then
        why="the message does not match '$pattern'"
    else
        return 0
    fi
    echo "cli_test.sh:$(where_from): FAIL: ferry $*: $why" >&2
    show_file "$OUT/$name.err"
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
bad_value pub_share '^ferry pub: --share 300 is more than the pool.s 256 chunks \(--chunks\)$' \
    pub /t --share 300 --count 1
bad_value pub_share_min '^ferry pub: --share 0 is out of range: 1\.\.65536 \(must also be at most' \
    pub /t --share 0 --count 1
bad_value pub_share_bytes '^ferry pub: --share-bytes banana' pub /t --share-bytes banana --count 1
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
# --encoding is the encoding of --image's images: alone, or with --cloud, it would be ignored.
bad_value pub_encoding_alone '^ferry pub: --encoding needs --image \(' \
    pub /t --encoding mono8 --count 1
bad_value pub_encoding_cloud '^ferry pub: --encoding needs --image \(' \
    pub /t --cloud 4x4 --encoding mono8 --count 1
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
# Options before the command name: the message says where they go, as a command line to copy.
bad_value before_command '^ferry: options go after the command: ferry topics --domain 3$' \
    --domain 3 topics
bad_value before_command_words "^ferry: options go after the command: ferry echo /t --count 1 --dir '$T/a b'\$" \
    --dir "$T/a b" echo /t --count 1
bad_value before_command_value '^ferry: options go after the command: ferry topics --dir pub$' \
    --dir pub topics
bad_value before_nothing "^ferry: unknown option '--domain' \(try 'ferry --help'\)$" --domain 3
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
# ferry record refuses a topic pattern that no topic name can match (names are segments of
# [A-Za-z0-9_] separated by single '/'), naming the pattern and why; --seconds 0.1 everywhere: a
# pattern wrongly accepted must not keep the recorder running.
if "$FERRY" record --help >/dev/null 2>&1; then
    NAMES_ARE=' \(topic names are segments of A-Z a-z 0-9 _ separated by single ./.\)$'
    bad_value record_pattern_dash "^ferry record: topic pattern 'camera-front' can match no topic: '-' is in no topic name$NAMES_ARE" \
        record camera-front -o "$T/p.mcap" --seconds 0.1
    bad_value record_pattern_dot "^ferry record: topic pattern '/cam\\*\\.jpg' can match no topic: '\\.' is in no topic name" \
        record '/cam*.jpg' -o "$T/p.mcap" --seconds 0.1
    bad_value record_pattern_empty "^ferry record: topic pattern '/a//b' can match no topic: an empty segment \('//'\)$NAMES_ARE" \
        record /a//b -o "$T/p.mcap" --seconds 0.1
    bad_value record_pattern_trailing "^ferry record: topic pattern '/camera/' can match no topic: it ends with '/'$NAMES_ARE" \
        record /camera/ -o "$T/p.mcap" --seconds 0.1
    bad_value record_pattern_set "^ferry record: topic pattern '/cam\[\.-\]x' can match no topic: \[\.-\] matches no character a topic name has" \
        record '/cam[.-]x' -o "$T/p.mcap" --seconds 0.1
    bad_value record_pattern_slashes "^ferry record: topic pattern '/\[/\]\*' can match no topic: no topic name fits it$NAMES_ARE" \
        record '/[/]*' -o "$T/p.mcap" --seconds 0.1
    bad_value record_pattern_long "^ferry record: invalid topic pattern '' \(1\.\.200 bytes\)$" \
        record '' -o "$T/p.mcap" --seconds 0.1
    # Patterns some topic matches are taken: '*' matches '/' too, sets and escapes as fnmatch
    # reads them.
    run record_patterns_ok record '/camera/*' 'cam*' '*' '/[a-z]*' '/a\_b' '/x/?' '/[[:alpha:]]*' \
        -o "$T/ok.mcap" --seconds 0.1 --quiet
    expect_rc 0 "ferry record with valid patterns ($(cat "$OUT/record_patterns_ok.err"))"
    # Its output never blocks the recorder: a FIFO (whose open would wait for a reader) is
    # refused at once, with or without a reader, as is anything else but a regular file.
    mkfifo "$T/fifo.mcap"
    RUN_LIMIT=10 run record_fifo record -o "$T/fifo.mcap" --seconds 1 --quiet
    expect_rc 1 "ferry record -o FIFO"
    expect_line "$OUT/record_fifo.err" "^ferry record: $T/fifo\.mcap is a FIFO \(with no reader\): the output must be a regular file$" \
        "ferry record -o FIFO (no reader) said no reason"
    exec 3<>"$T/fifo.mcap" # a reader, which never blocks opening
    RUN_LIMIT=10 run record_fifo_reader record -o "$T/fifo.mcap" --seconds 1 --quiet
    exec 3<&-
    expect_rc 1 "ferry record -o FIFO with a reader"
    expect_line "$OUT/record_fifo_reader.err" "^ferry record: $T/fifo\.mcap is a FIFO: the output must be a regular file \(" \
        "ferry record -o FIFO (a reader) said no reason"
    [ -p "$T/fifo.mcap" ] || fail "ferry record replaced the FIFO"
    RUN_LIMIT=10 run record_dev record -o /dev/null --seconds 1 --quiet
    expect_rc 1 "ferry record -o /dev/null"
    expect_line "$OUT/record_dev.err" "^ferry record: /dev/null is a character device: the output must be a regular file" \
        "ferry record -o /dev/null said no reason"
fi

# --- the ends of the ranges are accepted -------------------------------------------------------
run ends_pub pub /ends --size 64 --rate 100000 --count 3 --history 255 --pool 8k \
    --wait-subscribers 0
expect_rc 0 "ferry pub at the ends of its ranges"
run ends_pub_slow pub /ends --rate 0.01 --count 1 --size 64k
expect_rc 0 "ferry pub --rate 0.01 --count 1"
run ends_pub_history pub /ends --history 4096 --chunks 4097 --count 3 --size 64
expect_rc 0 "ferry pub --history 4096 --chunks 4097"
run ends_pub_chunks pub /ends --chunks 1 --count 3 --size 64
expect_rc 0 "ferry pub --chunks 1"
run ends_pub_image pub /ends_image --image 64x1 --encoding mono8 --count 1
expect_rc 0 "ferry pub --image 64x1 --encoding mono8"
run ends_pub_cloud pub /ends_cloud --cloud 2x2 --count 1
expect_rc 0 "ferry pub --cloud 2x2"
# echo and hz subscribe at the ends of their ranges to a live publisher (without one, a
# --timeout is an error).
start ends_pub_live pub /ends --size 64 --rate 50
ENDS_PUB=$PID
wait_topic /ends 1 0
run ends_echo echo /ends --depth 4096 --history 4096 --timeout 0
expect_rc 0 "ferry echo at the ends of its ranges, a publisher there"
run ends_hz hz /ends --window 1000000 --timeout 0
expect_rc 0 "ferry hz --window 1000000, a publisher there"
kill -TERM "$ENDS_PUB"
finish "$ENDS_PUB"
LAST=ends_pub_live
expect_rc 0 "ferry pub /ends after SIGTERM"
# A type name of 127 bytes subscribes (no usage error); nothing publishes it.
run ends_type echo /ends_type --type "${LONG_TYPE:1}" --timeout 0
expect_rc 1 "ferry echo --type with 127 bytes, no publisher"
expect_line "$OUT/ends_type.err" \
    "^ferry echo: timed out after 0 s: no publisher on /ends_type \(domain 5 in $FERRY_DIR\)$" \
    "ferry echo --type with 127 bytes did not subscribe"
run ends_topics topics --domain 1023
expect_rc 0 "ferry topics --domain 1023"

# --- a fresh domain is empty -------------------------------------------------------------------
run topics_empty topics
expect_rc 0 "ferry topics"
expect_empty "$OUT/topics_empty.out" "ferry topics of a domain without live endpoints"
run topics_empty_json topics --json
expect_rc 0 "ferry topics --json"
py -c 'import json,sys; sys.exit(0 if json.load(sys.stdin) == [] else 1)' \
    <"$OUT/topics_empty_json.out" || fail "ferry topics --json is not [] for an empty domain"

# --- pub + echo --verify -----------------------------------------------------------------------
# echo starts first and, without --type, waits for the publisher to learn the topic's type. Its
# queue holds every frame, so however late a busy machine runs it, it loses none of the first 10.
start echo echo /t --count 10 --verify --depth 64
ECHO=$PID
run pub pub /t --size 4096 --rate 200 --count 50 --wait-subscribers 1
expect_rc 0 "ferry pub /t --count 50 --wait-subscribers 1"
finish "$ECHO"
LAST="echo"
expect_rc 0 "ferry echo /t --count 10 --verify"
lines=$(wc -l <"$OUT/echo.out")
[ "$lines" -eq 10 ] || fail "ferry echo --count 10 printed $lines lines, expected 10"
okl=$(grep -cE '^seq=[0-9]+ size=4096 latency_us=[0-9.]+ publisher=[0-9a-fA-F]+ frame=[0-9]+ ok$' "$OUT/echo.out")
[ "$okl" -eq 10 ] || fail "ferry echo --verify printed $okl ok lines, expected 10"
# frame= is the sequence the frame was filled with by ferry pub: here the publisher's own.
awk '{ split($1, a, "="); split($5, b, "="); if (a[2] != b[2]) exit 1 }' "$OUT/echo.out" ||
    fail "echo --verify frame numbers are not the publisher's sequence"
awk -F'[= ]' '{ if (NR > 1 && $2 <= last) exit 1; last = $2 }' "$OUT/echo.out" ||
    fail "echo sequence numbers do not increase"
expect_no_endpoint_files "endpoint files left after pub and echo ended"

# --- nothing publishes: echo, hz and delay say so --------------------------------------------
# A second after it started, each says once that nothing publishes on the topic, where it looks
# and how to list what is published, and goes on waiting (a signal ends it, exit 0). hz has a
# --type (it subscribes at once); delay looks in a directory nothing has used.
start notice_echo echo /nope
NOTICE_ECHO=$PID
start notice_hz hz /nope --type ferry/synthetic_frame
NOTICE_HZ=$PID
start notice_delay delay /nope --dir "$T/typo" --domain 3
NOTICE_DELAY=$PID
wait_line "$OUT/notice_echo.err" '^ferry echo: no publisher on /nope yet' 60 \
    "ferry echo /nope never said that nothing publishes there"
wait_line "$OUT/notice_hz.err" '^ferry hz: no publisher on /nope yet' 60 \
    "ferry hz /nope --type never said that nothing publishes there"
wait_line "$OUT/notice_delay.err" '^ferry delay: no publisher on /nope yet' 60 \
    "ferry delay /nope --dir TYPO never said that nothing publishes there"
kill -TERM "$NOTICE_ECHO" "$NOTICE_HZ" "$NOTICE_DELAY"
for cmd in echo hz delay; do
    pid_var=NOTICE_${cmd^^}
    finish "${!pid_var}"
    LAST=notice_$cmd
    expect_rc 0 "ferry $cmd /nope after SIGTERM"
    n=$(grep -c 'no publisher on' "$OUT/notice_$cmd.err")
    [ "$n" -eq 1 ] || fail "ferry $cmd /nope said $n times that nothing publishes there, expected once"
done
expect_line "$OUT/notice_echo.err" \
    "^ferry echo: no publisher on /nope yet \(domain 5 in $FERRY_DIR\); waiting \(ferry topics lists what is published\)$" \
    "ferry echo /nope: the notice"
expect_line "$OUT/notice_hz.err" \
    "^ferry hz: no publisher on /nope yet \(domain 5 in $FERRY_DIR\); waiting \(ferry topics lists what is published\)$" \
    "ferry hz /nope --type: the notice"
expect_line "$OUT/notice_delay.err" \
    "^ferry delay: no publisher on /nope yet \(domain 3 in $T/typo, which no ferry process has used\); waiting \(ferry topics --domain 3 --dir $T/typo lists what is published\)$" \
    "ferry delay /nope in a directory nothing has used: the notice"
# A --timeout that ends with no publisher ever seen is an error, --count or not, --type or not.
for args in "echo /nope" "hz /nope" "delay /nope" "echo /nope --count 1" \
    "hz /nope --type ferry/synthetic_frame" "delay /nope --type sensor_msgs/Imu --count 1"; do
    # shellcheck disable=SC2086 # the command and its operands are separate words
    run timeout_nope $args --timeout 0.5
    expect_rc 1 "ferry $args --timeout 0.5, no publisher"
    expect_line "$OUT/timeout_nope.err" \
        "^ferry ${args%% *}: timed out after 0\.5 s: no publisher on /nope \(domain 5 in $FERRY_DIR\)$" \
        "ferry $args --timeout 0.5"
done
expect_no_endpoint_files "endpoint files left after echo, hz and delay on /nope"

# --- info --json, topics --json and hz while a publisher runs ---------------------------------
start pub_info pub /info --size 64k --rate 100
PUB=$PID
start echo_info echo /info --quiet
ECHO=$PID
wait_topic /info 1 1

run info_json info /info --json
expect_rc 0 "ferry info --json"
py -m json.tool "$OUT/info_json.out" >/dev/null || fail "ferry info --json is not valid JSON"
py -c '
import json, sys
d = json.load(sys.stdin)
assert len(d["publishers"]) == 1, d
assert len(d["subscribers"]) >= 1, d
p = d["publishers"][0]
assert p["huge_pages"] == "off" and p["huge_bytes"] == 0, p
for e in [p] + d["subscribers"]:
    assert e["spin"]["mode"] in ("spin", "yield"), e
' <"$OUT/info_json.out" || fail "ferry info --json does not list the publisher (4 KiB pages, how it spins) and the subscriber"
PUB_PID=$(py -c 'import json, sys; print(json.load(sys.stdin)["publishers"][0]["pid"])' \
    <"$OUT/info_json.out")
run info info /info
expect_rc 0 "ferry info"
expect_line "$OUT/info.out" '^publishers: 1' "ferry info does not show 1 publisher"
expect_line "$OUT/info.out" '^    pages 4 KiB$' "ferry info does not show the publisher's pages"
expect_line "$OUT/info.out" '^    waits: (spin up to|yield)' "ferry info does not show how the waits spin"
run topics_json topics --json
expect_rc 0 "ferry topics --json"
py -m json.tool "$OUT/topics_json.out" >/dev/null || fail "ferry topics --json is not valid JSON"
run topics topics
expect_line "$OUT/topics.out" 'info' "ferry topics does not list /info"
run topics_other topics --domain 6
expect_rc 0 "ferry topics --domain 6"
expect_empty "$OUT/topics_other.out" "domain 6 shows the topics of domain 5"
run hz hz /info --count 1 --timeout 20
expect_rc 0 "ferry hz /info --count 1"
expect_line "$OUT/hz.out" '^rate [0-9.]+ Hz' "ferry hz printed no rate"
# With a publisher and no --count, --timeout is how long to listen: exit 0.
run listen echo /info --quiet --timeout 0.5
expect_rc 0 "ferry echo /info --timeout 0.5, a publisher there"
# Another type on the topic: refused, naming both types and the publisher.
run etype_echo echo /info --type foo/Bar --timeout 10
expect_rc 1 "ferry echo /info --type foo/Bar, the topic in use with another type"
expect_line "$OUT/etype_echo.err" \
    "^ferry echo: cannot subscribe to '/info' as foo/Bar: the topic is in use with type ferry/synthetic_frame \(publisher pid $PUB_PID, node 'pub'\)$" \
    "ferry echo --type foo/Bar: the message names both types"
run etype_pub pub /info --image 8x8 --count 1
expect_rc 1 "ferry pub /info --image, the topic in use with another type"
expect_line "$OUT/etype_pub.err" \
    "^ferry pub: cannot publish on '/info' as sensor_msgs/Image: the topic is in use with type ferry/synthetic_frame \(publisher pid $PUB_PID, node 'pub'\)$" \
    "ferry pub --image: the message names both types"

kill -TERM "$PUB" "$ECHO"
finish "$PUB"
LAST=pub_info
expect_rc 0 "ferry pub /info after SIGTERM"
finish "$ECHO"
LAST=echo_info
expect_rc 0 "ferry echo /info after SIGTERM"
expect_no_endpoint_files "endpoint files left after SIGTERM"
run topics_after topics
expect_empty "$OUT/topics_after.out" "ferry topics lists topics after everything stopped"

# --- clean after a crash -----------------------------------------------------------------------
# No timeout(1) wrapper here: SIGKILL must reach ferry itself.
"$FERRY" pub /crash --size 4k --rate 10 >"$OUT/pub_crash.out" 2>"$OUT/pub_crash.err" &
PUB=$!
BG+=("$PUB")
BGOUT=("$OUT/pub_crash.err")
wait_topic /crash 1 0
kill -KILL "$PUB"
wait "$PUB" 2>/dev/null
[ "$(endpoint_files | wc -l)" -ge 1 ] ||
    fail "a killed publisher left no files (nothing for clean to do)"
run topics_dead topics
expect_empty "$OUT/topics_dead.out" "ferry topics lists a dead publisher's topic"
run clean clean
expect_rc 0 "ferry clean"
expect_line "$OUT/clean.out" '^removed [1-9][0-9]* files' "ferry clean removed nothing"
expect_no_endpoint_files "endpoint files left after ferry clean"
run clean_again clean
expect_rc 0 "second ferry clean"
expect_line "$OUT/clean_again.out" '^removed 0 files' "second ferry clean removed something"

# --- a full tmpfs as the domain directory: said as such, not as "out of memory" alone -----------
# Root only (a tmpfs of its own, mounted and unmounted here); skipped where mounting is refused.
FULL=$(mktemp -d /tmp/ferry-cli-full.XXXXXX)
if [ "$(id -u)" -eq 0 ] && mount -t tmpfs -o size=64k,mode=0700 tmpfs "$FULL" 2>/dev/null; then
    mkdir -p "$FULL/0" && chmod 700 "$FULL/0"
    dd if=/dev/zero of="$FULL/fill" bs=4k count=64 2>/dev/null
    run pub_full pub /full --dir "$FULL" --count 1
    umount "$FULL"
    expect_rc 1 "ferry pub on a full tmpfs"
    expect_line "$OUT/pub_full.err" "out of memory \(the file system of the domain directory is full" \
        "ferry pub on a full tmpfs did not say the file system is full"
else
    echo "cli_test: full tmpfs not checked (needs root and a tmpfs mount)"
fi
rmdir "$FULL"

if [ "$USAGE_FAILS" -ne 0 ]; then
    echo "cli_test: $USAGE_FAILS usage error check(s) failed; everything else passed" >&2
    exit 1
fi
echo "cli_test: ok"
exit 0
