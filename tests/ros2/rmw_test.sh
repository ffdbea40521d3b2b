#!/usr/bin/env bash
# rmw_ferry_cpp with real ROS 2 programs: rclcpp nodes (rmw_node, an ordinary rclcpp program),
# an rclpy node and the ros2 command line, all with RMW_IMPLEMENTATION=rmw_ferry_cpp, in a
# private ferry directory. What each step checks is said above it.
# usage: rmw_test.sh ROS_PREFIX BUILD_ROS_PREFIX RMW_NODE FERRY
# Exit status: 0 passed, 1 failed, 77 skipped (no ROS 2 at ROS_PREFIX).
set -u
ROS=${1:-/opt/ros/humble}
OURS=${2:-}
NODE=${3:-}
FERRY=${4:-}
NAME=rmw_test
# shellcheck source=tests/ros2/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ros_lib_init 3

# 1. rclcpp to rclcpp, std_msgs/String (CDR), reliable: 200 messages at 200 Hz, all in order.
bg listener 60 "$NODE" listener /chatter 200 50
l=$PID
run talker 60 "$NODE" talker /chatter 200 200 || fail "talker"
finish "$l" listener || fail "rclcpp listener did not get 200 messages in order"
grep -q "received 200 of 200" "$OUT/listener" || fail "listener's count"

# 1b. Loans: a fixed-size type (geometry_msgs/Vector3) published through borrow_loaned_message()
#     and taken as a loan (the publisher's pages): 100 in order.
# Humble's rcl takes loans on subscriptions only with ROS_DISABLE_LOANED_MESSAGES=0.
bg loan_listener 60 env ROS_DISABLE_LOANED_MESSAGES=0 "$NODE" loan-listener /loaned 100 50
l=$PID
run loan_talker 60 "$NODE" loan-talker /loaned 100 200 || fail "loan talker"
finish "$l" loan_listener || fail "loan listener"

# 1c. A peer stopped in mid-stream (SIGSTOP, as a debugger or a swapped-out process does) for
#     2 s of a 100 Hz stream: the other listener gets every message meanwhile, and the stopped one,
#     resumed, gets every message from where it was (its queue held them), none lost or reordered.
#     The talker starts once both listeners subscribed (RMW_NODE_SUBSCRIPTIONS=2).
bg listener_run 60 "$NODE" listener /stopped 300 50
l=$PID
bare listener_stop "$NODE" listener /stopped 300 50
ls_pid=$PID
bg talker_stop 60 env RMW_NODE_SUBSCRIPTIONS=2 "$NODE" talker /stopped 300 100
t=$PID
for _ in $(seq 300); do grep -q "10 published" "$OUT/talker_stop" 2>/dev/null && break; sleep 0.1; done
kill -STOP "$ls_pid"
sleep 2
kill -CONT "$ls_pid"
finish "$t" talker_stop || fail "talker beside a stopped listener"
finish "$l" listener_run || fail "the running listener beside a stopped one"
finish "$ls_pid" listener_stop || fail "the stopped listener, resumed"
grep -q "received 300 of 300" "$OUT/listener_run" || fail "the running listener's count"
grep -q "received 300 of 300" "$OUT/listener_stop" || fail "the stopped listener's count"

# 1d. QoS matched as DDS matches it: a reliable subscription and a best-effort publisher, then a
#     transient-local subscription and a volatile publisher, do not match. Each side gets its
#     QoS-incompatible event (rclcpp's event callbacks) naming the policy, counts no peer, and the
#     subscription receives none of the 40 messages published meanwhile.
for policy in reliability durability; do
    bg incompatible_sub_$policy 60 "$NODE" incompatible sub /mismatch_$policy $policy 3
    s=$PID
    run incompatible_pub_$policy 60 "$NODE" incompatible pub /mismatch_$policy $policy 3 ||
        fail "the $policy-incompatible publisher"
    finish "$s" incompatible_sub_$policy || fail "the $policy-incompatible subscription"
    cat "$OUT/incompatible_pub_$policy" "$OUT/incompatible_sub_$policy"
done

