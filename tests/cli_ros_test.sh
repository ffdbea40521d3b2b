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
NAME=cli_ros_test
if [ -z "$FERRY" ] || [ ! -x "$FERRY" ]; then
    echo "cli_ros_test: skipped, no ferry executable at '$FERRY'"
    exit 77
fi
# shellcheck source=tests/cli_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"

T=$(mktemp -d /tmp/ferry-cli-ros-test-XXXXXX)
export FERRY_DIR=$T/root
export FERRY_DOMAIN=7
OUT=$T/out
IMG=$T/img
mkdir -p "$OUT" "$IMG"
cli_lib_init

# echo_pub NAME "ECHO ARGS" "PUB ARGS": starts `ferry echo` first, with no publisher on the topic
# yet, then `ferry pub --wait-subscribers 1`; both must exit 0. Echo's lines in $OUT/NAME.out.
# Echo's queue (--depth 64) holds every sample these tests publish, so however late a busy
# machine runs it, it loses none.
echo_pub() {
    local name=$1 echo_args=$2 pub_args=$3 e
    # shellcheck disable=SC2086 # the argument lists are split on purpose
    start "$name" echo $echo_args --depth 64
    e=$PID
    # Not needed for the result (pub waits for echo's subscriber): echo is meant to come first.
    sleep 0.2
    LAST=$name
    # shellcheck disable=SC2086
    timeout "$RUN_LIMIT" "$FERRY" pub $pub_args --wait-subscribers 1 >"$OUT/$name.pub.out" \
        2>"$OUT/$name.pub.err"
    RC=$?
    expect_rc 0 "ferry pub $pub_args --wait-subscribers 1 (ferry echo $echo_args started first)"
    finish "$e"
    expect_rc 0 "ferry echo $echo_args"
}

# check NAME PYTHON: runs PYTHON with `lines`, the JSON objects of $OUT/NAME.out, and IMG.
check() {
    py -c '
import base64, json, os, sys, zlib
lines = [json.loads(l) for l in open(sys.argv[1])]
IMG = sys.argv[2]
exec(sys.argv[3])
' "$OUT/$1.out" "$IMG" "$2" || fail "$1: the JSON check above failed (on $OUT/$1.out)"
}

# stop PID WHAT: SIGTERM to a background command, which must then exit 0.
stop() {
    kill -TERM "$1"
    finish "$1"
    expect_rc 0 "$2 after SIGTERM"
}

# --- topics and info name a directory without a domain ----------------------------------------
run topics_missing topics
expect_rc 1 "ferry topics on a missing --dir"
expect_line "$OUT/topics_missing.err" "^ferry topics: $FERRY_DIR does not exist" \
    "ferry topics does not name the missing directory"
mkdir -m 700 "$T/empty"
run topics_empty topics --dir "$T/empty" --json
expect_rc 1 "ferry topics on a directory without a domain"
expect_line "$OUT/topics_empty.err" "^ferry topics: $T/empty holds no ferry domain" \
    "ferry topics does not say the directory holds no domain"
run info_missing info /x
expect_rc 1 "ferry info on a missing --dir"
expect_line "$OUT/info_missing.err" "^ferry info: $FERRY_DIR does not exist" \
    "ferry info does not name the missing directory"

