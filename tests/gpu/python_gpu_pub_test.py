#!/usr/bin/env python3
"""Device frames published from Python (ferry.GpuPublisher) and taken in another Python process
(ferry.GpuSubscriber), both through PyTorch.

This process spawns a publisher process (this file with --role pub) and subscribes. The
publisher fills device loans in place through torch.from_dlpack(loan) on torch streams of its
own and publishes them:

- TENSORS device tensors on /gpupub/tensor (loan_tensor): shapes, dtypes (names and torch
  dtypes), one column-major tensor, stamps and frame_ids; streams given as a torch.cuda.Stream,
  an int handle, None (the legacy default stream) and an object with __cuda_stream__; in one
  case the tensor is written on a second stream that first sleeps on the GPU, so a publish that
  did not wait for the consumer's stream would show stale elements;
- BYTE_FRAMES byte frames on /gpupub/bytes (loan) with metadata.

The subscriber takes each on a torch stream of its own and checks every element on the GPU
against the pattern, the shape, dtype, strides, stamp, frame_id and metadata, that sequences
follow each other, that the tensor is the frame's memory (data_ptr, no copy), and at the end
that nothing is held: its GpuSubscribers close and the host subscribers hold no sample.

The publisher also checks, on its own: the tensor over a loan is the loan's memory, publishing
on /gpupub/lonely with no subscriber at all, a loan given back by garbage collection and one
released under its tensor (given back when the tensor goes), close() refused with a loan held,
a dead loan (published, released, another publisher's) refused by publish, release and
__dlpack__, the host publisher refusing loans and close() under its GpuPublisher, and close()
with a tensor still over a published loan.

Exit 77 (skipped) when the package has no GPU module, there is no CUDA device, or torch (with
CUDA) is missing.

    PYTHONPATH=build/python python3 tests/gpu/python_gpu_pub_test.py
"""

import argparse
import gc
import shutil
import subprocess
import sys
import tempfile
import time

SKIP = 77
WAIT = 60  # seconds; generous, for a loaded machine
TENSORS = 12
BYTE_FRAMES = 4
LONELY = 6
# (shape, dtype as given to loan_tensor (a name, or a torch dtype's name prefixed "torch."),
#  strides or None)
LAYOUTS = [
    ((3, 480, 640), "float32", None),
    ((480, 640, 3), "uint8", None),
    ((1000,), "torch.float16", None),
    ((2, 3, 4, 5), "int32", None),
    ((64, 48), "bfloat16", (1, 64)),  # column-major
    ((7,), "torch.int64", None),
]


def fail(role, msg):
    print("python_gpu_pub_test (%s): FAILED: %s" % (role, msg), flush=True)
    sys.exit(1)


def check(role, cond, msg):
    if not cond:
        fail(role, msg)


def expect(role, exc, what, fn):
    try:
        fn()
    except exc:
        return
    except Exception as e:  # noqa: BLE001 (any other outcome is the failure reported)
        fail(role, "%s raised %r, not %s" % (what, e, exc.__name__))
    fail(role, "%s did not raise %s" % (what, exc.__name__))


def torch_dtype(torch, name):
    return getattr(torch, name.replace("torch.", ""))


def layout(k):
    return LAYOUTS[k % len(LAYOUTS)]


def pattern(torch, k, shape, dtype):
    """Element i of tensor k: (i * 7 + k * 131) % m, exact in every dtype used."""
    n = 1
    for s in shape:
        n *= s
    m = 251 if dtype in (torch.uint8, torch.bfloat16) else 2039
    idx = torch.arange(n, device="cuda", dtype=torch.int64)
    return ((idx * 7 + k * 131) % m).to(dtype).reshape(shape)


def byte_pattern(torch, k, n):
    idx = torch.arange(n, device="cuda", dtype=torch.int64)
    return ((idx * 13 + k) % 256).to(torch.uint8)


def byte_size(k):
    return (1 << 20) + 4096 * k + 3


