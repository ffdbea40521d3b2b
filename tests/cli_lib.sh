# Shell helpers of the command-line tests (cli_test.sh, cli_ros_test.sh), sourced by them.
# The sourcing script sets NAME (its name, for messages), FERRY (the ferry executable) and OUT
# (the directory every command's stdout and stderr go to) and then calls cli_lib_init.
#
# Nothing here waits for a fixed time: a wait ends on the event it waits for (a command's exit,
# a line in a file, an endpoint in `ferry topics`) and gives up only after a bound that a loaded
# machine does not come near; a bound that passes is a failure that says what never happened.
# shellcheck shell=bash

# The background commands to stop at the end, and files of theirs a failure shows.
BG=()
BGOUT=()
# The last command run: a failure shows $OUT/$LAST.{out,err} (and .pub.*, a publisher beside it).
LAST=none
# Files a failing check names, shown first.
SHOW=()

# cli_lib_init: python3 as PYTHON (77 when missing), the clean-up trap.
cli_lib_init() {
    PYTHON=$(command -v python3 || true)
    if [ -z "$PYTHON" ]; then
        echo "$NAME: skipped, python3 is needed to check JSON"
        exit 77
    fi
    # A version manager's shim (pyenv's python3 is a shell script that runs `pyenv exec`) costs
    # a second or more a call on a busy machine, and these scripts call Python dozens of times:
    # they call the interpreter itself, without site (-S), whose .pth files import more; the
    # checks use the standard library only.
    local exe
    exe=$("$PYTHON" -c 'import sys; print(sys.executable)' 2>/dev/null)
    if [ -n "$exe" ] && [ -x "$exe" ]; then
        PYTHON=$exe
    fi
    trap cli_cleanup EXIT
}

# py ARGS...: the checks' Python.
py() {
    "$PYTHON" -S "$@"
}

cli_cleanup() {
    local p
    # timeout(1) passes SIGTERM on to the ferry it runs; SIGKILL it would not.
    for p in "${BG[@]}"; do
        kill -TERM "$p" 2>/dev/null
    done
    for p in "${BG[@]}"; do
        wait_gone "$p" 5 || kill -KILL "$p" 2>/dev/null
    done
    wait 2>/dev/null
    rm -rf "$T"
}

# wait_gone PID SECONDS: true once PID (a child) has exited (a zombie not yet waited for counts),
# false if it still runs after SECONDS.
wait_gone() {
    local pid=$1 deadline=$((SECONDS + $2)) state
    while :; do
        state=$(sed -n 's/^State:[[:space:]]*\(.\).*/\1/p' "/proc/$pid/status" 2>/dev/null)
        [ -n "$state" ] && [ "$state" != Z ] || return 0
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.05
    done
}

# status_text RC: an exit status in words.
status_text() {
    local rc=$1
    if [ "$rc" -eq 124 ]; then
        echo "timed out (exit status 124: timeout(1) stopped it)"
    elif [ "$rc" -eq 127 ]; then
        echo "exit status 127 (command not found)"
    elif [ "$rc" -gt 128 ] && [ "$rc" -lt 160 ]; then
        echo "killed by SIG$(kill -l $((rc - 128)) 2>/dev/null) (exit status $rc)"
    else
        echo "exit status $rc"
    fi
}

# show_file FILE: its last 20 lines on stderr, under its name; and when the library's last log
# line (the library logs "ferry: ...", the commands "ferry CMD: ...") is older than those, that
# line too.
show_file() {
    local f=$1 n lib
    [ -s "$f" ] || return 0
    n=$(wc -l <"$f")
    if [ "$n" -gt 20 ]; then
        echo "---- $(basename "$f") (the last 20 of $n lines)" >&2
    else
        echo "---- $(basename "$f")" >&2
    fi
    tail -n 20 "$f" | sed 's/^/    /' >&2
    if [ "$n" -gt 20 ]; then
        lib=$(head -n $((n - 20)) "$f" | grep '^ferry: ' | tail -n 1)
        [ -z "$lib" ] || echo "    (the library's last log line before those: $lib)" >&2
    fi
}

