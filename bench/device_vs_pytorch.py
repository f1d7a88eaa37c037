#!/usr/bin/env python3
"""hybridseq on a GPU against PyTorch on the same GPU and shapes, in one run (scripts/device-check.sh).

    python3 bench/device_vs_pytorch.py --bench build-cuda/bench/hybridseq-device-bench --out DIR

Runs hybridseq-device-bench (Google Benchmark JSON into DIR/hybridseq-device-bench.json), then
PyTorch on the same shapes, and writes DIR/device_vs_pytorch.md and .json: one row per workload,
both times, PyTorch ÷ ours (> 1: ours is faster) and each side's rate. Every PyTorch time is the
least of 3 means over ≥ 0.2 s of calls, each call ending in torch.cuda.synchronize() (ours fences
after each call too). Workloads (bench/device/device_benchmarks.cpp says what ours runs):

  copy               1 GiB device-to-device copy: the bandwidth yardstick of this run
  gemm               torch.mm, fp32 exact (allow_tf32 off), TF32 and on bf16 tensors, 4096³ and
                     8192×768→3072
  causal attention   F.scaled_dot_product_attention(is_causal=True) in fp32 (H 16, Dh 64) and in
                     bf16 (also H 8, Dh 128), B·T = 16384 at T 1024 and 4096, forward and
                     forward + backward (the bf16 rows compare our tensor-core kernels with
                     SDPA's bf16)
  selective scan     mamba-ssm's reference recurrence (bench/torch_workloads.py: a loop over
                     time; PyTorch has no scan), B 8, T 2048, Di 2048, N 16; ours also as GB/s
                     against the copy's
  training step      the 135 M-parameter NeoX Transformer (bench/torch_models.py's NeoxLayer at D 768,
                     12 heads × 64, 12 layers, V 32768), B 8, T 1024: forward, cross-entropy,
                     backward, clip_grad_norm_(1), AdamW(fused); fp32, TF32, and bf16 autocast
                     (against ours with bf16 GEMMs and bf16 attention products, fp32 tensors)
"""
import argparse
import json
import os
import subprocess
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_models  # noqa: E402
import torch_workloads  # noqa: E402

DEV = "cuda"
WIDTH, TOKENS = 1024, 16384  # heads × head dim (16 × 64, 8 × 128); B·T
SCAN = dict(b=8, t=2048, di=2048, n=16)
MODEL = dict(vocab=32768, d=768, heads=12, head_dim=64, layers=12, b=8, t=1024)


def timed(f):
    def call():
        f()
        torch.cuda.synchronize()
    return torch_workloads.best(call)


def set_tf32(on):
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def copy():
    a = torch.ones(1 << 28, device=DEV)
    b = torch.empty_like(a)
    return timed(lambda: b.copy_(a))


def gemm(m, n, k, math):
    """torch.mm in fp32, TF32, or on bf16 tensors (ours keeps fp32 tensors and rounds as cuBLAS reads)."""
    set_tf32(math == "tf32")
    dtype = torch.bfloat16 if math == "bf16" else torch.float32
    a, b = torch.randn(m, k, device=DEV, dtype=dtype), torch.randn(k, n, device=DEV, dtype=dtype)
    c = torch.empty(m, n, device=DEV, dtype=dtype)
    s = timed(lambda: torch.mm(a, b, out=c))
    set_tf32(False)
    return s


