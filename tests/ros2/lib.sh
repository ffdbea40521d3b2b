# Shell helpers of the ROS 2 tests (rmw_test.sh, tools_test.sh), sourced by them after they set
# NAME, ROS (the ROS 2 prefix) and OURS (the build's ROS prefix, holding rmw_ferry_cpp).
# shellcheck shell=bash

# ros_lib_init DOMAIN: 77 without ROS 2; else ROS 2's environment (Debian's python3 first),
# rmw_ferry_cpp as the RMW, PRELOAD (below), a private ferry directory and ROS domain DOMAIN,
# T (a temporary folder, removed at exit unless KEEP is set), OUT (the commands' output) and the
# clean-up trap.
ros_lib_init() {
    if [ ! -f "$ROS/setup.sh" ]; then
        echo "$NAME: skipped, no ROS 2 at $ROS (make test installs the one beside this tree)"
        exit 77
    fi
    set +u # ROS's setup scripts read unset variables
    # shellcheck disable=SC1091
    AMENT_TRACE_SETUP_FILES= . "$ROS/setup.sh"
    set -u
    export AMENT_PREFIX_PATH=$OURS:$AMENT_PREFIX_PATH
    export RMW_IMPLEMENTATION=rmw_ferry_cpp
    export PATH=/usr/bin:$PATH # Debian's python3 for rclpy and ros2
    # A ROS 2 built with one RMW only links rcl to it directly (rmw_implementation then disables
    # runtime selection and RMW_IMPLEMENTATION cannot switch): there, rmw_ferry_cpp is put ahead
    # of it with LD_PRELOAD (PRELOAD, for the ROS programs). A ROS 2 from the ROS packages selects
    # at run time.
    PRELOAD=
    if ldd "$ROS/lib/librcl.so" 2>/dev/null | grep -q 'librmw_cyclonedds_cpp'; then
        PRELOAD=$OURS/lib/librmw_ferry_cpp.so
        echo "$NAME: this ROS 2 has no runtime RMW selection; rmw_ferry_cpp comes with LD_PRELOAD"
    fi
    T=$(mktemp -d "/tmp/ferry-$NAME-XXXXXX")
    export FERRY_DIR=$T/root
    export ROS_DOMAIN_ID=$1
    export FERRY_DOMAIN=$1
    export ROS_LOG_DIR=$T/log
    OUT=$T/out
    mkdir -p "$OUT"
    BG=()
    fails=0
    trap ros_lib_cleanup EXIT
}

ros_lib_cleanup() {
    local p alive
    # timeout(1) passes SIGTERM on to the program it runs (which rclcpp and rclpy turn into a
    # shutdown); a SIGKILL would leave that program running without it.
    for p in "${BG[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for _ in $(seq 40); do
        alive=0
        for p in "${BG[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
        [ $alive -eq 0 ] && break
        sleep 0.05
    done
    for p in "${BG[@]}"; do kill -KILL "$p" 2>/dev/null; done
    wait 2>/dev/null
    [ -n "${KEEP:-}" ] || rm -rf "$T"
}

fail() {
    echo "$NAME: FAIL: $*"
    fails=$((fails + 1))
}

# show NAME: the end of a command's output, for a failure.
show() {
    echo "--- $1:"
    tail -20 "$OUT/$1"
}

# run NAME SECONDS CMD...: a ROS program to its end, output in $OUT/NAME; false on failure.
run() {
    local name=$1 secs=$2 rc
    shift 2
    LD_PRELOAD=$PRELOAD timeout -k 5 "$secs" "$@" >"$OUT/$name" 2>&1
    rc=$?
    [ $rc -eq 0 ] || { echo "--- $name (exit status $rc):"; tail -20 "$OUT/$name"; }
    return $rc
}

# bg NAME SECONDS CMD...: a ROS program in the background; its pid (timeout's) in PID.
bg() {
    local name=$1 secs=$2
    shift 2
    LD_PRELOAD=$PRELOAD timeout -k 5 "$secs" "$@" >"$OUT/$name" 2>&1 &
    PID=$!
    BG+=("$PID")
}

# bare NAME CMD...: a ROS program in the background as itself (no timeout(1) between: a SIGKILL
# sent to PID hits the program); its pid in PID.
bare() {
    local name=$1
    shift
    LD_PRELOAD=$PRELOAD "$@" >"$OUT/$name" 2>&1 &
    PID=$!
    BG+=("$PID")
}

# finish PID NAME: waits for a background command; false (showing its output) unless it exits 0.
finish() {
    local rc
    wait "$1"
    rc=$?
    [ $rc -eq 0 ] || { echo "--- $2 (exit status $rc):"; tail -20 "$OUT/$2"; }
    return $rc
}

# ros_lib_end: the verdict.
ros_lib_end() {
    if [ "$fails" -ne 0 ]; then
        echo "$NAME: $fails check(s) failed"
        exit 1
    fi
    echo "$NAME: passed"
}
