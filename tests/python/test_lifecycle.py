"""Release on context exit, on garbage collection and after the last array; no leaks."""

import gc
import os
import threading
import time
import tracemalloc

import numpy as np

import ferry
from conftest import connect


def held(sub):
    return sub.stats()["held"]


def test_release_on_exit_and_gc(node):
    pub = node.publisher("/r", "my/Blob")
    sub = node.subscribe("/r", depth=8)
    connect(pub, sub)
    for _ in range(3):
        pub.publish_copy(b"abc")
    with sub.take(timeout=2):
        assert held(sub) == 1
    assert held(sub) == 0
    s = sub.take(timeout=2)
    assert held(sub) == 1
    del s  # reference counting frees it at once
    assert held(sub) == 0
    s = sub.take(timeout=2)
    cycle = [s]
    cycle.append(cycle)  # only the cycle collector frees this one
    del s, cycle
    gc.collect()
    assert held(sub) == 0


def test_release_waits_for_the_last_array(node):
    pub = node.publisher("/r", "my/Blob")
    sub = node.subscribe("/r")
    connect(pub, sub)
    pub.publish_copy(b"x" * 64)
    with sub.take(timeout=2) as s:
        arr = np.asarray(s)
        view = memoryview(s)
    assert s.released and held(sub) == 1  # the arrays still read the publisher's memory
    assert arr[0] == ord("x")
    del arr
    assert held(sub) == 1
    view.release()
    assert held(sub) == 0


def test_release_from_another_thread_while_taking(node):
    pub = node.publisher("/r", "my/Blob")
    sub = node.subscribe("/r")
    connect(pub, sub)
    pub.publish_copy(b"1")
    s = sub.take(timeout=2)
    t = threading.Thread(target=lambda: (time.sleep(0.1), s.release()))
    t.start()
    try:
        sub.take(timeout=0.4)  # holds the subscriber; the release is queued, then done
    except ferry.TimeoutError:
        pass
    t.join()
    assert held(sub) == 0


def fds():
    return len(os.listdir("/proc/self/fd"))


def rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def test_no_leak_over_10000_cycles(node):
    pub = node.publisher("/leak", "image", max_chunks=8)
    sub = node.subscribe("/leak", depth=4)
    connect(pub, sub)

    def cycles(n):
        for i in range(n):
            loan = pub.loan_image(64, 48, "rgb8")
            np.asarray(loan)[0, 0, 0] = i & 0xFF
            pub.publish(loan)
            with sub.take(timeout=2) as s:
                a = np.asarray(s)
                assert a[0, 0, 0] == i & 0xFF
                del a

    cycles(500)  # warm up: chunks carved, caches filled
    gc.collect()
    fd0, rss0 = fds(), rss_kib()
    tracemalloc.start()
    snap0 = tracemalloc.take_snapshot()
    cycles(10000)
    gc.collect()
    snap1 = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(s.size_diff for s in snap1.compare_to(snap0, "filename"))
    assert fds() == fd0
    assert rss_kib() - rss0 < 2048, (rss0, rss_kib())
    assert grown < 64 * 1024, grown
    assert held(sub) == 0
    st = pub.stats()
    assert st["chunks_loaned"] == 0 and st["bytes_copied"] == 0


def test_node_close_order(where):
    node = ferry.Node(dir=where[0], domain=where[1])
    pub = node.publisher("/o", "my/Blob")
    sub = node.subscribe("/o")
    ws = node.waitset()
    ws.add(sub)
    connect(pub, sub)
    pub.publish_copy(b"z")
    s = sub.take(timeout=2)
    unpublished = pub.loan(8)
    node.close()  # waitset, then subscriber (releasing s), then publisher (giving the loan up)
    assert ws.members == [] and sub.closed and pub.closed and node.closed
    assert s.released and unpublished.state == "released"
