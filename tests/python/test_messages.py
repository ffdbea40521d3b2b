"""Images, point clouds, tensors and bytes: loans in, arrays out, headers decoded."""

import numpy as np
import pytest

import ferry
from conftest import connect


@pytest.mark.parametrize(
    "encoding,shape,dtype",
    [
        ("rgb8", (3, 4, 3), np.uint8),
        ("bgr8", (3, 4, 3), np.uint8),
        ("rgba8", (3, 4, 4), np.uint8),
        ("mono8", (3, 4), np.uint8),
        ("mono16", (3, 4), np.uint16),
        ("16UC1", (3, 4), np.uint16),
        ("32FC1", (3, 4), np.float32),
        ("yuyv", (3, 4, 2), np.uint8),
    ],
)
def test_image_encodings(node, encoding, shape, dtype):
    pub = node.publisher("/cam", "image")
    sub = node.subscribe("/cam")
    assert sub.type_name == "sensor_msgs/Image" and sub.kind == "image"
    connect(pub, sub)
    loan = pub.loan_image(4, 3, encoding)
    a = np.asarray(loan)
    assert a.shape == shape and a.dtype == dtype and a.flags.writeable
    a[...] = np.arange(a.size).reshape(shape).astype(dtype)
    loan.frame_id = "camera"
    loan.stamp = (12, 345)
    pub.publish(loan)
    assert loan.state == "published"
    with sub.take(timeout=2) as s:
        b = np.asarray(s)
        assert b.shape == shape and b.dtype == dtype and not b.flags.writeable
        assert np.array_equal(b, np.arange(a.size).reshape(shape).astype(dtype))
        assert (s.width, s.height, s.encoding, s.frame_id, s.stamp) == (
            4, 3, encoding, "camera", (12, 345))
        assert s.sequence == 1 and s.kind == "image" and s.publish_time <= ferry.now()
        with pytest.raises(ValueError):
            b[0, 0] = 1


def test_image_padded_rows(node):
    pub = node.publisher("/cam", "image")
    sub = node.subscribe("/cam", "image")
    connect(pub, sub)
    loan = pub.loan_image(5, 2, "rgb8", step=64)
    a = np.asarray(loan)
    assert a.strides == (64, 3, 1)
    a[...] = 9
    pub.publish(loan)
    with sub.take(timeout=2) as s:
        assert s.step == 64
        b = np.asarray(s)
        assert b.strides == (64, 3, 1) and (b == 9).all()
        assert bytes(s) == b"\x09" * 30  # the rows without their padding (a copy)
        del b


def test_nv12(node):
    pub = node.publisher("/cam", "image")
    sub = node.subscribe("/cam")
    connect(pub, sub)
    loan = pub.loan_image(4, 2, "nv12")
    assert np.asarray(loan).shape == (3, 4)
    pub.publish(loan)
    with sub.take(timeout=2) as s:
        assert np.asarray(s).shape == (3, 4)


def test_pointcloud(node):
    pub = node.publisher("/lidar", "pointcloud")
    sub = node.subscribe("/lidar")
    connect(pub, sub)
    fields = [("x", "float32"), ("y", "float32"), ("z", "float32"), ("intensity", np.dtype("u1"))]
    loan = pub.loan_pointcloud(6, 1, fields, point_step=16)
    a = np.asarray(loan)
    assert a.dtype.names == ("x", "y", "z", "intensity") and a.shape == (6,)
    a["x"] = np.arange(6)
    a["intensity"] = 200
    pub.publish(loan)
    del a
    with sub.take(timeout=2) as s:
        b = np.asarray(s)
        assert b.dtype.itemsize == 16 and list(b["x"]) == [0, 1, 2, 3, 4, 5]
        assert (b["intensity"] == 200).all()
        assert s.fields == [("x", 0, 7, 1), ("y", 4, 7, 1), ("z", 8, 7, 1), ("intensity", 12, 2, 1)]
        assert s.point_step == 16 and s.width == 6 and s.height == 1
        c = s.numpy()
        assert c.dtype == b.dtype and np.array_equal(c["x"], b["x"])
        del b, c


def test_pointcloud_overlapping_fields(node):
    pub = node.publisher("/lidar", "pointcloud")
    sub = node.subscribe("/lidar")
    connect(pub, sub)
    # rgb as one float32 and as four bytes: no struct format describes it.
    loan = pub.loan_pointcloud(3, 2, [("rgb", 0, "float32", 1), ("r", 0, "uint8", 1)])
    np.asarray(loan)[...] = 5  # rows of point_step bytes
    pub.publish(loan)
    with sub.take(timeout=2) as s:
        assert np.asarray(s).shape == (6, 4)
        c = s.numpy()
        assert c.shape == (2, 3) and (c["r"] == 5).all()
        del c


