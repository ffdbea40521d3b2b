"""Every example of docs/python.md runs as written, as a process of its own against real
publishers (`ferry pub`, the docs' own publisher, or a small publisher script here), and ends
with status 0 and nothing on stderr: no traceback, no warning of `python3 -X dev`.

Each fenced example is found under its section's heading; an example under a heading this file
does not know fails test_every_example_is_run, so a new one cannot go untested."""

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import ferry
from conftest import cli, torch_cuda

DOC = Path(__file__).resolve().parents[2] / "docs" / "python.md"
PROCESS_TIMEOUT = 120  # seconds; generous, for a loaded machine


def doc_blocks():
    """(heading, language, code) of every fenced block of the document."""
    blocks, heading = [], None
    lines = DOC.read_text().splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("#"):
            heading = lines[i].lstrip("#").strip()
        m = re.match(r"^```(\w+)\s*$", lines[i])
        if m:
            end = lines.index("```", i + 1)
            blocks.append((heading, m.group(1), "\n".join(lines[i + 1:end]) + "\n"))
            i = end
        i += 1
    return blocks


def example(heading, language="python"):
    found = [code for h, lang, code in doc_blocks() if h == heading and lang == language]
    assert len(found) == 1, f"docs/python.md: {len(found)} {language} examples under '{heading}'"
    return found[0]


QUICKSTART = "From a clone to a Python subscriber"
PUBLISHER = "A camera publisher with NumPy"
CONSUMER = "A consumer"
ZERO_COPY = "Zero copy, checked"
ASYNCIO = "asyncio"
DLPACK = "PyTorch and DLPack"
SYNC = "Several topics matched by stamp: `ferry.Sync`"
GPU = "Device frames and tensors: `ferry.GpuSubscriber` and PyTorch"
GPU_PUB = "Publishing device frames: `ferry.GpuPublisher`"
HOST_GPU = "Host frames to the GPU: `Sample.cuda()`"


def test_every_example_is_run():
    known = {QUICKSTART, PUBLISHER, CONSUMER, ZERO_COPY, ASYNCIO, DLPACK, SYNC, GPU, GPU_PUB,
             HOST_GPU}
    found = {h for h, lang, _ in doc_blocks() if lang in ("python", "sh")}
    assert found == known, f"examples without a test: {found - known}; gone: {known - found}"


@pytest.fixture
def env(where):
    e = dict(os.environ)
    e["FERRY_DIR"], e["FERRY_DOMAIN"] = where[0], str(where[1])
    return e


