#!/usr/bin/env python3
"""Host frames to the GPU from Python without a pageable copy (Sample.cuda, ferry.HostGpuView).

A child Python process publishes 1920x1080 rgb8 images through ferry (byte i of image k is
(i + 7 * k) % 251), the next when the last one was checked. Here each taken sample goes to the GPU two ways and both must give the
publisher's bytes: in place (torch.from_dlpack(sample.cuda()): a CUDA tensor whose address is
the view's, over the registered pages) and by copy_to() into a torch.empty on a side stream.
Also checked: the view keeps its sample held after sample.release() until the view is released
and its last tensor is gone, a copy still running when everything is let go is waited for
before the sample goes back, a too-small or host destination is refused, a released view
refuses use, CuPy reads the view (when installed). The time of each path is printed (median of
the frames), not asserted.

Exit 77 (skipped) when the package has no GPU module, there is no CUDA device, or torch (with
CUDA) is missing.

    PYTHONPATH=build/python python3 tests/gpu/python_host_gpu_test.py
"""

import gc
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

SKIP = 77
W, H = 1920, 1080
COUNT = 12

PUBLISHER = r"""
import sys, time
import numpy as np
import ferry
node = ferry.Node(dir=sys.argv[1])
pub = node.publisher("/host/camera", "image")
pub.wait_subscribers(1, timeout=30)
base = (np.arange(%(n)d, dtype=np.uint32) %% 251).astype(np.uint8)
for k in range(%(count)d):
    loan = pub.loan_image(%(w)d, %(h)d, "rgb8")
    a = np.asarray(loan).reshape(-1)
    a[:] = (base.astype(np.uint32) + 7 * k) %% 251
    pub.publish(loan)
    if not sys.stdin.readline():  # the next frame when the last one was checked
        break
node.close()
""" % {"n": W * H * 3, "count": COUNT, "w": W, "h": H}


def fail(msg):
    print("python_host_gpu_test: FAILED: " + msg, flush=True)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def expect(exc, what, fn):
    try:
        fn()
    except exc:
        return
    except Exception as e:  # noqa: BLE001 (any other outcome is the failure reported)
        fail("%s raised %r, not %s" % (what, e, exc.__name__))
    fail("%s did not raise %s" % (what, exc.__name__))


