#!/usr/bin/env python3
"""Fast, idiomatic PyTorch (eager) versions of the three ~0.9 M-parameter byte-level language
models that examples/text_lm.cpp trains (V = 256, D = 128), for timing a PyTorch training step
against hybridseq's (bench/vs_pytorch.py imports this file):

    transformer  4 NeoX layers: x + Attn(LN1 x) + MLP(LN2 x); 4 heads of 32, full RoPE, QKV/out
                 biases, GELU MLP 4D; final LayerNorm
    pha          2 PHA blocks (parallel, DeepNorm): x' = LN(a x + sum_b w_b RMSNorm_b(Branch_b x)),
                 a = 4^(1/4), w = softplus(p) / sum softplus(p); branches GSS (F 4D, H 128, N 64),
                 causal scaled-cosine attention (4 query / 2 KV heads of 32, per-head temperature,
                 RoPE), Dual-FFN (GELU 4D + GELU D); final RMSNorm
    ecp          4 pre-norm ECP layers (clean form), segment m = 32: query t in segment j sees
                 keys (j-1) m <= tau <= t (segment 0: tau <= t); RoPE; GELU FFN 4D; final LayerNorm

All untied heads without bias. This file is independent of hybridseq's C++: only the plain
PyTorch references in tests/reference/ (models.py, ecp_models.py, with layers.py, attention.py,
gss.py) define the math. `python3 bench/torch_models.py --check` (needs numpy, which the
references import) copies random parameters from each reference into these modules and checks in
float64 that logits, loss and every gradient agree, and that the parameter counts equal the
references' (whose named_parameters are the C++ names, so these are the C++ counts) = PARAMETERS.
Needs torch >= 2.5 (SDPA enable_gqa, nn.RMSNorm).

    build(name, vocab=256) -> nn.Module      name in PARAMETERS; module(ids (B, T)) -> logits (B, T, V)
"""

from __future__ import annotations

import math
import os
import sys

import torch
import torch.nn.functional as F
from torch import Tensor, nn

D, HEAD_DIM, SEGMENT = 128, 32, 32
PARAMETERS = {"transformer": 858880, "pha": 954766, "ecp": 857344}  # the references' (= C++) counts

_cache: dict = {}


