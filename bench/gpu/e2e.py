#!/usr/bin/env python3
"""A camera process to a PyTorch model in another process, end to end, every way a frame can
travel (`ferry bench gpu --part e2e` runs this; so can a user: it needs ferry's Python package
built with the GPU module, PyTorch with CUDA and a GPU).

A camera publishes 1920x1080 rgb8 frames at 30 Hz, writing every byte; a consumer turns each
into the model's input on the GPU (uint8 HWC -> fp16 CHW, scaled, resized to 224x224) and runs
the model (torchvision's resnet18 in fp16 where torchvision is there, else a stand-in of five
convolutions, said in the table). Latency runs from the camera's stamp (CLOCK_MONOTONIC, just
before the publish call) to the model's output being ready; the model's own time (CUDA events
around its forward pass) is taken out, so "transport" is everything else: the hop, the copy to
the GPU if any, and the preprocessing kernel that reads the frame.

Variants:
  socket           the frame's bytes over a Unix stream socket, then torch's pageable .cuda()
  host-copy        a ferry host sample (zero copy between processes), torch.from_numpy().cuda()
  host-registered  Sample.cuda() (the chunk's pages registered once), copy_to a device tensor
  host-mapped      Sample.cuda(), the preprocessing kernel reads the mapped pages in place
  device-kernel    a device frame (ferry.GpuPublisher), read in place by the kernel
  device-copy      a device frame, cloned into the consumer's own memory first
  device-take      (with --variants only) device frames taken and given back with no tensor:
                   the binding alone, telling its holds from PyTorch's

With --mps the whole set runs again under an MPS daemon started for the run. The camera's cost
per frame is printed too: its CPU per frame and the time of its loan and publish calls.

usage: e2e.py [--frames N] [--variants a,b] [--mps] [--csv FILE]
"""
import argparse
import gc
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
import weakref

W, H, HZ = 1920, 1080, 30
NBYTES = W * H * 3
WARMUP = 15
VARIANTS = ["socket", "host-copy", "host-registered", "host-mapped", "device-kernel",
            "device-copy"]


