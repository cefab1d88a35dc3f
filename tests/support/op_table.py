#!/usr/bin/env python3
"""Every operator family of the conformance scope on a representative shape: a single-node model
each, timed with `collage bench --profile --json` (untuned: no cost cache, what a new user gets)
and with ONNX Runtime (all graph optimisations), both one thread, same machine, same run. Writes
the table (op, shape, ours, ONNX Runtime's, ratio, roofline fraction) to docs/OP_SPEED.md and
prints it.

    cargo build --release -p collage-build
    .venv/bin/python tests/support/op_table.py [OP...]      # default: every row

The roofline fraction is the time-weighted mean over the model's kernels of each kernel's
fraction of the roof that bounds it (`collage bench --profile`: compute or memory, measured on
this machine). Weights and index inputs are initialisers (as in exported models); the data
inputs are graph inputs.
"""
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

COLLAGE = "target/release/collage"
SECONDS = os.environ.get("SECONDS_PER_RUN", "0.5")
rng = np.random.default_rng(7)

A = [1, 64, 56, 56]      # an activation: 200k elements
SEQ = [1, 128, 768]      # a transformer activation
F = np.float32


def w(shape, scale=0.05, dtype=F):
    return (rng.standard_normal(shape) * scale).astype(dtype)


# name, op type, [(input name, shape or initialiser array)], attributes, opset
def unary(op, **attrs):
    return (op, op, [("x", A)], attrs, 18)


def binary(op):
    return (op, op, [("x", A), ("y", A)], {}, 18)


ROWS = [unary(op) for op in [
    "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Abs", "Neg", "Reciprocal", "Erf", "Floor",
    "Ceil", "Round", "Sign", "Sin", "Cos", "Softplus", "Softsign", "HardSwish", "Mish"]]