def _rope_tables(t: int, dim: int, like: Tensor):
    """cos, ±sin (T, 1, dim) for rotate-half RoPE (base 10000), cached per length/dtype/device."""
    key = ("rope", t, dim, like.dtype, like.device)
    if key not in _cache:
        inv_freq = 10000.0 ** (-2.0 * torch.arange(dim // 2, dtype=torch.float64) / dim)
        ang = torch.arange(t, dtype=torch.float64)[:, None] * inv_freq
        cos, sin = ang.cos(), ang.sin()
        _cache[key] = (torch.cat([cos, cos], -1)[:, None].to(like), torch.cat([-sin, sin], -1)[:, None].to(like))
    return _cache[key]


def rope(x: Tensor) -> Tensor:
    """Rotate-half RoPE over the whole head on x (B, T, heads, Dh), positions 0..T-1:
    [x1, x2] -> [x1 cos - x2 sin, x2 cos + x1 sin] (the sign lives in the cached sin table)."""
    cos, sin = _rope_tables(x.shape[1], x.shape[-1], x)
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * sin


def rope_at(x: Tensor, position: int, max_len: int) -> Tensor:
    """RoPE of x (B, 1, heads, Dh) at one position (decoding), from the tables of max_len."""
    cos, sin = _rope_tables(max_len, x.shape[-1], x)
    return x * cos[position] + x.roll(x.shape[-1] // 2, dims=-1) * sin[position]


def ecp_mask(t: int, m: int, device) -> Tensor:
    """(T, T) bool, cached: query t sees key tau iff (t//m - 1) m <= tau <= t."""
    key = ("ecp", t, m, device)
    if key not in _cache:
        i = torch.arange(t, device=device)
        lo = ((i // m - 1) * m).clamp(min=0)
        _cache[key] = (i[None, :] >= lo[:, None]) & (i[None, :] <= i[:, None])
    return _cache[key]


class Mlp(nn.Module):
    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, hidden), nn.Linear(hidden, d)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class SelfAttention(nn.Module):
    """Fused QKV (rows [q heads, k heads, v heads]), RoPE on q, k, SDPA, output projection.
    kind: "causal" (dot product), "ecp" (dot product, ECP mask) or "cosine" (PHA: unit q, k,
    times exp(min(s_h, ln 100)) per head, then SDPA with scale 1)."""

    def __init__(self, d, heads, kv_heads, head_dim, kind, bias_qkv, bias_out):
        super().__init__()
        self.h, self.hkv, self.dh, self.kind = heads, kv_heads, head_dim, kind
        self.wqkv = nn.Linear(d, (heads + 2 * kv_heads) * head_dim, bias=bias_qkv)
        self.wo = nn.Linear(heads * head_dim, d, bias=bias_out)
        if kind == "cosine":
            self.logit_scale = nn.Parameter(torch.full((heads,), math.log(10.0)))

    def forward(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        qkv = self.wqkv(x).view(b, t, self.h + 2 * self.hkv, self.dh)
        qk = rope(qkv[:, :, : self.h + self.hkv])  # q and k heads rotated in one go
        if self.kind == "cosine":
            qk = F.normalize(qk, dim=-1, eps=1e-12)
        q, k = qk.transpose(1, 2).split([self.h, self.hkv], dim=1)
        v = qkv[:, :, self.h + self.hkv:].transpose(1, 2)
        if self.kind == "cosine":
            q = q * self.logit_scale.clamp(max=math.log(100.0)).exp()[:, None, None]
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0, enable_gqa=self.hkv != self.h)
        elif self.kind == "ecp":
            # ECP via SDPA with the cached (T, T) boolean mask. Timed against an additive float mask
            # (same), [previous ; own] segment chunks with a (n, m, 2m) mask (no faster: the short
            # calls fall back to the math kernel) and overlapping square 2m windows with
            # is_causal (about 1.7x slower: window copies); at B=16, T=128 on one thread the
            # full-mask call costs the same as plain is_causal, so it is the fastest and simplest.
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=ecp_mask(t, SEGMENT, x.device))
        else:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(b, t, self.h * self.dh))

    def decode(self, x: Tensor, cache: dict) -> Tensor:
        """One token x (B, 1, D) at position cache["length"] against the KV cache (causal kind)."""
        b, p, max_len = x.shape[0], cache["length"], cache["k"].shape[2]
        qkv = self.wqkv(x).view(b, 1, self.h + 2 * self.hkv, self.dh)
        q, k = rope_at(qkv[:, :, : self.h + self.hkv], p, max_len).transpose(1, 2).split([self.h, self.hkv], dim=1)
        cache["k"][:, :, p] = k[:, :, 0]
        cache["v"][:, :, p] = qkv[:, 0, self.h + self.hkv:]
        o = F.scaled_dot_product_attention(q, cache["k"][:, :, : p + 1], cache["v"][:, :, : p + 1])
        return self.wo(o.transpose(1, 2).reshape(b, 1, self.h * self.dh))

    def empty_cache(self, batch: int, max_len: int, like: Tensor) -> dict:
        shape = (batch, self.hkv, max_len, self.dh)
        return {"k": like.new_zeros(shape), "v": like.new_zeros(shape), "length": 0}


class Gss(nn.Module):
    """Gated state space (DSS kernel): u, v = GELU(x [W_u; W_v]); y = K * LN(v) + d LN(v) (causal
    FFT convolution over all channels at once); out = W_o((W_g y) . u) + b_o."""

    def __init__(self, d, gate, ssm, state):
        super().__init__()
        self.gate = gate
        self.to_uv = nn.Linear(d, gate + ssm, bias=False)  # fused to_u, to_v
        self.norm = nn.LayerNorm(ssm, eps=1e-5)
        # the C++ initialisation: N(0, 1) for all of the SSM's parameters
        self.lambda_re, self.lambda_im = nn.Parameter(torch.randn(state)), nn.Parameter(torch.randn(state))
        self.c_re, self.c_im = nn.Parameter(torch.randn(ssm, state)), nn.Parameter(torch.randn(ssm, state))
        self.d = nn.Parameter(torch.randn(ssm))
        self.to_gate = nn.Linear(ssm, gate, bias=False)
        self.to_out = nn.Linear(gate, d)

    def kernel(self, length: int) -> Tensor:
        """K (H, L): K[h, l] = Re sum_n C~[h, n] exp(L_n l)."""
        lam = torch.complex(-self.lambda_re.exp(), self.lambda_im.exp())
        c = torch.complex(self.c_re, self.c_im) * (lam.exp() - 1.0) / lam
        ell = torch.arange(length, dtype=self.lambda_re.dtype, device=lam.device)
        return (c @ torch.exp(lam[:, None] * ell)).real

    def forward(self, x: Tensor) -> Tensor:
        length = x.shape[1]
        u, v = F.gelu(self.to_uv(x)).split([self.gate, self.d.shape[0]], dim=-1)
        ut = self.norm(v)
        n = 2 * length
        # FFT along contiguous time: (B, H, L) is ~4% faster here than transforming dim 1 of (B, L, H)
        y = torch.fft.irfft(torch.fft.rfft(ut.transpose(1, 2), n=n) * torch.fft.rfft(self.kernel(length), n=n), n=n)
        return self.to_out(self.to_gate(y[..., :length].transpose(1, 2) + ut * self.d) * u)


class NeoxLayer(nn.Module):
    def __init__(self, d=D, heads=4, head_dim=HEAD_DIM):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = SelfAttention(d, heads, heads, head_dim, "causal", True, True)
        self.mlp = Mlp(d, 4 * d)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.attn(self.ln1(x)) + self.mlp(self.ln2(x))

    def decode(self, x: Tensor, cache: dict) -> Tensor:
        return x + self.attn.decode(self.ln1(x), cache) + self.mlp(self.ln2(x))


class PhaBlock(nn.Module):
    def __init__(self, d=D, alpha=(2.0 * 2) ** 0.25):
        super().__init__()
        self.alpha = alpha
        self.gss = Gss(d, 4 * d, 128, 64)
        self.attn = SelfAttention(d, 4, 2, HEAD_DIM, "cosine", False, False)
        self.primary, self.auxiliary = Mlp(d, 4 * d), Mlp(d, d)  # Dual-FFN
        self.branch_norms = nn.ModuleList(nn.RMSNorm(d, eps=1e-6) for _ in range(3))
        self.mix_logits = nn.Parameter(torch.full((3,), math.log(math.e - 1.0)))  # softplus = 1
        self.norm = nn.LayerNorm(d)

    def forward(self, x: Tensor) -> Tensor:
        w = F.softplus(self.mix_logits)
        w = w / w.sum()
        hs = (self.gss(x), self.attn(x), self.primary(x) + self.auxiliary(x))
        y = self.alpha * x
        for wb, norm, h in zip(w, self.branch_norms, hs):
            y = y + wb * norm(h)
        return self.norm(y)


class EcpLayer(nn.Module):
    def __init__(self, d=D, heads=4):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = SelfAttention(d, heads, heads, HEAD_DIM, "ecp", False, True)
        self.mlp = Mlp(d, 4 * d)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class LanguageModel(nn.Module):
    def __init__(self, vocab, layers, norm, d=D):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(layers)
        self.norm = norm
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids: Tensor) -> Tensor:
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))

    # Decoding with a KV cache (the transformer: its layers have decode); a static cache of
    # max_len positions per layer, as Hugging Face's StaticCache keeps it.
    def empty_cache(self, batch: int, max_len: int = 4096) -> list:
        return [layer.attn.empty_cache(batch, max_len, self.head.weight) for layer in self.layers]

    def decode(self, ids: Tensor, cache: list) -> Tensor:
        """Logits (B, 1, V) of the next token after ids (B, 1), appended to the cache."""
        x = self.embed(ids)
        for layer, c in zip(self.layers, cache):
            x = layer.decode(x, c)
            c["length"] += 1
        return self.head(self.norm(x))


