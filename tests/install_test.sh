#!/usr/bin/env bash
# The installed tree, as a program outside the project uses it: `cmake --install` into a private
# prefix, then tests/consumer/consumer.c built against that prefix only, through pkg-config
# (ferry.pc, shared and --static) and through find_package(ferry CONFIG) (ferry::ferry and
# ferry::ferry_static), and each program run. Also checks what the tree holds: the libraries
# with their soname links, headers, man pages, docs, and no example, test or internal library.
# usage: install_test.sh BUILD_DIR SOURCE_DIR
# Exit status: 0 passed, 1 failed, 77 skipped (no C compiler or pkg-config).
set -u
BUILD=$1
SRC=$2
skip() {
    echo "SKIP: $*"
    exit 77
}
fail() {
    echo "FAIL: $*"
    exit 1
}
CC=${CC:-cc}
command -v "$CC" >/dev/null || skip "no C compiler ($CC)"
command -v pkg-config >/dev/null || skip "no pkg-config"

T=$(mktemp -d /tmp/ferry-install-test.XXXXXX) || fail "mktemp"
MANIFEST=$BUILD/install_manifest.txt
cleanup() {
    # The install below wrote the build's manifest; a user's `make uninstall` wants theirs.
    if [ -f "$T/manifest.saved" ]; then mv -f "$T/manifest.saved" "$MANIFEST"; else rm -f "$MANIFEST"; fi
    rm -rf "$T"
}
[ -f "$MANIFEST" ] && cp -p "$MANIFEST" "$T/manifest.saved"
trap cleanup EXIT
R=$T/root

cmake --install "$BUILD" --prefix "$R" >"$T/install.log" 2>&1 || { cat "$T/install.log"; fail "cmake --install"; }

# --- what is there, and what is not ---
LIB=$(sed -n 's/^libdir=\${prefix}\///p' "$R"/lib*/pkgconfig/ferry.pc 2>/dev/null | head -1)
[ -n "$LIB" ] || fail "no ferry.pc under $R/lib*/pkgconfig"
for f in "bin/ferry" "$LIB/libferry.a" "$LIB/libferry.so" "$LIB/libferry.so.0" \
    "include/ferry/ferry.h" "include/ferry/msg.h" "$LIB/cmake/ferry/ferry-config.cmake" \
    "$LIB/cmake/ferry/ferry-config-version.cmake" "$LIB/cmake/ferry/ferry-targets.cmake" \
    "share/man/man1/ferry.1.gz" "share/man/man1/ferry-pub.1.gz" "share/doc/ferry/README.md"; do
    [ -e "$R/$f" ] || fail "$f is not installed"
done
[ "$(readlink "$R/$LIB/libferry.so.0")" = "$(basename "$(ls "$R/$LIB"/libferry.so.0.*)")" ] ||
    fail "libferry.so.0 does not point at the versioned library"
