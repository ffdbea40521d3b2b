#!/usr/bin/env python3
"""Writes the 1280x720 RGB picture of the recorder's compression rows (bench/README.md): smooth
shading, edges between tiles, and sensor-like noise of a few levels, as a binary PPM that
`ferry pub --from` publishes.

    python3 bench/record/scene.py /tmp/ferry-bench-scene.ppm
"""
import random
import sys

random.seed(7)
w, h = 1280, 720
pixels = bytearray()
for y in range(h):
    for x in range(w):
        r = (x * 255 // w + (40 if (x // 160 + y // 120) % 2 else 0)) % 256
        g = (y * 255 // h) ^ ((x >> 5) & 16)
        b = (128 + ((x - 640) * (y - 360)) // 4000) % 256
        n = random.randint(-3, 3)
        pixels += bytes(((r + n) % 256, (g + n) % 256, (b + n) % 256))
with open(sys.argv[1], "wb") as f:
    f.write(b"P6\n%d %d\n255\n" % (w, h) + pixels)
