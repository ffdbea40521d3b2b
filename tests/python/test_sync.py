"""ferry.Sync: matched sets of several topics (ferry/sync.h), released as sets."""

import gc
import os
import subprocess
import threading
import time

import numpy as np
import pytest

import ferry
from conftest import connect, peer

MS = 1_000_000


def publish(pub, stamp_ns, value=0, size=(8, 4)):
    loan = pub.loan_image(size[0], size[1], "mono8")
    np.asarray(loan)[...] = value
    loan.stamp = stamp_ns
    pub.publish(loan)


def stamp_ns(sample):
    sec, nsec = sample.stamp
    return sec * 1_000_000_000 + nsec


@pytest.fixture
def pair(node):
    """Two image topics, each with a publisher and a subscriber, connected."""
    pa = node.publisher("/sync/a", "image", max_chunks=32)
    pb = node.publisher("/sync/b", "image", max_chunks=32)
    sa = node.subscribe("/sync/a", "image", depth=16, max_held=16)
    sb = node.subscribe("/sync/b", "image", depth=16, max_held=16)
    connect(pa, sa)
    connect(pb, sb)
    return pa, pb, sa, sb


def test_sets_match_by_header_stamp(node, pair):
    pa, pb, sa, sb = pair
    with ferry.Sync([sa, sb], queue=8, slop=0.02, stamp="header") as sync:
        assert sync.subscribers == (sa, sb)
        for k in range(6):
            publish(pa, k * 100 * MS, value=k)
            publish(pb, k * 100 * MS + 5 * MS, value=100 + k)
        for k in range(5):  # the last set waits for a later message on each topic
            s = sync.take(timeout=2)
            assert isinstance(s, ferry.SyncSet) and isinstance(s, tuple) and len(s) == 2
            a, b = s
            assert (a.topic, b.topic) == ("/sync/a", "/sync/b")
            assert stamp_ns(a) == k * 100 * MS and stamp_ns(b) == k * 100 * MS + 5 * MS
            assert int(np.asarray(a)[0, 0]) == k and int(np.asarray(b)[0, 0]) == 100 + k
            s.release()
        assert sync.try_take() is None
        st = sync.stats()
        assert st["topics"] == 2 and st["taken"] == 5 and st["sets"] == 5
        assert min(st["received"]) >= 5 and st["discarded"] == [0, 0]
        assert max(st["held"]) <= 1  # what waits for a later message


def test_slop_is_respected(node, pair):
    pa, pb, sa, sb = pair
    with ferry.Sync([sa, sb], slop=0.01, stamp="header") as sync:
        for k in range(5):
            publish(pa, k * 100 * MS)
            publish(pb, k * 100 * MS + 50 * MS)  # 50 ms apart: never within 10 ms
        assert sync.try_take() is None
        with pytest.raises(ferry.TimeoutError):
            sync.take(timeout=0.1)
        st = sync.stats()
        assert st["sets"] == 0 and sum(st["discarded"]) >= 4
        # Within the slop again: sets come out, none spanning more than 10 ms.
        for k in range(5, 9):
            publish(pa, k * 100 * MS)
            publish(pb, k * 100 * MS + 3 * MS)
        got = 0
        while (s := sync.try_take()) is not None:
            with s as (a, b):
                assert abs(stamp_ns(b) - stamp_ns(a)) <= 10 * MS
                got += 1
        assert got >= 2


def test_publish_time_stamps_and_iteration(node, pair):
    pa, pb, sa, sb = pair
    # The two publishes of a pair come one after the other, those of the next pair 250 ms later:
    # a slop of 100 ms pairs them even on a loaded machine, and never across pairs.
    sync = ferry.Sync([sa, sb], slop=0.1)
    for k in range(4):
        publish(pa, 0, value=k)
        publish(pb, 0, value=k)
        time.sleep(0.25)
    n = 0
    for a, b in sync:
        assert abs(a.publish_time - b.publish_time) <= 100 * MS
        assert int(np.asarray(a)[0, 0]) == int(np.asarray(b)[0, 0]) == n
        n += 1
        if n == 3:
            break
    del a, b
    sync.close()
    assert sync.closed
    assert sa.stats()["held"] == 0 and sb.stats()["held"] == 0


