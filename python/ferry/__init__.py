"""ferry: zero-copy transport of large sensor frames between processes on one host.

Publishers loan memory from a shared-memory pool, fill it in place (``np.asarray(loan)``) and
publish it; subscribers take samples that are read-only views of the publisher's own pages
(``np.asarray(sample)``). No payload byte is copied on the way.

    import numpy as np, ferry

    with ferry.Node() as node:           # a publisher process
        pub = node.publisher("/camera", "image")
        loan = pub.loan_image(1280, 720, "rgb8")
        np.asarray(loan)[:] = 0          # (720, 1280, 3) uint8 over the publisher's pages
        pub.publish(loan)

    with ferry.Node() as node:           # a subscriber process
        sub = node.subscribe("/camera")  # waits for the publisher; the type comes from it
        with sub.take(timeout=1.0) as frame:
            img = np.asarray(frame)      # read-only (720, 1280, 3) uint8, not a copy
    # img may stay bound: what it reads stays mapped until it goes (docs/python.md)

Several topics matched by stamp come from ``ferry.Sync``; device frames and tensors (when the
GPU module is built, ``ferry.HAVE_GPU``) from ``ferry.GpuSubscriber``, for ``torch.from_dlpack``,
and are published from device memory that torch fills in place with ``ferry.GpuPublisher``.

The C extension (``ferry._ferry``) does the work; this module adds what is easier in Python:
``Sample.numpy()``, ``Sample.cuda()`` over the extension's ``_sample_cuda``, and the asyncio
helpers ``Subscriber.take_async()`` and ``async for``.
"""

from __future__ import annotations

import asyncio as _asyncio
from typing import Any as _Any

from . import _ferry
from ._ferry import *  # noqa: F401,F403
from ._ferry import (  # noqa: F401
    HAVE_GPU,
    Error,
    Loan,
    Node,
    NotSupportedError,
    Publisher,
    Sample,
    Subscriber,
    Sync,
    SyncSet,
    WaitSet,
    __version__,
)

if not HAVE_GPU:

    class GpuSubscriber:
        """Device frames from a Subscriber: this build of ferry has no GPU module (FERRY_GPU), so
        creating one raises NotSupportedError."""

        def __init__(self, subscriber: Subscriber, *, device: int = 0) -> None:
            raise NotSupportedError(
                "GpuSubscriber: ferry was built without the GPU module (FERRY_GPU=ON needs a "
                "CUDA toolkit)"
            )

    class GpuPublisher:
        """Device frames through a Publisher: this build of ferry has no GPU module (FERRY_GPU),
        so creating one raises NotSupportedError."""

        def __init__(
            self, publisher: Publisher, *, device: int = 0, ipc: str = "auto",
            early_wake: bool = True
        ) -> None:
            raise NotSupportedError(
                "GpuPublisher: ferry was built without the GPU module (FERRY_GPU=ON needs a "
                "CUDA toolkit)"
            )

    def gpu_device_count() -> int:
        """Usable CUDA devices: always 0 without the GPU module."""
        return 0

#: PointField datatype constants (sensor_msgs/PointField) and their NumPy types.
POINT_DATATYPES = {
    1: "i1",
    2: "u1",
    3: "i2",
    4: "u2",
    5: "i4",
    6: "u4",
    7: "f4",
    8: "f8",
}


def _sample_numpy(self: Sample) -> _Any:
    """The sample as a read-only NumPy array over the publisher's pages, without a copy.

    Images, tensors and bytes give what ``np.asarray(sample)`` gives. Point clouds give a
    structured array with one field per PointField, built from ``sample.fields`` with the
    fields' own offsets, so it works for every layout (overlapping or out-of-order fields
    included, which a buffer format string cannot describe).
    """
    import numpy as np

    if self.kind != "pointcloud":
        return np.asarray(self)
    order = ">" if self.is_bigendian else "<"
    names, formats, offsets = [], [], []
    for name, offset, datatype, count in self.fields:
        base = order + POINT_DATATYPES[datatype]
        names.append(name)
        formats.append(base if count == 1 else (base, (count,)))
        offsets.append(offset)
    dtype = np.dtype(
        {"names": names, "formats": formats, "offsets": offsets, "itemsize": self.point_step}
    )
    flat = np.frombuffer(self, dtype=np.uint8)
    points = flat.view(dtype)
    return points if self.height == 1 else points.reshape(self.height, self.width)


def _sample_cuda(self: Sample, *args: _Any, **kwargs: _Any) -> _Any:
    """cuda(*, device=0) -> HostGpuView

    The sample on CUDA device `device` without a pageable copy: its chunk's pages are
    registered with CUDA once (read-only, mapped) and the view reads them in place
    (torch.from_dlpack(view), cupy.asarray(view)) or copies them at pinned speed
    (view.copy_to(tensor, stream=...)). The sample stays held while the view is open, a
    tensor over it lives or a copy runs. NotSupportedError without the GPU module,
    NoDeviceError without a device.
    """
    return _ferry._sample_cuda(self, *args, **kwargs)


async def _take_async(self: Subscriber, timeout: float | None = None) -> Sample:
    """Waits for a sample inside an asyncio event loop, without blocking the loop.

    Watches ``fileno()`` with ``loop.add_reader`` and takes with ``try_take()``; raises
    ``ferry.TimeoutError`` when no sample came within ``timeout`` seconds (None: for ever).
    """
    loop = _asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    while True:
        sample = self.try_take()
        if sample is not None:
            return sample
        ready = loop.create_future()
        fd = self.fileno()
        loop.add_reader(fd, lambda: ready.done() or ready.set_result(None))
        try:
            left = None if deadline is None else max(0.0, deadline - loop.time())
            # A short cap: housekeeping (publishers joining) also wakes the descriptor, and the
            # cap keeps a missed wake-up from stalling the loop.
            cap = 0.05 if left is None else min(left, 0.05)
            try:
                await _asyncio.wait_for(ready, cap)
            except _asyncio.TimeoutError:
                pass
        finally:
            loop.remove_reader(fd)
        if deadline is not None and loop.time() >= deadline:
            sample = self.try_take()
            if sample is not None:
                return sample
            raise TimeoutError(f"take_async({self.topic!r}): no sample within {timeout} s")


def _aiter(self: Subscriber) -> _Any:
    """``async for sample in sub:`` takes samples for ever through ``take_async()``."""

    async def gen() -> _Any:
        while True:
            yield await self.take_async()

    return gen()


Sample.numpy = _sample_numpy  # type: ignore[attr-defined]
Sample.cuda = _sample_cuda  # type: ignore[method-assign]
Subscriber.take_async = _take_async  # type: ignore[attr-defined]
Subscriber.__aiter__ = _aiter  # type: ignore[attr-defined]
