"""Plain-PyTorch references of the ECP-paper family (include/hybridseq/models/ecp.hpp,
perceiver_ar.hpp), written from the definitions in papers.md §2, independently of the C++
code and of the other references beside this file (only torch built-ins do the math; the
parameter holders are params.py's).

Common block (the reference code MetaMain/ECPTransformer): pre-norm

    x = Attn(LN(x)) + x;   x = FF(LN(x)) + x,   FF = Linear(d, f) – GELU (erf) – Linear(f, d)

final LayerNorm, untied linear head without bias, mean cross-entropy over targets != -100.
LayerNorm eps 1e-5. RoPE: rotate-half pairing (dim i with i + Dh/2) over the whole head,
base 10000, absolute positions.

* ECP (clean): segments of length m; query t in segment j = t // m sees
  j = 0: tau <= t;  j >= 1: (j-1) m <= tau <= t.  Separate Q, K, V (one fused matrix, rows
  [q heads, k heads, v heads], no bias), RoPE in every layer, output projection with bias.
  Loss on all n positions.
* ECP (faithful): the reference code's quirks: q = x Wq, kv = x Wkv (K = V), RoPE in layer 0
  only (on q and kv, so the values rotate too), first segment projected by its own to_out_0.
  The reference's unused K/V LayerNorm is not modelled (it changes nothing).
* PerceiverAR: n = history + M. Layer 1: queries = the last M positions, keys = all n,
  latent p sees tau <= p; residual from x[:, n-M:]. Layers 2..L: causal self-attention over
  the M latents. Loss and logits on the M latents only.
* Double Attention PerceiverAR (split 0) / s-Split (split S): every layer, over all n
  positions, runs two attentions on one projection and concatenates [history ; latents]:
  history queries see the history unmasked (whole, or their own segment of S), latent
  queries see tau <= t. Loss and logits on the M latents only.
* Compressed Double Attention: n = h + M; layer 1 as Double Attention, but the history rows
  of the attention output and of the residual are mapped along time by one Linear(h → c)
  (with bias) before wo / the residual sum; later layers are Double Attention over c + M.

ECP attention is computed two ways: by segment pairs as in the paper / reference code
(`ecp_attention_segments`: Q of segment j against the concatenated K/V of segments j-1, j
with the causal mask on the second half) and with an explicit (n, n) visibility mask
(`ecp_attention_masked`). The golden writer asserts they agree.

Parameter names are the C++ dotted names of core::for_each_parameter.
"""

from __future__ import annotations

import math
import os
import sys
from typing import Dict, List, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from params import Params  # noqa: E402

F64 = torch.float64
LN_EPS = 1e-5
ROPE_BASE = 10000.0
IGNORE_INDEX = -100


# --------------------------------------------------------------------------
# Pieces
# --------------------------------------------------------------------------

