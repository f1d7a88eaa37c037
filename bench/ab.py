#!/usr/bin/env python3
"""A/B two hybridseq-bench binaries on a shared, noisy machine.

The two binaries run in turn, round after round, for each thread count, so that a slow spell
of the host falls on both; each benchmark's fastest and median round are reported with the
ratio A ÷ B (> 1: B is faster). Typical use, keeping the binary of the commit before a change:

    cp build/bench/hybridseq-bench /tmp/bench-before   # then rebuild
    python3 bench/ab.py /tmp/bench-before build/bench/hybridseq-bench \\
        --filter 'text_lm_train/' --threads 1 2 --rounds 5

Standard library only. Exits non-zero when a binary fails or reports no benchmark.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def run(binary, bench_filter, threads, min_time):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    env.setdefault("GOMP_SPINCOUNT", "1000")  # the tools' setting (docs/design.md, "Threads")
    cmd = [binary, f"--benchmark_filter={bench_filter}", f"--benchmark_min_time={min_time}",
           "--benchmark_format=json"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"ab.py: {' '.join(cmd)} exited with {done.returncode}:\n{done.stderr[-2000:]}")
    try:
        benchmarks = json.loads(done.stdout)["benchmarks"] if done.stdout.strip() else []
    except (json.JSONDecodeError, KeyError) as e:
        sys.exit(f"ab.py: {binary} printed no benchmark JSON ({e}):\n{done.stderr[-2000:]}")
    times = {}
    for b in benchmarks:
        if b.get("run_type", "iteration") == "iteration":
            unit = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b["time_unit"]]
            times[b["name"]] = b["real_time"] * unit
    if not times:
        sys.exit(f"ab.py: {binary} ran no benchmark matching {bench_filter!r}")
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", help="binary A (e.g. before a change)")
    parser.add_argument("b", help="binary B (e.g. after)")
    parser.add_argument("--filter", required=True, help="Google Benchmark filter")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--min-time", type=float, default=0.3, help="--benchmark_min_time per run")
    args = parser.parse_args()
    if args.rounds < 1:
        sys.exit(f"ab.py: --rounds must be at least 1, got {args.rounds}")

    samples = {}  # (threads, name, "A" | "B") -> [ms per round]
    for r in range(args.rounds):
        for threads in args.threads:
            for label, binary in (("A", args.a), ("B", args.b)):
                print(f"round {r + 1}/{args.rounds}, {threads} thread(s), {label} ...", file=sys.stderr)
                for name, ms in run(binary, args.filter, threads, args.min_time).items():
                    samples.setdefault((threads, name, label), []).append(ms)

    print(f"A = {args.a}, B = {args.b}; {args.rounds} alternating rounds; ms; A ÷ B > 1: B is faster\n")
    print("| benchmark | threads | A fastest | B fastest | A ÷ B (fastest) | A median | B median | A ÷ B (median) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    names = sorted({(t, n) for (t, n, _) in samples})
    for threads, name in names:
        a, b = samples.get((threads, name, "A")), samples.get((threads, name, "B"))
        if not a or not b:
            print(f"| `{name}` | {threads} | only in {'A' if a else 'B'} | | | | | |")
            continue
        fa, fb, ma, mb = min(a), min(b), statistics.median(a), statistics.median(b)
        print(f"| `{name}` | {threads} | {fa:.1f} | {fb:.1f} | {fa / fb:.3f} | {ma:.1f} | {mb:.1f} | {ma / mb:.3f} |")


if __name__ == "__main__":
    main()