def test_release_rules(node, pair):
    pa, pb, sa, sb = pair
    sync = ferry.Sync([sa, sb], stamp="header")
    for k in range(4):
        publish(pa, k * MS)
        publish(pb, k * MS)
    s = sync.take(timeout=2)
    a, b = s
    h = sync.stats()["held"]
    assert min(h) >= 1
    # The set goes back when its last member is done, not before.
    a.release()
    assert a.released and not b.released and not s.released
    with pytest.raises(ferry.StateError):
        a.frame_id
    with pytest.raises(ferry.StateError):
        memoryview(a)
    with pytest.raises(ferry.StateError):
        a.release()
    assert sync.stats()["held"] == h
    sync.release(s)
    assert s.released and b.released
    assert sync.stats()["held"] == [h[0] - 1, h[1] - 1]
    with pytest.raises(ferry.StateError):
        sync.release(s)
    with pytest.raises(ferry.StateError):
        s.release()
    with pytest.raises(ferry.StateError):
        b.stamp
    with pytest.raises(TypeError):
        sync.release((a, b))  # a tuple, not a SyncSet
    # A context manager on the set; members' with-blocks too.
    with sync.take(timeout=2) as s2:
        with s2[0] as first:
            assert first.width == 8
        assert s2[0].released and not s2[1].released
    assert s2.released
    # A set from another Sync is refused.
    sync.close()
    sc = node.subscribe("/sync/c", "image")
    pc = node.publisher("/sync/c", "image")
    connect(pc, sc)
    other = ferry.Sync([sa, sc], stamp="header")
    for k in range(3):
        publish(pa, k * MS)
        publish(pc, k * MS)
    s3 = other.take(timeout=2)
    sd = node.subscribe("/sync/d", "image")
    third = ferry.Sync([sb, sd])
    with pytest.raises(ferry.ForeignError):
        third.release(s3)
    other.release(s3)
    third.close()
    other.close()


def test_dropping_members_releases_the_set(node, pair):
    pa, pb, sa, sb = pair
    sync = ferry.Sync([sa, sb], stamp="header")
    for k in range(3):
        publish(pa, k * MS)
        publish(pb, k * MS)
    a, b = sync.take(timeout=2)  # the SyncSet itself is gone at once
    h = sync.stats()["held"]
    del a
    assert sync.stats()["held"] == h
    del b
    gc.collect()
    assert sync.stats()["held"] == [h[0] - 1, h[1] - 1]
    sync.close()


def test_arrays_outlive_the_release(node, pair):
    pa, pb, sa, sb = pair
    sync = ferry.Sync([sa, sb], stamp="header")
    for k in range(3):
        publish(pa, k * MS, value=7)
        publish(pb, k * MS, value=9)
    s = sync.take(timeout=2)
    h = sync.stats()["held"]
    arr = np.asarray(s[0])
    s.release()
    assert s.released
    assert sync.stats()["held"] == h  # the array still reads the set's first sample
    assert int(arr[0, 0]) == 7
    del arr
    assert sync.stats()["held"] == [h[0] - 1, h[1] - 1]
    sync.close()


def test_subscribers_belong_to_the_sync(node, pair):
    pa, pb, sa, sb = pair
    sync = ferry.Sync([sa, sb], stamp="header")
    for call in (sa.take, sa.try_take, lambda: sa.wait(0), lambda: next(iter(sa))):
        with pytest.raises(ferry.BusyError):
            call()
    with pytest.raises(ferry.BusyError):
        sa.close()
    with pytest.raises(ferry.BusyError):
        ferry.Sync([sa, sb])
    assert sa.stats()["publishers"] == 1  # reading counters is fine
    for k in range(3):
        publish(pa, k * MS)
        publish(pb, k * MS)
    s = sync.take(timeout=2)
    # Closing the Sync gives back what it holds; the set's samples are then released.
    sync.close()
    assert s.released and s[0].released
    with pytest.raises(ferry.StateError):
        s[1].height
    with pytest.raises(ferry.StateError):
        s.release()
    with pytest.raises(ferry.ClosedError):
        sync.take(timeout=0)
    with pytest.raises(ferry.ClosedError):
        sync.stats()
    sync.close()  # twice: nothing
    assert sa.stats()["held"] == 0 and sb.stats()["held"] == 0
    publish(pa, 10 * MS)
    with sa.take(timeout=2) as x:  # the subscriber is free again
        assert x.width == 8