ROWS += [
    unary("LeakyRelu", alpha=0.1), unary("Elu"), unary("Selu"), unary("Celu"),
    unary("HardSigmoid"), unary("ThresholdedRelu"),
    ("Gelu", "Gelu", [("x", SEQ)], {}, 20),
    ("Clip", "Clip", [("x", A), ("lo", np.array(0, F)), ("hi", np.array(6, F))], {}, 18),
    ("PRelu", "PRelu", [("x", A), ("slope", w([64, 1, 1]))], {}, 18),
]
ROWS += [binary(op) for op in ["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"]]
ROWS += [
    ("Add (broadcast)", "Add", [("x", A), ("b", w([64, 1, 1]))], {}, 18),
    ("Where", "Where", [("c", np.array(rng.random(A) > 0.5)), ("x", A), ("y", A)], {}, 18),
    ("Equal", "Equal", [("x", A), ("y", A)], {}, 18),
    ("Mean", "Mean", [("x", A), ("y", A), ("z", A)], {}, 18),
    ("Sum", "Sum", [("x", A), ("y", A), ("z", A)], {}, 18),
    ("Cast", "Cast", [("x", A)], {"to": T.INT32}, 18),
    ("MatMul", "MatMul", [("x", SEQ), ("w", w([768, 768]))], {}, 18),
    ("MatMul (batched)", "MatMul", [("x", [12, 128, 64]), ("y", [12, 64, 128])], {}, 18),
    ("Gemm", "Gemm", [("x", [64, 1024]), ("w", w([1024, 1024])), ("b", w([1024]))],
     {"transB": 0}, 18),
    ("Conv 3x3", "Conv", [("x", A), ("w", w([64, 64, 3, 3]))], {"pads": [1, 1, 1, 1]}, 18),
    ("Conv 1x1", "Conv", [("x", A), ("w", w([128, 64, 1, 1]))], {}, 18),
    ("Conv depthwise", "Conv", [("x", A), ("w", w([64, 1, 3, 3]))],
     {"pads": [1, 1, 1, 1], "group": 64}, 18),
    ("Conv 7x7/2", "Conv", [("x", [1, 3, 224, 224]), ("w", w([64, 3, 7, 7]))],
     {"pads": [3, 3, 3, 3], "strides": [2, 2]}, 18),
    ("ConvTranspose 2x2/2", "ConvTranspose", [("x", [1, 64, 56, 56]), ("w", w([64, 32, 2, 2]))],
     {"strides": [2, 2]}, 18),
    ("ConvTranspose 4x4/2", "ConvTranspose", [("x", [1, 64, 28, 28]), ("w", w([64, 32, 4, 4]))],
     {"strides": [2, 2], "pads": [1, 1, 1, 1]}, 18),
    ("ConvTranspose 3x3/1", "ConvTranspose", [("x", A), ("w", w([64, 64, 3, 3]))],
     {"pads": [1, 1, 1, 1]}, 18),
    ("MaxPool 3x3/2", "MaxPool", [("x", [1, 64, 112, 112])],
     {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, 18),
    ("AveragePool 3x3/1", "AveragePool", [("x", A)],
     {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, 18),
    ("AveragePool 2x2/2", "AveragePool", [("x", A)], {"kernel_shape": [2, 2], "strides": [2, 2]},
     18),
    ("GlobalAveragePool", "GlobalAveragePool", [("x", A)], {}, 18),
    ("GlobalMaxPool", "GlobalMaxPool", [("x", A)], {}, 18),
    ("BatchNormalization", "BatchNormalization",
     [("x", A), ("s", w([64], 1)), ("b", w([64])), ("m", w([64])), ("v", np.ones(64, F))], {}, 18),
    ("InstanceNormalization", "InstanceNormalization", [("x", A), ("s", w([64], 1)),
                                                         ("b", w([64]))], {}, 18),
    ("GroupNormalization", "GroupNormalization", [("x", A), ("s", w([64], 1)), ("b", w([64]))],
     {"num_groups": 8}, 21),
    ("LayerNormalization", "LayerNormalization", [("x", SEQ), ("s", w([768], 1)),
                                                  ("b", w([768]))], {"axis": -1}, 18),
    ("RMSNormalization", "RMSNormalization", [("x", SEQ), ("s", w([768], 1))], {"axis": -1}, 23),
    ("LRN", "LRN", [("x", A)], {"size": 5}, 18),
    ("LpNormalization", "LpNormalization", [("x", SEQ)], {"axis": -1}, 18),
    ("MeanVarianceNormalization", "MeanVarianceNormalization", [("x", A)], {}, 18),
    ("Softmax", "Softmax", [("x", [1, 12, 128, 128])], {"axis": -1}, 18),
    ("LogSoftmax", "LogSoftmax", [("x", [1, 12, 128, 128])], {"axis": -1}, 18),
    ("Hardmax", "Hardmax", [("x", [1, 12, 128, 128])], {"axis": -1}, 18),
]
AXES = np.array([-1], np.int64)
for op in ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
           "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"]:
    ROWS.append((f"{op} (last axis)", op, [("x", A), ("axes", AXES)], {}, 18))
ROWS += [
    ("ReduceMean (channels)", "ReduceMean", [("x", A), ("axes", np.array([1], np.int64))], {}, 18),
    ("ArgMax", "ArgMax", [("x", A)], {"axis": 1}, 18),
    ("ArgMin", "ArgMin", [("x", A)], {"axis": -1}, 18),
    ("TopK", "TopK", [("x", [1, 1000]), ("k", np.array([5], np.int64))], {}, 18),
    ("CumSum", "CumSum", [("x", A), ("a", np.array(3, np.int64))], {}, 18),
    ("Transpose", "Transpose", [("x", A)], {"perm": [0, 2, 3, 1]}, 18),
    ("Concat", "Concat", [("x", A), ("y", A)], {"axis": 1}, 18),
    ("Split", "Split", [("x", A)], {"axis": 1, "num_outputs": 2}, 18),
    ("Slice", "Slice", [("x", A), ("s", np.array([1, 1], np.int64)),
                        ("e", np.array([55, 55], np.int64)), ("a", np.array([2, 3], np.int64))],
     {}, 18),
    ("Gather", "Gather", [("x", [30522, 768]), ("i", rng.integers(0, 30522, [1, 128]))],
     {"axis": 0}, 18),
    ("GatherElements", "GatherElements", [("x", A), ("i", rng.integers(0, 56, A))],
     {"axis": 3}, 18),
    ("Expand", "Expand", [("x", [1, 64, 1, 56]), ("s", np.array(A, np.int64))], {}, 18),
    ("Tile", "Tile", [("x", [1, 64, 28, 28]), ("r", np.array([1, 1, 2, 2], np.int64))], {}, 18),
    ("Pad", "Pad", [("x", A), ("p", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))], {}, 18),
    ("Pad reflect", "Pad", [("x", A), ("p", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))],
     {"mode": "reflect"}, 18),
    ("DepthToSpace", "DepthToSpace", [("x", A)], {"blocksize": 2}, 18),
    ("SpaceToDepth", "SpaceToDepth", [("x", A)], {"blocksize": 2}, 18),
    ("Resize nearest x2", "Resize", [("x", A), ("roi", np.array([], F)),
                                     ("sc", np.array([1, 1, 2, 2], F))], {"mode": "nearest"}, 18),
    ("Resize linear x2", "Resize", [("x", A), ("roi", np.array([], F)),
                                    ("sc", np.array([1, 1, 2, 2], F))], {"mode": "linear"}, 18),
    ("Resize cubic x2", "Resize", [("x", [1, 16, 56, 56]), ("roi", np.array([], F)),
                                   ("sc", np.array([1, 1, 2, 2], F))], {"mode": "cubic"}, 18),
    ("GridSample", "GridSample", [("x", A), ("g", (rng.random([1, 56, 56, 2]) * 2 - 1).astype(F))],
     {}, 20),
    ("Trilu", "Trilu", [("x", [1, 12, 128, 128])], {}, 18),
    ("Einsum", "Einsum", [("x", [12, 128, 64]), ("y", [12, 128, 64])],
     {"equation": "bik,bjk->bij"}, 18),
]


