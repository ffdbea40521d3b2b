"""Node.subscribe(topic) without a type waits for a publisher, as `ferry echo` does, up to its
timeout (None: for ever), then raises TimeoutError; Ctrl-C and a close end the wait."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import ferry
from conftest import cli


def later(delay, start):
    """Calls start() after delay seconds in a thread; returns the thread and an event set just
    before the call."""
    started = threading.Event()

    def run():
        time.sleep(delay)
        started.set()
        start()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, started


def test_waits_for_a_c_publisher_started_later(node, where):
    env = dict(os.environ, FERRY_DIR=where[0], FERRY_DOMAIN=str(where[1]))
    procs = []
    thread, started = later(0.5, lambda: procs.append(subprocess.Popen(
        [cli(), "pub", "/late", "--image", "64x48", "--rate", "50"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)))
    try:
        sub = node.subscribe("/late", timeout=120)  # blocks, GIL released: the thread runs
        # It could not have returned before the publisher existed: the topic had no endpoint.
        assert started.is_set()
        assert sub.type_name == "sensor_msgs/Image" and sub.kind == "image"
        with sub.take(timeout=60) as frame:
            assert np.asarray(frame).shape == (48, 64, 3)
    finally:
        thread.join()  # the publisher is started even when subscribe() failed: stop it too
        for p in procs:
            p.send_signal(signal.SIGTERM)
            assert p.wait(30) == 0


LATE_PUBLISHER = """
import sys, time, ferry
time.sleep(0.5)
with ferry.Node(name="late") as node:
    pub = node.publisher("/late_py", "my/LateType")
    deadline = time.monotonic() + 60
    while pub.stats()["subscribers"] < 1 and time.monotonic() < deadline:
        pub.poll(0.01)
    pub.publish_copy(b"hello")
    while pub.stats()["chunks_in_use"] and time.monotonic() < deadline:
        pub.poll(0.01)
"""


def test_waits_for_a_python_publisher_started_later(node, where):
    env = dict(os.environ, FERRY_DIR=where[0], FERRY_DOMAIN=str(where[1]))
    p = subprocess.Popen([sys.executable, "-X", "dev", "-c", LATE_PUBLISHER],
                         stderr=subprocess.PIPE, text=True, env=env)
    try:
        sub = node.subscribe("/late_py", timeout=120)
        assert sub.type_name == "my/LateType" and sub.kind == "bytes"
        with sub.take(timeout=60) as s:
            assert bytes(s) == b"hello"
    finally:
        _, err = p.communicate(timeout=120)
    assert p.returncode == 0 and err == "", err


def test_timeout(node):
    t0 = time.monotonic()
    with pytest.raises(ferry.TimeoutError) as info:
        node.subscribe("/nobody", timeout=0.3)
    assert time.monotonic() - t0 >= 0.3
    assert isinstance(info.value, TimeoutError) and info.value.errname == "FERRY_ETIMEDOUT"
    assert "/nobody" in str(info.value) and "type=" in str(info.value)
    with pytest.raises(ferry.TimeoutError):
        node.subscribe("/nobody", timeout=0)  # one look, no wait
    with pytest.raises(ValueError):
        node.subscribe("/nobody", timeout=-1)
    # A type given subscribes at once, publisher or not.
    assert node.subscribe("/nobody", "image", timeout=0).kind == "image"


def test_type_of_a_live_subscriber_is_taken_at_once(node):
    first = node.subscribe("/typed", "pointcloud")  # noqa: F841
    assert node.subscribe("/typed", timeout=0).kind == "pointcloud"


def test_signal_interrupts_the_wait(node):
    class Stop(Exception):
        pass

    def handler(signum, frame):
        raise Stop()

    old = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(Stop):
            node.subscribe("/never")  # for ever, but for the signal
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_ctrl_c_in_a_script(where):
    env = dict(os.environ, FERRY_DIR=where[0], FERRY_DOMAIN=str(where[1]))
    p = subprocess.Popen([sys.executable, "-X", "dev", "-c", textwrap.dedent("""
        import ferry
        with ferry.Node() as node:
            print("waiting", flush=True)
            try:
                node.subscribe("/never")
            except KeyboardInterrupt:
                print("interrupted")
    """)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert p.stdout.readline() == "waiting\n"
        time.sleep(0.2)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 0 and err == "" and out == "interrupted\n", (p.returncode, out, err)


def test_close_from_another_thread_ends_the_wait(where):
    node = ferry.Node(dir=where[0], domain=where[1])
    thread, _ = later(0.3, node.close)
    with pytest.raises(ferry.ClosedError):
        node.subscribe("/never")
    thread.join()
    assert node.closed
