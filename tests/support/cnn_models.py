#!/usr/bin/env python3
"""Builds SqueezeNet 1.1 and MobileNetV3-small as PyTorch 2.x exports them (torchvision's layer
shapes, BatchNorm folded into the convolutions, opset 20, 224x224, batch 1), with random
weights (He-initialised, fixed seeds), beside the benchmark models of ../shared/bench/models.py:

    models.py DIR && cnn_models.py DIR

writes DIR/NAME.onnx and DIR/NAME.input.f32 for NAME in squeezenet, mobilenetv3, mobilenetv2,
vit (a ViT-style encoder of our own: 16x16 patches, class token, pre-LN blocks) and dbnet (a
DBNet-style text detector of our own: FPN with Resize, ConvTranspose head; 320x480) and
convtower (a CNN of our own whose 3x3 convolutions grow by 16 channels a layer) and encoder512 (a
transformer encoder of our own over 512 tokens, attention-bound) (the same
layout as the shared benchmark models, so ort_reference.py, ort_bench.py, tests/models.rs and
bench_compare.py read them the same way).
"""
import os
import sys

import numpy as np
import onnx

sys.path.insert(0, os.path.join(os.environ.get("SHARED", "../shared"), "bench"))
from models import Builder  # noqa: E402  (the shared builder: initialisers, uids, conv)

OPSET = 20
OUT = sys.argv[1] if len(sys.argv) > 1 else "target/bench/models"


def conv_act(b, x, cin, cout, k, stride=1, act="Relu", group=1):
    """Conv (with the folded BatchNorm's bias) + activation; `act` None for none."""
    y = b.conv(x, cin, cout, k, stride=stride, pad=(k - 1) // 2, group=group, bias=True)
    if act == "HardSigmoid":
        return b.op("HardSigmoid", [y], alpha=1.0 / 6.0, beta=0.5)
    return b.op(act, [y]) if act else y


def build_squeezenet():
    """torchvision squeezenet1_1."""
    b = Builder("squeezenet", seed=21)

    def fire(x, cin, s, e1, e3):
        sq = conv_act(b, x, cin, s, 1)
        a = conv_act(b, sq, s, e1, 1)
        c = conv_act(b, sq, s, e3, 3)
        return b.op("Concat", [a, c], axis=1)

    def pool(x):
        return b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 0, 0], ceil_mode=1)

    x = b.op("Relu", [b.conv("input", 3, 64, 3, stride=2, bias=True)])
    x = pool(x)
    x = fire(x, 64, 16, 64, 64)
    x = fire(x, 128, 16, 64, 64)
    x = pool(x)
    x = fire(x, 128, 32, 128, 128)
    x = fire(x, 256, 32, 128, 128)
    x = pool(x)
    x = fire(x, 256, 48, 192, 192)
    x = fire(x, 384, 48, 192, 192)
    x = fire(x, 384, 64, 256, 256)
    x = fire(x, 512, 64, 256, 256)
    x = b.op("Relu", [b.conv(x, 512, 1000, 1, bias=True)])
    x = b.op("GlobalAveragePool", [x])
    b.op("Flatten", [x], axis=1)
    b.nodes[-1].output[0] = "output"
    return b.finish("input", [1, 3, 224, 224], "output", [1, 1000])


