#!/usr/bin/env bash
# ROS 2's own test suites of the rmw layer, run against rmw_ferry_cpp:
#   test_rmw_implementation   (rmw_implementation) every rmw_* function, one process, through the
#                             rmw API: argument checks, return codes, graph, wait sets, services
#   test_communication        (system_tests) rcl and rclcpp programs exchanging every test_msgs
#                             type, serialized messages, and (launch tests) rclcpp with rclpy
# The packages they need are built from ROS 2's sources with plain CMake against the ROS 2 at
# ROS_DISTRO_PREFIX, into a cache prefix (packages already built there are skipped), by
# build_test_msgs.sh beside this script. Then each suite's ctest runs with rmw_ferry_cpp as the
# RMW, in a ferry directory and a ROS domain of its own, and this prints, per test binary, how
# many test cases passed and failed, the names of the failed ones, and a total.
#
# usage: ros_suites.sh [BUILD [SUITE...]]
#   BUILD    the ferry build folder holding ros/lib/librmw_ferry_cpp.so (default: build)
#   SUITE    test_rmw_implementation, test_communication (default: both)
# environment:
#   ROS_SRC        ROS 2 sources, folders or .tar.zst archives joined with ':' (default:
#                  /tmp/rossrc/src if there, else /work/shared/ros2/humble-src.tar.zst; with
#                  /work/shared/ros2/humble-extra-src.tar.zst after it)
#   SUITES_PREFIX  the cache prefix (default: BUILD/ros-suites)
#   CTEST_ARGS     extra ctest arguments (e.g. -R test_graph_api)
#   JOBS           build jobs (default 2)
#   BUILD_ONLY=1   build, do not run
# Exit status: 0 all passed, 1 a test failed, 2 the build failed, 77 no ROS 2 or no rmw_ferry_cpp.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
NAME=ros_suites
BUILD=$(cd "${1:-build}" 2>/dev/null && pwd) || { echo "$NAME: no build folder ${1:-build}"; exit 77; }
shift $(($# > 0 ? 1 : 0))
SUITES=("$@")
[ ${#SUITES[@]} -gt 0 ] || SUITES=(test_rmw_implementation test_communication)
ROS=${ROS_DISTRO_PREFIX:-/opt/ros/humble}
OURS=$BUILD/ros
LIB=$OURS/lib/librmw_ferry_cpp.so
PREFIX=${SUITES_PREFIX:-$BUILD/ros-suites}
SHARED=/work/shared/ros2
if [ -z "${ROS_SRC:-}" ]; then
    if [ -d /tmp/rossrc/src ]; then ROS_SRC=/tmp/rossrc/src; else ROS_SRC=$SHARED/humble-src.tar.zst; fi
    ROS_SRC=$ROS_SRC:$SHARED/humble-extra-src.tar.zst
fi
export JOBS=${JOBS:-2}

if [ ! -f "$ROS/setup.sh" ]; then
    echo "$NAME: skipped, no ROS 2 at $ROS (install it with $SHARED/install.sh)"
    exit 77
fi
if [ ! -f "$LIB" ]; then
    echo "$NAME: skipped, no $LIB (build the target rmw_ferry_cpp first)"
    exit 77
fi
if [ ! -f "$HERE/build_test_msgs.sh" ]; then
    echo "$NAME: $HERE/build_test_msgs.sh is missing (it builds the packages)"
    exit 2
fi
mkdir -p "$PREFIX"
PREFIX=$(cd "$PREFIX" && pwd)

# The packages, in dependency order. Those the suites only use are built without their tests.
DEPS=(ament_cmake_gtest ament_lint_auto osrf_testing_tools_cpp test_interface_files test_msgs)
for s in "${SUITES[@]}"; do
    case $s in
    test_rmw_implementation) ;;
    test_communication)
        # ament_cmake_auto (which needs ament_cmake_gmock) to configure it, launch_testing_ament_cmake for its launch tests
        # (add_launch_test), rclcpp_action for its programs: none is in the ROS 2 core install.
        DEPS+=(ament_cmake_gmock ament_cmake_auto launch_testing_ament_cmake rclcpp_action) ;;
    *)
        echo "$NAME: unknown suite $s (test_rmw_implementation, test_communication)"
        exit 2 ;;
    esac
done

# find_package(rmw_ferry_cpp), which the suites do for each RMW implementation the ament index
# lists: the build tree's ros prefix has the index and the library, and this configuration file
# says where they are (test_communication links some of its tests to the RMW library itself).
mkdir -p "$PREFIX/share/rmw_ferry_cpp/cmake"
cat >"$PREFIX/share/rmw_ferry_cpp/cmake/rmw_ferry_cppConfig.cmake.new" <<EOF
# rmw_ferry_cpp of the ferry build at $BUILD (written by ros_suites.sh)
set(rmw_ferry_cpp_FOUND TRUE)
set(rmw_ferry_cpp_INCLUDE_DIRS "")
set(rmw_ferry_cpp_LIBRARIES "$LIB")
set(rmw_ferry_cpp_LIBRARY_DIRS "$OURS/lib")
set(rmw_ferry_cpp_DEFINITIONS "")
EOF
# (rewritten only when it changed: a newer file would make every suite reconfigure)
if cmp -s "$PREFIX/share/rmw_ferry_cpp/cmake/rmw_ferry_cppConfig.cmake.new" \
    "$PREFIX/share/rmw_ferry_cpp/cmake/rmw_ferry_cppConfig.cmake"; then
    rm "$PREFIX/share/rmw_ferry_cpp/cmake/rmw_ferry_cppConfig.cmake.new"
else
    mv "$PREFIX/share/rmw_ferry_cpp/cmake/rmw_ferry_cppConfig.cmake.new" \
        "$PREFIX/share/rmw_ferry_cpp/cmake/rmw_ferry_cppConfig.cmake"
fi

# Only rmw_ferry_cpp's tests: the suites make theirs for each RMW implementation
# get_available_rmw_implementations gives, and RMW_IMPLEMENTATIONS narrows that list, but
# find_package(rmw_implementation) must first see the ROS 2 build's own RMW (a ROS 2 built with
# one RMW refuses any other as the default). So this file, included right after the suite's
# project(), finds rmw_implementation with the full list, and then narrows it.
cat >"$PREFIX/share/rmw_ferry_cpp/cmake/only_rmw_ferry_cpp.cmake" <<'EOF'
find_package(ament_cmake_core REQUIRED)
find_package(rmw_implementation REQUIRED)
set(RMW_IMPLEMENTATIONS rmw_ferry_cpp)
EOF

# ROS's environment, with the build tree's ros prefix ahead (its ament index names
# rmw_ferry_cpp) and the cache prefix ahead of both.
set +u
# shellcheck disable=SC1091
AMENT_TRACE_SETUP_FILES= . "$ROS/setup.sh"
set -u
PATH=$(echo "$PATH" | tr ':' '\n' | grep -v pyenv | paste -sd:)
export PATH=/usr/bin:$PATH # Debian's python3: the rosidl generators, rclpy and launch_testing
export AMENT_PREFIX_PATH=$PREFIX:$OURS:$AMENT_PREFIX_PATH
export CMAKE_PREFIX_PATH=$PREFIX:${CMAKE_PREFIX_PATH:-}
export LD_LIBRARY_PATH=$PREFIX/lib:${LD_LIBRARY_PATH:-}
# The Python modules of what was built here (test_msgs' messages for rclpy): python3.N's folders.
for d in "$PREFIX"/local/lib/python3*/dist-packages "$PREFIX"/lib/python3*/site-packages; do
    [ -d "$d" ] && PYTHONPATH=$d:${PYTHONPATH:-}
done
export PYTHONPATH

t0=$(date +%s)
echo "$NAME: building ${DEPS[*]} in $PREFIX"
CMAKE_ARGS=-DBUILD_TESTING=OFF bash "$HERE/build_test_msgs.sh" "$ROS_SRC" "$PREFIX" "${DEPS[@]}" ||
    exit 2
if [[ " ${DEPS[*]} " == *" launch_testing_ament_cmake "* ]]; then
    # launch_testing itself is a Python package (setup.py), which CMake does not build: its
    # sources are put on the Python path as they are.
    IFS=':' read -r -a where <<<"$ROS_SRC"
    lt=$(find "$PREFIX/.src" "${where[@]}" -maxdepth 4 -type d -path '*/launch_testing/launch_testing' \
        2>/dev/null | head -1)
    if [ -z "$lt" ]; then
        echo "$NAME: the Python package launch_testing is in none of $ROS_SRC"
        exit 2
    fi
    export PYTHONPATH=$(dirname "$lt"):$PYTHONPATH
fi
# The suites themselves, with their tests, for rmw_ferry_cpp only.
CMAKE_ARGS="-DBUILD_TESTING=ON -DCMAKE_PROJECT_INCLUDE=$PREFIX/share/rmw_ferry_cpp/cmake/only_rmw_ferry_cpp.cmake" \
    bash "$HERE/build_test_msgs.sh" "$ROS_SRC" "$PREFIX" "${SUITES[@]}" || exit 2
echo "$NAME: built in $(($(date +%s) - t0)) s"
[ "${BUILD_ONLY:-0}" = 1 ] && exit 0

# rmw_ferry_cpp in place of the ROS 2 build's RMW (see tests/ros2/rmw_test.sh): a ROS 2 built
# with one RMW links rcl to it directly, so rmw_ferry_cpp comes first with LD_PRELOAD.
export RMW_IMPLEMENTATION=rmw_ferry_cpp
if ldd "$ROS/lib/librcl.so" 2>/dev/null | grep -q 'librmw_cyclonedds_cpp'; then
    export LD_PRELOAD=$LIB
fi
T=$(mktemp -d /tmp/ferry-ros-suites-XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
export FERRY_DIR=$T/ferry
export ROS_DOMAIN_ID=${ROS_DOMAIN_ID_SUITES:-61}
export ROS_LOG_DIR=$T/log
export ROS_HOME=$T/home
echo "$NAME: FERRY_DIR=$FERRY_DIR ROS_DOMAIN_ID=$ROS_DOMAIN_ID ${LD_PRELOAD:+LD_PRELOAD=$LD_PRELOAD}"

status=0
for s in "${SUITES[@]}"; do
    bld=$PREFIX/.build/$s
    rm -rf "$bld/test_results"
    echo "$NAME: running $s (ctest in $bld, its output in $T/$s.log)"
    t1=$(date +%s)
    # shellcheck disable=SC2086
    (cd "$bld" && ctest --output-on-failure ${CTEST_ARGS:-}) >"$T/$s.log" 2>&1 || status=1
    echo "$NAME: $s ran in $(($(date +%s) - t1)) s"
    grep -E '^ *[0-9]+/[0-9]+ Test +#' "$T/$s.log" | sed "s/^/  /"
    # Per binary: the gtest results (test_results/*.xml); ctest's verdict where a binary left
    # none (a crash, a timeout, a launch test).
    /usr/bin/python3 - "$bld" "$T/$s.log" <<'EOF'
import glob, os, re, sys
import xml.etree.ElementTree as ET
bld, log = sys.argv[1], sys.argv[2]
results = {}
for f in sorted(glob.glob(os.path.join(bld, "test_results", "*", "*.xml"))):
    name = re.sub(r"\.(gtest|xunit)\.xml$|\.xml$", "", os.path.basename(f))
    try:
        root = ET.parse(f).getroot()
    except ET.ParseError as e:
        results[name] = (0, 1, ["(unreadable result file %s: %s)" % (f, e)])
        continue
    passed, failed, names = 0, 0, []
    for case in root.iter("testcase"):
        if case.get("status") == "notrun" or case.find("skipped") is not None:
            continue
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if bad is None:
            passed += 1
        else:
            failed += 1
            names.append("%s.%s" % (case.get("classname"), case.get("name")))
    results[name] = (passed, failed, names)
# ctest's verdicts: a test that failed without a failing case is counted as one failure.
for m in re.finditer(r"Test +#\d+: (\S+) \.+\**\s*(Passed|Failed|\*\*\*Failed|Timeout|"
                     r"Exception|\S.*?)\s+[\d.]+ sec", open(log, errors="replace").read()):
    name, verdict = m.group(1), m.group(2).strip("* ")
    p, f, names = results.get(name, (0, 0, []))
    if verdict != "Passed" and f == 0:
        results[name] = (p, f + 1, names + ["(%s: %s, no failing test case)" % (name, verdict)])
    elif name not in results:
        results[name] = (1 if verdict == "Passed" else 0, 0, [])
tp = tf = 0
for name in sorted(results):
    p, f, names = results[name]
    tp += p
    tf += f
    print("  %-58s %4d passed %4d failed" % (name, p, f))
    for n in names:
        print("      FAILED", n)
print("  %-58s %4d passed %4d failed" % ("total", tp, tf))
EOF
done
[ $status -eq 0 ] && echo "$NAME: passed" || echo "$NAME: failures (logs kept: KEEP=1)"
exit $status
