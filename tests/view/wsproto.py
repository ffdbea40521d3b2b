"""The client side of WebSocket (RFC 6455) that the Python tests of ferry view need, with
nothing but the standard library: the upgrade, masked frames out, whole frames in."""
import base64
import os
import re
import socket
import struct


# The token connect sends when it is given none: the test sets it once it has read the view's
# first line (token_of).
TOKEN = None


def token_of(line):
    """The port and the token (None without one) in the line ferry view prints first."""
    m = re.search(r"serving http://[^ ]*:(\d+)/(?:\?token=([0-9a-f]+))? ", line)
    return (int(m.group(1)), m.group(2)) if m else (None, None)


def connect(port, protocols=("foxglove.websocket.v1",), rcvbuf=0, timeout=5, token=None,
            origin=None):
    """Opens a connection and upgrades it, offering protocols (a tuple of names, in order),
    with ?token=token (None: TOKEN; "": none) and an Origin header when origin is given. rcvbuf, when not
    0, is set as SO_RCVBUF before connecting (fixed: no autotuning). Returns (sock, status line,
    headers with lower-case names, bytes received past the headers)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(timeout)
    sock.connect(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    offer = f"Sec-WebSocket-Protocol: {', '.join(protocols)}\r\n" if protocols else ""
    token = TOKEN if token is None else token
    path = f"/?token={token}" if token else "/"
    origin = f"Origin: {origin}\r\n" if origin else ""
    sock.sendall((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                  f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                  f"Sec-WebSocket-Version: 13\r\n{offer}{origin}\r\n").encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = sock.recv(4096)
        if not d:
            break
        buf += d
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode(errors="replace").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return sock, lines[0], headers, rest


def frame(payload, opcode=1):
    """A masked client frame."""
    mask = os.urandom(4)
    n = len(payload)
    head = bytes([0x80 | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + struct.pack(">H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack(">Q", n)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def split(buf):
    """The whole server frames at the start of buf: ([(opcode, payload)], what is left)."""
    out = []
    while len(buf) >= 2:
        n, at = buf[1] & 127, 2
        if n == 126:
            if len(buf) < 4:
                break
            n, at = struct.unpack(">H", buf[2:4])[0], 4
        elif n == 127:
            if len(buf) < 10:
                break
            n, at = struct.unpack(">Q", buf[2:10])[0], 10
        if len(buf) < at + n:
            break
        out.append((buf[0] & 15, buf[at:at + n]))
        buf = buf[at + n:]
    return out, buf


def message_data(payload):
    """A Message Data payload (binary opcode 1) of an image or compressed image: (subscription
    id, header stamp in seconds), or None for anything else."""
    if len(payload) < 13 + 12 or payload[0] != 1:
        return None
    sub = struct.unpack_from("<I", payload, 1)[0]
    sec, nsec = struct.unpack_from("<iI", payload, 13 + 4)  # after the CDR encapsulation
    return sub, sec + nsec / 1e9
