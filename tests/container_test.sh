#!/usr/bin/env bash
# Publisher and subscriber as two containers see each other: each in IPC, PID and mount
# namespaces of its own (unshare), with a private tmpfs on /dev/shm, sharing nothing but the
# domain root, bind-mounted at a different path on each side. Frames must arrive intact and
# uncopied (the segments are memfds passed over the socket: no shared IPC namespace or /dev/shm
# is needed), and `ferry info` in the subscriber's namespaces must show the publisher alive,
# though its pid means nothing there.
# usage: container_test.sh PATH_TO_FERRY
# Exit status: 0 passed, 1 failed, 77 skipped (no unshare, or namespaces or mounts not
# permitted).
set -u
FERRY=${1:-}
skip() {
    echo "SKIP: $*"
    exit 77
}
fail() {
    echo "FAIL: $*"
    for f in "$T"/*.log; do
        [ -s "$f" ] && { echo "---- $(basename "$f")"; tail -n 20 "$f"; }
    done
    exit 1
}
[ -n "$FERRY" ] && [ -x "$FERRY" ] || skip "no ferry executable at '$FERRY'"
command -v unshare >/dev/null || skip "needs unshare (util-linux)"
command -v python3 >/dev/null || skip "needs python3 to read ferry info --json"
FERRY=$(readlink -f "$FERRY")

T=$(mktemp -d /tmp/ferry-container-test.XXXXXX) || exit 1
PIDS=()
# stop PID: SIGTERM to the command that unshare PID runs (unshare itself ignores SIGTERM).
stop() {
    local c
    c=$(cat "/proc/$1/task/$1/children" 2>/dev/null)
    # shellcheck disable=SC2086
    [ -n "$c" ] && kill -TERM $c 2>/dev/null
}
cleanup() {
    local p
    for p in "${PIDS[@]}"; do stop "$p"; done
    wait 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT
mkdir -p "$T/volume" "$T/a" "$T/b"
chmod 700 "$T/volume"

# box MOUNTPOINT CMD...: becomes (exec) CMD in new IPC, PID and mount namespaces, with a tmpfs on
# /dev/shm and the shared volume bind-mounted at MOUNTPOINT: call it in a subshell or with &.
# The mounts stay in the namespace.
box() {
    local mnt=$1
    shift
    # --kill-child: should unshare be killed, the command gets SIGTERM.
    exec unshare --ipc --pid --mount --fork --propagation private --kill-child=TERM \
        sh -c 'mount -t tmpfs -o size=1m tmpfs /dev/shm && mount --bind "$1" "$2" && shift 2 && exec "$@"' \
        box "$T/volume" "$mnt" "$@"
}
(box "$T/a" true) 2>"$T/probe.log" || skip "cannot enter IPC, PID and mount namespaces and mount there: $(head -1 "$T/probe.log")"

# The publisher's namespaces: /dev/shm there is 1 MiB, smaller than two frames of its pool.
# 20 Hz: the subscriber's 100 frames take 5 s, time enough for ferry info to see both ends
# on a busy machine.
box "$T/a" "$FERRY" pub /cam --dir "$T/a/domains" --size 2M --rate 20 --count 100000 \
    --wait-subscribers 1 >"$T/pub.log" 2>&1 &
PUB=$!
PIDS+=($PUB)
# The subscriber's: another /dev/shm, another IPC namespace, the volume at another path.
box "$T/b" "$FERRY" echo /cam --dir "$T/b/domains" --verify --count 100 --timeout 60 \
    >"$T/echo.log" 2>"$T/echo.err" &
ECHO=$!
PIDS+=($ECHO)

# While both run: the subscriber's side sees the publisher, alive.
seen=
for _ in $(seq 1 100); do
    if (box "$T/b" "$FERRY" info /cam --dir "$T/b/domains" --json) >"$T/info.json" 2>"$T/info.log" &&
        python3 - "$T/info.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
pubs = [p for p in j["publishers"] if p["alive"]]
subs = [s for s in j["subscribers"] if s["alive"]]
sys.exit(0 if pubs and subs and pubs[0]["subscribers"] >= 1 else 1)
PY
    then
        seen=1
        break
    fi
    sleep 0.1
done
[ -n "$seen" ] || fail "ferry info in the subscriber's namespaces never showed the publisher alive"
echo "ok: ferry info in the subscriber's namespaces shows the publisher alive (its pid there: $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["publishers"][0]["pid"])' "$T/info.json"))"

wait "$ECHO" || fail "ferry echo exited $?"
cat "$T/echo.err"
grep -q 'received 100, dropped [0-9]*, corrupt 0,' "$T/echo.err" || fail "frames missing or corrupt"
[ "$(grep -c ' ok$' "$T/echo.log")" = 100 ] || fail "not every frame verified ok"
copied=$(python3 -c 'import json,sys; print(sum(p["bytes_copied"] for p in json.load(open(sys.argv[1]))["publishers"]))' "$T/info.json")
[ "$copied" = 0 ] || fail "the publisher copied $copied bytes"
echo "ok: 100 frames of 2 MiB crossed the namespaces intact, 0 bytes copied"

# The publisher stops cleanly on SIGTERM and leaves no endpoint behind.
stop "$PUB"
wait "$PUB" 2>/dev/null
left=x
for _ in $(seq 1 50); do
    left=$("$FERRY" topics --dir "$T/volume/domains")
    [ -z "$left" ] && break
    sleep 0.1
done
[ -z "$left" ] || fail "endpoints left after the publisher stopped: $left"
grep -q 'published' "$T/pub.log" || fail "ferry pub printed no summary: it did not stop cleanly"
echo "ok: the publisher stopped cleanly"
echo "PASS"
