#!/usr/bin/env bash
# ferry record, play and bag info end to end, in a private domain directory:
#   - for each compression (none, lz4, zstd): `ferry pub` images, point clouds and synthetic
#     frames (a type without a ROS 2 kind: recorded raw) -> `ferry record` (SIGINT) -> `ferry bag
#     info --json` (counts, no drop) -> `ferry play` -> `ferry echo --verify`: every frame intact
#     and every image's header stamp the one it was published with;
#   - a recorder killed with SIGKILL: its file reads up to its last complete chunk, bag info says
#     truncated, play plays what it holds;
#   - a file shrunk under a playing `ferry play`: exit 1 naming the file, not a SIGBUS;
#   - CompressedImage and Imu samples recorded and played, an invalid Imu counted and left out;
#   - hostile files (not MCAP, empty, cut short, a bad Header length, a flipped byte in a chunk,
#     a corrupted summary): a clear message and exit status, never a crash.
# With --independent MODULES_DIR it checks the files with Foxglove's @mcap/core instead
# (tests/record/mcap_check.mjs, npm packages installed under MODULES_DIR by tests/view/npm.sh),
# and exits 77 at once when node 18, npm or the registry is not there.
#
# PEER (tests/cli_types_peer) and TENSOR_PEER (tests/record/tensor_peer.c) add CompressedImage,
# Imu and host tensor topics, and an invalid Imu.
#
#   record_test.sh FERRY [PEER TENSOR_PEER] [--independent MODULES_DIR]
set -uo pipefail
ferry=$1
shift
peer="" tensor_peer=""
if [ $# -gt 1 ] && [ "$1" != "--independent" ]; then
  peer=$1
  tensor_peer=$2
  shift 2
fi
independent=""
[ "${1:-}" = "--independent" ] && independent=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/ferry-record-test.XXXXXX)
export FERRY_DIR=$work/d
N=20

cleanup() {
  local p
  for p in $(jobs -p); do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "record_test: $*" >&2
  exit 1
}

if [ -n "$independent" ]; then
  # npm.sh: Node 18 or later, a 10 s probe of the registry, the install within 60 s (ctest gives
  # this test 180); otherwise one line and exit 77.
  . "$here/../view/npm.sh"
  npm_need_node 18
  npm_install "$independent" 60 @mcap/core@2 lz4js@0.2 fzstd@0.1
fi

# bag info --json of $1 as python sees it: prints the value of the expression $2 (d is the
# object, t the topics by name).
bag_json() {
  "$ferry" bag info --json "$1" >"$work/info.json" || fail "bag info $1 failed"
  python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
t = {x["topic"]: x for x in d["topics"]}
print(eval(sys.argv[2]))' "$work/info.json" "$2"
}

# Publishes N images, clouds and synthetic frames, each publisher waiting for its subscribers:
# the recorder, plus the stamp echo on the images.
publish() {
  "$ferry" pub /cam/image --image 160x120 --rate 50 --count $N --wait-subscribers 2 >/dev/null 2>&1 &
  local p1=$!
  "$ferry" pub /lidar/points --cloud 400x2 --rate 50 --count $N --wait-subscribers 1 --history 3 >/dev/null 2>&1 &
  local p2=$!
  "$ferry" pub /raw --size 32k --rate 50 --count $N --wait-subscribers 1 >/dev/null 2>&1 &
  local p3=$!
  wait $p1 $p2 $p3
}

stamps() { # the echo that prints each image's stamp and whether it is intact
  "$ferry" echo /cam/image --verify --field header.stamp --field intact --count $N --depth 64 --timeout 30 \
    >"$1" 2>"$1.err" &
}

