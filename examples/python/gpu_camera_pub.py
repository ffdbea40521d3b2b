#!/usr/bin/env python3
"""A camera process in Python that publishes device frames: PyTorch writes each frame straight
into device memory loaned by ferry (no copy), and the frame is published without the CPU
waiting for the GPU. gpu_consumer.py, in another process, takes them into PyTorch.

    gpu_camera_pub.py [TOPIC] [COUNT]

The domain is FERRY_DIR / FERRY_DOMAIN's. Exit 77 (with the reason on stderr) without the GPU
module, a CUDA device or PyTorch with CUDA.
"""

import sys
import time

import ferry

WIDTH, HEIGHT = 1280, 720


def main():
    topic = sys.argv[1] if len(sys.argv) > 1 else "/camera/gpu"
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    if not ferry.HAVE_GPU or ferry.gpu_device_count() == 0:
        print("gpu_camera_pub: no GPU module or no CUDA device", file=sys.stderr)
        return 77
    try:
        import torch
    except ImportError:
        print("gpu_camera_pub: PyTorch is not installed", file=sys.stderr)
        return 77
    if not torch.cuda.is_available():
        print("gpu_camera_pub: PyTorch has no CUDA device", file=sys.stderr)
        return 77

    stream = torch.cuda.Stream()
    with ferry.Node(name="gpu_camera_pub") as node:
        # admit_blocking: the consumer asks for every frame (overflow="block"); a full queue
        # waits up to 10 s for it, its CUDA start-up included (the default is 100 ms).
        pub = node.publisher(topic, "tensor", admit_blocking=True, block_timeout_ns=10**10)
        with ferry.GpuPublisher(pub, device=0) as gpub:
            pub.wait_subscribers(1, timeout=10)
            for k in range(count):
                loan = gpub.loan_tensor((HEIGHT, WIDTH, 3), "uint8", stream=stream)
                loan.stamp = time.time_ns()
                loan.frame_id = "camera"
                with torch.cuda.stream(stream):
                    img = torch.from_dlpack(loan)  # (720, 1280, 3) uint8 on cuda:0, no copy
                    img[:] = k % 256  # the camera: frame k is all k
                del img  # the loan is dead once published
                gpub.publish(loan, stream=stream)  # readers see it once the fill is done
                time.sleep(1 / 30)
            # The consumer's frames map this process's device memory: stay until it is done.
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                st = pub.stats()
                if st["subscribers"] == 0 and st["chunks_in_use"] == 0:
                    break
                pub.poll(0.01)
            print("gpu_camera_pub: published %d frames, %d device allocations" % (
                count, gpub.stats()["exports"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
