#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: builds ferry's Python package with the GPU module and runs
# bench/gpu/e2e.py (camera process to a PyTorch model, every variant, without and with MPS), then
# its device-frame consumer under compute-sanitizer memcheck (are frames held at the end?).
# Output in $OUT: build.log, e2e.log, e2e.csv, e2e-memcheck.log.
set -u
OUT=${OUT:-$PWD/gpu-out}
BUILD=${BUILD:-build-gpu-python}
FRAMES=${FRAMES:-150}
mkdir -p "$OUT"
[ -x /usr/local/cuda/bin/nvcc ] && export PATH=/usr/local/cuda/bin:$PATH
generator=(-G Ninja)
command -v ninja >/dev/null 2>&1 || generator=()
if [ ! -d "$BUILD/python/ferry" ]; then
    { cmake -S . -B "$BUILD" "${generator[@]}" -DFERRY_GPU=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
        -DFERRY_PYTHON=ON -DPython3_EXECUTABLE="$(command -v python3)" -DFERRY_WERROR=OFF \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
      timeout 400 cmake --build "$BUILD" -j "$(nproc)" --target ferry_python; } >"$OUT/build.log" 2>&1 ||
        { tail -20 "$OUT/build.log"; exit 1; }
fi
export PYTHONPATH=$PWD/$BUILD/python
python3 -c "import torch, ferry; print('torch', torch.__version__, 'ferry GPU', ferry.HAVE_GPU)" 2>&1 | tee "$OUT/e2e.log"
[ -n "${SKIP_E2E:-}" ] || timeout 420 python3 bench/gpu/e2e.py --frames "$FRAMES" --mps --csv "$OUT/e2e.csv" 2>&1 | tee -a "$OUT/e2e.log"
if command -v compute-sanitizer >/dev/null 2>&1; then
    # device-take: the binding alone; device-kernel and -copy: with PyTorch. E2E_DIAG: the
    # GpuSubscriber's counters after every frame.
    E2E_DIAG=1 E2E_CONSUMER_WRAP="compute-sanitizer --tool memcheck --print-limit 20" timeout 400 \
        python3 bench/gpu/e2e.py --frames 40 --variants device-take,device-kernel,device-copy \
        >"$OUT/e2e-memcheck.log" 2>&1
    tail -n 8 "$OUT/e2e-memcheck.log"
fi
