#!/usr/bin/env python3
"""Checks for tools_test.sh, with nothing but Python's standard library (no part of ferry):

  tools_check.py echo FILE COUNT
      FILE holds `ferry echo --json` lines of std_msgs/msg/String: COUNT of them, each
      {"type": "std_msgs/msg/String", "data": "hello N"}, N counting up by one.
  tools_check.py mcap FILE TOPIC WIDTH HEIGHT MIN
      FILE, an MCAP file of `ferry record` (chunks without compression), has TOPIC on a channel
      of message encoding cdr whose schema is sensor_msgs/msg/Image in ros2msg with the fields
      of an Image, and at least MIN messages, each a CDR_LE Image decoded here from the
      definition's field order: WIDTH x HEIGHT rgb8, step 3 * WIDTH, frame "camera", data of
      step * HEIGHT bytes equal to what rmw_node's image-pub fills (each byte from its frame).
  tools_check.py point ECHO_FILE MCAP_FILE TOPIC MIN
      geometry_msgs/msg/Point, a plain type (its C struct on the wire): the `ferry echo --json`
      lines are {x: N, y: 0.5, z: -2} with N counting up, and the MCAP file has the topic as
      CDR (converted by the recorder) under a ros2msg schema, MIN messages at least that decode
      to the same.
  tools_check.py view PORT TOKEN TOPIC WIDTH HEIGHT
      ferry view at PORT advertises TOPIC as sensor_msgs/msg/Image (cdr, ros2msg) and
      TOPIC/compressed; a subscription to TOPIC gets a message that decodes to WIDTH x HEIGHT.
Exit status 0, or 1 after a line saying why."""
import json
import os
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "view"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "record"))


def fail(msg):
    print("tools_check:", msg)
    sys.exit(1)


def check_echo(path, count):
    lines = [json.loads(x) for x in open(path) if x.strip()]
    if len(lines) != count:
        fail(f"{path}: {len(lines)} lines, expected {count}")
    first = None
    for i, m in enumerate(lines):
        if m.get("type") != "std_msgs/msg/String" or "invalid" in m:
            fail(f"{path}: line {i + 1}: {m}")
        d = m.get("data", "")
        if not isinstance(d, str) or not d.startswith("hello "):
            fail(f"{path}: line {i + 1}: data {d!r}, expected 'hello N'")
        n = int(d.split()[1])
        if first is None:
            first = n
        if n != first + i:
            fail(f"{path}: line {i + 1}: 'hello {n}' after 'hello {first + i - 1}'")
    print(f"tools_check: echo: {count} strings, hello {first} to hello {first + count - 1}")


class Cdr:
    """A CDR_LE reader, alignment counted from after the 4-byte encapsulation header."""

    def __init__(self, b):
        if len(b) < 4 or b[0:2] != b"\x00\x01":
            fail(f"not CDR_LE: {b[:4]!r}")
        self.b, self.at = b[4:], 0

    def prim(self, fmt, n):
        self.at += -self.at % n
        v = struct.unpack_from("<" + fmt, self.b, self.at)[0]
        self.at += n
        return v

    def string(self):
        n = self.prim("I", 4)
        s = self.b[self.at:self.at + n]
        if n == 0 or len(s) != n or s[-1] != 0:
            fail("a bad CDR string")
        self.at += n
        return s[:-1].decode()

    def octets(self):
        n = self.prim("I", 4)
        d = self.b[self.at:self.at + n]
        if len(d) != n:
            fail("a CDR sequence past the end")
        self.at += n
        return d


def image(payload):
    """An Image in the order of its definition: header (stamp, frame_id), height, width, encoding,
    is_bigendian, step, data."""
    c = Cdr(payload)
    c.prim("i", 4), c.prim("I", 4)
    frame = c.string()
    h, w = c.prim("I", 4), c.prim("I", 4)
    enc = c.string()
    c.prim("B", 1)
    step = c.prim("I", 4)
    return frame, w, h, enc, step, c.octets()


def pixel(frame, i):
    return ((i * 7 + frame * 13) ^ (i >> 11)) & 0xff


IMAGE_FIELDS = ["std_msgs/Header header", "uint32 height", "uint32 width", "string encoding",
                "uint8 is_bigendian", "uint32 step", "uint8[] data"]


