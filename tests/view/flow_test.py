#!/usr/bin/env python3
"""How ferry view feeds its clients, with nothing but Python's standard library (so that the
sanitizer build runs it too), against a 640x480 rgb8 camera at 30 Hz:

  - the subprotocols: a client that offers only foxglove.websocket.v1, or only foxglove.sdk.v1
    (the name of the Foxglove SDK's servers), is upgraded with that name and served; one that
    offers neither is refused;
  - a client that reads slowly (a fixed 64 KiB receive buffer, then a few frames' worth of
    bytes a second) gets the newest frames, not a backlog: when it reads at full speed again,
    at most two of the frames it gets had been replaced by a newer one before it resumed (the
    message cut off in its socket and the one the view had begun), on the raw channel (900 KiB
    frames) and on the JPEG one; and the view counts what it passed over (ferryStats dropped);
  - a client in ferryAckMode gets no second message on a subscription before it acknowledges
    the first, and after each acknowledgement the next one, the newest.

The assertions are counts and orderings, never times, so they hold however busy the machine is;
the latencies and rates it prints are for reading.

usage: flow_test.py PATH_TO_FERRY
Exit status: 0 passed, 1 failed, 77 skipped (ferry built without ferry view)."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import wsproto

FERRY = sys.argv[1]


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def pct(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(p * len(v)))] if v else float("nan")


class Reader:
    """One subscription of a client that reads when told to, as fast or as slowly as told."""

    def __init__(self, port, topic, rcvbuf=0, acks=False, protocols=("foxglove.websocket.v1",)):
        self.sock, status, self.headers, self.buf = wsproto.connect(port, protocols, rcvbuf)
        if not status.startswith("HTTP/1.1 101"):
            fail(f"{protocols}: no upgrade: {status}")
        self.topic, self.acks = topic, acks
        self.frames = []  # (arrival, header stamp, payload bytes), seconds of the wall clock
        self.stats = None
        self.server_info = None
        self.subscribed = False

    def send(self, obj):
        self.sock.sendall(wsproto.frame(json.dumps(obj).encode()))

    def pump(self, seconds, chunk=1 << 20, pause=0.0, ack=True):
        """Reads for seconds: chunk bytes at a time, pause seconds after each read."""
        end = time.monotonic() + seconds
        self.sock.settimeout(0.02)
        while time.monotonic() < end:
            try:
                d = self.sock.recv(chunk)
                if not d:
                    fail(f"{self.topic}: the view closed the connection")
                self.buf += d
            except socket.timeout:
                pass
            frames, self.buf = wsproto.split(self.buf)
            for op, payload in frames:
                self.handle(op, payload, ack)
            if pause:
                time.sleep(pause)

    def handle(self, op, payload, ack):
        if op == 1:
            m = json.loads(payload)
            if m["op"] == "serverInfo":
                self.server_info = m
            elif m["op"] == "advertise" and not self.subscribed:
                for ch in m["channels"]:
                    if ch["topic"] == self.topic:
                        if self.acks:
                            self.send({"op": "ferryAckMode"})
                        self.send({"op": "ferrySubscribeStats"})
                        self.send({"op": "subscribe",
                                   "subscriptions": [{"id": 1, "channelId": ch["id"]}]})
                        self.subscribed = True
            elif m["op"] == "ferryStats" and m["subscriptions"]:
                self.stats = m["subscriptions"][0]
            elif m["op"] == "status" and m["level"] == 2:
                fail(f"{self.topic}: error status {m}")
        elif op == 2:
            md = wsproto.message_data(payload)
            if md is None:
                fail(f"{self.topic}: binary message that is not Message Data: {payload[:16]!r}")
            self.frames.append((time.time(), md[1], len(payload)))
            if self.acks and ack:
                self.send({"op": "ferryAck", "subscriptionIds": [1]})
        elif op == 8:
            fail(f"{self.topic}: closed by the view: {payload!r}")

    def wait_frames(self, n, seconds=15, ack=True):
        end = time.monotonic() + seconds
        while len(self.frames) < n and time.monotonic() < end:
            self.pump(0.1, ack=ack)
        if len(self.frames) < n:
            fail(f"{self.topic}: {len(self.frames)} frames in {seconds} s, expected {n}")

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def subprotocols(port):
    for name in ("foxglove.websocket.v1", "foxglove.sdk.v1"):
        r = Reader(port, "/cam/image/compressed", protocols=(name,))
        if r.headers.get("sec-websocket-protocol") != name:
            fail(f"offered only {name}: the view answered {r.headers.get('sec-websocket-protocol')!r}")
        r.wait_frames(2)
        if not r.server_info or r.server_info.get("name") != "ferry view":
            fail(f"{name}: serverInfo {r.server_info}")
        r.close()
    # Offered in a list, the first the view speaks is taken.
    r = Reader(port, "/cam/image", protocols=("x.unknown", "foxglove.sdk.v1", "foxglove.websocket.v1"))
    if r.headers.get("sec-websocket-protocol") != "foxglove.sdk.v1":
        fail(f"offered a list: the view answered {r.headers.get('sec-websocket-protocol')!r}")
    r.close()
    for offer in (("foxglove.websocket.v2",), ()):
        sock, status, headers, _ = wsproto.connect(port, offer)
        sock.close()
        if status.startswith("HTTP/1.1 101"):
            fail(f"offered {offer or 'no subprotocol'}: upgraded ({headers})")
    print("ok: foxglove.websocket.v1 and foxglove.sdk.v1 each served alone; others refused")


def slow_reader(port, topic, frames_per_s):
    """A client with a 64 KiB receive buffer reads fast, then slowly, then fast again."""
    r = Reader(port, topic, rcvbuf=65536)
    r.wait_frames(3)
    r.pump(1.0)
    fast = len(r.frames)
    size = sum(f[2] for f in r.frames) / len(r.frames)
    # Slowly: about frames_per_s frames a second, in reads of a 50th of that.
    chunk = max(1024, int(size * frames_per_s / 50))
    r.pump(3.0, chunk=chunk, pause=0.02, ack=False)
    slow = r.frames[fast:]
    resumed = time.time()
    r.pump(2.0)
    after = r.frames[fast + len(slow):]
    before = sum(1 for f in after if f[1] < resumed)
    stale = max(0, before - 1)
    lat = [(f[0] - f[1]) * 1e3 for f in slow]
    dropped = r.stats["dropped"] if r.stats else None
    print(f"{topic} ({size / 1024:.0f} KiB frames): read slowly for 3 s: {len(slow)} frames, "
          f"latency p50 {pct(lat, 0.5):.0f} ms p99 {pct(lat, 0.99):.0f} ms; after resuming "
          f"{len(after)} frames, {before} published before it resumed ({stale} stale); "
          f"view's stats {r.stats}")
    r.close()
    if not slow or not after:
        fail(f"{topic}: {len(slow)} frames while reading slowly, {len(after)} after")
    if stale > 2:
        fail(f"{topic}: {stale} frames that newer ones had replaced came after resuming (at most "
             "2): frames queue for a slow client")
    if not dropped:
        fail(f"{topic}: the view counted no dropped frame for a client that read "
             f"{len(slow)} frames in 3 s: {r.stats}")


def acks(port):
    r = Reader(port, "/cam/image/compressed", acks=True)
    r.wait_frames(1, ack=False)
    waits = []
    for i in range(5):
        n = len(r.frames)
        r.pump(0.3, ack=False)  # no acknowledgement yet: nothing more may come
        if len(r.frames) != n:
            fail(f"ferryAckMode: {len(r.frames) - n} messages came before the acknowledgement "
                 f"of message {n}")
        t = time.time()
        r.send({"op": "ferryAck", "subscriptionIds": [1]})
        end = time.monotonic() + 15
        while len(r.frames) == n and time.monotonic() < end:
            r.pump(0.01, ack=False)
        if len(r.frames) != n + 1:
            fail(f"ferryAckMode: {len(r.frames) - n} messages after acknowledging {n} (expected 1)")
        arrival, stamp, _ = r.frames[-1]
        if stamp <= r.frames[-2][1]:
            fail("ferryAckMode: a message no newer than the one before")
        waits.append(((arrival - t) * 1e3, (arrival - stamp) * 1e3))
    r.pump(1.2, ack=False)  # a ferryStats
    print("ok: ferryAckMode: one message per acknowledgement; acknowledgement to message "
          f"{', '.join(f'{w:.0f}' for w, _ in waits)} ms, its age on arrival "
          f"{', '.join(f'{a:.0f}' for _, a in waits)} ms; view's stats {r.stats}")
    r.close()


def main():
    if subprocess.run([FERRY, "view", "--help"], capture_output=True).returncode != 0:
        print("SKIP: ferry built without ferry view")
        return 77
    tmp = tempfile.mkdtemp(prefix="ferry-view-flow-")
    os.chmod(tmp, 0o700)
    env = dict(os.environ, FERRY_DIR=os.path.join(tmp, "root"), FERRY_DOMAIN="6")
    procs = []
    try:
        procs.append(subprocess.Popen([FERRY, "pub", "/cam/image", "--image", "640x480", "--rate", "30"],
                                      env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        view = subprocess.Popen([FERRY, "view", "--port", "0"], env=env, stdout=subprocess.PIPE,
                                stderr=open(os.path.join(tmp, "view.err"), "w"), text=True)
        procs.append(view)
        port, wsproto.TOKEN = wsproto.token_of(view.stdout.readline())
        if port is None or wsproto.TOKEN is None:
            fail("ferry view did not say its port and token")
        subprotocols(port)
        slow_reader(port, "/cam/image", 3)
        slow_reader(port, "/cam/image/compressed", 4)
        acks(port)
        view.send_signal(signal.SIGTERM)
        try:
            rc = view.wait(timeout=10)
        except subprocess.TimeoutExpired:
            fail("ferry view did not stop within 10 s of SIGTERM")
        summary = view.stdout.read().strip()
        if rc != 0:
            sys.stdout.write(open(os.path.join(tmp, "view.err")).read()[-3000:])
            fail(f"ferry view exited {rc} after SIGTERM")
        print(summary)
        print("PASS: view flow")
        return 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:  # a view that hangs is not left behind
                    p.kill()
                    p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