def main():
    try:
        import ferry
    except ImportError as e:
        print("SKIP: ferry not importable: %s" % e)
        return SKIP
    if not ferry.HAVE_GPU:
        print("SKIP: the package was built without the GPU module")
        return SKIP
    if ferry.gpu_device_count() == 0:
        print("SKIP: no CUDA device")
        return SKIP
    try:
        import numpy as np
        import torch
    except ImportError as e:
        print("SKIP: %s" % e)
        return SKIP
    if not torch.cuda.is_available():
        print("SKIP: torch without CUDA")
        return SKIP
    try:
        import cupy
    except ImportError:
        cupy = None

    base = (np.arange(W * H * 3, dtype=np.uint32) % 251).astype(np.uint8)
    base_gpu = torch.from_numpy(base).cuda().to(torch.int32)
    tmp = tempfile.mkdtemp(prefix="ferry-host-gpu-")
    child = subprocess.Popen([sys.executable, "-c", PUBLISHER, tmp], stdin=subprocess.PIPE)
    times = {"view": [], "inplace_read": [], "copy_to": [], "pageable": []}
    try:
        node = ferry.Node(dir=tmp)
        sub = node.subscribe("/host/camera", "image", depth=COUNT, timeout=30)
        side = torch.cuda.Stream()
        dst = torch.empty(W * H * 3, dtype=torch.uint8, device="cuda")
        for k in range(COUNT):
            sample = sub.take(timeout=30)
            want = ((base_gpu + 7 * k) % 251).to(torch.uint8)

            t0 = time.perf_counter()
            view = sample.cuda()
            times["view"].append(time.perf_counter() - t0)
            check(view.device == 0 and view.nbytes == W * H * 3, "view's device and size")
            check(view.sample is sample and not view.released, "view's sample")

            # In place: a CUDA tensor over the registered pages, read by a kernel.
            t0 = time.perf_counter()
            t = torch.from_dlpack(view)
            check(t.is_cuda and t.data_ptr() == view.data_ptr, "from_dlpack made a copy")
            check(tuple(t.shape) == (H, W, 3) and t.dtype == torch.uint8, "shape %r" % (t.shape,))
            same = bool(torch.equal(t.reshape(-1), want))
            torch.cuda.synchronize()
            times["inplace_read"].append(time.perf_counter() - t0)
            check(same, "frame %d read in place differs from what was published" % k)

            # By copy, on a side stream, into PyTorch's memory.
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            view.copy_to(dst, stream=side)
            side.synchronize()
            times["copy_to"].append(time.perf_counter() - t0)
            check(bool(torch.equal(dst, want)), "frame %d copied differs" % k)

            # The pageable copy a user would write otherwise.
            t0 = time.perf_counter()
            pageable = torch.from_numpy(sample.numpy().reshape(-1)).cuda()
            torch.cuda.synchronize()
            times["pageable"].append(time.perf_counter() - t0)
            del pageable

            if k == 0:
                cai = view.__cuda_array_interface__
                check(cai["data"] == (view.data_ptr, True) and cai["typestr"] == "|u1" and
                      cai["shape"] == (H, W, 3) and cai["version"] == 3, "CAI %r" % (cai,))
                if cupy is not None:
                    c = cupy.from_dlpack(view)
                    check(int(c.data.ptr) == view.data_ptr, "CuPy made a copy")
                    check(int(c[0, 0, 0]) == (7 * k) % 251, "CuPy read a wrong byte")
                    del c
                    try:
                        c = cupy.asarray(view)
                        print("  cupy.asarray over __cuda_array_interface__: accepted")
                        del c
                    except Exception as e:  # noqa: BLE001 (informational)
                        print("  cupy.asarray over __cuda_array_interface__: %r" % e)
                small = torch.empty(16, dtype=torch.uint8, device="cuda")
                expect(ferry.InvalidArgumentError, "copy_to a 16-byte tensor",
                       lambda: view.copy_to(small))
                expect(TypeError, "copy_to a host tensor",
                       lambda: view.copy_to(torch.empty(W * H * 3, dtype=torch.uint8)))
                expect(TypeError, "copy_to bytes", lambda: view.copy_to(b"x"))

                # The view keeps the sample: released by its user, it stays held.
                sample.release()
                check(sub.stats()["held"] == 1, "the sample went back under a live view")
                # A copy still running when all is let go is waited for.
                view.copy_to(dst, stream=side)
                view.release()
                check(view.released, "released")
                expect(ferry.StateError, "a released view's copy_to",
                       lambda: view.copy_to(dst))
                check(sub.stats()["held"] == 1, "the sample went back under a live tensor")
                del t
                gc.collect()
                check(sub.stats()["held"] == 0, "the sample was not given back")
                check(bool(torch.equal(dst, want)), "the last copy was cut short")
            else:
                del t
                view.release()
                sample.release()
            view = None
            child.stdin.write(b"next\n")
            child.stdin.flush()
        check(sub.stats()["held"] == 0, "samples still held: %d" % sub.stats()["held"])
        node.close()
    finally:
        child.kill()
        child.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    ms = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    first = times["view"][0] * 1e3
    print("  1080p rgb8 (%d frames, median): Sample.cuda() %.3f ms (first %.1f ms: registration),"
          " read in place by a kernel %.3f ms, copy_to %.3f ms, pageable .cuda() %.3f ms"
          % (COUNT, ms["view"], first, ms["inplace_read"], ms["copy_to"], ms["pageable"]))
    print("python_host_gpu_test: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