def node_with_a_set(where):
    """A node of its own (the test closes or drops it), a Sync over two topics and one set."""
    node = ferry.Node(dir=where[0], domain=where[1])
    pa = node.publisher("/own/a", "image")
    pb = node.publisher("/own/b", "image")
    sa = node.subscribe("/own/a", "image")
    sb = node.subscribe("/own/b", "image")
    connect(pa, sa)
    connect(pb, sb)
    sync = ferry.Sync([sa, sb], stamp="header")
    for k in range(3):
        publish(pa, k * MS)
        publish(pb, k * MS)
    return node, sync, sync.take(timeout=2)


def test_node_close_closes_the_sync(where):
    node, sync, s = node_with_a_set(where)
    node.close()  # the Sync first, then the subscribers and publishers
    assert sync.closed and all(sub.closed for sub in sync.subscribers) and s.released
    with pytest.raises(ferry.ClosedError):
        sync.take(timeout=0)
    with pytest.raises(ferry.StateError):
        s.release()


def test_dropping_the_node_first(where):
    node, sync, s = node_with_a_set(where)
    del node, sync
    gc.collect()
    # The set holds its Sync, the Sync its subscribers, they their node: all still work.
    assert s[0].width == 8 and s[1].height == 4
    s.release()
    del s
    gc.collect()


def test_invalid_arguments(node, pair):
    pa, pb, sa, sb = pair
    with pytest.raises(ferry.InvalidArgumentError):
        ferry.Sync([sa])
    with pytest.raises(ferry.InvalidArgumentError):
        ferry.Sync([sa, sa])
    with pytest.raises(TypeError):
        ferry.Sync([sa, "b"])
    with pytest.raises(ferry.InvalidArgumentError):
        ferry.Sync([sa, sb], queue=16)  # max_held is 16: not above queue
    with pytest.raises(ferry.InvalidArgumentError):
        ferry.Sync([sa, sb], slop=-1)
    with pytest.raises(ferry.InvalidArgumentError):
        ferry.Sync([sa, sb], stamp="arrival")
    raw = node.subscribe("/sync/raw", "my/bytes")
    with pytest.raises(ferry.InvalidArgumentError):
        ferry.Sync([sa, raw], stamp="header")
    closed = node.subscribe("/sync/closed", "image")
    closed.close()
    with pytest.raises(ferry.ClosedError):
        ferry.Sync([sa, closed])
    ws = node.waitset()
    ws.add(sb)
    with pytest.raises(ferry.BusyError):
        ferry.Sync([sa, sb])
    ws.remove(sb)
    # After all those, the subscribers are free.
    publish(pa, 0)
    with sa.take(timeout=2):
        pass


def test_no_leak_over_many_cycles(node):
    pa = node.publisher("/leak/a", "image", max_chunks=6)
    pb = node.publisher("/leak/b", "image", max_chunks=6)
    sa = node.subscribe("/leak/a", "image", depth=4)
    sb = node.subscribe("/leak/b", "image", depth=4)
    connect(pa, sa)
    connect(pb, sb)
    sync = ferry.Sync([sa, sb], queue=3, stamp="header")
    fds = len(os.listdir("/proc/self/fd"))
    got = 0
    for k in range(400):
        publish(pa, k * MS)
        publish(pb, k * MS)
        s = sync.try_take()
        if s is not None:
            a, b = s
            assert stamp_ns(a) == stamp_ns(b)
            if k % 3 == 0:
                s.release()
            elif k % 3 == 1:
                del s, a
                b.release()
            else:
                with s:
                    np.asarray(a).sum()
            got += 1
        pa.poll(0)
        pb.poll(0)
    assert got >= 390
    st = sync.stats()
    assert max(st["held"]) <= 1 and st["taken"] == got
    assert len(os.listdir("/proc/self/fd")) == fds
    sync.close()
    assert sa.stats()["held"] == 0 and sb.stats()["held"] == 0


