#!/usr/bin/env python3
"""ferry view under a flood of connections that never make a request, with nothing but Python's
standard library (so that the sanitizer build runs it too). The view runs with a descriptor
limit of 256 (RLIMIT_NOFILE, as `ulimit -n 256` sets it): it keeps 64 of them for ferry and
takes at most 48 connections at once (a quarter of the rest).

  - a first wave of far more connections than that (1100 where this process may open them):
    half send nothing, half the beginning of a request that never ends;
  - then 5 viewers (WebSocket clients with the token) connect (trying again when shed before
    their request was read, as a browser would), subscribe to a camera and must each get frames;
  - a second wave as large while they watch: every viewer must go on getting frames (a
    connection that made a request with the token is never closed for a newcomer);
  - then the page is still served to a request with the token;
  - the view's stderr stays short (fewer than 20 lines: what it sheds is said at most once a
    second, never a line per connection) and says that it shed connections; it stops cleanly.

Counts, not times: the deadlines are there only so that a broken view fails instead of hanging.

usage: flood_test.py PATH_TO_FERRY
Exit status: 0 passed, 1 failed, 77 skipped (ferry built without ferry view, or this process
may not open enough descriptors)."""
import errno
import json
import os
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import wsproto

FERRY = sys.argv[1]
VIEW_NOFILE = 256
WAVE = 1100
VIEWERS = 5
FRAMES = 3
DEADLINE_S = 60  # for what takes well under a second on a quiet machine


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def wave(port, n):
    """Opens n connections at once (non-blocking connects, then a wait for them to complete);
    half send nothing, half the start of a request without its end. Returns the sockets that
    connected, and how many did not."""
    socks, failed = [], 0
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        e = s.connect_ex(("127.0.0.1", port))
        if e not in (0, errno.EINPROGRESS):
            s.close()
            failed += 1
            continue
        socks.append(s)
    pending = {s.fileno(): s for s in socks}
    poller = select.poll()
    for fd in pending:
        poller.register(fd, select.POLLOUT)
    done, end = [], time.monotonic() + DEADLINE_S
    while pending and time.monotonic() < end:
        for fd, _ in poller.poll(1000):
            s = pending.pop(fd)
            poller.unregister(fd)
            if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
                s.close()
                failed += 1
                continue
            if len(done) % 2:
                try:
                    s.send(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                except OSError:
                    pass  # already closed by the view: that is what it may do
            done.append(s)
    for s in pending.values():
        s.close()
        failed += 1
    return done, failed


class Viewer:
    """A WebSocket client with the token that subscribes to /cam/image and counts its frames."""

    def __init__(self, port, name):
        self.name = name
        # A newcomer that arrives behind a flood may be shed before its request is read (it
        # waits in the kernel's queue behind the idle connections, and the view takes at most
        # its budget in one pass): as a browser would, it tries again. What must hold is that
        # it is served in the end, and that once served it is never closed for a newcomer.
        self.retries = 0
        deadline = time.monotonic() + DEADLINE_S
        while True:
            try:
                self.sock, status, _, self.buf = wsproto.connect(port, timeout=DEADLINE_S)
            except OSError as e:
                status, why = "", f"{e}: the view refused or closed the connection"
            else:
                why = f"not upgraded: {status!r}"
            if status.startswith("HTTP/1.1 101"):
                break
            if status or time.monotonic() > deadline:
                fail(f"{name}: {why} ({self.retries} retries)")
            self.retries += 1
            time.sleep(0.1)
        self.frames = 0
        self.subscribed = False
        self.sock.setblocking(False)
        self.handle()  # what came with the upgrade's answer

    def on_readable(self):
        try:
            d = self.sock.recv(1 << 20)
        except BlockingIOError:
            return
        except OSError as e:
            fail(f"{self.name}: {e} after {self.frames} frames")
        if not d:
            fail(f"{self.name}: the view closed the connection after {self.frames} frames")
        self.buf += d
        self.handle()

    def handle(self):
        frames, self.buf = wsproto.split(self.buf)
        for op, payload in frames:
            if op == 1:
                m = json.loads(payload)
                if m.get("op") == "advertise" and not self.subscribed:
                    for ch in m["channels"]:
                        if ch["topic"] == "/cam/image":
                            self.sock.setblocking(True)
                            self.sock.sendall(wsproto.frame(json.dumps(
                                {"op": "subscribe",
                                 "subscriptions": [{"id": 1, "channelId": ch["id"]}]}).encode()))
                            self.sock.setblocking(False)
                            self.subscribed = True
            elif op == 2 and wsproto.message_data(payload) is not None:
                self.frames += 1
            elif op == 8:
                fail(f"{self.name}: the view closed the connection: {payload!r}")


def watch(viewers, at_least, what):
    """Reads every viewer until each has at_least frames."""
    end = time.monotonic() + DEADLINE_S
    by_fd = {v.sock.fileno(): v for v in viewers}
    poller = select.poll()
    for fd in by_fd:
        poller.register(fd, select.POLLIN)
    while any(v.frames < at_least for v in viewers):
        if time.monotonic() > end:
            fail(f"{what}: frames per viewer {[v.frames for v in viewers]} (subscribed "
                 f"{[v.subscribed for v in viewers]}), expected {at_least} "
                 f"each within {DEADLINE_S} s")
        for fd, _ in poller.poll(1000):
            by_fd[fd].on_readable()


def closed_by_view(socks):
    """How many of socks the view has closed (end of stream or reset)."""
    n = 0
    for s in socks:
        try:
            if s.recv(1) == b"":
                n += 1
        except BlockingIOError:
            pass
        except OSError:
            n += 1
    return n


def main():
    if subprocess.run([FERRY, "view", "--help"], capture_output=True).returncode != 0:
        print("SKIP: ferry built without ferry view")
        return 77
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 2 * WAVE + 100
    if hard != resource.RLIM_INFINITY and hard < want:
        print(f"SKIP: this process may open {hard} descriptors, the test needs {want}")
        return 77
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    tmp = tempfile.mkdtemp(prefix="ferry-view-flood-")
    os.chmod(tmp, 0o700)
    env = dict(os.environ, FERRY_DIR=os.path.join(tmp, "root"), FERRY_DOMAIN="8")
    procs, waves = [], []
    err_path = os.environ.get("FLOOD_ERR") or os.path.join(tmp, "view.err")
    try:
        procs.append(subprocess.Popen([FERRY, "pub", "/cam/image", "--image", "160x120", "--rate", "30"],
                                      env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        view = subprocess.Popen(
            [FERRY, "view", "--port", "0"], env=env, stdout=subprocess.PIPE,
            stderr=open(err_path, "w"), text=True,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (VIEW_NOFILE, VIEW_NOFILE)))
        procs.append(view)
        port, wsproto.TOKEN = wsproto.token_of(view.stdout.readline())
        if port is None or wsproto.TOKEN is None:
            fail("ferry view did not say its port and token")

        first, failed = wave(port, WAVE)
        waves.append(first)
        print(f"first wave: {len(first)} connections made, {failed} not")
        if len(first) < 4 * VIEW_NOFILE:
            fail(f"only {len(first)} of {WAVE} connections made: not a flood")

        viewers = [Viewer(port, f"viewer {i + 1}") for i in range(VIEWERS)]
        watch(viewers, FRAMES, "after the first wave")
        print(f"ok: {VIEWERS} viewers connected behind {len(first)} idle connections get frames "
              f"({sum(v.retries for v in viewers)} connects shed and tried again); "
              f"the view closed {closed_by_view(first)} of those")

        base = [v.frames for v in viewers]
        second, failed = wave(port, WAVE)
        waves.append(second)
        print(f"second wave: {len(second)} connections made, {failed} not")
        watch(viewers, max(base) + FRAMES, "during the second wave")
        print(f"ok: while {len(second)} more came, the viewers went on: frames {[v.frames for v in viewers]}")

        s = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S)
        s.sendall(f"GET /?token={wsproto.TOKEN} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        head = s.recv(4096).decode(errors="replace")
        s.close()
        if not head.startswith("HTTP/1.1 200"):
            fail(f"the page after the flood: {head.splitlines()[:1]}")
        print("ok: the page is served after the flood")

        for v in viewers:
            v.sock.close()
        for w in waves:
            for s in w:
                s.close()
        view.send_signal(signal.SIGTERM)
        try:
            rc = view.wait(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            fail(f"ferry view did not stop within {DEADLINE_S} s of SIGTERM")
        err = open(err_path).read().splitlines()
        print("view stderr:", *err[:8], sep="\n  ")
        if rc != 0:
            fail(f"ferry view exited {rc} after SIGTERM")
        if len(err) >= 20:
            fail(f"ferry view wrote {len(err)} lines to stderr under the flood (at most 19 expected)")
        if not any("closed for newer ones" in line for line in err):
            fail("ferry view did not say that it shed connections")
        print(f"ok: {len(err)} lines on stderr")
        print("PASS: view flood")
        return 0
    finally:
        for w in waves:
            for s in w:
                s.close()
        for p in procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
