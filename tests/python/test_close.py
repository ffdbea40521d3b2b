"""Closing while arrays are bound: close() never refuses; the last array, memoryview or DLPack
tensor keeps the memory it reads mapped, and the subscriber, publisher or Sync it came from (and
the node) are destroyed when it goes, in the process and at interpreter shutdown."""

import gc
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
from conftest import cli, connect, torch_cuda


def fds():
    return len(os.listdir("/proc/self/fd"))


def endpoints(where, topic):
    """(kind, alive) of each endpoint of topic in the domain's status files."""
    return sorted((e["kind"], e["alive"])
                  for e in ferry.inspect(topic, domain=where[1], dir=where[0]))


def pattern(shape, seed):
    return ((np.arange(np.prod(shape)) * 7 + seed) % 251).astype(np.uint8).reshape(shape)


def test_node_close_keeps_sample_arrays(where):
    fd0 = fds()
    node = ferry.Node(dir=where[0], domain=where[1])
    pub = node.publisher("/keep", "image")
    sub = node.subscribe("/keep", depth=4)
    connect(pub, sub)
    loan = pub.loan_image(64, 48, "rgb8")
    np.asarray(loan)[...] = pattern((48, 64, 3), 1)
    pub.publish(loan)
    s = sub.take(timeout=5)
    arr = np.asarray(s)
    view = memoryview(s)
    node.close()  # no BusyError: arrays are bound
    assert node.closed and sub.closed and pub.closed and s.released
    # The publisher went at once (no array over a loan); the subscriber stays for the arrays.
    assert endpoints(where, "/keep") == [("subscriber", True)]
    assert np.array_equal(arr, pattern((48, 64, 3), 1))  # still the publisher's bytes
    with pytest.raises(ferry.ClosedError):
        sub.take(timeout=0)
    with pytest.raises(ferry.ClosedError):
        node.subscribe("/keep", "image")
    with pytest.raises(ferry.StateError):
        s.frame_id
    del arr
    assert endpoints(where, "/keep") == [("subscriber", True)]  # the memoryview still reads it
    assert view.tobytes() == pattern((48, 64, 3), 1).tobytes()
    view.release()
    assert endpoints(where, "/keep") == []  # destroyed with the last export: no status file left
    del s, loan, sub, pub, node, view
    assert fds() == fd0  # the node's descriptors too


def test_subscriber_close_keeps_arrays(where):
    with ferry.Node(dir=where[0], domain=where[1]) as node:
        pub = node.publisher("/one", "my/Blob")
        sub = node.subscribe("/one", depth=4)
        connect(pub, sub)
        for b in (b"first", b"second"):
            pub.publish_copy(b)
        first = sub.take(timeout=5)
        a = np.frombuffer(first, np.uint8)
        sub.wait(5)
        second = sub.take(timeout=5)  # nothing reads it: released by close()
        sub.close()
        assert first.released and second.released
        assert bytes(a) == b"first"
        assert ("subscriber", True) in endpoints(where, "/one")
        sub.close()  # a second close does nothing
        del a
        assert endpoints(where, "/one") == [("publisher", True)]
        assert pub.stats()["subscribers"] in (0, 1)  # its hang-up is seen at the next poll


def test_dlpack_export_keeps_the_sample(where):
    node = ferry.Node(dir=where[0], domain=where[1])
    pub = node.publisher("/dl", "tensor")
    sub = node.subscribe("/dl", "tensor")
    connect(pub, sub)
    loan = pub.loan_tensor((3, 4), "float32")
    np.asarray(loan)[...] = np.arange(12, dtype=np.float32).reshape(3, 4)
    pub.publish(loan)
    with sub.take(timeout=5) as s:
        x = np.from_dlpack(s)
    node.close()
    assert ("subscriber", True) in endpoints(where, "/dl")
    assert x.tolist() == np.arange(12, dtype=np.float32).reshape(3, 4).tolist()
    del x
    gc.collect()
    assert endpoints(where, "/dl") == []


def test_publisher_close_keeps_loan_arrays(where):
    fd0 = fds()
    node = ferry.Node(dir=where[0], domain=where[1])
    pub = node.publisher("/loans", "my/Blob")
    published = pub.loan(64)
    sent = np.frombuffer(published, np.uint8)
    sent[...] = 3
    pub.publish(published)
    unpublished = pub.loan(64)
    draft = memoryview(unpublished)
    node.close()
    assert pub.closed and unpublished.state == "released"
    assert endpoints(where, "/loans") == [("publisher", True)]  # its pool stays mapped
    assert sent.sum() == 3 * 64
    draft[0] = 7  # memory nobody reads any more, but still mapped
    with pytest.raises(ferry.ClosedError):
        pub.loan(8)
    del sent
    assert endpoints(where, "/loans") == [("publisher", True)]
    draft.release()
    assert endpoints(where, "/loans") == []
    del pub, published, unpublished, node, draft
    assert fds() == fd0


