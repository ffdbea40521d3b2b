#!/usr/bin/env bash
# The Debian packages (make deb), built from this build into a private directory and checked
# without installing anything on the machine: each package's control fields (Depends above all)
# and contents with dpkg-deb --info / --contents, then libferry0 and libferry-dev unpacked
# (dpkg-deb -x) into a private root and tests/consumer/consumer.c built against it through
# pkg-config and find_package(ferry CONFIG), and run.
# usage: deb_test.sh BUILD_DIR SOURCE_DIR
# Exit status: 0 passed, 1 failed, 77 skipped (no dpkg-deb, dpkg-shlibdeps, cpack or compiler).
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
# CPack's DEB generator runs `file` on every file it packs.
for tool in dpkg-deb dpkg-shlibdeps cpack pkg-config cc file; do
    command -v "$tool" >/dev/null || skip "needs $tool"
done
[ -f "$BUILD/CPackConfig.cmake" ] || skip "no CPackConfig.cmake in $BUILD"

T=$(mktemp -d /tmp/ferry-deb-test.XXXXXX) || fail "mktemp"
trap 'rm -rf "$T"' EXIT
(cd "$BUILD" && cpack -G DEB -B "$T/pkg") >"$T/cpack.log" 2>&1 || { cat "$T/cpack.log"; fail "cpack"; }

deb() { ls "$T/pkg/$1"_*.deb 2>/dev/null | head -1; }
field() { dpkg-deb -f "$1" "$2"; }
has() { # has PACKAGE PATH...: the package holds each path (a file or a link)
    local p=$1 f
    shift
    for f in "$@"; do
        grep -qE "^\./$f( -> .*)?\$" "$T/$p.contents" || fail "$p has no $f"
    done
}
PACKAGES="libferry0 libferry-dev ferry"
[ -e "$BUILD/python/ferry/_ferry.abi3.so" ] && PACKAGES="$PACKAGES python3-ferry"
for p in $PACKAGES; do
    f=$(deb $p)
    [ -n "$f" ] || { ls "$T/pkg"; fail "no package $p"; }
    dpkg-deb --info "$f" >/dev/null || fail "dpkg-deb --info $f"
    dpkg-deb --contents "$f" | awk '{ $1 = $2 = $3 = $4 = $5 = ""; sub(/^ +/, ""); print }' \
        >"$T/$p.contents"
    echo "ok: $p $(field "$f" Version), $(stat -c %s "$f") bytes, Depends: $(field "$f" Depends)"
    [ "$(field "$f" Package)" = "$p" ] || fail "$f is package '$(field "$f" Package)'"
    [ -n "$(field "$f" Description)" ] && [ -n "$(field "$f" Maintainer)" ] ||
        fail "$p lacks a Description or a Maintainer"
done
V=$(field "$(deb libferry0)" Version)
LIB=usr/lib
has libferry0 "$LIB/libferry.so.0" "$LIB/libferry.so.0\.[0-9.]+"
has libferry-dev "usr/include/ferry/ferry.h" "$LIB/libferry.so" "$LIB/libferry.a" \
    "$LIB/pkgconfig/ferry.pc" "$LIB/cmake/ferry/ferry-config.cmake" "usr/share/doc/ferry/README.md"
has ferry "usr/bin/ferry" "usr/share/man/man1/ferry.1.gz" "usr/share/man/man1/ferry-pub.1.gz"
if [ -e "$BUILD/python/ferry/_ferry.abi3.so" ]; then
    # Where Debian's python3 finds version-independent packages, and abi3 modules.
    has python3-ferry "usr/lib/python3/dist-packages/ferry/__init__.py" \
        "usr/lib/python3/dist-packages/ferry/_ferry\.abi3\.so"
    python_pkg=1
fi
if [ -e "$BUILD/libferry_gpu.so" ]; then
    has libferry0 "$LIB/libferry_gpu.so.0"
    has libferry-dev "$LIB/pkgconfig/ferry-gpu.pc" "usr/include/ferry/gpu.h"
fi
# The library's files are in libferry0 only; the development files in libferry-dev only.
grep -qE '\.(h|a|pc)$|libferry\.so( |$)' "$T/libferry0.contents" && fail "libferry0 holds development files"
grep -qE '^[^ ]*libferry(_gpu)?\.so\.0' "$T/libferry-dev.contents" && fail "libferry-dev holds the shared library"
grep -qE '_test|examples' "$T"/*.contents && fail "a package holds a test or an example"

dep_has() { # dep_has PACKAGE TEXT: the package's Depends names TEXT
    field "$(deb "$1")" Depends | tr ',' '\n' | sed 's/^ *//' | grep -qxF "$2" ||
        fail "$1 Depends '$(field "$(deb "$1")" Depends)' lacks '$2'"
}
dep_has libferry-dev "libferry0 (= $V)"
dep_has ferry "libferry0 (= $V)"
if [ -n "${python_pkg:-}" ]; then
    dep_has python3-ferry "libferry0 (= $V)"
    [ "$(field "$(deb python3-ferry)" Recommends)" = python3-numpy ] ||
        fail "python3-ferry Recommends '$(field "$(deb python3-ferry)" Recommends)', not python3-numpy"
fi
field "$(deb libferry0)" Depends | grep -q 'libc6 (>= ' || fail "libferry0 does not depend on libc6"
field "$(deb ferry)" Depends | grep -q 'libc6 (>= ' || fail "ferry does not depend on libc6"
# `ferry record` and `ferry play`: MCAP chunks' CRCs and compression.
for lib in zlib1g liblz4-1 libzstd1; do
    field "$(deb ferry)" Depends | grep -q "$lib" || fail "ferry does not depend on $lib"
done
# `ferry view` links libwebsockets: the command's package must bring it.
if "$BUILD/ferry" view --help >/dev/null 2>&1; then
    field "$(deb ferry)" Depends | grep -q 'libwebsockets[0-9]* ' || fail "ferry does not depend on libwebsockets"
fi
dpkg-deb --ctrl-tarfile "$(deb libferry0)" | tar -xO ./shlibs 2>/dev/null | grep -q "^libferry 0 libferry0" ||
    fail "libferry0 has no shlibs entry for libferry.so.0"
echo "ok: contents and Depends"

# Built against the unpacked packages only.
R=$T/root
dpkg-deb -x "$(deb libferry0)" "$R" && dpkg-deb -x "$(deb libferry-dev)" "$R" || fail "dpkg-deb -x"
export PKG_CONFIG_PATH=$R/$LIB/pkgconfig PKG_CONFIG_SYSROOT_DIR=$R
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -Werror -o "$T/pc" "$SRC/tests/consumer/consumer.c" \
    $(pkg-config --cflags --libs ferry) || fail "build through pkg-config"
LD_LIBRARY_PATH=$R/$LIB "$T/pc" "$T/d1" || fail "the consumer built through pkg-config"
unset PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR
cmake -S "$SRC/tests/consumer" -B "$T/cmake" -DCMAKE_PREFIX_PATH="$R/usr" >"$T/cmake.log" 2>&1 &&
    grep -q "from $R/" "$T/cmake.log" || { cat "$T/cmake.log"; fail "find_package(ferry CONFIG)"; }
cmake --build "$T/cmake" >"$T/build.log" 2>&1 || { cat "$T/build.log"; fail "build with CMake"; }
LD_LIBRARY_PATH=$R/$LIB "$T/cmake/consumer_shared" "$T/d2" || fail "consumer_shared"
"$T/cmake/consumer_static" "$T/d3" || fail "consumer_static"
echo "ok: the consumer, built against the unpacked libferry0 and libferry-dev"
echo "PASS"
