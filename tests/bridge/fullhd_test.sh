#!/usr/bin/env bash
# Full-HD frames between two "hosts" on the bridge's lossless path: 1920x1080 rgb8 images
# (6,220,800 bytes, 120 frames at up to 30 fps) from a camera that admits blocking subscribers,
# host A's ferry publisher -> bridge A -> reliable DDS over a veth pair (MTU 1500: the bridge's
# 64 kB datagrams are IP-fragmented) -> bridge B -> host B's ferry subscriber, checksums
# verified. The bridges run with the default depth.
#
# Checked, whatever the machine's load (as in large_test.sh): the camera dropped nothing from
# bridge A's queue (blocked instead), bridge A lost nothing (out_queue_dropped, out_failed,
# out_invalid 0), bridge B lost nothing (in_lost, in_rejected, in_invalid, in_dropped 0), host
# B's subscriber got every frame from its first to the camera's last but those its own
# drop-oldest queue dropped, which bridge B counts (in_subscriber_dropped), none twice, none
# corrupt, and at least MIN_RUN frames. No rate: that is `ferry bench bridge`.
source "$(dirname "$0")/lib.sh"

FRAMES=120
MIN_RUN=20
DRAIN_S=30
status=0
raise_socket_limits

new_ns NSA HA
new_ns NSB HB
veth "$NSA" "$NSB" "10.$((RANDOM % 200 + 20)).$((RANDOM % 250 + 1))"
A=$WORK/a
B=$WORK/b
bg "$NSA" "$WORK/bridge_a.log" "$FERRY" bridge --dir "$A" --direction out --config "$(veth_config "$VETH_A")" --stats
BA=$LAST_PID
bg "$NSB" "$WORK/bridge_b.log" "$FERRY" bridge --dir "$B" --direction in --config "$(veth_config "$VETH_B")" --stats
BB=$LAST_PID
bg "$NSB" "$WORK/echo.log" "$FERRY" echo /cam/hd --dir "$B" --type sensor_msgs/Image --verify --depth 16
EB=$LAST_PID
sleep 0.5
bg "$NSA" "$WORK/pub.log" "$FERRY" pub /cam/hd --dir "$A" --image 1920x1080 --rate 30 --count $FRAMES --admit-blocking
PA=$LAST_PID
wait "$PA"
echo "-- camera done after $(elapsed) s"
P=$(pub_field "$WORK/pub.log" published)
check "frames the camera dropped from bridge A's queue" "$(pub_field "$WORK/pub.log" dropped)" 0 \
    "a reliable route's subscriber blocks a camera that admits it"
echo "-- published $P of $FRAMES frame slots, $(pub_field "$WORK/pub.log" blocked) skipped because the bridge's queue stayed full"
wait_frame "$WORK/echo.log" "$P" $DRAIN_S ||
    echo "note: frame $P not at host B's subscriber after $DRAIN_S s (checked below); its last: $(tail -n 1 "$WORK/echo.log")"
echo "-- far end drained after $(elapsed) s"
kill -TERM "$EB"
wait "$EB"
kill -TERM "$BA" "$BB"
wait "$BA" || { echo "FAIL: bridge A exited with status $?"; status=1; }
wait "$BB" || { echo "FAIL: bridge B exited with status $?"; status=1; }
cat "$WORK/bridge_a.log" "$WORK/bridge_b.log" "$WORK/pub.log"
grep -h 'ferry echo' "$WORK/echo.log"

for k in out_queue_dropped out_failed out_invalid; do
    check "bridge A $k" "$(stat_of "$WORK/bridge_a.log" $k)" 0 "where: $(grep 'losses:' "$WORK/bridge_a.log")"
done
for k in in_lost in_rejected in_invalid in_dropped; do
    check "bridge B $k" "$(stat_of "$WORK/bridge_b.log" $k)" 0 "where: $(grep 'losses:' "$WORK/bridge_b.log")"
done
grep -q "refused the bridge's blocking subscriber" "$WORK/bridge_a.log" &&
    { echo "FAIL: the camera refused bridge A's blocking subscriber: $(grep -m1 'refused us' "$WORK/bridge_a.log")"; status=1; }
d=$(echo_field "$WORK/echo.log" dropped)
read -r first n rep miss < <(frames_from_first "$WORK/echo.log" "$P")
echo "-- at host B: frames $first..$P: $n verified, $miss missing, $rep repeated; its queue dropped ${d:-?}"
check "frames that came twice to host B" "$rep" 0
check_le "frames host B's subscriber missed after its first ($first)" "$miss" "${d:-0}" \
    "only those its own drop-oldest queue dropped may be missing"
check_ge "frames verified at host B" "$n" $MIN_RUN "fewer means the route came very late or broke"
check "corrupt frames at host B" "$(echo_field "$WORK/echo.log" corrupt)" 0
check "bridge B in_subscriber_dropped (host B's subscriber's own queue drops, as it counts them)" \
    "$(stat_of "$WORK/bridge_b.log" in_subscriber_dropped)" "${d:-0}"
echo "-- $(elapsed) s in all"
[ "$status" = 0 ] && echo "PASS" || echo "FAIL"
exit $status