def make_divisible(v, d=8):
    n = max(d, int(v + d / 2) // d * d)
    return n + d if n < 0.9 * v else n


def build_mobilenetv3():
    """torchvision mobilenet_v3_small."""
    b = Builder("mobilenetv3", seed=22)
    # (in, kernel, expanded, out, squeeze-excite, activation, stride)
    cfg = [
        (16, 3, 16, 16, True, "Relu", 2),
        (16, 3, 72, 24, False, "Relu", 2),
        (24, 3, 88, 24, False, "Relu", 1),
        (24, 5, 96, 40, True, "HardSwish", 2),
        (40, 5, 240, 40, True, "HardSwish", 1),
        (40, 5, 240, 40, True, "HardSwish", 1),
        (40, 5, 120, 48, True, "HardSwish", 1),
        (48, 5, 144, 48, True, "HardSwish", 1),
        (48, 5, 288, 96, True, "HardSwish", 2),
        (96, 5, 576, 96, True, "HardSwish", 1),
        (96, 5, 576, 96, True, "HardSwish", 1),
    ]
    x = conv_act(b, "input", 3, 16, 3, stride=2, act="HardSwish")
    for cin, k, exp, cout, se, act, stride in cfg:
        y = x
        if exp != cin:
            y = conv_act(b, y, cin, exp, 1, act=act)
        y = conv_act(b, y, exp, exp, k, stride=stride, act=act, group=exp)
        if se:
            sq = make_divisible(exp // 4)
            s = b.op("GlobalAveragePool", [y])
            s = conv_act(b, s, exp, sq, 1, act="Relu")
            s = conv_act(b, s, sq, exp, 1, act="HardSigmoid")
            y = b.op("Mul", [s, y])
        y = conv_act(b, y, exp, cout, 1, act=None)
        x = b.op("Add", [y, x]) if stride == 1 and cin == cout else y
    x = conv_act(b, x, 96, 576, 1, act="HardSwish")
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)
    x = b.op("HardSwish", [b.gemm(x, 576, 1024)])
    b.gemm(x, 1024, 1000)
    b.nodes[-1].output[0] = "output"
    return b.finish("input", [1, 3, 224, 224], "output", [1, 1000])


def relu6_conv(b):
    """Conv (with the folded BatchNorm's bias) + ReLU6 as Clip(0, 6), or none (`act=False`)."""
    lo, hi = b.scalar(0.0, "relu6_lo"), b.scalar(6.0, "relu6_hi")

    def cbr6(x, cin, cout, k, stride=1, group=1, act=True):
        y = b.conv(x, cin, cout, k, stride=stride, pad=(k - 1) // 2, group=group, bias=True)
        return b.op("Clip", [y, lo, hi]) if act else y
    return cbr6


def mobilenetv2_features(b, cbr6):
    """torchvision's mobilenet_v2 feature layers (inverted residuals) on "input": the last
    feature map and each stage's output by its channel count (24: 1/4, 32: 1/8, 96: 1/16,
    320: 1/32)."""
    # (expansion, out channels, repeats, first stride)
    cfg = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
           (6, 160, 3, 2), (6, 320, 1, 1)]
    x, cin, feats = cbr6("input", 3, 32, 3, stride=2), 32, {}
    for t, c, n, s in cfg:
        for i in range(n):
            stride = s if i == 0 else 1
            exp = cin * t
            y = cbr6(x, cin, exp, 1) if t != 1 else x
            y = cbr6(y, exp, exp, 3, stride=stride, group=exp)
            y = cbr6(y, exp, c, 1, act=False)
            x = b.op("Add", [x, y]) if stride == 1 and cin == c else y
            cin = c
        feats[c] = x
    return x, feats


def build_mobilenetv2():
    """torchvision mobilenet_v2 (width 1.0): inverted residuals, ReLU6 as Clip(0, 6)."""
    b = Builder("mobilenetv2", seed=23)
    cbr6 = relu6_conv(b)
    x, _ = mobilenetv2_features(b, cbr6)
    x = cbr6(x, 320, 1280, 1)
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)
    b.gemm(x, 1280, 1000)
    b.nodes[-1].output[0] = "output"
    return b.finish("input", [1, 3, 224, 224], "output", [1, 1000])


def build_vit():
    """A ViT-style classifier of our own (ViT-Tiny's widths, 6 blocks): 16x16 patches of a 224x224
    image by a strided convolution, a class token, learned position embeddings, pre-LN encoder
    blocks (multi-head attention with 3 heads, GELU MLP of 768), the class token's head."""
    b = Builder("vit", seed=24)
    d, heads, mlp, depth, patches = 192, 3, 768, 6, 14 * 14
    seq = patches + 1
    x = b.conv("input", 3, d, 16, stride=16, bias=True)                    # [1, d, 14, 14]
    x = b.op("Reshape", [x, b.i64([1, d, patches])])
    x = b.op("Transpose", [x], perm=[0, 2, 1])                              # [1, 196, d]
    cls = b.init(b.randn((1, 1, d), 0.02), "cls")
    x = b.op("Concat", [cls, x], axis=1)                                   # [1, 197, d]
    x = b.op("Add", [x, b.init(b.randn((1, seq, d), 0.02), "pos")])
    for _ in range(depth):
        a = b.mha(b.layernorm(x, d, 1e-6), seq, d, heads)
        x = b.op("Add", [x, a])
        h = b.gelu_erf(b.linear(b.layernorm(x, d, 1e-6), d, mlp))
        x = b.op("Add", [x, b.linear(h, mlp, d)])
    x = b.layernorm(x, d, 1e-6)
    x = b.op("Gather", [x, b.i64(0, "cls_index")], axis=1)                  # [1, d]
    b.gemm(x, d, 1000)
    b.nodes[-1].output[0] = "output"
    return b.finish("input", [1, 3, 224, 224], "output", [1, 1000])


def build_encoder512():
    """A transformer encoder of our own whose time goes to attention: 512 tokens, hidden 256, 8
    heads of 32, pre-LN blocks with a GELU MLP of 1024, two blocks. Its attention scores are
    8 x 512 x 512 (8 MiB) per block."""
    b = Builder("encoder512", seed=31)
    seq, d, heads, mlp, depth = ENCODER_INPUT[1], ENCODER_INPUT[2], 8, 1024, 2
    x = "input"
    for _ in range(depth):
        a = b.mha(b.layernorm(x, d, 1e-5), seq, d, heads)
        x = b.op("Add", [x, a])
        h = b.gelu_erf(b.linear(b.layernorm(x, d, 1e-5), d, mlp))
        x = b.op("Add", [x, b.linear(h, mlp, d)])
    x = b.layernorm(x, d, 1e-5)
    b.nodes[-1].output[0] = "output"
    return b.finish("input", ENCODER_INPUT, "output", ENCODER_INPUT)


