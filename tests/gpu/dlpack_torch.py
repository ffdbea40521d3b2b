#!/usr/bin/env python3
"""Tensors from ferry into PyTorch and NumPy through DLPack, with ctypes only.

Starts tensor_gpu_pub (host tensors, and device tensors when a device is there), takes each
tensor, exports it with ferry_tensor_to_dlpack / ferry_tensor_gpu_to_dlpack, wraps the export in
a "dltensor" capsule and hands it to torch.from_dlpack (and numpy.from_dlpack for host tensors);
checks device, shape, strides, dtype and values, deletes the consumer's tensor and checks that
the sample went back (subscriber stats held == 0).

Part 1 (host tensors) needs neither torch nor a GPU: without torch the DLPack structure is read
through ctypes. Part 2 (device tensors) needs torch with CUDA and a CUDA device; without them the
script exits 77 (skipped) after part 1.

usage: dlpack_torch.py --lib libferry.so --gpu-lib libferry_gpu.so --pub tensor_gpu_pub
"""
import argparse
import ctypes as C
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import time

SKIP = 77
COUNT = 6
TYPE = b"ferry/Tensor"
HASH = 0xF3F1A6CA9BA09495
FERRY_OK, FERRY_EAGAIN, FERRY_ETIMEDOUT = 0, 3, 4
SEC = 1_000_000_000


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


# --- ABI of the ferry types used here (include/ferry/ferry.h, gpu.h, tensor.h) ---------------

class Sample(C.Structure):
    _fields_ = [("data", C.c_void_p), ("size", C.c_size_t), ("sequence", C.c_uint64),
                ("publish_time", C.c_int64), ("publisher_id", C.c_uint64),
                ("private_", C.c_uint64 * 3)]


class GpuFrame(C.Structure):
    _fields_ = [("device_ptr", C.c_void_p), ("size", C.c_size_t), ("sequence", C.c_uint64),
                ("publish_time", C.c_int64), ("publisher_id", C.c_uint64), ("host", Sample),
                ("meta", C.c_void_p), ("meta_size", C.c_size_t), ("device", C.c_int)]


class DLDevice(C.Structure):
    _fields_ = [("device_type", C.c_int32), ("device_id", C.c_int32)]


class DLDataType(C.Structure):
    _fields_ = [("code", C.c_uint8), ("bits", C.c_uint8), ("lanes", C.c_uint16)]


class DLTensor(C.Structure):
    _fields_ = [("data", C.c_void_p), ("device", DLDevice), ("ndim", C.c_int32),
                ("dtype", DLDataType), ("shape", C.POINTER(C.c_int64)),
                ("strides", C.POINTER(C.c_int64)), ("byte_offset", C.c_uint64)]


class DLManagedTensor(C.Structure):
    pass


DELETER = C.CFUNCTYPE(None, C.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", C.c_void_p),
                            ("deleter", DELETER)]


class DLVersion(C.Structure):
    _fields_ = [("major", C.c_uint32), ("minor", C.c_uint32)]


class DLManagedTensorVersioned(C.Structure):
    pass


VDELETER = C.CFUNCTYPE(None, C.POINTER(DLManagedTensorVersioned))
DLManagedTensorVersioned._fields_ = [("version", DLVersion), ("manager_ctx", C.c_void_p),
                                     ("deleter", VDELETER), ("flags", C.c_uint64),
                                     ("dl_tensor", DLTensor)]

SubStats = C.c_uint8 * 256  # ferry_subscriber_stats; held is a uint32 at offset 24
HELD_OFFSET = 24


def load(args):
    core = C.CDLL(args.lib)
    gpu = C.CDLL(args.gpu_lib)
    print("loaded %s and %s" % (args.lib, args.gpu_lib))
    return core, gpu


