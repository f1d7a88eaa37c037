"""Plain-PyTorch Mamba-1 mixer, written from the definition (papers.md §4).

Independent of hybridseq's C++ kernels and of Hugging Face's implementation: the
causal depthwise convolution is an explicit sum over taps, softplus and SiLU are
written out, and the selective scan is a sequential loop over time. Gradients
come from torch autograd. Dtype-agnostic; the golden generator runs it in
float64.

    (x, z) = in_proj(u)                        in_proj.weight (2*Di, D)
    x = SiLU(causal_depthwise_conv1d(x))       conv1d.weight (Di, 1, K), conv1d.bias (Di)
    (dt, B, C) = x_proj(x)                     x_proj.weight (R + 2N, Di): dt | B | C
    delta = softplus(dt_proj(dt))              dt_proj.weight (Di, R), dt_proj.bias (Di)
    A = -exp(A_log)                            A_log (Di, N)
    h_t = exp(delta_t A) * h_{t-1} + delta_t B_t x_t;   y_t = C_t . h_t + D * x_t
    out = out_proj(y * SiLU(z))                out_proj.weight (D, Di)
"""

from __future__ import annotations

import math
from typing import Dict, Optional, Tuple

import torch
from torch import Tensor

Params = Dict[str, Tensor]


def softplus(v: Tensor) -> Tensor:
    """log(1 + e^v), linear above 20 (PyTorch's threshold)."""
    return torch.where(v > 20, v, torch.log1p(torch.exp(torch.clamp(v, max=20))))


def sigmoid(v: Tensor) -> Tensor:
    return 1 / (1 + torch.exp(-v))


def silu(v: Tensor) -> Tensor:
    return v * sigmoid(v)


def linear(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    y = torch.matmul(x, weight.transpose(0, 1))
    return y if bias is None else y + bias


def causal_depthwise_conv1d(x: Tensor, weight: Tensor, bias: Optional[Tensor],
                            window: Optional[Tensor] = None) -> Tensor:
    """out[b, t, d] = bias[d] + sum_k w[d, 0, k] * x[b, t - (K-1) + k, d].

    x: (B, T, Di); weight: (Di, 1, K); window: (B, Di, K-1) inputs before t = 0
    (zeros when None).
    """
    bsz, steps, di = x.shape
    k = weight.shape[-1]
    if window is None:
        window = x.new_zeros(bsz, di, k - 1)
    xp = torch.cat([window.transpose(1, 2), x], dim=1)  # (B, K-1+T, Di)
    out = x.new_zeros(bsz, steps, di) if bias is None else bias.expand(bsz, steps, di).clone()
    for tap in range(k):
        out = out + weight[:, 0, tap] * xp[:, tap:tap + steps, :]
    return out


def selective_scan(u: Tensor, dt: Tensor, dt_bias: Tensor, a_log: Tensor, bm: Tensor,
                   cm: Tensor, d_skip: Tensor, h0: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """Sequential selective scan. u, dt: (B, T, Di); bm, cm: (B, T, N).
    Returns y (B, T, Di) and the final state (B, Di, N)."""
    bsz, steps, di = u.shape
    n = a_log.shape[1]
    a = -torch.exp(a_log)                                  # (Di, N)
    delta = softplus(dt + dt_bias)                         # (B, T, Di)
    h = u.new_zeros(bsz, di, n) if h0 is None else h0
    ys = []
    for t in range(steps):
        decay = torch.exp(delta[:, t, :, None] * a)        # (B, Di, N)
        h = decay * h + (delta[:, t] * u[:, t])[:, :, None] * bm[:, t, None, :]
        ys.append((h * cm[:, t, None, :]).sum(-1) + d_skip * u[:, t])
    y = torch.stack(ys, dim=1) if ys else u.new_zeros(bsz, 0, di)
    return y, h


def mamba(x: Tensor, p: Params, cfg: dict) -> Tensor:
    """Mamba-1 mixer forward. x: (B, T, D) -> (B, T, D)."""
    di, n, r = cfg["d_inner"], cfg["d_state"], cfg["dt_rank"]
    xz = linear(x, p["in_proj.weight"], p.get("in_proj.bias"))
    xs, z = xz[..., :di], xz[..., di:]
    u = silu(causal_depthwise_conv1d(xs, p["conv1d.weight"], p.get("conv1d.bias")))
    dbc = linear(u, p["x_proj.weight"])
    dt_low, bm, cm = dbc[..., :r], dbc[..., r:r + n], dbc[..., r + n:]
    dt = linear(dt_low, p["dt_proj.weight"])
    y, _ = selective_scan(u, dt, p["dt_proj.bias"], p["A_log"], bm, cm, p["D"])
    return linear(y * silu(z), p["out_proj.weight"], p.get("out_proj.bias"))


def dt_rank_for(d_model: int) -> int:
    return math.ceil(d_model / 16)
