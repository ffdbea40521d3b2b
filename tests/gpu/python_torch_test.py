#!/usr/bin/env python3
"""Device tensors from another process into PyTorch (and CuPy) through the ferry package.

tensor_gpu_pub, a C process, publishes float32 [3, 480, 640] device tensors (element i of
tensor k is k * 1000 + i % 1000). A ferry.GpuSubscriber takes them here, and
torch.from_dlpack(frame) must give a CUDA tensor over the publisher's device memory as this
process mapped it: no copy (data_ptr equals the frame's), the values right on the GPU, and the
frame given back once the tensor is dropped (and its GPU work done). Several ways are checked:
a frame dropped at once with only the tensor keeping it, an explicit release() while a tensor
lives, a consumer on a torch side stream, an unconsumed capsule, CuPy when it is installed, and
use after release.

Exit 77 (skipped) when the package has no GPU module, there is no CUDA device, or torch (with
CUDA) is missing.

    PYTHONPATH=build/python python3 tests/gpu/python_torch_test.py --pub build/tests/gpu/tensor_gpu_pub
"""

import argparse
import gc
import shutil
import subprocess
import sys
import tempfile
import time

SKIP = 77
COUNT = 6
SHAPE = (3, 480, 640)


def fail(msg):
    print("python_torch_test: FAILED: " + msg, flush=True)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def expect_state_error(ferry, what, fn):
    try:
        fn()
    except ferry.StateError:
        return
    except Exception as e:  # noqa: BLE001 (any other outcome is the failure reported)
        fail("%s raised %r, not StateError" % (what, e))
    fail("%s did not raise StateError" % what)


def wait_given_back(ferry, gsub, sub, k, what):
    """Every host sample back (frames given back once their GPU work is done)."""
    deadline = time.monotonic() + 10
    while True:
        gsub.poll()
        if gsub.stats()["frames"] == 0 and sub.stats()["held"] == 0:
            return
        if time.monotonic() > deadline:
            fail("tensor %d (%s): still held: frames %d, host samples %d" % (
                k, what, gsub.stats()["frames"], sub.stats()["held"]))
        time.sleep(0.001)


def expected(torch, k):
    n = SHAPE[0] * SHAPE[1] * SHAPE[2]
    idx = torch.arange(n, device="cuda", dtype=torch.int64) % 1000
    return (idx + k * 1000).to(torch.float32).reshape(SHAPE)


def check_frame(fr, k):
    check(fr.kind == "tensor", "frame %d: kind %r" % (k, fr.kind))
    check(fr.shape == SHAPE, "frame %d: shape %r" % (k, fr.shape))
    check(fr.dtype == "float32", "frame %d: dtype %r" % (k, fr.dtype))
    check(fr.strides == (SHAPE[1] * SHAPE[2], SHAPE[2], 1), "frame %d: strides %r" % (
        k, fr.strides))
    check(fr.stamp == (k, k * 1000), "frame %d: stamp %r" % (k, fr.stamp))
    check(fr.frame_id == "frame%d" % k, "frame %d: frame_id %r" % (k, fr.frame_id))
    check(fr.__dlpack_device__() == (2, fr.device), "frame %d: __dlpack_device__ %r" % (
        k, fr.__dlpack_device__()))
    check(fr.data_ptr != 0 and fr.nbytes == 4 * SHAPE[0] * SHAPE[1] * SHAPE[2],
          "frame %d: data_ptr %#x nbytes %d" % (k, fr.data_ptr, fr.nbytes))


def check_tensor(torch, t, fr_ptr, k, what):
    check(t.is_cuda and tuple(t.shape) == SHAPE and t.dtype == torch.float32,
          "tensor %d (%s): %s %s %s" % (k, what, t.device, tuple(t.shape), t.dtype))
    check(t.data_ptr() == fr_ptr, "tensor %d (%s): data_ptr %#x, the frame's %#x: a copy" % (
        k, what, t.data_ptr(), fr_ptr))
    want = expected(torch, k)
    if not torch.equal(t, want):
        bad = (t != want).nonzero()[:4].tolist()
        fail("tensor %d (%s): values differ at %s" % (k, what, bad))


