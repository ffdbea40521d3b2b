#!/usr/bin/env python3
"""The times in MCAP files, for play_test.sh, with nothing but Python's standard library:

  mcap_times.py check-recording FILE TOPIC LIVE_JSON PLAYED_JSON
      FILE, written by ferry record (chunks without compression), holds TOPIC's messages with
      the publish times a live subscriber saw (LIVE_JSON, `ferry echo --json`): deltas equal to
      the nanosecond; the log times come after them. PLAYED_JSON, the same topic as played
      back: the recorded stamps in the recorded order, intervals that follow the recorded
      publish intervals (medians within a quarter), the span no more than 50 ms short or 1 s
      long. Prints the periods of each.
  mcap_times.py write FILE late-log|no-publish
      A file of 20 sensor_msgs/msg/Image messages on /crafted/image, 50 ms apart: late-log,
      publish times 50 ms apart and every log time bunched 1 s after the first (a recorder that
      slept); no-publish, publish times 0 and log times 50 ms apart.
  mcap_times.py check-span PLAYED_JSON FRACTION
      The played messages (`ferry echo --json`) span at least FRACTION of 950 ms.
Exit status 0, or 1 after a line saying why."""
import json
import statistics
import struct
import sys

MAGIC = b"\x89MCAP0\r\n"


def fail(msg):
    print("mcap_times:", msg)
    sys.exit(1)


def records(data, at, end):
    while at + 9 <= end:
        op, n = data[at], struct.unpack_from("<Q", data, at + 1)[0]
        yield op, data[at + 9:at + 9 + n]
        at += 9 + n


def string(b, at):
    n = struct.unpack_from("<I", b, at)[0]
    return b[at + 4:at + 4 + n].decode(), at + 4 + n


def messages(path, topic):
    """(sequence, log time, publish time) of topic's messages, in file order."""
    data = open(path, "rb").read()
    if not data.startswith(MAGIC):
        fail(f"{path}: not MCAP")
    channels, out = {}, []

    def walk(recs):
        for op, body in recs:
            if op == 0x04:  # Channel
                cid = struct.unpack_from("<H", body, 0)[0]
                channels[cid] = string(body, 4)[0]
            elif op == 0x05:  # Message
                cid, seq, log, pub = struct.unpack_from("<HIQQ", body, 0)
                if channels.get(cid) == topic:
                    out.append((seq, log, pub))
            elif op == 0x06:  # Chunk
                _, _, _, _ = struct.unpack_from("<QQQI", body, 0)
                comp, at = string(body, 28)
                if comp:
                    fail(f"{path}: a chunk compressed with {comp}; record with --compression none")
                n = struct.unpack_from("<Q", body, at)[0]
                walk(records(body, at + 8, at + 8 + n))
            elif op == 0x0F:  # Data End
                return True
        return False

    walk(records(data, len(MAGIC), len(data)))
    return out


def echoed(path):
    """(publish_time_ns, header stamp in ns) of each sample of `ferry echo --json`."""
    out = []
    for line in open(path):
        m = json.loads(line)
        st = m["header"]["stamp"]
        out.append((m["publish_time_ns"], st["sec"] * 10**9 + st["nanosec"]))
    return out


def periods(times):
    return [(b - a) / 1e6 for a, b in zip(times, times[1:])]


def describe(name, ms):
    return (f"{name:<28} mean {statistics.mean(ms):6.2f} ms  median {statistics.median(ms):6.2f}"
            f"  std {statistics.pstdev(ms):6.2f}  min {min(ms):6.2f}  max {max(ms):6.2f}")


