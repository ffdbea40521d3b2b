"""asyncio and selectors through fileno(); DLPack consumers."""

import asyncio
import selectors

import numpy as np
import pytest

import ferry
from conftest import connect


def test_selectors(node):
    pub = node.publisher("/sel", "my/Blob")
    sub = node.subscribe("/sel")
    connect(pub, sub)
    assert sub.try_take() is None  # arms the descriptor
    sel = selectors.DefaultSelector()
    sel.register(sub.fileno(), selectors.EVENT_READ)
    pub.publish_copy(b"ping")
    sample = None
    for _ in range(100):
        if sel.select(timeout=0.1):
            sample = sub.try_take()
            if sample is not None:
                break
    assert sample is not None and bytes(sample) == b"ping"
    sel.close()


def test_asyncio(node):
    pub = node.publisher("/aio", "my/Blob")
    sub = node.subscribe("/aio", depth=8)
    connect(pub, sub)

    async def main():
        async def producer():
            for i in range(5):
                await asyncio.sleep(0.01)
                pub.publish_copy(b"%d" % i)

        task = asyncio.create_task(producer())
        got = []
        async for s in sub:
            with s:
                got.append(bytes(s))
            if len(got) == 5:
                break
        await task
        with pytest.raises(ferry.TimeoutError):
            await sub.take_async(timeout=0.05)
        return got

    assert asyncio.run(main()) == [b"%d" % i for i in range(5)]


def test_numpy_from_dlpack_of_an_image(node):
    pub = node.publisher("/img", "image")
    sub = node.subscribe("/img")
    connect(pub, sub)
    loan = pub.loan_image(8, 4, "rgb8")
    np.asarray(loan)[...] = 3
    pub.publish(loan)
    s = sub.take(timeout=2)
    x = np.from_dlpack(s)
    assert x.shape == (4, 8, 3) and (x == 3).all()
    s.release()
    assert sub.stats()["held"] == 1  # the DLPack tensor still reads it
    del x
    assert sub.stats()["held"] == 0


def test_versioned_capsule(node):
    pub = node.publisher("/t", "tensor")
    sub = node.subscribe("/t")
    connect(pub, sub)
    pub.publish(pub.loan_tensor((4,), "int32"))
    with sub.take(timeout=2) as s:
        cap = s.__dlpack__(max_version=(1, 0))
        assert "dltensor_versioned" in repr(cap)
        del cap  # unconsumed: its destructor gives the export back
    assert sub.stats()["held"] == 0


def test_torch_from_dlpack(node):
    torch = pytest.importorskip("torch")
    pub = node.publisher("/t", "tensor")
    sub = node.subscribe("/t")
    connect(pub, sub)
    loan = pub.loan_tensor((2, 3), "float32")
    np.asarray(loan)[...] = 2.0
    pub.publish(loan)
    with sub.take(timeout=2) as s:
        t = torch.from_dlpack(s)
        assert t.shape == (2, 3) and float(t.sum()) == 12.0
        assert t.data_ptr() == np.asarray(s).__array_interface__["data"][0]
        del t


def test_gpu_tensors():
    pytest.skip("device tensors from Python are not implemented in this build")
