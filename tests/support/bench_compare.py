#!/usr/bin/env python3
"""Side-by-side latency: ONNX Runtime (../shared/bench/ort_bench.py) and `collage bench`, same machine,
same run. Usage (after .ci/run or the README's setup, from the repository root):

    cargo build --release -p collage-build
    .venv/bin/python tests/support/bench_compare.py [MODEL...]

Prints a Markdown table of medians (ms) and the ratio ORT / Collage (> 1 means Collage is faster).
"""
import json
import os
import subprocess
import sys

models = sys.argv[1:] or ["mlp", "mnist_cnn", "resnet18", "bert_layer"]
bench_dir = "target/bench"
shared = os.environ.get("SHARED", "../shared")
env = dict(os.environ, BENCH_DIR=bench_dir)
subprocess.run([sys.executable, f"{shared}/bench/ort_bench.py", "--out", f"{bench_dir}/ort.json", *models],
               check=True, env=env, stdout=subprocess.DEVNULL)
ort = json.load(open(f"{bench_dir}/ort.json"))["models"]
rows = []
for m in models:
    ours = {}
    for t in (1, 2):
        out = subprocess.run(["target/release/collage", "bench", f"{bench_dir}/models/{m}.onnx", "--threads", str(t),
                              "--json", "--input", f"{bench_dir}/models/{m}.input.f32"],
                             check=True, capture_output=True, text=True).stdout
        ours[t] = json.loads(out)["median_ms"]
    o1, o2 = ort[m]["1"]["median_ms"], ort[m]["2"]["median_ms"]
    rows.append(f"| {m} | {o1:.3f} | {ours[1]:.3f} | {o1 / ours[1]:.2f} | {o2:.3f} | {ours[2]:.3f} | {o2 / ours[2]:.2f} |")
print("| model | ORT 1t | Collage 1t | ORT/Collage | ORT 2t | Collage 2t | ORT/Collage |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
print("\n".join(rows))
