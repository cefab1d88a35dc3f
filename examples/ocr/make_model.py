#!/usr/bin/env python3
"""Writes ocr.onnx: a small text-recognition CNN as exporters write it, with symbolic dimensions.

The input is `x: [batch, 3, height, width]` (named `dim_param`s, as PyTorch's exporter writes them
with `dynamic_axes`); the head reshapes with the shape arithmetic exporters emit (Shape -> Gather
-> Unsqueeze -> Concat -> Reshape) and outputs per-column class scores `[batch, width/4, 12]`.
Weights are fixed-seed random numbers. Usage: python3 make_model.py (needs `pip install onnx
numpy`); the output is checked in.
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(31)


def w(name, shape, std):
    return numpy_helper.from_array((rng.standard_normal(shape) * std).astype(np.float32), name)


def i64(name, vals):
    return numpy_helper.from_array(np.array(vals, dtype=np.int64), name)


inits = [
    w("conv1_w", (8, 3, 3, 3), 0.27), w("conv1_b", (8,), 0.01),
    w("conv2_w", (16, 8, 3, 3), 0.17), w("conv2_b", (16,), 0.01),
    w("conv3_w", (16, 16, 3, 3), 0.12), w("conv3_b", (16,), 0.01),
    w("fc_w", (16, 12), 0.25), w("fc_b", (12,), 0.01),
    i64("zero", 0), i64("axes0", [0]), i64("channels", [16]), i64("rest", [-1]),
]
nodes = [
    helper.make_node("Conv", ["x", "conv1_w", "conv1_b"], ["c1"], name="conv1", kernel_shape=[3, 3],
                     pads=[1, 1, 1, 1], strides=[2, 2]),
    helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
    helper.make_node("Conv", ["r1", "conv2_w", "conv2_b"], ["c2"], name="conv2", kernel_shape=[3, 3],
                     pads=[1, 1, 1, 1], strides=[2, 2]),
    helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
    helper.make_node("Conv", ["r2", "conv3_w", "conv3_b"], ["c3"], name="conv3", kernel_shape=[3, 3],
                     pads=[1, 1, 1, 1]),
    helper.make_node("Add", ["c3", "r2"], ["res"], name="residual"),
    helper.make_node("Relu", ["res"], ["feat"], name="relu3"),
    # Pool over the height, then [N, C, 1, W'] -> [N, C, W'] by the exporter's shape arithmetic.
    helper.make_node("ReduceMean", ["feat"], ["pooled"], name="pool_h", axes=[2], keepdims=1),
    helper.make_node("Shape", ["pooled"], ["shape"], name="shape"),
    helper.make_node("Gather", ["shape", "zero"], ["n"], name="gather_n", axis=0),
    helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"], name="unsqueeze_n"),
    helper.make_node("Concat", ["n1", "channels", "rest"], ["target"], name="concat_shape", axis=0),
    helper.make_node("Reshape", ["pooled", "target"], ["seq"], name="reshape"),
    helper.make_node("Transpose", ["seq"], ["cols"], name="transpose", perm=[0, 2, 1]),
    helper.make_node("MatMul", ["cols", "fc_w"], ["mm"], name="fc"),
    helper.make_node("Add", ["mm", "fc_b"], ["scores"], name="fc_bias"),
    helper.make_node("LogSoftmax", ["scores"], ["logits"], name="log_softmax", axis=-1),
]
graph = helper.make_graph(
    nodes, "ocr",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, "height", "width"])],
    [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "columns", 12])],
    initializer=inits)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="collage-example")
model.ir_version = 8
onnx.checker.check_model(model, full_check=True)
onnx.save(model, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ocr.onnx"))
print("wrote ocr.onnx")
