#!/usr/bin/env python3
"""Writes mlp.safetensors (w1 [784,32], b1 [32], w2 [32,10], b2 [10]; fixed-seed random float32).

Needs only numpy; the safetensors layout (8-byte header length, JSON header, raw data) is written
directly. The output is checked in.
"""
import json
import os
import struct

import numpy as np

rng = np.random.default_rng(11)
tensors = {
    "w1": (rng.standard_normal((784, 32)) * 0.05).astype("<f4"),
    "b1": (rng.standard_normal(32) * 0.01).astype("<f4"),
    "w2": (rng.standard_normal((32, 10)) * 0.2).astype("<f4"),
    "b2": (rng.standard_normal(10) * 0.01).astype("<f4"),
}
header, blobs, off = {}, [], 0
for name, t in tensors.items():
    b = t.tobytes()
    header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
    blobs.append(b)
    off += len(b)
h = json.dumps(header, separators=(",", ":")).encode()
h += b" " * ((8 - len(h) % 8) % 8)
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "mlp.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
print("wrote mlp.safetensors")