class ProtocolStream:
    """A stream object of the CUDA stream protocol: __cuda_stream__() -> (version, handle)."""

    def __init__(self, stream):
        self.handle = stream.cuda_stream

    def __cuda_stream__(self):
        return (0, self.handle)


# ---------------------------------------------------------------------------------------------
# The publisher process
# ---------------------------------------------------------------------------------------------


def publisher_alone(ferry, torch, node):
    """The checks that need no subscriber, on /gpupub/lonely."""
    role = "pub"
    pub = node.publisher("/gpupub/lonely", "tensor", max_chunks=4)
    gp = ferry.GpuPublisher(pub, device=0)
    check(role, gp.device == 0 and gp.ipc in ("vmm", "legacy") and gp.early_wake,
          "attributes: device %r ipc %r early_wake %r" % (gp.device, gp.ipc, gp.early_wake))
    check(role, gp.publisher is pub and not gp.closed, "publisher / closed")
    s = torch.cuda.Stream()
    # Published with no subscriber, more frames than chunks: the memory is reused.
    for k in range(LONELY):
        loan = gp.loan_tensor((256, 256), "float32", stream=s)
        with torch.cuda.stream(s):
            t = torch.from_dlpack(loan)
            check(role, t.data_ptr() == loan.device_ptr, "lonely %d: a copy" % k)
            t.fill_(float(k))
        gp.publish(loan, stream=s)
        del t
    check(role, gp.stats()["exports"] >= 1, "lonely: no export counted: %r" % gp.stats())
    # An unpublished loan dropped with its tensor: given back by garbage collection, and the
    # next loan of its memory still works.
    loan = gp.loan(1 << 16, stream=s)
    with torch.cuda.stream(s):
        t = torch.from_dlpack(loan)
        check(role, t.dtype == torch.uint8 and tuple(t.shape) == (1 << 16,),
              "byte loan tensor %s %s" % (t.dtype, tuple(t.shape)))
        t.fill_(7)
    check(role, gp.stats()["loans"] == 1, "loan not counted: %r" % gp.stats())
    del t, loan
    gc.collect()
    check(role, gp.stats()["loans"] == 0, "loan not given back by GC: %r" % gp.stats())
    # Released under its tensor: given back only when the tensor goes.
    loan = gp.loan(1 << 16, stream=s)
    t = torch.from_dlpack(loan)
    loan.release()
    check(role, loan.state == "released", "state %r after release" % loan.state)
    check(role, gp.stats()["loans"] == 1, "given back under its tensor: %r" % gp.stats())
    expect(role, ferry.StateError, "second release", loan.release)
    expect(role, ferry.StateError, "publish of a released loan", lambda: gp.publish(loan))
    expect(role, ferry.StateError, "__dlpack__ of a released loan", loan.__dlpack__)
    del t
    gc.collect()
    check(role, gp.stats()["loans"] == 0, "not given back after its tensor: %r" % gp.stats())
    # A dead loan: published.
    loan = gp.loan(1024, stream=s)
    gp.publish(loan, stream=s, meta=b"x")
    check(role, loan.state == "published", "state %r after publish" % loan.state)
    expect(role, ferry.StateError, "second publish", lambda: gp.publish(loan, stream=s))
    expect(role, ferry.StateError, "release after publish", loan.release)
    expect(role, ferry.StateError, "__dlpack__ after publish", loan.__dlpack__)
    expect(role, ferry.StateError, "device_ptr after publish", lambda: loan.device_ptr)
    # Arguments.
    expect(role, ferry.InvalidArgumentError, "unknown dtype",
           lambda: gp.loan_tensor((4,), "complex64"))
    expect(role, ferry.InvalidArgumentError, "loan(0)", lambda: gp.loan(0))
    expect(role, TypeError, "a bad stream", lambda: gp.loan(16, stream="stream"))
    loan = gp.loan_tensor((4,), torch.float32)
    check(role, loan.dtype == "float32" and loan.shape == (4,) and loan.nbytes == 16,
          "torch dtype: %r %r %r" % (loan.dtype, loan.shape, loan.nbytes))
    expect(role, ferry.InvalidArgumentError, "meta on a tensor loan",
           lambda: gp.publish(loan, meta=b"m"))
    expect(role, ferry.InvalidArgumentError, "meta over 1024 bytes",
           lambda: gp.publish(gp.loan(8), meta=bytes(1025)))
    gc.collect()  # the loan of the refused publish
    # Close refused while a loan is held; the host publisher is the GpuPublisher's.
    expect(role, ferry.BusyError, "close with a loan held", gp.close)
    check(role, not gp.closed, "closed by a refused close")
    expect(role, ferry.BusyError, "host loan under a GpuPublisher", lambda: pub.loan(8))
    expect(role, ferry.BusyError, "host close under a GpuPublisher", pub.close)
    expect(role, ferry.BusyError, "a second GpuPublisher", lambda: ferry.GpuPublisher(pub))
    other = ferry.GpuPublisher(node.publisher("/gpupub/other", "tensor"))
    expect(role, ferry.ForeignError, "another GpuPublisher's loan",
           lambda: other.publish(loan))
    other.close()
    loan.release()
    # Closed with a tensor left over a published loan: the device memory stays until it goes.
    loan = gp.loan_tensor((16,), "float32", stream=s)
    keep = torch.from_dlpack(loan)
    gp.publish(loan, stream=s)
    gp.close()
    check(role, gp.closed, "not closed")
    expect(role, ferry.ClosedError, "loan after close", lambda: gp.loan(8))
    del keep
    gc.collect()
    pub.close()
    torch.cuda.synchronize()
    print("  publisher: no subscriber, GC, release, close and dead-loan checks passed",
          flush=True)


