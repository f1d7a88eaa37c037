#!/usr/bin/env python3
"""hybridseq against PyTorch eager on the same shapes and threads, interleaved in one run.

    python3 bench/vs_pytorch.py --bench build/bench/hybridseq-bench [--rounds 3] [--json out.json]
    python3 bench/vs_pytorch.py --bench build/bench/hybridseq-bench --check-names   # ctest: no torch

Needs PyTorch (from PyPI; CI does not run this). For each round and each thread count (1, 2),
one process of ours (hybridseq-bench, the OpenMP space with OMP_NUM_THREADS threads) and one of
PyTorch (torch.set_num_threads) run every workload, alternating, so that a neighbour's load
hits both alike; each side keeps its best round. Within a process both sides take the least of
3 repetitions, each the mean time per call over >= 0.2 s. Then, with a spin loop pinned to one core
(a "busy neighbour"), the training steps on 2 threads run again, interleaved the same way.

Workloads (float32; PyTorch side as a user who wants speed writes it):
  linear            torch.addmm into a preallocated output (ours writes its buffer too), 4096
                    rows, 256→768 and 768→3072, forward
  causal attention  F.scaled_dot_product_attention(is_causal=True), B 1, H 8, Dh 64,
                    T 1024 and 4096, forward (no_grad) and forward + backward
  sliding window    SDPA with a boolean band mask of 256 keys, T 4096
  selective scan    mamba-ssm's reference recurrence (selective_scan_ref: a loop over time;
                    PyTorch has no scan built-in), B 1, T 4096, Di 512, N 16
  training step     text_lm's Transformer / PHA / ECP (bench/torch_models.py: independent
                    modules of the same math and parameter count, checked against
                    tests/reference), B 16, T 128: forward, cross-entropy, backward,
                    clip_grad_norm_(1), AdamW(fused) step
  decoding          text_lm's Transformer, 256 tokens one at a time with a KV cache

Prints one Markdown table: times, PyTorch ÷ ours (> 1: ours is faster), and GFLOP/s as % of
this machine's FMA peak (yardstick/fma_peak of hybridseq-bench, the widest ISA). Training
FLOPs are PyTorch's FlopCounterMode count of forward + backward (matrix products and
attention, every SDPA call as a full T × T, causal or masked; GSS's FFTs are not counted), the
same for both sides, so training's % of peak is an upper estimate for both.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
THREADS = [1, 2]
H, DH = 8, 64
WINDOW = 256
ARCHS = ["transformer", "pha", "ecp"]
TRAIN_B, TRAIN_T, DECODE_TOKENS = 16, 128, 256


def attention_flops(t, window=None):
    """Q·Kᵀ and P·V over the visible entries, 2 FLOPs per multiply-add, all heads."""
    visible = t * (t + 1) // 2 if window is None else sum(min(i + 1, window) for i in range(t))
    return 4.0 * visible * DH * H


# Row key → (our benchmark name with {space} for the space/threads suffix, FLOPs or None).
# A "+" joins names whose times add up (the kernel benchmarks time forward and backward apart).
def workloads():
    rows = {}
    for shape, (i, o) in {"256x768": (256, 768), "768x3072": (768, 3072)}.items():
        rows[f"linear {shape} fwd"] = ([f"linear_fwd/{shape}/T:4096{{space}}"], 2.0 * 4096 * i * o)
    for t in (1024, 4096):
        fwd, bwd = f"attention_fwd/causal{{space}}/T:{t}", f"attention_bwd/causal{{space}}/T:{t}"
        rows[f"causal attention T={t} fwd"] = ([fwd], attention_flops(t))
        rows[f"causal attention T={t} fwd+bwd"] = ([fwd, bwd], 3.5 * attention_flops(t))
    fwd, bwd = (f"attention_{k}/sliding_window:{WINDOW}{{space}}/T:4096" for k in ("fwd", "bwd"))
    rows["sliding window 256, T=4096 fwd"] = ([fwd], attention_flops(4096, WINDOW))
    rows["sliding window 256, T=4096 fwd+bwd"] = ([fwd, bwd], 3.5 * attention_flops(4096, WINDOW))
    fwd, bwd = (f"selective_scan_{k}/B:1/T:4096/Di:512/N:16{{space}}/4096/512" for k in ("fwd", "bwd"))
    rows["selective scan fwd"] = ([fwd], None)
    rows["selective scan fwd+bwd"] = ([fwd, bwd], None)
    for arch in ARCHS:
        rows[f"training step {arch}"] = ([f"text_lm_train/{arch}/B:{TRAIN_B}/T:{TRAIN_T}"], "train:" + arch)
    rows["decoding 256 tokens transformer"] = ([f"text_lm_decode/transformer/tokens:{DECODE_TOKENS}"], None)
    return rows


def env_for(threads, **extra):
    return dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_PROC_BIND="false", **extra)


def run_ours(bench, threads, only=None):
    """Seconds per call of each row (and the FMA peak), one hybridseq-bench process."""
    rows = {k: v for k, v in workloads().items() if only is None or k in only}
    space = f"/space:OpenMP/threads:{threads}"
    names = {n.format(space=space) for parts, _ in rows.values() for n in parts}
    if only is None:
        names.add(f"yardstick/fma_peak/.*{space}")
    pattern = "^(" + "|".join(sorted(names)) + ")/(real|manual)_time$"
    # The least of 3 repetitions, each a mean over >= 0.2 s: torch_workloads.best's statistic.
    out = subprocess.run([bench, f"--benchmark_filter={pattern}", "--benchmark_format=json",
                          "--benchmark_min_time=0.2", "--benchmark_repetitions=3"], env=env_for(threads), check=True,
                         capture_output=True, text=True).stdout
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    got, peak = {}, 0.0
    for b in json.loads(out[out.index("{"):])["benchmarks"]:
        if b.get("run_type") == "aggregate":
            continue
        name = b["run_name"].rsplit("/", 1)[0]  # less /real_time
        got[name] = min(got.get(name, 1e30), b["real_time"] * scale[b["time_unit"]])
        if b["name"].startswith("yardstick/fma_peak"):
            peak = max(peak, b["FLOP/s"])
    times = {}
    for key, (parts, _) in rows.items():
        missing = [p.format(space=space) for p in parts if p.format(space=space) not in got]
        if missing:
            sys.exit(f"vs_pytorch: hybridseq-bench reported no {missing} (is the build current?)")
        times[key] = sum(got[p.format(space=space)] for p in parts)
    return times, peak


def check_names(bench):
    """Every benchmark this script reads is one hybridseq-bench registers (no PyTorch needed:
    ctest runs this)."""
    missing = []
    for threads in THREADS:
        out = subprocess.run([bench, "--benchmark_list_tests"], env=env_for(threads), check=True, capture_output=True,
                             text=True).stdout
        listed = {line.rsplit("/", 1)[0] for line in out.split()}  # less /real_time, /manual_time
        space = f"/space:OpenMP/threads:{threads}"
        wanted = {n.format(space=space) for parts, _ in workloads().values() for n in parts}
        missing += sorted(wanted - listed)
        if not any(n.startswith("yardstick/fma_peak/") and n.endswith(space) for n in listed):
            missing.append(f"yardstick/fma_peak/...{space}")
    if missing:
        sys.exit("vs_pytorch: hybridseq-bench registers none of " + ", ".join(missing))
    print(f"vs_pytorch: all {len(workloads())} workloads' benchmarks are registered, on 1 and 2 threads")


def run_torch(threads, only=None, **extra_env):
    args = [sys.executable, os.path.join(HERE, "torch_workloads.py"), str(threads)] + (list(only) if only else [])
    out = subprocess.run(args, env=env_for(threads, **extra_env), check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def spin_neighbour():
    """A busy process pinned to the last core: a shell loop that never sleeps."""
    core = max(os.sched_getaffinity(0))
    return subprocess.Popen(["sh", "-c", "while :; do :; done"], preexec_fn=lambda: os.sched_setaffinity(0, {core}))


def best(a, b):
    return {k: min(a.get(k, 1e30), b[k]) for k in b}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default="build/bench/hybridseq-bench")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", help="also write every measured time here")
    ap.add_argument("--check-names", action="store_true", help="only check that the bench has every workload")
    args = ap.parse_args()
    if args.check_names:
        return check_names(args.bench)
    ours = {n: {} for n in THREADS}
    torch_ = {n: {} for n in THREADS}
    peak = {n: 0.0 for n in THREADS}
    for r in range(args.rounds):
        for n in THREADS:
            print(f"round {r + 1}/{args.rounds}, {n} thread(s) ...", file=sys.stderr, flush=True)
            o, p = run_ours(args.bench, n)
            ours[n], peak[n] = best(ours[n], o), max(peak[n], p)
            torch_[n] = best(torch_[n], run_torch(n))
    flops = json.loads(subprocess.run([sys.executable, os.path.join(HERE, "torch_workloads.py"), "--flops"],
                                      check=True, capture_output=True, text=True).stdout)
    # Beside the spinner. hybridseq-bench runs with the tools' GOMP_SPINCOUNT=1000; PyTorch (whose
    # wheel brings its own libgomp) runs as users get it and, for a like-for-like view, with the
    # same spin count (its idle times with it measured here too).
    train_rows = [f"training step {a}" for a in ARCHS]
    spin = dict(GOMP_SPINCOUNT="1000")
    idle_torch_spin, loaded_ours, loaded_torch, loaded_torch_spin = {}, {}, {}, {}
    for r in range(args.rounds):
        idle_torch_spin = best(idle_torch_spin, run_torch(2, train_rows, **spin))
    neighbour = spin_neighbour()
    try:
        for r in range(args.rounds):
            print(f"busy neighbour round {r + 1}/{args.rounds} ...", file=sys.stderr, flush=True)
            loaded_ours = best(loaded_ours, run_ours(args.bench, 2, train_rows)[0])
            loaded_torch = best(loaded_torch, run_torch(2, train_rows))
            loaded_torch_spin = best(loaded_torch_spin, run_torch(2, train_rows, **spin))
    finally:
        neighbour.kill()

    def gflops(key, seconds):
        f = workloads()[key][1]
        f = flops[f.split(":")[1]] if isinstance(f, str) else f
        return None if f is None else f / seconds * 1e-9

    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"hybridseq vs PyTorch {__import__('torch').__version__} eager, float32, best of {args.rounds} interleaved "
          f"rounds ({stamp}); FMA peak {peak[1] * 1e-9:.0f} GFLOP/s on 1 thread, {peak[2] * 1e-9:.0f} on 2\n")
    print("| workload | threads | ours ms | PyTorch ms | PyTorch ÷ ours | ours % of FMA peak | PyTorch % of peak |")
    print("|---|---|---|---|---|---|---|")
    for key in workloads():
        for n in THREADS:
            o, t = ours[n][key], torch_[n][key]
            go, gt = gflops(key, o), gflops(key, t)
            pct = (lambda g: "" if g is None else f"{100 * g * 1e9 / peak[n]:.0f} %")
            print(f"| {key} | {n} | {o * 1e3:.2f} | {t * 1e3:.2f} | {t / o:.2f} | {pct(go)} | {pct(gt)} |")
    print("\nBeside a busy neighbour (a spin loop pinned to one core), 2 threads: slowdown = loaded ÷ idle time; "
          "ours with the tools' GOMP_SPINCOUNT=1000, PyTorch as installed and with GOMP_SPINCOUNT=1000\n")
    print("| training step | ours slowdown | PyTorch slowdown | PyTorch slowdown, spin 1000 | PyTorch ÷ ours, loaded "
          "| PyTorch (spin 1000) ÷ ours, loaded |")
    print("|---|---|---|---|---|---|")
    for key in train_rows:
        print(f"| {key.split()[-1]} | {loaded_ours[key] / ours[2][key]:.2f} | {loaded_torch[key] / torch_[2][key]:.2f} "
              f"| {loaded_torch_spin[key] / idle_torch_spin[key]:.2f} | {loaded_torch[key] / loaded_ours[key]:.2f} "
              f"| {loaded_torch_spin[key] / loaded_ours[key]:.2f} |")
    print("\nDecoding on 2 threads ÷ 1 thread (ours, time; ≤ 1: 2 threads not slower): "
          f"{ours[2]['decoding 256 tokens transformer'] / ours[1]['decoding 256 tokens transformer']:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ours": ours, "torch": torch_, "fma_peak": peak, "flops": flops,
                       "torch_spin_1000": {"idle": idle_torch_spin, "loaded": loaded_torch_spin},
                       "loaded": {"ours": loaded_ours, "torch": loaded_torch}}, f, indent=1)


if __name__ == "__main__":
    main()