def test_wait_releases_the_gil(node, pair):
    pa, pb, sa, sb = pair
    sync = ferry.Sync([sa, sb], stamp="header")
    assert sync.wait(0.01) is False

    def later():
        time.sleep(0.2)
        for k in range(3):
            publish(pa, k * MS)
            publish(pb, k * MS)

    t = threading.Thread(target=later)
    t.start()
    start = time.monotonic()
    s = sync.take(timeout=5)  # the thread can only publish while this waits without the GIL
    assert time.monotonic() - start < 4
    t.join()
    assert sync.wait(0) is True  # one more set is complete
    s.release()
    sync.close()


def test_release_from_another_thread(node, pair):
    pa, pb, sa, sb = pair
    sync = ferry.Sync([sa, sb], stamp="header")
    for k in range(2):
        publish(pa, k * MS)
        publish(pb, k * MS)
    s = sync.take(timeout=2)
    sync.take(timeout=2).release()
    # The main thread waits in take() holding the subscribers; the set released meanwhile is
    # given back by the waiting thread.
    t = threading.Timer(0.1, s.release)
    t.start()
    with pytest.raises(ferry.TimeoutError):
        sync.take(timeout=0.4)
    t.join()
    assert s.released
    assert max(sync.stats()["held"]) <= 1
    sync.close()


def test_c_peers(node, where):
    sa = node.subscribe("/peer/cam", "image", depth=8)
    sb = node.subscribe("/peer/depth", "image", depth=8)
    env = {"FERRY_DOMAIN": str(where[1])}
    procs = [subprocess.Popen([peer(), "pub", where[0], t, "40", "32", "24"], env=env)
             for t in ("/peer/cam", "/peer/depth")]
    try:
        sync = ferry.Sync([sa, sb], queue=6, slop=0.008)
        sets = 0
        last = (0, 0)
        deadline = time.monotonic() + 20
        while sets < 10 and time.monotonic() < deadline:
            try:
                s = sync.take(timeout=1)
            except ferry.TimeoutError:
                continue
            with s as (cam, depth):
                assert abs(cam.publish_time - depth.publish_time) <= 8 * MS
                assert (cam.sequence, depth.sequence) > last
                last = (cam.sequence, depth.sequence)
                for smp in (cam, depth):
                    img = np.asarray(smp)
                    want = (np.arange(img.size, dtype=np.uint64) + 13 * smp.sequence) & 0xFF
                    assert np.array_equal(img.reshape(-1), want.astype(np.uint8))
                    del img
            sets += 1
        assert sets >= 5
        sync.close()
    finally:
        sa.close()
        sb.close()
        for p in procs:
            assert p.wait(20) == 0


def test_invalid_sample_in_a_set(node, pair):
    """A sample that is not a valid image (another process wrote what it liked): its set raises
    ProtocolError and goes back; the next sets come out."""
    pa, pb, sa, sb = pair
    sync = ferry.Sync([sa, sb], stamp="header")
    pa.publish_copy(b"\xff" * 300)  # no valid header: a stamp before any valid one
    publish(pb, 0)
    for k in (1, 2, 3):
        publish(pa, k * 10 * MS)
        publish(pb, k * 10 * MS)
    seen_error = False
    got = []
    for _ in range(4):
        try:
            s = sync.try_take()
        except ferry.ProtocolError:
            seen_error = True
            continue
        if s is None:
            break
        with s as (a, b):
            got.append((stamp_ns(a), stamp_ns(b)))
    assert seen_error  # the set (invalid, b at 0 ms): its header cannot be read
    assert got == [(k * 10 * MS, k * 10 * MS) for k in (1, 2, 3)]
    st = sync.stats()
    assert max(st["held"]) <= 1
    sync.close()
    assert sa.stats()["held"] == 0 and sb.stats()["held"] == 0


