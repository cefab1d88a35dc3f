#!/usr/bin/env python3
"""Side-by-side latency: ONNX Runtime (../shared/bench/ort_bench.py) and `collage bench`, same machine,
same run: Collage's full placement (every available backend, measured cost cache) against the
baselines `--backends c` and `--greedy` with each library first (`gemm,c`, `blas,c`, `dnnl,c`).
Usage (after .ci/run or the README's setup, from the repository root):

    cargo build --release -p collage-build
    .venv/bin/python tests/support/bench_compare.py [MODEL...]

Tunes `target/bench/caches/<model>.toml` first when missing (`collage tune`), then refines the
placement end to end for 1 and 2 threads (`collage tune --evolve --threads N`) when the cache has no
record for them; `collage bench --threads N` uses the record for N. Every variant is measured in
ROUNDS (default 3) rounds of SECONDS_PER_RUN (default 1) seconds, in rotated order, and reported as
the lowest of its round medians. Prints Markdown tables of medians (ms), the ratio ORT / Collage (> 1 means Collage is faster), the ratio of the best
baseline to the full placement (>= 1 means the search is no slower), and the additive error of the
cost model (end-to-end latency against the sum of the chosen kernels' cached costs, one thread).
"""
import json
import os
import re
import subprocess
import sys

models = sys.argv[1:] or ["mlp", "mnist_cnn", "resnet18", "bert_layer", "squeezenet", "mobilenetv3"]
bench_dir = "target/bench"
shared = os.environ.get("SHARED", "../shared")
seconds = os.environ.get("SECONDS_PER_RUN", "1")
rounds = int(os.environ.get("ROUNDS", "3"))
env = dict(os.environ, BENCH_DIR=bench_dir)
collage = "target/release/collage"
os.makedirs(f"{bench_dir}/caches", exist_ok=True)
available = subprocess.run([collage, "explain", f"{bench_dir}/models/mlp.onnx"], capture_output=True,
                           text=True, check=True).stdout
offered = re.search(r"backends offered: (\S+);", available).group(1).split(",")
variants = [("full", [])] + [("c", ["--backends", "c"])]
variants += [(f"greedy {lib},c", ["--greedy", "--backends", f"{lib},c"]) for lib in ("gemm", "blas", "dnnl")
             if lib in offered]

subprocess.run([sys.executable, f"{shared}/bench/ort_bench.py", "--out", f"{bench_dir}/ort.json", *models],
               check=True, env=env, stdout=subprocess.DEVNULL)
ort = json.load(open(f"{bench_dir}/ort.json"))["models"]
tables = {1: [], 2: []}
additive = []
evolve_log = []
for m in models:
    model = f"{bench_dir}/models/{m}.onnx"
    cache = f"{bench_dir}/caches/{m}.toml"
    if not os.path.exists(cache):
        subprocess.run([collage, "tune", model, "--cache", cache], check=True, stdout=subprocess.DEVNULL)
    for t in (1, 2):
        # The end-to-end refinement per thread count (`collage tune --evolve`), once per cache.
        if f", {t} thread(s)\"" not in open(cache).read():
            out = subprocess.run([collage, "tune", model, "--cache", cache, "--evolve", "--threads", str(t)],
                                 check=True, capture_output=True, text=True).stdout
            evolve_log.append(f"- {m}: {out.strip().splitlines()[-1]}")
    for t in (1, 2):
        # Rounds with the variants in rotated order; each variant's figure is the lowest of its
        # round medians (identical programs measured minutes apart differ by up to ~10% here).
        times = {}
        for r in range(rounds):
            order = variants[r % len(variants):] + variants[:r % len(variants)]
            for name, args in order:
                out = subprocess.run([collage, "bench", model, "--threads", str(t), "--json", "--seconds", seconds,
                                      "--input", f"{bench_dir}/models/{m}.input.f32", "--cache", cache, *args],
                                     check=True, capture_output=True, text=True).stdout
                ms = json.loads(out)["median_ms"]
                times[name] = min(times.get(name, ms), ms)
        o = ort[m][str(t)]["median_ms"]
        best = min(v for k, v in times.items() if k != "full")
        cells = " | ".join(f"{times[k]:.3f}" for k, _ in variants)
        tables[t].append(f"| {m} | {o:.3f} | {cells} | {o / times['full']:.2f} | {best / times['full']:.2f} |")
        if t == 1:
            text = subprocess.run([collage, "explain", model, "--cache", cache], check=True, capture_output=True,
                                  text=True).stdout
            k = re.search(r"measured ([0-9.]+) us over (\d+) of (\d+) kernels", text)
            if k:
                s = float(k.group(1)) / 1e3
                additive.append(f"| {m} | {times['full']:.3f} | {s:.3f} | {k.group(2)}/{k.group(3)} | "
                                f"{(times['full'] - s) / times['full'] * 100:+.1f}% |")
for t in (1, 2):
    print(f"\n{t} thread(s), medians in ms:\n")
    print("| model | ORT | " + " | ".join(k for k, _ in variants) + " | ORT/full | best baseline/full |")
    print("| --- | ---: | " + " | ".join("---:" for _ in variants) + " | ---: | ---: |")
    print("\n".join(tables[t]))
print("\nAdditive error (1 thread): end-to-end vs the sum of the chosen kernels' cached costs\n")
print("| model | end-to-end ms | sum of kernels ms | kernels measured | error |")
print("| --- | ---: | ---: | ---: | ---: |")
print("\n".join(additive))
if evolve_log:
    print("\nEnd-to-end refinement (`collage tune --evolve`):\n")
    print("\n".join(evolve_log))
