#!/usr/bin/env python3
"""ferry view against random client messages, with nothing but Python's standard library, so
that it also runs in a sanitizer build: a WebSocket client (handshake and masking by hand)
sends a few thousand mutations of subscribe and unsubscribe messages (bit flips, cuts, deep
nesting, huge and negative numbers, floats, escapes, stray bytes, invalid UTF-8, binary
frames), reconnecting whenever the view closes on it; then a fresh client must still get
serverInfo, subscribe and receive a frame, and `ferry view` must stop cleanly (exit 0) on
SIGTERM.

usage: fuzz_test.py PATH_TO_FERRY
Exit status: 0 passed, 1 failed, 77 skipped (ferry built without ferry view)."""
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import wsproto

FERRY = sys.argv[1]
SECONDS = float(os.environ.get("FERRY_VIEW_FUZZ_SECONDS", "6"))


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


class Client:
    """A WebSocket client whose reader thread drains what the server sends."""

    def __init__(self, port):
        self.sock, status, _, self.rest = wsproto.connect(port)
        if not status.startswith("HTTP/1.1 101"):
            self.sock.close()
            raise ConnectionError(status)
        self.texts, self.binaries, self.closed, self.close_payload = [], 0, False, b""
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        buf = self.rest
        try:
            while True:
                frames, buf = wsproto.split(buf)
                with self.lock:
                    for op, payload in frames:
                        if op == 1 and len(self.texts) < 1000:
                            self.texts.append(payload.decode())
                        elif op == 2:
                            self.binaries += 1
                        elif op == 8:
                            self.close_payload = payload
                            self.closed = True
                d = self.sock.recv(65536)
                if not d:
                    break
                buf += d
        except OSError:
            pass
        self.closed = True

    def send(self, payload, opcode=1):
        self.sock.sendall(wsproto.frame(payload, opcode))

    def json(self, op):
        with self.lock:
            for t in self.texts:
                try:
                    m = json.loads(t)
                except ValueError:
                    fail(f"the view sent text that is not JSON: {t[:80]!r}")
                if m.get("op") == op:
                    return m
        return None

    def close(self):
        # shutdown() first: a close() alone would leave the connection open while the reader
        # thread sits in recv().
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def mutate(rng, channels):
    ids = [rng.choice(channels + [0, 1, 2**32 - 1, 2**32, -1])]
    base = rng.choice([
        {"op": "subscribe", "subscriptions": [{"id": rng.randrange(10), "channelId": ids[0]}]},
        {"op": "unsubscribe", "subscriptionIds": [rng.randrange(10)]},
        {"op": "ferrySubscribeStats"},
        {"op": "ferryAckMode"},
        {"op": "ferryAck", "subscriptionIds": [rng.randrange(10)]},
        {"op": rng.choice(["advertise", "getParameters", "", "x" * 300, "subscribe\u0000"])},
    ])
    text = json.dumps(base).encode()
    kind = rng.randrange(12)
    if kind == 0:  # flip bytes
        b = bytearray(text)
        for _ in range(rng.randrange(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        text = bytes(b)
    elif kind == 1:  # cut
        text = text[:rng.randrange(len(text))]
    elif kind == 2:  # deep nesting
        d = rng.randrange(5, 200)
        text = b'{"op":"subscribe","subscriptions":' + b"[" * d + b"]" * d + b"}"
    elif kind == 3:  # odd numbers
        num = rng.choice([b"1e400", b"-0", b"1.5", b"99999999999999999999999", b"0x10", b"NaN"])
        text = b'{"op":"subscribe","subscriptions":[{"id":' + num + b',"channelId":' + num + b"}]}"
    elif kind == 4:  # escapes
        text = b'{"op":"\\u0073ubscribe\\ud800\\"\\\\","subscriptions":[{"id":"\\n"}]}'
    elif kind == 5:  # invalid UTF-8 (the view closes the connection: 1007)
        text = b'{"op":"\xff\xfe"}'
    elif kind == 6:  # many entries
        n = rng.randrange(200, 400)
        text = json.dumps({"op": "subscribe", "subscriptions": [
            {"id": i, "channelId": rng.choice(channels)} for i in range(n)]}).encode()
    elif kind == 7:  # duplicated keys, wrong types
        text = b'{"op":"subscribe","op":7,"subscriptions":{"id":1},"subscriptionIds":"x"}'
    elif kind == 8:  # a binary frame
        return os.urandom(rng.randrange(1, 64)), 2
    elif kind == 9:  # unsubscribe of many ids
        text = json.dumps({"op": "unsubscribe", "subscriptionIds": list(range(300))}).encode()
    return text, 1


def main():
    if subprocess.run([FERRY, "view", "--help"], capture_output=True).returncode != 0:
        print("SKIP: ferry built without ferry view")
        return 77
    tmp = tempfile.mkdtemp(prefix="ferry-view-fuzz-")
    os.chmod(tmp, 0o700)
    env = dict(os.environ, FERRY_DIR=os.path.join(tmp, "root"), FERRY_DOMAIN="5")
    procs = []
    try:
        procs.append(subprocess.Popen([FERRY, "pub", "/cam/image", "--image", "64x48", "--rate", "30"],
                                      env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        view = subprocess.Popen([FERRY, "view", "--port", "0"], env=env, stdout=subprocess.PIPE,
                                stderr=open(os.path.join(tmp, "view.err"), "w"), text=True)
        procs.append(view)
        port, wsproto.TOKEN = wsproto.token_of(view.stdout.readline())
        if port is None or wsproto.TOKEN is None:
            fail("ferry view did not say its port and token")
        rng = random.Random(int(os.environ.get("FERRY_VIEW_FUZZ_SEED", "1")))
        time.sleep(1.2)  # the camera is advertised within a rescan

        sent = reconnects = 0
        end = time.monotonic() + SECONDS
        c = Client(port)
        channels = [1, 2]
        while time.monotonic() < end:
            if c.closed:
                c.close()
                c = Client(port)
                reconnects += 1
            adv = c.json("advertise")
            if adv and adv["channels"]:
                channels = [ch["id"] for ch in adv["channels"]]
            payload, opcode = mutate(rng, channels)
            try:
                c.send(payload, opcode)
                sent += 1
            except OSError:
                c.closed = True
        c.close()
        if view.poll() is not None:
            fail(f"ferry view died (exit {view.returncode}) after {sent} messages")

        # A fresh client is served as before.
        c = Client(port)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not c.json("advertise"):
            time.sleep(0.05)
        info, adv = c.json("serverInfo"), c.json("advertise")
        if not info or not adv:
            with c.lock:
                got = list(c.texts)
            fail(f"a fresh client got no serverInfo or advertise (closed {c.closed} "
                 f"{c.close_payload!r}, got {got[:3]})")
        raw = [ch["id"] for ch in adv["channels"] if ch["topic"] == "/cam/image"]
        if not raw:
            fail(f"/cam/image is not advertised: {adv}")
        c.send(json.dumps({"op": "subscribe", "subscriptions": [{"id": 1, "channelId": raw[0]}]}).encode())
        while time.monotonic() < deadline and c.binaries == 0:
            time.sleep(0.05)
        if c.binaries == 0:
            fail("a fresh client got no frame")
        c.close()
        print(f"ok: {sent} random messages, {reconnects} reconnections; a fresh client is served")

        view.send_signal(signal.SIGTERM)
        rc = view.wait(timeout=10)
        if rc != 0:
            sys.stdout.write(open(os.path.join(tmp, "view.err")).read()[-3000:])
            fail(f"ferry view exited {rc} after SIGTERM")
        print("PASS: view fuzz")
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