def build(name: str, vocab: int = 256) -> nn.Module:
    if name == "transformer":
        return LanguageModel(vocab, [NeoxLayer() for _ in range(4)], nn.LayerNorm(D))
    if name == "pha":
        return LanguageModel(vocab, [PhaBlock() for _ in range(2)], nn.RMSNorm(D, eps=1e-6))
    if name == "ecp":
        return LanguageModel(vocab, [EcpLayer() for _ in range(4)], nn.LayerNorm(D))
    raise KeyError(f"unknown model {name!r} (one of {sorted(PARAMETERS)})")


# --------------------------------------------------------------------------------------------
# --check: against tests/reference in float64
# --------------------------------------------------------------------------------------------

def reference(name: str, vocab: int = 256) -> nn.Module:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
    import ecp_models, models  # noqa: E401
    if name == "transformer":
        return models.transformer(vocab, dict(d_model=D, heads=4, head_dim=32, rotary_dim=32, mlp_width=4 * D,
                                              window=0, merge="concat", activation="gelu"), 4)
    if name == "pha":
        return models.pha(vocab, dict(d_model=D, heads=4, kv_heads=2, head_dim=32, gss_gate=4 * D, gss_ssm=128,
                                      gss_state=64, ffn_primary=4 * D, ffn_auxiliary=D), 2)
    return ecp_models.ecp(vocab, dict(d_model=D, heads=4, head_dim=32, segment=SEGMENT, ffn=4 * D, rope=True,
                                      faithful=False), 4, segments=True)


