#!/usr/bin/env bash
# The examples of README.md, end to end, in a private domain directory (FERRY_DIR):
#   camera_pub + consumer: the consumer gets every frame, intact and uncopied (and so from
#   camera_pub_cpp, the C++ one, when it was built);
#   camera_pub + lidar_pub + fusion: the synchroniser pairs frames within 20 ms;
#   camera_pub + gpu_consumer (when built): the GPU's sum of every frame matches the CPU's and
#   the cache allocates no device memory per frame. Without a GPU that part is skipped.
#   python/gpu_camera_pub.py + python/gpu_consumer.py (with the Python package): device frames
#   filled by PyTorch in one process, every pixel checked in the other, no copy. Skipped without
#   the GPU module, a device or PyTorch.
# usage: examples_test.sh EXAMPLES_DIR [GPU_CONSUMER [PYTHON PACKAGE_DIR]]
# Exit status: 0 passed, 1 failed, 77 skipped (examples not built).
set -u

DIR=${1:-}
GPU=${2:-}
PYTHON=${3:-}
PYPKG=${4:-}
SRC=$(cd "$(dirname "$0")/../examples" && pwd)
LIMIT=20 # seconds each example may run
for p in camera_pub consumer lidar_pub fusion; do
    if [ ! -x "$DIR/$p" ]; then
        echo "examples_test: skipped, no $p in '$DIR'"
        exit 77
    fi
done

T=$(mktemp -d /tmp/ferry-examples-test-XXXXXX)
export FERRY_DIR=$T/root
OUT=$T/out
mkdir -p "$OUT"
BG=()

