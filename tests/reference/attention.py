"""Plain-PyTorch reference of hybridseq's attention branch (see ATTENTION.md).

Written for clarity, not speed: the full (T, T) score matrix and an explicit
boolean visibility mask are materialised.  dtype-agnostic; the golden
generator runs it in float64 and takes gradients from autograd.

x (B, T, D) -> y (B, T, D)   (perceiver: y (B, M, D), rows t = T-M .. T-1)

Params (torch linear layout (out, in)):
  wqkv.weight  ((H + 2 Hkv) Dh, D)      wqkv.bias ((H + 2 Hkv) Dh,)   optional
  wo.weight    (D, H Dh)  merge="concat" | (D, Dh) merge="sum"
  wo.bias      (D,)                     optional
  logit_scale  (H,) scale="per_head" | (1,) scale="per_layer"   (score="cosine" only)
"""

from __future__ import annotations

import math
from typing import Dict, Optional

import torch
from torch import Tensor

import dropout

Params = Dict[str, Tensor]

SCHEMES = ("causal", "sliding", "ecp", "ssplit", "bidirectional", "perceiver")
COSINE_EPS = 1e-12
MAX_LOGIT_SCALE = math.log(100.0)


def linear(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    y = torch.matmul(x, weight.transpose(0, 1))
    if bias is not None:
        y = y + bias
    return y


def rope(x: Tensor, rotary_dim: int, base: float) -> Tensor:
    """GPT-NeoX "rotate_half" RoPE on x (B, T, nh, Dh), positions 0..T-1.

    x1 = x[..., :r/2], x2 = x[..., r/2:r], theta_i = p * base^(-2i/r);
    out1 = x1 cos - x2 sin, out2 = x2 cos + x1 sin; dims >= r unchanged.
    rotary_dim = 0 is the identity.
    """
    r = rotary_dim
    if r == 0:
        return x
    assert r % 2 == 0 and r <= x.shape[-1], (r, x.shape)
    T = x.shape[1]
    half = r // 2
    i = torch.arange(half, dtype=x.dtype)
    inv_freq = torch.pow(torch.tensor(float(base), dtype=x.dtype), -2.0 * i / r)
    pos = torch.arange(T, dtype=x.dtype)
    ang = pos[:, None] * inv_freq[None, :]            # (T, r/2)
    cos = torch.cos(ang)[None, :, None, :]            # (1, T, 1, r/2)
    sin = torch.sin(ang)[None, :, None, :]
    x1 = x[..., :half]
    x2 = x[..., half:r]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, x[..., r:]], dim=-1)


def visible(scheme: str, param: int, t: int, tau: int) -> bool:
    """Whether query position t may attend to key position tau."""
    if scheme == "causal":
        return tau <= t
    if scheme == "sliding":
        w = param
        return t - w < tau <= t
    if scheme == "ecp":
        m = param
        j = t // m
        if j == 0:
            return tau <= t
        return (j - 1) * m <= tau <= t
    if scheme == "ssplit":
        s = param
        return tau // s == t // s
    if scheme == "bidirectional":
        return True
    if scheme == "perceiver":
        return tau <= t  # the query-row restriction is applied by query_positions()
    raise ValueError(f"unknown scheme {scheme!r}")


def query_positions(scheme: str, param: int, T: int):
    """Positions that produce output rows (all of 0..T-1, or the last M for perceiver)."""
    if scheme == "perceiver":
        M = param
        assert 1 <= M <= T, (M, T)
        return list(range(T - M, T))
    return list(range(T))


def mask_matrix(scheme: str, param: int, T: int) -> Tensor:
    """Boolean (T, T) matrix, True where query t (row) sees key tau (column)."""
    m = torch.zeros(T, T, dtype=torch.bool)
    for t in range(T):
        for tau in range(T):
            m[t, tau] = visible(scheme, param, t, tau)
    return m


def attention(x: Tensor, p: Params, cfg: dict) -> Tensor:
    """The attention branch; cfg holds the keys listed in ATTENTION.md."""
    return attention_with_probs(x, p, cfg)[0]


def attention_with_probs(x: Tensor, p: Params, cfg: dict):
    """Returns (y, prob) with prob the softmax probabilities (B, H, Tq, T)."""
    B, T, D = x.shape
    H, Hkv, Dh = cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
    assert D == cfg["d_model"] and H % Hkv == 0
    group = H // Hkv

    qkv = linear(x, p["wqkv.weight"], p.get("wqkv.bias"))          # (B, T, (H+2Hkv)Dh)
    assert qkv.shape[-1] == (H + 2 * Hkv) * Dh
    q = qkv[..., : H * Dh].reshape(B, T, H, Dh)
    k = qkv[..., H * Dh:(H + Hkv) * Dh].reshape(B, T, Hkv, Dh)
    v = qkv[..., (H + Hkv) * Dh:].reshape(B, T, Hkv, Dh)

    q = rope(q, cfg["rotary_dim"], cfg["base"])
    k = rope(k, cfg["rotary_dim"], cfg["base"])

    # Expand kv heads so that query head h reads kv head h // group.
    kv_of = torch.tensor([h // group for h in range(H)])
    k = k[:, :, kv_of, :]                                          # (B, T, H, Dh)
    v = v[:, :, kv_of, :]

    qh = q.permute(0, 2, 1, 3)                                     # (B, H, T, Dh)
    kh = k.permute(0, 2, 1, 3)
    vh = v.permute(0, 2, 1, 3)

    if cfg["score"] == "dot":
        s = torch.matmul(qh, kh.transpose(-1, -2)) / math.sqrt(Dh)   # (B, H, T, T)
    elif cfg["score"] == "cosine":
        qn = qh / torch.clamp(torch.linalg.vector_norm(qh, dim=-1, keepdim=True), min=COSINE_EPS)
        kn = kh / torch.clamp(torch.linalg.vector_norm(kh, dim=-1, keepdim=True), min=COSINE_EPS)
        ls = p["logit_scale"]
        if cfg["scale"] == "per_head":
            assert ls.shape == (H,)
        else:
            assert ls.shape == (1,)
            ls = ls.expand(H)
        mult = torch.exp(torch.clamp(ls, max=MAX_LOGIT_SCALE))      # (H,)
        s = torch.matmul(qn, kn.transpose(-1, -2)) * mult[None, :, None, None]
    else:
        raise ValueError(cfg["score"])

    mask = mask_matrix(cfg["scheme"], cfg["scheme_param"], T)       # (T, T)
    rows = query_positions(cfg["scheme"], cfg["scheme_param"], T)
    s = s[:, :, rows, :]                                            # (B, H, Tq, T)
    mask = mask[rows, :]
    assert bool(mask.any(dim=-1).all()), "every query must see at least one key"
    s = s.masked_fill(~mask[None, None], float("-inf"))
    prob = torch.softmax(s, dim=-1)                                 # exact 0 where masked
    # cfg["dropout"] on the probabilities in training passes (dropout.py; AttentionOptions::dropout)
    o = torch.matmul(dropout.drop(prob, cfg.get("dropout", 0.0)), vh)  # (B, H, Tq, Dh)

    if cfg["merge"] == "concat":
        o = o.permute(0, 2, 1, 3).reshape(B, len(rows), H * Dh)
    elif cfg["merge"] == "sum":
        o = o.sum(dim=1)                                            # (B, Tq, Dh)
    else:
        raise ValueError(cfg["merge"])
    return linear(o, p["wo.weight"], p.get("wo.bias")), prob
