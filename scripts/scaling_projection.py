#!/usr/bin/env python3
"""A paper projection, not a measurement: data-parallel step time of a 125 M-parameter PHA on
8, 64 and 512 GPUs (docs/results.md, "Scaling beyond one process"). Every input is an
assumption stated below; change them and rerun.

Compute per step: 6·N FLOPs per token (forward 2N, backward 4N) plus causal attention
scores and P·V, 6·L·T·d per token (forward 2·T·d per layer, halved by the causal mask of
4·T·d, times 3 for backward). Gradient sum: a ring all-reduce moves 2(P−1)/P of the gradient
bytes through the slowest link and pays 2(P−1) latencies; the trainer's reproducible tree
(parallel::Mpi / Nccl with the fixed pairwise order) moves the whole gradient 2·log2(P) times,
log2(8) = 3 levels inside a node and the rest between nodes.

Overlap (TrainerOptions::gradient_bucket_bytes): the trainer starts each module's sum as its
backward ends, so the sum runs beside backward (4N of the 6N FLOPs per token) except the
(tied) embedding's, whose gradient is final only when backward returns. Exposed time with
overlap = max(embedding's share of the sum, sum - backward time): links and compute assumed
not to slow each other."""

import math

N = 125e6            # parameters
L, d, T = 12, 768, 2048  # layers, width, sequence length (GPT-3 Small's shape)
global_tokens = 512 * T  # 1 M tokens per step: one sequence per GPU at 512 GPUs
grad_bytes = 4 * N   # float gradients (the trainer sums the model's scalar type)
gpu_flops = 989e12 * 0.40  # H200 SXM dense bf16 peak x an assumed 40 % utilisation
nvlink = 360e9       # bytes/s per GPU and direction, achieved, inside one 8-GPU node
ib = 40e9            # bytes/s per GPU and direction between nodes (one 400 Gb/s NIC per GPU)
alpha_intra, alpha_inter = 2e-6, 6e-6  # per-message latency
vocab = 50304        # GPT-2's vocabulary padded; the tied embedding is the last gradient to be final
embedding_share = vocab * d / N

flops_per_token = 6 * N + 6 * L * T * d
print(f"FLOPs per token {flops_per_token / 1e6:.0f} M; step {global_tokens / 1e6:.2f} M tokens; "
      f"gradient {grad_bytes / 1e6:.0f} MB")
print(f"{'GPUs':>5} {'tokens/GPU':>10} {'compute ms':>11} {'ring ms':>8} {'tree ms':>8} "
      f"{'ring/comp':>9} {'tree/comp':>9} {'ring exposed/comp':>17} {'tree exposed/comp':>17}")
for P in (8, 64, 512):
    compute = global_tokens * flops_per_token / P / gpu_flops
    inter = P > 8
    bw = ib if inter else nvlink
    alpha = alpha_inter if inter else alpha_intra
    ring = 2 * (P - 1) / P * grad_bytes / bw + 2 * (P - 1) * alpha
    levels_intra = min(3, int(math.log2(P)))
    levels_inter = int(math.log2(P)) - levels_intra
    tree = 2 * (levels_intra * (grad_bytes / nvlink + alpha_intra) + levels_inter * (grad_bytes / ib + alpha_inter))
    backward = compute * 2 / 3  # both terms: backward twice forward's FLOPs
    exposed = lambda total: max(embedding_share * total, total - backward)
    print(f"{P:>5} {global_tokens // P:>10} {compute * 1e3:>11.1f} {ring * 1e3:>8.1f} {tree * 1e3:>8.1f} "
          f"{ring / compute:>9.2f} {tree / compute:>9.2f} {exposed(ring) / compute:>17.2f} "
          f"{exposed(tree) / compute:>17.2f}")