def test_closed_blocking_subscriber_holds_its_publisher_until_the_array_goes(where):
    """What docs/python.md warns of: a closed subscriber with overflow="block" takes nothing
    while an array keeps it, so its full queue makes publish() time out; once the array goes,
    the subscriber is destroyed and publishing is free again."""
    with ferry.Node(dir=where[0], domain=where[1]) as node:
        pub = node.publisher("/blk", "my/Blob", admit_blocking=True, block_timeout_ns=50_000_000)
        sub = node.subscribe("/blk", overflow="block", depth=1)
        connect(pub, sub)
        pub.publish_copy(b"a")
        a = np.asarray(sub.take(timeout=5))
        sub.close()
        pub.publish_copy(b"b")  # fills the closed subscriber's queue
        t0 = time.monotonic()
        with pytest.raises(ferry.TimeoutError):
            pub.publish_copy(b"c")
        assert time.monotonic() - t0 >= 0.05
        del a
        deadline = time.monotonic() + 60
        while pub.stats()["subscribers"] and time.monotonic() < deadline:
            pub.poll(0.01)
        assert pub.stats()["subscribers"] == 0
        pub.publish_copy(b"d")
        pub.publish_copy(b"e")


def test_close_from_another_thread_ends_a_blocked_take(where):
    node = ferry.Node(dir=where[0], domain=where[1])
    sub = node.subscribe("/idle", "my/Blob")
    got = []

    def take():
        try:
            sub.take()  # for ever, unless closed
        except Exception as e:  # noqa: BLE001
            got.append(e)

    t = threading.Thread(target=take)
    t.start()
    time.sleep(0.2)
    node.close()
    t.join(60)
    assert not t.is_alive(), "take() still blocked after close()"
    assert len(got) == 1 and isinstance(got[0], ferry.ClosedError), got
    assert endpoints(where, "/idle") == []


def test_no_leak_over_create_close_cycles(where):
    """Nodes, endpoints and samples made and closed with arrays bound, 300 times: no descriptor,
    no reference and (nearly) no memory stays behind."""

    def cycle(i):
        node = ferry.Node(dir=where[0], domain=where[1])
        pub = node.publisher("/cycle", "my/Blob")
        sub = node.subscribe("/cycle")
        connect(pub, sub)
        pub.publish_copy(bytes([i & 0xFF]) * 32)
        s = sub.take(timeout=5)
        arr = np.asarray(s)
        loan_arr = np.asarray(pub.loan(16))
        node.close()
        assert arr[0] == i & 0xFF
        refs = sys.getrefcount(node)
        del s, sub, pub  # the arrays hold them
        assert sys.getrefcount(node) == refs
        return node, arr, loan_arr

    kept = cycle(0)
    del kept
    gc.collect()
    fd0 = fds()
    for i in range(300):
        node, arr, loan_arr = cycle(i)
        del arr, loan_arr
        # Only the test's own reference to the node is left: nothing leaked one.
        assert sys.getrefcount(node) == 2
        del node
    gc.collect()
    assert fds() == fd0
    assert endpoints(where, "/cycle") == []


# --- whole scripts, as a user runs them ------------------------------------------------------


def run_script(code, where, timeout=120, **kw):
    env = dict(os.environ, FERRY_DIR=where[0], FERRY_DOMAIN=str(where[1]))
    return subprocess.run([sys.executable, "-X", "dev", "-c", textwrap.dedent(code)],
                          capture_output=True, text=True, env=env, timeout=timeout, **kw)


def test_script_leaves_arrays_bound_past_the_node(where):
    """The docs' publisher shape and a subscriber, in one script: arrays bound when the with
    blocks end, read after them, and still bound at interpreter shutdown (in globals, in a list
    and in a reference cycle). Exit 0, nothing on stderr, nothing left in the domain."""
    r = run_script("""
        import numpy as np, ferry

        with ferry.Node(name="pub") as pnode, ferry.Node(name="sub") as snode:
            pub = pnode.publisher("/script", "image")
            sub = snode.subscribe("/script", depth=8, timeout=30)
            while pub.stats()["subscribers"] < 1 or sub.stats()["publishers"] < 1:
                pub.poll(0.001)
                sub.wait(0.001)
            for i in range(5):
                loan = pub.loan_image(32, 24, "mono8")
                img = np.asarray(loan)
                img[...] = i
                pub.publish(loan)
            frames = []
            for i in range(5):
                with sub.take(timeout=30) as frame:
                    frames.append(np.asarray(frame))
                    view = memoryview(frame)
                    cycle = [np.from_dlpack(frame)]  # reachable only through a cycle at exit
                    cycle.append(cycle)
        # Both nodes are closed; every array still reads what it was made over.
        assert [int(f[0, 0]) for f in frames] == [0, 1, 2, 3, 4]
        assert view.tobytes()[0] == 4 and int(img[0, 0]) == 4
        assert pnode.closed and snode.closed and sub.closed and pub.closed
        print("done")
    """, where)
    assert r.returncode == 0 and r.stderr == "", (r.returncode, r.stderr)
    assert r.stdout == "done\n"
    # Everything was destroyed at shutdown: no status file, not even a dead one.
    assert endpoints(where, "/script") == []