def check_image(what, payload, w, h):
    frame, gw, gh, enc, step, data = image(payload)
    if (frame, gw, gh, enc, step, len(data)) != ("camera", w, h, "rgb8", 3 * w, 3 * w * h):
        fail(f"{what}: an image of frame {frame!r}, {gw}x{gh} {enc} step {step}, "
             f"{len(data)} bytes; expected 'camera', {w}x{h} rgb8 step {3 * w}, {3 * w * h}")
    # Which frame it is shows in its first byte: 13 * frame mod 256.
    n = next((f for f in range(1, 100000) if pixel(f, 0) == data[0] and pixel(f, 1) == data[1]),
             None)
    if n is None or any(data[k] != pixel(n, k) for k in range(0, len(data), 97)):
        fail(f"{what}: the pixels are not an image-pub frame's")
    return n


def read_mcap(path, topic):
    """The schemas, channels and topic's messages of an MCAP file without compression."""
    import mcap_times  # the MCAP record walk of play_test (Python's standard library only)
    data = open(path, "rb").read()
    if not data.startswith(mcap_times.MAGIC):
        fail(f"{path}: not MCAP")
    schemas, channels, msgs = {}, {}, []

    def walk(recs):
        for op, body in recs:
            if op == 0x03:  # Schema
                sid = struct.unpack_from("<H", body, 0)[0]
                name, at = mcap_times.string(body, 2)
                enc, at = mcap_times.string(body, at)
                n = struct.unpack_from("<I", body, at)[0]
                schemas[sid] = (name, enc, body[at + 4:at + 4 + n].decode())
            elif op == 0x04:  # Channel
                cid, sid = struct.unpack_from("<HH", body, 0)
                t, at = mcap_times.string(body, 4)
                enc, at = mcap_times.string(body, at)
                channels[cid] = (t, sid, enc)
            elif op == 0x05:  # Message
                cid = struct.unpack_from("<H", body, 0)[0]
                if channels.get(cid, ("",))[0] == topic:
                    msgs.append(body[22:])
            elif op == 0x06:  # Chunk
                comp, at = mcap_times.string(body, 28)
                if comp:
                    fail(f"{path}: a chunk compressed with {comp}")
                n = struct.unpack_from("<Q", body, at)[0]
                walk(mcap_times.records(body, at + 8, at + 8 + n))
            elif op == 0x0F:  # Data End
                return

    walk(mcap_times.records(data, len(mcap_times.MAGIC), len(data)))
    return schemas, channels, msgs


def check_mcap(path, topic, w, h, least):
    schemas, channels, msgs = read_mcap(path, topic)
    chans = [c for c in channels.values() if c[0] == topic]
    if len(chans) != 1:
        fail(f"{path}: {len(chans)} channels of {topic}")
    _, sid, enc = chans[0]
    if enc != "cdr":
        fail(f"{path}: {topic}: message encoding {enc!r}, expected cdr")
    name, senc, text = schemas.get(sid, ("", "", ""))
    if name != "sensor_msgs/msg/Image" or senc != "ros2msg":
        fail(f"{path}: {topic}: schema {name!r} in {senc!r}, expected sensor_msgs/msg/Image ros2msg")
    own = [x.strip() for x in text.split("=" * 80)[0].splitlines() if x.strip()]
    if own != IMAGE_FIELDS or "MSG: std_msgs/Header" not in text or \
            "MSG: builtin_interfaces/Time" not in text:
        fail(f"{path}: {topic}: the definition is not an Image's: {text!r}")
    if len(msgs) < least:
        fail(f"{path}: {topic}: {len(msgs)} messages, expected {least} at least")
    frames = [check_image(f"{path}: {topic}", m, w, h) for m in msgs]
    if frames != sorted(frames) or len(set(frames)) != len(frames):
        fail(f"{path}: {topic}: frames out of order or repeated: {frames}")
    print(f"tools_check: mcap: {len(msgs)} Images of {w}x{h} (frames {frames[0]}..{frames[-1]}), "
          f"schema {name} ({senc}), {len(text)} bytes of definition")


