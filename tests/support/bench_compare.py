#!/usr/bin/env python3
"""Side-by-side latency: ONNX Runtime (../shared/bench/ort_bench.py) and `collage bench`, same machine,
same run. Two builds of every model, each against its own baselines:

- tuned: Collage's full placement with the measured cost cache, against `--backends c` and `--greedy`
  with each library first (`gemm,c`, `blas,c`, `dnnl,c`), all with the cache;
- untuned: no cache at all (the analytic cost model, what a new user's first build gets), against
  the same greedy baselines without the cache.

Usage (after .ci/run or the README's setup, from the repository root):

    cargo build --release -p collage-build
    .venv/bin/python tests/support/bench_compare.py [MODEL...]

Tunes `target/bench/caches/<model>.toml` first when missing (`collage tune`), then refines the
placement end to end for 1 and 2 threads (`collage tune --evolve --threads N`) when the cache has no
record for them; `collage bench --threads N` uses the record for N. Every variant is measured in
ROUNDS (default 3) rounds of SECONDS_PER_RUN (default 1) seconds on THREADS (default `1,2`), in
rotated order (EVOLVE=0: no
end-to-end refinement, the tuned builds use the per-kernel measurements only), and reported as
the lowest of its round medians. Compiled libraries are reused between rounds (`COLLAGE_CC_CACHE`,
default `target/bench/cc-cache`). Prints Markdown tables of medians (ms) with the ratio ORT /
Collage (> 1 means Collage is faster) and the ratio of the best baseline to the build (>= 1 means
the search is no slower); for the untuned build also its ratio to the tuned one (the acceptance
bound of issue 13 is 1.5); the analytic estimate (`collage explain`, no cache) and the cost model's
additive error (end-to-end latency against the sum of the chosen kernels' cached costs), one thread.
"""
import json
import os
import re
import subprocess
import sys

models = sys.argv[1:] or ["mlp", "mnist_cnn", "resnet18", "bert_layer", "squeezenet", "mobilenetv3", "mobilenetv2", "vit"]
bench_dir = "target/bench"
shared = os.environ.get("SHARED", "../shared")
seconds = os.environ.get("SECONDS_PER_RUN", "1")
rounds = int(os.environ.get("ROUNDS", "3"))
thread_counts = [int(t) for t in os.environ.get("THREADS", "1,2").split(",")]
env = dict(os.environ, BENCH_DIR=bench_dir)
os.environ.setdefault("COLLAGE_CC_CACHE", f"{bench_dir}/cc-cache")
collage = "target/release/collage"
os.makedirs(f"{bench_dir}/caches", exist_ok=True)
available = subprocess.run([collage, "explain", f"{bench_dir}/models/mlp.onnx"], capture_output=True,
                           text=True, check=True).stdout
offered = re.search(r"backends offered: (\S+);", available).group(1).split(",")
libs = [lib for lib in ("gemm", "blas", "dnnl") if lib in offered]
# (name, arguments, tuned): tuned variants get `--cache`.
tuned = [("full", [], True), ("c", ["--backends", "c"], True)]
tuned += [(f"greedy {lib},c", ["--greedy", "--backends", f"{lib},c"], True) for lib in libs]
untuned = [("untuned", [], False), ("untuned c", ["--backends", "c"], False)]
untuned += [(f"untuned greedy {lib},c", ["--greedy", "--backends", f"{lib},c"], False) for lib in libs]
variants = tuned + untuned

subprocess.run([sys.executable, f"{shared}/bench/ort_bench.py", "--out", f"{bench_dir}/ort.json", *models],
               check=True, env=env, stdout=subprocess.DEVNULL)