def run_publisher(ferry, torch, tmp):
    role = "pub"
    node = ferry.Node(dir=tmp, domain=0, name="gpu_pub")
    publisher_alone(ferry, torch, node)
    opts = dict(admit_blocking=True, block_timeout_ns=WAIT * 10**9, max_chunks=16,
                on_pool_exhausted="block")
    pub_t = node.publisher("/gpupub/tensor", "tensor", **opts)
    pub_b = node.publisher("/gpupub/bytes", "test/GpuBytes", **opts)
    gp_t = ferry.GpuPublisher(pub_t, device=0)
    with ferry.GpuPublisher(pub_b, device=0, early_wake=False) as gp_b:
        check(role, not gp_b.early_wake, "early_wake=False not kept")
        pub_t.wait_subscribers(1, timeout=WAIT)
        pub_b.wait_subscribers(1, timeout=WAIT)
        s = torch.cuda.Stream()
        side = torch.cuda.Stream()
        for k in range(TENSORS):
            shape, dtype_arg, strides = layout(k)
            dtype = torch_dtype(torch, dtype_arg)
            way = k % 4
            # The dtype as a name, or as the torch dtype itself.
            arg = dtype if dtype_arg.startswith("torch.") else dtype_arg
            if way == 2:
                stream, fill = None, torch.cuda.default_stream()
            else:
                stream, fill = s, s
            loan = gp_t.loan_tensor(shape, arg, stream, strides=strides)  # stream positional
            check(role, loan.shape == shape and loan.dtype == dtype_arg.replace("torch.", ""),
                  "loan %d: %r %r" % (k, loan.shape, loan.dtype))
            loan.stamp = (k, k * 1000)
            loan.frame_id = "frame%d" % k
            if way == 3:
                # Written on another stream, late: publish must wait for it.
                fill = side
            with torch.cuda.stream(fill):
                t = torch.from_dlpack(loan)
                check(role, t.data_ptr() == loan.device_ptr, "loan %d: a copy" % k)
                check(role, tuple(t.shape) == shape and t.dtype == dtype,
                      "loan %d: tensor %s %s" % (k, tuple(t.shape), t.dtype))
                if strides is not None:
                    check(role, t.stride() == strides, "loan %d: strides %r" % (k, t.stride()))
                if way == 3 and hasattr(torch.cuda, "_sleep"):
                    torch.cuda._sleep(50_000_000)
                t.copy_(pattern(torch, k, shape, dtype))
            del t
            if way == 0:
                gp_t.publish(loan, stream=s)  # a torch.cuda.Stream
            elif way == 1:
                gp_t.publish(loan, s.cuda_stream)  # an int handle, positional
            elif way == 2:
                gp_t.publish(loan)  # the legacy default stream
            else:
                gp_t.publish(loan, stream=ProtocolStream(s))
        for k in range(BYTE_FRAMES):
            n = byte_size(k)
            loan = gp_b.loan(n, stream=s)
            check(role, loan.kind == "bytes" and loan.nbytes == n and loan.shape == (n,),
                  "byte loan %d: %r %r %r" % (k, loan.kind, loan.nbytes, loan.shape))
            with torch.cuda.stream(s):
                t = torch.from_dlpack(loan)
                t.copy_(byte_pattern(torch, k, n))
            del t
            gp_b.publish(loan, stream=s, meta=b"meta-%d" % k)
        st = gp_t.stats()
        check(role, st["exports"] >= 1 and st["loans"] == 0, "stats %r" % st)
        # The subscriber says when it is done: the frames' memory must live until then.
        line = sys.stdin.readline()
        check(role, line.strip() == "done", "the subscriber said %r" % line)
    check(role, gp_b.closed, "the with-block did not close")
    gp_t.close()
    pub_t.close()
    pub_b.close()
    node.close()
    print("  publisher: %d tensors and %d byte frames published" % (TENSORS, BYTE_FRAMES),
          flush=True)