def run(args, ferry, torch, cupy):
    tmp = tempfile.mkdtemp(prefix="ferry-pytorch-")
    pub = None
    try:
        node = ferry.Node(dir=tmp, domain=0, name="python_torch_test")
        sub = node.subscribe("/tensor/device", "tensor", depth=4, overflow="block")
        gsub = ferry.GpuSubscriber(sub, device=0)
        pub = subprocess.Popen([args.pub, tmp, "0", str(COUNT), "/tensor/device", "-"])
        side = torch.cuda.Stream()
        for k in range(COUNT):
            way = k % 6
            if way == 0:
                # The frame object is dropped at once: only the tensor holds the frame.
                fr = gsub.take(timeout=60)
                check_frame(fr, k)
                ptr = fr.data_ptr
                t = torch.from_dlpack(fr)
                del fr
                gc.collect()
                check(gsub.stats()["frames"] == 1, "tensor %d: frame gone under its tensor" % k)
                check_tensor(torch, t, ptr, k, "frame dropped")
                del t
                what = "tensor dropped"
            elif way == 1:
                # release() while a tensor lives: the frame goes back when the tensor goes. The
                # tensor comes from a "dltensor" capsule handed to torch directly.
                fr = gsub.take(timeout=60)
                check_frame(fr, k)
                ptr = fr.data_ptr
                t = torch.from_dlpack(fr.__dlpack__(stream=1))  # the unversioned capsule
                fr.release()
                check(fr.released, "frame %d: not released" % k)
                expect_state_error(ferry, "shape after release", lambda: fr.shape)
                expect_state_error(ferry, "__dlpack__ after release", fr.__dlpack__)
                expect_state_error(ferry, "second release", fr.release)
                check(gsub.stats()["frames"] == 1, "tensor %d: given back under its tensor" % k)
                check_tensor(torch, t, ptr, k, "released")
                del t
                what = "released, then tensor dropped"
            elif way == 2:
                # A consumer on a side stream: the frame was made ready for the legacy default
                # stream; __dlpack__(stream=side) orders side after it.
                fr = gsub.take(timeout=60)
                check_frame(fr, k)
                ptr = fr.data_ptr
                with torch.cuda.stream(side):
                    t = torch.from_dlpack(fr)
                    s = (t * 2).sum()
                check_tensor(torch, t, ptr, k, "side stream")
                side.synchronize()
                want = float(expected(torch, k).double().sum() * 2)
                check(abs(float(s) - want) <= 1e-4 * abs(want), "tensor %d: sum on the side "
                      "stream %r, want %r" % (k, float(s), want))
                del t, s
                fr.release()
                what = "side stream"
            elif way == 3:
                # Taken for the current torch stream; a capsule nobody consumes still gives the
                # frame back.
                fr = gsub.take(timeout=60, stream=torch.cuda.current_stream())
                check_frame(fr, k)
                cap = fr.__dlpack__(stream=1, max_version=(1, 0))
                check("dltensor_versioned" in repr(cap), "capsule %r" % cap)
                cap0 = fr.__dlpack__(stream=-1)
                check('"dltensor"' in repr(cap0), "capsule %r" % cap0)
                for bad in (0, -2):
                    try:
                        fr.__dlpack__(stream=bad)
                        fail("__dlpack__(stream=%d) accepted" % bad)
                    except ValueError:
                        pass
                try:
                    fr.__dlpack__(dl_device=(1, 0))
                    fail("__dlpack__(dl_device=CPU) accepted")
                except BufferError:
                    pass
                fr.release()
                check(gsub.stats()["frames"] == 1, "tensor %d: given back under capsules" % k)
                del cap, cap0
                what = "unconsumed capsules"
            elif way == 4 and cupy is not None:
                fr = gsub.take(timeout=60)
                check_frame(fr, k)
                try:
                    a = cupy.from_dlpack(fr)
                except BufferError as e:
                    # A consumer without read-only arrays may refuse the versioned capsule's
                    # read-only flag: the unversioned capsule carries none.
                    print("  cupy refused the versioned capsule (%s): unversioned" % e)

                    class Unversioned:
                        def __dlpack__(self, stream=None, **kw):
                            return fr.__dlpack__(stream=stream)

                        def __dlpack_device__(self):
                            return fr.__dlpack_device__()

                    a = cupy.from_dlpack(Unversioned())
                check(a.data.ptr == fr.data_ptr, "cupy %d: ptr %#x, the frame's %#x" % (
                    k, a.data.ptr, fr.data_ptr))
                check(a.shape == SHAPE and a.dtype == cupy.float32, "cupy %d: %s %s" % (
                    k, a.shape, a.dtype))
                want = cupy.asarray(expected(torch, k))
                check(bool(cupy.array_equal(a, want)), "cupy %d: values differ" % k)
                del a, want
                fr.release()
                what = "cupy"
            else:
                # Iteration and a with-block.
                with next(gsub) as fr:
                    check_frame(fr, k)
                    t = torch.from_dlpack(fr)
                    check_tensor(torch, t, fr.data_ptr, k, "with-block")
                    del t
                check(fr.released, "frame %d: with-block did not release" % k)
                what = "with-block" if way == 5 else "with-block (no cupy)"
            gc.collect()
            torch.cuda.synchronize()
            wait_given_back(ferry, gsub, sub, k, what)
            print("  device tensor %d: %s: zero copy, values and release checked" % (k, what),
                  flush=True)
        st = gsub.stats()
        check(st["imports"] >= 1, "no import counted: %r" % st)
        # A subscriber read through a GpuSubscriber refuses direct takes.
        try:
            sub.try_take()
            fail("Subscriber.try_take() under a GpuSubscriber accepted")
        except ferry.BusyError:
            pass
        gsub.close()
        check(gsub.closed, "GpuSubscriber not closed")
        try:
            gsub.take(timeout=0)
            fail("take after close accepted")
        except ferry.ClosedError:
            pass
        check(sub.try_take() is None, "a sample left after the publisher's count")
        sub.close()
        node.close()
        rc = pub.wait(timeout=60)
        pub = None
        check(rc == 0, "the publisher exited with %d" % rc)
    finally:
        if pub is not None:
            pub.kill()
            pub.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pub", required=True, help="tensor_gpu_pub")
    args = ap.parse_args()
    import ferry

    if not ferry.HAVE_GPU:
        print("python_torch_test: skipped: the package was built without the GPU module")
        return SKIP
    if ferry.gpu_device_count() == 0:
        print("python_torch_test: skipped: no CUDA device")
        return SKIP
    try:
        import torch
    except ImportError:
        print("python_torch_test: skipped: no torch")
        return SKIP
    if not torch.cuda.is_available():
        print("python_torch_test: skipped: torch has no CUDA device")
        return SKIP
    try:
        import cupy
    except ImportError:
        cupy = None
    print("python_torch_test: torch %s, cupy %s, %s" % (
        torch.__version__, cupy.__version__ if cupy else "missing",
        torch.cuda.get_device_name(0)), flush=True)
    torch.cuda.init()
    run(args, ferry, torch, cupy)
    print("python_torch_test: all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
