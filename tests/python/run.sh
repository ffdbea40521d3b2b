#!/bin/bash
# Runs the Python package's tests (pytest) in a private domain directory.
#   run.sh PYTHON PACKAGE_DIR FERRY_CLI PEER [TENSOR_GPU_PUB]
# PYTHON is the interpreter the build was configured with; when it lacks pytest or NumPy the
# system's python3 is tried. Exit 77 (skipped) when no interpreter has both. TENSOR_GPU_PUB
# (tests/gpu's publisher of device tensors, with the GPU module) is for the device example of
# docs/python.md.
set -u
here=$(cd "$(dirname "$0")" && pwd)
configured=$1 package=$2 cli=$3 peer=$4 gpu_pub=${5:-}
python=""
for p in "$configured" python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null 2>&1 &&
     "$p" -c 'import sys, numpy, pytest; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    python=$p
    break
  fi
done
if [ -z "$python" ]; then
  echo "python_test: no Python 3.11+ with pytest and NumPy (python3-pytest, python3-numpy): skipped"
  exit 77
fi
dir=$(mktemp -d /tmp/ferry-python-test.XXXXXX)
trap 'rm -rf "$dir"' EXIT
chmod 700 "$dir"
export FERRY_DIR=$dir FERRY_DOMAIN=0 FERRY_CLI=$cli FERRY_PY_PEER=$peer
[ -n "$gpu_pub" ] && export FERRY_TENSOR_GPU_PUB=$gpu_pub
export PYTHONPATH=$package${PYTHONPATH:+:$PYTHONPATH}
export PYTHONDONTWRITEBYTECODE=1
echo "python_test: $("$python" -c 'import sys; print(sys.executable, sys.version.split()[0])')"
"$python" -m pytest -q -p no:cacheprovider "$here"
