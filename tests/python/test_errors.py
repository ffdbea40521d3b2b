"""Every ferry_err has its exception class, and each error path raises the right one."""

import os

import numpy as np
import pytest

import ferry
from conftest import connect

CLASSES = {
    1: ("InvalidArgumentError", ValueError),
    2: ("NoMemoryError", MemoryError),
    3: ("AgainError", BlockingIOError),
    4: ("TimeoutError", TimeoutError),
    5: ("TypeMismatchError", None),
    6: ("TooBigError", None),
    7: ("PoolExhaustedError", None),
    8: ("StateError", None),
    9: ("ClosedError", None),
    10: ("BusyError", None),
    11: ("LimitError", None),
    12: ("InvalidNameError", ValueError),
    13: ("SysError", OSError),
    14: ("ProtocolError", None),
    15: ("PermissionError", PermissionError),
    16: ("NoDeviceError", None),
    17: ("NotSupportedError", None),
    18: ("ForeignError", None),
    19: ("QosError", None),
}


def test_every_code_has_a_class():
    for code, (name, builtin) in CLASSES.items():
        cls = getattr(ferry, name)
        assert issubclass(cls, ferry.Error)
        if builtin is not None:
            assert issubclass(cls, builtin)
        assert ferry.strerror(code)
    assert len(set(CLASSES)) == 19


def raises(cls, code):
    class Check:
        def __enter__(self):
            self.ctx = pytest.raises(cls)
            self.info = self.ctx.__enter__()
            return self.info

        def __exit__(self, *exc):
            result = self.ctx.__exit__(*exc)
            assert self.info.value.code == code
            assert self.info.value.errname.startswith("FERRY_E")
            assert ferry.strerror(code) in str(self.info.value)
            return result

    return Check()


def test_invalid_name(node):
    with raises(ferry.InvalidNameError, 12):
        node.publisher("bad topic!", "my/Blob")


def test_invalid_argument(node):
    with raises(ferry.InvalidArgumentError, 1):
        node.publisher("/a", "my/Blob", payload_align=3)
    with raises(ferry.InvalidArgumentError, 1):
        node.subscribe("/a", "my/Blob", overflow="sometimes")
    with raises(ferry.InvalidArgumentError, 1):
        node.publisher("/img", "image").loan_image(3, 3, "no-such-encoding")
    with raises(ferry.InvalidArgumentError, 1):
        ferry.Node(domain=5000)


def test_type_mismatch(node):
    keep = node.publisher("/a", "type/One")  # noqa: F841
    with raises(ferry.TypeMismatchError, 5):
        node.subscribe("/a", "type/Two")
    with raises(ferry.TypeMismatchError, 5):
        node.publisher("/b", "my/Blob").loan_image(2, 2)


def test_timeout(node):
    sub = node.subscribe("/quiet", "my/Blob")
    with raises(ferry.TimeoutError, 4):
        sub.take(timeout=0.05)
    with raises(ferry.TimeoutError, 4):
        sub.wait_publishers(1, timeout=0.05)
    assert sub.wait(0.01) is False
    with raises(ferry.TimeoutError, 4):
        node.subscribe("/nobody_here", timeout=0)  # no endpoint to take the type from


def test_too_big_and_pool(node):
    pub = node.publisher("/big", "my/Blob", max_sample_size=4096, max_chunks=2)
    with raises(ferry.TooBigError, 6):
        pub.loan(8192)
    a, b = pub.loan(100), pub.loan(100)
    with raises(ferry.PoolExhaustedError, 7):
        pub.loan(100)
    a.release()
    b.release()


def test_state_after_release_and_publish(node):
    pub = node.publisher("/s", "my/Blob")
    sub = node.subscribe("/s")
    connect(pub, sub)
    loan = pub.loan(16)
    pub.publish(loan)
    with raises(ferry.StateError, 8):
        pub.publish(loan)
    with raises(ferry.StateError, 8):
        loan.release()
    with pytest.raises(BufferError):
        memoryview(loan)
    s = sub.take(timeout=2)
    s.release()
    assert s.released
    with raises(ferry.StateError, 8):
        s.sequence
    with raises(ferry.StateError, 8):
        memoryview(s)  # np.asarray(s) would turn the refusal into an object array
    with raises(ferry.StateError, 8):
        s.release()
    with raises(ferry.StateError, 8):
        s.__dlpack__()


def test_foreign(node):
    a = node.publisher("/f1", "my/Blob")
    b = node.publisher("/f2", "my/Blob")
    loan = a.loan(8)
    with raises(ferry.ForeignError, 18):
        b.publish(loan)


def test_closed(node):
    pub = node.publisher("/c", "my/Blob")
    sub = node.subscribe("/c")
    pub.close()
    sub.close()
    assert pub.closed and sub.closed
    with raises(ferry.ClosedError, 9):
        pub.loan(8)
    with raises(ferry.ClosedError, 9):
        sub.take(timeout=0)
    with raises(ferry.ClosedError, 9):
        sub.fileno()
    node.close()
    with raises(ferry.ClosedError, 9):
        node.publisher("/c", "my/Blob")


def test_busy_only_while_owned(node):
    """BusyError is about ownership: a subscriber read through a Sync refuses close(); arrays
    never make a close() refuse (test_close.py checks what they keep alive)."""
    pub = node.publisher("/b", "image")
    sub = node.subscribe("/b")
    other = node.subscribe("/b2", "image")
    sync = ferry.Sync([sub, other])
    with raises(ferry.BusyError, 10):
        sub.close()
    sync.close()
    sub.close()
    pub.close()
    assert sub.closed and pub.closed


def test_limit(node):
    pub = node.publisher("/l", "my/Blob")
    sub = node.subscribe("/l", max_held=1, depth=4)
    connect(pub, sub)
    pub.publish_copy(b"a")
    pub.publish_copy(b"b")
    first = sub.take(timeout=2)
    sub.wait(2)
    with raises(ferry.LimitError, 11):
        sub.take(timeout=0)
    first.release()
    assert bytes(sub.take(timeout=2)) == b"b"


def test_protocol(node):
    pub = node.publisher("/p", "image")
    sub = node.subscribe("/p")
    connect(pub, sub)
    pub.publish_copy(b"not an image header" * 10)
    with raises(ferry.ProtocolError, 14):
        sub.take(timeout=2)
    assert sub.stats()["held"] == 0


def test_permission(tmp_path):
    if os.geteuid() == 0:
        # root passes every mode check but ownership: a root dir owned by another user.
        root = tmp_path / "other"
        root.mkdir(mode=0o700)
        os.chown(root, 12345, 12345)
    else:
        root = tmp_path / "open"
        root.mkdir()
        os.chmod(root, 0o777)
    with raises(ferry.PermissionError, 15):
        ferry.Node(dir=str(root))


def test_sys_error(tmp_path):
    with pytest.raises(ferry.SysError) as info:
        ferry.Node(dir=str(tmp_path / "missing" / "root"))
    assert info.value.code == 13 and info.value.errno == 2  # ENOENT: the root's parent