def test_sets_released_by_other_threads(node):
    """A thread takes sets while workers release them (and arrays over them) concurrently."""
    import queue as queue_mod

    pa = node.publisher("/mt/a", "image", max_chunks=12)
    pb = node.publisher("/mt/b", "image", max_chunks=12)
    sa = node.subscribe("/mt/a", "image", depth=8)
    sb = node.subscribe("/mt/b", "image", depth=8)
    connect(pa, sa)
    connect(pb, sb)
    sync = ferry.Sync([sa, sb], queue=4, stamp="header")
    work = queue_mod.Queue()
    done = []

    def worker():
        while (s := work.get()) is not None:
            a = np.asarray(s[0])
            s.release()
            assert int(a[0, 0]) == int(a[-1, -1])
            del a
            done.append(1)

    workers = [threading.Thread(target=worker) for _ in range(2)]
    for w in workers:
        w.start()
    taken = 0
    for k in range(300):
        publish(pa, k * MS, value=k % 256)
        publish(pb, k * MS, value=k % 256)
        try:
            s = sync.take(timeout=1)
        except ferry.TimeoutError:
            continue  # a worker still holds sets up to queue
        work.put(s)
        del s
        taken += 1
        pa.poll(0)
        pb.poll(0)
    for _ in workers:
        work.put(None)
    for w in workers:
        w.join()
    assert taken >= 250 and len(done) == taken
    sync.stats()  # gives back what the workers released during the last take
    assert max(sync.stats()["held"]) <= 1
    sync.close()
    assert sa.stats()["held"] == 0 and sb.stats()["held"] == 0


def endpoints(where, topic):
    return sorted((e["kind"], e["alive"])
                  for e in ferry.inspect(topic, domain=where[1], dir=where[0]))


def test_close_while_an_array_reads_a_set(node, pair):
    pa, pb, sa, sb = pair
    sync = ferry.Sync([sa, sb], stamp="header")
    for k in range(3):
        publish(pa, k * MS, value=10 + k)
        publish(pb, k * MS, value=20 + k)
    read = sync.take(timeout=2)
    unread = sync.take(timeout=2)
    arr = np.asarray(read[1])
    sync.close()  # no BusyError: unread goes back now, read when arr goes
    assert sync.closed and read.released and unread.released
    with pytest.raises(ferry.ClosedError):
        sync.take(timeout=0)
    # The subscribers stay the Sync's until the array goes: it still holds their samples.
    with pytest.raises(ferry.BusyError, match="closed"):
        sa.try_take()
    assert int(arr[0, 0]) == 20
    del arr
    sa.try_take()  # no BusyError: free again
    assert sa.stats()["held"] == 0 and sb.stats()["held"] == 0


def test_node_close_while_an_array_reads_a_set(where):
    node = ferry.Node(dir=where[0], domain=where[1])
    pa = node.publisher("/sync/a", "image")
    pb = node.publisher("/sync/b", "image")
    sa = node.subscribe("/sync/a", "image")
    sb = node.subscribe("/sync/b", "image")
    connect(pa, sa)
    connect(pb, sb)
    sync = ferry.Sync([sa, sb], queue=4, stamp="header")
    publish(pa, MS, value=5)
    publish(pb, MS, value=6)
    a, b = sync.take(timeout=2)
    arr = np.asarray(b)
    del a, b
    node.close()
    assert node.closed and sync.closed and sa.closed and sb.closed
    assert endpoints(where, "/sync/a") == [("subscriber", True)]
    assert endpoints(where, "/sync/b") == [("subscriber", True)]
    assert int(arr[0, 0]) == 6
    del arr  # the set goes back, then the Sync, the subscribers and the node are destroyed
    assert endpoints(where, "/sync/a") == [] and endpoints(where, "/sync/b") == []


def test_closed_sync_goes_when_its_last_set_is_done_under_another_thread(node, pair):
    """The last array over a set of a closed Sync goes while another thread holds one of its
    subscribers (wait_publishers): the set waits for that thread, which gives it back and
    destroys the Sync when it lets the subscriber go."""
    pa, pb, sa, sb = pair
    sync = ferry.Sync([sa, sb], stamp="header")
    publish(pa, MS, value=1)
    publish(pb, MS, value=2)
    arr = np.asarray(sync.take(timeout=2)[0])
    sync.close()
    holding = threading.Event()

    def hold():
        holding.set()
        with pytest.raises(ferry.TimeoutError):
            sa.wait_publishers(5, timeout=0.5)  # holds sa's lock, 50 ms at a time

    t = threading.Thread(target=hold)
    t.start()
    holding.wait()
    time.sleep(0.1)
    del arr  # most likely while the other thread holds sa: the set is queued for it
    t.join()
    assert sa.try_take() is None  # no BusyError: the Sync is destroyed, sa is free again