RENAME = {  # reference (C++) name inside body.<i>. -> ours inside layers.<i>.
    "transformer": {"1.0": "ln1", "1.1": "attn", "2.0": "ln2", "2.1": "mlp"},  # NeoX: [Identity, LN1-Attn, LN2-MLP]
    "ecp": {"attn.norm": "ln1", "attn.block": "attn", "ffn.norm": "ln2", "ffn.block": "mlp"},
    # PHA: block.{0 GSS, 1 attention, 2 Dual-FFN}.{0 branch, 1 its RMSNorm}, block.mixer, norm
    "pha": {"block.0.0": "gss", "block.1.0": "attn", "block.2.0.primary": "primary",
            "block.2.0.auxiliary": "auxiliary", "block.mixer.logits": "mix_logits", "norm": "norm",
            **{f"block.{b}.1": f"branch_norms.{b}" for b in range(3)}},
}


def from_reference(name: str, ref: dict) -> dict:
    """Our state dict from the reference's (C++-named) tensors (parameters or their gradients)."""
    out = {}
    for k, v in ref.items():
        if k.startswith("body."):
            _, i, rest = k.split(".", 2)
            src = max((s for s in RENAME[name] if rest == s or rest.startswith(s + ".")), key=len)
            k = f"layers.{i}.{RENAME[name][src]}{rest[len(src):]}"
            if k.endswith("gss.to_v.weight"):
                continue
            if k.endswith("gss.to_u.weight"):  # fused [to_u; to_v]
                k, v = k.replace("to_u", "to_uv"), torch.cat([v, ref[f"body.{i}.block.0.0.to_v.weight"]])
        out[k] = v
    return out


def check() -> None:
    for name in PARAMETERS:
        ref = reference(name)
        g = torch.Generator().manual_seed(1)
        for k, p in ref.named_parameters():  # a well-conditioned random draw (as the golden writers')
            r = torch.randn(p.shape, generator=g, dtype=torch.float64)
            if k.endswith(("logit_scale", "lambda_re", "lambda_im", "c_re", "c_im", "mixer.logits", ".d")):
                r = {"logit_scale": math.log(10.0) + 0.3 * r, "lambda_re": 0.6 * r - 0.5}.get(k.split(".")[-1], 0.5 * r)
            elif p.dim() == 2:
                r = r * (1.0 if k == "embed.weight" else p.shape[1] ** -0.5)
            else:  # norm gains ~1, biases ~0
                r = (1.0 if k.endswith("weight") else 0.0) + 0.1 * r
            p.data.copy_(r)
        fast = build(name).double()
        fast.load_state_dict(from_reference(name, dict(ref.named_parameters())), strict=True)
        n_ref = sum(p.numel() for p in ref.parameters())
        n_fast = sum(p.numel() for p in fast.parameters())
        ids, targets = torch.randint(0, 256, (2, 2, 128), generator=g)  # B = 2, T = 128 = 4 segments
        ref_loss, ref_logits = ref(ids, targets)
        logits = fast(ids)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        ref_loss.backward()
        loss.backward()
        ref_grads = from_reference(name, {k: p.grad for k, p in ref.named_parameters()})
        d_grad = max(((p.grad - ref_grads[k]).abs().max() / ref_grads[k].abs().max().clamp(min=1e-30)).item()
                     for k, p in fast.named_parameters())
        d_logits = ((logits - ref_logits).abs().max() / ref_logits.abs().max()).item()
        d_loss = abs(loss.item() - ref_loss.item()) / abs(ref_loss.item())
        print(f"{name:12s} parameters {n_fast} (reference {n_ref}, PARAMETERS {PARAMETERS[name]})  rel. max diff: "
              f"logits {d_logits:.1e}, loss {d_loss:.1e} (loss {loss.item():.4f}), worst gradient {d_grad:.1e}")
        assert n_fast == n_ref == PARAMETERS[name], name
        assert d_logits < 1e-9 and d_loss < 1e-9 and d_grad < 1e-9, name
        if name == "transformer":  # decoding token by token reproduces the forward's logits
            with torch.no_grad():
                cache = fast.empty_cache(2, 200)
                stepped = torch.cat([fast.decode(ids[:, p:p + 1], cache) for p in range(ids.shape[1])], dim=1)
            d_decode = ((stepped - logits).abs().max() / logits.abs().max()).item()
            print(f"{name:12s} decoding vs forward: rel. max diff {d_decode:.1e}")
            assert d_decode < 1e-9, name
    print("ok")


if __name__ == "__main__":
    if "--check" in sys.argv:
        torch.set_num_threads(1)
        check()
    else:
        print(__doc__)
