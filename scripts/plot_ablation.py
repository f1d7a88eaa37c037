#!/usr/bin/env python3
"""Turns hybridseq-ablate's JSON results into a PNG: training-loss curves (left) and char
accuracy at the training lengths and at each longer length (right).

    hybridseq-ablate --json results.json && python3 scripts/plot_ablation.py results.json out.png

Needs matplotlib (pip install matplotlib)."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def smooth(values, window):
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def main(src, dst):
    with open(src) as f:
        data = json.load(f)
    results = data["results"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for r in results:
        curve = r["loss_curve"]
        left.plot(smooth(curve, max(1, len(curve) // 50)), label=f'{r["arch"]} ({r["parameters"]} params)')
    left.set_xlabel("step")
    left.set_ylabel("training loss (smoothed)")
    left.set_title(f'{data["task"]}: training loss')
    left.legend(fontsize=8)
    for r in results:
        lengths = [sum(data["train_lengths"]) / 2] + [x["length"] for x in r.get("length_generalisation", [])]
        accs = [r["accuracy"]["char"]] + [x["accuracy"]["char"] for x in r.get("length_generalisation", [])]
        right.plot(lengths, accs, marker="o", label=r["arch"])
    right.axvspan(*data["train_lengths"], color="0.9", label="training lengths")
    right.set_xlabel("sequence length")
    right.set_ylabel("char accuracy")
    right.set_ylim(0, 1.02)
    right.set_title("accuracy vs length")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(dst, dpi=120)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
