#!/usr/bin/env bash
# ROS 2 wire compatibility, checked by plain Cyclone DDS programs with their own IDL:
# ferry images and point clouds -> bridge -> plain subscribers that check every field; and plain
# publishers acting as a ROS 2 camera and a ROS 2 LiDAR (sensor-data QoS: best effort) -> bridge
# -> ferry subscribers that verify every frame. The publishers run until the subscribers have
# what they want (a loaded machine may take long to discover), and the subscribers' timeouts
# are generous: what is checked is the fields, not the speed.
source "$(dirname "$0")/lib.sh"
[ "$PLAIN" != none ] && [ -x "$PLAIN/bridge_plain_sub" ] || skip "plain DDS programs not built"

new_ns NS P
D=$WORK/d
status=0

bg "$NS" "$WORK/bridge.log" "$FERRY" bridge --dir "$D" --stats
BR=$LAST_PID

# Out: 640x480 rgb8, frame_id camera_optical; the plain subscriber checks 40 of them.
bg "$NS" "$WORK/plain_sub.log" "$PLAIN/bridge_plain_sub" rt/front/image_raw 640 480 rgb8 camera_optical 40 60
PS=$LAST_PID
bg "$NS" "$WORK/pub.log" "$FERRY" pub /front/image_raw --dir "$D" --image 640x480 --frame-id camera_optical --rate 30
PF=$LAST_PID
# Out: clouds of 16 rows of 1024 points (x y z intensity), checked field by field.
bg "$NS" "$WORK/plain_sub_cloud.log" "$PLAIN/bridge_plain_sub" --cloud rt/lidar/points 1024 16 xyzi lidar_top 40 60
PSC=$LAST_PID
bg "$NS" "$WORK/pub_cloud.log" "$FERRY" pub /lidar/points --dir "$D" --cloud 1024x16 --frame-id lidar_top --rate 30
PFC=$LAST_PID

# In: the plain publisher is a ROS 2 camera on rt/ros_cam; a ferry subscriber verifies frames.
bg "$NS" "$WORK/echo.log" "$FERRY" echo /ros_cam --dir "$D" --type sensor_msgs/Image --verify --count 30 --timeout 60
EF=$LAST_PID
bg "$NS" "$WORK/plain_pub.log" "$PLAIN/bridge_plain_pub" rt/ros_cam 320 240 ros_camera 1000000 30
PP=$LAST_PID
# In: the plain publisher is a ROS 2 LiDAR on rt/ros_lidar; a ferry subscriber verifies clouds.
bg "$NS" "$WORK/echo_cloud.log" "$FERRY" echo /ros_lidar --dir "$D" --type sensor_msgs/PointCloud2 --verify --count 30 --timeout 60
EFC=$LAST_PID
bg "$NS" "$WORK/plain_pub_cloud.log" "$PLAIN/bridge_plain_pub" --cloud rt/ros_lidar 512 32 ros_lidar 1000000 30
PPC=$LAST_PID

wait "$PS" || { status=1; echo "FAIL: the plain subscriber wanted 40 good images within 60 s, exit status $?: $(tail -n 1 "$WORK/plain_sub.log")"; }
wait "$PSC" || { status=1; echo "FAIL: the plain cloud subscriber wanted 40 good clouds within 60 s, exit status $?: $(tail -n 1 "$WORK/plain_sub_cloud.log")"; }
wait "$EF" || { status=1; echo "FAIL: ferry echo wanted 30 verified frames of the plain publisher within 60 s, exit status $?: $(tail -n 1 "$WORK/echo.log")"; }
wait "$EFC" || { status=1; echo "FAIL: ferry echo wanted 30 verified clouds of the plain LiDAR within 60 s, exit status $?: $(tail -n 1 "$WORK/echo_cloud.log")"; }
echo "-- subscribers done after $(elapsed) s"
kill -TERM "$PF" "$PP" "$PFC" "$PPC"
wait "$PF" "$PP" "$PFC" "$PPC"
tail -n 1 "$WORK/plain_sub.log" "$WORK/plain_sub_cloud.log"
grep -h "bad sample" "$WORK/plain_sub.log" "$WORK/plain_sub_cloud.log" | sort | uniq -c
tail -n 1 "$WORK/echo.log" "$WORK/echo_cloud.log"
cat "$WORK/plain_pub.log" "$WORK/plain_pub_cloud.log"
kill -TERM "$BR"
wait "$BR" || { status=1; echo "FAIL: the bridge exited with status $? (expected 0 after SIGTERM)"; }
cat "$WORK/bridge.log"
for k in out_invalid in_invalid out_failed in_dropped; do
    check "bridge $k" "$(stat_of "$WORK/bridge.log" $k)" 0 "$(grep 'losses:' "$WORK/bridge.log")"
done
echo "-- $(elapsed) s in all"
[ "$status" = 0 ] && echo "PASS" || echo "FAIL"
exit $status
