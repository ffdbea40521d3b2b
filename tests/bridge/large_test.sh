#!/usr/bin/env bash
# Large frames: three 1280x720 rgb8 cameras (2,764,800-byte images) at 30 fps for 5 s, ferry ->
# bridge A -> DDS over loopback -> bridge B -> ferry, with the bridge's large-sample settings.
# Raises net.core.rmem_max / wmem_max so Cyclone gets the socket buffers it asks for (restored at
# exit). Passes when, after the first SETTLE frames, nothing is lost anywhere: the bridges drop
# nothing, a plain DDS subscriber gets every frame of camera 0, host B's subscribers get every
# frame bridge B published and, by the frame numbers the cameras filled in, every frame after
# SETTLE of every camera. (A frame bridge A writes before DDS matched bridge B's reader is not
# delivered to it, as for any volatile writer: the first frames may differ between the counts.) The bridges run at the default depth (8: 267 ms of slack at
# 30 fps, for a machine whose cores are busy with other work, as CI runners are).
source "$(dirname "$0")/lib.sh"

FRAMES=150
SETTLE=30
status=0
raise_socket_limits

new_ns NS L
A=$WORK/a
B=$WORK/b
bg "$NS" "$WORK/bridge_a.log" "$FERRY" bridge --dir "$A" --direction out --stats --seconds 40
BA=$LAST_PID
bg "$NS" "$WORK/bridge_b.log" "$FERRY" bridge --dir "$B" --direction in --stats --seconds 40
BB=$LAST_PID
ECHOS=()
for i in 0 1 2; do
    bg "$NS" "$WORK/echo$i.log" "$FERRY" echo /cam$i --dir "$B" --type sensor_msgs/Image --verify --depth 16 --timeout 9
    ECHOS+=("$LAST_PID")
done
if [ "$PLAIN" != none ] && [ -x "$PLAIN/bridge_plain_sub" ]; then
    # History 30 (1 s of frames), not ROS 2's 10: this reader checks every word of 2.7 MB frames
    # beside three cameras and two bridges; on a busy 2-core machine it can fall more than 10
    # frames behind and lose one in its own cache, which is not the bridge's loss.
    bg "$NS" "$WORK/plain.log" "$PLAIN/bridge_plain_sub" --depth 30 rt/cam0 1280 720 rgb8 cam0 -1 9
    ECHOS+=("$LAST_PID")
fi
sleep 0.5
PUBS=()
for i in 0 1 2; do
    bg "$NS" "$WORK/pub$i.log" "$FERRY" pub /cam$i --dir "$A" --image 1280x720 --rate 30 --count $FRAMES
    PUBS+=("$LAST_PID")
done
wait "${PUBS[@]}"
for i in 0 1 2; do
    # The bridge is the publisher's only subscriber: what the publisher dropped, it lost.
    d=$(sed -n 's/.*, dropped \([0-9]*\),.*/\1/p' "$WORK/pub$i.log")
    [ "$d" = 0 ] && echo "ok: bridge A's subscriber of /cam$i dropped nothing" ||
        loss "bridge A's subscriber of /cam$i dropped $d"
done
wait "${ECHOS[@]}"
kill -TERM "$BA" "$BB"
wait "$BA" "$BB"
cat "$WORK/bridge_a.log" "$WORK/bridge_b.log" "$WORK"/pub*.log
grep -h 'ferry echo' "$WORK"/echo*.log
for k in out_failed out_invalid; do
    [ "$(stat_of "$WORK/bridge_a.log" $k)" = 0 ] || { echo "bridge A $k"; status=1; }
done
[ "$(stat_of "$WORK/bridge_b.log" in_invalid)" = 0 ] || { echo "bridge B in_invalid"; status=1; }
[ "$(stat_of "$WORK/bridge_b.log" in_dropped)" = 0 ] || loss "bridge B in_dropped"
w=$(stat_of "$WORK/bridge_a.log" out_written)
p=$(stat_of "$WORK/bridge_b.log" in_published)
e=$(cat "$WORK"/echo*.log | grep -c ' ok$')
echo "bridge A wrote $w, bridge B published $p, host B subscribers verified $e"
[ "$e" = "$p" ] || loss "between bridge B and its subscribers"
[ "$p" -le "$w" ] || { echo "bridge B published more than bridge A wrote"; status=1; }
for i in 0 1 2; do
    read -r n d < <(seqs_over "$WORK/echo$i.log" $SETTLE frame)
    echo "/cam$i: frames $((SETTLE + 1))..$FRAMES at host B: $n, repeated $d"
    [ "$d" = 0 ] || { echo "repeated frames on /cam$i"; status=1; }
    [ "$n" = $((FRAMES - SETTLE)) ] || loss "on /cam$i after frame $SETTLE: $n of $((FRAMES - SETTLE))"
done
if [ -f "$WORK/plain.log" ]; then
    tail -n 1 "$WORK/plain.log"
    read -r n d < <(seqs_over "$WORK/plain.log" $SETTLE)
    [ "$d" = 0 ] || { echo "repeated frames at the DDS subscriber: $d"; status=1; }
    [ "$n" = $((FRAMES - SETTLE)) ] || loss "at the DDS subscriber: $n frames"
fi
grep -q CORRUPT "$WORK"/echo*.log && { echo "corrupt frames"; status=1; }
[ "$e" -gt 0 ] || { echo "no frame arrived"; status=1; }
[ "$status" = 0 ] && echo "PASS" || echo "FAIL"
exit $status
