#!/bin/bash
# Builds ROS 2 packages from source against /opt/ros/humble with plain CMake, one after the other
# in the order given, into an install prefix: by default the message packages the type support
# tests need (test_interface_files, then test_msgs); later callers add more (googletest's vendor
# packages, Mimick, test_rmw_implementation, ...).
#
# usage: build_test_msgs.sh SRC[:SRC...] PREFIX [PACKAGE...]
#   SRC      a folder holding ROS 2 sources (searched for PACKAGE/package.xml at any depth), or a
#            .tar.zst / .tar.gz / .tar of such sources (unpacked once under PREFIX/.src); several
#            joined with ':' are searched in order
#   PREFIX   the install prefix (created); its build folders are kept under PREFIX/.build
#   PACKAGE  names in dependency order (default: test_interface_files test_msgs)
# environment:
#   ROS_DISTRO_PREFIX  the ROS 2 install built against (default /opt/ros/humble)
#   JOBS               make jobs (default 2)
#   CMAKE_ARGS         extra arguments for each package's configure (default -DBUILD_TESTING=OFF)
#   FORCE=1            rebuild packages whose sources have not changed
#
# Idempotent: a package whose source files (names, sizes, times) match what was last installed
# is skipped; another run after a change rebuilds it incrementally in its kept build folder.
set -euo pipefail

if [ $# -lt 2 ]; then
  sed -n '2,20p' "$0" >&2
  exit 2
fi
SRCS=$1
mkdir -p "$2"
PREFIX=$(cd "$2" && pwd)
shift 2
PACKAGES=("$@")
if [ ${#PACKAGES[@]} -eq 0 ]; then
  PACKAGES=(test_interface_files test_msgs)
fi
ROS=${ROS_DISTRO_PREFIX:-/opt/ros/humble}
JOBS=${JOBS:-2}
CMAKE_ARGS=${CMAKE_ARGS:--DBUILD_TESTING=OFF}

if [ ! -f "$ROS/setup.sh" ]; then
  echo "build_test_msgs.sh: no ROS 2 at $ROS (install it with /work/shared/ros2/install.sh)" >&2
  exit 1
fi

# The rosidl generators need Debian's python3 (it has what they import): no other Python (a
# pyenv's shims) may be found first, by PATH or by CMake's search for any python3.x.
PATH=$(echo "$PATH" | tr ':' '\n' | grep -v pyenv | paste -sd:)
export PATH=/usr/bin:$PATH
set +u
# shellcheck disable=SC1091
. "$ROS/setup.sh"
set -u
export AMENT_PREFIX_PATH="$PREFIX:${AMENT_PREFIX_PATH:-}"
export CMAKE_PREFIX_PATH="$PREFIX:${CMAKE_PREFIX_PATH:-}"
export LD_LIBRARY_PATH="$PREFIX/lib:${LD_LIBRARY_PATH:-}"
export PYTHONPATH="$PREFIX/local/lib/python3/dist-packages:${PYTHONPATH:-}"

# Source folders: tarballs are unpacked once (keyed by their size and time).
dirs=()
IFS=':' read -r -a srclist <<< "$SRCS"
for s in "${srclist[@]}"; do
  if [ -d "$s" ]; then
    dirs+=("$(cd "$s" && pwd)")
  elif [ -f "$s" ]; then
    key=$(stat -c '%s-%Y' "$s")
    dest="$PREFIX/.src/$(basename "$s")-$key"
    if [ ! -f "$dest/.unpacked" ]; then
      rm -rf "$dest"
      mkdir -p "$dest"
      case "$s" in
        *.tar.zst) tar -I zstd -xf "$s" -C "$dest" ;;
        *.tar.gz | *.tgz) tar -xzf "$s" -C "$dest" ;;
        *) tar -xf "$s" -C "$dest" ;;
      esac
      touch "$dest/.unpacked"
    fi
    dirs+=("$dest")
  else
    echo "build_test_msgs.sh: no such source folder or archive: $s" >&2
    exit 1
  fi
done

# The folder holding a package.xml whose <name> is $1, searched in the source folders in order.
find_package_dir() {
  local d f
  for d in "${dirs[@]}"; do
    while IFS= read -r f; do
      if grep -q "<name>$1</name>" "$f"; then
        dirname "$f"
        return 0
      fi
    done < <(find "$d" -name package.xml -not -path '*/.build/*' | sort)
  done
  return 1
}

mkdir -p "$PREFIX/.build" "$PREFIX/.stamps"
for pkg in "${PACKAGES[@]}"; do
  if ! src=$(find_package_dir "$pkg"); then
    echo "build_test_msgs.sh: package $pkg is in none of: ${dirs[*]}" >&2
    exit 1
  fi
  stamp=$( (cd "$src" && find . -type f -printf '%p %s %T@\n' | sort; echo "$CMAKE_ARGS") |
    sha1sum | cut -d' ' -f1)
  if [ "${FORCE:-0}" != 1 ] && [ -f "$PREFIX/.stamps/$pkg" ] &&
    [ "$(cat "$PREFIX/.stamps/$pkg")" = "$stamp" ]; then
    echo "build_test_msgs.sh: $pkg is up to date"
    continue
  fi
  echo "build_test_msgs.sh: building $pkg from $src"
  bld="$PREFIX/.build/$pkg"
  # shellcheck disable=SC2086
  cmake -S "$src" -B "$bld" -DCMAKE_INSTALL_PREFIX="$PREFIX" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DPython3_EXECUTABLE=/usr/bin/python3 -DPYTHON_EXECUTABLE=/usr/bin/python3 $CMAKE_ARGS > "$bld.configure.log" 2>&1 ||
    { tail -40 "$bld.configure.log" >&2; exit 1; }
  cmake --build "$bld" -j "$JOBS" > "$bld.build.log" 2>&1 ||
    { tail -60 "$bld.build.log" >&2; exit 1; }
  cmake --install "$bld" > "$bld.install.log" 2>&1 || { tail -20 "$bld.install.log" >&2; exit 1; }
  echo "$stamp" > "$PREFIX/.stamps/$pkg"
done
echo "build_test_msgs.sh: ${PACKAGES[*]} installed in $PREFIX"