def pct(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


# --- the camera ---------------------------------------------------------------------------

def camera(variant, frames, where):
    import numpy as np
    period = 1.0 / HZ
    loan_s, pub_s = [], []
    if variant == "socket":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        for _ in range(600):
            try:
                s.connect(where)
                break
            except OSError:
                time.sleep(0.05)
        buf = bytearray(NBYTES)
        arr = np.frombuffer(buf, dtype=np.uint8)
        cpu0, nxt = time.process_time(), time.monotonic()
        for k in range(1, frames + 1):
            arr[:] = k & 0xff                      # the camera writes its frame
            t0 = time.monotonic_ns()
            s.sendall(struct.pack("<qI", t0, k))
            s.sendall(buf)
            pub_s.append(time.monotonic_ns() - t0)
            nxt += period
            time.sleep(max(0.0, nxt - time.monotonic()))
        cpu = time.process_time() - cpu0
        s.close()
    else:
        import ferry
        with ferry.Node() as node:
            if variant.startswith("device"):
                import torch
                stream = torch.cuda.Stream()
                pub = node.publisher(where, "tensor", admit_blocking=True, block_timeout_ns=10**10)
                gpub = ferry.GpuPublisher(pub, device=0)
                pub.wait_subscribers(1, timeout=60)
                cpu0, nxt = time.process_time(), time.monotonic()
                for k in range(1, frames + 1):
                    t0 = time.monotonic_ns()
                    loan = gpub.loan_tensor((H, W, 3), "uint8", stream=stream)
                    t1 = time.monotonic_ns()
                    with torch.cuda.stream(stream):
                        torch.from_dlpack(loan).fill_(k & 0xff)   # the camera's kernel
                    loan.frame_id = str(k)
                    t2 = time.monotonic_ns()
                    loan.stamp = t2
                    gpub.publish(loan, stream=stream)
                    t3 = time.monotonic_ns()
                    loan_s.append(t1 - t0)
                    pub_s.append(t3 - t2)
                    nxt += period
                    time.sleep(max(0.0, nxt - time.monotonic()))
                cpu = time.process_time() - cpu0
                while pub.stats()["subscribers"] or pub.stats()["chunks_in_use"]:
                    pub.poll(0.01)
                gpub.close()
            else:
                pub = node.publisher(where, "image", max_chunks=8)
                pub.wait_subscribers(1, timeout=60)
                cpu0, nxt = time.process_time(), time.monotonic()
                for k in range(1, frames + 1):
                    t0 = time.monotonic_ns()
                    loan = pub.loan_image(W, H, "rgb8")
                    t1 = time.monotonic_ns()
                    np.asarray(loan)[:] = k & 0xff
                    loan.frame_id = str(k)
                    t2 = time.monotonic_ns()
                    loan.stamp = t2
                    pub.publish(loan)
                    t3 = time.monotonic_ns()
                    loan_s.append(t1 - t0)
                    pub_s.append(t3 - t2)
                    nxt += period
                    time.sleep(max(0.0, nxt - time.monotonic()))
                cpu = time.process_time() - cpu0
                while pub.stats()["subscribers"] and pub.stats()["chunks_in_use"]:
                    pub.poll(0.01)
    print(json.dumps({"role": "camera", "cpu_us": cpu * 1e6 / frames,
                      "loan_us": pct(loan_s, 0.5) / 1e3 if loan_s else 0.0,
                      "publish_us": pct(pub_s, 0.5) / 1e3}), flush=True)


# --- the consumer ---------------------------------------------------------------------------

def make_model(torch):
    try:
        import torchvision
        m, name = torchvision.models.resnet18(weights=None), "resnet18 fp16"
    except Exception:  # noqa: BLE001 - any import failure: the stand-in
        c = torch.nn
        m = c.Sequential(c.Conv2d(3, 64, 7, 2, 3), c.ReLU(), c.Conv2d(64, 128, 3, 2, 1), c.ReLU(),
                         c.Conv2d(128, 256, 3, 2, 1), c.ReLU(), c.Conv2d(256, 512, 3, 2, 1),
                         c.ReLU(), c.AdaptiveAvgPool2d(1), c.Flatten(), c.Linear(512, 1000))
        name = "5-conv stand-in fp16 (no torchvision)"
    return m.cuda().half().eval(), name


def stamp_ns(st):
    if isinstance(st, int):
        return st
    if hasattr(st, "sec"):
        return st.sec * 10**9 + st.nanosec
    return st[0] * 10**9 + st[1]


def consumer(variant, frames, where):
    import torch
    import torch.nn.functional as F
    torch.backends.cudnn.benchmark = True
    held = 0
    model, name = make_model(torch)
    stream = torch.cuda.Stream()
    dst = torch.empty(NBYTES, dtype=torch.uint8, device="cuda")
    evp, ev0, ev1 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    pre_ms = []

    def run(x):
        """x: (H, W, 3) uint8 on the GPU, usable on `stream`: preprocess, model; returns the
        model's ms (the preprocessing's go to pre_ms)."""
        with torch.cuda.stream(stream), torch.no_grad():
            evp.record(stream)
            inp = x.permute(2, 0, 1).unsqueeze(0).half().div_(255)
            inp = F.interpolate(inp, size=(224, 224), mode="bilinear", align_corners=False)
            ev0.record(stream)
            model(inp)
            ev1.record(stream)
        stream.synchronize()
        pre_ms.append(evp.elapsed_time(ev0))
        return ev0.elapsed_time(ev1)

    for _ in range(5):                              # CUDA, cuDNN and the model warmed up
        run(dst.view(H, W, 3))
    del pre_ms[:]
    diag = os.environ.get("E2E_DIAG") == "1"
    lat, model_ms, transport, last, lost, got = [], [], [], 0, 0, 0

    def account(k, sent, ms):
        nonlocal last, lost, got
        done = time.monotonic_ns()
        got += 1
        lost += max(0, k - last - 1)
        last = max(last, k)
        if k > WARMUP:
            lat.append((done - sent) / 1e3)
            model_ms.append(ms)
            transport.append((done - sent) / 1e3 - ms * 1e3)

    if variant == "socket":
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(where)
        srv.listen(1)
        print(json.dumps({"role": "ready"}), flush=True)
        conn, _ = srv.accept()
        buf = bytearray(NBYTES)
        head = bytearray(12)
        while got < frames:
            if conn.recv_into(head, 12, socket.MSG_WAITALL) != 12:
                break
            sent, k = struct.unpack("<qI", head)
            view, n = memoryview(buf), 0
            while n < NBYTES:
                r = conn.recv_into(view[n:], NBYTES - n)
                if r == 0:
                    break
                n += r
            x = torch.frombuffer(buf, dtype=torch.uint8).cuda().view(H, W, 3)
            account(k, sent, run(x))
        conn.close()
    else:
        import ferry
        with ferry.Node() as node:
            if variant.startswith("device"):
                sub = node.subscribe(where, "tensor", depth=2)
                gsub = ferry.GpuSubscriber(sub, device=0)
                print(json.dumps({"role": "ready"}), flush=True)
                while got < frames:
                    try:
                        frame = gsub.take(timeout=10.0, stream=stream)
                    except ferry.TimeoutError:
                        break
                    except ferry.LimitError as e:       # frames not given back: say which
                        sys.stderr.write("take %d: %s; stats %s\n" % (got + 1, e, gsub.stats()))
                        break
                    k, sent = int(frame.frame_id), stamp_ns(frame.stamp)
                    if variant == "device-take":        # the binding alone: no tensor at all
                        frame.release()
                        account(k, sent, 0.0)
                        continue
                    x = torch.from_dlpack(frame)
                    if variant == "device-copy":
                        with torch.cuda.stream(stream):
                            x = x.clone()
                    wr = weakref.ref(x) if diag else None
                    ms = run(x)
                    del x
                    frame.release()
                    account(k, sent, ms)
                    if diag:
                        alive = wr() is not None
                        refs = [type(r).__name__ for r in gc.get_referrers(wr())] if alive else []
                        gc.collect()
                        sys.stderr.write("frame %d: stats %s; tensor alive after del %s (referrers "
                                         "%s), after gc %s, frames then %d\n"
                                         % (k, gsub.stats(), alive, refs, wr() is not None,
                                            gsub.stats()["frames"]))
                held = gsub.stats()["frames"]
                try:
                    gsub.close()
                except ferry.BusyError:
                    held = -held - 1 if held else -1   # refused: said in the result
            else:
                sub = node.subscribe(where, "image", depth=2)
                print(json.dumps({"role": "ready"}), flush=True)
                while got < frames:
                    try:
                        sample = sub.take(timeout=10.0)
                    except ferry.TimeoutError:
                        break
                    with sample:
                        k, sent = int(sample.frame_id), stamp_ns(sample.stamp)
                        if variant == "host-copy":
                            ms = run(torch.from_numpy(sample.numpy()).cuda())
                        else:
                            with sample.cuda() as view:
                                if variant == "host-registered":
                                    view.copy_to(dst, stream=stream)
                                    ms = run(dst.view(H, W, 3))
                                else:
                                    x = torch.from_dlpack(view)
                                    ms = run(x)
                                    del x
                    account(k, sent, ms)
    lost += max(0, frames - last)
    print(json.dumps({"role": "consumer", "model": name, "received": got, "lost": lost,
                      "p50_us": pct(lat, 0.5), "p99_us": pct(lat, 0.99),
                      "transport_p50_us": pct(transport, 0.5),
                      "transport_p99_us": pct(transport, 0.99),
                      "model_ms": pct(model_ms, 0.5), "pre_ms": pct(pre_ms, 0.5),
                      "held": held}), flush=True)


# --- the run --------------------------------------------------------------------------------

def one(variant, frames, tmp, env):
    where = (os.path.join(tmp, "e2e.sock") if variant == "socket"
             else "/e2e/" + variant.replace("-", "_"))
    if variant == "socket" and os.path.exists(where):
        os.unlink(where)
    me = [sys.executable, os.path.abspath(__file__)]
    # E2E_CONSUMER_WRAP: a command the consumer runs under (compute-sanitizer --tool memcheck).
    wrap = os.environ.get("E2E_CONSUMER_WRAP", "").split()
    cons = subprocess.Popen(wrap + me + ["--role", "consumer", "--variant", variant, "--frames",
                                  str(frames), "--where", where],
                            stdout=subprocess.PIPE, text=True, env=env)
    line = cons.stdout.readline()                    # the consumer is ready: CUDA set up
    cam = subprocess.run(me + ["--role", "camera", "--variant", variant, "--frames", str(frames),
                               "--where", where], capture_output=True, text=True, env=env,
                         timeout=frames / HZ + 120)
    out, _ = cons.communicate(timeout=600)
    try:
        c = json.loads(out.strip().splitlines()[-1])
        k = json.loads(cam.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        sys.stderr.write("%s: no result (consumer said %r, camera %r %r)\n"
                         % (variant, line + out, cam.stdout, cam.stderr[-2000:]))
        return None
    c.update(k)
    c["variant"] = variant
    return c


def mps_start(tmp):
    env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=os.path.join(tmp, "mps-pipe"),
               CUDA_MPS_LOG_DIRECTORY=os.path.join(tmp, "mps-log"))
    os.makedirs(env["CUDA_MPS_PIPE_DIRECTORY"], exist_ok=True)
    os.makedirs(env["CUDA_MPS_LOG_DIRECTORY"], exist_ok=True)
    try:
        subprocess.run(["nvidia-cuda-mps-control", "-d"], env=env, check=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        sys.stderr.write("MPS: cannot start the daemon (%s)\n" % e)
        return None
    return env


def mps_stop(env):
    subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", text=True, env=env, timeout=30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--role")
    ap.add_argument("--variant")
    ap.add_argument("--where")
    ap.add_argument("--frames", type=int, default=150)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--mps", action="store_true")
    ap.add_argument("--csv")
    a = ap.parse_args()
    if a.role == "camera":
        return camera(a.variant, a.frames, a.where)
    if a.role == "consumer":
        return consumer(a.variant, a.frames, a.where)
    rows = []
    with tempfile.TemporaryDirectory(prefix="ferry-e2e-") as tmp:
        env = dict(os.environ, FERRY_DIR=os.path.join(tmp, "ferry"))
        sets = [("off", env)]
        if a.mps:
            menv = mps_start(tmp)
            if menv is not None:
                menv["FERRY_DIR"] = env["FERRY_DIR"]
        for mps, e in sets + ([("on", menv)] if a.mps and menv is not None else []):
            for v in a.variants.split(","):
                r = one(v, a.frames, tmp, e)
                if r is not None:
                    r["mps"] = mps
                    rows.append(r)
        if a.mps and menv is not None:
            mps_stop(menv)
    if not rows:
        return 1
    print("camera 1920x1080 rgb8 at %d Hz, %d frames (first %d left out); model: %s"
          % (HZ, a.frames, WARMUP, rows[0]["model"]))
    hdr = ("%-16s %4s %5s %5s %10s %10s %7s %10s %10s %9s %9s %9s %9s %5s"
           % ("variant", "mps", "recv", "lost", "transp_p50", "transp_p99", "pre_ms",
              "total_p50", "total_p99", "model_ms", "cam_cpu", "cam_loan", "cam_pub", "held"))
    print(hdr)
    for r in rows:
        print("%-16s %4s %5d %5d %10.0f %10.0f %7.2f %10.0f %10.0f %9.2f %9.0f %9.1f %9.1f %5d"
              % (r["variant"], r["mps"], r["received"], r["lost"], r["transport_p50_us"],
                 r["transport_p99_us"], r["pre_ms"], r["p50_us"], r["p99_us"], r["model_ms"],
                 r["cpu_us"], r["loan_us"], r["publish_us"], r["held"]))
    print("(microseconds but *_ms; transport = total - the model's own time: the hop, any copy "
          "to the GPU and the preprocessing kernel (pre_ms, its own GPU time: for host-mapped, "
          "where the frame crosses the bus); cam_*: the camera's CPU per frame and its loan and "
          "publish calls, p50; held: device frames not given back at the end, negative when "
          "close() was refused)")
    if a.csv:
        with open(a.csv, "w") as f:
            f.write("variant,mps,model,frames,received,lost,transport_p50_us,transport_p99_us,"
                    "preprocess_ms,total_p50_us,total_p99_us,model_ms,camera_cpu_us,"
                    "camera_loan_us,camera_publish_us,held\n")
            for r in rows:
                f.write("%s,%s,%s,%d,%d,%d,%.1f,%.1f,%.3f,%.1f,%.1f,%.3f,%.1f,%.1f,%.1f,%d\n"
                        % (r["variant"], r["mps"], r["model"], a.frames, r["received"],
                           r["lost"], r["transport_p50_us"], r["transport_p99_us"], r["pre_ms"],
                           r["p50_us"], r["p99_us"], r["model_ms"], r["cpu_us"], r["loan_us"],
                           r["publish_us"], r["held"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
