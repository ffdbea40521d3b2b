#!/usr/bin/env bash
# sensor_msgs/CameraInfo, CompressedImage and Imu through the bridge in both directions, checked
# field by field at the far end (sensor_values.h gives every field from the sample's sequence):
# ferry publishers -> bridge -> plain Cyclone DDS subscribers with their own IDL, and plain DDS
# publishers acting as ROS 2 drivers -> bridge -> ferry subscribers. The frame id is longer than
# 63 bytes, so the raised limit is checked end to end. The publishers run until the subscribers
# have what they want, and the subscribers' timeouts are generous: a loaded machine may take long
# to discover; what is checked is the fields, not the speed.
source "$(dirname "$0")/lib.sh"
[ "$PLAIN" != none ] && [ -x "$PLAIN/bridge_plain_sensor" ] && [ -x "$PLAIN/bridge_ferry_sensor" ] ||
    skip "plain DDS programs not built"

new_ns NS S
D=$WORK/d
FRAME=sensor_rig/front_left/camera_optical_frame/with/a/long/namespace/as/real/drivers/send
status=0
KINDS="camera_info compressed imu"

bg "$NS" "$WORK/bridge.log" "$FERRY" bridge --dir "$D" --stats
BR=$LAST_PID

WAITS=()
PUBS=()
for k in $KINDS; do
    # Out: a ferry publisher at 30 Hz; the DDS subscriber wants 40 samples intact.
    bg "$NS" "$WORK/out_sub_$k.log" "$PLAIN/bridge_plain_sensor" sub "$k" "rt/out/$k" "$FRAME" 40 60
    WAITS+=("$LAST_PID:out $k (plain DDS subscriber: 40 intact samples within 60 s):$WORK/out_sub_$k.log")
    bg "$NS" "$WORK/out_pub_$k.log" "$PLAIN/bridge_ferry_sensor" pub "$k" "$D" "/out/$k" "$FRAME" 1000000 30
    PUBS+=("$LAST_PID")
    # In: a plain DDS publisher at 30 Hz; the ferry subscriber wants 30 samples intact.
    bg "$NS" "$WORK/in_sub_$k.log" "$PLAIN/bridge_ferry_sensor" sub "$k" "$D" "/in/$k" "$FRAME" 30 60
    WAITS+=("$LAST_PID:in $k (ferry subscriber: 30 intact samples within 60 s):$WORK/in_sub_$k.log")
    bg "$NS" "$WORK/in_pub_$k.log" "$PLAIN/bridge_plain_sensor" pub "$k" "rt/in/$k" "$FRAME" 1000000 30
    PUBS+=("$LAST_PID")
done
# A camera_info subscriber that asks for transient-local durability, as image pipelines do,
# joining late: it matches the bridge's writer (which offers it for camera_info) and gets 20.
sleep 1
bg "$NS" "$WORK/out_sub_latched.log" env PLAIN_DURABILITY=transient_local \
    "$PLAIN/bridge_plain_sensor" sub camera_info rt/out/camera_info "$FRAME" 20 60
WAITS+=("$LAST_PID:out camera_info (transient-local plain DDS subscriber: 20 intact samples within 60 s):$WORK/out_sub_latched.log")

for w in "${WAITS[@]}"; do
    IFS=: read -r pid what log <<<"$w"
    wait "$pid" || { status=1; echo "FAIL: $what: exit status $?: $(tail -n 1 "$log")"; }
done
echo "-- subscribers done after $(elapsed) s"
kill -TERM "${PUBS[@]}"
wait "${PUBS[@]}"
tail -n 1 "$WORK/out_sub_latched.log"
for k in $KINDS; do
    for f in out_sub in_sub; do
        tail -n 1 "$WORK/${f}_$k.log"
        grep -h "bad sample" "$WORK/${f}_$k.log" | sort | uniq -c | head -5
    done
done
kill -TERM "$BR"
wait "$BR" || { status=1; echo "FAIL: the bridge exited with status $? (expected 0 after SIGTERM)"; }
grep -v '^seq=' "$WORK/bridge.log"
for k in out_invalid in_invalid out_failed in_dropped; do
    check "bridge $k" "$(stat_of "$WORK/bridge.log" $k)" 0 "$(grep 'losses:' "$WORK/bridge.log")"
done
echo "-- $(elapsed) s in all"
[ "$status" = 0 ] && echo "PASS" || echo "FAIL"
exit $status
