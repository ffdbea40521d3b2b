#!/usr/bin/env bash
# The commands a ROS 2 user reaches for, end to end in a private domain directory: echo --json
# (its schema, --field, --data), echo before any publisher, delay, pub --from with PPM, PNG and
# JPEG files checked pixel for pixel, pub --camera-info, the CompressedImage and Imu decoders
# (with cli_types_peer, which publishes them), and topics / info on a directory without a domain.
# usage: cli_ros_test.sh PATH_TO_FERRY [PATH_TO_CLI_TYPES_PEER]
# Exit status: 0 passed, 1 failed, 77 skipped (no ferry binary or no python3).
set -u

FERRY=${1:-}
PEER=${2:-}
if [ -z "$FERRY" ] || [ ! -x "$FERRY" ]; then
    echo "cli_ros_test: skipped, no ferry executable at '$FERRY'"
    exit 77
fi
PYTHON=$(command -v python3 || true)
if [ -z "$PYTHON" ]; then
    echo "cli_ros_test: skipped, python3 is needed to check JSON"
    exit 77
fi

T=$(mktemp -d /tmp/ferry-cli-ros-test-XXXXXX)
export FERRY_DIR=$T/root
export FERRY_DOMAIN=7
OUT=$T/out
IMG=$T/img
mkdir -p "$OUT" "$IMG"
BG=()
LAST=none

