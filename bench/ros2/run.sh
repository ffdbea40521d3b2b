#!/usr/bin/env bash
# The ROS 2 pipeline of the seed report, measured: an rclcpp node publishing to an rclcpp
# subscription in another process (ros2_bench), carried by rmw_ferry_cpp, by rmw_cyclonedds_cpp
# as installed (ROS 2's default path) and by rmw_cyclonedds_cpp with the socket buffers and
# fragment size a DDS expert gives it (those of `ferry bridge`), in the same run.
#
# usage: bench/ros2/run.sh [--quick] [--pinned] [--rmw NAME] [--csv FILE] [BUILD]   (BUILD: build/)
#   --rmw NAME   only rmw_ferry_cpp, cyclonedds-tuned or cyclonedds-default (repeatable)
# As root, the tuned rows run with net.core.rmem_max and wmem_max raised to 64 MiB (what the
# tuned configuration's socket buffers need; restored afterwards), as a DDS expert would.
# Rows: 1280x720 and 1920x1080 rgb8 images at 30 Hz, 64-byte strings at 1 kHz, and a loaned
# fixed-size 1920x1080 frame (ferry_bench_msgs/msg/Frame through borrow_loaned_message(): the
# package in bench/ros2/loan, built here into BUILD/bench-ros2-loan) beside ferry's own C path at
# the same size (ferry bench transport, paced, every byte written and read); reliable,
# keep-last 10. Prints a table (latency from publish() to the start of the callback, p50 / p99 /
# max; messages lost; whole-process CPU per message on each side) and, with --csv, writes
# run,rmw,payload,hz,messages,received,lost,p50_us,p99_us,max_us,pub_cpu_us,sub_cpu_us,pinned
set -u
QUICK=0
PINNED=0
CSV=
RMWS=()
while [ $# -gt 0 ]; do
    case $1 in
        --quick) QUICK=1 ;;
        --pinned) PINNED=1 ;;
        --csv) CSV=$2; shift ;;
        --rmw) RMWS+=("$2"); shift ;;
        *) break ;;
    esac
    shift
done
BUILD=${1:-build}
ROS=${ROS_PREFIX:-/opt/ros/humble}
BENCH=$BUILD/bench/ros2_bench
if [ ! -f "$ROS/setup.sh" ] || [ ! -f "$BUILD/ros/lib/librmw_ferry_cpp.so" ]; then
    echo "bench/ros2: needs ROS 2 at $ROS and a build with rmw_ferry_cpp (make build with ROS 2 there)" >&2
    exit 77
fi
set +u
# shellcheck disable=SC1091
AMENT_TRACE_SETUP_FILES= . "$ROS/setup.sh"
set -u
export PATH=/usr/bin:$PATH # Debian's python3, with what rosidl's generators import
cmake --build "$BUILD" --target ros2_bench >/dev/null || exit 1
OURS=$(cd "$BUILD/ros" && pwd)
# The loaned-message package: a ROS package of its own (a message type needs rosidl and a name).
LOANPKG=$BUILD/bench-ros2-loan
{ cmake -S "$(dirname "$0")/loan" -B "$LOANPKG" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF &&
    cmake --build "$LOANPKG" -j "$(nproc)" && cmake --install "$LOANPKG" --prefix "$LOANPKG/install"; } \
    >"$BUILD/bench-ros2-loan.log" 2>&1 || { tail -20 "$BUILD/bench-ros2-loan.log"; exit 1; }
