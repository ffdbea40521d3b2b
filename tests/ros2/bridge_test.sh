#!/usr/bin/env bash
# rmw_ferry_cpp nodes and rmw_cyclonedds_cpp nodes on two "hosts" (network namespaces joined by a
# veth pair), `ferry bridge` between them on host A, started by the launch file the docs give
# (examples/ros2/bridge.launch.py). Every node is an unmodified rclcpp program (rmw_node.cpp):
#   1. A -> B, std_msgs/String (CDR in ferry): an rmw_ferry_cpp talker to a far rmw_cyclonedds
#      listener, every message after the first in order.
#   2. B -> A, std_msgs/String: a far talker to an rmw_ferry_cpp listener (the bridge opens the
#      route once the listener described the type).
#   3. A -> B and B -> A, geometry_msgs/Vector3, a fixed-size type rmw_ferry_cpp sends as its C
#      struct (loaned on A): converted to CDR and back by the bridge.
#   4. A -> B and B -> A, sensor_msgs/Image 320x240 rgb8, every byte checked: out as the CDR the
#      rclcpp node sent, in as ferry's own image (the rmw_ferry_cpp subscription takes either).
#   5. The far side's graph sees the bridged topics (`ros2 topic list`).
#   6. A hostile local publisher's malformed samples are dropped and counted, its valid ones all
#      reach the far side, also across 2 s the bridge was stopped (SIGSTOP).
# Usage: bridge_test.sh ROS_PREFIX OURS_PREFIX RMW_NODE FERRY
set -u
NAME=ros2_bridge_test
ROS=$1
OURS=$2
NODE=$3
FERRY_CLI=$4
HERE=$(cd "$(dirname "$0")" && pwd)
if [ ! -f "$ROS/setup.sh" ]; then
    echo "$NAME: skipped, no ROS 2 at $ROS (make test installs the one beside this tree)"
    exit 77
fi
set -- "$FERRY_CLI" none
# shellcheck source=../bridge/lib.sh
source "$HERE/../bridge/lib.sh"

set +u # ROS's setup scripts read unset variables
# shellcheck disable=SC1091
AMENT_TRACE_SETUP_FILES= . "$ROS/setup.sh"
set -u
export PATH=/usr/bin:$PATH # Debian's python3 for ros2 and launch
# Host A's nodes run rmw_ferry_cpp (with LD_PRELOAD where this ROS 2 links rcl to one RMW, as
# tests/ros2/lib.sh explains); host B's run the ROS 2 default, rmw_cyclonedds_cpp.
PRELOAD=
if ldd "$ROS/lib/librcl.so" 2>/dev/null | grep -q 'librmw_cyclonedds_cpp'; then
    PRELOAD=$OURS/lib/librmw_ferry_cpp.so
fi
export ROS_DOMAIN_ID=$((RANDOM % 100 + 30))
export ROS_LOG_DIR=$WORK/log
export RMW_NODE_JOIN_LATE=1
DA=$WORK/a
status=0

new_ns NSA A
new_ns NSB B
veth "$NSA" "$NSB" "10.$((RANDOM % 200 + 20)).$((RANDOM % 250 + 1))"
CFG_B=$(veth_config "$VETH_B")

# a NAME CMD...: an rmw_ferry_cpp node on host A, in the background (LAST_PID).
a() {
    local name=$1
    shift
    bg "$NSA" "$WORK/$name.log" env AMENT_PREFIX_PATH="$OURS:$AMENT_PREFIX_PATH" \
        RMW_IMPLEMENTATION=rmw_ferry_cpp LD_PRELOAD="$PRELOAD" FERRY_DIR="$DA" \
        FERRY_DOMAIN="$ROS_DOMAIN_ID" ROS_DISABLE_LOANED_MESSAGES=0 "$@"
}
# b NAME CMD...: an rmw_cyclonedds_cpp node on host B, in the background (LAST_PID).
b() {
    local name=$1
    shift
    bg "$NSB" "$WORK/$name.log" env RMW_IMPLEMENTATION=rmw_cyclonedds_cpp CYCLONEDDS_URI="$CFG_B" "$@"
}
# ends LABEL PID: the node must end with status 0.
ends() {
    local rc=0
    wait "$2" || rc=$?
    if [ $rc -eq 0 ]; then
        echo "ok: $1: $(tail -n 1 "$WORK/$1.log")"
    else
        status=1
        echo "FAIL: $1 exited with status $rc:"
        tail -n 5 "$WORK/$1.log"
    fi
}

