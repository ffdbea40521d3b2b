#!/usr/bin/env bash
# `ferry view` end to end, through npm packages: starts `ferry pub` (a 320x240 rgb8 camera) and
# `ferry view --port 0` in a private domain directory, then runs one of the node scripts here
# against them: ws (the official Foxglove client: serverInfo, channels, CDR decoded with the
# advertised schema, JPEG), page (the built-in page in headless Chromium through playwright-core)
# or stall (a client that never reads: the camera's rate and latency, the view's memory).
# The npm packages are installed once into NPM_DIR (under the build tree), never globally, by
# npm.sh: pinned to versions that run on Node 18 (Debian 12's), within 60 s (ctest gives these
# tests 150), after a 10 s probe of the registry.
# usage: run.sh ws|hostile|page|stall PATH_TO_FERRY NPM_DIR
# Exit status: 0 passed, 1 failed, 77 skipped (no node 18 or npm, no registry, no Chromium).
set -u
MODE=$1
FERRY=$2
NPM_DIR=$3
HERE=$(cd "$(dirname "$0")" && pwd)
skip() {
    echo "SKIP: $*"
    exit 77
}
fail() {
    echo "FAIL: $*"
    exit 1
}
[ -x "$FERRY" ] || fail "no ferry executable at '$FERRY'"
"$FERRY" view --help >/dev/null 2>&1 || skip "this ferry is built without ferry view (libwebsockets-dev)"
. "$HERE/npm.sh"
npm_need_node 18
if [ "$MODE" = page ]; then
    CHROMIUM=${FERRY_TEST_CHROMIUM:-/usr/bin/chromium}
    [ -x "$CHROMIUM" ] || skip "no Chromium at $CHROMIUM (Debian package chromium; make test installs it)"
    export FERRY_TEST_CHROMIUM=$CHROMIUM
fi

# One install for the four tests. The newest majors of some of these need Node 20
# (@foxglove/rosmsg2-serialization 3, playwright-core 1.62 and later): these run on 18.
npm_install "$NPM_DIR" 60 @foxglove/ws-protocol@0.8 ws@8 @foxglove/rosmsg@5 \
    @foxglove/rosmsg2-serialization@2 playwright-core@1.61 pngjs@7

T=$(mktemp -d /tmp/ferry-view-test.XXXXXX) || fail "mktemp"
chmod 700 "$T"
export FERRY_DIR=$T/root
export FERRY_DOMAIN=3
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT

SIZE=320x240
[ "$MODE" = stall ] && SIZE=640x480
"$FERRY" pub /cam/image --image "$SIZE" --rate 30 >"$T/pub.out" 2>"$T/pub.err" &
PIDS+=($!)
"$FERRY" view --port 0 >"$T/view.out" 2>"$T/view.err" &
VIEW=$!
PIDS+=($VIEW)
PORT=
for _ in $(seq 50); do
    PORT=$(sed -n 's/^ferry view: serving http:\/\/127\.0\.0\.1:\([0-9]*\)\/.*/\1/p' "$T/view.out")
    TOKEN=$(sed -n 's/^ferry view: serving http:\/\/[^ ]*?token=\([0-9a-f]*\) .*/\1/p' "$T/view.out")
    [ -n "$PORT" ] && break
    sleep 0.1
done
[ -n "$PORT" ] || { cat "$T/view.err"; fail "ferry view did not say its port"; }
[ -n "$TOKEN" ] || fail "ferry view printed no token: $(cat "$T/view.out")"

FERRY_BIN=$FERRY VIEW_PORT=$PORT VIEW_TOKEN=$TOKEN VIEW_PID=$VIEW NODE_PATH=$NPM_DIR/node_modules \
    FERRY_TEST_SHOT=${FERRY_TEST_SHOT:-$T/page.png} \
    timeout 50 node "$HERE/${MODE}_test.mjs"
rc=$?
if [ $rc -ne 0 ]; then
    echo "---- ferry view stderr"
    tail -n 20 "$T/view.err"
    fail "${MODE}_test.mjs exited $rc"
fi
[ -s "$T/view.err" ] && { echo "---- ferry view stderr"; head -n 20 "$T/view.err"; }
kill -TERM "$VIEW"
wait "$VIEW"
rc=$?
[ $rc -eq 0 ] || fail "ferry view exited $rc after SIGTERM"
echo "PASS: view $MODE"
