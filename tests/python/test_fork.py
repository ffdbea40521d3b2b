"""A process made by fork() (os.fork, multiprocessing's "fork" start method) cannot use the ferry
objects it inherits: every call raises ForkError, and dropping them, collected or at
interpreter exit, leaves the parent's publisher, subscriber, held sample and loan as they were.

The ferry objects live only in the dict HELD, so that the child's clearing it destroys them
there (no test frame refers to them)."""

import gc
import multiprocessing
import os
import subprocess
import sys
import time
import traceback

import numpy as np
import pytest

import ferry

HELD = {}
W, H = 64, 48


def _pump(pub, subs, until, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pub.poll(0.001)
        for s in subs:
            s.wait(0.001)
        if until():
            return
    raise AssertionError("timed out: publisher %s, subscriber %s" % (pub.stats(), subs[0].stats()))


def make_parent(where):
    """The parent's objects: a node with an image publisher of a small pool and a subscriber,
    connected, a frame of 1s taken and held (with an array over it), a loan of 7s not yet
    published, a waitset and a Sync over two more subscribers."""
    node = ferry.Node(dir=where[0], domain=where[1], name="forkparent")
    pub = node.publisher("/fork", "image", max_chunks=4)
    sub = node.subscribe("/fork", "image", depth=8)
    _pump(pub, [sub], lambda: pub.stats()["subscribers"] == 1 and sub.stats()["publishers"] == 1)
    loan = pub.loan_image(W, H, "mono8")
    np.asarray(loan)[...] = 1
    pub.publish(loan)
    del loan
    sample = sub.take(timeout=10)
    array = np.asarray(sample)
    assert (array == 1).all() and sample.sequence == 1
    loan = pub.loan_image(W, H, "mono8")
    np.asarray(loan)[...] = 7
    ws = node.waitset()
    ws.add(sub)
    a = node.subscribe("/fork_a", "bytes")
    b = node.subscribe("/fork_b", "bytes")
    sync = ferry.Sync([a, b])
    other = node.subscribe("/fork_c", "bytes")
    HELD.update(node=node, pub=pub, sub=sub, sample=sample, array=array, loan=loan, ws=ws,
                sync=sync, other=other)


def child_checks(parent):
    """Every call the child makes on what it inherited raises ForkError naming the parent.
    Returns what went wrong (empty when nothing did)."""
    h = HELD
    calls = {
        "Node.publisher": lambda: h["node"].publisher("/x", "bytes"),
        "Node.subscribe": lambda: h["node"].subscribe("/x", "bytes"),
        "Node.waitset": lambda: h["node"].waitset(),
        "Node.dir": lambda: h["node"].dir,
        "Node.close": lambda: h["node"].close(),
        "Node.__exit__": lambda: h["node"].__exit__(None, None, None),
        "Publisher.loan": lambda: h["pub"].loan(8),
        "Publisher.loan_image": lambda: h["pub"].loan_image(W, H, "mono8"),
        "Publisher.publish": lambda: h["pub"].publish(h["loan"]),
        "Publisher.publish_copy": lambda: h["pub"].publish_copy(b"x"),
        "Publisher.reserve": lambda: h["pub"].reserve(64, 1),
        "Publisher.poll": lambda: h["pub"].poll(0),
        "Publisher.wait_subscribers": lambda: h["pub"].wait_subscribers(1, timeout=0),
        "Publisher.fileno": lambda: h["pub"].fileno(),
        "Publisher.stats": lambda: h["pub"].stats(),
        "Publisher.close": lambda: h["pub"].close(),
        "Subscriber.take": lambda: h["sub"].take(timeout=0),
        "Subscriber.try_take": lambda: h["sub"].try_take(),
        "Subscriber.wait": lambda: h["sub"].wait(0),
        "Subscriber.wait_publishers": lambda: h["sub"].wait_publishers(1, timeout=0),
        "Subscriber.fileno": lambda: h["sub"].fileno(),
        "Subscriber.stats": lambda: h["sub"].stats(),
        "Subscriber.close": lambda: h["sub"].close(),
        "Subscriber.__next__": lambda: next(h["sub"]),
        "Subscriber.close (Sync's)": lambda: h["sync"].subscribers[0].close(),
        "Sample.release": lambda: h["sample"].release(),
        "Sample.__enter__": lambda: h["sample"].__enter__(),
        "Sample.__exit__": lambda: h["sample"].__exit__(None, None, None),
        "Sample buffer": lambda: memoryview(h["sample"]),
        "Sample.sequence": lambda: h["sample"].sequence,
        "Sample.width": lambda: h["sample"].width,
        "Sample.__dlpack__": lambda: h["sample"].__dlpack__(),
        "Sample.numpy": lambda: h["sample"].numpy(),
        "Loan.release": lambda: h["loan"].release(),
        "Loan.__exit__": lambda: h["loan"].__exit__(None, None, None),
        "Loan buffer": lambda: memoryview(h["loan"]),
        "Loan.stamp": lambda: h["loan"].stamp,
        "Loan.frame_id=": lambda: setattr(h["loan"], "frame_id", "x"),
        "WaitSet.wait": lambda: h["ws"].wait(0),
        "WaitSet.add": lambda: h["ws"].add(h["other"]),
        "WaitSet.remove": lambda: h["ws"].remove(h["sub"]),
        "WaitSet.close": lambda: h["ws"].close(),
        "Sync": lambda: ferry.Sync([h["other"], h["sub"]]),
        "Sync.take": lambda: h["sync"].take(timeout=0),
        "Sync.try_take": lambda: h["sync"].try_take(),
        "Sync.wait": lambda: h["sync"].wait(0),
        "Sync.stats": lambda: h["sync"].stats(),
        "Sync.close": lambda: h["sync"].close(),
    }
    if ferry.HAVE_GPU:
        calls["GpuSubscriber"] = lambda: ferry.GpuSubscriber(h["other"])
    wrong = []
    for name, call in calls.items():
        try:
            call()
        except ferry.ForkError as e:
            msg = str(e)
            if "belongs to process %d" % parent not in msg or "fork()" not in msg:
                wrong.append("%s: ForkError without the parent's pid: %s" % (name, msg))
            elif not isinstance(e, ferry.ClosedError) or e.code != 9:
                wrong.append("%s: ForkError is not a ClosedError with code 9" % name)
        except BaseException as e:  # noqa: BLE001 (any other outcome is the failure reported)
            wrong.append("%s raised %s: %s, not ForkError" % (name, type(e).__name__, e))
        else:
            wrong.append("%s raised nothing" % name)
    # What stays usable: attributes that do not reach the C objects, and the inherited array
    # (plain memory: the parent's shared mapping, read as it is now).
    if h["pub"].topic != "/fork" or h["sub"].closed or h["node"].closed:
        wrong.append("topic/closed attributes changed in the child")
    if not (h["array"] == 1).all():
        wrong.append("the inherited array does not read the held frame")
    if "process %d" % parent not in repr(h["sample"]):
        wrong.append("Sample repr in the child: %r" % h["sample"])
    return wrong


def child_main(wfd, parent, drop):
    """The child: checks, then drops the inherited objects (drop "gc": deleted and collected;
    "exit": left to interpreter exit). Reports on wfd."""
    try:
        wrong = child_checks(parent)
    except BaseException:  # noqa: BLE001
        wrong = ["the checks failed: " + traceback.format_exc()]
    if drop == "gc":
        HELD.clear()
        gc.collect()
    os.write(wfd, ("\n".join(wrong) if wrong else "ok").encode())
    os.close(wfd)


def parent_after(child_report):
    """The parent, once the child is gone: everything works and nothing it held changed."""
    h = HELD
    assert child_report == "ok", child_report
    pub, sub, sample, array, loan = h["pub"], h["sub"], h["sample"], h["array"], h["loan"]
    # The held loan is still the parent's: write it again and publish it.
    np.asarray(loan)[...] = 2
    pub.publish(loan)
    # More frames than the pool has chunks: a chunk the child had given back would be reused.
    for seq in range(3, 13):
        lo = pub.loan_image(W, H, "mono8")
        np.asarray(lo)[...] = seq
        pub.publish(lo)
        del lo
        with sub.take(timeout=10) as s:
            assert s.sequence == seq - 1
            got = np.asarray(s)
            assert (got == seq - 1).all(), "frame %d is not intact" % (seq - 1)
            del got
        assert (array == 1).all(), "the frame the parent holds changed"
        assert sample.sequence == 1 and not sample.released
    ps, ss = pub.stats(), sub.stats()
    assert ps["subscribers"] == 1 and ps["subscribers_lost"] == 0, ps
    assert ps["protocol_errors"] == 0 and ps["rejected"] == 0, ps
    assert ss["publishers"] == 1 and ss["publishers_lost"] == 0, ss
    assert ss["protocol_errors"] == 0, ss
    del array
    sample.release()
    h["node"].close()
    HELD.clear()


def read_report(rfd):
    chunks = []
    while True:
        b = os.read(rfd, 65536)
        if not b:
            break
        chunks.append(b)
    os.close(rfd)
    return b"".join(chunks).decode()


def _mp_target(wfd, parent, drop):
    child_main(wfd, parent, drop)


@pytest.fixture
def held(where):
    make_parent(where)
    yield
    node = HELD.get("node")
    HELD.clear()
    if node is not None:
        gc.collect()


@pytest.mark.parametrize("drop", ["gc", "kept"])
def test_multiprocessing_fork(held, drop):
    ctx = multiprocessing.get_context("fork")
    rfd, wfd = os.pipe()
    p = ctx.Process(target=_mp_target, args=(wfd, os.getpid(), drop))
    p.start()
    os.close(wfd)
    report = read_report(rfd)
    p.join(30)
    assert p.exitcode == 0, "child exit code %s: %s" % (p.exitcode, report)
    parent_after(report)


def test_os_fork(held):
    rfd, wfd = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(rfd)
            child_main(wfd, parent, "gc")
            code = 0
        finally:
            os._exit(code)
    os.close(wfd)
    report = read_report(rfd)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, report
    parent_after(report)


def test_fork_at_interpreter_exit(where):
    """The child leaves every inherited object to interpreter exit (module teardown), and a
    grandchild's ForkError names the process that created the objects."""
    r = subprocess.run(
        [sys.executable, __file__, where[0], str(where[1])],
        capture_output=True, text=True, timeout=120,
    )
    assert r.returncode == 0, "stdout:\n%s\nstderr:\n%s" % (r.stdout, r.stderr)
    assert "parent ok" in r.stdout, r.stdout


def test_child_makes_its_own_node(held, where):
    """A forked child can create its own Node and talk to its parent through it."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(rfd)
            HELD.clear()
            gc.collect()
            with ferry.Node(dir=where[0], domain=where[1], name="forkchild") as n:
                p = n.publisher("/fork_child", "bytes")
                p.wait_subscribers(1, timeout=20)
                p.publish_copy(b"from the child")
                deadline = time.monotonic() + 20
                while p.stats()["subscribers"] and time.monotonic() < deadline:
                    p.poll(0.01)
            os.write(wfd, b"ok")
            code = 0
        except BaseException:  # noqa: BLE001
            os.write(wfd, traceback.format_exc().encode())
        finally:
            os._exit(code)
    os.close(wfd)
    node = HELD["node"]
    s = node.subscribe("/fork_child", "bytes")
    with s.take(timeout=20) as got:
        assert bytes(memoryview(got)) == b"from the child"
    s.close()
    del node
    report = read_report(rfd)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, report
    parent_after("ok")


if __name__ == "__main__":
    # test_fork_at_interpreter_exit: python3 test_fork.py DIR DOMAIN
    make_parent((sys.argv[1], int(sys.argv[2])))
    rfd, wfd = os.pipe()
    top = os.getpid()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        # A grandchild: the objects still belong to the top process.
        gpid = os.fork()
        if gpid == 0:
            wrong = child_checks(top)
            os.write(wfd, ("\n".join(wrong) if wrong else "ok").encode() + b"\n")
            os._exit(0)
        os.waitpid(gpid, 0)
        child_main(wfd, top, "exit")
        sys.exit(0)  # HELD is torn down with the interpreter
    os.close(wfd)
    report = read_report(rfd)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit("child exit status %s: %s" % (status, report))
    lines = report.split("\n")
    if lines[0] != "ok":
        sys.exit("grandchild: " + report)
    parent_after("\n".join(lines[1:]))
    print("parent ok")
