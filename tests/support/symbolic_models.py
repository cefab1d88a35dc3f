#!/usr/bin/env python3
"""Models with symbolic input dimensions, and ONNX Runtime's outputs at several bindings:

    symbolic_models.py DIR

writes DIR/tiny_bert_dyn.onnx, a BERT-style encoder layer as Hugging Face's exporter writes it
(inputs `input_ids` and `attention_mask`, both int64 `[batch, sequence]`; position ids from
Shape -> Gather -> Range; the attention heads split and merged with Shape -> Gather -> Concat ->
Reshape; the mask turned into an additive bias; GELU by Erf), and for each case below a folder
DIR/CASE with `input_<i>.pb` and ONNX Runtime's `output_<i>.pb` (the ONNX backend test layout that
`collage run --data` and tests/symbolic.rs read). The OCR model is the checked-in
examples/ocr/ocr.onnx (examples/ocr/make_model.py); the paddle2onnx exports of
export_models.py (crnn_paddle, encoder_paddle) get their cases when they are in DIR.
"""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

OUT = sys.argv[1] if len(sys.argv) > 1 else "target/symbolic"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HIDDEN, HEADS, FFN, VOCAB, MAX_POS = 64, 4, 128, 97, 512


def tiny_bert():
    rng = np.random.default_rng(5)
    inits, nodes = [], []

    def w(name, shape, std=0.08):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * std).astype(np.float32), name))
        return name

    def c(name, arr):
        inits.append(numpy_helper.from_array(np.array(arr), name))
        return name

    def op(t, ins, out, **kw):
        nodes.append(helper.make_node(t, ins, [out], name=out + "_node", **kw))
        return out

    dh = HIDDEN // HEADS
    c("i0", np.array(0, dtype=np.int64))
    c("i1", np.array(1, dtype=np.int64))
    c("ax0", np.array([0], dtype=np.int64))
    c("ax12", np.array([1, 2], dtype=np.int64))
    c("heads", np.array([HEADS], dtype=np.int64))
    c("dh", np.array([dh], dtype=np.int64))
    c("hidden", np.array([HIDDEN], dtype=np.int64))
    c("one_f", np.array(1.0, dtype=np.float32))
    c("neg_big", np.array(-10000.0, dtype=np.float32))
    c("scale", np.array(1.0 / np.sqrt(dh), dtype=np.float32))
    c("half", np.array(0.5, dtype=np.float32))
    c("rsqrt2", np.array(1.0 / np.sqrt(2.0), dtype=np.float32))
    # Embeddings: word + position (ids from the sequence length), then LayerNorm.
    op("Gather", [w("word_emb", (VOCAB, HIDDEN), 0.5), "input_ids"], "words", axis=0)
    op("Shape", ["input_ids"], "ids_shape")
    op("Gather", ["ids_shape", "i1"], "seq_len", axis=0)
    op("Range", ["i0", "seq_len", "i1"], "pos_ids")
    op("Unsqueeze", ["pos_ids", "ax0"], "pos_ids2")
    op("Gather", [w("pos_emb", (MAX_POS, HIDDEN), 0.5), "pos_ids2"], "positions", axis=0)
    op("Add", ["words", "positions"], "emb")
    op("LayerNormalization", ["emb", w("ln0_g", (HIDDEN,), 0.1), w("ln0_b", (HIDDEN,), 0.1)], "h0",
       axis=-1, epsilon=1e-12)
    # The mask as an additive bias [batch, 1, 1, sequence].
    op("Unsqueeze", ["attention_mask", "ax12"], "mask4")
    op("Cast", ["mask4"], "maskf", to=TensorProto.FLOAT)
    op("Sub", ["one_f", "maskf"], "inv")
    op("Mul", ["inv", "neg_big"], "bias")
    # Split heads: [b, s, H] -> [b, s, heads, dh] -> [b, heads, s, dh], by shape arithmetic.
    op("Shape", ["h0"], "h_shape")
    op("Gather", ["h_shape", "i0"], "b", axis=0)
    op("Gather", ["h_shape", "i1"], "s", axis=0)
    op("Unsqueeze", ["b", "ax0"], "b1")
    op("Unsqueeze", ["s", "ax0"], "s1")
    op("Concat", ["b1", "s1", "heads", "dh"], "split_shape", axis=0)
    op("Concat", ["b1", "s1", "hidden"], "merge_shape", axis=0)

    def proj(x, name):
        op("MatMul", [x, w(name + "_w", (HIDDEN, HIDDEN))], name + "_mm")
        return op("Add", [name + "_mm", w(name + "_b", (HIDDEN,), 0.02)], name)

    def heads(x, perm):
        op("Reshape", [x, "split_shape"], x + "_4d")
        return op("Transpose", [x + "_4d"], x + "_t", perm=perm)

    q = heads(proj("h0", "q"), [0, 2, 1, 3])
    k = heads(proj("h0", "k"), [0, 2, 3, 1])
    v = heads(proj("h0", "v"), [0, 2, 1, 3])
    op("MatMul", [q, k], "scores0")
    op("Mul", ["scores0", "scale"], "scores1")
    op("Add", ["scores1", "bias"], "scores")
    op("Softmax", ["scores"], "probs", axis=-1)
    op("MatMul", ["probs", v], "ctx4")
    op("Transpose", ["ctx4"], "ctx_t", perm=[0, 2, 1, 3])
    op("Reshape", ["ctx_t", "merge_shape"], "ctx")
    o = proj("ctx", "o")
    op("Add", [o, "h0"], "res1")
    op("LayerNormalization", ["res1", w("ln1_g", (HIDDEN,), 0.1), w("ln1_b", (HIDDEN,), 0.1)], "h1",
       axis=-1, epsilon=1e-12)
    op("MatMul", ["h1", w("ff1_w", (HIDDEN, FFN))], "ff1_mm")
    op("Add", ["ff1_mm", w("ff1_b", (FFN,), 0.02)], "ff1")
    op("Mul", ["ff1", "rsqrt2"], "g0")
    op("Erf", ["g0"], "g1")
    op("Add", ["g1", "one_f"], "g2")
    op("Mul", ["ff1", "g2"], "g3")
    op("Mul", ["g3", "half"], "gelu")
    op("MatMul", ["gelu", w("ff2_w", (FFN, HIDDEN))], "ff2_mm")
    op("Add", ["ff2_mm", w("ff2_b", (HIDDEN,), 0.02)], "ff2")
    op("Add", ["ff2", "h1"], "res2")
    op("LayerNormalization", ["res2", w("ln2_g", (HIDDEN,), 0.1), w("ln2_b", (HIDDEN,), 0.1)],
       "last_hidden_state", axis=-1, epsilon=1e-12)
    graph = helper.make_graph(
        nodes, "tiny_bert_dyn",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "sequence"])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", HIDDEN])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="collage-tests")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def write_case(name, model_path, feeds):
    """DIR/name/input_<i>.pb and output_<i>.pb, ONNX Runtime's outputs for `feeds`."""
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    sess = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    outs = sess.run(None, feeds)
    for i, (k, v) in enumerate(feeds.items()):
        with open(os.path.join(d, f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(v, k).SerializeToString())
    for i, (o, v) in enumerate(zip(sess.get_outputs(), outs)):
        with open(os.path.join(d, f"output_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(v, o.name).SerializeToString())


def main():
    os.makedirs(OUT, exist_ok=True)
    bert = os.path.join(OUT, "tiny_bert_dyn.onnx")
    onnx.save(tiny_bert(), bert)
    rng = np.random.default_rng(11)
    ocr = os.path.join(ROOT, "examples", "ocr", "ocr.onnx")
    # The bindings tests/symbolic.rs checks, and those of the example crate (examples/ocr).
    for (n, h, w) in [(1, 32, 96), (2, 48, 160), (3, 64, 64), (1, 48, 160), (2, 32, 96), (4, 32, 96)]:
        x = rng.standard_normal((n, 3, h, w)).astype(np.float32)
        write_case(f"ocr_{n}x{h}x{w}", ocr, {"x": x})
    for (b, s) in [(1, 1), (1, 7), (1, 128), (1, 512), (2, 16)]:
        ids = rng.integers(0, VOCAB, (b, s)).astype(np.int64)
        mask = np.ones((b, s), dtype=np.int64)
        mask[:, s - s // 4:] = 0 if s > 3 else 1  # padding at the end, as a tokenizer writes it
        write_case(f"tiny_bert_{b}x{s}", bert, {"input_ids": ids, "attention_mask": mask})
    n = 11
    # The exports of tests/support/export_models.py (paddle2onnx), when present.
    crnn = os.path.join(OUT, "crnn_paddle.onnx")
    if os.path.exists(crnn):
        for (b, h, w) in [(1, 32, 100), (2, 48, 160), (3, 64, 64)]:
            x = rng.standard_normal((b, 3, h, w)).astype(np.float32)
            write_case(f"crnn_paddle_{b}x{h}x{w}", crnn, {"x": x})
            n += 1
    encoder = os.path.join(OUT, "encoder_paddle.onnx")
    if os.path.exists(encoder):
        for (b, s) in [(1, 1), (1, 7), (1, 128), (1, 512), (2, 16)]:
            ids = rng.integers(0, 100, (b, s)).astype(np.int64)
            mask = np.ones((b, s), dtype=np.int64)
            mask[:, s - s // 4:] = 0 if s > 3 else 1
            write_case(f"encoder_paddle_{b}x{s}", encoder, {"ids": ids, "mask": mask})
            n += 1
    # One build served over a range of widths (tests/symbolic.rs): both ends and three inside.
    rng = np.random.default_rng(13)
    for w in [32, 45, 201, 320]:
        x = rng.standard_normal((1, 3, 32, w)).astype(np.float32)
        write_case(f"ocr_1x32x{w}", ocr, {"x": x})
        n += 1
        if os.path.exists(crnn):
            write_case(f"crnn_paddle_1x32x{w}", crnn, {"x": x})
            n += 1
    for h in [16, 24, 40, 64]:
        x = rng.standard_normal((1, 3, h, 96)).astype(np.float32)
        write_case(f"ocr_1x{h}x96", ocr, {"x": x})
        n += 1
    print(f"wrote {OUT}: tiny_bert_dyn.onnx and the ONNX Runtime outputs of {n} bindings")


if __name__ == "__main__":
    main()
