#!/usr/bin/env python3
"""Who ferry view serves, with nothing but Python's standard library (so that the sanitizer
build runs it too):

  - the token: an HTTP request without it, or with a wrong one (one character off, cut short,
    too long), is refused with 403 and the connection closed; with it the page is served. The
    same for the WebSocket upgrade: 403 without it, 101 and serverInfo with it;
  - the origin: an upgrade whose Origin is another site's is refused (403) although it has the
    token; the view's own page (http:// and the Host it was reached at) is let in, and so is a
    client that sends no Origin; a second view with --origin lets the listed origin in and
    still refuses others and requests without the token;
  - --no-token: a third view serves the page and the WebSocket without a token, says so on
    stderr, and prints no token in its URL.

usage: access_test.py PATH_TO_FERRY
Exit status: 0 passed, 1 failed, 77 skipped (ferry built without ferry view)."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile

import wsproto

FERRY = sys.argv[1]


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def http_get(port, path, timeout=10):
    """One GET; (status code, body, whether the view then closed the connection)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = s.recv(65536)
        if not d:
            break
        buf += d
    head, _, body = buf.partition(b"\r\n\r\n")
    status = head.split(b"\r\n")[0].decode(errors="replace")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.decode(errors="replace").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    while len(body) < length:
        d = s.recv(65536)
        if not d:
            break
        body += d
    code = int(status.split(" ")[1]) if len(status.split(" ")) > 1 else 0
    # A refused request ends the connection: recv sees the end (not a timeout).
    closed = False
    if code != 200:
        try:
            closed = s.recv(1) == b""
        except socket.timeout:
            closed = False
        except OSError:
            closed = True
    s.close()
    return code, body, closed


def upgrade(port, token=None, origin=None):
    """An upgrade offering foxglove.websocket.v1: (status code, serverInfo or None)."""
    sock, status, _, rest = wsproto.connect(port, token=token, origin=origin, timeout=10)
    code = int(status.split(" ")[1]) if len(status.split(" ")) > 1 else 0
    info = None
    if code == 101:
        buf = rest
        while info is None:
            frames, buf = wsproto.split(buf)
            for op, payload in frames:
                if op == 1 and info is None:
                    info = json.loads(payload)
            if info is None:
                d = sock.recv(65536)
                if not d:
                    break
                buf += d
    sock.close()
    return code, info


def start(env, tmp, name, *args):
    view = subprocess.Popen([FERRY, "view", "--port", "0", *args], env=env, stdout=subprocess.PIPE,
                            stderr=open(os.path.join(tmp, name + ".err"), "w"), text=True)
    port, token = wsproto.token_of(view.stdout.readline())
    if port is None:
        fail(f"ferry view {' '.join(args)} did not say its port")
    return view, port, token


def stop(view, tmp, name):
    view.send_signal(signal.SIGTERM)
    try:
        rc = view.wait(timeout=10)
    except subprocess.TimeoutExpired:
        fail(f"{name}: ferry view did not stop within 10 s of SIGTERM")
    if rc != 0:
        sys.stdout.write(open(os.path.join(tmp, name + ".err")).read()[-3000:])
        fail(f"{name}: ferry view exited {rc} after SIGTERM")


