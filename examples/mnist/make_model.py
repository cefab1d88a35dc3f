#!/usr/bin/env python3
"""Writes mnist.onnx: an MNIST-style CNN (the ONNX model zoo's mnist-8 layout plus BatchNorm).

Weights are fixed-seed random numbers, so the predicted class demonstrates the pipeline, not accuracy.
Usage: python3 make_model.py   (needs `pip install onnx numpy`); the output is checked in.
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(7)


def w(name, shape, std):
    return numpy_helper.from_array((rng.standard_normal(shape) * std).astype(np.float32), name)


inits = [
    w("conv1_w", (8, 1, 5, 5), 0.2), w("conv1_b", (8,), 0.01),
    numpy_helper.from_array(rng.uniform(0.8, 1.2, 8).astype(np.float32), "bn1_scale"),
    w("bn1_bias", (8,), 0.05), w("bn1_mean", (8,), 0.05),
    numpy_helper.from_array(rng.uniform(0.8, 1.2, 8).astype(np.float32), "bn1_var"),
    w("conv2_w", (16, 8, 5, 5), 0.07), w("conv2_b", (16,), 0.01),
    w("fc_w", (256, 10), 0.06), w("fc_b", (1, 10), 0.01),
    numpy_helper.from_array(np.array([1, 256], dtype=np.int64), "flat_shape"),
]
nodes = [
    helper.make_node("Conv", ["input", "conv1_w", "conv1_b"], ["c1"], kernel_shape=[5, 5], pads=[2, 2, 2, 2]),
    helper.make_node("BatchNormalization", ["c1", "bn1_scale", "bn1_bias", "bn1_mean", "bn1_var"], ["b1"], epsilon=1e-5),
    helper.make_node("Relu", ["b1"], ["r1"]),
    helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
    helper.make_node("Conv", ["p1", "conv2_w", "conv2_b"], ["c2"], kernel_shape=[5, 5], pads=[2, 2, 2, 2]),
    helper.make_node("Relu", ["c2"], ["r2"]),
    helper.make_node("MaxPool", ["r2"], ["p2"], kernel_shape=[3, 3], strides=[3, 3]),
    helper.make_node("Reshape", ["p2", "flat_shape"], ["flat"]),
    helper.make_node("MatMul", ["flat", "fc_w"], ["mm"]),
    helper.make_node("Add", ["mm", "fc_b"], ["logits"]),
]
graph = helper.make_graph(nodes, "mnist", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 1, 28, 28])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], initializer=inits)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="collage-example")
model.ir_version = 8
onnx.checker.check_model(model, full_check=True)
onnx.save(model, os.path.join(os.path.dirname(os.path.abspath(__file__)), "mnist.onnx"))
print("wrote mnist.onnx")