ENCODER_INPUT = [1, 512, 256]
DBNET_INPUT = [1, 3, 320, 480]


def build_dbnet():
    """A DBNet-style text detector of our own (as paddle2onnx exports one, BatchNorm folded):
    a MobileNetV2 backbone (features at 1/4, 1/8, 1/16, 1/32), an FPN (1x1 lateral convolutions,
    nearest-neighbour Resize x2 top-down, 3x3 smoothing convolutions, Resize x8/x4/x2 to 1/4 and
    a concatenation), and the probability head: 3x3 convolution, two ConvTranspose 2x2 stride 2
    back to the input's size, Sigmoid."""
    b = Builder("dbnet", seed=25)
    _, feats = mobilenetv2_features(b, relu6_conv(b))

    def up(x, f):
        return b.op("Resize", [x, "", b.init(np.array([1, 1, f, f], np.float32), "scales")],
                    mode="nearest")

    def deconv(x, cin, cout):
        w = b.init(b.randn((cin, cout, 2, 2), np.sqrt(2.0 / (cin * 4))), "deconv_w")
        bias = b.init(b.randn((cout,), 0.01), "deconv_b")
        return b.op("ConvTranspose", [x, w, bias], kernel_shape=[2, 2], strides=[2, 2])

    c2, c3, c4, c5 = feats[24], feats[32], feats[96], feats[320]
    inner = 96
    in5 = b.conv(c5, 320, inner, 1)
    in4 = b.conv(c4, 96, inner, 1)
    in3 = b.conv(c3, 32, inner, 1)
    in2 = b.conv(c2, 24, inner, 1)
    out4 = b.op("Add", [in4, up(in5, 2)])
    out3 = b.op("Add", [in3, up(out4, 2)])
    out2 = b.op("Add", [in2, up(out3, 2)])
    q = inner // 4
    p5 = up(b.conv(in5, inner, q, 3, pad=1), 8)
    p4 = up(b.conv(out4, inner, q, 3, pad=1), 4)
    p3 = up(b.conv(out3, inner, q, 3, pad=1), 2)
    p2 = b.conv(out2, inner, q, 3, pad=1)
    fuse = b.op("Concat", [p5, p4, p3, p2], axis=1)
    h = b.op("Relu", [b.conv(fuse, inner, q, 3, pad=1, bias=True)])
    h = b.op("Relu", [deconv(h, q, q)])
    h = deconv(h, q, 1)
    b.op("Sigmoid", [h])
    b.nodes[-1].output[0] = "output"
    return b.finish("input", DBNET_INPUT, "output", [1, 1] + DBNET_INPUT[2:])


def build_convtower():
    """A CNN of our own with many similar layers (what ETO's reuse is for): a stride-2 stem,
    then 3x3 convolutions whose channels grow by 16 at 56x56 (32 to 128) and at 28x28 (128 to
    192, the first with stride 2), each with its bias and ReLU, global pooling and a classifier
    over 100 classes. Every convolution's loop nest dominates the one before it."""
    b = Builder("convtower", seed=27)
    x = conv_act(b, "input", 3, 32, 3, stride=2)
    x = b.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    for cin in range(32, 128, 16):
        x = conv_act(b, x, cin, cin + 16, 3)
    for i, cin in enumerate(range(128, 192, 16)):
        x = conv_act(b, x, cin, cin + 16, 3, stride=2 if i == 0 else 1)
    x = b.op("GlobalAveragePool", [x])
    x = b.op("Flatten", [x], axis=1)
    w = b.init(b.randn((192, 100), np.sqrt(1.0 / 192)), "fc_w")
    bias = b.init(b.randn((100,), 0.01), "fc_b")
    b.op("Gemm", [x, w, bias])
    b.nodes[-1].output[0] = "output"
    return b.finish("input", [1, 3, 224, 224], "output", [1, 100])


os.makedirs(OUT, exist_ok=True)
for name, build in [("squeezenet", build_squeezenet), ("mobilenetv3", build_mobilenetv3),
                    ("mobilenetv2", build_mobilenetv2), ("vit", build_vit),
                    ("dbnet", build_dbnet), ("convtower", build_convtower),
                    ("encoder512", build_encoder512)]:
    model = build()
    model.opset_import[0].version = OPSET
    model.ir_version = 9
    model.producer_name = "cnn_models.py"
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, os.path.join(OUT, f"{name}.onnx"))
    rng = np.random.default_rng(100)
    shape = {"dbnet": DBNET_INPUT, "encoder512": ENCODER_INPUT}.get(name, [1, 3, 224, 224])
    rng.standard_normal(shape).astype("<f4").tofile(os.path.join(OUT, f"{name}.input.f32"))
    print(f"{name}: {len(model.graph.node)} nodes written")