# 2. Camera frames: sensor_msgs/Image 1280x720 rgb8, 30 frames at 30 Hz, every byte checked on
#    the other side.
bg image-sub 90 "$NODE" image-sub /camera/image_raw 30 80
s=$PID
run image-pub 90 "$NODE" image-pub /camera/image_raw 1280 720 30 30 || fail "image-pub"
finish "$s" image-sub || fail "rclcpp image subscriber"
cat "$OUT/image-sub"

# 2b. ferry's own image layout to ROS: `ferry pub --image` (a ferry C publisher) feeds an rclpy
#     subscription of sensor_msgs/msg/Image, which gets each frame as ROS's Image.
cat >"$T/py_images.py" <<'EOF'
import sys, time
import rclpy
from sensor_msgs.msg import Image
rclpy.init()
node = rclpy.create_node("py_images")
got = []
node.create_subscription(Image, sys.argv[1], got.append, 10)
end = time.time() + 40
while len(got) < 5 and time.time() < end:
    rclpy.spin_once(node, timeout_sec=0.05)
ok = len(got) >= 5 and all(m.width == 640 and m.height == 480 and m.encoding == "rgb8"
                           and m.step == 1920 and len(m.data) == 921600 for m in got)
print("py_images: received %d images from ferry pub%s" % (len(got), "" if ok else " (wrong)"))
sys.exit(0 if ok else 1)
EOF
if [ -x "$FERRY" ]; then
    bg ferry_pub 60 "$FERRY" pub /camera/ferry --image 640x480 --encoding rgb8 --rate 30 --count 1200 \
        --domain "$ROS_DOMAIN_ID"
    fp=$PID
    run py_images 60 python3 "$T/py_images.py" /camera/ferry || fail "ferry pub --image to rclpy"
    kill -INT "$fp" 2>/dev/null
    wait "$fp" 2>/dev/null
fi

# 3. Services: an rclcpp client calls an rclcpp service 50 times, each answer checked.
bg server 60 "$NODE" server /ferry_test/types 40
sv=$PID
run client 60 "$NODE" client /ferry_test/types 50 30 || fail "rclcpp client and service"
kill -INT "$sv" 2>/dev/null
wait "$sv" 2>/dev/null

# 4. rclpy (C type support) both ways with rclcpp (C++ type support), and the ros2 command line
#    on a live graph: topic list/info/echo, node list, param list (parameter services).
cat >"$T/py_talker.py" <<'EOF'
import sys, time
import rclpy
from std_msgs.msg import String
rclpy.init()
node = rclpy.create_node("py_talker")
pub = node.create_publisher(String, sys.argv[1], 10)
end = time.time() + 30
while pub.get_subscription_count() == 0 and time.time() < end:
    rclpy.spin_once(node, timeout_sec=0.05)
for i in range(1, int(sys.argv[2]) + 1):
    pub.publish(String(data="hello %d" % i))
    rclpy.spin_once(node, timeout_sec=0.005)
end = time.time() + 1
while time.time() < end:
    rclpy.spin_once(node, timeout_sec=0.05)
print("py_talker: published", sys.argv[2])
EOF
cat >"$T/py_listener.py" <<'EOF'
import sys, time
import rclpy
from std_msgs.msg import String
rclpy.init()
node = rclpy.create_node("py_listener")
want = int(sys.argv[2])
got = []
node.create_subscription(String, sys.argv[1], lambda m: got.append(m.data), 100)
end = time.time() + 40
while len(got) < want and time.time() < end:
    rclpy.spin_once(node, timeout_sec=0.05)
ok = got == ["hello %d" % i for i in range(1, want + 1)]
print("py_listener: received %d of %d%s" % (len(got), want, "" if ok else " (wrong)"))
sys.exit(0 if ok else 1)
EOF
bg py_listener 60 python3 "$T/py_listener.py" /py_chatter 50
l=$PID
run talker_to_py 60 "$NODE" talker /py_chatter 50 100 || fail "rclcpp talker to rclpy"
finish "$l" py_listener || fail "rclpy listener"

bg listener_of_py 60 "$NODE" listener /py_chatter2 50 50
l=$PID
run py_talker 60 python3 "$T/py_talker.py" /py_chatter2 50 || fail "rclpy talker"
finish "$l" listener_of_py || fail "rclcpp listener of rclpy"

