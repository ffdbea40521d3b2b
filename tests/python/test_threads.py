"""Blocking calls release the GIL; publishers in other processes (multiprocessing)."""

import multiprocessing
import threading
import time

import numpy as np

import ferry
from conftest import connect


def test_take_releases_the_gil(node):
    sub = node.subscribe("/quiet", "my/Blob")
    counter = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            counter[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    time.sleep(0.05)
    before = counter[0]
    try:
        sub.take(timeout=0.5)
    except ferry.TimeoutError:
        pass
    during = counter[0] - before
    stop.set()
    t.join()
    # A thread starved by a held GIL would get a switch interval (5 ms) at best.
    assert during > 100000, during


def test_wait_and_waitset_release_the_gil(node):
    sub = node.subscribe("/quiet", "my/Blob")
    ws = node.waitset()
    ws.add(node.subscribe("/quiet2", "my/Blob"))
    for call in (lambda: sub.wait(0.3), lambda: ws.wait(0.3)):
        ticks = [0]
        done = threading.Event()

        def spin():
            while not done.is_set():
                ticks[0] += 1

        t = threading.Thread(target=spin)
        t.start()
        call()
        done.set()
        t.join()
        assert ticks[0] > 50000


def test_take_from_a_thread_while_publishing(node):
    pub = node.publisher("/t", "my/Blob")
    sub = node.subscribe("/t", depth=16)
    connect(pub, sub)
    got = []

    def reader():
        for _ in range(20):
            with sub.take(timeout=5) as s:
                got.append(bytes(s))

    t = threading.Thread(target=reader)
    t.start()
    for i in range(20):
        pub.publish_copy(b"%d" % i)
        pub.poll(0.002)
    t.join()
    assert got == [b"%d" % i for i in range(20)]


def child_publisher(dirname, domain, count):
    with ferry.Node(dir=dirname, domain=domain, name="child") as node:
        pub = node.publisher("/mp", "image")
        pub.wait_subscribers(1, timeout=10)
        for i in range(1, count + 1):
            loan = pub.loan_image(320, 240, "mono8")
            np.asarray(loan)[...] = i
            pub.publish(loan)
            pub.poll(0.01)
        deadline = time.monotonic() + 10
        while pub.stats()["subscribers"] and time.monotonic() < deadline:
            pub.poll(0.01)


def test_publisher_in_a_forked_child(node, where):
    ctx = multiprocessing.get_context("fork")
    sub = node.subscribe("/mp", "image", depth=8)
    child = ctx.Process(target=child_publisher, args=(where[0], where[1], 5))
    child.start()
    seen = []
    for _ in range(5):
        with sub.take(timeout=10) as s:
            a = np.asarray(s)
            assert a.shape == (240, 320) and (a == s.sequence).all()
            seen.append(s.sequence)
            del a
    sub.close()
    child.join(10)
    assert child.exitcode == 0
    assert seen == [1, 2, 3, 4, 5]
