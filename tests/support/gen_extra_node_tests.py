#!/usr/bin/env python3
"""Node tests of our own in the ONNX backend-test layout (model.onnx, test_data_set_0/*.pb),
for cases the ONNX suite does not combine; outputs from onnx's ReferenceEvaluator. Written to
tests/data/node/ (checked in; tests/conformance.rs runs them on every backend configuration).

    .venv/bin/python tests/support/gen_extra_node_tests.py
"""
import os

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh
from onnx.reference import ReferenceEvaluator

OUT = os.path.join(os.path.dirname(__file__), "..", "data", "node")


def save(name, model, inputs):
    d = os.path.join(OUT, name)
    os.makedirs(os.path.join(d, "test_data_set_0"), exist_ok=True)
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(d, "model.onnx"))
    outs = ReferenceEvaluator(model).run(None, inputs)
    for i, (k, v) in enumerate(inputs.items()):
        with open(os.path.join(d, "test_data_set_0", f"input_{i}.pb"), "wb") as f:
            f.write(nh.from_array(v, k).SerializeToString())
    for i, (o, v) in enumerate(zip(model.graph.output, outs)):
        with open(os.path.join(d, "test_data_set_0", f"output_{i}.pb"), "wb") as f:
            f.write(nh.from_array(v, o.name).SerializeToString())


def narrow_int_fused():
    """8- and 16-bit arithmetic fused into a comparison: C computes them as int, so the sum
    must wrap before the compare (200 + 100 > 50 is false for uint8)."""
    nodes = [
        h.make_node("Add", ["a", "b"], ["s"]),
        h.make_node("Greater", ["s", "c"], ["g"]),
        h.make_node("Mul", ["a", "b"], ["m"]),
        h.make_node("Neg", ["x"], ["n"]),
        h.make_node("Less", ["n", "y"], ["l"]),
        h.make_node("BitwiseNot", ["a"], ["bn"]),
        h.make_node("Greater", ["bn", "c"], ["g2"]),
    ]
    ins = [h.make_tensor_value_info(n, T.UINT8, [64]) for n in "abc"]
    ins += [h.make_tensor_value_info(n, T.INT16, [64]) for n in "xy"]
    outs = [
        h.make_tensor_value_info("g", T.BOOL, [64]),
        h.make_tensor_value_info("m", T.UINT8, [64]),
        h.make_tensor_value_info("l", T.BOOL, [64]),
        h.make_tensor_value_info("g2", T.BOOL, [64]),
    ]
    m = h.make_model(h.make_graph(nodes, "narrow_int_fused", ins, outs),
                     opset_imports=[h.make_opsetid("", 18)])
    rng = np.random.default_rng(0)
    inputs = {
        "a": rng.integers(0, 256, 64).astype(np.uint8),
        "b": rng.integers(0, 256, 64).astype(np.uint8),
        "c": rng.integers(0, 256, 64).astype(np.uint8),
        "x": np.array([-32768] * 32 + list(range(32)), dtype=np.int16),
        "y": rng.integers(-100, 100, 64).astype(np.int16),
    }
    save("test_narrow_int_fused", m, inputs)


def half_chain():
    """A float16 MatMul + Add + Relu + Softmax with float16 weights, and a bfloat16 Mul: the
    graph computes on f32 between casts (passes/infer.rs, Halves)."""
    rng = np.random.default_rng(1)
    w = nh.from_array(rng.uniform(-1, 1, (4, 3)).astype(np.float16), "w")
    b = nh.from_array(rng.uniform(-1, 1, (3,)).astype(np.float16), "b")
    nodes = [
        h.make_node("MatMul", ["x", "w"], ["mm"]),
        h.make_node("Add", ["mm", "b"], ["s"]),
        h.make_node("Relu", ["s"], ["r"]),
        h.make_node("Softmax", ["r"], ["y"], axis=-1),
        h.make_node("Mul", ["p", "q"], ["z"]),
    ]
    ins = [h.make_tensor_value_info("x", T.FLOAT16, [2, 4]),
           h.make_tensor_value_info("p", T.BFLOAT16, [8]),
           h.make_tensor_value_info("q", T.BFLOAT16, [8])]
    outs = [h.make_tensor_value_info("y", T.FLOAT16, [2, 3]),
            h.make_tensor_value_info("z", T.BFLOAT16, [8])]
    m = h.make_model(h.make_graph(nodes, "half_chain", ins, outs, initializer=[w, b]),
                     opset_imports=[h.make_opsetid("", 18)])
    import ml_dtypes
    inputs = {
        "x": rng.uniform(-1, 1, (2, 4)).astype(np.float16),
        "p": rng.uniform(-4, 4, 8).astype(ml_dtypes.bfloat16),
        "q": rng.uniform(-4, 4, 8).astype(ml_dtypes.bfloat16),
    }
    save("test_half_chain", m, inputs)


