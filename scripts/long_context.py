#!/usr/bin/env python3
"""Runs the long-context model benchmarks (bench/long_context_benchmarks.cpp) and writes their
tables into docs/results.md (between the long-context markers) and the plot into a PNG.

    python3 scripts/long_context.py                      # run (2 threads) and write
    python3 scripts/long_context.py --from-json run.json # write from an earlier run's JSON

Every ratio is taken inside one run: the benchmarks of all models run interleaved in random
order (--benchmark_enable_random_interleaving), `--repetitions` times each, and each
benchmark's fastest repetition is used. Needs matplotlib (pip install matplotlib)."""
import argparse
import json
import os
import re
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

BEGIN, END = "<!-- long-context:begin -->", "<!-- long-context:end -->"
MODELS = ["pha", "pha[attn+ffn]", "transformer", "ecp", "ssm-tf"]
BASELINES = ["pha[attn+ffn]", "transformer"]
LENGTHS = [1024, 2048, 4096, 8192]
# The PHA paper (PHA-180M vs attention-only of similar perplexity): throughput and memory
# ratios PHA ÷ attention-only, where it gives them.
PAPER_THROUGHPUT = {8192: 1.239}
PAPER_MEMORY = {2048: 1 - 0.396, 8192: 1 - 0.220}
STEPS = r"long_context_(train|forward)/.*/tokens:8192/"
DECODE = r"long_context_decode/"
NAME = re.compile(r"long_context_(train|forward|decode)/(.+?)/(?:T:(\d+)/tokens:\d+|position:(\d+))/(?:real|manual)_time$")


def run(bench, repetitions, out):
    """Two runs into one JSON: the steps on 2 threads, decoding on 1 (one token at batch 1 is a
    chain of small kernels, which 2 threads' barriers make hostage to any other process on a
    shared 2-core machine). Progress goes to stdout."""
    runs = []
    for pattern, threads in ((STEPS, "2"), (DECODE, "1")):
        env = dict(os.environ, OMP_NUM_THREADS=threads, OMP_PROC_BIND="false")
        part = f"{out}.{threads}"
        cmd = [bench, f"--benchmark_filter={pattern}", f"--benchmark_repetitions={repetitions}",
               "--benchmark_enable_random_interleaving=true", f"--benchmark_out={part}", "--benchmark_out_format=json"]
        print(f"OMP_NUM_THREADS={threads} " + " ".join(cmd), flush=True)
        subprocess.run(cmd, env=env, check=True)
        with open(part) as f:
            runs.append(json.load(f))
        os.remove(part)
    with open(out, "w") as f:
        json.dump({"context": runs[0]["context"], "benchmarks": runs[0]["benchmarks"] + runs[1]["benchmarks"]}, f,
                  indent=1)


def load(path):
    """{(kind, model, n): fastest repetition's record}; n is T, or the decoding position."""
    with open(path) as f:
        data = json.load(f)
    best, spread = {}, {}
    for b in data["benchmarks"]:
        m = NAME.match(b.get("run_name", b["name"]))
        if not m or b.get("run_type", "iteration") != "iteration":
            continue
        key = (m.group(1), m.group(2), int(m.group(3) or m.group(4)))
        spread.setdefault(key, []).append(b["real_time"])
        if key not in best or b["real_time"] < best[key]["real_time"]:
            best[key] = b
    return data["context"], best, spread


def mb(x):
    return f"{x / 1e6:.1f}"


def forward_flops(r):
    return sum(v for k, v in r.items() if k.startswith("flops:"))


def training_bytes(r):
    return r["peak_workspace_bytes"] + r["parameter_bytes"] + r["gradient_bytes"] + r["optimizer_bytes"]