def check_recording(path, topic, live_path, played_path):
    rec, live, played = messages(path, topic), echoed(live_path), echoed(played_path)
    if len(rec) != len(live) or len(rec) != len(played) or len(rec) < 3:
        fail(f"{len(rec)} recorded, {len(live)} live, {len(played)} played messages of {topic}")
    pub = [m[2] for m in rec]
    log = [m[1] for m in rec]
    live_pub = [s[0] for s in live]
    for i in range(len(rec)):
        if pub[i] - pub[0] != live_pub[i] - live_pub[0]:
            fail(f"message {i}: recorded publish time {pub[i] - pub[0]} ns after the first, "
                 f"the publisher's {live_pub[i] - live_pub[0]} ns: not the publisher's time")
        if log[i] < pub[i]:
            fail(f"message {i}: log time {log[i]} before its publish time {pub[i]}")
    late = sorted((l - p) / 1e6 for l, p in zip(log, pub))
    print(f"play_test: {len(rec)} messages recorded with the publisher's publish times; log time "
          f"after publish time: median {statistics.median(late):.2f} ms, max {late[-1]:.2f} ms")
    if [s[1] for s in played] != [s[1] for s in live]:
        fail("the played header stamps are not the recorded ones in the recorded order")
    rp, lp, pp = periods(pub), periods(log), periods([s[0] for s in played])
    print("play_test: " + describe("recorded publish periods", rp))
    print("play_test: " + describe("recorded log periods", lp))
    print("play_test: " + describe("replayed periods", pp))
    if abs(statistics.median(pp) - statistics.median(rp)) > 0.25 * statistics.median(rp):
        fail(f"replayed median period {statistics.median(pp):.2f} ms, recorded publish median "
             f"{statistics.median(rp):.2f} ms")
    span_rec = (pub[-1] - pub[0]) / 1e6
    span_play = (played[-1][0] - played[0][0]) / 1e6
    print(f"play_test: span recorded {span_rec:.1f} ms, replayed {span_play:.1f} ms")
    if not span_rec - 50 <= span_play <= span_rec + 1000:
        fail(f"replayed over {span_play:.1f} ms, recorded over {span_rec:.1f} ms")


def cdr_image(stamp_ns, w, h):
    """A sensor_msgs/msg/Image in CDR (little-endian), frame_id "image", rgb8."""
    b = bytearray(b"\x00\x01\x00\x00")

    def align(n):
        while (len(b) - 4) % n:
            b.append(0)

    def text(s):
        s = s.encode() + b"\0"
        align(4)
        b.extend(struct.pack("<I", len(s)) + s)

    b += struct.pack("<iI", stamp_ns // 10**9, stamp_ns % 10**9)
    text("image")
    align(4)
    b += struct.pack("<II", h, w)
    text("rgb8")
    b.append(0)  # is_bigendian
    align(4)
    b += struct.pack("<I", w * 3)
    data = bytes((i * 7) & 255 for i in range(w * h * 3))
    align(4)
    b += struct.pack("<I", len(data)) + data
    return bytes(b)


def write(path, kind):
    def rec(op, body):
        return bytes([op]) + struct.pack("<Q", len(body)) + body

    def s(x):
        x = x.encode()
        return struct.pack("<I", len(x)) + x

    definition = ("std_msgs/Header header\nuint32 height\nuint32 width\nstring encoding\n"
                  "uint8 is_bigendian\nuint32 step\nuint8[] data\n")
    out = bytearray(MAGIC)
    out += rec(0x01, s("ros2") + s("play_test"))
    out += rec(0x03, struct.pack("<H", 1) + s("sensor_msgs/msg/Image") + s("ros2msg") + s(definition))
    out += rec(0x04, struct.pack("<HH", 1, 1) + s("/crafted/image") + s("cdr") + struct.pack("<I", 0))
    base = 1_700_000_000 * 10**9
    for i in range(20):
        t = base + i * 50_000_000
        if kind == "late-log":
            log, pub = base + 1_000_000_000 + i * 100_000, t
        else:
            log, pub = t, 0
        out += rec(0x05, struct.pack("<HIQQ", 1, i + 1, log, pub) + cdr_image(t, 16, 8))
    out += rec(0x0F, struct.pack("<I", 0))
    out += rec(0x02, struct.pack("<QQI", 0, 0, 0))
    out += MAGIC
    open(path, "wb").write(out)


def check_span(played_path, fraction):
    played = echoed(played_path)
    span = (played[-1][0] - played[0][0]) / 1e6
    print(f"play_test: {played_path.rsplit('/', 1)[-1]}: {len(played)} messages played over "
          f"{span:.1f} ms (recorded 950 ms apart in all)")
    if span < float(fraction) * 950:
        fail(f"played over {span:.1f} ms, not at least {float(fraction) * 950:.0f} ms")


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "check-recording" and len(sys.argv) == 6:
        check_recording(*sys.argv[2:])
    elif cmd == "write" and len(sys.argv) == 4 and sys.argv[3] in ("late-log", "no-publish"):
        write(sys.argv[2], sys.argv[3])
    elif cmd == "check-span" and len(sys.argv) == 4:
        check_span(sys.argv[2], sys.argv[3])
    else:
        fail("usage: see the top of this file")
