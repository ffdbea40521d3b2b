#!/usr/bin/env python3
"""Takes gpu_camera_pub.py's device frames into PyTorch without a copy and checks them on the
GPU: every pixel of frame k is k.

    gpu_consumer.py [TOPIC] [COUNT]

The domain is FERRY_DIR / FERRY_DOMAIN's. Exit 77 (with the reason on stderr) without the GPU
module, a CUDA device or PyTorch with CUDA.
"""

import sys

import ferry


def main():
    topic = sys.argv[1] if len(sys.argv) > 1 else "/camera/gpu"
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    if not ferry.HAVE_GPU or ferry.gpu_device_count() == 0:
        print("gpu_consumer: no GPU module or no CUDA device", file=sys.stderr)
        return 77
    try:
        import torch
    except ImportError:
        print("gpu_consumer: PyTorch is not installed", file=sys.stderr)
        return 77
    if not torch.cuda.is_available():
        print("gpu_consumer: PyTorch has no CUDA device", file=sys.stderr)
        return 77

    stream = torch.cuda.Stream()
    good = 0
    with ferry.Node(name="gpu_consumer") as node:
        sub = node.subscribe(topic, "tensor", overflow="block")
        with ferry.GpuSubscriber(sub, device=0) as gsub:
            for k in range(count):
                with gsub.take(timeout=10, stream=stream) as frame:  # ready for stream
                    with torch.cuda.stream(stream):
                        img = torch.from_dlpack(frame)  # the publisher's memory, mapped here
                        lo, hi = int(img.min()), int(img.max())
                    copied = img.data_ptr() != frame.data_ptr
                    what = "%s %s on cuda:%d" % ("x".join(map(str, frame.shape)), frame.dtype,
                                                 frame.device)
                    del img
                ok = lo == hi == k % 256 and not copied
                good += ok
                print("frame %d: %s, every pixel %d%s" % (
                    k, what, lo,
                    ", zero copy" if ok else " MISMATCH (%d..%d, copied %s)" % (lo, hi, copied)))
    print("gpu_consumer: %d of %d frames right" % (good, count))
    return 0 if good == count else 1


if __name__ == "__main__":
    sys.exit(main())