def narrow_outputs_from_attributes():
    """Operators whose output type comes from an attribute, not an input, producing narrow
    floats (the inference pass does not cast around them): EyeLike, ConstantOfShape, Cast. (A
    window with output_datatype FLOAT16 is left out: the reference computes it in float16
    arithmetic, off by an ulp or two from the correctly rounded values.)"""
    nodes = [
        h.make_node("HannWindow", ["n"], ["wf"]),
        h.make_node("Cast", ["wf"], ["w"], to=T.FLOAT16),
        h.make_node("EyeLike", ["x"], ["e"], dtype=T.BFLOAT16, k=1),
        h.make_node("Cast", ["w"], ["w8"], to=T.FLOAT8E4M3FN),
        h.make_node("Shape", ["x"], ["s"]),
        h.make_node("ConstantOfShape", ["s"], ["c"],
                    value=h.make_tensor("v", T.FLOAT16, [1], [1.5])),
    ]
    n = nh.from_array(np.array(10, dtype=np.int64), "n")
    ins = [h.make_tensor_value_info("x", T.FLOAT, [3, 4])]
    outs = [h.make_tensor_value_info("w", T.FLOAT16, [10]),
            h.make_tensor_value_info("e", T.BFLOAT16, [3, 4]),
            h.make_tensor_value_info("w8", T.FLOAT8E4M3FN, [10]),
            h.make_tensor_value_info("c", T.FLOAT16, [3, 4])]
    m = h.make_model(h.make_graph(nodes, "narrow_outputs", ins, outs, initializer=[n]),
                     opset_imports=[h.make_opsetid("", 21)])
    inputs = {"x": np.random.default_rng(2).uniform(-1, 1, (3, 4)).astype(np.float32)}
    save("test_narrow_outputs_from_attributes", m, inputs)


def loop_early_exit():
    """A Loop whose body computes its condition (false after the fourth iteration, before the
    trip count of 10): unrolled one iteration at a time, the condition of each is folded before
    the next is taken, so the scan output stacks four iterations. The carried value and the
    data it adds are run-time values."""
    body = h.make_graph(
        [
            h.make_node("Add", ["i", "one"], ["next"]),
            h.make_node("Less", ["next", "four"], ["cond_out"]),
            h.make_node("Unsqueeze", ["i", "zero"], ["at"]),
            h.make_node("Unsqueeze", ["next", "zero"], ["to"]),
            h.make_node("Slice", ["x", "at", "to"], ["xi"]),
            h.make_node("Add", ["y_in", "xi"], ["y_out"]),
            h.make_node("Mul", ["y_out", "y_out"], ["sq"]),
        ],
        "body",
        [h.make_tensor_value_info("i", T.INT64, []),
         h.make_tensor_value_info("cond_in", T.BOOL, []),
         h.make_tensor_value_info("y_in", T.FLOAT, [1])],
        [h.make_tensor_value_info("cond_out", T.BOOL, []),
         h.make_tensor_value_info("y_out", T.FLOAT, [1]),
         h.make_tensor_value_info("sq", T.FLOAT, [1])],
        initializer=[nh.from_array(np.array(1, dtype=np.int64), "one"),
                     nh.from_array(np.array(4, dtype=np.int64), "four"),
                     nh.from_array(np.array([0], dtype=np.int64), "zero")],
    )
    nodes = [h.make_node("Loop", ["m", "c", "y0"], ["y", "ys"], body=body)]
    inits = [nh.from_array(np.array(10, dtype=np.int64), "m"),
             nh.from_array(np.array(True), "c")]
    ins = [h.make_tensor_value_info("y0", T.FLOAT, [1]),
           h.make_tensor_value_info("x", T.FLOAT, [10])]
    outs = [h.make_tensor_value_info("y", T.FLOAT, [1]),
            h.make_tensor_value_info("ys", T.FLOAT, [4, 1])]
    m = h.make_model(h.make_graph(nodes, "loop_early_exit", ins, outs, initializer=inits),
                     opset_imports=[h.make_opsetid("", 21)])
    rng = np.random.default_rng(3)
    inputs = {"y0": rng.uniform(-1, 1, 1).astype(np.float32),
              "x": rng.uniform(-1, 1, 10).astype(np.float32)}
    save("test_loop_early_exit", m, inputs)