roundtrip() {
  local comp=$1 file=$work/$1.mcap rec e
  rm -f "$work"/live "$work"/played*
  "$ferry" record -o "$file" --compression "$comp" --chunk-size 256k --quiet --sched normal \
    --depth 64 &
  rec=$!
  stamps "$work/live"
  e=$!
  publish
  wait $e || fail "$comp: the live echo did not get $N images: $(cat "$work/live.err")"
  sleep 0.3
  kill -INT $rec
  wait $rec || fail "$comp: ferry record exited $?"

  [ "$(bag_json "$file" 'd["messages"], d["truncated"], d["compression"]')" = "($((3 * N)), False, '${comp}')" ] ||
    fail "$comp: bag info: $(cat "$work/info.json")"
  for t in /cam/image /lidar/points /raw; do
    [ "$(bag_json "$file" "t['$t']['count'], t['$t']['dropped']")" = "($N, 0)" ] ||
      fail "$comp: $t: $(cat "$work/info.json")"
  done
  [ "$(bag_json "$file" "t['/cam/image']['type'], t['/cam/image']['serialization'], t['/raw']['serialization']")" = \
    "('sensor_msgs/msg/Image', 'cdr', 'ferry-raw')" ] || fail "$comp: types: $(cat "$work/info.json")"
  # The MCAP ros2 profile's offered_qos_profiles: YAML, one profile per publisher, in rosbag2's
  # form; /lidar/points keeps 3 for late joiners (transient local, depth 3), the others none
  # (volatile, the recorder's depth).
  for tq in "/cam/image:2:64" "/lidar/points:1:3" "/raw:2:64"; do
    IFS=: read -r t dur depth <<<"$tq"
    got=$(bag_json "$file" "(lambda q: (len(q), q[0]['history'], q[0]['depth'], q[0]['reliability'], q[0]['durability'], q[0]['liveliness'], q[0]['deadline'], q[0]['avoid_ros_namespace_conventions']))(__import__('yaml').safe_load(t['$t']['metadata']['offered_qos_profiles']))") ||
      fail "$comp: $t: offered_qos_profiles is not YAML: $(cat "$work/info.json")"
    [ "$got" = "(1, 1, $depth, 1, $dur, 1, {'sec': 9223372036, 'nsec': 854775807}, False)" ] ||
      fail "$comp: $t: offered_qos_profiles: expected one profile (KEEP_LAST $depth, reliable, durability $dur), got $got"
  done

  if [ -n "$independent" ]; then
    node "$here/mcap_check.mjs" "$independent" "$file" --compression "$comp" \
      --count /cam/image=$N --count /lidar/points=$N --count /raw=$N || fail "$comp: @mcap/core"
    return
  fi

  stamps "$work/played"
  local e1=$!
  "$ferry" echo /lidar/points --verify --quiet --count $N --depth 64 --timeout 30 2>"$work/played.cloud" &
  local e2=$!
  "$ferry" echo /raw --verify --quiet --count $N --depth 64 --timeout 30 2>"$work/played.raw" &
  local e3=$!
  "$ferry" play "$file" --rate 4 --wait-subscribers 1 --quiet || fail "$comp: ferry play exited $?"
  wait $e1 || fail "$comp: played images: $(cat "$work/played.err")"
  wait $e2 || fail "$comp: played clouds: $(cat "$work/played.cloud")"
  wait $e3 || fail "$comp: played raw frames: $(cat "$work/played.raw")"
  grep -q '"intact": false' "$work/played" && fail "$comp: a played image is corrupt"
  cmp -s "$work/live" "$work/played" || {
    diff "$work/live" "$work/played" | head -5 >&2
    fail "$comp: the played images' stamps are not the recorded ones"
  }
  echo "record_test: $comp: $N images, clouds and raw frames recorded, played and verified"
}

for comp in none lz4 zstd; do roundtrip $comp; done
[ -n "$independent" ] && { echo "record_test: @mcap/core read every file"; exit 0; }

# --- split files, --max-size, play's --topic, --remap, --start and --end ------------------------
"$ferry" record /cam/image -o "$work/split.mcap" --split-size 1M --chunk-size 256k --depth 64 \
  --quiet --sched normal &