class Ferry:
    def __init__(self, core, gpu):
        self.core, self.gpu = core, gpu
        P, U32, I64 = C.c_void_p, C.c_uint32, C.c_int64
        for name, lib, argtypes in [
            ("ferry_node_options_init", core, [P]),
            ("ferry_node_create", core, [C.POINTER(P), P]),
            ("ferry_node_destroy", core, [P]),
            ("ferry_subscriber_options_init", core, [P]),
            ("ferry_subscriber_create", core, [C.POINTER(P), P, C.c_char_p, C.c_char_p,
                                               C.c_uint64, P]),
            ("ferry_subscriber_destroy", core, [P]),
            ("ferry_subscriber_wait_publishers", core, [P, U32, I64]),
            ("ferry_subscriber_stats_get", core, [P, P]),
            ("ferry_take", core, [P, C.POINTER(Sample)]),
            ("ferry_wait", core, [P, I64]),
            ("ferry_strerror", core, [C.c_int]),
            ("ferry_tensor_to_dlpack", core, [P, C.POINTER(Sample),
                                              C.POINTER(C.POINTER(DLManagedTensor))]),
            ("ferry_tensor_to_dlpack_versioned", core,
             [P, C.POINTER(Sample), C.POINTER(C.POINTER(DLManagedTensorVersioned))]),
            ("ferry_gpu_device_count", gpu, [C.POINTER(C.c_int)]),
            ("ferry_gpu_subscriber_create", gpu, [C.POINTER(P), P, P]),
            ("ferry_gpu_subscriber_destroy", gpu, [P]),
            ("ferry_gpu_subscriber_poll", gpu, [P]),
            ("ferry_gpu_take", gpu, [P, P, C.POINTER(GpuFrame)]),
            ("ferry_tensor_gpu_to_dlpack", gpu, [P, C.POINTER(GpuFrame), P,
                                                 C.POINTER(C.POINTER(DLManagedTensor))]),
        ]:
            fn = getattr(lib, name)
            fn.argtypes = argtypes
            fn.restype = C.c_char_p if name == "ferry_strerror" else (
                None if name.endswith("_init") else C.c_int)
            setattr(self, name, fn)

    def ok(self, err, what):
        if err != FERRY_OK:
            fail("%s: %s" % (what, self.ferry_strerror(err).decode()))

    def held(self, sub):
        st = SubStats()
        self.ok(self.ferry_subscriber_stats_get(sub, st), "ferry_subscriber_stats_get")
        return int.from_bytes(bytes(st[HELD_OFFSET:HELD_OFFSET + 4]), sys.byteorder)

    def subscriber(self, node, topic):
        opts = (C.c_uint8 * 256)()
        self.ferry_subscriber_options_init(opts)
        C.c_uint32.from_buffer(opts, 0).value = 4   # depth
        C.c_int.from_buffer(opts, 4).value = 1      # FERRY_OVERFLOW_BLOCK
        sub = C.c_void_p()
        self.ok(self.ferry_subscriber_create(C.byref(sub), node, topic, TYPE, HASH, opts),
                "ferry_subscriber_create")
        return sub


PyCapsule_New = C.pythonapi.PyCapsule_New
PyCapsule_New.restype = C.py_object
PyCapsule_New.argtypes = [C.c_void_p, C.c_char_p, C.c_void_p]


def capsule(ptr, versioned=False):
    return PyCapsule_New(C.cast(ptr, C.c_void_p), b"dltensor_versioned" if versioned else b"dltensor",
                         None)


class Exported:
    """A producer object for numpy.from_dlpack: hands out one capsule."""

    def __init__(self, make):
        self.make = make

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        versioned = max_version is not None and max_version[0] >= 1
        return self.make(versioned)

    def __dlpack_device__(self):
        return (1, 0)


def expected_host(k):
    if k % 2 == 0:
        return "float32", (2, 3, 4), (12, 4, 1), [float(k * 1000 + i) for i in range(24)]
    vals = [0] * 12  # column-major storage of [4, 3]
    for r in range(4):
        for c in range(3):
            vals[r + 4 * c] = k * 100 + r * 10 + c
    return "int16", (4, 3), (1, 4), vals


def check_dl_host(t, k):
    name, shape, strides, _ = expected_host(k)
    if t.device.device_type != 1 or t.device.device_id != 0:
        fail("host tensor %d: device %d/%d" % (k, t.device.device_type, t.device.device_id))
    if tuple(t.shape[i] for i in range(t.ndim)) != shape:
        fail("host tensor %d: shape" % k)
    if tuple(t.strides[i] for i in range(t.ndim)) != strides:
        fail("host tensor %d: strides" % k)
    code, bits = (2, 32) if name == "float32" else (0, 16)
    if (t.dtype.code, t.dtype.bits, t.dtype.lanes) != (code, bits, 1):
        fail("host tensor %d: dtype" % k)


