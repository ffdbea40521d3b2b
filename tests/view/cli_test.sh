#!/usr/bin/env bash
# `ferry view` without a browser or npm: option errors name the option (exit 2), --help, a port
# that is taken (exit 1 with a message), the page and a 404 over plain HTTP when curl is there,
# and a clean stop on SIGTERM.
# usage: cli_test.sh PATH_TO_FERRY
# Exit status: 0 passed, 1 failed, 77 skipped (ferry built without ferry view).
set -u
FERRY=$1
fail() {
    echo "FAIL: $*"
    exit 1
}
if ! "$FERRY" view --help >/dev/null 2>&1; then
    "$FERRY" view 2>&1 | grep -q "not built" || fail "view without libwebsockets should say it is not built"
    echo "SKIP: ferry built without ferry view"
    exit 77
fi
T=$(mktemp -d /tmp/ferry-view-cli-test.XXXXXX) || fail "mktemp"
chmod 700 "$T"
export FERRY_DIR=$T/root
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT

# bad ARGS... EXPECTED: exit 2 and EXPECTED in the one-line message.
bad() {
    local want=${*: -1} out rc
    out=$("$FERRY" view "${@:1:$#-1}" 2>&1)
    rc=$?
    [ $rc -eq 2 ] || fail "ferry view ${*:1:$#-1}: exit $rc, not 2 ($out)"
    case $out in *"$want"*) ;; *) fail "ferry view ${*:1:$#-1}: '$out' does not say '$want'" ;; esac
}
bad --port x "--port x is not a whole number"
bad --port 65536 "--port 65536 is out of range: 0..65535"
bad --max-rate 0.01 "--max-rate 0.01 is out of range"
bad --max-rate nan "--max-rate"
bad --jpeg-quality 0 "--jpeg-quality 0 is out of range: 1..100"
bad --jpeg-quality 101 "--jpeg-quality 101 is out of range"
bad --bind "" "--bind: empty address"
bad --topic "" "--topic"
bad --origin "" "--origin"
bad --domain 5000 "--domain 5000 is out of range"
bad extra "unexpected argument 'extra'"
bad --nope "nope"
"$FERRY" view --help | grep -q -- "--max-rate HZ" || fail "--help lists --max-rate"

start() { # start NAME ARGS...: ferry view in the background; its port in $PORT
    local name=$1
    shift
    "$FERRY" view "$@" >"$T/$name.out" 2>"$T/$name.err" &
    LAST=$!
    PIDS+=($LAST)
    PORT=
    for _ in $(seq 50); do
        PORT=$(sed -n 's/^ferry view: serving http:\/\/[^:]*:\([0-9]*\)\/.*/\1/p' "$T/$name.out")
        [ -n "$PORT" ] && return 0
        kill -0 "$LAST" 2>/dev/null || break
        sleep 0.1
    done
    cat "$T/$name.err"
    fail "ferry view $* did not say its port"
}
start a --port 0
A=$LAST
# The port is taken: a message, exit 1.
out=$("$FERRY" view --port "$PORT" 2>&1)
rc=$?
[ $rc -eq 1 ] || fail "a taken port: exit $rc ($out)"
case $out in *"cannot listen on 127.0.0.1 port $PORT"*) ;; *) fail "a taken port: '$out'" ;; esac
# An address that is not this host's: a message, exit 1 (not a retry loop).
out=$(timeout 10 "$FERRY" view --bind not-an-address --port 0 2>&1)
rc=$?
[ $rc -eq 1 ] || fail "--bind not-an-address: exit $rc ($out)"
case $out in *"cannot listen on not-an-address"*) ;; *) fail "--bind not-an-address: '$out'" ;; esac
if command -v curl >/dev/null; then
    code=$(curl -s -o "$T/page.html" -w '%{http_code}' "http://127.0.0.1:$PORT/")
    [ "$code" = 200 ] || fail "GET /: $code"
    grep -q "foxglove.websocket.v1" "$T/page.html" || fail "the page does not speak foxglove.websocket.v1"
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/etc/passwd")
    [ "$code" = 404 ] || fail "GET /etc/passwd: $code"
fi
kill -TERM "$A"
wait "$A"
rc=$?
[ $rc -eq 0 ] || fail "exit $rc after SIGTERM"
grep -q "clients, .* messages sent" "$T/a.out" || fail "no summary line after SIGTERM"
echo "PASS: view cli"