# The bridge, as a user starts it: by the launch file, on host A. SIGINT (Ctrl-C) stops a launch;
# a background job of this shell would ignore it, hence --default-signal.
bg "$NSA" "$WORK/launch.log" env --default-signal=INT FERRY_DIR="$DA" FERRY_DOMAIN="$ROS_DOMAIN_ID" \
    ros2 launch "$HERE/../../examples/ros2/bridge.launch.py" ferry:="$FERRY" \
    dds_config:="$(veth_config "$VETH_A")" extra_args:=--stats
LAUNCH=$LAST_PID
wait_line "$WORK/launch.log" "ferry bridge: " 60 ||
    fail "the launch file did not start the bridge within 60 s: $(tail -n 5 "$WORK/launch.log")"

# 1-4: the listeners first (each waits up to 90 s), then the talkers (each waits for a
# subscription: on A the bridge's, on B the bridge's DDS reader). A's talkers start once the bridge
# subscribed, before DDS discovery has matched its writer with B's reader, which can take seconds
# on a loaded machine: their streams last 6-10 s, and B's listeners may join in the first half.
b l_ab "$NODE" listener /chat_ab 200 90
L1=$LAST_PID
a l_ba "$NODE" listener /chat_ba 40 90
L2=$LAST_PID
b v_ab "$NODE" loan-listener /vec_ab 200 90
L3=$LAST_PID
a v_ba "$NODE" loan-listener /vec_ba 40 90
L4=$LAST_PID
b i_ab "$NODE" image-sub /img_ab 60 90
L5=$LAST_PID
a i_ba "$NODE" image-sub /img_ba 20 90
L6=$LAST_PID
a t_ab "$NODE" talker /chat_ab 200 20
T1=$LAST_PID
b t_ba "$NODE" talker /chat_ba 40 20
T2=$LAST_PID
a lt_ab "$NODE" loan-talker /vec_ab 200 20
T3=$LAST_PID
b lt_ba "$NODE" loan-talker /vec_ba 40 20
T4=$LAST_PID
a ip_ab "$NODE" image-pub /img_ab 320 240 60 10
T5=$LAST_PID
b ip_ba "$NODE" image-pub /img_ba 320 240 20 10
T6=$LAST_PID

ends l_ab "$L1"
ends l_ba "$L2"
ends v_ab "$L3"
ends v_ba "$L4"
ends i_ab "$L5"
ends i_ba "$L6"
for p in "$T1" "$T2" "$T3" "$T4" "$T5" "$T6"; do wait "$p"; done
grep -q "messages by value" "$WORK/lt_ba.log" && grep -q "loaned messages" "$WORK/lt_ab.log" ||
    { status=1; echo "FAIL: 3: A's talker should loan, B's publish by value: $(tail -n 1 "$WORK/lt_ab.log") / $(tail -n 1 "$WORK/lt_ba.log")"; }

# 5. The far graph sees a bridged topic with its ROS type while its publisher lives.
a t_graph "$NODE" talker /graph_ab 1000000 2
TG=$LAST_PID
seen=
for _ in $(seq 20); do
    in_ns "$NSB" env RMW_IMPLEMENTATION=rmw_cyclonedds_cpp CYCLONEDDS_URI="$CFG_B" \
        timeout 60 ros2 topic list -t --no-daemon --spin-time 2 >"$WORK/topics_b.log" 2>&1
    grep -q '^/graph_ab \[std_msgs/msg/String\]' "$WORK/topics_b.log" && { seen=1; break; }
done
kill -KILL "$TG" # as a crash: what a node leaves behind is the RMW's to clean
wait "$TG"
[ -n "$seen" ] && echo "ok: ros2 topic list on B lists /graph_ab [std_msgs/msg/String]" ||
    { status=1; echo "FAIL: 5: ros2 topic list on B never listed /graph_ab: $(tr '\n' ' ' <"$WORK/topics_b.log")"; }

# 6. A hostile local publisher on a ROS topic, and a bridge stopped for 2 s (SIGSTOP, as a
#    debugger): a ferry publisher (not an rmw node) of std_msgs/msg/String, with the type hash the
#    rmw_ferry_cpp listener on /bad_ab described, sends a malformed sample (truncated, a length past
#    the end, an unknown encapsulation) before each valid "hello N". The bridge drops and counts
#    each bad one (out_invalid) and carries every valid one, in order, to the far listener, also
#    across the 2 s it was stopped (the publisher admits the bridge's blocking subscriber, so
#    nothing is dropped meanwhile).
PYPATH=$(dirname "$FERRY")/python
if PYTHONPATH=$PYPATH python3 -c 'import ferry' 2>/dev/null; then
    b l_bad "$NODE" listener /bad_ab 200 90
    LB=$LAST_PID
    a l_bad_a "$NODE" listener /bad_ab 200 90
    LBA=$LAST_PID
    hash=
    for _ in $(seq 100); do
        hash=$(cat "$DA/$ROS_DOMAIN_ID/.ros2/"*.graph 2>/dev/null | tr -c 'a-zA-Z0-9/_ \n' ' ' |
            sed -n 's|.*D std_msgs/msg/String \([0-9a-f]\{16\}\) cdr.*|\1|p' | head -1)
        [ -n "$hash" ] && break
        sleep 0.1
    done
    cat >"$WORK/hostile.py" <<'EOF'
