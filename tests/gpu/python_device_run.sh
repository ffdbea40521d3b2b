#!/usr/bin/env bash
# Builds ferry with the GPU module on a machine with an NVIDIA GPU and runs the Python package's
# tests: python_torch_gpu (tests/gpu/python_torch_test.py: device tensors of a C publisher into
# torch.from_dlpack and cupy.from_dlpack, no copy), python_gpu_pub (tests/gpu/
# python_gpu_pub_test.py: device tensors published from Python with ferry.GpuPublisher, taken in
# another Python process), python_host_gpu (tests/gpu/python_host_gpu_test.py: host images
# read on the GPU in place and copied with Sample.cuda()) and python_test (the pytest suite, Sync included). Run from the repository root; needs CUDA, PyTorch with CUDA and, for its part, CuPy
# in the python3 the build finds (PYTHON=... to choose another).
#
# Output in $OUT (default ./gpu-out): build.log, python-tests.log (nvidia-smi, the versions,
# then ctest -V) and a summary at the end of python-tests.log. Exit status 0 only when every
# test passed (a skipped GPU test is a failure here: this script is for a GPU machine).
#
#   BUILD=dir   build directory, configured afresh (default: build-gpu-python)
set -u

OUT=${OUT:-$PWD/gpu-out}
BUILD=${BUILD:-build-gpu-python}
PYTHON=${PYTHON:-$(command -v python3)}
mkdir -p "$OUT"
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
generator=(-G Ninja)
command -v ninja >/dev/null 2>&1 || generator=()

(
  echo "== $(date -u +%FT%TZ) configure and build in $BUILD ($PYTHON)"
  rm -rf "$BUILD"
  cmake -S . -B "$BUILD" "${generator[@]}" -DFERRY_GPU=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
        -DFERRY_PYTHON=ON -DPython3_EXECUTABLE="$PYTHON" -DFERRY_WERROR=OFF \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo
  rc=$?
  if [ $rc -eq 0 ]; then
    timeout 400 cmake --build "$BUILD" -j "$(nproc)" --target ferry_python tensor_gpu_pub \
      python_peer ferry_cli
    rc=$?
  fi
  echo "== build exit status $rc"
  exit $rc
) > "$OUT/build.log" 2>&1
build_rc=$?
tail -n 3 "$OUT/build.log"

{
  echo "== nvidia-smi"
  nvidia-smi 2>&1 || echo "(nvidia-smi failed)"
  echo "== versions"
  "$PYTHON" - <<'EOF' 2>&1
import sys
print("python", sys.version.split()[0])
for name in ("torch", "cupy", "numpy", "pytest"):
    try:
        m = __import__(name)
        extra = ""
        if name == "torch":
            extra = " cuda %s, available %s" % (m.version.cuda, m.cuda.is_available())
        print(name, m.__version__ + extra)
    except Exception as e:  # noqa: BLE001
        print(name, "missing:", e)
EOF
  if [ $build_rc -eq 0 ]; then
    echo "== $(date -u +%FT%TZ) ctest -R 'python' -V"
    (cd "$BUILD" && timeout 400 ctest -R "python" -V --output-on-failure --timeout 120)
    echo "== ctest exit status $?"
  else
    echo "== build failed: no tests run (see build.log)"
  fi
} > "$OUT/python-tests.log" 2>&1

status=0
summary=()
for t in python_torch_gpu python_gpu_pub python_host_gpu python_test; do
  line=$(grep -E "Test +#[0-9]+: $t " "$OUT/python-tests.log" | tail -n 1)
  case $line in
    *Passed*) summary+=("$t: passed") ;;
    *Skipped*|*"Not Run"*) summary+=("$t: SKIPPED (see python-tests.log)"); status=1 ;;
    "") summary+=("$t: NOT RUN (see build.log / python-tests.log)"); status=1 ;;
    *) summary+=("$t: FAILED (see python-tests.log)"); status=1 ;;
  esac
done
{
  echo
  echo "== summary"
  [ $build_rc -eq 0 ] && echo "build: ok" || echo "build: FAILED ($build_rc, see build.log)"
  printf '%s\n' "${summary[@]}"
} | tee -a "$OUT/python-tests.log"
[ $build_rc -eq 0 ] || status=1
exit $status
