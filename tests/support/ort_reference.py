#!/usr/bin/env python3
"""Writes ONNX Runtime's output for each benchmark model's fixed input: DIR/NAME.ort_out.f32.

Usage: ort_reference.py DIR NAME...   (DIR as written by ../shared/bench/models.py)
The reference is ONNX Runtime on CPU with all graph optimisations, one thread — the same settings
as ../shared/bench/ort_bench.py, without the timing.
"""
import os
import sys

import numpy as np
import onnxruntime as ort

d = sys.argv[1]
for name in sys.argv[2:]:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(os.path.join(d, f"{name}.onnx"), so, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    x = np.fromfile(os.path.join(d, f"{name}.input.f32"), dtype="<f4").reshape(inp.shape)
    out = sess.run(None, {inp.name: x})[0]
    out.astype("<f4").tofile(os.path.join(d, f"{name}.ort_out.f32"))
    print(f"{name}: output {list(out.shape)} written")