def test_tensor(node):
    pub = node.publisher("/t", "tensor")
    sub = node.subscribe("/t")
    connect(pub, sub)
    loan = pub.loan_tensor((2, 3, 4), np.float64)
    np.asarray(loan)[...] = np.arange(24).reshape(2, 3, 4)
    loan.frame_id = "base"
    pub.publish(loan)
    with sub.take(timeout=2) as s:
        assert s.shape == (2, 3, 4) and s.dtype == "float64" and s.device == (1, 0)
        assert s.strides == (12, 4, 1) and s.frame_id == "base"
        assert np.array_equal(np.asarray(s), np.arange(24).reshape(2, 3, 4))


def test_tensor_strided(node):
    pub = node.publisher("/t", "tensor")
    sub = node.subscribe("/t")
    connect(pub, sub)
    loan = pub.loan_tensor((3, 2), "int16", strides=(1, 3))  # column-major
    a = np.asarray(loan)
    assert a.strides == (2, 6)
    a[...] = [[1, 2], [3, 4], [5, 6]]
    pub.publish(loan)
    with sub.take(timeout=2) as s:
        assert np.asarray(s).tolist() == [[1, 2], [3, 4], [5, 6]]


def test_bfloat16_refuses_buffer(node):
    pub = node.publisher("/t", "tensor")
    with pytest.raises(BufferError):
        memoryview(pub.loan_tensor((2,), "bfloat16"))


def test_bytes(node):
    pub = node.publisher("/raw", "my/Blob")
    sub = node.subscribe("/raw")
    assert sub.type_name == "my/Blob" and sub.kind == "bytes"
    connect(pub, sub)
    loan = pub.loan(100)
    np.frombuffer(loan, dtype=np.uint8)[:] = 42
    pub.publish(loan, size=10)
    pub.publish_copy(b"hello")
    with sub.take(timeout=2) as s:
        assert s.size == 10 and bytes(s) == b"\x2a" * 10
    with sub.take(timeout=2) as s:
        a = np.asarray(s)
        assert a.dtype == np.uint8 and a.tobytes() == b"hello"
        assert memoryview(s).readonly
        del a
    assert pub.stats()["bytes_copied"] == 5


def test_iteration_and_try_take(node):
    pub = node.publisher("/raw", "my/Blob")
    sub = node.subscribe("/raw", depth=8)
    connect(pub, sub)
    assert sub.try_take() is None
    for i in range(3):
        pub.publish_copy(bytes([i]) * 8)
    seen = []
    for s in sub:
        seen.append(bytes(s)[0])
        if len(seen) == 3:
            break
    assert seen == [0, 1, 2]


def test_background_subscriber(node):
    # Served after the others (ferry_subscriber_options.background); delivery is unchanged.
    pub = node.publisher("/bg", "my/Blob")
    bg = node.subscribe("/bg", depth=4, background=True)
    fg = node.subscribe("/bg", depth=4)
    connect(pub, bg, fg)
    pub.publish_copy(b"frame")
    for sub in (fg, bg):
        with sub.take(timeout=2) as s:
            assert bytes(s) == b"frame"
    with pytest.raises(TypeError):
        node.subscribe("/bg", background=True, nonsense=1)


def test_history(node):
    pub = node.publisher("/h", "my/Blob", history=2)
    for i in range(3):
        pub.publish_copy(bytes([i]))
    sub = node.subscribe("/h", history=2)
    connect(pub, sub)
    assert sub.wait(2)
    got = [bytes(sub.take(timeout=2))[0] for _ in range(2)]
    assert got == [1, 2]


def test_waitset(node):
    pubs = [node.publisher(f"/w{i}", "my/Blob") for i in range(3)]
    subs = [node.subscribe(f"/w{i}") for i in range(3)]
    for p, s in zip(pubs, subs):
        connect(p, s)
    ws = node.waitset()
    for s in subs:
        ws.add(s)
    assert ws.wait(timeout=0.05) == []
    pubs[1].publish_copy(b"x")
    ready = ws.wait(timeout=2)
    assert ready == [subs[1]]
    assert bytes(ready[0].take(timeout=1)) == b"x"
    ws.remove(subs[0])
    assert len(ws.members) == 2
    with pytest.raises(ferry.BusyError):
        node.waitset().add(subs[1])


def test_inspect(node, where):
    keep = node.publisher("/seen", "my/Blob")  # noqa: F841
    found = [e for e in ferry.inspect("/seen", domain=where[1], dir=where[0])]
    assert len(found) == 1 and found[0]["type_name"] == "my/Blob" and found[0]["alive"]
    assert found[0]["kind"] == "publisher"
    assert ferry.hash("sensor_msgs/Image") == 0x3CCE13FB76B0C32C


def test_env_defaults(where, monkeypatch):
    monkeypatch.setenv("FERRY_DIR", where[0])
    monkeypatch.setenv("FERRY_DOMAIN", str(where[1]))
    with ferry.Node() as n:
        assert n.domain == where[1] and n.dir.startswith(where[0])
    monkeypatch.setenv("FERRY_DOMAIN", "x")
    with pytest.raises(ferry.InvalidArgumentError):
        ferry.Node()
    monkeypatch.setenv("FERRY_DOMAIN", "1")
    monkeypatch.setenv("FERRY_DIR", "")
    with pytest.raises(ferry.InvalidArgumentError):
        ferry.Node()