def check_point(echo_path, path, topic, least):
    xs = []
    for line in open(echo_path):
        m = json.loads(line)
        if m.get("type") != "geometry_msgs/msg/Point" or m.get("size") != 24 or \
                m.get("y") != 0.5 or m.get("z") != -2:
            fail(f"{echo_path}: {m}")
        xs.append(m["x"])
    if not xs or xs != list(range(int(xs[0]), int(xs[0]) + len(xs))):
        fail(f"{echo_path}: x {xs}, expected counting up")
    schemas, channels, msgs = read_mcap(path, topic)
    chans = [c for c in channels.values() if c[0] == topic]
    if len(chans) != 1 or chans[0][2] != "cdr":
        fail(f"{path}: {topic}: channels {chans}, expected one of encoding cdr")
    name, senc, text = schemas.get(chans[0][1], ("", "", ""))
    if (name, senc) != ("geometry_msgs/msg/Point", "ros2msg") or \
            [x.strip() for x in text.splitlines() if x.strip()] != \
            ["float64 x", "float64 y", "float64 z"]:
        fail(f"{path}: {topic}: schema {name!r} {senc!r} {text!r}")
    if len(msgs) < least:
        fail(f"{path}: {topic}: {len(msgs)} messages, expected {least} at least")
    got = []
    for m in msgs:
        c = Cdr(m)
        x, y, z = c.prim("d", 8), c.prim("d", 8), c.prim("d", 8)
        if (y, z, len(m)) != (0.5, -2.0, 28):
            fail(f"{path}: {topic}: a Point ({x}, {y}, {z}) of {len(m)} bytes")
        got.append(x)
    if got != list(range(int(got[0]), int(got[0]) + len(got))):
        fail(f"{path}: {topic}: x {got}, expected counting up")
    print(f"tools_check: point: echo x {xs[0]:g}..{xs[-1]:g}; {len(msgs)} recorded as CDR")


def check_view(port, token, topic, w, h):
    import wsproto
    wsproto.TOKEN = token
    sock, status, _, buf = wsproto.connect(port)
    if not status.startswith("HTTP/1.1 101"):
        fail(f"view: no upgrade: {status}")
    sock.settimeout(0.1)
    end = time.monotonic() + 20
    chans, sub = {}, None
    while time.monotonic() < end:
        try:
            d = sock.recv(1 << 20)
            if not d:
                fail("view: the connection closed")
            buf += d
        except OSError:
            pass
        frames, buf = wsproto.split(buf)
        for op, payload in frames:
            if op == 1:
                m = json.loads(payload)
                if m["op"] == "advertise":
                    for ch in m["channels"]:
                        chans[ch["topic"]] = ch
                    if topic in chans and sub is None:
                        ch = chans[topic]
                        if (ch["schemaName"], ch["encoding"], ch["schemaEncoding"]) != \
                                ("sensor_msgs/msg/Image", "cdr", "ros2msg"):
                            fail(f"view: {topic} advertised as {ch}")
                        sub = ch["id"]
                        sock.sendall(wsproto.frame(json.dumps(
                            {"op": "subscribe",
                             "subscriptions": [{"id": 7, "channelId": sub}]}).encode()))
            elif op == 2 and sub is not None and payload[0] == 1:
                n = check_image(f"view: {topic}", payload[13:], w, h)
                jpeg = chans.get(topic + "/compressed")
                if jpeg is None or jpeg["schemaName"] != "sensor_msgs/msg/CompressedImage":
                    fail(f"view: no {topic}/compressed channel: {sorted(chans)}")
                print(f"tools_check: view: {topic} advertised as sensor_msgs/msg/Image (cdr) with "
                      f"{topic}/compressed; frame {n} received, {w}x{h}")
                return
    fail(f"view: within 20 s: channels {sorted(chans)}, subscribed {sub is not None}, no message")


def main():
    a = sys.argv[1:]
    if a[:1] == ["echo"] and len(a) == 3:
        check_echo(a[1], int(a[2]))
    elif a[:1] == ["mcap"] and len(a) == 6:
        check_mcap(a[1], a[2], int(a[3]), int(a[4]), int(a[5]))
    elif a[:1] == ["point"] and len(a) == 5:
        check_point(a[1], a[2], a[3], int(a[4]))
    elif a[:1] == ["view"] and len(a) == 6:
        check_view(int(a[1]), a[2], a[3], int(a[4]), int(a[5]))
    else:
        fail("usage: see the docstring")


if __name__ == "__main__":
    main()