rec=$!
"$ferry" record /cam/image -o "$work/cam.mcap" --depth 64 --quiet --sched normal --nice 5 &
rec2=$!
"$ferry" pub /cam/image --image 320x240 --rate 50 --count $N --wait-subscribers 2 >/dev/null 2>&1
sleep 0.3
# Policy (SCHED_IDLE is 5) and nice, from /proc/PID/stat. The recorders that must keep every
# frame run --sched normal with a queue that holds them all (--depth 64): on a machine whose CPUs
# other tests keep busy, a SCHED_IDLE recorder, or one with the default 32, falls behind (and
# counts it), as documented.
sched() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $39 "/" $17}'; }
[ "$(sched $rec2)" = "0/5" ] || fail "--sched normal --nice 5: policy/nice $(sched $rec2)"
"$ferry" record /idle/check -o "$work/idle.mcap" --quiet &
idle=$!
for _ in $(seq 50); do [ "$(sched $idle | cut -d/ -f1)" = 5 ] && break; sleep 0.1; done
[ "$(sched $idle | cut -d/ -f1)" = 5 ] || fail "default recorder not SCHED_IDLE: $(sched $idle)"
# A background job of a script ignores SIGINT until ferry installs its handler, which it does
# after it has set its policy: wait for the handler (SigCgt bit 2), or the signal is lost.
catches_int() { [ $((0x$(sed -n 's/^SigCgt:[[:space:]]*//p' "/proc/$1/status") & 2)) -ne 0 ]; }
for _ in $(seq 100); do catches_int $idle && break; sleep 0.1; done
kill -INT $idle
# Under SCHED_IDLE on CPUs that other work keeps busy it gets little time to stop: bounded.
for _ in $(seq 300); do kill -0 $idle 2>/dev/null || break; sleep 0.1; done
kill -0 $idle 2>/dev/null && { kill -KILL $idle; fail "the SCHED_IDLE recorder did not stop within 30 s of SIGINT"; }
wait $idle || fail "the SCHED_IDLE recorder exited $?"
kill -INT $rec $rec2
wait $rec || fail "split: ferry record exited $?"
wait $rec2 || fail "ferry record of cam.mcap exited $?"
total=0
for f in "$work"/split_*.mcap; do
  total=$((total + $(bag_json "$f" 'd["messages"]')))
done
[ -f "$work/split_0.mcap" ] && [ -f "$work/split_3.mcap" ] && [ $total -eq $N ] ||
  fail "split: $(ls "$work") with $total messages"
"$ferry" record -o "$work/max.mcap" --max-size 1M --chunk-size 64k --quiet --sched normal \
  2>"$work/max.err" &
rec=$!
"$ferry" pub /cam/image --image 320x240 --rate 50 --count $N --wait-subscribers 1 >/dev/null 2>&1
wait $rec || fail "max-size: ferry record exited $?: $(cat "$work/max.err")"
m=$(bag_json "$work/max.mcap" 'd["messages"]')
[ "$m" -ge 2 ] && [ "$m" -lt $N ] && [ "$(stat -c %s "$work/max.mcap")" -lt $((1024 * 1024 + 65536)) ] ||
  fail "max-size: $m messages, $(stat -c %s "$work/max.mcap") bytes"
# 20 images at 50 Hz, over 0.38 s: --start 0.1 --end 0.3 keeps about 10.
"$ferry" echo /replay/image --verify --quiet --depth 64 --timeout 4 2>"$work/remap.err" &
e=$!
"$ferry" play "$work/cam.mcap" --topic /cam/image --remap /cam/image:/replay/image --start 0.1 \
  --end 0.3 --wait-subscribers 1 --quiet || fail "remap: ferry play exited $?"
wait $e
got=$(sed -n 's/.*received \([0-9]*\),.*/\1/p' "$work/remap.err")
[ "$got" -ge 6 ] && [ "$got" -le 14 ] || fail "--start/--end/--remap: $(cat "$work/remap.err")"
echo "record_test: split into $(ls "$work"/split_*.mcap | wc -l) files, --max-size, play --remap --start --end ($got of $N)"

