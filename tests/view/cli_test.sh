#!/usr/bin/env bash
# `ferry view` without a browser or npm: option errors name the option (exit 2), --help, a port
# that is taken and an address that is not this host's (exit 1 with one line that says so), the
# token in the URL, the page with it, a 404 and a 403 without it over plain HTTP when curl is
# there, and a clean stop on SIGTERM.
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
bad --max-connections 0 "--max-connections 0 is out of range"
bad --max-connections x "--max-connections x is not a whole number"
# More than the descriptor limit allows (half of 256 less 64): exit 2, said.
out=$(ulimit -n 256 && "$FERRY" view --max-connections 97 2>&1)
rc=$?
[ $rc -eq 2 ] || fail "--max-connections 97 under ulimit -n 256: exit $rc ($out)"
case $out in *"allows at most 96"*) ;; *) fail "--max-connections 97 under ulimit -n 256: '$out'" ;; esac
bad extra "unexpected argument 'extra'"
bad --nope "nope"
"$FERRY" view --help | grep -q -- "--max-rate HZ" || fail "--help lists --max-rate"
"$FERRY" view --help | grep -q -- "--no-token" || fail "--help lists --no-token"

start() { # start NAME ARGS...: ferry view in the background; its port in $PORT, token in $TOKEN
    local name=$1
    shift
    "$FERRY" view "$@" >"$T/$name.out" 2>"$T/$name.err" &
    LAST=$!
    PIDS+=($LAST)
    PORT=
    for _ in $(seq 50); do
        PORT=$(sed -n 's/^ferry view: serving http:\/\/[^:]*:\([0-9]*\)\/.*/\1/p' "$T/$name.out")
        TOKEN=$(sed -n 's/^ferry view: serving http:\/\/[^ ]*?token=\([0-9a-f]*\) .*/\1/p' "$T/$name.out")
        [ -n "$PORT" ] && return 0
        kill -0 "$LAST" 2>/dev/null || break
        sleep 0.1
    done
    cat "$T/$name.err"
    fail "ferry view $* did not say its port"
}
start a --port 0
A=$LAST
# What ferry view printed, its own lines and libwebsockets' (which it prefixes too); not a
# sanitizer build's report of a leak in libwebsockets' failed start, which is not ferry's.
said() { grep '^ferry' <<<"$1"; }
# The port is taken: exactly one line that says so (none of libwebsockets' own), exit 1.
out=$("$FERRY" view --port "$PORT" 2>&1)
rc=$?
[ $rc -eq 1 ] || fail "a taken port: exit $rc ($out)"
[ "$(said "$out")" = "ferry view: port $PORT is in use on 127.0.0.1" ] || fail "a taken port: '$out'"
# An address that is not this host's: one line, exit 1 (not a retry loop).
for addr in not-an-address 192.0.2.1; do
    out=$(timeout 10 "$FERRY" view --bind $addr --port 0 2>&1)
    rc=$?
    [ $rc -eq 1 ] || fail "--bind $addr: exit $rc ($out)"
    [ "$(said "$out")" = "ferry view: cannot listen on $addr: not an IP address or interface of this host" ] ||
        fail "--bind $addr: '$out'"
done
[ ${#TOKEN} -eq 32 ] || fail "the URL carries no 128-bit token: $(cat "$T/a.out")"
if command -v curl >/dev/null; then
    code=$(curl -s -o "$T/page.html" -w '%{http_code}' "http://127.0.0.1:$PORT/?token=$TOKEN")
    [ "$code" = 200 ] || fail "GET /?token=TOKEN: $code"
    grep -q "foxglove.websocket.v1" "$T/page.html" || fail "the page does not speak foxglove.websocket.v1"
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/etc/passwd?token=$TOKEN")
    [ "$code" = 404 ] || fail "GET /etc/passwd?token=TOKEN: $code"
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/")
    [ "$code" = 403 ] || fail "GET / without the token: $code, not 403"
fi
kill -TERM "$A"
wait "$A"
rc=$?
[ $rc -eq 0 ] || fail "exit $rc after SIGTERM"
grep -q "clients, .* messages sent" "$T/a.out" || fail "no summary line after SIGTERM"
echo "PASS: view cli"
