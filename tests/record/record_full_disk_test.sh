#!/usr/bin/env bash
# ferry record onto a full filesystem: a tmpfs of 24 MiB, mounted in a mount namespace of the
# test's own (so that nothing outlives it), recorded into with a 640x480 camera until it is full,
# uncompressed and with zstd. For each:
#   - the recorder stops by itself, exit status 1, with one message naming the file and the cause;
#   - the file reads whole: `ferry bag info` finds its summary and footer (not truncated), the
#     counts of its statistics and of the recorder's ferry.record.stats agree, and what was lost
#     is counted as dropped;
#   - `ferry play` plays every message it holds, and each played image is intact;
#   - the camera published every frame, none refused for want of a chunk (pool exhausted) nor
#     waited for (blocked).
# Exits 77 (skipped) where it cannot mount: not root, no mount namespaces.
#
#   record_full_disk_test.sh FERRY
set -uo pipefail
ferry=$1
if [ -z "${FERRY_FULL_DISK_NS:-}" ]; then
  if [ "$(id -u)" != 0 ] || ! unshare --mount --propagation private true 2>/dev/null; then
    echo "record_full_disk_test: skipped: needs root and a mount namespace to mount a tmpfs"
    exit 77
  fi
  FERRY_FULL_DISK_NS=1 exec unshare --mount --propagation private bash "$0" "$@"
fi

work=$(mktemp -d /tmp/ferry-full-disk-test.XXXXXX)
export FERRY_DIR=$work/d
cleanup() {
  local p
  for p in $(jobs -p); do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  umount "$work/full" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "record_full_disk_test: $*" >&2
  exit 1
}
mkdir -p "$work/full"
if ! mount -t tmpfs -o size=24m tmpfs "$work/full" 2>"$work/mount.err"; then
  echo "record_full_disk_test: skipped: cannot mount a tmpfs: $(cat "$work/mount.err")"
  exit 77
fi

bag_json() {
  "$ferry" bag info --json "$1" >"$work/info.json" || fail "bag info $1 failed"
  python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
t = {x["topic"]: x for x in d["topics"]}
print(eval(sys.argv[2]))' "$work/info.json" "$2"
}

# 921,600-byte frames, 60 of them a second: 24 MiB is full after about 27.
N=120
for comp in none zstd; do
  file=$work/full/run-$comp.mcap
  rm -f "$work/full"/*
  "$ferry" record /cam/image -o "$file" --compression $comp --chunk-size 2M --sched normal \
    --depth 64 >"$work/rec.out" 2>"$work/rec.err" &
  rec=$!
  "$ferry" pub /cam/image --image 640x480 --rate 60 --count $N --wait-subscribers 1 \
    >"$work/pub.out" 2>&1 || fail "$comp: ferry pub exited $?: $(cat "$work/pub.out")"
  # The recorder stops on its own once the filesystem is full; SIGINT only if it did not.
  for _ in $(seq 50); do kill -0 $rec 2>/dev/null || break; sleep 0.1; done
  if kill -0 $rec 2>/dev/null; then
    kill -INT $rec
    wait $rec
    fail "$comp: the recorder did not stop on the full filesystem: $(cat "$work/rec.err")"
  fi
  wait $rec
  status=$?
  [ $status = 1 ] || fail "$comp: ferry record exited $status, not 1: $(cat "$work/rec.err")"
  grep -q "^ferry record: $file: No space left on device after .* MB; recording stopped" \
    "$work/rec.err" || fail "$comp: no message naming the file and the cause: $(cat "$work/rec.err")"

  grep -q "published $N frames" "$work/pub.out" || fail "$comp: the camera: $(cat "$work/pub.out")"
  grep -q "pool exhausted 0," "$work/pub.out" && grep -q ", blocked 0," "$work/pub.out" ||
    fail "$comp: the camera was held up: $(cat "$work/pub.out")"

  [ "$(bag_json "$file" 'd["truncated"]')" = False ] ||
    fail "$comp: the file does not read whole: $(cat "$work/info.json")"
  m=$(bag_json "$file" 'd["messages"]')
  [ "$m" -gt 5 ] && [ "$m" -lt $N ] || fail "$comp: $m messages in the file"
  [ "$(bag_json "$file" "t['/cam/image']['count'], t['/cam/image']['dropped'] > 0")" = "($m, True)" ] ||
    fail "$comp: counts: $(cat "$work/info.json")"
  grep -q "^total /cam/image: recorded $m dropped" "$work/rec.out" ||
    fail "$comp: the recorder's own count is not the file's $m: $(cat "$work/rec.out")"

  "$ferry" echo /cam/image --verify --field intact --count "$m" --depth 256 --timeout 30 \
    >"$work/played" 2>"$work/played.err" &
  e=$!
  "$ferry" play "$file" --rate 4 --wait-subscribers 1 --quiet || fail "$comp: ferry play exited $?"
  wait $e || fail "$comp: played: $(cat "$work/played.err")"
  grep -q '"intact": false' "$work/played" && fail "$comp: a played image is corrupt"
  echo "record_full_disk_test: $comp: stopped at a full filesystem with $m of $N frames, file" \
    "complete, played back intact; the camera published all $N, never held up"
done
