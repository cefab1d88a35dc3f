#!/usr/bin/env python3
"""Models exported by a real exporter with symbolic dimensions: PaddlePaddle's `paddle.onnx.export`
(paddle2onnx), as a production OCR pipeline exports its models. Run in its own environment (the
exporter pins an older `onnx` than the tests use):

    python3 -m venv .venv-export
    .venv-export/bin/pip install paddlepaddle==3.3.1 paddle2onnx==2.1.0 packaging
    .venv-export/bin/python tests/support/export_models.py DIR

writes DIR/crnn_paddle.onnx, a text-recognition CNN (input `x: [?, 3, ?, ?]`: batch, height and
width symbolic; BatchNorm, depthwise convolution, Hardswish, pooling, a mean over the height, a
linear layer and a softmax per column), and DIR/encoder_paddle.onnx, a transformer encoder layer
(inputs `ids` and `mask`, int64 `[?, ?]`: batch and sequence symbolic; token and position
embeddings with the positions from `arange(seq)`, `nn.TransformerEncoderLayer` with GELU, an
additive attention mask, LayerNorm). Weights are fixed-seed random numbers.
`symbolic_models.py DIR` (in the test environment) then writes ONNX Runtime's outputs for them.
"""
import os
import sys

import paddle
import paddle.nn as nn

OUT = sys.argv[1] if len(sys.argv) > 1 else "target/symbolic"


class CRNN(nn.Layer):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2D(3, 16, 3, stride=2, padding=1), nn.BatchNorm2D(16), nn.ReLU(),
            nn.Conv2D(16, 16, 3, padding=1, groups=16), nn.BatchNorm2D(16), nn.Hardswish(),
            nn.Conv2D(16, 32, 1), nn.BatchNorm2D(32), nn.ReLU(),
            nn.MaxPool2D(kernel_size=2, stride=2),
            nn.Conv2D(32, 32, 3, padding=1), nn.BatchNorm2D(32), nn.ReLU())
        self.fc = nn.Linear(32, 20)

    def forward(self, x):
        f = paddle.mean(self.body(x), axis=2)  # [N, C, W/4]
        return nn.functional.softmax(self.fc(f.transpose([0, 2, 1])), axis=-1)


class Encoder(nn.Layer):
    def __init__(self, vocab=100, d=64, heads=4, max_len=512):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.layer = nn.TransformerEncoderLayer(d, heads, 128, dropout=0.0, activation="gelu")
        self.norm = nn.LayerNorm(d)

    def forward(self, ids, mask):
        pos = paddle.arange(paddle.shape(ids)[1]).unsqueeze(0)
        h = self.tok(ids) + self.pos(pos)
        bias = (1.0 - mask.astype("float32")).unsqueeze([1, 2]) * -1e4
        return self.norm(self.layer(h, src_mask=bias))


def export(layer, name, spec):
    layer.eval()
    # BatchNorm statistics that are not the identity, so that folding them is checked.
    for sub in layer.sublayers():
        if isinstance(sub, nn.BatchNorm2D):
            sub._mean.set_value(paddle.rand(sub._mean.shape) * 0.2 - 0.1)
            sub._variance.set_value(paddle.rand(sub._variance.shape) * 0.5 + 0.75)
    paddle.onnx.export(layer, os.path.join(OUT, name), input_spec=spec, opset_version=13)


def main():
    os.makedirs(OUT, exist_ok=True)
    paddle.seed(3)
    export(CRNN(), "crnn_paddle", [paddle.static.InputSpec([None, 3, None, None], "float32", "x")])
    paddle.seed(4)
    export(Encoder(), "encoder_paddle", [paddle.static.InputSpec([None, None], "int64", "ids"),
                                          paddle.static.InputSpec([None, None], "int64", "mask")])
    print(f"wrote {OUT}: crnn_paddle.onnx, encoder_paddle.onnx (paddle {paddle.__version__})")


if __name__ == "__main__":
    main()