def build(name, op, ins, attrs, opset):
    graph_inputs, inits, feeds, names = [], [], {}, []
    for i, (n, spec) in enumerate(ins):
        names.append(n)
        if isinstance(spec, np.ndarray):
            inits.append(nh.from_array(spec, n))
        else:
            graph_inputs.append(h.make_tensor_value_info(n, T.FLOAT, spec))
            feeds[n] = rng.standard_normal(spec).astype(F)
    n_out = 2 if op == "Split" else (2 if op == "TopK" else 1)
    outs = [f"y{i}" for i in range(n_out)]
    node = h.make_node(op, names, outs, **attrs)
    # The outputs' types as shape inference finds them: inferred as intermediates (read by
    # Identity nodes), then declared as the outputs of the one-node graph.
    probe = h.make_graph([node] + [h.make_node("Identity", [o], [f"{o}_probe"]) for o in outs],
                         "op", graph_inputs,
                         [h.make_empty_tensor_value_info(f"{o}_probe") for o in outs],
                         initializer=inits)
    probe = onnx.shape_inference.infer_shapes(
        h.make_model(probe, opset_imports=[h.make_opsetid("", opset)]))
    inferred = {v.name: v for v in probe.graph.value_info}
    declared = [inferred.get(o) or h.make_tensor_value_info(o, T.FLOAT, None) for o in outs]
    g = h.make_graph([node], "op", graph_inputs, declared, initializer=inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)]), feeds


def ort_ms(path, feeds):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    for _ in range(5):
        sess.run(None, feeds)
    times, start = [], time.perf_counter()
    while time.perf_counter() - start < float(SECONDS) or len(times) < 10:
        t = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t) * 1e3)
    return float(np.median(times))


def ours(path):
    out = subprocess.run([COLLAGE, "bench", path, "--profile", "--json", "--seconds", SECONDS],
                         capture_output=True, text=True)
    if out.returncode != 0:
        return None, None, out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"
    r = json.loads(out.stdout.strip().splitlines()[-1])
    total = sum(k["us"] for k in r["kernels"]) or 1.0
    roof = sum(k["us"] * k["roof_fraction"] for k in r["kernels"]) / total
    return r["median_ms"], roof, None


def main():
    want = set(sys.argv[1:])
    rows = []
    tmp = tempfile.mkdtemp(prefix="op-table-")
    for name, op, ins, attrs, opset in ROWS:
        if want and name not in want and op not in want:
            continue
        shape = next((list(s) for _, s in ins if not isinstance(s, np.ndarray)), None)
        if shape is None:
            shape = list(ins[0][1].shape)
        try:
            model, feeds = build(name, op, ins, attrs, opset)
        except Exception as e:  # noqa: BLE001  (a row this onnx cannot build)
            print(f"  {name}: cannot build: {str(e).splitlines()[0][:100]}", file=sys.stderr)
            continue
        path = os.path.join(tmp, f"{len(rows)}.onnx")
        onnx.save(model, path)
        try:
            theirs = ort_ms(path, feeds)
        except Exception as e:  # noqa: BLE001  (an op ORT does not run at this opset)
            theirs = None
            print(f"  {name}: ONNX Runtime: {str(e).splitlines()[0][:100]}", file=sys.stderr)
        mine, roof, err = ours(path)
        if err:
            print(f"  {name}: collage: {err[:160]}", file=sys.stderr)
        rows.append((name, shape, mine, theirs, roof))
        ratio = f"{theirs / mine:.2f}" if mine and theirs else "-"
        print(f"{name:28s} {str(shape):20s} ours {mine or 0:8.3f} ms  ort {theirs or 0:8.3f} ms"
              f"  ort/ours {ratio}", flush=True)
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model_name = next((ln.split(":", 1)[1].strip() for ln in cpu.splitlines()
                       if ln.startswith("Model name")), platform.processor())
    isa = "AVX-512" if "avx512f" in cpu else ("AVX2" if "avx2" in cpu else "baseline")
    lines = [
        "# Operator speed against ONNX Runtime",
        "",
        "Regenerate: `cargo build --release -p collage-build && .venv/bin/python "
        "tests/support/op_table.py` (writes this file).",
        "",
        f"One single-node model per row, one thread, untuned (no cost cache), on {model_name} "
        f"({isa}). Ratio: ONNX Runtime's median over ours (> 1: Collage is faster). Roof: the "
        "time-weighted fraction of the roofline our kernels reach (`collage bench --profile`).",
        "",
        "| op | input | ours (ms) | ONNX Runtime (ms) | ratio | roof |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name, shape, mine, theirs, roof in rows:
        fmt = (lambda v: f"{v:.3f}" if v else "-")
        ratio = f"{theirs / mine:.2f}" if mine and theirs else "-"
        r = f"{100 * roof:.0f}%" if roof is not None else "-"
        lines.append(f"| {name} | {shape} | {fmt(mine)} | {fmt(theirs)} | {ratio} | {r} |")
    if not want:
        with open("docs/OP_SPEED.md", "w") as f:
            f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


main()