def test_script_subscriber_of_a_c_publisher(where):
    """The consumer shape against `ferry pub`: img bound when the node closes, and read after."""
    env = dict(os.environ, FERRY_DIR=where[0], FERRY_DOMAIN=str(where[1]))
    cam = subprocess.Popen([cli(), "pub", "/cscript", "--image", "64x48", "--rate", "100"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        r = run_script("""
            import numpy as np, ferry
            with ferry.Node() as node:
                sub = node.subscribe("/cscript", timeout=60)
                for _ in range(10):
                    with sub.take(timeout=30) as frame:
                        img = np.asarray(frame)
            print(img.shape, int(img.sum()) >= 0)
        """, where)
    finally:
        cam.send_signal(signal.SIGTERM)
        assert cam.wait(30) == 0
    assert r.returncode == 0 and r.stderr == "", (r.returncode, r.stderr)
    assert r.stdout == "(48, 64, 3) True\n"
    assert endpoints(where, "/cscript") == []


def test_script_interrupted_with_arrays_bound(where):
    """Ctrl-C in a `for frame in sub:` loop with img bound: the KeyboardInterrupt, and no second
    exception from closing the node on the way out."""
    env = dict(os.environ, FERRY_DIR=where[0], FERRY_DOMAIN=str(where[1]))
    cam = subprocess.Popen([cli(), "pub", "/ctrlc", "--image", "64x48", "--rate", "100"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        p = subprocess.Popen([sys.executable, "-X", "dev", "-c", textwrap.dedent("""
            import numpy as np, ferry
            with ferry.Node() as node:
                sub = node.subscribe("/ctrlc", timeout=60)
                for frame in sub:
                    with frame:
                        img = np.asarray(frame)
                        print("frame", flush=True)
        """)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            assert p.stdout.readline() == "frame\n"
            p.send_signal(signal.SIGINT)
            out, err = p.communicate(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
                p.communicate()
    finally:
        cam.send_signal(signal.SIGTERM)
        assert cam.wait(30) == 0
    assert p.returncode in (1, -signal.SIGINT), p.returncode
    assert err.count("Traceback") == 1 and err.rstrip().endswith("KeyboardInterrupt"), err
    assert "Error" not in err and "During handling" not in err, err
    assert endpoints(where, "/ctrlc") == []


def test_gpu_subscriber_close_keeps_device_tensors(where):
    """A torch tensor over a device frame bound past Node.close(): the GpuSubscriber, its
    subscriber and the node stay until the tensor is deleted, then go. Needs the GPU module, a
    CUDA device, PyTorch's CUDA and tests/gpu's tensor_gpu_pub (FERRY_TENSOR_GPU_PUB)."""
    pub = os.environ.get("FERRY_TENSOR_GPU_PUB")
    torch = torch_cuda()
    if not pub or not os.path.exists(pub):
        pytest.skip("FERRY_TENSOR_GPU_PUB (tests/gpu/tensor_gpu_pub) not set")
    env = dict(os.environ, FERRY_DIR=where[0], FERRY_DOMAIN=str(where[1]))
    # Device tensors float32 [3, 480, 640]; element i of tensor k is k * 1000 + i % 1000.
    gpub = subprocess.Popen([pub, where[0], str(where[1]), "3", "/gpuclose", "-"],
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        node = ferry.Node(dir=where[0], domain=where[1])
        sub = node.subscribe("/gpuclose", "tensor", overflow="block")
        gsub = ferry.GpuSubscriber(sub, device=0)
        kept = None
        for k in range(3):
            with gsub.take(timeout=60) as frame:
                t = torch.from_dlpack(frame)
                if k == 1:
                    kept = t
                del t
        node.close()  # no BusyError: kept still reads frame 1
        assert node.closed and gsub.closed and sub.closed
        assert ("subscriber", True) in endpoints(where, "/gpuclose")
        want = torch.arange(3 * 480 * 640, device=kept.device) % 1000 + 1000
        assert torch.equal(kept.flatten(), want.to(torch.float32))
        del kept  # the frame goes back, then the GPU subscriber, the subscriber and the node
        torch.cuda.synchronize()
        assert endpoints(where, "/gpuclose") in ([], [("publisher", True)])
        assert gsub.closed
    finally:
        _, err = gpub.communicate(timeout=120)
    assert gpub.returncode == 0, err
    assert ("subscriber", True) not in endpoints(where, "/gpuclose")