# --- usage errors name their option ------------------------------------------------------------
usage_error() {
    local name=$1 pattern=$2
    shift 2
    run "$name" "$@"
    expect_rc 2 "ferry $*"
    [ "$(wc -l <"$OUT/$name.err")" -eq 1 ] ||
        fail "ferry $*: $(wc -l <"$OUT/$name.err") lines on stderr, expected a one-line message"
    expect_line "$OUT/$name.err" "$pattern" "ferry $*: the message"
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
expect_rc 1 "ferry pub --from a missing file"
expect_line "$OUT/pub_from_missing.err" "^ferry pub: --from $IMG/none.png: No such file" \
    "ferry pub --from a missing file does not name the option and the file"

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
expect_line "$OUT/image.err" 'received 3,' "ferry echo did not receive the 3 images"

# --- pub --camera-info: a matching sensor_msgs/CameraInfo next to each image ------------------
# Both echoes start first; pub waits for the image's. The camera info echo subscribes at once
# (--type) and is in the domain before pub starts; it connects to the camera info publisher when
# it next runs, and takes one of the 40 infos (perhaps not the first), which must match one of
# the images.
start camera_info echo /cam/camera_info --type sensor_msgs/CameraInfo --json --count 1
e=$PID
wait_topic /cam/camera_info 0 1
echo_pub camera_image "/cam/image_raw --json --count 40" \
    "/cam/image_raw --image 64x48 --camera-info --count 40 --rate 20"
finish "$e"
LAST=camera_info
expect_rc 0 "ferry echo /cam/camera_info"
expect_line "$OUT/camera_image.pub.out" '^ferry pub: /cam/camera_info: published 40 camera infos' \
    "ferry pub did not report 40 camera infos"
cp "$OUT/camera_image.out" "$IMG/camera_image.json"
check camera_info '
assert len(lines) == 1, lines
d = lines[0]
images = [json.loads(l) for l in open(os.path.join(IMG, "camera_image.json"))]
assert len(images) == 40, len(images)
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
# delay of the camera infos: it subscribes at once (--type) and takes 5 infos from a publisher
# that runs until it has them.
start camera_delay delay /cam/camera_info --type sensor_msgs/CameraInfo --count 5 --window 5
e=$PID
wait_topic /cam/camera_info 0 1
start camera_delay.pub pub /cam/image_raw --image 64x48 --camera-info --rate 20
p=$PID
finish "$e"
LAST=camera_delay
expect_rc 0 "ferry delay /cam/camera_info --count 5"
stop "$p" "ferry pub --camera-info (for delay)"
expect_line "$OUT/camera_delay.out" \
    "^total delay mean -?[0-9]+\.[0-9]{3} ms .*  samples 5  unstamped 0  invalid 0$" \
    "ferry delay on camera infos printed no summary of 5 samples"

# --- CompressedImage and Imu, published by cli_types_peer with known values -------------------
# peer_echo NAME KIND TOPIC COUNT "COMMAND ARGS": runs `ferry COMMAND ARGS` first, then the peer.
# The peer waits (up to 10 s) for the command's subscriber before it publishes.
peer_echo() {
    local name=$1 kind=$2 topic=$3 count=$4 args=$5 e
    # shellcheck disable=SC2086 # the argument list is split on purpose
    start "$name" $args
    e=$PID
    sleep 0.2
    LAST=$name
    timeout "$RUN_LIMIT" "$PEER" "$FERRY_DIR" "$FERRY_DOMAIN" "$kind" "$topic" "$count" \
        >"$OUT/$name.pub.out" 2>"$OUT/$name.pub.err"
    RC=$?
    expect_rc 0 "cli_types_peer $kind $topic $count (ferry $args started first)"
    finish "$e"
    expect_rc 0 "ferry $args"
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
    peer_echo pose pose /pose 1 "echo /pose --json --count 1"
    check pose '
assert len(lines) == 1, lines
d = lines[0]
assert list(d)[8:] == ["header", "pose", "data"], list(d)
assert d["type"] == "geometry_msgs/PoseStamped" and d["size"] == 328, d
assert d["header"] == {"stamp": {"sec": 1700000002, "nanosec": 7}, "frame_id": "map"}, d
assert d["pose"] == {"position": {"x": 1.5, "y": -2.5, "z": 0.25},
                     "orientation": {"x": 0, "y": 0, "z": 0.6, "w": 0.8}}, d
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
    expect_line "$OUT/imu_delay.out" \
        "^total delay mean -?[0-9]+\.[0-9]{3} ms .*  samples 3  unstamped 0  invalid 0$" \
        "ferry delay on IMU samples printed no summary of 3 samples"
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
start field_bad echo /lidar --field header.stam --count 1
e=$PID
run field_bad.pub pub /lidar --cloud 8x2 --count 1 --wait-subscribers 1
expect_rc 0 "ferry pub /lidar --count 1 --wait-subscribers 1"
finish "$e"
LAST=field_bad
expect_rc 1 "ferry echo --field of a missing field"
expect_line "$OUT/field_bad.err" "^ferry echo: --field header.stam: no such field" \
    "ferry echo --field of a missing field does not name it"

# --- synthetic frames: latency from the publish time -------------------------------------------
echo_pub frame "/frames --json --count 2 --verify" "/frames --size 100 --count 2 --rate 50"
check frame '
for d in lines:
    assert d["type"] == "ferry/synthetic_frame" and d["latency_from"] == "publish", d
    assert d["size"] == 100 and d["data"]["bytes"] == 100 and d["intact"] is True, d
    assert "header" not in d, d
'

# --- pub --from: PPM, PNG (rgb, grey, rgba) and JPEG, pixels checked ---------------------------
py - "$IMG" <<'EOF' || fail "cannot write the test images"
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
[ "$from_ok" -ge 2 ] || fail "pub --from checked only $from_ok files, expected at least 2"

# --- delay ---------------------------------------------------------------------------------------
# The publisher runs until delay has its 30 samples (at 25 Hz, over a second: a periodic line
# comes first), so a busy machine that runs delay late costs time, not samples.
start delay delay /cam/delay --count 30 --window 10
e=$PID
sleep 0.2
start delay.pub pub /cam/delay --image 32x32 --rate 25 --wait-subscribers 1
p=$PID
finish "$e"
LAST=delay
expect_rc 0 "ferry delay /cam/delay --count 30"
stop "$p" "ferry pub /cam/delay (for delay)"
num='-?[0-9]+\.[0-9]{3}'
expect_line "$OUT/delay.out" \
    "^delay mean $num ms  min $num ms  p50 $num ms  p99 $num ms  max $num ms  window [0-9]+$" \
    "ferry delay printed no periodic line"
expect_line "$OUT/delay.out" \
    "^total delay mean $num ms  min $num ms  p50 $num ms  p99 $num ms  max $num ms  samples 30  unstamped 0  invalid 0$" \
    "ferry delay printed no summary of 30 samples"

start delay_nostamp.pub pub /frames2 --size 64 --rate 20
p=$PID
run delay_nostamp delay /frames2 --count 1
expect_rc 1 "ferry delay on synthetic frames"
expect_line "$OUT/delay_nostamp.err" \
    '^ferry delay: /frames2 carries ferry/synthetic_frame, which has no header stamp' \
    "ferry delay does not say the type has no stamp"
stop "$p" "ferry pub /frames2 (for delay)"

echo "cli_ros_test: ok"
exit 0
