#!/usr/bin/env python3
"""What OpenBLAS' choice of kernels costs: the same benchmarks under two OPENBLAS_CORETYPE
values, interleaved round by round in one run, and their ratios; written into docs/results.md
between the blas-kernels markers.

    python3 scripts/blas_kernels.py                          # Prescott against SkylakeX
    python3 scripts/blas_kernels.py --kernels Sandybridge,Haswell

The first value is what OpenBLAS chose on its own (hybridseq-bench prints it when it restarts
itself: "OpenBLAS chose its 'Prescott' kernels"), the second what the tools restart with."""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

BEGIN, END = "<!-- blas-kernels:begin -->", "<!-- blas-kernels:end -->"
# One GEMM of a d = 768 MLP, a Linear layer forward and backward, and two long-context training
# steps (PHA and its attention-only Transformer at T = 1024).
FILTER = (r"^sgemm/space:OpenMP/threads:2/M:4096/K:768/N:3072/|^(fwd|bwd)/linear/768x3072/T:4096/space:OpenMP/"
          r"|^long_context_train/(pha|transformer)/T:1024/")


def run_once(bench, kernels, out):
    env = dict(os.environ, OPENBLAS_CORETYPE=kernels, OMP_NUM_THREADS="2", OMP_PROC_BIND="false")
    subprocess.run([bench, f"--benchmark_filter={FILTER}", f"--benchmark_out={out}", "--benchmark_out_format=json"],
                   env=env, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        data = json.load(f)
    got = data["context"].get("openblas_kernels", "")
    if got.lower() != kernels.lower():
        sys.exit(f"asked OpenBLAS for '{kernels}' kernels, it ran '{got}'")
    return data


def best_times(runs):
    """{benchmark name: fastest real time over the rounds}, and the context of the first."""
    best = {}
    for data in runs:
        for b in data["benchmarks"]:
            best[b["name"]] = min(best.get(b["name"], float("inf")), b["real_time"])
    return best


def table(names, slow, fast, kernels, rounds, context):
    lines = [f"`python3 scripts/blas_kernels.py --kernels {kernels[0]},{kernels[1]}`", "",
             f"{context.get('host_name', '?')}, {context.get('num_cpus', '?')} CPUs, 2 OpenMP threads; {rounds} "
             "rounds, each running every benchmark under both kernels in turn, the fastest round taken. "
             "Ratio > 1: the second kernels are faster.", "",
             f"| benchmark | {kernels[0]} ms | {kernels[1]} ms | {kernels[0]} ÷ {kernels[1]} |", "|---|---:|---:|---:|"]
    for name in names:
        lines.append(f"| `{name.removesuffix('/real_time')}` | {slow[name]:.1f} | {fast[name]:.1f} | "
                     f"{slow[name] / fast[name]:.2f} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default="build/bench/hybridseq-bench")
    ap.add_argument("--kernels", default="Prescott,SkylakeX", help="OpenBLAS' own choice, then the better one")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--results", default="docs/results.md")
    args = ap.parse_args()
    kernels = args.kernels.split(",")
    if len(kernels) != 2:
        sys.exit(f"--kernels: two comma-separated names, got '{args.kernels}'")
    runs = {k: [] for k in kernels}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for k in kernels:
                print(f"round {r + 1}/{args.rounds}: OPENBLAS_CORETYPE={k}", flush=True)
                runs[k].append(run_once(args.bench, k, os.path.join(tmp, f"{k}{r}.json")))
    slow, fast = best_times(runs[kernels[0]]), best_times(runs[kernels[1]])
    names = [b["name"] for b in runs[kernels[0]][0]["benchmarks"] if b["name"] in fast]
    if not names:
        sys.exit("no benchmark matched the filter")
    text = table(names, slow, fast, kernels, args.rounds, runs[kernels[0]][0]["context"])
    print(text)
    with open(args.results) as f:
        doc = f.read()
    if BEGIN not in doc or END not in doc:
        sys.exit(f"{args.results} has no {BEGIN} … {END} section")
    doc = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: f"{BEGIN}\n{text}\n{END}", doc, flags=re.S)
    with open(args.results, "w") as f:
        f.write(doc)


if __name__ == "__main__":
    main()
