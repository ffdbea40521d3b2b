#!/usr/bin/env bash
# ferry play's waiting and pacing, and the times ferry record stores, in a private domain
# directory:
#   1. --wait-subscribers 1 with two topics, where a subscriber of one topic connects at once
#      and one of the other 3 s later (past the 2 s a subscriber gives a publisher to answer its
#      hello): both are served, play publishes everything and exits 0, each gets every message;
#   2. ferry record of a paced camera (ferry pub --rate 30): the file's publish times are the
#      publisher's (their deltas are, to the nanosecond, those a live subscriber saw), its log
#      times the recorder's;
#   3. that file played: in the recorded order, the replayed intervals following the recorded
#      publish intervals (medians within a quarter, spans within 50 ms early or 1 s late);
#   4. files written here: publish times 50 ms apart with every log time bunched 1 s later (a
#      recorder that slept) play over the publish times' span; without publish times (0), over
#      the log times'.
# The assertions are loose enough for a machine whose CPUs are all busy; the periods it prints
# are for reading.
#
#   play_test.sh FERRY
# Exit status: 0 passed, 1 failed, 77 skipped (no python3).
set -uo pipefail
ferry=$1
here=$(cd "$(dirname "$0")" && pwd)
command -v python3 >/dev/null 2>&1 || { echo "play_test: no python3; skipped"; exit 77; }
work=$(mktemp -d /tmp/ferry-play-test.XXXXXX)
export FERRY_DIR=$work/d
N=40

cleanup() {
  local p
  for p in $(jobs -p); do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "play_test: $*" >&2
  exit 1
}
mcap() { python3 "$here/mcap_times.py" "$@"; }

# --- a recording of a paced camera and a point cloud, and a live subscriber's view of it -------
"$ferry" record /cam/image /lidar/points -o "$work/rec.mcap" --compression none --depth 64 \
  --quiet --sched normal &
rec=$!
"$ferry" echo /cam/image --json --count $N --depth 64 --timeout 30 >"$work/live.json" \
  2>"$work/live.err" &
e=$!
"$ferry" pub /cam/image --image 160x120 --rate 30 --count $N --wait-subscribers 2 >/dev/null 2>&1 &
p1=$!
"$ferry" pub /lidar/points --cloud 100x2 --rate 30 --count $N --wait-subscribers 1 >/dev/null 2>&1 &
p2=$!
wait $p1 || fail "ferry pub /cam/image exited $?"
wait $p2 || fail "ferry pub /lidar/points exited $?"
wait $e || fail "the live subscriber: $(cat "$work/live.err")"
sleep 0.3
kill -INT $rec
wait $rec || fail "ferry record exited $?"

# --- 1. --wait-subscribers serves every publisher while it waits -------------------------------
"$ferry" play "$work/rec.mcap" --wait-subscribers 1 --timeout 30 --quiet 2>"$work/wait.play" &
pl=$!
sleep 0.3
"$ferry" echo /lidar/points --quiet --count $N --depth 64 --timeout 40 2>"$work/wait.lidar" &
e1=$!
sleep 3
"$ferry" echo /cam/image --json --count $N --depth 64 --timeout 40 >"$work/played.json" \
  2>"$work/wait.cam" &
e2=$!
wait $pl || fail "--wait-subscribers: ferry play exited $?: $(cat "$work/wait.play")"
wait $e1 || fail "--wait-subscribers: the early subscriber: $(cat "$work/wait.lidar")"
wait $e2 || fail "--wait-subscribers: the late subscriber: $(cat "$work/wait.cam")"
grep -q "did not answer" "$work/wait.lidar" "$work/wait.cam" &&
  fail "--wait-subscribers: a subscriber was not answered: $(cat "$work/wait.lidar" "$work/wait.cam")"
echo "play_test: --wait-subscribers: a subscriber of each topic, one 3 s after the other, got all $N"

# --- 2. and 3. the recorded times, and the replay's pacing -------------------------------------
mcap check-recording "$work/rec.mcap" /cam/image "$work/live.json" "$work/played.json" ||
  fail "the recording or its replay (above)"

# --- 4. publish times, not log times; log times where there are none ---------------------------
for kind in late-log no-publish; do
  mcap write "$work/$kind.mcap" $kind || fail "writing $kind.mcap"
  "$ferry" echo /crafted/image --json --count 20 --depth 64 --timeout 30 >"$work/$kind.json" \
    2>"$work/$kind.err" &
  e=$!
  "$ferry" play "$work/$kind.mcap" --wait-subscribers 1 --timeout 30 --quiet ||
    fail "$kind: ferry play exited $?"
  wait $e || fail "$kind: the subscriber: $(cat "$work/$kind.err")"
  mcap check-span "$work/$kind.json" 0.95 || fail "$kind: not paced (above)"
done
echo "play_test: ok"