# --- CompressedImage, Imu, and an invalid Imu ---------------------------------------------------
if [ -n "$peer" ]; then
  "$ferry" record /compressed /imu /bad_imu /tensor -o "$work/types.mcap" --depth 64 --quiet \
    --sched normal &
  rec=$!
  # The tensors' stamps and elements as the live subscriber sees them, and later the player's.
  tensors() {
    "$ferry" echo /tensor --field header.stamp --field shape --field data.crc32 --count 5 \
      --depth 64 --timeout 10 >"$1" 2>"$1.err" &
  }
  tensors "$work/tensor.live"
  e=$!
  "$tensor_peer" "$FERRY_DIR" /tensor 5 2 >/dev/null 2>&1 &
  p4=$!
  "$peer" "$FERRY_DIR" 0 compressed /compressed 5 >/dev/null 2>&1 &
  p1=$!
  "$peer" "$FERRY_DIR" 0 imu /imu 5 >/dev/null 2>&1 &
  p2=$!
  "$peer" "$FERRY_DIR" 0 bad-imu /bad_imu 3 >/dev/null 2>&1 &
  p3=$!
  wait $e || fail "types: live tensors: $(cat "$work/tensor.live.err")"
  sleep 1
  kill -INT $rec
  wait $rec || fail "types: ferry record exited $?"
  kill $p1 $p2 $p3 $p4 2>/dev/null
  wait $p1 $p2 $p3 $p4 2>/dev/null
  # The invalid samples make no message, so no channel: only the recorder's counts name them.
  [ "$(bag_json "$work/types.mcap" "t['/compressed']['count'], t['/imu']['count'], t['/imu']['type'], '/bad_imu' in t")" = \
    "(5, 5, 'sensor_msgs/msg/Imu', False)" ] || fail "types: $(cat "$work/info.json")"
  "$ferry" bag info "$work/types.mcap" >"$work/out" || fail "types: bag info"
  grep -q "Not stored: *\/bad_imu  recorder dropped 0  invalid 3" "$work/out" ||
    fail "types: bag info does not report the invalid samples: $(cat "$work/out")"
  python3 - "$work/types.mcap" <<'PY' || fail "types: the invalid Imu samples are not counted"
import re, sys
data = open(sys.argv[1], "rb").read()
assert b"/bad_imu.invalid" in data and re.search(rb"/bad_imu\.invalid\x01\x00\x00\x003", data)
PY
  "$ferry" echo /imu --json --count 5 --depth 64 --timeout 10 >"$work/imu.json" 2>"$work/imu.err" &
  e1=$!
  "$ferry" echo /compressed --json --count 5 --depth 64 --timeout 10 >"$work/comp.json" 2>&1 &
  e2=$!
  tensors "$work/tensor.played"
  e3=$!
  "$ferry" play "$work/types.mcap" --topic /imu --topic /compressed --topic /tensor \
    --wait-subscribers 1 --quiet || fail "types: ferry play exited $?"
  wait $e1 || fail "types: played Imu: $(cat "$work/imu.err")"
  wait $e2 || fail "types: played CompressedImage: $(cat "$work/comp.json")"
  wait $e3 || fail "types: played tensors: $(cat "$work/tensor.played.err")"
  grep -q '"invalid"' "$work/imu.json" "$work/comp.json" && fail "types: a played sample is invalid"
  [ "$(bag_json "$work/types.mcap" "t['/tensor']['type'], t['/tensor']['count']")" = \
    "('ferry_msgs/msg/Tensor', 5)" ] || fail "types: tensors: $(cat "$work/info.json")"
  cmp -s "$work/tensor.live" "$work/tensor.played" || {
    diff "$work/tensor.live" "$work/tensor.played" | head -4 >&2
    fail "types: the played tensors are not the recorded ones"
  }
  echo "record_test: CompressedImage, Imu and tensors recorded and played, the invalid Imu counted"
fi

# --- SIGKILL: the file reads up to its last complete chunk ---------------------------------------
"$ferry" record -o "$work/killed.mcap" --chunk-size 64k --quiet --sched normal &
rec=$!
"$ferry" pub /cam/image --image 160x120 --rate 100 --count 400 --wait-subscribers 1 >/dev/null 2>&1 &
pub=$!
sleep 1.5
kill -KILL $rec
wait $rec 2>/dev/null
kill -INT $pub
wait $pub 2>/dev/null
"$ferry" bag info "$work/killed.mcap" >"$work/killed.txt" || fail "bag info of the killed file failed"
grep -q "truncated" "$work/killed.txt" || fail "the killed file is not reported truncated"
m=$(bag_json "$work/killed.mcap" 'd["messages"]')
[ "$(bag_json "$work/killed.mcap" 'd["truncated"]')" = True ] && [ "$m" -gt 10 ] ||
  fail "the killed file: $(cat "$work/info.json")"
