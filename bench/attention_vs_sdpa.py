#!/usr/bin/env python3
"""Causal attention, hybridseq's tiled kernel against torch SDPA, same shapes, same threads.

    python3 bench/attention_vs_sdpa.py --bench build/bench/hybridseq-bench [--rounds 3]

B = 1, H = 8, Dh = 64, float, T = 1024 and 4096, on 1 thread (our Serial space) and 2 threads
(our OpenMP space, OMP_NUM_THREADS=2; torch.set_num_threads(2)). Ours: the kernel benchmarks
attention_fwd/causal and attention_bwd/causal (fwd+bwd = the sum of their times). Torch:
scaled_dot_product_attention(is_causal=True) on (B, H, T, Dh) tensors, forward under no_grad,
and forward + backward. Runs alternate (ours, torch, ours, ...) so that a busy neighbour
slows both alike; each side keeps its best round. Prints a Markdown table of wall times, torch ÷
ours (> 1: ours is faster) and our forward GFLOP/s (2·T(T+1)·Dh·H, the visible entries'
Q·Kᵀ and P·V), and one of CPU times for the 1-thread runs.
"""
import argparse
import json
import os
import subprocess
import time

SHAPES = [1024, 4096]
THREADS = [1, 2]
H, DH = 8, 64


def ours(bench, threads, t):
    space = "Serial" if threads == 1 else "OpenMP"
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_PROC_BIND="false")
    filt = f"attention_(fwd|bwd)/causal/space:{space}/threads:{threads}/T:{t}/"
    out = subprocess.run([bench, f"--benchmark_filter={filt}", "--benchmark_format=json",
                          "--benchmark_min_time=0.3"], env=env, check=True, capture_output=True, text=True).stdout
    wall, cpu = {}, {}
    for b in json.loads(out[out.index("{"):])["benchmarks"]:
        kind = "fwd" if b["name"].startswith("attention_fwd") else "bwd"
        wall[kind], cpu[kind] = b["real_time"] * 1e-3, b["cpu_time"] * 1e-3  # ms → s
    return wall["fwd"], wall["fwd"] + wall["bwd"], cpu["fwd"], cpu["fwd"] + cpu["bwd"]


TORCH = r"""
import sys, time, torch
import torch.nn.functional as F
threads, t, h, dh = map(int, sys.argv[1:])
torch.set_num_threads(threads)
g = torch.Generator().manual_seed(0)
q, k, v, do = (torch.randn(1, h, t, dh, generator=g) for _ in range(4))
def best(f, min_time=0.3):
    f()
    n, start, b, c = 0, time.perf_counter(), 1e30, 1e30
    while n < 3 or time.perf_counter() - start < min_time:
        t0, c0 = time.perf_counter(), time.process_time()
        f()
        b, c, n = min(b, time.perf_counter() - t0), min(c, time.process_time() - c0), n + 1
    return b, c
def fwd():
    with torch.no_grad():
        F.scaled_dot_product_attention(q, k, v, is_causal=True)
qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
def fwd_bwd():
    F.scaled_dot_product_attention(qg, kg, vg, is_causal=True).backward(do)
(fw, fc), (bw, bc) = best(fwd), best(fwd_bwd)
print(fw, bw, fc, bc)
"""


def torch_times(threads, t):
    out = subprocess.run(["python3", "-c", TORCH, str(threads), str(t), str(H), str(DH)], check=True,
                         capture_output=True, text=True).stdout.split()
    return tuple(float(x) for x in out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default="build/bench/hybridseq-bench")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rows = []
    for threads in THREADS:
        for t in SHAPES:
            best_ours, best_torch = [1e30] * 4, [1e30] * 4
            for _ in range(args.rounds):
                best_ours = [min(a, b) for a, b in zip(best_ours, ours(args.bench, threads, t))]
                best_torch = [min(a, b) for a, b in zip(best_torch, torch_times(threads, t))]
            rows.append((threads, t, best_ours, best_torch))
    print(f"causal attention, B=1 H={H} Dh={DH} float, best of {args.rounds} interleaved rounds "
          f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})\n")
    print("| threads | T | ours fwd ms | SDPA fwd ms | fwd: SDPA ÷ ours | ours fwd+bwd ms | SDPA fwd+bwd ms "
          "| fwd+bwd: SDPA ÷ ours | ours fwd GFLOP/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for threads, t, o, p in rows:
        gflops = 2.0 * t * (t + 1) * DH * H / o[0] * 1e-9
        print(f"| {threads} | {t} | {o[0] * 1e3:.1f} | {p[0] * 1e3:.1f} | {p[0] / o[0]:.2f} | {o[1] * 1e3:.1f} | "
              f"{p[1] * 1e3:.1f} | {p[1] / o[1]:.2f} | {gflops:.0f} |")
    # On one thread, CPU time measures the kernel even where a neighbour takes turns on the core.
    print("\n1 thread, CPU time (ours: the benchmark's cpu_time; torch: time.process_time)\n")
    print("| T | ours fwd ms | SDPA fwd ms | fwd: SDPA ÷ ours | ours fwd+bwd ms | SDPA fwd+bwd ms "
          "| fwd+bwd: SDPA ÷ ours | ours fwd GFLOP/s |")
    print("|---|---|---|---|---|---|---|---|")
    for threads, t, o, p in rows:
        if threads == 1:
            gflops = 2.0 * t * (t + 1) * DH * H / o[2] * 1e-9
            print(f"| {t} | {o[2] * 1e3:.1f} | {p[2] * 1e3:.1f} | {p[2] / o[2]:.2f} | {o[3] * 1e3:.1f} | "
                  f"{p[3] * 1e3:.1f} | {p[3] / o[3]:.2f} | {gflops:.0f} |")


if __name__ == "__main__":
    main()
