#!/usr/bin/env python3
"""The whole ONNX backend node suite (issue 10): runs `collage conformance DIR --all` (every test
folder, not only scope.txt) and counts passes per category — in scope (scope.txt), out of scope by
dtype only (every op promised, a tensor dtype not), and by operator family for the rest (training,
control flow, sequence, optional, string, random, quantised, other).

Usage (after .ci/run generated the tests, from the repository root):

    cargo build --release -p collage-build
    .venv/bin/python tests/support/node_suite.py [DIR] [--jobs N] [--failures] [--backends c]
        [--write-passing tests/expected_failures/beyond_scope_passing.txt]

Prints a Markdown table; `--failures` also lists every failing test with its reason.
"""
import argparse
import os
import re
import subprocess

import onnx

parser = argparse.ArgumentParser()
parser.add_argument("dir", nargs="?", default="target/onnx-node-tests")
parser.add_argument("--jobs", default="2")
parser.add_argument("--failures", action="store_true")
parser.add_argument("--backends", default="c")
parser.add_argument("--write-passing", metavar="FILE",
                    help="write the passing tests outside scope.txt to FILE (the list "
                         "tests/conformance.rs checks: tests/expected_failures/beyond_scope_passing.txt)")
opts = parser.parse_args()
test_dir = opts.dir
shared = os.environ.get("SHARED", "../shared")

FAMILIES = [
    ("training", {"Adagrad", "Adam", "Momentum", "Gradient", "SoftmaxCrossEntropyLoss",
                  "NegativeLogLikelihoodLoss"}),
    ("control flow", {"If", "Loop", "Scan"}),
    ("sequence", {"SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceErase",
                  "SequenceInsert", "SequenceLength", "SequenceMap", "SplitToSequence",
                  "ConcatFromSequence"}),
    ("optional", {"Optional", "OptionalGetElement", "OptionalHasElement"}),
    ("string", {"StringNormalizer", "StringConcat", "StringSplit", "RegexFullMatch",
                "TfIdfVectorizer", "LabelEncoder"}),
    ("random", {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
                "Bernoulli", "Multinomial"}),
    ("quantised", {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv",
                   "QLinearMatMul", "MatMulInteger", "ConvInteger"}),
]

scope = {}
with open(os.path.join(test_dir, "scope.txt")) as f:
    for line in f:
        if line.strip():
            scope[line.split()[0]] = line.split()[1]


def category(name):
    if name in scope:
        return f"in scope ({scope[name]})"
    model = onnx.load(os.path.join(test_dir, name, "model.onnx"), load_external_data=False)
    ops = {n.op_type for n in model.graph.node}
    for g in model.graph.node:
        for a in g.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                ops.update(n.op_type for n in a.g.node)
    for fam, members in FAMILIES:
        if ops & members:
            return fam
    if ops <= PROMISED:
        return "promised ops, other dtype"
    return "other operators"


PROMISED = set()
with open(os.path.join(shared, "conformance/inference_ops.txt")) as f:
    for line in f:
        w = line.split()
        if w and w[0].startswith("TIER"):
            PROMISED.update(w[1:])


out = subprocess.run(["target/release/collage", "conformance", test_dir, "--all", "--jobs", opts.jobs,
                      "--backends", opts.backends],
                     capture_output=True, text=True)
failures = {}
for line in out.stdout.splitlines():
    m = re.match(r"FAIL (\S+) (.*)", line)
    if m:
        failures[m.group(1)] = m.group(2)
tests = sorted(d for d in os.listdir(test_dir)
               if d.startswith("test_") and os.path.exists(os.path.join(test_dir, d, "model.onnx")))
counts = {}
for t in tests:
    c = category(t)
    p, n = counts.get(c, (0, 0))
    counts[c] = (p + (t not in failures), n + 1)
print("| category | passed | tests |")
print("| --- | ---: | ---: |")
for c in sorted(counts, key=lambda c: (not c.startswith("in scope"), c)):
    print(f"| {c} | {counts[c][0]} | {counts[c][1]} |")
total = sum(p for p, _ in counts.values())
print(f"| **all** | **{total}** | **{len(tests)}** |")
print(f"\n{total} of {len(tests)} node tests pass ({100.0 * total / len(tests):.1f}%)")
if opts.failures:
    for t in tests:
        if t in failures:
            print(f"FAIL {t} [{category(t)}] {failures[t][:200]}")
if opts.write_passing:
    with open(opts.write_passing, "w") as f:
        f.write("# Node tests outside scope.txt that pass on `c` (tests/conformance.rs,\n"
                "# onnx_node_tests_beyond_scope). Regenerate with tests/support/node_suite.py "
                "--write-passing.\n")
        for t in tests:
            if t not in scope and t not in failures:
                f.write(t + "\n")