"$ferry" echo /cam/image --verify --quiet --count "$m" --depth 256 --timeout 30 2>"$work/killed.echo" &
e=$!
"$ferry" play "$work/killed.mcap" --wait-subscribers 1 --quiet 2>"$work/killed.play" ||
  fail "play of the killed file: $(cat "$work/killed.play")"
wait $e || fail "the killed file's $m images: $(cat "$work/killed.echo")"
echo "record_test: SIGKILL: $m images read back from the cut file"

# --- hostile files ---------------------------------------------------------------------------------
good=$work/none.mcap
size=$(stat -c %s "$good")
expect_fail() { # expect_fail NAME FILE MESSAGE COMMAND...
  local name=$1 f=$2 msg=$3
  shift 3
  "$@" "$f" >"$work/out" 2>&1
  local rc=$?
  [ $rc -eq 1 ] || fail "$name: exit $rc, expected 1: $(cat "$work/out")"
  grep -q "$msg" "$work/out" || fail "$name: no '$msg' in: $(cat "$work/out")"
}
# A file shrunk by another process while it is played: an error naming it, not a SIGBUS.
cp "$good" "$work/shrink.mcap"
"$ferry" play "$work/shrink.mcap" --rate 0.1 --quiet 2>"$work/shrink.err" &
pl=$!
sleep 1
truncate -s 4096 "$work/shrink.mcap"
wait $pl
rc=$?
[ $rc -eq 1 ] && grep -q "shrank while it was read" "$work/shrink.err" ||
  fail "a file shrunk under play: exit $rc: $(cat "$work/shrink.err")"
echo "hello, not mcap" >"$work/text.mcap"
expect_fail "not mcap" "$work/text.mcap" "not an MCAP file" "$ferry" bag info
expect_fail "not mcap (play)" "$work/text.mcap" "not an MCAP file" "$ferry" play --quiet
: >"$work/empty.mcap"
expect_fail "empty" "$work/empty.mcap" "not an MCAP file" "$ferry" bag info
expect_fail "missing" "$work/missing.mcap" "No such file" "$ferry" bag info
head -c $((size / 2)) "$good" >"$work/half.mcap"
"$ferry" bag info "$work/half.mcap" | grep -q truncated || fail "a half file is not truncated"
"$ferry" play "$work/half.mcap" --rate 100 --quiet || fail "a half file does not play"
python3 - "$good" "$work" <<'EOF'
import struct, sys
data = bytearray(open(sys.argv[1], "rb").read())
work = sys.argv[2]
# The Header's length, made huge.
bad = bytearray(data); bad[9:17] = struct.pack("<Q", 1 << 62)
open(work + "/badlen.mcap", "wb").write(bad)
# A byte of the first chunk's records (inside the first image), flipped.
bad = bytearray(data); bad[3000] ^= 0x40
open(work + "/badcrc.mcap", "wb").write(bad)
# A byte of the summary, flipped: its CRC fails and the reader scans the file instead.
summary_start = struct.unpack_from("<Q", data, len(data) - 8 - 29 + 9)[0]
bad = bytearray(data); bad[summary_start + 20] ^= 0x01
open(work + "/badsummary.mcap", "wb").write(bad)
# A chunk length that points past the end, in a file without its footer.
cut = bytearray(data[: len(data) // 2]); cut[38 + 1 : 38 + 9] = struct.pack("<Q", (1 << 64) - 2)
open(work + "/badchunk.mcap", "wb").write(cut)
EOF
expect_fail "bad header length" "$work/badlen.mcap" "Header" "$ferry" bag info
expect_fail "bad chunk CRC" "$work/badcrc.mcap" "CRC mismatch" "$ferry" play --rate 0 --quiet
"$ferry" bag info "$work/badsummary.mcap" >"$work/out" 2>&1 || fail "bad summary: $(cat "$work/out")"
grep -q "scanned" "$work/out" || fail "bad summary: not scanned: $(cat "$work/out")"
[ "$(bag_json "$work/badsummary.mcap" 'd["messages"]')" = $((3 * N)) ] || fail "bad summary: count"
"$ferry" bag info "$work/badchunk.mcap" >"$work/out" 2>&1 || fail "bad chunk length: $(cat "$work/out")"
grep -q "truncated" "$work/out" || fail "bad chunk length: not truncated"
echo "record_test: hostile files refused or read as far as they go"
echo "record_test: ok"
