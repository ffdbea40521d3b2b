#!/usr/bin/env bash
# ferry's own tools on the topics of ROS 2 nodes that use rmw_ferry_cpp (types known only by the
# definitions the nodes leave in the domain's graph files), in a private ferry directory:
#   1. an rclcpp talker (std_msgs/msg/String, CDR) -> `ferry echo --json` prints the strings,
#      and `--field data` picks them;
#   2. an rclcpp camera (sensor_msgs/msg/Image 64x48 rgb8) -> `ferry record` -> the MCAP file
#      read by tools_check.py (Python's standard library, no part of ferry): the ros2msg schema
#      from the node, cdr messages that decode to the frames the camera sent;
#   3. an rclpy publisher of geometry_msgs/msg/Point, a plain type (its C struct travels):
#      `ferry echo --json` decodes it by its C layout, `ferry record` stores it converted to CDR;
#   4. the same camera -> `ferry view`: the topic is advertised as sensor_msgs/msg/Image (cdr)
#      with its /compressed JPEG channel, and a subscription gets frames that decode.
# usage: tools_test.sh ROS_PREFIX BUILD_ROS_PREFIX RMW_NODE FERRY
# Exit status: 0 passed, 1 failed, 77 skipped (no ROS 2 at ROS_PREFIX, no python3).
set -u
ROS=${1:-/opt/ros/humble}
OURS=${2:-}
NODE=${3:-}
FERRY=${4:-}
NAME=tools_test
here=$(cd "$(dirname "$0")" && pwd)
command -v python3 >/dev/null 2>&1 || { echo "$NAME: skipped, no python3"; exit 77; }
# shellcheck source=tests/ros2/lib.sh
. "$here/lib.sh"
ros_lib_init 5

# ros NAME SECONDS ARGS...: an rmw_node in the background; pid in PID.
ros() {
    local name=$1 secs=$2
    shift 2
    bg "$name" "$secs" "$NODE" "$@"
}

# 1. echo. The talker waits for a subscription (echo's), then sends hello 1..40 at 20 Hz; echo
#    takes 30 of them (it may join a moment after the first).
ros talker 90 talker /chatter 40 20
tk=$PID
timeout -k 5 60 "$FERRY" echo /chatter --json --count 30 --timeout 50 >"$OUT/echo" 2>"$OUT/echo.err" ||
    { fail "ferry echo --json on a ROS topic"; show echo.err; }
python3 "$here/tools_check.py" echo "$OUT/echo" 30 || fail "ferry echo --json: the strings"
grep -q '"type": "std_msgs/msg/String"' "$OUT/echo" || fail "echo: no type in the JSON"
wait "$tk" || { fail "talker"; show talker; }
ros talker2 90 talker /chatter2 40 20
tk=$PID
timeout -k 5 60 "$FERRY" echo /chatter2 --field data --count 3 --timeout 50 >"$OUT/field" \
    2>"$OUT/field.err" || { fail "ferry echo --field data"; show field.err; }
grep -c '^{"data": "hello [0-9]*"}$' "$OUT/field" | grep -qx 3 ||
    { fail "echo --field data: not 3 lines {\"data\": \"hello N\"}"; cat "$OUT/field"; }
kill -INT "$tk" 2>/dev/null
wait "$tk" 2>/dev/null

# 2. record. The camera waits for the recorder's subscription, sends 20 frames at 10 Hz; the
#    recorder runs until the camera is done (SIGINT then finishes the file).
timeout -k 5 90 "$FERRY" record /camera/image_raw -o "$T/cam.mcap" --sched normal \
    >"$OUT/record" 2>&1 &
rec=$!
BG+=("$rec")
ros camera 90 image-pub /camera/image_raw 64 48 20 10
cam=$PID
wait "$cam" || { fail "image-pub for the recorder"; show camera; }
kill -INT "$rec" 2>/dev/null
wait "$rec" || { fail "ferry record"; show record; }
grep -q "recording /camera/image_raw (sensor_msgs/msg/Image, ROS 2 CDR)" "$OUT/record" ||
    { fail "record did not say it records the topic as ROS 2 CDR"; show record; }