cleanup() {
    local p
    for p in "${BG[@]}"; do
        kill -TERM "$p" 2>/dev/null
    done
    wait 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT

fail() {
    echo "cli_ros_test.sh:${BASH_LINENO[0]}: FAIL: $*" >&2
    for f in "$OUT/$LAST.out" "$OUT/$LAST.err" "$OUT/$LAST.pub.err"; do
        [ -s "$f" ] || continue
        echo "---- $(basename "$f")" >&2
        tail -n 10 "$f" >&2
    done
    exit 1
}

run() {
    local name=$1
    shift
    LAST=$name
    timeout 20 "$FERRY" "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"
    RC=$?
}

# echo_pub NAME "ECHO ARGS" "PUB ARGS": starts `ferry echo` first, with no publisher on the topic
# yet, then `ferry pub --wait-subscribers 1`; both must exit 0. Echo's lines in $OUT/NAME.out.
echo_pub() {
    local name=$1 echo_args=$2 pub_args=$3 e
    LAST=$name
    # shellcheck disable=SC2086 # the argument lists are split on purpose
    timeout 20 "$FERRY" echo $echo_args >"$OUT/$name.out" 2>"$OUT/$name.err" &
    e=$!
    BG+=("$e")
    sleep 0.2
    # shellcheck disable=SC2086
    timeout 20 "$FERRY" pub $pub_args --wait-subscribers 1 >"$OUT/$name.pub.out" \
        2>"$OUT/$name.pub.err" ||
        fail "ferry pub $pub_args exited $? (after ferry echo $echo_args started first)"
    wait "$e" || fail "ferry echo $echo_args exited $?"
}

# check NAME PYTHON: runs PYTHON with `lines`, the JSON objects of $OUT/NAME.out, and IMG.
check() {
    "$PYTHON" -c '
import base64, json, os, sys, zlib
lines = [json.loads(l) for l in open(sys.argv[1])]
IMG = sys.argv[2]
exec(sys.argv[3])
' "$OUT/$1.out" "$IMG" "$2" || fail "$1: the JSON check failed"
}

# --- topics and info name a directory without a domain ----------------------------------------
run topics_missing topics
[ "$RC" -eq 1 ] || fail "ferry topics on a missing --dir exited $RC, expected 1"
grep -q "^ferry topics: $FERRY_DIR does not exist" "$OUT/topics_missing.err" ||
    fail "ferry topics does not name the missing directory"
mkdir -m 700 "$T/empty"
run topics_empty topics --dir "$T/empty" --json
[ "$RC" -eq 1 ] || fail "ferry topics on a directory without a domain exited $RC, expected 1"
grep -q "^ferry topics: $T/empty holds no ferry domain" "$OUT/topics_empty.err" ||
    fail "ferry topics does not say the directory holds no domain"
run info_missing info /x
[ "$RC" -eq 1 ] || fail "ferry info on a missing --dir exited $RC, expected 1"
grep -q "^ferry info: $FERRY_DIR does not exist" "$OUT/info_missing.err" ||
    fail "ferry info does not name the missing directory"

# --- usage errors name their option ------------------------------------------------------------
usage_error() {
    local name=$1 pattern=$2
    shift 2
    run "$name" "$@"
    [ "$RC" -eq 2 ] || fail "ferry $*: exit status $RC, expected 2"
    [ "$(wc -l <"$OUT/$name.err")" -eq 1 ] || fail "ferry $*: not a one-line message"
    grep -qE -- "$pattern" "$OUT/$name.err" || fail "ferry $*: message does not match '$pattern'"
}
usage_error delay_window '^ferry delay: --window 0 is out of range: 1\.\.1000000$' \
    delay /t --window 0
usage_error delay_type '^ferry delay: --type ferry/synthetic_frame has no header stamp' \
    delay /t --type ferry/synthetic_frame
usage_error delay_bogus "^ferry delay: unknown option '--bogus'" delay /t --bogus
usage_error delay_missing "^ferry delay: option '--window' needs a value" delay /t --window
usage_error echo_data '^ferry echo: --data needs --json' echo /t --data --timeout 0
usage_error echo_field "^ferry echo: invalid --field 'a\.\.b'" echo /t --field a..b
usage_error echo_next "^ferry echo: option '--domain' needs a value, not the option '--count'" \
    echo /t --domain --count 1
usage_error pub_from_image '^ferry pub: --from and --image cannot be used together' \
    pub /t --from x.png --image 4x4
usage_error pub_from_encoding '^ferry pub: --from and --encoding cannot be used together' \
    pub /t --from x.png --encoding mono8
usage_error pub_camera_info '^ferry pub: --camera-info needs --image or --from' \
    pub /t --camera-info
usage_error pub_camera_info_cloud '^ferry pub: --camera-info needs --image or --from' \
    pub /t --cloud 8x2 --camera-info
usage_error pub_camera_info_self "^ferry pub: --camera-info: the image topic '/cam/camera_info'" \
    pub /cam/camera_info --image 8x8 --camera-info
run pub_from_missing pub /t --from "$IMG/none.png" --count 1
[ "$RC" -eq 1 ] || fail "ferry pub --from a missing file exited $RC, expected 1"
grep -q "^ferry pub: --from $IMG/none.png: No such file" "$OUT/pub_from_missing.err" ||
    fail "ferry pub --from a missing file does not name the option and the file"

# --- echo first, an image publisher after it; echo --json of images ----------------------------
echo_pub image "/cam/image --json --count 3" "/cam/image --image 64x48 --count 3 --rate 50"
check image '
assert len(lines) == 3, lines
for d in lines:
    want = ["topic", "type", "sequence", "publisher", "publish_time_ns", "size", "latency_us",
            "latency_from", "header", "height", "width", "encoding", "is_bigendian", "step", "data"]
    assert list(d) == want, list(d)
    assert d["topic"] == "/cam/image" and d["type"] == "sensor_msgs/Image", d
    assert d["latency_from"] == "stamp" and isinstance(d["latency_us"], float), d
    assert d["header"]["frame_id"] == "image", d
    assert set(d["header"]["stamp"]) == {"sec", "nanosec"} and d["header"]["stamp"]["sec"] > 0, d
    assert (d["width"], d["height"], d["encoding"], d["step"], d["is_bigendian"]) == \
        (64, 48, "rgb8", 192, 0), d
    assert d["data"]["bytes"] == 64 * 48 * 3 and "base64" not in d["data"], d
    assert d["data"]["head"].startswith("52594652414d4500"), d  # the synthetic frame magic
    assert len(d["data"]["head"]) == 32 and len(d["data"]["tail"]) == 32, d
assert [d["sequence"] for d in lines] == [1, 2, 3], lines
'
grep -q 'received 3' "$OUT/image.err" || fail "ferry echo did not receive the 3 images"

# --- pub --camera-info: a matching sensor_msgs/CameraInfo next to each image ------------------
# Both echoes start first; pub waits for the image's. The camera info echo takes one of the
# 20 infos (it may join after the first), which must match one of the images.
LAST=camera_info
timeout 20 "$FERRY" echo /cam/camera_info --json --count 1 >"$OUT/camera_info.out" \
    2>"$OUT/camera_info.err" &
e=$!
BG+=("$e")
echo_pub camera_image "/cam/image_raw --json --count 20" \
    "/cam/image_raw --image 64x48 --camera-info --count 20 --rate 20"
LAST=camera_info
wait "$e" || fail "ferry echo /cam/camera_info exited $?"
grep -q '^ferry pub: /cam/camera_info: published 20 camera infos' "$OUT/camera_image.pub.out" ||
    fail "ferry pub did not report 20 camera infos"
cp "$OUT/camera_image.out" "$IMG/camera_image.json"
check camera_info '
assert len(lines) == 1, lines
d = lines[0]
images = [json.loads(l) for l in open(os.path.join(IMG, "camera_image.json"))]
assert len(images) == 20, len(images)
want = ["topic", "type", "sequence", "publisher", "publish_time_ns", "size", "latency_us",
        "latency_from", "header", "height", "width", "distortion_model", "d", "k", "r", "p",
        "binning_x", "binning_y", "roi", "data"]
assert list(d) == want, list(d)
assert d["topic"] == "/cam/camera_info" and d["type"] == "sensor_msgs/CameraInfo", d
assert d["latency_from"] == "stamp" and d["size"] == 744 and d["data"]["bytes"] == 744, d
assert (d["width"], d["height"], d["distortion_model"]) == (64, 48, "plumb_bob"), d
assert d["d"] == [0] * 5 and d["k"][0] == 64, d
assert d["k"] == [64, 0, 32, 0, 64, 24, 0, 0, 1], d
assert d["r"] == [1, 0, 0, 0, 1, 0, 0, 0, 1], d
assert d["p"] == [64, 0, 32, 0, 0, 64, 24, 0, 0, 0, 1, 0], d
assert (d["binning_x"], d["binning_y"]) == (0, 0), d
assert d["roi"] == {"x_offset": 0, "y_offset": 0, "height": 0, "width": 0, "do_rectify": False}, d
assert d["header"]["frame_id"] == images[0]["header"]["frame_id"] == "image_raw", d
assert d["header"]["stamp"] in [i["header"]["stamp"] for i in images], d
'
LAST=camera_delay
timeout 20 "$FERRY" delay /cam/camera_info --count 5 --window 5 >"$OUT/camera_delay.out" \
    2>"$OUT/camera_delay.err" &
e=$!
BG+=("$e")
sleep 0.2
timeout 20 "$FERRY" pub /cam/image_raw --image 64x48 --camera-info --count 40 --rate 20 \
    >/dev/null 2>"$OUT/camera_delay.pub.err" || fail "ferry pub --camera-info for delay exited $?"
wait "$e" || fail "ferry delay /cam/camera_info exited $?"
grep -qE "^total delay mean -?[0-9]+\.[0-9]{3} ms .*  samples 5  unstamped 0  invalid 0$" \
    "$OUT/camera_delay.out" || fail "ferry delay on camera infos printed no summary of 5 samples"

# --- CompressedImage and Imu, published by cli_types_peer with known values -------------------
# peer_echo NAME KIND TOPIC COUNT "COMMAND ARGS": runs `ferry COMMAND ARGS` first, then the peer.
peer_echo() {
    local name=$1 kind=$2 topic=$3 count=$4 args=$5 e
    LAST=$name
    # shellcheck disable=SC2086 # the argument list is split on purpose
    timeout 20 "$FERRY" $args >"$OUT/$name.out" 2>"$OUT/$name.err" &
    e=$!
    BG+=("$e")
    sleep 0.2
    timeout 20 "$PEER" "$FERRY_DIR" "$FERRY_DOMAIN" "$kind" "$topic" "$count" \
        2>"$OUT/$name.pub.err" || fail "cli_types_peer $kind $topic exited $?"
    wait "$e" || fail "ferry $args exited $?"
}
if [ -n "$PEER" ] && [ -x "$PEER" ]; then
    peer_echo compressed compressed /cam/image_raw/compressed 1 \
        "echo /cam/image_raw/compressed --json --data --count 1"
    check compressed '
assert len(lines) == 1, lines
d = lines[0]
assert list(d)[8:] == ["header", "format", "data"], list(d)
assert d["type"] == "sensor_msgs/CompressedImage" and d["latency_from"] == "stamp", d
assert d["header"] == {"stamp": {"sec": 1700000000, "nanosec": 123456789},
                       "frame_id": "cam_optical"}, d
want = bytes((7 * i) & 255 for i in range(37))
assert d["format"] == "jpeg" and d["data"]["bytes"] == 37, d
assert base64.b64decode(d["data"]["base64"]) == want and d["data"]["crc32"] == zlib.crc32(want), d
'
    peer_echo imu imu /imu 1 "echo /imu --json --count 1"
    check imu '
assert len(lines) == 1, lines
d = lines[0]
assert list(d)[8:] == ["header", "orientation", "orientation_covariance", "angular_velocity",
                       "angular_velocity_covariance", "linear_acceleration",
                       "linear_acceleration_covariance", "data"], list(d)
assert d["type"] == "sensor_msgs/Imu" and d["size"] == 568 and d["data"]["bytes"] == 568, d
assert d["header"] == {"stamp": {"sec": 1700000001, "nanosec": 5}, "frame_id": "imu_link"}, d
assert d["orientation"] == {"x": 0.5, "y": -0.5, "z": 0.5, "w": 0.5}, d
assert d["orientation_covariance"] == [i * 0.1 for i in range(9)], d
assert d["angular_velocity"] == {"x": 1e-3, "y": -2.5, "z": 1e10}, d
assert d["angular_velocity_covariance"] == [-1] + [0] * 8, d
assert d["linear_acceleration"] == {"x": 0, "y": 0, "z": 9.80665}, d
assert d["linear_acceleration_covariance"] == [0.01, None, 0, 0, 0.01, 0, 0, 0, 0.01], d
'
    peer_echo imu_field imu /imu 1 \
        "echo /imu --field angular_velocity.z --field linear_acceleration_covariance.4 --count 1"
    check imu_field '
assert lines == [{"angular_velocity.z": 1e10, "linear_acceleration_covariance.4": 0.01}], lines
'
    for kind in bad-compressed bad-imu; do
        peer_echo "$kind" "$kind" "/${kind//-/_}" 1 "echo /${kind//-/_} --json --count 1"
        check "$kind" '
d = lines[0]
assert len(lines) == 1 and d["type"] in ("sensor_msgs/CompressedImage", "sensor_msgs/Imu"), lines
assert d["invalid"] == "the sample is not a valid message of its type", d
assert "header" not in d and d["data"]["bytes"] == 128 and d["data"]["head"] == "ab" * 16, d
'
    done
    peer_echo imu_delay imu /imu 3 "delay /imu --count 3"
    grep -qE "^total delay mean -?[0-9]+\.[0-9]{3} ms .*  samples 3  unstamped 0  invalid 0$" \
        "$OUT/imu_delay.out" || fail "ferry delay on IMU samples printed no summary of 3 samples"
else
    echo "cli_ros_test: CompressedImage and Imu not checked: no cli_types_peer given"
fi

# --- point clouds, --field ----------------------------------------------------------------------
echo_pub cloud "/lidar --json --count 2" "/lidar --cloud 8x2 --count 2 --rate 50"
check cloud '
for d in lines:
    assert d["type"] == "sensor_msgs/PointCloud2" and d["latency_from"] == "stamp", d
    assert [f["name"] for f in d["fields"]] == ["x", "y", "z", "intensity"], d
    assert d["fields"][1] == {"name": "y", "offset": 4, "datatype": 7, "count": 1}, d
    assert (d["width"], d["height"], d["point_step"], d["row_step"]) == (8, 2, 16, 128), d
    assert d["is_dense"] is False and d["data"]["bytes"] == 256, d
'
echo_pub field "/lidar --field header.stamp --field fields.3.name --field width --count 1" \
    "/lidar --cloud 8x2 --count 1"
check field '
assert len(lines) == 1 and list(lines[0]) == ["header.stamp", "fields.3.name", "width"], lines
assert lines[0]["fields.3.name"] == "intensity" and lines[0]["width"] == 8, lines
'
LAST=field_bad
timeout 20 "$FERRY" echo /lidar --field header.stam --count 1 >"$OUT/field_bad.out" \
    2>"$OUT/field_bad.err" &
e=$!
BG+=("$e")
timeout 20 "$FERRY" pub /lidar --cloud 8x2 --count 1 --wait-subscribers 1 >/dev/null 2>&1
wait "$e"
RC=$?
[ "$RC" -eq 1 ] || fail "ferry echo --field of a missing field exited $RC, expected 1"
grep -q "^ferry echo: --field header.stam: no such field" "$OUT/field_bad.err" ||
    fail "ferry echo --field of a missing field does not name it"

# --- synthetic frames: latency from the publish time -------------------------------------------
echo_pub frame "/frames --json --count 2 --verify" "/frames --size 100 --count 2 --rate 50"
check frame '
for d in lines:
    assert d["type"] == "ferry/synthetic_frame" and d["latency_from"] == "publish", d
    assert d["size"] == 100 and d["data"]["bytes"] == 100 and d["intact"] is True, d
    assert "header" not in d, d
'

# --- pub --from: PPM, PNG (rgb, grey, rgba) and JPEG, pixels checked ---------------------------
"$PYTHON" - "$IMG" <<'EOF' || fail "cannot write the test images"
import struct, sys, zlib
d, w, h = sys.argv[1], 7, 5
def pixels(ch):
    return bytes((x * 37 + y * 11 + c * 71) & 255 for y in range(h) for x in range(w) for c in range(ch))
def png(name, ctype, ch):
    data = pixels(ch)
    raw = b"".join(b"\0" + data[y * w * ch:(y + 1) * w * ch] for y in range(h))
    def chunk(t, b):
        return struct.pack(">I", len(b)) + t + b + struct.pack(">I", zlib.crc32(t + b))
    open(f"{d}/{name}", "wb").write(b"\x89PNG\r\n\x1a\n" +
        chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, ctype, 0, 0, 0)) +
        chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    open(f"{d}/{name}.raw", "wb").write(data)
