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
bg "$NS" "$WORK/bridge.log" "$FERRY" bridge --dir "$D" --direction in --stats --seconds 40
BR=$LAST_PID
bg "$NS" "$WORK/echo_image.log" "$FERRY" echo /bad/image --dir "$D" --type sensor_msgs/Image --verify --depth 16 --timeout 30
EI=$LAST_PID
bg "$NS" "$WORK/echo_cloud.log" "$FERRY" echo /bad/cloud --dir "$D" --type sensor_msgs/PointCloud2 --verify --depth 16 --timeout 30
EC=$LAST_PID
bg "$NS" "$WORK/bad.log" "$PLAIN/bridge_plain_bad" rt/bad/image rt/bad/cloud
PB=$LAST_PID
wait "$PB" || { status=1; echo "the hostile publisher failed"; }
sleep 1
kill -TERM "$EI" "$EC"
wait "$EI" "$EC"
kill -TERM "$BR"
wait "$BR" || { status=1; echo "the bridge did not exit cleanly"; }
cat "$WORK/bad.log" "$WORK/bridge.log"
tail -n 1 "$WORK/echo_image.log" "$WORK/echo_cloud.log"

read -r gi gc bb bd < <(sed -n 's/^plain_bad: good_images \([0-9]*\) good_clouds \([0-9]*\) bad_bridge \([0-9]*\) bad_dds \([0-9]*\)$/\1 \2 \3 \4/p' "$WORK/bad.log")
[ -n "${bd:-}" ] || fail "no summary from the hostile publisher"
ei=$(grep -c ' ok$' "$WORK/echo_image.log")
ec=$(grep -c ' ok$' "$WORK/echo_cloud.log")
all=$(grep -c '^seq=' "$WORK/echo_image.log" "$WORK/echo_cloud.log" | awk -F: '{ n += $2 } END { print n }')
inv=$(stat_of "$WORK/bridge.log" in_invalid)
pubd=$(stat_of "$WORK/bridge.log" in_published)
lines=$(grep -c 'dropped a sample that cannot be carried' "$WORK/bridge.log")
refused=$(grep -c 'deserialization .* failed' "$WORK/bridge.log")
echo "sent: good images $gi, good clouds $gc, bad for the bridge $bb, malformed for DDS $bd"
echo "got: verified images $ei, verified clouds $ec, samples in all $all; bridge in_invalid $inv, in_published $pubd, log lines $lines; refused by Cyclone $refused"
[ "$ei" = "$gi" ] && [ "$ec" = "$gc" ] || { status=1; echo "good samples lost"; }
[ "$all" = $((gi + gc)) ] || { status=1; echo "a bad sample reached a subscriber"; }
[ "$pubd" = $((gi + gc)) ] || { status=1; echo "the bridge published $pubd samples"; }
[ "$inv" = "$bb" ] || { status=1; echo "in_invalid $inv, expected $bb"; }
[ "$lines" = "$bb" ] || { status=1; echo "$lines log lines for $bb invalid samples"; }
[ "$refused" = "$bd" ] || { status=1; echo "Cyclone refused $refused samples, expected $bd"; }
grep -q CORRUPT "$WORK"/echo_*.log && { status=1; echo "corrupt samples"; }
grep -E 'AddressSanitizer|runtime error|LeakSanitizer' "$WORK/bridge.log" && { status=1; echo "sanitizer report"; }
[ "$status" = 0 ] && echo "PASS" || echo "FAIL"
exit $status
