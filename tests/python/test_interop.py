"""Python and C on either end: `ferry pub` and the C peer (tests/python/peer.c)."""

import select
import struct
import subprocess
import time

import numpy as np

from conftest import cli, peer

FRAME_MAGIC = 0x454D4152465952  # "RYFRAME", the CLI's synthetic frame


def pattern(shape, seq):
    n = int(np.prod(shape))
    return ((np.arange(n, dtype=np.uint64) + 13 * seq) & 0xFF).astype(np.uint8).reshape(shape)


def test_cli_pub_to_python(node, where):
    sub = node.subscribe("/synthetic", "ferry/synthetic_frame", depth=8)
    p = subprocess.Popen(
        [cli(), "pub", "/synthetic", "--size", "64k", "--rate", "200", "--count", "5",
         "--wait-subscribers", "1", "--dir", where[0], "--domain", str(where[1])],
        stdout=subprocess.DEVNULL)
    try:
        for _ in range(5):
            with sub.take(timeout=10) as s:
                magic, seq, size = struct.unpack_from("<QQQ", memoryview(s))
                assert magic == FRAME_MAGIC and seq == s.sequence and size == s.size == 65536
    finally:
        sub.close()
        assert p.wait(10) == 0


def test_cli_image_to_python(node, where):
    sub = node.subscribe("/cam", "image", depth=8)
    p = subprocess.Popen(
        [cli(), "pub", "/cam", "--image", "64x48", "--rate", "200", "--count", "3",
         "--wait-subscribers", "1", "--dir", where[0], "--domain", str(where[1])],
        stdout=subprocess.DEVNULL)
    try:
        with sub.take(timeout=10) as s:
            assert (s.width, s.height, s.encoding, s.frame_id) == (64, 48, "rgb8", "cam")
            a = np.asarray(s)
            assert a.shape == (48, 64, 3)
            assert struct.unpack_from("<Q", a.tobytes())[0] == FRAME_MAGIC
            del a
    finally:
        sub.close()
        assert p.wait(10) == 0


def test_python_to_c(node, where):
    pub = node.publisher("/py2c", "image")
    p = subprocess.Popen([peer(), "take", f"{where[0]}", "/py2c", "3"],
                         stdout=subprocess.PIPE, text=True,
                         env={"FERRY_DOMAIN": str(where[1])})
    # The peer says ready once connected; the publisher's housekeeping must run meanwhile.
    deadline = time.monotonic() + 10
    while not select.select([p.stdout], [], [], 0)[0] and time.monotonic() < deadline:
        pub.poll(0.01)
    assert p.stdout.readline().strip() == "ready"
    for seq in range(1, 4):
        loan = pub.loan_image(160, 120, "rgb8")
        np.asarray(loan)[...] = pattern((120, 160, 3), seq)
        pub.publish(loan)
    lines = []
    while len(lines) < 3:
        pub.poll(0.01)
        line = p.stdout.readline()
        if not line:
            break
        lines.append(line.split())
    assert p.wait(10) == 0
    p.stdout.close()
    for seq, fields in enumerate(lines, 1):
        assert fields == [str(seq), "160x120", str(int(pattern((120, 160, 3), seq).sum())), "ok"]
    assert pub.stats()["bytes_copied"] == 0


def test_c_to_python(node, where):
    sub = node.subscribe("/c2py", "image", depth=8)
    p = subprocess.Popen([peer(), "pub", f"{where[0]}", "/c2py", "3", "96", "64"],
                         env={"FERRY_DOMAIN": str(where[1])})
    try:
        for _ in range(3):
            with sub.take(timeout=10) as s:
                a = np.asarray(s)
                assert s.frame_id == "peer"
                assert np.array_equal(a, pattern((64, 96, 3), s.sequence))
                del a
    finally:
        sub.close()
        assert p.wait(10) == 0