open(f"{d}/rgb.ppm", "wb").write(b"P6\n# a comment\n%d %d\n255\n" % (w, h) + pixels(3))
open(f"{d}/rgb.ppm.raw", "wb").write(pixels(3))
open(f"{d}/grey.pgm", "wb").write(b"P5 %d %d 255\n" % (w, h) + pixels(1))
open(f"{d}/grey.pgm.raw", "wb").write(pixels(1))
png("rgb.png", 2, 3)
png("grey.png", 0, 1)
png("rgba.png", 6, 4)
EOF
# Decoded by libjpeg-turbo's djpeg, the reference the library must match exactly.
JPEG=
if command -v cjpeg >/dev/null && command -v djpeg >/dev/null; then
    cjpeg -quality 85 "$IMG/rgb.ppm" >"$IMG/rgb.jpg" &&
        djpeg -pnm "$IMG/rgb.jpg" | tail -c $((7 * 5 * 3)) >"$IMG/rgb.jpg.raw" && JPEG=rgb.jpg
fi
from_ok=0
for f in rgb.ppm grey.pgm rgb.png grey.png rgba.png $JPEG; do
    if [ "${f##*.}" = png ] || [ "${f##*.}" = jpg ]; then
        run "probe_$f" pub /probe --from "$IMG/$f" --count 1 --rate 0
        if grep -q 'not supported in this build' "$OUT/probe_$f.err"; then
            echo "cli_ros_test: $f not checked: this build cannot read it"
            continue
        fi
    fi
    echo_pub "from_$f" "/file/image --json --data --count 2" \
        "/file/image --from $IMG/$f --count 2 --rate 50"
    check "from_$f" '