def host_part(f, node, torch, np):
    sub = f.subscriber(node, b"/tensor/host")
    f.ok(f.ferry_subscriber_wait_publishers(sub, 1, 60 * SEC), "wait for the publisher")
    for k in range(COUNT):
        s = Sample()
        while True:
            err = f.ferry_take(sub, C.byref(s))
            if err == FERRY_OK:
                break
            if err != FERRY_EAGAIN:
                f.ok(err, "ferry_take")
            f.ok(f.ferry_wait(sub, 60 * SEC), "ferry_wait")
        name, shape, strides, vals = expected_host(k)
        # Plain export, read through ctypes, deleted by hand.
        m = C.POINTER(DLManagedTensor)()
        f.ok(f.ferry_tensor_to_dlpack(sub, C.byref(s), C.byref(m)), "ferry_tensor_to_dlpack")
        if s.data:
            fail("the sample was not handed to the export")
        check_dl_host(m.contents.dl_tensor, k)
        ctype = C.c_float if name == "float32" else C.c_int16
        arr = C.cast(m.contents.dl_tensor.data, C.POINTER(ctype))
        if [arr[i] for i in range(len(vals))] != vals:
            fail("host tensor %d: values" % k)
        if torch is None:
            if f.held(sub) != 1:
                fail("held %d, expected 1" % f.held(sub))
            m.contents.deleter(m)
            if f.held(sub) != 0:
                fail("deleter did not release: held %d" % f.held(sub))
            print("  host tensor %d: DLPack fields and values checked through ctypes" % k)
            continue
        # Through torch: the consumer calls the deleter when its tensor goes.
        t = torch.from_dlpack(capsule(m))
        if t.device.type != "cpu" or tuple(t.shape) != shape or tuple(t.stride()) != strides:
            fail("torch host tensor %d: %s %s %s" % (k, t.device, tuple(t.shape), t.stride()))
        if str(t.dtype) != "torch." + name:
            fail("torch host tensor %d: dtype %s" % (k, t.dtype))
        want = torch.tensor(vals, dtype=t.dtype).as_strided(shape, strides)
        if not torch.equal(t, want):
            fail("torch host tensor %d: values" % k)
        if f.held(sub) != 1:
            fail("held %d while torch holds the tensor" % f.held(sub))
        del t
        gc.collect()
        if f.held(sub) != 0:
            fail("torch did not call the deleter: held %d" % f.held(sub))
        print("  host tensor %d: torch.from_dlpack checked, sample released" % k)
    f.ok(f.ferry_subscriber_destroy(sub), "ferry_subscriber_destroy")


def host_part_numpy(f, node, np):
    """NumPy through __dlpack__: the versioned capsule when NumPy asks for DLPack 1.0."""
    sub = f.subscriber(node, b"/tensor/numpy")
    f.ok(f.ferry_subscriber_wait_publishers(sub, 1, 60 * SEC), "wait for the publisher")
    for k in range(COUNT):
        s = Sample()
        while f.ferry_take(sub, C.byref(s)) != FERRY_OK:
            f.ok(f.ferry_wait(sub, 60 * SEC), "ferry_wait")
        name, shape, strides, vals = expected_host(k)

        def make(versioned, s=s):
            if versioned:
                m = C.POINTER(DLManagedTensorVersioned)()
                f.ok(f.ferry_tensor_to_dlpack_versioned(sub, C.byref(s), C.byref(m)),
                     "ferry_tensor_to_dlpack_versioned")
            else:
                m = C.POINTER(DLManagedTensor)()
                f.ok(f.ferry_tensor_to_dlpack(sub, C.byref(s), C.byref(m)), "ferry_tensor_to_dlpack")
            return capsule(m, versioned)

        a = np.from_dlpack(Exported(make))
        esz = 4 if name == "float32" else 2
        if a.shape != shape or a.strides != tuple(x * esz for x in strides) or a.dtype.name != name:
            fail("numpy host tensor %d: %s %s %s" % (k, a.shape, a.strides, a.dtype))
        want = np.lib.stride_tricks.as_strided(np.array(vals, dtype=name), shape,
                                               tuple(x * esz for x in strides))
        if not (a == want).all():
            fail("numpy host tensor %d: values" % k)
        del a
        gc.collect()
        if f.held(sub) != 0:
            fail("numpy did not call the deleter: held %d" % f.held(sub))
        print("  host tensor %d: numpy.from_dlpack checked, sample released" % k)
    f.ok(f.ferry_subscriber_destroy(sub), "ferry_subscriber_destroy")


