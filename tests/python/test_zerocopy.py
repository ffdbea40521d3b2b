"""Nothing is copied: arrays point into the publisher's memfd, mapped read-only by subscribers."""

import os

import numpy as np

from conftest import connect


def mapping_of(address):
    with open("/proc/self/maps") as maps:
        for line in maps:
            parts = line.split()
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if lo <= address < hi:
                return parts[1], " ".join(parts[5:])
    return None, None


def test_arrays_point_into_the_segment(node):
    pub = node.publisher("/cam", "image")
    sub = node.subscribe("/cam")
    connect(pub, sub)
    loan = pub.loan_image(1280, 720, "rgb8")
    a = np.asarray(loan)
    perms, name = mapping_of(a.__array_interface__["data"][0])
    assert "memfd:ferry-data" in name and perms.startswith("rw"), (perms, name)
    a[...] = 77
    pub.publish(loan)
    with sub.take(timeout=2) as s:
        b = np.asarray(s)
        address = b.__array_interface__["data"][0]
        perms, name = mapping_of(address)
        assert "memfd:ferry-data" in name, name
        assert perms.startswith("r-"), perms  # the subscriber's own read-only mapping
        assert b[719, 1279, 2] == 77
        # The same memory through a second export: same address, no copy.
        assert np.asarray(s).__array_interface__["data"][0] == address
        del b
    assert pub.stats()["bytes_copied"] == 0
    assert sub.stats()["bytes_copied"] == 0


def test_dlpack_points_into_the_segment(node):
    pub = node.publisher("/t", "tensor")
    sub = node.subscribe("/t")
    connect(pub, sub)
    loan = pub.loan_tensor((16, 16), "float32")
    np.asarray(loan)[...] = 1.5
    pub.publish(loan)
    with sub.take(timeout=2) as s:
        x = np.from_dlpack(s)
        assert x.__array_interface__["data"][0] == np.asarray(s).__array_interface__["data"][0]
        assert "memfd:ferry-data" in mapping_of(x.__array_interface__["data"][0])[1]
        assert float(x.sum()) == 1.5 * 256
        del x


def test_stats_say_how_waits_spin(node):
    pub = node.publisher("/spin", "tensor")
    sub = node.subscribe("/spin")
    connect(pub, sub)
    several = len(os.sched_getaffinity(0)) > 1
    for spin in (pub.stats()["spin"], sub.stats()["spin"]):
        assert set(spin) == {"mode", "cpu", "budget_ns", "peers_elsewhere", "peers_same_cpu",
                             "spins", "spins_found", "paced_spins", "paced_found"}
        if several:
            # Threads that may run on several CPUs spin, whatever the peer says.
            assert (spin["mode"], spin["cpu"], spin["budget_ns"]) == ("spin", -1, 20000), spin
        else:
            assert spin["mode"] in ("yield", "spin"), spin
            assert spin["cpu"] in os.sched_getaffinity(0), spin
