#!/usr/bin/env bash
# Graceful shutdown of the ferry commands: SIGINT or SIGTERM ends `ferry pub`, `ferry echo` and
# `ferry hz` with exit status 0, every chunk goes back to the publisher, and every file a
# stopped command made (its *.sock and *.status) is gone. Also a publisher stopped while its
# subscriber holds samples: it exits cleanly, and the subscriber carries on.
# usage: shutdown_test.sh PATH_TO_FERRY
# Exit status: 0 passed, 1 failed, 77 skipped (no ferry binary, or no python3 to read JSON).
set -u

FERRY=${1:-}
if [ -z "$FERRY" ] || [ ! -x "$FERRY" ]; then
    echo "shutdown_test: skipped, no ferry executable at '$FERRY'"
    exit 77
fi
PYTHON=$(command -v python3 || true)
if [ -z "$PYTHON" ]; then
    echo "shutdown_test: skipped, python3 is needed to read JSON"
    exit 77
fi

T=$(mktemp -d /tmp/ferry-shutdown-test-XXXXXX)
export FERRY_DIR=$T/root
export FERRY_DOMAIN=7
OUT=$T/out
mkdir -p "$OUT"
BG=()

cleanup() {
    local p
    for p in "${BG[@]}"; do
        kill -CONT "$p" 2>/dev/null
        kill -KILL "$p" 2>/dev/null
    done
    wait 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT

fail() {
    local f
    echo "shutdown_test.sh:${BASH_LINENO[0]}: FAIL: $*" >&2
    for f in "$OUT"/*; do
        [ -s "$f" ] || continue
        echo "---- $(basename "$f")" >&2
        tail -n 10 "$f" >&2
    done
    exit 1
}

# start NAME ARGS...: runs ferry ARGS in the background, output in $OUT/NAME.{out,err}; the
# pid lands in the variable NAME.
start() {
    local name=$1
    shift
    "$FERRY" "$@" >"$OUT/$name.out" 2>"$OUT/$name.err" &
    printf -v "$name" '%s' "$!"
    BG+=("$!")
}

# stop NAME SIGNAL: sends SIGNAL to the command started as NAME and checks it exits 0 within
# 10 s.
stop() {
    local name=$1 sig=$2 pid=${!1} rc
    kill "-$sig" "$pid" || fail "$name (pid $pid) was not running when sent SIG$sig"
    for _ in $(seq 1 200); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    kill -0 "$pid" 2>/dev/null && fail "$name did not stop within 10 s of SIG$sig"
    wait "$pid"
    rc=$?
    [ "$rc" -eq 0 ] || fail "$name exited with status $rc after SIG$sig, expected 0"
}

# info_check TOPIC PYTHON_EXPR: polls `ferry info --json` (up to 10 s) until the expression,
# over `d` (the JSON object), `p` (the first publisher) and `subs` (the live subscribers), is
# true.
info_check() {
    local topic=$1 expr=$2
    for _ in $(seq 1 200); do
        if "$FERRY" info "$topic" --json 2>/dev/null | "$PYTHON" -c '
import json, sys
d = json.load(sys.stdin)
pubs = [e for e in d["publishers"] if e["alive"]]
subs = [e for e in d["subscribers"] if e["alive"]]
p = pubs[0] if pubs else None
sys.exit(0 if eval(sys.argv[1]) else 1)
' "$expr" 2>/dev/null; then
            return 0
        fi
        sleep 0.05
    done
    "$FERRY" info "$topic" --json >"$OUT/info_last.out" 2>&1
    fail "'ferry info $topic --json' never satisfied: $expr"
}

# files PATTERN: how many files under FERRY_DIR match the find expression -name PATTERN.
files() {
    find "$FERRY_DIR" -name "$1" 2>/dev/null | wc -l
}

# Every endpoint file (socket, status, temporary) left under FERRY_DIR, one a line.
endpoint_files_left() {
    find "$FERRY_DIR" \( -name '*.sock' -o -name '*.status' -o -name '.*.tmp' \) 2>/dev/null
}

# --- subscribers stopped by SIGINT and SIGTERM; the publisher gets every chunk back ----------
TOPIC=/shutdown/a
start PUB pub "$TOPIC" --size 64k --rate 200
start ECHO echo "$TOPIC" --quiet --verify
start HZ hz "$TOPIC"
info_check "$TOPIC" 'p is not None and p["subscribers"] == 2 and len(subs) == 2 and p["published"] > 10'
[ "$(files 'sub.*.status')" -eq 2 ] || fail "expected 2 subscriber status files, found $(files 'sub.*.status')"

stop ECHO INT
stop HZ TERM
grep -q 'corrupt 0' "$OUT/ECHO.err" || fail "ferry echo did not report 'corrupt 0'"
[ "$(files 'sub.*.status')" -eq 0 ] || fail "subscriber status files left after SIGINT/SIGTERM: $(endpoint_files_left)"
# The publisher keeps publishing with nobody listening: nothing stays in use.
info_check "$TOPIC" 'p is not None and p["subscribers"] == 0 and not subs and p["chunks_in_use"] == 0 and p["subscribers_lost"] == 0'

stop PUB TERM
grep -q 'published' "$OUT/PUB.out" || fail "ferry pub printed no summary"
[ -z "$(endpoint_files_left)" ] || fail "files left after every command stopped: $(endpoint_files_left)"

# --- the publisher stopped (SIGTERM) while its subscriber holds samples ------------------------
TOPIC=/shutdown/b
start PUB2 pub "$TOPIC" --size 64k --rate 200
start ECHO2 echo "$TOPIC" --quiet --verify --depth 4
info_check "$TOPIC" 'p is not None and p["subscribers"] == 1 and len(subs) == 1 and p["published"] > 10'
# A stopped subscriber keeps what was delivered to it: its queue fills and stays full.
kill -STOP "$ECHO2"
info_check "$TOPIC" 'p is not None and p["chunks_in_use"] >= 2'
stop PUB2 TERM
[ "$(files 'pub.*')" -eq 0 ] || fail "publisher files left after SIGTERM: $(endpoint_files_left)"
kill -CONT "$ECHO2"
# The subscriber notices its publisher is gone, takes what it still holds and keeps running.
info_check "$TOPIC" 'len(subs) == 1 and subs[0]["publishers"] == 0 and subs[0]["publishers_lost"] == 1 and subs[0]["held"] == 0'
kill -0 "$ECHO2" 2>/dev/null || fail "ferry echo ended when its publisher was stopped"
stop ECHO2 INT
grep -q 'corrupt 0' "$OUT/ECHO2.err" || fail "ferry echo did not report 'corrupt 0' after its publisher left"
[ -z "$(endpoint_files_left)" ] || fail "files left after every command stopped: $(endpoint_files_left)"

# --- a publisher stopped by SIGINT while waiting for subscribers -------------------------------
start PUB3 pub /shutdown/c --wait-subscribers 1
info_check /shutdown/c 'p is not None'
stop PUB3 INT
[ -z "$(endpoint_files_left)" ] || fail "files left after SIGINT during --wait-subscribers: $(endpoint_files_left)"

echo "shutdown_test: ok"
exit 0
