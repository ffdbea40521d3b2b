#!/usr/bin/env bash
# Large frames on the bridge's lossless path: three 1280x720 rgb8 cameras (2,764,800-byte images,
# 150 frames each at up to 30 fps) that admit blocking subscribers, ferry -> bridge A -> reliable
# DDS over loopback -> bridge B -> ferry, with the bridge's large-sample settings; beside them a
# plain DDS subscriber of camera 0 that keeps every sample (reliable, KEEP_ALL).
#
# What the bridge promises there, and so what is checked, whatever the machine's load:
#   - bridge A's subscribers block the cameras instead of dropping: each camera's dropped count
#     is 0 (a busy machine only makes the cameras wait, and skip a frame slot when one waited
#     longer than its own block timeout: such a frame is never published, and not numbered);
#   - nothing is lost on DDS: bridge A's out_queue_dropped, out_failed and out_invalid are 0,
#     bridge B's in_lost, in_rejected, in_invalid and in_dropped are 0, and the plain DDS
#     subscriber gets every frame of camera 0 from its first one to the camera's last;
#   - host B's subscribers (`ferry echo`, drop-oldest, depth 16: their own choice) get every frame
#     from their first to the camera's last but those their own queue dropped, and bridge B counts
#     exactly those drops (in_subscriber_dropped);
#   - every frame verified, none twice, and at least MIN_RUN frames of each camera carried (a
#     frame published before the routes and DDS matched is, as for any volatile subscriber, not
#     delivered; discovery on a loaded machine may take a while, and a camera held back that long
#     publishes few frames, so MIN_RUN is small: it only rules out a route that never worked).
# No rate or latency is checked: that is `ferry bench bridge`. Raises net.core.rmem_max /
# wmem_max so Cyclone gets the socket buffers it asks for (restored at exit).
source "$(dirname "$0")/lib.sh"

FRAMES=150
MIN_RUN=20
DRAIN_S=30
status=0
raise_socket_limits

new_ns NS L
A=$WORK/a
B=$WORK/b
bg "$NS" "$WORK/bridge_a.log" "$FERRY" bridge --dir "$A" --direction out --stats
BA=$LAST_PID
bg "$NS" "$WORK/bridge_b.log" "$FERRY" bridge --dir "$B" --direction in --stats
BB=$LAST_PID
ECHOS=()
for i in 0 1 2; do
    bg "$NS" "$WORK/echo$i.log" "$FERRY" echo /cam$i --dir "$B" --type sensor_msgs/Image --verify --depth 16
    ECHOS+=("$LAST_PID")
done
PLAIN_PID=
if [ "$PLAIN" != none ] && [ -x "$PLAIN/bridge_plain_sub" ]; then
    bg "$NS" "$WORK/plain.log" "$PLAIN/bridge_plain_sub" --keep-all 30 rt/cam0 1280 720 rgb8 cam0 -1 600
    PLAIN_PID=$LAST_PID
fi
sleep 0.5
PUBS=()
for i in 0 1 2; do
    bg "$NS" "$WORK/pub$i.log" "$FERRY" pub /cam$i --dir "$A" --image 1280x720 --rate 30 --count $FRAMES --admit-blocking
    PUBS+=("$LAST_PID")
done
wait "${PUBS[@]}"
echo "-- cameras done after $(elapsed) s"
P=()
for i in 0 1 2; do
    P[$i]=$(pub_field "$WORK/pub$i.log" published)
    # The bridge is the camera's only subscriber: what the camera dropped, the bridge lost.
    check "/cam$i: frames the camera dropped from bridge A's queue" "$(pub_field "$WORK/pub$i.log" dropped)" 0 \
        "a reliable route's subscriber blocks a camera that admits it"
    echo "-- /cam$i: published ${P[$i]} of $FRAMES frame slots, $(pub_field "$WORK/pub$i.log" blocked) skipped because the bridge's queue stayed full"