LOAN=$(cd "$LOANPKG/install" && pwd)
export AMENT_PREFIX_PATH=$LOAN:$AMENT_PREFIX_PATH LD_LIBRARY_PATH=$LOAN/lib:${LD_LIBRARY_PATH:-}
T=$(mktemp -d /tmp/ferry-bench-ros2-XXXXXX)
cat >"$T/tuned.xml" <<'EOF'
<CycloneDDS><Domain Id="any">
<General><MaxMessageSize>65500B</MaxMessageSize><MaxRexmitMessageSize>65500B</MaxRexmitMessageSize>
<FragmentSize>62KiB</FragmentSize></General>
<Internal><SocketReceiveBufferSize min="default" max="64MiB"/>
<SocketSendBufferSize min="default" max="16MiB"/><MaxQueuedRexmitBytes>32MiB</MaxQueuedRexmitBytes>
<Watermarks><WhcHigh>48MiB</WhcHigh><WhcHighInit>16MiB</WhcHighInit></Watermarks></Internal>
</Domain></CycloneDDS>
EOF
if [ "$QUICK" -eq 1 ]; then FRAMES=60; STRINGS=1000; else FRAMES=300; STRINGS=5000; fi
domain=40
[ -n "$CSV" ] && echo "run,rmw,payload,hz,messages,received,lost,p50_us,p99_us,max_us,pub_cpu_us,sub_cpu_us,pinned" >"$CSV"

# one RMW PAYLOAD HZ COUNT PUBARGS...: one row.
one() {
    local rmw=$1 payload=$2 hz=$3 count=$4
    shift 4
    # Humble's rcl gives subscriptions loans only with ROS_DISABLE_LOANED_MESSAGES=0.
    local env=(ROS_DOMAIN_ID=$domain FERRY_DIR=$T/ferry ROS_LOG_DIR=$T/log ROS_DISABLE_LOANED_MESSAGES=0)
    case $rmw in
        rmw_ferry_cpp)
            env+=(RMW_IMPLEMENTATION=rmw_ferry_cpp AMENT_PREFIX_PATH=$OURS:$AMENT_PREFIX_PATH)
            # A ROS 2 built with one RMW links rcl to it: rmw_ferry_cpp goes ahead of it.
            if ldd "$ROS/lib/librcl.so" | grep -q librmw_cyclonedds_cpp; then
                env+=(LD_PRELOAD=$OURS/lib/librmw_ferry_cpp.so)
            fi ;;
        cyclonedds-default) env+=(RMW_IMPLEMENTATION=rmw_cyclonedds_cpp) ;;
        cyclonedds-tuned) env+=(RMW_IMPLEMENTATION=rmw_cyclonedds_cpp CYCLONEDDS_URI=file://$T/tuned.xml) ;;
    esac
    domain=$((domain + 1))
    local subpin=() pubpin=()
    if [ "$PINNED" -eq 1 ]; then subpin=(taskset -c 1); pubpin=(taskset -c 0); fi
    local secs=$((count / hz + 30))
    local prog=$BENCH subargs=(sub "$([ "$payload" = 64 ] && echo string || echo image)" "$count" "$secs")
    if [ "$payload" = 1920x1080-loan ]; then
        prog=$LOAN/lib/ferry_bench_msgs/ros2_loan_bench
        subargs=(sub "$count" "$secs")
    fi
    env "${env[@]}" timeout $((secs + 10)) "${subpin[@]}" "$prog" "${subargs[@]}" >"$T/sub" 2>"$T/sub.err" &
    local sp=$!
    env "${env[@]}" timeout $((secs + 10)) "${pubpin[@]}" "$prog" pub "$@" >"$T/pub" 2>"$T/pub.err"
    wait $sp
    local s p
    s=$(grep '^sub ' "$T/sub" || echo "sub received=0 lost=$count p50_us=0 p99_us=0 max_us=0 cpu_us_per_msg=0")
    p=$(grep '^pub ' "$T/pub" || echo "pub cpu_us_per_msg=0")
    val() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
    printf "%-20s %-10s %5s %6s %8s %6s %10s %10s %10s %10s %10s\n" "$rmw" "$payload" "$hz" "$count" \
        "$(val "$s" received)" "$(val "$s" lost)" "$(val "$s" p50_us)" "$(val "$s" p99_us)" \
        "$(val "$s" max_us)" "$(val "$p" cpu_us_per_msg)" "$(val "$s" cpu_us_per_msg)"
    [ -n "$CSV" ] && echo "1,$rmw,$payload,$hz,$count,$(val "$s" received),$(val "$s" lost),$(val "$s" p50_us),$(val "$s" p99_us),$(val "$s" max_us),$(val "$p" cpu_us_per_msg),$(val "$s" cpu_us_per_msg),$PINNED" >>"$CSV"
    if [ "$(val "$s" received)" = 0 ]; then tail -3 "$T/sub.err" "$T/pub.err"; fi
}