cleanup() {
    local p
    for p in "${BG[@]}"; do
        kill -KILL "$p" 2>/dev/null
    done
    wait 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT

fail() {
    local f
    echo "examples_test.sh:${BASH_LINENO[0]}: FAIL: $*" >&2
    for f in "$OUT"/*; do
        [ -s "$f" ] || continue
        echo "---- $(basename "$f")" >&2
        tail -n 15 "$f" >&2
    done
    exit 1
}

# bg NAME CMD...: starts CMD in the background, output in $OUT/NAME.{out,err}.
bg() {
    local name=$1
    shift
    timeout "$LIMIT" "$@" >"$OUT/$name.out" 2>"$OUT/$name.err" &
    BG+=($!)
}
# fg NAME CMD...: runs CMD, output in $OUT/NAME.{out,err}; sets RC.
fg() {
    local name=$1
    shift
    timeout "$LIMIT" "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"
    RC=$?
}
# drop_bg: the last background program is not needed (its consumer skipped): killed, reaped.
drop_bg() {
    kill -KILL "${BG[-1]}" 2>/dev/null
    wait "${BG[-1]}" 2>/dev/null
    unset 'BG[-1]'
}

# wait_bg NAME: waits for the last background process, fails unless it exited 0.
wait_bg() {
    wait "${BG[-1]}"
    local rc=$?
    unset 'BG[-1]'
    [ $rc -eq 0 ] || fail "$1 exited $rc"
}

# --- publish and subscribe: 30 frames at 30 fps, every one received ---
N=30
bg pub "$DIR/camera_pub" /tour/image "$N"
fg consumer "$DIR/consumer" /tour/image "$N"
[ "$RC" -eq 0 ] || fail "consumer exited $RC"
wait_bg camera_pub
lines=$(grep -c '^frame [0-9]*: 1280x720 rgb8 frame_id=camera stamp=[0-9]*\.[0-9]\{9\}$' \
        "$OUT/consumer.out")
[ "$lines" -eq "$N" ] || fail "consumer printed $lines frame lines, expected $N"
seqs=$(sed -n 's/^frame \([0-9]*\):.*/\1/p' "$OUT/consumer.out" | tr '\n' ' ')
[ "$seqs" = "$(seq -s ' ' 1 "$N") " ] || fail "sequences '$seqs', expected 1..$N in order"
grep -q "^consumer: $N frames, $((N * 1280 * 720 * 3)) pixel bytes, 0 dropped, 0 bytes copied$" \
    "$OUT/consumer.out" || fail "consumer summary wrong"
grep -q "^camera_pub: published $N frames, 0 dropped, 0 bytes copied$" "$OUT/pub.out" ||
    fail "camera_pub summary wrong"

# --- the same stream from the C++ camera_pub (built with a C++ compiler only) ---
if [ -x "$DIR/camera_pub_cpp" ]; then
    bg cpp "$DIR/camera_pub_cpp" /tour/cpp/image "$N"
    fg cppconsumer "$DIR/consumer" /tour/cpp/image "$N"
    [ "$RC" -eq 0 ] || fail "consumer of camera_pub_cpp exited $RC"
    wait_bg camera_pub_cpp
    lines=$(grep -c '^frame [0-9]*: 1280x720 rgb8 frame_id=camera stamp=[0-9]*\.[0-9]\{9\}$' \
            "$OUT/cppconsumer.out")
    [ "$lines" -eq "$N" ] || fail "consumer of camera_pub_cpp printed $lines frame lines"
    grep -q "^consumer: $N frames, $((N * 1280 * 720 * 3)) pixel bytes, 0 dropped, 0 bytes copied$" \
        "$OUT/cppconsumer.out" || fail "consumer summary of camera_pub_cpp wrong"
    grep -q "^camera_pub_cpp: published $N frames, 0 dropped, 0 bytes copied$" "$OUT/cpp.out" ||
        fail "camera_pub_cpp summary wrong"
fi

# --- synchronize: a 30 fps camera and a 10 Hz lidar, paired within 20 ms ---
P=5
bg cam "$DIR/camera_pub" /tour/fusion/image 60
bg lidar "$DIR/lidar_pub" /tour/fusion/points 20
fg fusion "$DIR/fusion" /tour/fusion/image /tour/fusion/points "$P"
[ "$RC" -eq 0 ] || fail "fusion exited $RC"
pairs=$(grep -c '^pair [0-9]*: image [0-9]* + cloud [0-9]*, skew [0-9.]* ms$' "$OUT/fusion.out")
[ "$pairs" -eq "$P" ] || fail "fusion printed $pairs pairs, expected $P"
awk '/^pair /{ if ($NF != "ms" || $(NF-1) + 0 > 20) bad = 1 } END { exit bad }' \
    "$OUT/fusion.out" || fail "a pair's skew exceeds 20 ms"
# Images and clouds both move forward from pair to pair.
awk '/^pair /{ i = $4 + 0; c = $7 + 0; if (n++ && (i <= li || c <= lc)) bad = 1; li = i; lc = c }
     END { exit bad }' "$OUT/fusion.out" || fail "pairs are not in order"
grep -q "^fusion: $P pairs, max skew [0-9.]* ms" "$OUT/fusion.out" || fail "fusion summary missing"
wait_bg lidar_pub
wait_bg camera_pub

# Every example cleaned up after itself: no socket or status file is left in the domain.
left=$(find "$FERRY_DIR" -type s -o -type f -name '*.status' | wc -l)
[ "$left" -eq 0 ] || fail "$left sockets or status files left in $FERRY_DIR"

# --- GPU: every frame's sum on the device matches the CPU's; no device allocation per frame ---
if [ -n "$GPU" ]; then
    [ -x "$GPU" ] || fail "no gpu_consumer at '$GPU'"
    bg gpucam "$DIR/camera_pub" /tour/gpu/image "$N"
    fg gpu "$GPU" /tour/gpu/image "$N"
    if [ "$RC" -eq 77 ]; then
        echo "examples_test: gpu_consumer skipped: $(cat "$OUT/gpu.err")"
        drop_bg
    else
        [ "$RC" -eq 0 ] || fail "gpu_consumer exited $RC"
        wait_bg camera_pub
        ok=$(grep -c '^frame [0-9]*: 1280x720 rgb8, GPU sum [0-9]* matches the CPU$' "$OUT/gpu.out")
        [ "$ok" -eq "$N" ] || fail "gpu_consumer: $ok of $N frames matched"
        # Two buffers (frame, result) allocated once, every later frame served by reuse.
        grep -q "^gpu_consumer: $N frames, 2 device allocations, $((N - 1)) reuses$" \
            "$OUT/gpu.out" || fail "gpu_consumer cache summary wrong"
    fi
fi

# --- GPU from Python: frames filled by torch in the publisher's device memory, checked in the
# consumer's process on its GPU, no copy ---
if [ -n "$PYTHON" ]; then
    LIMIT=120 # importing torch and starting CUDA take seconds on a cold machine
    export PYTHONPATH=$PYPKG${PYTHONPATH:+:$PYTHONPATH}
    bg pygpucam "$PYTHON" "$SRC/python/gpu_camera_pub.py" /tour/pygpu/image "$N"
    fg pygpu "$PYTHON" "$SRC/python/gpu_consumer.py" /tour/pygpu/image "$N"
    if [ "$RC" -eq 77 ]; then
        echo "examples_test: python/gpu_consumer.py skipped: $(cat "$OUT/pygpu.err")"
        drop_bg
    else
        [ "$RC" -eq 0 ] || fail "python/gpu_consumer.py exited $RC"
        wait_bg python/gpu_camera_pub.py
        ok=$(grep -c '^frame [0-9]*: 720x1280x3 uint8 on cuda:0, every pixel [0-9]*, zero copy$' \
             "$OUT/pygpu.out")
        [ "$ok" -eq "$N" ] || fail "python/gpu_consumer.py: $ok of $N frames right"
        grep -q "^gpu_camera_pub: published $N frames, [1-9][0-9]* device allocations$" \
            "$OUT/pygpucam.out" || fail "python/gpu_camera_pub.py summary wrong"
    fi
fi

echo "examples_test: passed"