name = os.path.basename(sys.argv[1])[5:-4]
want = open(os.path.join(IMG, name + ".raw"), "rb").read()
ch = {"pgm": 1, "ppm": 3, "jpg": 3}.get(name.rsplit(".", 1)[1], {"rgb.png": 3, "grey.png": 1, "rgba.png": 4}.get(name))
enc = {1: "mono8", 3: "rgb8", 4: "rgba8"}[ch]
for d in lines:
    assert (d["width"], d["height"], d["encoding"], d["step"]) == (7, 5, enc, 7 * ch), d
    assert base64.b64decode(d["data"]["base64"]) == want, name
    assert d["data"]["crc32"] == zlib.crc32(want) and d["data"]["bytes"] == len(want), d
    assert d["header"]["frame_id"] == "image", d
'
    from_ok=$((from_ok + 1))
done
[ "$from_ok" -ge 2 ] || fail "pub --from checked only $from_ok files"

# --- delay ---------------------------------------------------------------------------------------
LAST=delay
timeout 20 "$FERRY" delay /cam/delay --count 30 --window 10 >"$OUT/delay.out" 2>"$OUT/delay.err" &
e=$!
BG+=("$e")
sleep 0.2
timeout 20 "$FERRY" pub /cam/delay --image 32x32 --count 30 --rate 25 --wait-subscribers 1 \
    >/dev/null 2>"$OUT/delay.pub.err" || fail "ferry pub for delay exited $?"
wait "$e" || fail "ferry delay exited $?"
num='-?[0-9]+\.[0-9]{3}'
grep -qE "^delay mean $num ms  min $num ms  p50 $num ms  p99 $num ms  max $num ms  window [0-9]+$" \
    "$OUT/delay.out" || fail "ferry delay printed no periodic line"
grep -qE "^total delay mean $num ms  min $num ms  p50 $num ms  p99 $num ms  max $num ms  samples 30  unstamped 0  invalid 0$" \
    "$OUT/delay.out" || fail "ferry delay printed no summary of 30 samples"

LAST=delay_nostamp
timeout 20 "$FERRY" pub /frames2 --size 64 --rate 20 --count 40 >/dev/null 2>&1 &
p=$!
BG+=("$p")
run delay_nostamp delay /frames2 --count 1
[ "$RC" -eq 1 ] || fail "ferry delay on synthetic frames exited $RC, expected 1"
grep -q '^ferry delay: /frames2 carries ferry/synthetic_frame, which has no header stamp' \
    "$OUT/delay_nostamp.err" || fail "ferry delay does not say the type has no stamp"
kill -TERM "$p"
wait "$p"

echo "cli_ros_test: ok"
exit 0