import struct, sys, time
import ferry

bad = [b"\x00\x01\x00", b"\x00\x01\x00\x00\xff\xff\xff\x7fhello",
       b"\x00\x01\x00\x00\x09\x00\x00\x00hel", b"\x00\x07\x00\x00\x02\x00\x00\x00a\x00"]
with ferry.Node(name="hostile") as node:
    pub = node.publisher(sys.argv[1], "std_msgs/msg/String", type_hash=int(sys.argv[2], 16),
                         admit_blocking=True, block_timeout_ns=10**10)
    pub.wait_subscribers(2, timeout=60)      # the bridge and the rmw_ferry_cpp listener
    for k in range(1, 201):
        pub.publish_copy(bad[k % len(bad)])
        text = ("hello %d" % k).encode() + b"\x00"
        pub.publish_copy(b"\x00\x01\x00\x00" + struct.pack("<I", len(text)) + text)
        if k == 20:
            print("sent 20", flush=True)
        time.sleep(0.05)
    time.sleep(1)
print("sent 200 and 200 malformed", flush=True)
EOF
    if [ -z "$hash" ]; then
        status=1
        echo "FAIL: 6: no description of std_msgs/msg/String in $DA/$ROS_DOMAIN_ID/.ros2"
    else
        bg "$NSA" "$WORK/hostile.log" env PYTHONPATH="$PYPATH" FERRY_DIR="$DA" \
            FERRY_DOMAIN="$ROS_DOMAIN_ID" python3 "$WORK/hostile.py" /bad_ab "$hash"
        HP=$LAST_PID
        wait_line "$WORK/hostile.log" "sent 20" 60 || echo "note: 6: the hostile publisher never said 'sent 20'"
        BRIDGE=$(pgrep -f -n "ferry bridge --topic" || true)
        if [ -n "$BRIDGE" ]; then
            kill -STOP "$BRIDGE"
            sleep 2
            kill -CONT "$BRIDGE"
        else
            status=1
            echo "FAIL: 6: no bridge process to stop"
        fi
        wait "$HP" || { status=1; echo "FAIL: 6: the hostile publisher: $(tail -n 3 "$WORK/hostile.log")"; }
        ends l_bad "$LB"
        ends l_bad_a "$LBA"
    fi
else
    echo "note: 6 skipped: the Python package is not built ($PYPATH)"
fi

kill -INT "$LAUNCH"
for _ in $(seq 150); do kill -0 "$LAUNCH" 2>/dev/null || break; sleep 0.1; done
kill -KILL "$LAUNCH" 2>/dev/null
wait "$LAUNCH" 2>/dev/null
grep 'ferry bridge: \(out\|in\) ' "$WORK/launch.log" | sed 's/^/  /'
for k in in_invalid out_failed; do
    check "bridge $k" "$(stat_of "$WORK/launch.log" $k)" 0 "$(grep 'losses:' "$WORK/launch.log")"
done
# Step 6's malformed samples, but those of the route's first scan period (not written: out_early).
if [ -f "$WORK/hostile.log" ]; then
    check_ge "bridge out_invalid (step 6's malformed samples)" "$(stat_of "$WORK/launch.log" out_invalid)" 30
else
    check "bridge out_invalid" "$(stat_of "$WORK/launch.log" out_invalid)" 0
fi
for route in "out /chat_ab -> rt/chat_ab (std_msgs/msg/String" "in rt/chat_ba -> /chat_ba (std_msgs/msg/String" \
    "out /vec_ab -> rt/vec_ab (geometry_msgs/msg/Vector3" "in rt/vec_ba -> /vec_ba (geometry_msgs/msg/Vector3" \
    "out /img_ab -> rt/img_ab (sensor_msgs/msg/Image" "in rt/img_ba -> /img_ba (sensor_msgs/Image,"; do
    grep -qF "$route" "$WORK/launch.log" || { status=1; echo "FAIL: the bridge did not say: $route"; }
done
[ "$status" = 0 ] && echo "PASS" || { echo "FAIL"; tail -n 30 "$WORK/launch.log"; }
exit $status
