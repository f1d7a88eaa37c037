#!/usr/bin/env python3
"""Markdown table of hybridseq-ablate results over seeds: one row per architecture label
(mean ± sample standard deviation of char and string accuracy and final loss), from one or
more --json files (rows with the same label and different seeds are pooled).

  python3 scripts/sweep_table.py a.json b.json > table.md
"""
import json
import statistics
import sys


def main(paths):
    rows, order = {}, []
    for path in paths:
        with open(path) as f:
            for r in json.load(f)["results"]:
                label = r["arch"].split(" seed=")[0]
                if label not in rows:
                    rows[label] = []
                    order.append(label)
                rows[label].append(r)

    def stat(values, digits):
        if len(values) == 1:
            return f"{values[0]:.{digits}f}"
        return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"

    print("| architecture | parameters | seeds | final loss | char acc. | string acc. | char acc. at "
          + "/".join(str(x["length"]) for x in rows[order[0]][0].get("length_generalisation", [])) + " |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label in order:
        v = rows[label]
        longer = [sum(x["accuracy"]["char"] for x in r["length_generalisation"]) / max(1, len(r["length_generalisation"]))
                  for r in v]
        print(f"| {label} | {v[0]['parameters']} | {len(v)} | {stat([r['final_loss'] for r in v], 4)} | "
              f"{stat([r['accuracy']['char'] for r in v], 3)} | {stat([r['accuracy']['string'] for r in v], 3)} | "
              f"{stat(longer, 3)} |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
