#!/usr/bin/env python3
"""Markdown table of hybridseq-ablate results over seeds: one row per architecture label
(mean ± sample standard deviation of char and string accuracy and final loss), from one or
more --json files (rows with the same label, learning rate and different seeds are pooled).

When the files were run at different learning rates (--lr), every row carries its rate, and a
second table keeps, per architecture, the rate with the best mean char accuracy (ties: the
lower mean final loss) — a per-model learning-rate sweep, as the authors' --auto_lr.

  python3 scripts/sweep_table.py a.json b.json > table.md
"""
import json
import statistics
import sys


def main(paths):
    rows, order, rates = {}, [], set()
    for path in paths:
        with open(path) as f:
            run = json.load(f)
        rates.add(run["lr"])
        for r in run["results"]:
            key = (r["arch"].split(" seed=")[0], run["lr"])
            if key not in rows:
                rows[key] = []
                order.append(key)
            rows[key].append(r)
    by_rate = len(rates) > 1

    def stat(values, digits):
        if len(values) == 1:
            return f"{values[0]:.{digits}f}"
        return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"

    def longer(r):
        lengths = r["length_generalisation"]
        return sum(x["accuracy"]["char"] for x in lengths) / max(1, len(lengths))

    lengths = "/".join(str(x["length"]) for x in rows[order[0]][0].get("length_generalisation", []))
    rate_head, rate_rule = ("lr | ", "---:|") if by_rate else ("", "")

    def table(keys):
        print(f"| architecture | {rate_head}parameters | seeds | final loss | char acc. | string acc. | "
              f"char acc. at {lengths} |")
        print(f"|---|{rate_rule}---:|---:|---:|---:|---:|---:|")
        for key in keys:
            v = rows[key]
            rate = f"{key[1]:g} | " if by_rate else ""
            print(f"| {key[0]} | {rate}{v[0]['parameters']} | {len(v)} | {stat([r['final_loss'] for r in v], 4)} | "
                  f"{stat([r['accuracy']['char'] for r in v], 3)} | {stat([r['accuracy']['string'] for r in v], 3)} | "
                  f"{stat([longer(r) for r in v], 3)} |")

    if not by_rate:
        table(order)
        return
    first = {}  # each label's rows together, in the order labels first appeared, by rate
    for i, key in enumerate(order):
        first.setdefault(key[0], i)
    table(sorted(order, key=lambda k: (first[k[0]], k[1])))
    best = {}
    for key in order:
        v = rows[key]
        score = (statistics.mean(r["accuracy"]["char"] for r in v), -statistics.mean(r["final_loss"] for r in v))
        if key[0] not in best or score > best[key[0]][0]:
            best[key[0]] = (score, key)
    print()
    print("Best learning rate per architecture (highest mean char accuracy):")
    print()
    table([best[label][1] for label in first])


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