# The ros2 command line against a live talker (it waits for a subscription: ros2 topic echo).
bg graph_talker 90 "$NODE" talker /graph_chatter 100000 20
gt=$PID
run topic_echo 60 ros2 topic echo --no-daemon --once /graph_chatter std_msgs/msg/String ||
    fail "ros2 topic echo --once"
grep -q "data: hello" "$OUT/topic_echo" || fail "ros2 topic echo printed no message"
run topic_list 60 ros2 topic list --no-daemon || fail "ros2 topic list"
grep -qx "/graph_chatter" "$OUT/topic_list" || fail "ros2 topic list lacks /graph_chatter"
run topic_info 60 ros2 topic info --no-daemon -v /graph_chatter || fail "ros2 topic info"
grep -q "Publisher count: 1" "$OUT/topic_info" || fail "ros2 topic info: publisher count"
grep -q "Node name: talker" "$OUT/topic_info" || fail "ros2 topic info: node name"
run node_list 60 ros2 node list --no-daemon || fail "ros2 node list"
grep -qx "/talker" "$OUT/node_list" || fail "ros2 node list lacks /talker"
run param_list 60 ros2 param list --no-daemon /talker || fail "ros2 param list /talker"
grep -q "use_sim_time" "$OUT/param_list" || fail "ros2 param list: no use_sim_time parameter"
# ferry's own tools see the topic the ROS node publishes.
if [ -x "$FERRY" ]; then
    timeout 30 "$FERRY" topics --domain 3 >"$OUT/ferry_topics" 2>&1 || fail "ferry topics"
    grep -q "/graph_chatter" "$OUT/ferry_topics" || fail "ferry topics lacks /graph_chatter"
fi
kill -INT "$gt" 2>/dev/null
wait "$gt" 2>/dev/null

# 5. Crash safety: publishers and subscriptions SIGKILLed at any moment, eight rounds. A
#    survivor that stays subscribed throughout must hear from every round's new publisher, a
#    fresh pair must then talk losslessly, and once every process is gone, the graph shows none
#    of the dead (their files are removed by the next reader).
bg survivor 120 "$NODE" publishers /crash 8 100
sur=$PID
for round in 1 2 3 4 5 6 7 8; do
    bare "victim$round" "$NODE" listener /crash 1000000 60
    vic=$PID
    bare "crasher$round" "$NODE" talker /crash 1000000 500
    cr=$PID
    # Once the crasher has published 10 (the survivor's queue holds 100), a moment more, then
    # both die in the middle of their traffic.
    for _ in $(seq 600); do
        grep -q "10 published" "$OUT/crasher$round" && break
        sleep 0.05
    done
    sleep 0.$((RANDOM % 3))
    kill -KILL "$cr" "$vic" 2>/dev/null
    wait "$cr" "$vic" 2>/dev/null
done
finish "$sur" survivor || fail "the survivor did not hear 8 publishers through the kill loop"
bg after_listener 60 "$NODE" listener /crash 100 50
l=$PID
run after_talker 60 "$NODE" talker /crash 100 200 || fail "a talker after the kill loop"
finish "$l" after_listener || fail "a listener after the kill loop"
run node_list_after 30 ros2 node list --no-daemon || fail "ros2 node list after the kill loop"
if [ -s "$OUT/node_list_after" ]; then
    fail "nodes still listed after every process ended: $(tr '\n' ' ' <"$OUT/node_list_after")"
fi
left=$(find "$FERRY_DIR/$ROS_DOMAIN_ID/.ros2" -name '*.graph' 2>/dev/null | wc -l)
# ros2 node list's own context file goes when it exits; nothing else may remain.
if [ "$left" -ne 0 ]; then
    fail "$left graph files left behind by dead processes"
    for f in "$FERRY_DIR/$ROS_DOMAIN_ID/.ros2/"*.graph; do
        p=${f##*/}
        p=${p%%.*}
        echo "--- $f (pid $p $(kill -0 "$p" 2>/dev/null && echo alive: "$(tr '\0' ' ' </proc/"$p"/cmdline)" || echo gone)):"
        tr '\0' '\n' <"$f" | head -20
    done
fi

for f in talker loan_listener image-sub py_images client py_listener listener_of_py survivor; do
    [ -f "$OUT/$f" ] && sed -n '$p' "$OUT/$f"
done
ros_lib_end