# ---------------------------------------------------------------------------------------------
# The subscriber process
# ---------------------------------------------------------------------------------------------


def wait_given_back(ferry, gsub, sub, what):
    deadline = time.monotonic() + WAIT
    while True:
        gsub.poll()
        if gsub.stats()["frames"] == 0 and sub.stats()["held"] == 0:
            return
        if time.monotonic() > deadline:
            fail("sub", "%s: still held: frames %d, host samples %d" % (
                what, gsub.stats()["frames"], sub.stats()["held"]))
        time.sleep(0.001)


def run_subscriber(ferry, torch, tmp):
    role = "sub"
    pub = subprocess.Popen([sys.executable, __file__, "--role", "pub", "--dir", tmp],
                           stdin=subprocess.PIPE, text=True)
    try:
        node = ferry.Node(dir=tmp, domain=0, name="gpu_sub")
        sub_t = node.subscribe("/gpupub/tensor", "tensor", depth=4, overflow="block",
                               timeout=WAIT)
        sub_b = node.subscribe("/gpupub/bytes", "test/GpuBytes", depth=4, overflow="block",
                               timeout=WAIT)
        # A subscriber connects in its own calls: both wait for their publisher before either
        # takes (the publisher waits for both before it publishes).
        sub_t.wait_publishers(1, timeout=WAIT)
        sub_b.wait_publishers(1, timeout=WAIT)
        gs_t = ferry.GpuSubscriber(sub_t, device=0)
        gs_b = ferry.GpuSubscriber(sub_b, device=0)
        cs = torch.cuda.Stream()
        last = None
        for k in range(TENSORS):
            shape, dtype_arg, strides = layout(k)
            dtype = torch_dtype(torch, dtype_arg)
            fr = gs_t.take(timeout=WAIT, stream=cs)
            check(role, fr.kind == "tensor", "tensor %d: kind %r" % (k, fr.kind))
            check(role, last is None or fr.sequence == last + 1,
                  "tensor %d: sequence %d after %r" % (k, fr.sequence, last))
            last = fr.sequence
            check(role, fr.shape == shape and fr.dtype == dtype_arg.replace("torch.", ""),
                  "tensor %d: %r %r" % (k, fr.shape, fr.dtype))
            if strides is not None:
                check(role, fr.strides == strides, "tensor %d: strides %r" % (k, fr.strides))
            check(role, fr.stamp == (k, k * 1000) and fr.frame_id == "frame%d" % k,
                  "tensor %d: stamp %r frame_id %r" % (k, fr.stamp, fr.frame_id))
            with torch.cuda.stream(cs):
                t = torch.from_dlpack(fr)
                check(role, t.data_ptr() == fr.data_ptr, "tensor %d: data_ptr %#x, the "
                      "frame's %#x: a copy" % (k, t.data_ptr(), fr.data_ptr))
                check(role, tuple(t.shape) == shape and t.dtype == dtype,
                      "tensor %d: %s %s" % (k, tuple(t.shape), t.dtype))
                want = pattern(torch, k, shape, dtype)
                ok = torch.equal(t, want)
            if not ok:
                bad = (t != want).nonzero()[:4].tolist()
                fail(role, "tensor %d: values differ at %s" % (k, bad))
            del t, want
            fr.release(stream=cs)
            print("  tensor %d %s %s: values, layout, stamp and zero copy checked" % (
                k, dtype_arg, shape), flush=True)
        last = None
        for k in range(BYTE_FRAMES):
            n = byte_size(k)
            with gs_b.take(timeout=WAIT, stream=cs) as fr:
                check(role, fr.kind == "bytes" and fr.size == n,
                      "bytes %d: %r %d" % (k, fr.kind, fr.size))
                check(role, fr.meta == b"meta-%d" % k, "bytes %d: meta %r" % (k, fr.meta))
                check(role, last is None or fr.sequence == last + 1,
                      "bytes %d: sequence %d after %r" % (k, fr.sequence, last))
                last = fr.sequence
                with torch.cuda.stream(cs):
                    t = torch.from_dlpack(fr)
                    check(role, t.data_ptr() == fr.data_ptr and t.dtype == torch.uint8 and
                          tuple(t.shape) == (n,), "bytes %d: a copy or %s %s" % (
                              k, t.dtype, tuple(t.shape)))
                    ok = torch.equal(t, byte_pattern(torch, k, n))
                check(role, ok, "bytes %d: values differ" % k)
                del t
        print("  %d byte frames: values, meta and zero copy checked" % BYTE_FRAMES, flush=True)
        gc.collect()
        torch.cuda.synchronize()
        wait_given_back(ferry, gs_t, sub_t, "tensors")
        wait_given_back(ferry, gs_b, sub_b, "byte frames")
        check(role, gs_t.try_take() is None and gs_b.try_take() is None, "frames left over")
        gs_t.close()
        gs_b.close()
        check(role, sub_t.stats()["held"] == 0 and sub_b.stats()["held"] == 0, "samples held")
        sub_t.close()
        sub_b.close()
        node.close()
        pub.stdin.write("done\n")
        pub.stdin.close()
        rc = pub.wait(timeout=WAIT)
        pub = None
        check(role, rc == 0, "the publisher process exited with %d" % rc)
    finally:
        if pub is not None:
            pub.kill()
            pub.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--role", choices=("sub", "pub"), default="sub")
    ap.add_argument("--dir", help="the domain directory (the publisher's)")
    args = ap.parse_args()
    import ferry

    if args.role == "sub":
        if not ferry.HAVE_GPU:
            print("python_gpu_pub_test: skipped: the package was built without the GPU module")
            return SKIP
        if ferry.gpu_device_count() == 0:
            print("python_gpu_pub_test: skipped: no CUDA device")
            return SKIP
    try:
        import torch
    except ImportError:
        print("python_gpu_pub_test: skipped: no torch")
        return SKIP
    if not torch.cuda.is_available():
        print("python_gpu_pub_test: skipped: torch has no CUDA device")
        return SKIP
    torch.cuda.init()
    if args.role == "pub":
        run_publisher(ferry, torch, args.dir)
        return 0
    print("python_gpu_pub_test: torch %s, %s" % (torch.__version__,
                                                torch.cuda.get_device_name(0)), flush=True)
    tmp = tempfile.mkdtemp(prefix="ferry-gpupub-")
    try:
        run_subscriber(ferry, torch, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("python_gpu_pub_test: all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