def device_part(f, node, torch):
    sub = f.subscriber(node, b"/tensor/device")
    gsub = C.c_void_p()
    f.ok(f.ferry_gpu_subscriber_create(C.byref(gsub), sub, None), "ferry_gpu_subscriber_create")
    n = 3 * 480 * 640
    idx = torch.arange(n, device="cuda", dtype=torch.int64) % 1000
    for k in range(COUNT):
        fr = GpuFrame()
        while True:
            err = f.ferry_gpu_take(gsub, None, C.byref(fr))
            if err == FERRY_OK:
                break
            if err != FERRY_EAGAIN:
                f.ok(err, "ferry_gpu_take")
            f.ok(f.ferry_wait(sub, 60 * SEC), "ferry_wait")
        m = C.POINTER(DLManagedTensor)()
        f.ok(f.ferry_tensor_gpu_to_dlpack(gsub, C.byref(fr), None, C.byref(m)),
             "ferry_tensor_gpu_to_dlpack")
        dl = m.contents.dl_tensor
        if dl.device.device_type != 2 or dl.device.device_id != 0:
            fail("device tensor %d: DLPack device %d/%d" % (k, dl.device.device_type,
                                                            dl.device.device_id))
        t = torch.from_dlpack(capsule(m))
        if not t.is_cuda or tuple(t.shape) != (3, 480, 640) or t.dtype != torch.float32:
            fail("torch device tensor %d: %s %s %s" % (k, t.device, tuple(t.shape), t.dtype))
        if t.stride() != (480 * 640, 640, 1):
            fail("torch device tensor %d: strides %s" % (k, t.stride()))
        want = (idx + k * 1000).to(torch.float32).reshape(3, 480, 640)
        if not torch.equal(t, want):
            bad = (t != want).nonzero()[:4].tolist()
            fail("torch device tensor %d: values differ at %s" % (k, bad))
        del t
        gc.collect()
        torch.cuda.synchronize()
        deadline = time.monotonic() + 10
        while f.held(sub) != 0:
            if time.monotonic() > deadline:
                fail("device tensor %d: sample still held after the deleter" % k)
            f.ok(f.ferry_gpu_subscriber_poll(gsub), "ferry_gpu_subscriber_poll")
            time.sleep(0.001)
        print("  device tensor %d: torch.from_dlpack on cuda checked, frame released" % k)
    f.ok(f.ferry_gpu_subscriber_destroy(gsub), "ferry_gpu_subscriber_destroy")
    f.ok(f.ferry_subscriber_destroy(sub), "ferry_subscriber_destroy")


def run_publisher(args, tmp, topic_dev, topic_host):
    return subprocess.Popen([args.pub, tmp, "0", str(COUNT), topic_dev, topic_host])


def finish(pub):
    try:
        rc = pub.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pub.kill()
        fail("the publisher did not finish")
    if rc != 0:
        fail("the publisher exited with %d" % rc)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--gpu-lib", required=True)
    ap.add_argument("--pub", required=True)
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        torch = None
    try:
        import numpy as np
    except ImportError:
        np = None
    print("torch: %s, numpy: %s" % (torch.__version__ if torch else "missing",
                                    np.__version__ if np else "missing"), flush=True)
    f = Ferry(*load(args))
    tmp = tempfile.mkdtemp(prefix="ferry-dlpack-")
    try:
        nopts = (C.c_uint8 * 256)()
        f.ferry_node_options_init(nopts)
        dirbuf = C.create_string_buffer(tmp.encode())
        C.c_void_p.from_buffer(nopts, 0).value = C.addressof(dirbuf)  # dir; domain 0
        node = C.c_void_p()
        f.ok(f.ferry_node_create(C.byref(node), nopts), "ferry_node_create")

        print("part 1: host tensors", flush=True)
        pub = run_publisher(args, tmp, "-", "/tensor/host")
        host_part(f, node, torch, np)
        finish(pub)
        if np is not None:
            pub = run_publisher(args, tmp, "-", "/tensor/numpy")
            host_part_numpy(f, node, np)
            finish(pub)

        ndev = C.c_int()
        have_gpu = f.ferry_gpu_device_count(C.byref(ndev)) == FERRY_OK
        if torch is None or not torch.cuda.is_available() or not have_gpu:
            f.ok(f.ferry_node_destroy(node), "ferry_node_destroy")
            print("part 2 skipped: %s" % ("no torch" if torch is None else "no CUDA device"))
            return SKIP
        print("part 2: device tensors", flush=True)
        torch.cuda.init()
        pub = run_publisher(args, tmp, "/tensor/device", "-")
        device_part(f, node, torch)
        finish(pub)
        f.ok(f.ferry_node_destroy(node), "ferry_node_destroy")
        print("dlpack_torch: all passed")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
