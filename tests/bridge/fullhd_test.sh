#!/usr/bin/env bash
# Full-HD frames between two "hosts": 1920x1080 rgb8 images (6,220,800 bytes) at 30 fps for 4 s,
# host A's ferry publisher -> bridge A -> DDS over a veth pair (MTU 1500: the bridge's 64 kB
# datagrams are IP-fragmented) -> bridge B -> host B's ferry subscriber, checksums verified.
# Passes when, after the first SETTLE frames (discovery, the route's first scan), nothing is
# lost: bridge A's subscriber drops nothing, host B's subscriber verifies every frame bridge B
# published and, by the frame numbers the camera filled in, every frame after SETTLE. The bridges
# run with the default depth.
source "$(dirname "$0")/lib.sh"

FRAMES=120
SETTLE=30
status=0
raise_socket_limits

new_ns NSA HA
new_ns NSB HB
veth "$NSA" "$NSB" "10.$((RANDOM % 200 + 20)).$((RANDOM % 250 + 1))"
A=$WORK/a
B=$WORK/b
bg "$NSA" "$WORK/bridge_a.log" "$FERRY" bridge --dir "$A" --direction out --config "$(veth_config "$VETH_A")" --stats --seconds 40
BA=$LAST_PID
bg "$NSB" "$WORK/bridge_b.log" "$FERRY" bridge --dir "$B" --direction in --config "$(veth_config "$VETH_B")" --stats --seconds 40
BB=$LAST_PID
bg "$NSB" "$WORK/echo.log" "$FERRY" echo /cam/hd --dir "$B" --type sensor_msgs/Image --verify --depth 16 --timeout 30
EB=$LAST_PID
sleep 0.5
bg "$NSA" "$WORK/pub.log" "$FERRY" pub /cam/hd --dir "$A" --image 1920x1080 --rate 30 --count $FRAMES
PA=$LAST_PID
wait "$PA"
sleep 1.5
kill -TERM "$EB"
wait "$EB"
kill -TERM "$BA" "$BB"
wait "$BA" "$BB"
cat "$WORK/bridge_a.log" "$WORK/bridge_b.log" "$WORK/pub.log"
grep -h 'ferry echo' "$WORK/echo.log"
d=$(sed -n 's/.*, dropped \([0-9]*\),.*/\1/p' "$WORK/pub.log")
[ "$d" = 0 ] || loss "bridge A's subscriber dropped $d"
for k in out_failed out_invalid; do
    [ "$(stat_of "$WORK/bridge_a.log" $k)" = 0 ] || { echo "bridge A $k"; status=1; }
done
[ "$(stat_of "$WORK/bridge_b.log" in_invalid)" = 0 ] || { echo "bridge B in_invalid"; status=1; }
[ "$(stat_of "$WORK/bridge_b.log" in_dropped)" = 0 ] || loss "bridge B in_dropped"
w=$(stat_of "$WORK/bridge_a.log" out_written)
p=$(stat_of "$WORK/bridge_b.log" in_published)
e=$(sed -n 's/.*received \([0-9]*\),.*/\1/p' "$WORK/echo.log")
c=$(sed -n 's/.*corrupt \([0-9]*\),.*/\1/p' "$WORK/echo.log")
echo "bridge A wrote $w, bridge B published $p, host B's subscriber verified $e (corrupt $c)"
[ "$e" = "$p" ] || loss "between bridge B and its subscriber"
[ "$p" -le "$w" ] || { echo "bridge B published more than bridge A wrote"; status=1; }
read -r n d < <(seqs_over "$WORK/echo.log" $SETTLE frame)
echo "frames $((SETTLE + 1))..$FRAMES at host B: $n, repeated $d"
[ "$d" = 0 ] || { echo "repeated frames"; status=1; }
[ "$n" = $((FRAMES - SETTLE)) ] || loss "after frame $SETTLE: $n of $((FRAMES - SETTLE))"
[ "$c" = 0 ] || { echo "corrupt frames"; status=1; }
[ "$w" -ge $((FRAMES - SETTLE)) ] || loss "only $w frames went out"
[ "${e:-0}" -gt 0 ] || { echo "no frame arrived"; status=1; }
[ "$status" = 0 ] && echo "PASS" || echo "FAIL"
exit $status