ort = json.load(open(f"{bench_dir}/ort.json"))["models"]
tables = {t: [] for t in thread_counts}
untuned_tables = {t: [] for t in thread_counts}
analytic = []
additive = []
evolve_log = []
for m in models:
    model = f"{bench_dir}/models/{m}.onnx"
    cache = f"{bench_dir}/caches/{m}.toml"
    if not os.path.exists(cache):
        subprocess.run([collage, "tune", model, "--cache", cache], check=True, stdout=subprocess.DEVNULL)
    for t in thread_counts:
        # The end-to-end refinement per thread count (`collage tune --evolve`), once per cache
        # (EVOLVE=0 skips it: "tuned" then means the per-kernel measurements only).
        if os.environ.get("EVOLVE", "1") != "0" and f", {t} thread(s)\"" not in open(cache).read():
            out = subprocess.run([collage, "tune", model, "--cache", cache, "--evolve", "--threads", str(t)],
                                 check=True, capture_output=True, text=True).stdout
            evolve_log.append(f"- {m}: {out.strip().splitlines()[-1]}")
    for t in thread_counts:
        # Rounds with the variants in rotated order; each variant's figure is the lowest of its
        # round medians (identical programs measured minutes apart differ by up to ~10% here).
        times = {}
        for r in range(rounds):
            order = variants[r % len(variants):] + variants[:r % len(variants)]
            for name, args, with_cache in order:
                cache_args = ["--cache", cache] if with_cache else []
                out = subprocess.run([collage, "bench", model, "--threads", str(t), "--json", "--seconds", seconds,
                                      "--input", f"{bench_dir}/models/{m}.input.f32", *cache_args, *args],
                                     check=True, capture_output=True, text=True).stdout
                ms = json.loads(out)["median_ms"]
                times[name] = min(times.get(name, ms), ms)
        o = ort[m][str(t)]["median_ms"]
        best = min(times[k] for k, _, _ in tuned if k != "full")
        cells = " | ".join(f"{times[k]:.3f}" for k, _, _ in tuned)
        tables[t].append(f"| {m} | {o:.3f} | {cells} | {o / times['full']:.2f} | {best / times['full']:.2f} |")
        u = times["untuned"]
        best_greedy = min(times[k] for k, _, _ in untuned if "greedy" in k)
        cells = " | ".join(f"{times[k]:.3f}" for k, _, _ in untuned)
        untuned_tables[t].append(f"| {m} | {o:.3f} | {cells} | {o / u:.2f} | {u / times['full']:.2f} | "
                                 f"{best_greedy / u:.2f} |")
        if t == thread_counts[0]:
            text = subprocess.run([collage, "explain", model, "--cache", cache], check=True, capture_output=True,
                                  text=True).stdout
            k = re.search(r"measured ([0-9.]+) us over (\d+) of (\d+) kernels", text)
            if k:
                s = float(k.group(1)) / 1e3
                additive.append(f"| {m} | {times['full']:.3f} | {s:.3f} | {k.group(2)}/{k.group(3)} | "
                                f"{(times['full'] - s) / times['full'] * 100:+.1f}% |")
            text = subprocess.run([collage, "explain", model], check=True, capture_output=True, text=True).stdout
            k = re.search(r"total ([0-9.]+) us", text)
            if k:
                a = float(k.group(1)) / 1e3
                analytic.append(f"| {m} | {a:.3f} | {u:.3f} | {a / u:.2f} | {o:.3f} |")
for t in thread_counts:
    print(f"\n{t} thread(s), tuned (cost cache), medians in ms:\n")
    print("| model | ORT | " + " | ".join(k for k, _, _ in tuned) + " | ORT/full | best baseline/full |")
    print("| --- | ---: | " + " | ".join("---:" for _ in tuned) + " | ---: | ---: |")
    print("\n".join(tables[t]))
    print(f"\n{t} thread(s), untuned (no cache), medians in ms:\n")
    print("| model | ORT | " + " | ".join(k for k, _, _ in untuned) +
          " | ORT/untuned | untuned/full | best greedy/untuned |")
    print("| --- | ---: | " + " | ".join("---:" for _ in untuned) + " | ---: | ---: | ---: |")
    print("\n".join(untuned_tables[t]))
print("\nAnalytic estimate (`collage explain`, no cache) against the untuned build, one thread\n")
print("| model | analytic ms | measured ms | analytic/measured | ORT ms |")
print("| --- | ---: | ---: | ---: | ---: |")
print("\n".join(analytic))
print("\nAdditive error (1 thread): end-to-end vs the sum of the chosen kernels' cached costs\n")
print("| model | end-to-end ms | sum of kernels ms | kernels measured | error |")
print("| --- | ---: | ---: | ---: | ---: |")
print("\n".join(additive))
if evolve_log:
    print("\nEnd-to-end refinement (`collage tune --evolve`):\n")
    print("\n".join(evolve_log))
