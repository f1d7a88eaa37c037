#!/usr/bin/env python3
"""Plots the training-loss curves of text_lm runs (one JSON per architecture) into a PNG.

    text_lm --arch transformer --json t.json; text_lm --arch pha --json p.json
    python3 scripts/plot_text_lm.py out.png t.json p.json

Needs matplotlib (pip install matplotlib)."""
import json
import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(dst, sources):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for src in sources:
        with open(src) as f:
            r = json.load(f)
        curve = r["loss_curve"]
        w = max(1, len(curve) // 30)
        smooth = [sum(curve[max(0, i - w + 1): i + 1]) / (i + 1 - max(0, i - w + 1)) for i in range(len(curve))]
        bpb = [x / math.log(2) for x in smooth]
        ax.plot(bpb, label=f'{r["arch"]} ({r["parameters"] / 1e6:.2f} M, valid {r["valid"]["bits_per_byte"]:.3f} bpb)')
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (bits per byte, smoothed)")
    ax.set_title("byte-level LM on the King James Bible")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(dst, dpi=120)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