done
# Everything published must come out at the far end; a busy machine only takes longer.
for i in 0 1 2; do
    wait_frame "$WORK/echo$i.log" "${P[$i]}" $DRAIN_S ||
        echo "note: /cam$i: frame ${P[$i]} not at host B's subscriber after $DRAIN_S s (checked below); its last: $(tail -n 1 "$WORK/echo$i.log")"
done
[ -z "$PLAIN_PID" ] || wait_frame "$WORK/plain.log" "${P[0]}" $DRAIN_S seq ||
    echo "note: rt/cam0: frame ${P[0]} not at the DDS subscriber after $DRAIN_S s (checked below); its last: $(tail -n 1 "$WORK/plain.log")"
echo "-- far ends drained after $(elapsed) s"
kill -TERM "${ECHOS[@]}" $PLAIN_PID
wait "${ECHOS[@]}" $PLAIN_PID
kill -TERM "$BA" "$BB"
wait "$BA" || { echo "FAIL: bridge A exited with status $?"; status=1; }
wait "$BB" || { echo "FAIL: bridge B exited with status $?"; status=1; }
cat "$WORK/bridge_a.log" "$WORK/bridge_b.log" "$WORK"/pub*.log
grep -h 'ferry echo' "$WORK"/echo*.log

for k in out_queue_dropped out_failed out_invalid; do
    check "bridge A $k" "$(stat_of "$WORK/bridge_a.log" $k)" 0 "where: $(grep 'losses:' "$WORK/bridge_a.log")"
done
for k in in_lost in_rejected in_invalid in_dropped; do
    check "bridge B $k" "$(stat_of "$WORK/bridge_b.log" $k)" 0 "where: $(grep 'losses:' "$WORK/bridge_b.log")"
done
grep -q "refused the bridge's blocking subscriber" "$WORK/bridge_a.log" &&
    { echo "FAIL: a camera refused bridge A's blocking subscriber: $(grep -m1 'refused us' "$WORK/bridge_a.log")"; status=1; }
dropped_b=0
for i in 0 1 2; do
    d=$(echo_field "$WORK/echo$i.log" dropped)
    dropped_b=$((dropped_b + ${d:-0}))
    read -r first n rep miss < <(frames_from_first "$WORK/echo$i.log" "${P[$i]}")
    echo "-- /cam$i at host B: frames $first..${P[$i]}: $n verified, $miss missing, $rep repeated; its queue dropped ${d:-?}"
    check "/cam$i: frames that came twice to host B" "$rep" 0
    check_le "/cam$i: frames host B's subscriber missed after its first ($first)" "$miss" "${d:-0}" \
        "only those its own drop-oldest queue dropped may be missing"
    check_ge "/cam$i: frames verified at host B" "$n" $MIN_RUN "fewer means the route came very late or broke"
    check "/cam$i: corrupt frames at host B" "$(echo_field "$WORK/echo$i.log" corrupt)" 0
done
check "bridge B in_subscriber_dropped (host B's subscribers' own queue drops, as they count them)" \
    "$(stat_of "$WORK/bridge_b.log" in_subscriber_dropped)" "$dropped_b"
if [ -n "$PLAIN_PID" ]; then
    tail -n 1 "$WORK/plain.log"
    read -r first n rep miss < <(frames_from_first "$WORK/plain.log" "${P[0]}" seq)
    echo "-- rt/cam0 at the DDS subscriber: frames $first..${P[0]}: $n verified, $miss missing, $rep repeated"
    check "rt/cam0: frames the DDS subscriber missed after its first ($first)" "$miss" 0 \
        "a reliable KEEP_ALL reader of a reliable KEEP_ALL writer"
    check "rt/cam0: frames that came twice to the DDS subscriber" "$rep" 0
    check_ge "rt/cam0: frames verified at the DDS subscriber" "$n" $MIN_RUN
    check "rt/cam0: bad samples at the DDS subscriber" "$(sed -n 's/.* bad \([0-9]*\) .*/\1/p' "$WORK/plain.log")" 0 \
        "$(grep -m1 'bad sample' "$WORK/plain.log")"
fi
echo "-- $(elapsed) s in all"
[ "$status" = 0 ] && echo "PASS" || echo "FAIL"
exit $status