python3 "$here/tools_check.py" mcap "$T/cam.mcap" /camera/image_raw 64 48 15 ||
    fail "the recorded MCAP file"
"$FERRY" bag info "$T/cam.mcap" >"$OUT/bag_info" 2>&1 || { fail "ferry bag info"; show bag_info; }

# 3. A plain type from rclpy (C type support). The publisher waits for echo's subscription, sends
#    x = 1..60 at 20 Hz; the recorder joins while echo takes its 5.
cat >"$T/py_point.py" <<'PY'
import sys, time
import rclpy
from geometry_msgs.msg import Point
rclpy.init()
node = rclpy.create_node("py_point")
pub = node.create_publisher(Point, sys.argv[1], 10)
end = time.time() + 30
while pub.get_subscription_count() == 0 and time.time() < end:
    rclpy.spin_once(node, timeout_sec=0.05)
for i in range(1, int(sys.argv[2]) + 1):
    pub.publish(Point(x=float(i), y=0.5, z=-2.0))
    rclpy.spin_once(node, timeout_sec=0.05)
print("py_point: published", sys.argv[2])
PY
LD_PRELOAD=$PRELOAD timeout -k 5 90 python3 "$T/py_point.py" /point 60 \
    >"$OUT/py_point" 2>&1 &
pp=$!
BG+=("$pp")
timeout -k 5 60 "$FERRY" echo /point --json --count 5 --timeout 50 >"$OUT/point_echo" \
    2>"$OUT/point_echo.err" || { fail "ferry echo --json on a plain type"; show point_echo.err; }
timeout -k 5 60 "$FERRY" record /point -o "$T/point.mcap" --seconds 1.5 --sched normal \
    >"$OUT/point_record" 2>&1 || { fail "ferry record of a plain type"; show point_record; }
grep -q "recording /point (geometry_msgs/msg/Point, plain (in-memory) layout converted to CDR)" \
    "$OUT/point_record" || { fail "record did not say it converts the plain type"; show point_record; }
python3 "$here/tools_check.py" point "$OUT/point_echo" "$T/point.mcap" /point 5 ||
    fail "the plain type through echo and record"
wait "$pp" || { fail "the rclpy Point publisher"; show py_point; }

# 4. view. A quiet echo subscribes so that the camera starts; the view serves the topic.
if "$FERRY" view --help >/dev/null 2>&1; then
    timeout -k 5 120 "$FERRY" echo /camera/view --quiet --timeout 100 >/dev/null 2>&1 &
    BG+=("$!")
    ros camera_view 120 image-pub /camera/view 64 48 100000 10
    cv=$PID
    timeout -k 5 90 "$FERRY" view --port 0 >"$OUT/view" 2>"$OUT/view.err" &
    vw=$!
    BG+=("$vw")
    line=
    for _ in $(seq 200); do
        line=$(head -n 1 "$OUT/view" 2>/dev/null)
        [ -n "$line" ] && break
        sleep 0.05
    done
    read -r port token < <(python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import wsproto
p, t = wsproto.token_of(sys.argv[2]); print(p or "", t or "")' "$here/../view" "$line")
    if [ -z "${port:-}" ] || [ -z "${token:-}" ]; then
        fail "ferry view printed no URL with its port and token: '$line'"
        show view.err
    else
        python3 "$here/tools_check.py" view "$port" "$token" /camera/view 64 48 ||
            { fail "ferry view on a ROS image topic"; show view.err; }
    fi
    kill -TERM "$vw" 2>/dev/null
    kill -INT "$cv" 2>/dev/null
    wait "$vw" "$cv" 2>/dev/null
else
    echo "$NAME: ferry built without ferry view; its step skipped"
fi

ros_lib_end
