#!/usr/bin/env bash
# Hostile DDS input: a plain Cyclone program (plain_bad.c) sends invalid sensor_msgs/Image and
# PointCloud2 samples (broken geometry, sizes and overflows, unknown or oversized strings,
# strings without their NUL, fields outside the point, ...), each between two good ones, to a
# bridge (direction in). The bridge must count, log and drop every invalid sample that reaches
# it, and publish every good one: ferry subscribers with --verify see exactly the good samples.
# Malformed CDR (a string without its NUL) is refused by Cyclone's deserialiser before the
# bridge sees it; it must not come through either. Run with an ASan/UBSan ferry, this also
# checks that no invalid sample makes the bridge read out of bounds.
source "$(dirname "$0")/lib.sh"
[ "$PLAIN" != none ] && [ -x "$PLAIN/bridge_plain_bad" ] || skip "plain DDS programs not built"

new_ns NS X
D=$WORK/d
status=0
bg "$NS" "$WORK/bridge.log" "$FERRY" bridge --dir "$D" --direction in --stats
BR=$LAST_PID
bg "$NS" "$WORK/echo_image.log" "$FERRY" echo /bad/image --dir "$D" --type sensor_msgs/Image --verify --depth 16
EI=$LAST_PID
bg "$NS" "$WORK/echo_cloud.log" "$FERRY" echo /bad/cloud --dir "$D" --type sensor_msgs/PointCloud2 --verify --depth 16
EC=$LAST_PID
bg "$NS" "$WORK/bad.log" "$PLAIN/bridge_plain_bad" rt/bad/image rt/bad/cloud
PB=$LAST_PID
wait "$PB" || { status=1; echo "FAIL: the hostile publisher exited with status $?: $(tail -n 2 "$WORK/bad.log")"; }
# Wait until the subscribers have every good sample the publisher says it sent (or 30 s: a
# loaded machine is slow, not lossy here), then stop them.
read -r gi gc < <(sed -n 's/^plain_bad: good_images \([0-9]*\) good_clouds \([0-9]*\) .*/\1 \2/p' "$WORK/bad.log")
until=$(($(date +%s) + 30))
while [ "$(grep -c ' ok$' "$WORK/echo_image.log")" -lt "${gi:-0}" ] ||
    [ "$(grep -c ' ok$' "$WORK/echo_cloud.log")" -lt "${gc:-0}" ]; do
    [ "$(date +%s)" -lt "$until" ] || { echo "note: not every good sample came within 30 s (checked below)"; break; }
    sleep 0.2
done
sleep 0.5 # and nothing more than those
kill -TERM "$EI" "$EC"
wait "$EI" "$EC"
kill -TERM "$BR"
wait "$BR" || { status=1; echo "FAIL: the bridge exited with status $? (expected 0 after SIGTERM)"; }
cat "$WORK/bad.log" "$WORK/bridge.log"
tail -n 1 "$WORK/echo_image.log" "$WORK/echo_cloud.log"

read -r gi gc bb bd < <(sed -n 's/^plain_bad: good_images \([0-9]*\) good_clouds \([0-9]*\) bad_bridge \([0-9]*\) bad_dds \([0-9]*\)$/\1 \2 \3 \4/p' "$WORK/bad.log")
[ -n "${bd:-}" ] || fail "no summary line (plain_bad: good_images ...) from the hostile publisher: $(tail -n 2 "$WORK/bad.log")"
ei=$(grep -c ' ok$' "$WORK/echo_image.log")
ec=$(grep -c ' ok$' "$WORK/echo_cloud.log")
all=$(grep -c '^seq=' "$WORK/echo_image.log" "$WORK/echo_cloud.log" | awk -F: '{ n += $2 } END { print n }')
inv=$(stat_of "$WORK/bridge.log" in_invalid)
pubd=$(stat_of "$WORK/bridge.log" in_published)
lines=$(grep -c 'dropped a sample that cannot be carried' "$WORK/bridge.log")
refused=$(grep -c 'deserialization .* failed' "$WORK/bridge.log")
echo "sent: good images $gi, good clouds $gc, bad for the bridge $bb, malformed for DDS $bd"
echo "got: verified images $ei, verified clouds $ec, samples in all $all; bridge in_invalid $inv, in_published $pubd, log lines $lines; refused by Cyclone $refused"
# A refused encoding is named in the log (it comes from the network: quoted, as sent).
for e in "unknown encoding 'rgb9'" "unknown encoding ''" "longer than 31 bytes"; do
    grep -qF "$e" "$WORK/bridge.log" || { status=1; echo "FAIL: the bridge log does not name the refused encoding: no line with \"$e\""; }
done
check "verified images (good ones sent)" "$ei" "$gi" "$(grep 'losses:' "$WORK/bridge.log")"
check "verified clouds (good ones sent)" "$ec" "$gc" "$(grep 'losses:' "$WORK/bridge.log")"
check "samples at the subscribers (a bad one must not reach them)" "$all" $((gi + gc))
check "bridge in_published" "$pubd" $((gi + gc))
check "bridge in_invalid (bad for the bridge)" "$inv" "$bb"
check "bridge log lines for invalid samples" "$lines" "$bb"
check "samples Cyclone refused (malformed CDR)" "$refused" "$bd"
grep -q CORRUPT "$WORK"/echo_*.log && { status=1; echo "FAIL: corrupt samples: $(grep -m1 CORRUPT "$WORK"/echo_*.log)"; }
grep -E 'AddressSanitizer|runtime error|LeakSanitizer' "$WORK/bridge.log" && { status=1; echo "FAIL: sanitizer report (above)"; }
echo "-- $(elapsed) s in all"
[ "$status" = 0 ] && echo "PASS" || echo "FAIL"
exit $status