def rope(x: Tensor, positions: Tensor) -> Tensor:
    """Rotate-half RoPE over the whole head: x (B, T, H, Dh), positions (T,)."""
    dh = x.shape[-1]
    half = dh // 2
    inv_freq = ROPE_BASE ** (-2.0 * torch.arange(half, dtype=F64) / dh)
    ang = positions.to(F64)[:, None] * inv_freq[None, :]
    c, s = torch.cos(ang)[None, :, None, :], torch.sin(ang)[None, :, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def softmax_attention(q: Tensor, k: Tensor, v: Tensor, visible: Tensor) -> Tensor:
    """q (B, H, Tq, Dh), k, v (B, H, Tk, Dh), visible (Tq, Tk) bool → (B, H, Tq, Dh)."""
    s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    s = s.masked_fill(~visible, float("-inf"))
    return torch.matmul(torch.softmax(s, dim=-1), v)


def heads(x: Tensor, h: int) -> Tensor:
    """(B, T, H·Dh) → (B, T, H, Dh)."""
    b, t, w = x.shape
    return x.reshape(b, t, h, w // h)


def merge(o: Tensor) -> Tensor:
    """(B, H, T, Dh) → (B, T, H·Dh)."""
    b, h, t, dh = o.shape
    return o.permute(0, 2, 1, 3).reshape(b, t, h * dh)


def linear(d_in: int, d_out: int, bias: bool) -> nn.Linear:
    """torch's Linear in float64: weight (out, in), bias (out) when `bias`."""
    return nn.Linear(d_in, d_out, bias, dtype=F64)


def layer_norm(d: int) -> nn.LayerNorm:
    """torch's LayerNorm in float64 (weight, bias), eps LN_EPS."""
    return nn.LayerNorm(d, eps=LN_EPS, dtype=F64)


class FeedForward(nn.Module):
    """Linear(d, f) – GELU – Linear(f, d), both with biases (names fc1, fc2)."""

    def __init__(self, d: int, f: int):
        super().__init__()
        self.fc1 = linear(d, f, True)
        self.fc2 = linear(f, d, True)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class PreNorm(nn.Module):
    """x + fn(LN(x)); children "norm", "block" (compose::PreNormResidual)."""

    def __init__(self, d: int, fn: nn.Module):
        super().__init__()
        self.norm = layer_norm(d)
        self.block = fn

    def forward(self, x: Tensor) -> Tensor:
        return x + self.block(self.norm(x))


class Block(nn.Module):
    """models::PreNormBlock: children "attn", "ffn"."""

    def __init__(self, d: int, f: int, attn: nn.Module):
        super().__init__()
        self.attn = PreNorm(d, attn)
        self.ffn = PreNorm(d, FeedForward(d, f))

    def forward(self, x: Tensor) -> Tensor:
        return self.ffn(self.attn(x))


class Blocks(nn.Module):
    """Children "0", "1", ... (the C++ tuple indices), applied one after the other."""

    def __init__(self, blocks: List[nn.Module]):
        super().__init__()
        for i, b in enumerate(blocks):
            self.add_module(str(i), b)

    def forward(self, x: Tensor) -> Tensor:
        for i in range(len(self._modules)):
            x = getattr(self, str(i))(x)
        return x


class FusedAttention(nn.Module):
    """The projections of ECP, PerceiverAR and Double Attention: one fused wqkv (3·H·Dh, D)
    without bias (rows [q heads, k heads, v heads]) and wo (D, H·Dh) with bias."""

    def __init__(self, d: int, h: int, dh: int, rope_on: bool):
        super().__init__()
        self.h, self.dh, self.rope_on = h, dh, rope_on
        self.wqkv = linear(d, 3 * h * dh, False)
        self.wo = linear(h * dh, d, True)

    def qkv(self, x: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """q, k, v (B, H, n, Dh) of x (B, n, D), RoPE on q and k at positions 0..n-1 when rope_on."""
        w = self.h * self.dh
        qkv = self.wqkv(x)
        q, k, v = (heads(qkv[..., i * w:(i + 1) * w], self.h) for i in range(3))
        if self.rope_on:
            pos = torch.arange(x.shape[1])
            q, k = rope(q, pos), rope(k, pos)
        q, k, v = (t.permute(0, 2, 1, 3) for t in (q, k, v))
        return q, k, v


class LmShell(nn.Module):
    """embed (V, D), `body`, final LayerNorm, head (V, D) without bias, registered in this order
    (the C++ parameter order)."""

    def __init__(self, vocab: int, d: int, body: nn.Module):
        super().__init__()
        self.embed = Params(weight=(vocab, d))
        self.body = body
        self.norm = layer_norm(d)
        self.head = Params(weight=(vocab, d))

    def head_loss(self, x: Tensor, targets: Tensor) -> Tuple[Tensor, Tensor]:
        """(mean cross-entropy of the logits against `targets`, logits = LN(x) Wᵀ)."""
        logits = F.linear(self.norm(x), self.head.weight)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE_INDEX)
        return loss, logits


# --------------------------------------------------------------------------
# ECP attention
# --------------------------------------------------------------------------

def ecp_visible(n: int, m: int) -> Tensor:
    """(n, n) bool: query t sees key tau."""
    t = torch.arange(n)[:, None]
    tau = torch.arange(n)[None, :]
    j = t // m
    lo = torch.where(j == 0, torch.zeros_like(j), (j - 1) * m)
    return (tau >= lo) & (tau <= t)


def ecp_attention_masked(q: Tensor, k: Tensor, v: Tensor, m: int) -> Tensor:
    """q, k, v (B, H, n, Dh) → (B, H, n, Dh) with the (n, n) ECP mask."""
    return softmax_attention(q, k, v, ecp_visible(q.shape[2], m))


def ecp_attention_segments(q: Tensor, k: Tensor, v: Tensor, m: int) -> Tensor:
    """The same by segment pairs, as the paper states it: segment 0 attends causally to itself;
    segment j >= 1 attends to [segment j-1 ; segment j], the second half causally."""
    n = q.shape[2]
    assert n % m == 0, (n, m)
    causal = torch.ones(m, m, dtype=torch.bool).tril()
    pair = torch.cat([torch.ones(m, m, dtype=torch.bool), causal], dim=1)  # (m, 2m)
    outs = [softmax_attention(q[:, :, :m], k[:, :, :m], v[:, :, :m], causal)]
    for j in range(1, n // m):
        cur = slice(j * m, (j + 1) * m)
        two = slice((j - 1) * m, (j + 1) * m)
        outs.append(softmax_attention(q[:, :, cur], k[:, :, two], v[:, :, two], pair))
    return torch.cat(outs, dim=2)


class EcpAttention(FusedAttention):
    """Clean ECP attention: wqkv (3·H·Dh, D) no bias, RoPE, wo (D, H·Dh) with bias."""

    def __init__(self, d: int, h: int, dh: int, m: int, rope_on: bool, segments: bool = True):
        super().__init__(d, h, dh, rope_on)
        self.m, self.segments = m, segments

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self.qkv(x)
        attend = ecp_attention_segments if self.segments else ecp_attention_masked
        return self.wo(merge(attend(q, k, v, self.m)))


class EcpFaithfulAttention(nn.Module):
    """The reference code's ECPAttention: to_q, to_kv (K = V, no biases), RoPE on q and kv
    when `rotary`, first segment through to_out_0, the rest through to_out."""

    def __init__(self, d: int, h: int, dh: int, m: int, rotary: bool, segments: bool = True):
        super().__init__()
        self.h, self.dh, self.m, self.rotary, self.segments = h, dh, m, rotary, segments
        self.to_q = linear(d, h * dh, False)
        self.to_kv = linear(d, h * dh, False)
        self.to_out = linear(h * dh, d, True)
        self.to_out_0 = linear(h * dh, d, True)

    def forward(self, x: Tensor) -> Tensor:
        q, kv = heads(self.to_q(x), self.h), heads(self.to_kv(x), self.h)
        if self.rotary:
            pos = torch.arange(x.shape[1])
            q, kv = rope(q, pos), rope(kv, pos)
        q, kv = q.permute(0, 2, 1, 3), kv.permute(0, 2, 1, 3)
        attend = ecp_attention_segments if self.segments else ecp_attention_masked
        o = merge(attend(q, kv, kv, self.m))
        m = self.m
        return torch.cat([self.to_out_0(o[:, :m]), self.to_out(o[:, m:])], dim=1)


class LanguageModel(LmShell):
    """embed → blocks → LayerNorm → head (V, D) without bias; loss over all positions."""

    def __init__(self, vocab: int, d: int, blocks: List[nn.Module]):
        super().__init__(vocab, d, Blocks(blocks))

    def forward(self, ids: Tensor, targets: Tensor) -> Tuple[Tensor, Tensor]:
        return self.head_loss(self.body(F.embedding(ids, self.embed.weight)), targets)


def ecp(vocab: int, s: dict, layers: int, segments: bool = True) -> LanguageModel:
    """models::Ecp<vocab, EcpShape{d_model, heads, head_dim, segment, ffn, rope, faithful}>."""
    d, h, dh, m, f = s["d_model"], s["heads"], s["head_dim"], s["segment"], s["ffn"]
    blocks = []
    for i in range(layers):
        if s["faithful"]:
            attn = EcpFaithfulAttention(d, h, dh, m, s["rope"] and i == 0, segments)
        else:
            attn = EcpAttention(d, h, dh, m, s["rope"], segments)
        blocks.append(Block(d, f, attn))
    return LanguageModel(vocab, d, blocks)


# --------------------------------------------------------------------------
# PerceiverAR
# --------------------------------------------------------------------------

class SelfAttention(FusedAttention):
    """Attention with fused wqkv (no bias), RoPE at positions 0.., output wo with bias; the
    queries are the last `queries` positions (all when None), each seeing keys tau <= its
    position."""

    def __init__(self, d: int, h: int, dh: int, rope_on: bool, queries=None):
        super().__init__(d, h, dh, rope_on)
        self.queries = queries

    def forward(self, x: Tensor) -> Tensor:
        n = x.shape[1]
        q, k, v = self.qkv(x)
        tq = n if self.queries is None else self.queries
        qpos = torch.arange(n - tq, n)
        q = q[:, :, n - tq:]
        visible = torch.arange(n)[None, :] <= qpos[:, None]
        return self.wo(merge(softmax_attention(q, k, v, visible)))


class PerceiverCross(nn.Module):
    """Layer 1: h = x[:, n-M:] + Attn(LN(x)); y = h + FF(LN(h)). Children attn_norm, attn, ffn."""

    def __init__(self, d: int, h: int, dh: int, latents: int, f: int, rope_on: bool):
        super().__init__()
        self.latents = latents
        self.attn_norm = layer_norm(d)
        self.attn = SelfAttention(d, h, dh, rope_on, latents)
        self.ffn = PreNorm(d, FeedForward(d, f))

    def forward(self, x: Tensor) -> Tensor:
        h = x[:, -self.latents:] + self.attn(self.attn_norm(x))
        return self.ffn(h)


class PerceiverAr(LmShell):
    def __init__(self, vocab: int, s: dict, layers: int):
        d, h, dh, f, m = s["d_model"], s["heads"], s["head_dim"], s["ffn"], s["latents"]
        body = nn.Module()  # models::PerceiverArBody: cross, latent.<i>
        body.cross = PerceiverCross(d, h, dh, m, f, s["rope"])
        body.latent = Blocks([Block(d, f, SelfAttention(d, h, dh, s["rope"])) for _ in range(layers - 1)])
        super().__init__(vocab, d, body)
        self.latents = m

    def forward(self, ids: Tensor, targets: Tensor) -> Tuple[Tensor, Tensor]:
        """Returns (loss over the latent targets, logits (B, M, V))."""
        x = self.body.latent(self.body.cross(F.embedding(ids, self.embed.weight)))
        return self.head_loss(x, targets[:, -self.latents:])


def perceiver_ar(vocab: int, s: dict, layers: int) -> PerceiverAr:
    """models::PerceiverAr<vocab, PerceiverArShape{d_model, heads, head_dim, latents, ffn, rope}>."""
    return PerceiverAr(vocab, s, layers)


# --------------------------------------------------------------------------
# Double Attention / s-Split Double Attention
# --------------------------------------------------------------------------

class DoubleAttention(FusedAttention):
    """Two attentions over one fused wqkv (no bias), RoPE at positions 0..n-1, concatenated
    along time before wo (with bias): history queries t < h = n - M see the history without a
    causal mask (split = 0: all of it; split = S: only their own segment of S), latent queries
    see every tau <= t."""

    def __init__(self, d: int, h: int, dh: int, latents: int, split: int, rope_on: bool):
        super().__init__(d, h, dh, rope_on)
        self.latents, self.split = latents, split

    def forward(self, x: Tensor) -> Tensor:
        return self.wo(self.attend(x))

    def attend(self, x: Tensor) -> Tensor:
        """[history outputs ; latent outputs] (B, n, H·Dh), before wo."""
        n = x.shape[1]
        hist = n - self.latents
        q, k, v = self.qkv(x)
        t = torch.arange(n)
        outs = []
        if hist > 0:
            if self.split == 0:
                seen = torch.ones(hist, hist, dtype=torch.bool)
            else:
                seg = t[:hist] // self.split
                seen = seg[:, None] == seg[None, :]
            outs.append(softmax_attention(q[:, :, :hist], k[:, :, :hist], v[:, :, :hist], seen))
        latent_seen = t[None, :] <= t[hist:, None]
        outs.append(softmax_attention(q[:, :, hist:], k, v, latent_seen))
        return merge(torch.cat(outs, dim=2))


class DoubleAttentionAr(LmShell):
    """Blocks over all n positions, then LayerNorm + head on the last M rows; loss on the last
    M targets."""

    def __init__(self, vocab: int, s: dict, layers: int):
        d, h, dh, f, m = s["d_model"], s["heads"], s["head_dim"], s["ffn"], s["latents"]
        super().__init__(vocab, d, Blocks([Block(d, f, DoubleAttention(d, h, dh, m, s["split"], s["rope"]))
                                           for _ in range(layers)]))
        self.latents = m

    def forward(self, ids: Tensor, targets: Tensor) -> Tuple[Tensor, Tensor]:
        x = self.body(F.embedding(ids, self.embed.weight))
        return self.head_loss(x[:, -self.latents:], targets[:, -self.latents:])


def double_attention_ar(vocab: int, s: dict, layers: int) -> DoubleAttentionAr:
    """models::DoubleAttentionAr<vocab, DoubleAttentionShape{d_model, heads, head_dim, latents, ffn, split, rope}>."""
    return DoubleAttentionAr(vocab, s, layers)


class CompressedFirst(nn.Module):
    """Compressed Double Attention, layer 1 (n = h + M): o = [o_h ; o_l] before wo,
    o_c = P o_h + p and x_c = P x_h + p along time (P (c, h), p (c)),
    z = [x_c ; x_l] + wo([o_c ; o_l]);  y = z + FF(LN(z)). Children attn_norm, attn, compress, ffn."""

    def __init__(self, d: int, h: int, dh: int, latents: int, f: int, history: int, compressed: int, rope_on: bool):
        super().__init__()
        self.latents, self.history = latents, history
        self.attn_norm = layer_norm(d)
        self.attn = DoubleAttention(d, h, dh, latents, 0, rope_on)
        self.compress = linear(history, compressed, True)
        self.ffn = PreNorm(d, FeedForward(d, f))

    def along_time(self, t: Tensor) -> Tensor:
        """P t[:, :h] + p along the time axis: (B, h, K) → (B, c, K)."""
        return self.compress(t[:, :self.history].transpose(1, 2)).transpose(1, 2)

    def forward(self, x: Tensor) -> Tensor:
        assert x.shape[1] == self.history + self.latents
        o = self.attn.attend(self.attn_norm(x))
        oc = torch.cat([self.along_time(o), o[:, self.history:]], dim=1)
        xc = torch.cat([self.along_time(x), x[:, self.history:]], dim=1)
        return self.ffn(xc + self.attn.wo(oc))


class CompressedDoubleAttentionAr(LmShell):
    """Layer 1 compresses the history h → c; later layers are Double Attention over c + M rows;
    LayerNorm + head on the last M rows; loss on the last M targets."""

    def __init__(self, vocab: int, s: dict, layers: int):
        d, h, dh, f, m = s["d_model"], s["heads"], s["head_dim"], s["ffn"], s["latents"]
        c = s["compressed"] or s["history"] // 4
        body = nn.Module()  # models::CompressedDoubleBody: first, layers.<i>
        body.first = CompressedFirst(d, h, dh, m, f, s["history"], c, s["rope"])
        body.layers = Blocks([Block(d, f, DoubleAttention(d, h, dh, m, 0, s["rope"])) for _ in range(layers - 1)])
        super().__init__(vocab, d, body)
        self.latents = m

    def forward(self, ids: Tensor, targets: Tensor) -> Tuple[Tensor, Tensor]:
        x = self.body.layers(self.body.first(F.embedding(ids, self.embed.weight)))
        return self.head_loss(x[:, -self.latents:], targets[:, -self.latents:])


def compressed_double_attention_ar(vocab: int, s: dict, layers: int) -> CompressedDoubleAttentionAr:
    """models::CompressedDoubleAttentionAr<vocab, CompressedDoubleShape{d_model, heads, head_dim, latents, ffn,
    history, compressed, rope}>."""
    return CompressedDoubleAttentionAr(vocab, s, layers)


def visible_entries_ecp(n: int, m: int) -> int:
    """Σ over queries of visible keys (for the cost model's cross-check)."""
    return int(ecp_visible(n, m).sum())


def named(model: nn.Module) -> Dict[str, nn.Parameter]:
    return dict(model.named_parameters())