def convtranspose_const():
    """ConvTranspose with constant weights (what exported models have): passes/deconv.rs turns
    the foldable ones into a 1x1 convolution and a Col2Im; the geometries cover strides, kernels
    larger than the stride, padding, output padding, dilation, auto_pad, output_shape, stride 1,
    a bias and none (two groups stay as written: the ONNX suite's group tests)."""
    rng = np.random.default_rng(4)
    cases = [
        # name, x shape, w shape, attributes, bias
        ("k2s2_bias", [1, 8, 5, 6], [8, 4, 2, 2], dict(strides=[2, 2]), True),
        ("k4s2p1", [2, 6, 5, 4], [6, 3, 4, 3], dict(strides=[2, 1], pads=[1, 1, 1, 1]), True),
        ("k3s2_outpad", [1, 5, 4, 4], [5, 2, 3, 3],
         dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]), False),
        ("dilated", [1, 3, 4, 5], [3, 2, 3, 2],
         dict(strides=[2, 3], dilations=[2, 1], pads=[0, 1, 2, 0]), True),
        ("same_upper", [1, 4, 3, 5], [4, 3, 3, 3], dict(strides=[2, 2], auto_pad="SAME_UPPER"),
         True),
        ("output_shape", [1, 4, 3, 3], [4, 2, 3, 3], dict(strides=[3, 2], output_shape=[10, 8]),
         False),
        ("stride1", [1, 6, 5, 5], [6, 4, 3, 3], dict(pads=[1, 1, 1, 1]), True),
    ]
    for name, xs, ws, attrs, with_bias in cases:
        w = nh.from_array(rng.uniform(-1, 1, ws).astype(np.float32), "w")
        inits = [w]
        ins = ["x", "w"]
        m_out = ws[1] * attrs.get("group", 1)
        if with_bias:
            inits.append(nh.from_array(rng.uniform(-1, 1, [m_out]).astype(np.float32), "b"))
            ins.append("b")
        node = h.make_node("ConvTranspose", ins, ["y"], **attrs)
        g = h.make_graph([node], f"convtranspose_{name}",
                         [h.make_tensor_value_info("x", T.FLOAT, xs)],
                         [h.make_tensor_value_info("y", T.FLOAT, None)], initializer=inits)
        m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
        m = onnx.shape_inference.infer_shapes(m)
        inputs = {"x": rng.uniform(-1, 1, xs).astype(np.float32)}
        save(f"test_convtranspose_const_{name}", m, inputs)


def topk_small_k():
    """TopK with k small against the axis (selected one element at a time, ops/reduce.rs):
    largest and smallest, the last axis and the first, float (with infinities) and int64;
    distinct values, so the reference's order of equal ones does not matter."""
    rng = np.random.default_rng(5)
    for name, dtype, shape, axis, largest in [
        ("float_last", np.float32, [3, 50], -1, 1),
        ("float_first_smallest", np.float32, [60, 4], 0, 0),
        ("int64_last_smallest", np.int64, [2, 45], 1, 0),
    ]:
        n = shape[axis]
        rows = int(np.prod(shape)) // n
        x = np.stack([rng.permutation(n) for _ in range(rows)]).astype(dtype) - n // 2
        x = np.moveaxis(x.reshape([rows, n]), 1, axis % len(shape)).reshape(shape)
        if dtype == np.float32:
            x = x * 0.5
            x.flat[3] = np.inf
            x.flat[7] = -np.inf
        elem = T.FLOAT if dtype == np.float32 else T.INT64
        k = nh.from_array(np.array([5], np.int64), "k")
        node = h.make_node("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest)
        out_shape = list(shape)
        out_shape[axis] = 5
        g = h.make_graph([node], f"topk_{name}", [h.make_tensor_value_info("x", elem, shape)],
                         [h.make_tensor_value_info("v", elem, out_shape),
                          h.make_tensor_value_info("i", T.INT64, out_shape)], initializer=[k])
        m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
        save(f"test_topk_small_k_{name}", m, {"x": x})


narrow_int_fused()
half_chain()
narrow_outputs_from_attributes()
loop_early_exit()
convtranspose_const()
topk_small_k()