def tables(context, best, spread, command):
    models = [m for m in MODELS if ("train", m, LENGTHS[0]) in best]
    worst = max(max(v) / min(v) for v in spread.values())
    reps = max(len(v) for v in spread.values())
    out = [f"`{command}`", "",
           f"{context.get('host_name', '')}, {context['num_cpus']} CPUs, 2 OpenMP threads (decoding: 1); "
           f"{reps} interleaved repetitions of every benchmark, the fastest taken (the slowest repetition of any "
           f"benchmark was {worst:.2f}× its fastest: the machine is shared, so only ratios from this one run "
           "are compared). 8192 tokens per step (B·T = 8192), d = 256, vocabulary 256.", ""]

    out += ["Parameters and the memory that does not depend on T (fp32; AdamW keeps m and v):", "",
            "| model | parameters | parameters MB | gradients MB | AdamW state MB |", "|---|---:|---:|---:|---:|"]
    for m in models:
        r = best[("train", m, LENGTHS[0])]
        out.append(f"| {m} | {int(r['parameters']):,} | {mb(r['parameter_bytes'])} | {mb(r['gradient_bytes'])} "
                   f"| {mb(r['optimizer_bytes'])} |".replace(",", " "))

    out += ["", "Training step (forward, backward, AdamW): tokens/s, and peak workspace MB (the arena's exact "
            "high-water mark: activations and scratch, parameters not included):", "",
            "| model | " + " | ".join(f"T = {t} (B = {8192 // t})" for t in LENGTHS) + " |",
            "|---|" + "---:|" * len(LENGTHS)]
    for m in models:
        cells = [f"{best[('train', m, t)]['tokens/s']:.0f} / {mb(best[('train', m, t)]['peak_workspace_bytes'])} MB"
                 for t in LENGTHS]
        out.append(f"| {m} | " + " | ".join(cells) + " |")

    out += ["", "Forward with the loss (no gradients): tokens/s, peak workspace MB, and GFLOP/s of the counted "
            "matrix products and FFTs:", "",
            "| model | " + " | ".join(f"T = {t}" for t in LENGTHS) + " |", "|---|" + "---:|" * len(LENGTHS)]
    for m in models:
        cells = []
        for t in LENGTHS:
            r = best[("forward", m, t)]
            cells.append(f"{r['tokens/s']:.0f} / {mb(r['peak_workspace_bytes'])} MB / "
                         f"{forward_flops(r) / (r['real_time'] / 1e3) / 1e9:.0f}")
        out.append(f"| {m} | " + " | ".join(cells) + " |")

    out += ["", "**PHA ÷ attention-only, same run** (throughput: > 1 is PHA faster; memory: < 1 is PHA smaller; "
            "\"counted work\" is the baseline's counted forward FLOPs ÷ PHA's: the throughput ratio if every FLOP ran "
            "equally fast; \"training memory\" adds parameters, gradients and AdamW state to the peak workspace):", "",
            "| T | baseline | train tokens/s | forward tokens/s | counted work | peak workspace | training memory "
            "| paper: throughput | paper: memory |", "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for t in LENGTHS:
        p, pf = best[("train", "pha", t)], best[("forward", "pha", t)]
        for base in BASELINES:
            if ("train", base, t) not in best:
                continue
            b, bf = best[("train", base, t)], best[("forward", base, t)]
            paper_t = f"{PAPER_THROUGHPUT[t]:.3f}" if t in PAPER_THROUGHPUT else ""
            paper_m = f"{PAPER_MEMORY[t]:.3f}" if t in PAPER_MEMORY else ""
            out.append(f"| {t} | {base} | {p['tokens/s'] / b['tokens/s']:.3f} | {pf['tokens/s'] / bf['tokens/s']:.3f} "
                       f"| {forward_flops(b) / forward_flops(p):.3f} "
                       f"| {p['peak_workspace_bytes'] / b['peak_workspace_bytes']:.3f} "
                       f"| {training_bytes(p) / training_bytes(b):.3f} | {paper_t} | {paper_m} |")

    out += ["", "Per-branch breakdown of each model's forward (summed over its layers): counted GFLOP, score "
            "entries (visible under the branch's mask, × B × heads, millions) and the MB each group of "
            "allocations held at the training step's peak workspace (measured by label):", "",
            "| model | branch | " + " | ".join(f"T = {t}: GFLOP / M entries / MB" for t in LENGTHS) + " |",
            "|---|---|" + "---:|" * len(LENGTHS)]
    for m in models:
        r0 = best[("train", m, LENGTHS[0])]
        groups = [k.split(":", 1)[1] for k in r0 if k.startswith("flops:")]
        groups += sorted({k.split(":", 1)[1] for t in LENGTHS for k in best[("train", m, t)]
                          if k.startswith("peak:") and k.split(":", 1)[1] not in groups})
        for g in groups:
            cells = []
            for t in LENGTHS:
                r = best[("train", m, t)]
                f = f"{r[f'flops:{g}'] / 1e9:.1f}" if f"flops:{g}" in r else "—"
                e = f"{r[f'entries:{g}'] / 1e6:.0f}" if f"entries:{g}" in r else "—"
                cells.append(f"{f} / {e} / {mb(r.get(f'peak:{g}', 0))}")
            out.append(f"| {m} | {g} | " + " | ".join(cells) + " |")

    positions = sorted({n for (k, _, n) in best if k == "decode"})
    decoders = [m for m in MODELS if ("decode", m, positions[0]) in best] if positions else []
    if decoders:
        out += ["", "Decoding, 1 thread: µs per token at position p (one token after p tokens, batch 1; the state "
                "restored between iterations, untimed):", "",
                "| model | " + " | ".join(f"p = {p}" for p in positions) + f" | p = {positions[-1]} ÷ p = {positions[1]} |",
                "|---|" + "---:|" * (len(positions) + 1)]
        for m in decoders:
            us = [best[("decode", m, p)]["us_per_token"] for p in positions]
            ratio = us[-1] / us[1]
            out.append(f"| {m} | " + " | ".join(f"{u:.0f}" for u in us) + f" | {ratio:.2f} |")
    return "\n".join(out)


def plot(best, png):
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.3))
    for m in MODELS:
        if ("train", m, LENGTHS[0]) not in best:
            continue
        style = dict(marker="o", label=m, color=f"C{MODELS.index(m)}")  # one colour per model in every panel
        axes[0].plot(LENGTHS, [best[("train", m, t)]["tokens/s"] for t in LENGTHS], **style)
        axes[1].plot(LENGTHS, [best[("train", m, t)]["peak_workspace_bytes"] / 1e6 for t in LENGTHS], **style)
        positions = sorted(n for (k, mm, n) in best if k == "decode" and mm == m)
        if positions:
            axes[2].plot(positions, [best[("decode", m, p)]["us_per_token"] for p in positions], **style)
    titles = ["training step, tokens/s (8192 tokens per step)", "training step, peak workspace (MB)",
              "decoding, µs per token at position p"]
    for ax, title, xlabel in zip(axes, titles, ["T", "T", "position p"]):
        ax.set_xscale("log", base=2)
        ax.set_xlabel(xlabel)
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default="build/bench/hybridseq-bench")
    ap.add_argument("--repetitions", type=int, default=2)
    ap.add_argument("--json", default="long_context.json", help="where the run's JSON goes")
    ap.add_argument("--from-json", help="write from this JSON instead of running")
    ap.add_argument("--results", default="docs/results.md")
    ap.add_argument("--png", default="docs/results_long_context.png")
    args = ap.parse_args()
    if args.from_json:
        src = args.from_json
    else:
        run(args.bench, args.repetitions, args.json)
        src = args.json
    context, best, spread = load(src)
    command = "python3 scripts/long_context.py" + (f" --repetitions {args.repetitions}" if args.repetitions != 2 else "")
    block = tables(context, best, spread, command)
    plot(best, args.png)
    with open(args.results) as f:
        text = f.read()
    if BEGIN not in text or END not in text:
        sys.exit(f"{args.results} has no {BEGIN} … {END} section to replace")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    with open(args.results, "w") as f:
        f.write(head + BEGIN + "\n" + block + "\n\n" + "![long-context](" + os.path.basename(args.png) + ")\n" + END
                + tail)


if __name__ == "__main__":
    main()