# where_from: "LINE" of the test script's check that failed, and "(in LINE2)" when a helper of
# the script is between (BASH_SOURCE names this file for the helpers here, which are skipped).
where_from() {
    local i first="" outer=""
    for ((i = 1; i < ${#BASH_LINENO[@]}; i++)); do
        [ "${BASH_SOURCE[$i + 1]:-}" = "${BASH_SOURCE[-1]}" ] || continue
        [ "${BASH_SOURCE[$i + 1]}" != "${BASH_SOURCE[0]}" ] || continue
        [ -n "$first" ] || first=${BASH_LINENO[$i]}
        outer=${BASH_LINENO[$i]}
    done
    if [ -n "$first" ] && [ "$outer" != "$first" ]; then
        echo "$first (called from line $outer)"
    else
        echo "${first:-?}"
    fi
}

# fail MESSAGE: says which check failed and why, shows the files of the check (SHOW), of the
# last command and of the background ones, and ends the script with status 1.
fail() {
    local f seen=" "
    echo "$NAME.sh:$(where_from): FAIL: $*" >&2
    for f in "${SHOW[@]}" "$OUT/$LAST.out" "$OUT/$LAST.err" "$OUT/$LAST.pub.out" \
        "$OUT/$LAST.pub.err" "${BGOUT[@]}"; do
        case $seen in *" $f "*) continue ;; esac
        seen="$seen$f "
        show_file "$f"
    done
    exit 1
}

# run NAME ARGS...: runs `ferry ARGS` (for at most RUN_LIMIT seconds), its stdout and stderr in
# $OUT/NAME.{out,err}; sets RC.
RUN_LIMIT=30
run() {
    local name=$1
    shift
    LAST=$name
    SHOW=()
    timeout "$RUN_LIMIT" "$FERRY" "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"
    RC=$?
}

# start NAME ARGS...: `ferry ARGS` in the background (for at most 120 s), its output in
# $OUT/NAME.{out,err}; its pid in PID.
start() {
    local name=$1
    shift
    timeout 120 "$FERRY" "$@" >"$OUT/$name.out" 2>"$OUT/$name.err" &
    PID=$!
    BG+=("$PID")
    BGOUT+=("$OUT/$name.out" "$OUT/$name.err")
}

# finish PID: waits for a background command and sets RC to its exit status.
finish() {
    wait "$1"
    RC=$?
}

# expect_rc WANT WHAT: the last command's status (RC) is WANT.
expect_rc() {
    [ "$RC" -eq "$1" ] || fail "$2: $(status_text "$RC"), expected exit status $1"
}

# expect_line FILE ERE WHAT: a line of FILE matches the extended regular expression ERE.
expect_line() {
    grep -qE -- "$2" "$1" && return 0
    SHOW=("$1")
    fail "$3: no line of $(basename "$1") matches '$2'"
}

# expect_no_line FILE ERE WHAT: no line of FILE matches ERE.
expect_no_line() {
    grep -qE -- "$2" "$1" || return 0
    SHOW=("$1")
    fail "$3: $(basename "$1") has a line matching '$2': $(grep -m1 -E -- "$2" "$1")"
}

# expect_empty FILE WHAT: FILE is empty.
expect_empty() {
    [ -s "$1" ] || return 0
    SHOW=("$1")
    fail "$2: expected $(basename "$1") to be empty, it has $(wc -l <"$1") lines"
}

# wait_line FILE ERE SECONDS WHAT: waits until a line of FILE matches ERE.
wait_line() {
    local deadline=$((SECONDS + $3))
    until grep -qE -- "$2" "$1" 2>/dev/null; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            SHOW=("$1")
            fail "$4: no line matching '$2' in $(basename "$1") after $3 s"
        fi
        sleep 0.05
    done
}

# wait_topic TOPIC PUBS SUBS: waits (up to 60 s) until `ferry topics` lists TOPIC with at least
# PUBS publishers and SUBS subscribers. There is no wait API in the shell, so this polls.
wait_topic() {
    local topic=$1 pubs=$2 subs=$3 deadline=$((SECONDS + 60))
    while [ "$SECONDS" -lt "$deadline" ]; do
        if timeout 20 "$FERRY" topics --json 2>/dev/null | py -c '
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
    timeout 20 "$FERRY" topics >"$OUT/wait_topic.out" 2>&1
    SHOW=("$OUT/wait_topic.out")
    fail "$topic never showed $pubs publisher(s) and $subs subscriber(s) in 'ferry topics' (60 s)"
}
