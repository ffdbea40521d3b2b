"""Fixtures of the ferry Python tests: a private domain per test and in-process connecting."""

import os
import tempfile
import time

import pytest

import ferry

_domains = iter(range(1, 1000))


@pytest.fixture
def where():
    """A fresh (dir, domain) for one test, under FERRY_DIR (run.sh makes it private)."""
    root = os.environ.get("FERRY_DIR") or tempfile.mkdtemp(prefix="ferry-py-")
    return root, next(_domains)


@pytest.fixture
def node(where):
    with ferry.Node(dir=where[0], domain=where[1], name="pytest") as n:
        yield n


def connect(pub, *subs, timeout=5.0):
    """Runs both sides' housekeeping until every subscriber is connected to pub (one thread
    holds both, and ferry starts no thread of its own)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pub.poll(0.001)
        if pub.stats()["subscribers"] >= len(subs) and all(
            s.stats()["publishers"] >= 1 for s in subs
        ):
            return
        for s in subs:
            s.wait(0.001)
    raise AssertionError("publisher and subscribers did not connect")


def cli():
    path = os.environ.get("FERRY_CLI")
    if not path or not os.path.exists(path):
        pytest.skip("FERRY_CLI not set")
    return path


def peer():
    path = os.environ.get("FERRY_PY_PEER")
    if not path or not os.path.exists(path):
        pytest.skip("FERRY_PY_PEER not set")
    return path


def torch_cuda():
    """torch, where the GPU module, a CUDA device and PyTorch with CUDA are all there; the test
    is skipped otherwise."""
    if not ferry.HAVE_GPU or ferry.gpu_device_count() == 0:
        pytest.skip("no GPU module or no CUDA device")
    try:
        import torch
    except ImportError:
        pytest.skip("PyTorch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA")
    return torch