def attention(t, dh, backward, dtype):
    b = TOKENS // t
    q, k, v = (torch.randn(b, WIDTH // dh, t, dh, device=DEV, dtype=dtype, requires_grad=backward)
               for _ in range(3))
    do = torch.randn_like(q)

    def run():
        if backward:
            F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(do)
        else:
            with torch.no_grad():
                F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return timed(run)


def scan(backward):
    return timed(torch_workloads.selective_scan(backward, t=SCAN["t"], di=SCAN["di"], n=SCAN["n"], b=SCAN["b"],
                                                device=DEV))


def train_step(precision):
    m = MODEL
    set_tf32(precision == "tf32")
    layers = [torch_models.NeoxLayer(m["d"], m["heads"], m["head_dim"]) for _ in range(m["layers"])]
    model = torch_models.LanguageModel(m["vocab"], layers, torch.nn.LayerNorm(m["d"]), d=m["d"]).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    ids = torch.randint(0, m["vocab"], (m["b"], m["t"]), device=DEV)
    targets = torch.roll(ids, -1, dims=1)

    def run():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
            logits = model(ids)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    s = timed(run)
    set_tf32(False)
    return s, sum(p.numel() for p in model.parameters())


def run_ours(bench, out):
    path = os.path.join(out, "hybridseq-device-bench.json")
    subprocess.run([bench, f"--benchmark_out={path}", "--benchmark_out_format=json"], check=True)
    with open(path) as f:
        runs = json.load(f)["benchmarks"]
    unit = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    return {r["name"]: (r["real_time"] * unit[r["time_unit"]], r) for r in runs if r.get("run_type") == "iteration"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", required=True, help="hybridseq-device-bench of the CUDA build")
    ap.add_argument("--out", required=True, help="folder for the JSON and the Markdown table")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    mine = run_ours(args.bench, args.out)

    rows = []  # (workload, ours name, torch seconds, note)

    def row(workload, name, torch_seconds, rate_key=None, note=""):
        s, r = mine.get(name, (None, {}))
        rows.append({"workload": workload, "ours_s": s, "torch_s": torch_seconds,
                     "torch_over_ours": (torch_seconds / s) if s else None,
                     "ours_rate": r.get(rate_key) if rate_key else None, "rate": rate_key or "", "note": note})

    copy_s = copy()
    row("copy 1 GiB", "copy/MiB:1024/real_time", copy_s, "GB/s", f"torch {2 * 4 * (1 << 28) / copy_s * 1e-9:.0f} GB/s")
    for (m, n, k) in [(4096, 4096, 4096), (8192, 3072, 768)]:
        for code, math in enumerate(("fp32", "tf32", "bf16")):
            s = gemm(m, n, k, math)
            row(f"gemm {m}x{n}x{k} {math}", f"gemm/M:{m}/N:{n}/K:{k}/math:{code}/real_time", s,
                "TFLOP/s", f"torch {2.0 * m * n * k / s * 1e-12:.1f} TFLOP/s")
    for t in (1024, 4096):
        for backward in (False, True):
            kind = "fwd_bwd" if backward else "fwd"
            # fp32 at Dh 64; bf16 (our tensor-core kernels against SDPA's bf16) at Dh 64 and 128
            for dtype, label, dh in ((torch.float32, "fp32", 64), (torch.bfloat16, "bf16", 64),
                                     (torch.bfloat16, "bf16", 128)):
                visible = (TOKENS // t) * (WIDTH // dh) * t * (t + 1) / 2
                flop = (3.5 if backward else 1.0) * 4.0 * visible * dh
                s = attention(t, dh, backward, dtype)
                bench_name = f"attention_{kind}_bf16" if label == "bf16" else f"attention_{kind}"
                row(f"causal attention T={t} Dh={dh} {kind}, {label}", f"{bench_name}/causal/T:{t}/Dh:{dh}/real_time", s,
                    "TFLOP/s", f"torch {flop / s * 1e-12:.1f} TFLOP/s")
    for backward in (False, True):
        kind = "fwd_bwd" if backward else "fwd"
        s = scan(backward)
        name = f"selective_scan_{kind}/B:{SCAN['b']}/T:{SCAN['t']}/Di:{SCAN['di']}/real_time"
        ours_gbs = mine.get(name, (None, {}))[1].get("GB/s")
        copy_gbs = mine.get("copy/MiB:1024/real_time", (None, {}))[1].get("GB/s")
        note = f"ours {ours_gbs / copy_gbs:.0%} of our copy's GB/s" if ours_gbs and copy_gbs else ""
        row(f"selective scan {kind} (torch: reference loop)", name, s, "GB/s", note)
    # torch's bf16 is autocast; ours keeps fp32 tensors with bf16 GEMMs and bf16 attention products.
    for precision, gemm_math, attention_bf16 in (("fp32", 0, 0), ("tf32", 1, 0), ("bf16", 2, 1)):
        s, params = train_step(precision)
        tokens = MODEL["b"] * MODEL["t"]
        row(f"training step 135M Transformer, {precision}",
            f"train_step/transformer/B:{MODEL['b']}/T:{MODEL['t']}/gemm:{gemm_math}/attention_bf16:{attention_bf16}"
            "/iterations:3/real_time", s, "tokens/s", f"torch {tokens / s:.0f} tokens/s, {params / 1e6:.1f} M parameters")

    gpu = torch.cuda.get_device_name()
    lines = [f"# hybridseq vs PyTorch {torch.__version__} on {gpu}", "",
             "| workload | ours (ms) | PyTorch (ms) | PyTorch ÷ ours | ours | PyTorch / note |",
             "|---|---:|---:|---:|---|---|"]
    for r in rows:
        ours_ms = f"{r['ours_s'] * 1e3:.3f}" if r["ours_s"] else "missing"
        ratio = f"{r['torch_over_ours']:.3f}" if r["torch_over_ours"] else ""
        rate = f"{r['ours_rate']:.1f} {r['rate']}" if r["ours_rate"] is not None else ""
        lines.append(f"| {r['workload']} | {ours_ms} | {r['torch_s'] * 1e3:.3f} | {ratio} | {rate} | {r['note']} |")
    table = "\n".join(lines) + "\n"
    print(table)
    with open(os.path.join(args.out, "device_vs_pytorch.md"), "w") as f:
        f.write(table)
    with open(os.path.join(args.out, "device_vs_pytorch.json"), "w") as f:
        json.dump({"gpu": gpu, "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