def main():
    if subprocess.run([FERRY, "view", "--help"], capture_output=True).returncode != 0:
        print("SKIP: ferry built without ferry view")
        return 77
    tmp = tempfile.mkdtemp(prefix="ferry-view-access-")
    os.chmod(tmp, 0o700)
    env = dict(os.environ, FERRY_DIR=os.path.join(tmp, "root"), FERRY_DOMAIN="7")
    procs = []
    try:
        view, port, token = start(env, tmp, "a")
        procs.append(view)
        if token is None or len(token) != 32:
            fail(f"the URL carries no 128-bit hex token: {token!r}")

        # HTTP: 403 and closed without the token; served with it.
        wrong = ("1" if token[0] != "1" else "2") + token[1:]
        for path in ("/", "/index.html", "/etc/passwd", "/?token=", f"/?token={wrong}",
                     f"/?token={token[:-1]}", f"/?token={token}0", f"/?x=1&token={wrong}"):
            code, _, closed = http_get(port, path)
            if code != 403 or not closed:
                fail(f"GET {path}: {code}, closed {closed}; expected 403 and the end")
        code, body, _ = http_get(port, f"/?token={token}")
        if code != 200 or b"foxglove.websocket.v1" not in body:
            fail(f"GET /?token=TOKEN: {code} ({len(body)} bytes)")
        code, _, _ = http_get(port, f"/index.html?x=1&token={token}")
        if code != 200:
            fail(f"GET /index.html?x=1&token=TOKEN: {code}")
        code, _, _ = http_get(port, f"/etc/passwd?token={token}")
        if code != 404:
            fail(f"GET /etc/passwd?token=TOKEN: {code}, not 404")
        print("ok: HTTP: 403 without the token or with a wrong one, the page with it")

        # WebSocket: the same, and the origin.
        for t in ("", wrong, token[:16]):
            code, _ = upgrade(port, token=t)
            if code != 403:
                fail(f"upgrade with token {t!r}: {code}, not 403")
        code, info = upgrade(port, token=token)
        if code != 101 or not info or info.get("op") != "serverInfo":
            fail(f"upgrade with the token: {code}, {info}")
        for origin in ("https://evil.example", "http://127.0.0.1:1", "null",
                       f"http://127.0.0.1:{port}.evil.example"):
            code, _ = upgrade(port, token=token, origin=origin)
            if code != 403:
                fail(f"upgrade from Origin {origin} with the token: {code}, not 403")
        code, info = upgrade(port, token=token, origin=f"http://127.0.0.1:{port}")
        if code != 101 or not info:
            fail(f"upgrade from the view's own page: {code}")
        code, _ = upgrade(port, token="", origin=f"http://127.0.0.1:{port}")
        if code != 403:
            fail(f"upgrade from the view's own page without the token: {code}, not 403")
        print("ok: WebSocket: 403 without the token or from another origin; served with the token, "
              "from the own page or with no Origin")
        stop(view, tmp, "a")

        # --origin lets a listed origin in (with the token), nothing else.
        view, port, token = start(env, tmp, "b", "--origin", "https://app.foxglove.dev")
        procs.append(view)
        code, info = upgrade(port, token=token, origin="https://app.foxglove.dev")
        if code != 101 or not info:
            fail(f"--origin https://app.foxglove.dev: that origin got {code}")
        code, _ = upgrade(port, token="", origin="https://app.foxglove.dev")
        if code != 403:
            fail(f"--origin: the listed origin without the token got {code}, not 403")
        code, _ = upgrade(port, token=token, origin="https://evil.example")
        if code != 403:
            fail(f"--origin https://app.foxglove.dev: another origin got {code}, not 403")
        print("ok: --origin lets the listed origin in with the token, and no other")
        stop(view, tmp, "b")

        # --no-token: open, and said.
        view, port, token = start(env, tmp, "c", "--no-token")
        procs.append(view)
        if token is not None:
            fail(f"--no-token: the URL still carries a token ({token})")
        code, body, _ = http_get(port, "/")
        if code != 200:
            fail(f"--no-token: GET / got {code}")
        code, info = upgrade(port, token="")
        if code != 101 or not info:
            fail(f"--no-token: an upgrade without a token got {code}")
        code, _ = upgrade(port, token="", origin="https://evil.example")
        if code != 403:
            fail(f"--no-token: another origin got {code}, not 403")
        stop(view, tmp, "c")
        err = open(os.path.join(tmp, "c.err")).read()
        if "--no-token" not in err:
            fail(f"--no-token: no warning on stderr ({err!r})")
        print("ok: --no-token serves without a token and says so:", err.strip().splitlines()[0])
        print("PASS: view access")
        return 0
    finally:
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