def start(code, env, tmp_path, name):
    """Runs code as tmp_path/name under `python3 -X dev`: tracebacks name its lines."""
    path = tmp_path / name
    path.write_text(code)
    return subprocess.Popen([sys.executable, "-X", "dev", str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def finish(p, what, timeout=PROCESS_TIMEOUT):
    """Waits for an example; asserts status 0 and an empty stderr; returns its stdout lines."""
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        raise AssertionError(f"{what}: still running after {timeout} s\n{out[-2000:]}\n{err}")
    assert p.returncode == 0 and err == "", (
        f"{what}: exit status {p.returncode}, stderr:\n{err}\nstdout (end):\n{out[-2000:]}")
    return out.splitlines()


class Camera:
    """`ferry pub /camera --image 1280x720 --rate 30`, as the docs start it, stopped with SIGTERM
    as `kill` does."""

    def __init__(self, env, argv=None):
        self.p = subprocess.Popen(argv or [cli(), "pub", "/camera", "--image", "1280x720",
                                           "--rate", "30"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                  env=env)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.p.send_signal(signal.SIGTERM)
        try:
            _, err = self.p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.communicate()
            raise AssertionError("ferry pub did not stop on SIGTERM")
        if exc[0] is None:
            assert self.p.returncode == 0, f"ferry pub: exit status {self.p.returncode}: {err}"


def test_quickstart(env, tmp_path):
    block = example(QUICKSTART, "sh")
    pub_line = next(l for l in block.splitlines() if l.startswith("build/ferry pub "))
    argv = shlex.split(pub_line.split("#")[0].replace("&", ""))
    m = re.search(r"^python3 -c '\n(.*?)^'$", block, re.S | re.M)
    assert m, "no python3 -c '...' in the quickstart"
    assert "kill $!" in block  # the publisher is stopped after the subscriber ends
    ferry_cli = cli()  # may skip: before any process is started
    # The subscriber first: it waits for the publisher (the shell starts both at once).
    sub = start(m.group(1), env, tmp_path, "quickstart.py")
    time.sleep(0.3)
    with Camera(env, [ferry_cli] + argv[1:]):
        lines = finish(sub, "the quickstart's subscriber")
    assert len(lines) == 90, lines[-5:]
    seqs = []
    for line in lines:
        m = re.fullmatch(r"(\d+) rgb8 \(720, 1280, 3\) \[ *\d+ +\d+ +\d+\]", line)
        assert m, line
        seqs.append(int(m.group(1)))
    assert seqs == sorted(seqs) and len(set(seqs)) == 90


def test_publisher_and_consumer(env, tmp_path):
    # The consumer first, as the docs allow: subscribe() waits for the publisher.
    consumer = start(example(CONSUMER), env, tmp_path, "consumer.py")
    time.sleep(0.3)
    publisher = start(example(PUBLISHER), env, tmp_path, "publisher.py")
    finish(publisher, "the publisher example")
    lines = finish(consumer, "the consumer example")
    assert lines, "the consumer printed no frame"
    firsts = []
    for line in lines:
        m = re.fullmatch(r"camera \((\d+), (\d+)\) \(720, 1280, 3\) \[ *(\d+) +(\d+) +(\d+)\]",
                         line)
        assert m, line
        r, g, b = (int(m.group(k)) for k in (3, 4, 5))
        assert r == g == b, line  # grab_frame(i) fills every byte with i % 256
        firsts.append(r)
    assert firsts == sorted(firsts) and firsts[-1] <= 89


def test_zero_copy_checked(env, tmp_path):
    with Camera(env):
        lines = finish(start(example(ZERO_COPY), env, tmp_path, "zero_copy.py"), ZERO_COPY)
    assert lines == ["r--s /memfd:ferry-data"], lines


def test_asyncio(env, tmp_path):
    with Camera(env):
        lines = finish(start(example(ASYNCIO), env, tmp_path, "asyncio_example.py"), ASYNCIO)
    assert lines == ["(720, 1280, 3)"] * 31, lines


def test_pytorch_and_dlpack(env, tmp_path):
    try:
        import torch  # noqa: F401
    except ImportError:
        pytest.skip("PyTorch is not installed (python3-torch)")
    with Camera(env):
        lines = finish(start(example(DLPACK), env, tmp_path, "dlpack.py"), DLPACK)
    assert lines == ["torch.Size([720, 1280, 3]) torch.uint8"], lines


# Publishes /camera (rgb8) and /depth (32FC1) with one stamp per pair, 30 pairs a second, until
# stopped: what a stereo or RGB-D driver does, and what ferry.Sync pairs.
STEREO = """
import signal, sys, time
import numpy as np, ferry

signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
with ferry.Node(name="rgbd") as node:
    cam = node.publisher("/camera", "image")
    depth = node.publisher("/depth", "image")
    while True:
        stamp = time.time_ns()
        for pub, enc, value in ((cam, "rgb8", 1), (depth, "32FC1", 2.5)):
            loan = pub.loan_image(320, 240, enc)
            np.asarray(loan)[...] = value
            loan.stamp = stamp
            pub.publish(loan)
        cam.poll(0)
        depth.poll(1 / 30)
"""


def test_sync(env, tmp_path):
    rgbd = start(STEREO, env, tmp_path, "rgbd.py")
    try:
        lines = finish(start(example(SYNC), env, tmp_path, "sync_example.py"), SYNC)
    finally:
        rgbd.send_signal(signal.SIGTERM)
    finish(rgbd, "the RGB-D publisher")
    assert lines == ["(240, 320, 3) (240, 320)"] * 30, lines


def test_gpu(env, tmp_path):
    """Needs the GPU module, a CUDA device, PyTorch with CUDA and tests/gpu's tensor_gpu_pub
    (FERRY_TENSOR_GPU_PUB); skipped otherwise."""
    pub = os.environ.get("FERRY_TENSOR_GPU_PUB")
    torch_cuda()
    if not pub or not os.path.exists(pub):
        pytest.skip("FERRY_TENSOR_GPU_PUB (tests/gpu/tensor_gpu_pub) not set")
    gpub = subprocess.Popen([pub, env["FERRY_DIR"], env["FERRY_DOMAIN"], "30", "/features", "-"],
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        finish(start(example(GPU), env, tmp_path, "gpu_example.py"), GPU)
    finally:
        _, err = gpub.communicate(timeout=PROCESS_TIMEOUT)
    assert gpub.returncode == 0, err


def test_gpu_publisher(env, tmp_path):
    """The Python camera of GPU_PUB feeds the consumer of GPU: both run as written. Needs the GPU
    module, a CUDA device and PyTorch with CUDA; skipped otherwise."""
    torch_cuda()
    camera = start(example(GPU_PUB), env, tmp_path, "gpu_camera.py")
    try:
        finish(start(example(GPU), env, tmp_path, "gpu_example.py"), GPU)
    finally:
        finish(camera, GPU_PUB)


def test_host_gpu(env, tmp_path):
    """The camera publisher's frames onto the GPU with Sample.cuda(), as written: in place and
    by copy, every frame's first byte as published. Needs the GPU module, a CUDA device and
    PyTorch with CUDA; skipped otherwise."""
    torch_cuda()
    consumer = start(example(HOST_GPU), env, tmp_path, "host_gpu.py")
    # The camera starts once the consumer subscribed (importing torch and making its CUDA
    # context take seconds; the camera's frames last three).
    deadline = time.monotonic() + PROCESS_TIMEOUT
    while not any(e["kind"] == "subscriber" and e["alive"]
                  for e in ferry.inspect("/camera", domain=int(env["FERRY_DOMAIN"]),
                                         dir=env["FERRY_DIR"])):
        assert consumer.poll() is None, consumer.communicate()
        assert time.monotonic() < deadline, "the host GPU example never subscribed"
        time.sleep(0.05)
    publisher = start(example(PUBLISHER), env, tmp_path, "publisher.py")
    finish(publisher, "the publisher example")
    lines = finish(consumer, HOST_GPU)
    assert lines, "the host GPU example printed no frame"
    for line in lines:
        m = re.fullmatch(r"\(720, 1280, 3\) (\d+) (\d+)", line)
        assert m and m.group(1) == m.group(2), line
