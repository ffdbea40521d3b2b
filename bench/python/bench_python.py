#!/usr/bin/env python3
"""Python overhead and latency of ferry at 720p (1280x720 rgb8), against C.

Measures, in a private domain directory:
  take+release   Python: take() + np.asarray() + release() of a queued 720p image, in one
                 process (the subscriber's own cost per frame, no waiting), and the same loop
                 for loan_image() + np.asarray() + publish() on the publisher side;
  latency        publish to take of 720p frames at 30 Hz between two processes:
                 Python publisher -> Python subscriber (blocked in take(), GIL released),
                 and `ferry pub --image` -> `ferry echo` (C on both ends) for comparison.

    PYTHONPATH=build/python python3 bench/python/bench_python.py --cli build/ferry \\
        [--frames 150] [--csv bench/results/python.csv]
"""

from __future__ import annotations

import argparse
import csv
import multiprocessing
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import ferry

W, H = 1280, 720


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def connect(pub: ferry.Publisher, sub: ferry.Subscriber) -> None:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        pub.poll(0.001)
        if pub.stats()["subscribers"] and sub.stats()["publishers"]:
            return
        sub.wait(0.001)
    raise RuntimeError("no connection")


def overhead(where: tuple[str, int], n: int) -> dict[str, list[float]]:
    take_us, pub_us = [], []
    with ferry.Node(dir=where[0], domain=where[1]) as node:
        pub = node.publisher("/bench/overhead", "image", max_chunks=8)
        sub = node.subscribe("/bench/overhead", depth=2)
        connect(pub, sub)
        pub.reserve(W * H * 3 + 256, 4)
        for _ in range(n):
            t0 = time.perf_counter_ns()
            loan = pub.loan_image(W, H, "rgb8")
            a = np.asarray(loan)
            a[0, 0, 0] = 1  # one pixel: the cost measured is ferry's, not the fill's
            del a
            pub.publish(loan)
            t1 = time.perf_counter_ns()
            sub.wait(1.0)
            t2 = time.perf_counter_ns()
            s = sub.take(timeout=0)
            b = np.asarray(s)
            _ = b[0, 0, 0]
            del b
            s.release()
            t3 = time.perf_counter_ns()
            pub_us.append((t1 - t0) / 1e3)
            take_us.append((t3 - t2) / 1e3)
    return {"publish (loan+asarray+publish)": pub_us, "take (take+asarray+release)": take_us}


def py_publisher(where: tuple[str, int], frames: int, rate: float) -> None:
    with ferry.Node(dir=where[0], domain=where[1], name="bench_pub") as node:
        pub = node.publisher("/bench/latency", "image", max_chunks=8)
        pub.wait_subscribers(1, timeout=10)
        pub.reserve(W * H * 3 + 256, 4)
        period = 1.0 / rate
        start = time.monotonic()
        for i in range(frames):
            while time.monotonic() < start + i * period:
                pub.poll(min(0.005, max(0.0, start + i * period - time.monotonic())))
            loan = pub.loan_image(W, H, "rgb8")
            np.asarray(loan)[0, 0, 0] = i & 0xFF
            pub.publish(loan)
        deadline = time.monotonic() + 5
        while pub.stats()["subscribers"] and time.monotonic() < deadline:
            pub.poll(0.01)


def py_latency(where: tuple[str, int], frames: int, rate: float) -> list[float]:
    lat = []
    with ferry.Node(dir=where[0], domain=where[1]) as node:
        sub = node.subscribe("/bench/latency", "image", depth=4)
        child = multiprocessing.get_context("fork").Process(
            target=py_publisher, args=(where, frames, rate))
        child.start()
        for _ in range(frames):
            with sub.take(timeout=10) as s:
                lat.append((ferry.now() - s.publish_time) / 1e3)
                _ = np.asarray(s)[0, 0, 0]
        sub.close()
        child.join(10)
    return lat[5:]  # the first frames pay for mapping the pool


def c_latency(cli: str, where: tuple[str, int], frames: int, rate: float) -> list[float]:
    args = ["--dir", where[0], "--domain", str(where[1])]
    echo = subprocess.Popen([cli, "echo", "/bench/clat", "--type", "sensor_msgs/Image",
                             "--count", str(frames), "--timeout", "30"] + args,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    time.sleep(0.2)
    pub = subprocess.Popen([cli, "pub", "/bench/clat", "--image", f"{W}x{H}", "--rate", str(rate),
                            "--count", str(frames), "--wait-subscribers", "1"] + args,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out, _ = echo.communicate(timeout=60)
    pub.wait(10)
    lat = [float(m.group(1)) for m in re.finditer(r"latency_us=([0-9.]+)", out)]
    return lat[5:]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", default=os.path.join("build", "ferry"), help="the ferry command")
    ap.add_argument("--frames", type=int, default=150, help="frames of each latency run")
    ap.add_argument("--rate", type=float, default=30.0, help="frames per second")
    ap.add_argument("--overhead-frames", type=int, default=2000)
    ap.add_argument("--csv", default="bench_python.csv", help="where to write the rows")
    a = ap.parse_args()

    root = tempfile.mkdtemp(prefix="ferry-bench-py-")
    os.chmod(root, 0o700)
    rows = []
    for name, values in overhead((root, 1), a.overhead_frames).items():
        rows.append(("python " + name, "us", values))
    rows.append(("latency python -> python, 720p 30 Hz", "us", py_latency((root, 2), a.frames,
                                                                           a.rate)))
    if os.path.exists(a.cli):
        rows.append(("latency C -> C (ferry pub/echo), 720p 30 Hz", "us",
                     c_latency(a.cli, (root, 3), a.frames, a.rate)))
    print(f"{'measure':48} {'n':>6} {'p50':>9} {'p90':>9} {'p99':>9} {'mean':>9}")
    with open(a.csv, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["measure", "unit", "n", "p50", "p90", "p99", "mean"])
        for name, unit, v in rows:
            if not v:
                print(f"{name:48} no data")
                continue
            stats = [pct(v, 0.5), pct(v, 0.9), pct(v, 0.99), statistics.fmean(v)]
            print(f"{name:48} {len(v):6d} " + " ".join(f"{x:9.1f}" for x in stats) + f" {unit}")
            w.writerow([name, unit, len(v)] + [f"{x:.2f}" for x in stats])
    print(f"CSV: {a.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
