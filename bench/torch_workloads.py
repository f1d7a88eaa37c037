#!/usr/bin/env python3
"""The PyTorch side of bench/vs_pytorch.py: times every workload in one process.

    python3 bench/torch_workloads.py <threads> [row ...]   # JSON {row: best seconds per call}
    python3 bench/torch_workloads.py --flops               # JSON {arch: training FLOPs per step}

Rows are bench/vs_pytorch.py's keys; with none given, every row runs.
"""
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_models  # noqa: E402

H, DH, WINDOW = 8, 64, 256
TRAIN_B, TRAIN_T, DECODE_TOKENS = 16, 128, 256
g = torch.Generator().manual_seed(0)


def randn(*shape, device="cpu"):
    return torch.randn(*shape, generator=g).to(device)


def best(f, repetitions=3, min_time=0.2):
    """Seconds per call of f(): after one warm-up call, the least of `repetitions` means, each over
    as many calls as fill min_time (at least one), as bench/vs_pytorch.py reads ours."""
    f()
    means = []
    for _ in range(repetitions):
        n, start = 0, time.perf_counter()
        while n == 0 or time.perf_counter() - start < min_time:
            f()
            n += 1
        means.append((time.perf_counter() - start) / n)
    return min(means)


def linear(i, o):
    """y = x Wᵀ + b into a preallocated y, as ours writes its output buffer."""
    x, w, b, y = randn(4096, i), randn(o, i), randn(o), torch.empty(4096, o)

    def run():
        torch.addmm(b, x, w.t(), out=y)
    return run


def attention(t, backward, window=None):
    q, k, v, do = (randn(1, H, t, DH) for _ in range(4))
    mask = None
    if window is not None:  # key j visible from query i when i - window < j <= i
        i = torch.arange(t)[:, None]
        j = torch.arange(t)[None, :]
        mask = (j <= i) & (j > i - window)
    causal = window is None
    if not backward:
        def run():
            with torch.no_grad():
                F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        return run
    qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))

    def run():
        F.scaled_dot_product_attention(qg, kg, vg, attn_mask=mask, is_causal=causal).backward(do)
    return run


def selective_scan(backward, t=4096, di=512, n=16, b=1, device="cpu"):
    """mamba-ssm's selective_scan_ref (delta softplus, D skip, no z): exp(Δ·A) and Δ·B·u for
    every step at once, then the recurrence h = dA·h + dBu, y = h·C, as a loop over time."""
    u, dt = randn(b, t, di, device=device), randn(b, t, di, device=device)
    bm, cm = randn(b, t, n, device=device), randn(b, t, n, device=device)
    a_log, d_skip, dt_bias = randn(di, n, device=device).abs().log(), randn(di, device=device), randn(di, device=device)
    tensors = [u, dt, bm, cm, a_log, d_skip, dt_bias]
    if backward:
        tensors = [x.clone().requires_grad_() for x in tensors]
    dy = randn(b, t, di, device=device)

    def scan(u, dt, bm, cm, a_log, d_skip, dt_bias):
        delta = F.softplus(dt + dt_bias)
        d_a = torch.exp(torch.einsum("btd,dn->btdn", delta, -torch.exp(a_log)))
        d_bu = torch.einsum("btd,btn,btd->btdn", delta, bm, u)
        h = u.new_zeros(u.shape[0], di, n)
        ys = []
        # unbind, not indexing: indexing's backward writes a zero tensor of the whole (B, T, Di, N)
        # per step (minutes at T = 4096); unbind's is one stack.
        for d_a_s, d_bu_s, c_s in zip(d_a.unbind(1), d_bu.unbind(1), cm.unbind(1)):
            h = d_a_s * h + d_bu_s
            ys.append(torch.einsum("bdn,bn->bd", h, c_s))
        return torch.stack(ys, dim=1) + u * d_skip

    def run():
        if backward:
            scan(*tensors).backward(dy)
        else:
            with torch.no_grad():
                scan(*tensors)
    return run


def batch(b, t):
    ids = torch.randint(0, 256, (b, t), generator=g)
    return ids, torch.roll(ids, -1, dims=1)


def train_step(arch):
    model = torch_models.build(arch)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    ids, targets = batch(TRAIN_B, TRAIN_T)

    def run():
        opt.zero_grad(set_to_none=True)
        logits = model(ids)
        F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    return run


def decode():
    model = torch_models.build("transformer")
    ids = torch.randint(0, 256, (1, DECODE_TOKENS), generator=g)

    def run():
        with torch.no_grad():
            cache = model.empty_cache(1)
            for p in range(DECODE_TOKENS):
                model.decode(ids[:, p:p + 1], cache)
    return run


def rows():
    r = {}
    for shape, (i, o) in {"256x768": (256, 768), "768x3072": (768, 3072)}.items():
        r[f"linear {shape} fwd"] = lambda i=i, o=o: linear(i, o)
    for t in (1024, 4096):
        r[f"causal attention T={t} fwd"] = lambda t=t: attention(t, False)
        r[f"causal attention T={t} fwd+bwd"] = lambda t=t: attention(t, True)
    r[f"sliding window {WINDOW}, T=4096 fwd"] = lambda: attention(4096, False, WINDOW)
    r[f"sliding window {WINDOW}, T=4096 fwd+bwd"] = lambda: attention(4096, True, WINDOW)
    r["selective scan fwd"] = lambda: selective_scan(False)
    r["selective scan fwd+bwd"] = lambda: selective_scan(True)
    for arch in ("transformer", "pha", "ecp"):
        r[f"training step {arch}"] = lambda arch=arch: train_step(arch)
    r[f"decoding {DECODE_TOKENS} tokens transformer"] = decode
    return r


def training_flops(arch):
    """FlopCounterMode's count of one forward + backward at the training shape."""
    from torch.utils.flop_counter import FlopCounterMode
    model = torch_models.build(arch)
    ids, targets = batch(TRAIN_B, TRAIN_T)
    with FlopCounterMode(display=False) as counter:
        logits = model(ids)
        F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)).backward()
    return counter.get_total_flops()


def main():
    if sys.argv[1] == "--flops":
        print(json.dumps({arch: training_flops(arch) for arch in ("transformer", "pha", "ecp")}))
        return
    torch.set_num_threads(int(sys.argv[1]))
    wanted = sys.argv[2:]
    table = rows()
    unknown = [w for w in wanted if w not in table]
    if unknown:
        sys.exit(f"torch_workloads: unknown rows {unknown}")
    print(json.dumps({k: best(make()) for k, make in table.items() if not wanted or k in wanted}))


if __name__ == "__main__":
    main()