printf "%-20s %-10s %5s %6s %8s %6s %10s %10s %10s %10s %10s\n" rmw payload hz sent received lost \
    p50_us p99_us max_us pub_cpu_us sub_cpu_us
[ ${#RMWS[@]} -gt 0 ] || RMWS=(rmw_ferry_cpp cyclonedds-tuned cyclonedds-default)
rmem=$(sysctl -n net.core.rmem_max 2>/dev/null)
wmem=$(sysctl -n net.core.wmem_max 2>/dev/null)
restore() {
    if [ -n "$rmem" ] && [ "$(id -u)" -eq 0 ]; then
        sysctl -qw net.core.rmem_max="$rmem" net.core.wmem_max="$wmem" 2>/dev/null
    fi
    rm -rf "$T"
}
trap restore EXIT
for rmw in "${RMWS[@]}"; do
    if [ "$rmw" = cyclonedds-tuned ] && [ "$(id -u)" -eq 0 ] && [ -n "$rmem" ]; then
        sysctl -qw net.core.rmem_max=67108864 net.core.wmem_max=67108864 2>/dev/null &&
            echo "(tuned rows: net.core.rmem_max and wmem_max at 64 MiB; were $rmem and $wmem)"
    fi
    one "$rmw" 1280x720 30 "$FRAMES" image 1280 720 30 "$FRAMES"
    one "$rmw" 1920x1080 30 "$FRAMES" image 1920 1080 30 "$FRAMES"
    one "$rmw" 64 1000 "$STRINGS" string 64 1000 "$STRINGS"
    # The default configuration cannot carry 6 MB at 30 Hz (see the image row); the loaned row
    # compares rmw_ferry_cpp's loans with what the tuned DDS does with the same program.
    [ "$rmw" = cyclonedds-default ] || one "$rmw" 1920x1080-loan 30 "$FRAMES" 30 "$FRAMES"
    if [ "$rmw" = cyclonedds-tuned ] && [ "$(id -u)" -eq 0 ] && [ -n "$rmem" ]; then
        sysctl -qw net.core.rmem_max="$rmem" net.core.wmem_max="$wmem" 2>/dev/null
    fi
done
# ferry's own C path at the loaned frame's size, paced at 30 Hz, every byte written and read: what
# rmw_ferry_cpp's loaned row adds to it is the ROS 2 layers' (rclcpp's executor, rcl, rmw_wait).
if printf '%s\n' "${RMWS[@]}" | grep -qx rmw_ferry_cpp; then
    "$BUILD/ferry" bench transport --transport ferry-zero-copy --mode paced --touch full \
        --messages "$FRAMES" --csv "$T/c.csv" >/dev/null 2>&1
    c=$(awk -F, '$3 == 6220800 { print $8, $9, $13, $15 }' "$T/c.csv")
    if [ -n "$c" ]; then
        read -r cp50 cp99 cpub csub <<<"$c"
        printf "%-20s %-10s %5s %6s %8s %6s %10s %10s %10s %10s %10s\n" "ferry C (reference)" 6220800 30 \
            "$FRAMES" "$FRAMES" 0 "$cp50" "$cp99" - "$cpub" "$csub"
        [ -n "$CSV" ] && echo "1,ferry-c,6220800,30,$FRAMES,$FRAMES,0,$cp50,$cp99,,$cpub,$csub,$PINNED" >>"$CSV"
    fi
fi