soname=$(readelf -d "$R/$LIB/libferry.so" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[ "$soname" = libferry.so.0 ] || fail "soname is '$soname', want libferry.so.0"
unwanted=$(cd "$R" && find . \( -name '*_test' -o -name 'camera_pub' -o -name 'consumer' \
    -o -name 'fusion' -o -name '*bridge*.a' -o -name 'libferry_testutil*' -o -name '*.c' \) -print)
[ -z "$unwanted" ] || fail "installed but not meant to be: $unwanted"
gzip -t "$R"/share/man/man1/*.gz || fail "a man page is not valid gzip"
zcat "$R/share/man/man1/ferry.1.gz" | grep -q '^\.SH NAME' || fail "ferry.1 has no NAME section"
if [ -e "$BUILD/libferry_gpu.so" ]; then
    [ -e "$R/$LIB/pkgconfig/ferry-gpu.pc" ] && [ -e "$R/$LIB/libferry_gpu.so.0" ] &&
        [ -e "$R/include/ferry/gpu.h" ] || fail "the GPU module was built but is not installed"
else
    [ ! -e "$R/include/ferry/gpu.h" ] || fail "gpu.h installed without the GPU module"
fi
echo "ok: the installed tree ($(cd "$R" && find . -type f | wc -l) files)"

DIR=$T/domains
run() { # run NAME PROGRAM: runs a consumer in a fresh domain root
    rm -rf "$DIR"
    "${@:2}" "$DIR" >"$T/$1.log" 2>&1 || { cat "$T/$1.log"; fail "$1 failed"; }
    echo "ok: $1: $(cat "$T/$1.log")"
}
needed() { readelf -d "$1" | grep -c 'NEEDED.*libferry'; }

# --- pkg-config ---
export PKG_CONFIG_PATH=$R/$LIB/pkgconfig
[ "$(pkg-config --modversion ferry)" = "$(sed -n 's/^Version: //p' "$PKG_CONFIG_PATH/ferry.pc")" ] ||
    fail "pkg-config does not find ferry.pc"
pkg-config --static --libs ferry | grep -q -- -pthread || fail "--static lists no private libs"
# shellcheck disable=SC2046
"$CC" -std=c11 -Wall -Wextra -Werror -o "$T/pc_shared" "$SRC/tests/consumer/consumer.c" \
    $(pkg-config --cflags --libs ferry) || fail "build through pkg-config (shared)"
[ "$(needed "$T/pc_shared")" = 1 ] || fail "pc_shared does not load libferry.so.0"
run pkg-config-shared env LD_LIBRARY_PATH="$R/$LIB" "$T/pc_shared"
# Static: the archive by name, since -lferry finds the .so first.
# shellcheck disable=SC2046
"$CC" -std=c11 -Wall -Wextra -Werror -o "$T/pc_static" "$SRC/tests/consumer/consumer.c" \
    $(pkg-config --static --cflags --libs ferry | sed 's/-lferry\b/-l:libferry.a/') ||
    fail "build through pkg-config (static)"
[ "$(needed "$T/pc_static")" = 0 ] || fail "pc_static loads libferry"
run pkg-config-static "$T/pc_static"

# --- find_package(ferry CONFIG) ---
cmake -S "$SRC/tests/consumer" -B "$T/cmake" -DCMAKE_PREFIX_PATH="$R" -DCMAKE_C_COMPILER="$CC" \
    >"$T/cmake.log" 2>&1 || { cat "$T/cmake.log"; fail "find_package(ferry CONFIG)"; }
grep -q "from $R/" "$T/cmake.log" || { cat "$T/cmake.log"; fail "ferry was not found under $R"; }
cmake --build "$T/cmake" >"$T/build.log" 2>&1 || { cat "$T/build.log"; fail "build with CMake"; }
[ "$(needed "$T/cmake/consumer_shared")" = 1 ] || fail "consumer_shared does not load libferry.so.0"
[ "$(needed "$T/cmake/consumer_static")" = 0 ] || fail "consumer_static loads libferry"
run cmake-shared env LD_LIBRARY_PATH="$R/$LIB" "$T/cmake/consumer_shared"
run cmake-static "$T/cmake/consumer_static"
if [ -e "$BUILD/libferry_gpu.so" ] && command -v nvcc >/dev/null; then
    grep -q "GPU targets: TRUE" "$T/cmake.log" || fail "ferry::gpu missing from the CMake package"
    echo "ok: ferry::gpu is in the CMake package"
fi

# --- rmw_ferry_cpp in the prefix, as `make install PREFIX=/opt/ros/humble` puts it ---
# Where the build made it (a ROS 2 was found): the library and its ament index entries under the
# prefix, libferry found beside it (not in the build tree), and an rclcpp talker and listener
# that find the RMW through that prefix alone (the build tree is not on AMENT_PREFIX_PATH).
RMW_DIR=$(sed -n 's/^rmw_DIR:[A-Z]*=//p' "$BUILD/CMakeCache.txt" 2>/dev/null)
if [ -e "$BUILD/ros/lib/librmw_ferry_cpp.so" ] && [ -n "$RMW_DIR" ] && [ -x "$BUILD/tests/rmw_node" ]; then
    ROS=$(cd "$RMW_DIR/../../.." && pwd)
    for f in lib/librmw_ferry_cpp.so share/rmw_ferry_cpp/package.xml \
        share/ament_index/resource_index/packages/rmw_ferry_cpp \
        share/ament_index/resource_index/rmw_typesupport/rmw_ferry_cpp; do
        [ -e "$R/$f" ] || fail "rmw_ferry_cpp: $f is not installed"
    done
    where=$(ldd "$R/lib/librmw_ferry_cpp.so" | sed -n 's/.*libferry.so.0 => \([^ ]*\).*/\1/p')
    [ "$where" = "$(cd "$R/$LIB" && pwd)/libferry.so.0" ] ||
        fail "the installed rmw_ferry_cpp loads libferry from '$where', not from the prefix"
    (
        set +u
        # shellcheck disable=SC1091
        AMENT_TRACE_SETUP_FILES= . "$ROS/setup.sh"
        set -u
        export AMENT_PREFIX_PATH=$R:$AMENT_PREFIX_PATH RMW_IMPLEMENTATION=rmw_ferry_cpp
        export FERRY_DIR=$T/ros-domains ROS_DOMAIN_ID=$((RANDOM % 100 + 100)) ROS_LOG_DIR=$T/roslog
        pre=
        ldd "$ROS/lib/librcl.so" | grep -q librmw_cyclonedds_cpp && pre=$R/lib/librmw_ferry_cpp.so
        LD_PRELOAD=$pre timeout 60 "$BUILD/tests/rmw_node" listener /installed 10 50 >"$T/l.log" 2>&1 &
        l=$!
        LD_PRELOAD=$pre timeout 60 "$BUILD/tests/rmw_node" talker /installed 10 20 >"$T/t.log" 2>&1
        wait $l || { cat "$T/t.log" "$T/l.log"; exit 1; }
        grep -q "received 10 of 10" "$T/l.log" || { cat "$T/l.log"; exit 1; }
    ) || fail "an rclcpp talker and listener on the installed rmw_ferry_cpp"
    echo "ok: rmw_ferry_cpp installed as a ROS 2 package; rclcpp nodes run on it from the prefix"
fi

# --- make uninstall's script: every file gone, and the directories the install made ---
cmake -DMANIFEST="$MANIFEST" -P "$SRC/cmake/uninstall.cmake" >"$T/uninstall.log" 2>&1 ||
    { cat "$T/uninstall.log"; fail "uninstall"; }
left=$(find "$R" ! -type d)
[ -z "$left" ] || fail "uninstall left files: $left"
for d in "$LIB/cmake" "$LIB/pkgconfig" include/ferry share/doc/ferry; do
    [ ! -e "$R/$d" ] || fail "uninstall left $d"
done
echo "ok: uninstall removed every file, and $LIB/cmake, $LIB/pkgconfig"
echo "PASS"
