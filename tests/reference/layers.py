"""Plain-PyTorch reference implementations of hybridseq's primitive layers.

These functions are written directly from the mathematical definitions (not by
calling the equivalent ``torch.nn.functional`` helper), so that they form an
independent reference for the C++ kernels.  Gradients come from torch autograd.
``check_golden.py`` additionally cross-checks them against the torch built-ins.

Conventions
-----------
* Linear weights use torch layout ``(out_features, in_features)``: ``y = x W^T + b``.
* RoPE operates on ``(B, T, H, Dh)`` tensors with the GPT-NeoX / HF-Llama
  "rotate_half" convention (pairs are ``(i, i + r/2)``, not interleaved).
* All functions are dtype-agnostic; the golden generator runs them in float64.
"""

from __future__ import annotations

import math
from typing import Dict, Optional, Tuple

import torch
from torch import Tensor

Params = Dict[str, Tensor]


# --------------------------------------------------------------------------
# Basic layers
# --------------------------------------------------------------------------

def linear(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    """Affine map ``y = x W^T + b``.

    x: (..., in), weight: (out, in), bias: (out,) or None -> y: (..., out).
    """
    y = torch.matmul(x, weight.transpose(0, 1))
    if bias is not None:
        y = y + bias
    return y


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """RMSNorm over the last dim: ``y = x / sqrt(mean(x^2) + eps) * weight``."""
    ms = (x * x).mean(dim=-1, keepdim=True)
    return x / torch.sqrt(ms + eps) * weight


def layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> Tensor:
    """LayerNorm over the last dim with the *biased* variance:

    ``y = (x - mean) / sqrt(var + eps) * weight + bias``,
    ``var = mean((x - mean)^2)``.
    """
    mean = x.mean(dim=-1, keepdim=True)
    xc = x - mean
    var = (xc * xc).mean(dim=-1, keepdim=True)
    return xc / torch.sqrt(var + eps) * weight + bias


# --------------------------------------------------------------------------
# Rotary position embedding
# --------------------------------------------------------------------------

def rope_rotary_dim(head_dim: int, fraction: float) -> int:
    """Number of rotated dims for a partial-rotary fraction (must be even)."""
    r = int(head_dim * fraction)
    if r % 2 != 0 or r <= 0 or r > head_dim:
        raise ValueError(f"bad rotary_dim {r} for head_dim={head_dim}, fraction={fraction}")
    return r


def rope_angles(T: int, rotary_dim: int, base: float, position_offset: int,
                dtype=torch.float64) -> Tensor:
    """Angles ``theta[t, i] = (t + offset) * base^(-2i/r)``, shape (T, r/2)."""
    half = rotary_dim // 2
    i = torch.arange(half, dtype=dtype)
    inv_freq = torch.pow(torch.tensor(float(base), dtype=dtype), -2.0 * i / rotary_dim)
    t = torch.arange(T, dtype=dtype) + position_offset
    return t[:, None] * inv_freq[None, :]


def rope(x: Tensor, rotary_dim: int, base: float, position_offset: int = 0) -> Tensor:
    """Rotary embedding on x of shape (B, T, H, Dh), "rotate_half" convention.

    For the first ``r = rotary_dim`` dims: ``x1 = x[..., :r/2]``, ``x2 = x[..., r/2:r]``,
    ``out1 = x1 cos - x2 sin``, ``out2 = x2 cos + x1 sin`` with angle
    ``(t + offset) * base^(-2i/r)``.  Dims ``>= r`` pass through unchanged.
    """
    B, T, H, Dh = x.shape
    r = rotary_dim
    half = r // 2
    ang = rope_angles(T, r, base, position_offset, dtype=x.dtype)  # (T, r/2)
    cos = torch.cos(ang)[None, :, None, :]  # (1, T, 1, r/2)
    sin = torch.sin(ang)[None, :, None, :]
    x1 = x[..., :half]
    x2 = x[..., half:r]
    out1 = x1 * cos - x2 * sin
    out2 = x2 * cos + x1 * sin
    return torch.cat([out1, out2, x[..., r:]], dim=-1)


# --------------------------------------------------------------------------
# Activations
# --------------------------------------------------------------------------

def gelu(x: Tensor) -> Tensor:
    """Exact GELU: ``0.5 x (1 + erf(x / sqrt(2)))``."""
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def gelu_tanh(x: Tensor) -> Tensor:
    """Tanh-approximate GELU: ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``."""
    k = math.sqrt(2.0 / math.pi)
    return 0.5 * x * (1.0 + torch.tanh(k * (x + 0.044715 * x * x * x)))


def silu(x: Tensor) -> Tensor:
    """SiLU / swish: ``x * sigmoid(x) = x / (1 + exp(-x))``."""
    return x / (1.0 + torch.exp(-x))


def softplus(x: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """Softplus with torch's semantics: ``log(1 + exp(beta x)) / beta``, and the
    identity ``x`` where ``beta x > threshold`` (derivative 1 there)."""
    bx = beta * x
    # Evaluate the smooth branch only on a safe argument so the unused branch
    # never produces inf/nan (which would poison gradients through where()).
    safe = torch.where(bx > threshold, torch.zeros_like(bx), bx)
    smooth = torch.log1p(torch.exp(safe)) / beta
    return torch.where(bx > threshold, x, smooth)


ACTIVATIONS = {
    "gelu": gelu,
    "gelu_tanh": gelu_tanh,
    "silu": silu,
    "softplus": softplus,
}


# --------------------------------------------------------------------------
# Feed-forward blocks
# --------------------------------------------------------------------------

def ffn_gelu(x: Tensor, p: Params, prefix: str = "") -> Tensor:
    """GELU MLP: ``fc2(gelu(fc1(x)))`` (exact-erf GELU, both linears with bias).

    Params: ``{prefix}fc1.weight`` (hidden, d), ``{prefix}fc1.bias`` (hidden),
    ``{prefix}fc2.weight`` (d, hidden), ``{prefix}fc2.bias`` (d).
    """
    h = linear(x, p[prefix + "fc1.weight"], p[prefix + "fc1.bias"])
    return linear(gelu(h), p[prefix + "fc2.weight"], p[prefix + "fc2.bias"])


def ffn_swiglu(x: Tensor, p: Params, prefix: str = "") -> Tensor:
    """SwiGLU MLP: ``down(silu(gate(x)) * up(x))``, no biases.

    Params: ``gate.weight`` (hidden, d), ``up.weight`` (hidden, d), ``down.weight`` (d, hidden).
    """
    g = linear(x, p[prefix + "gate.weight"])
    u = linear(x, p[prefix + "up.weight"])
    return linear(silu(g) * u, p[prefix + "down.weight"])


def dual_ffn(x: Tensor, p: Params) -> Tensor:
    """Sum of two GELU MLPs: ``primary(x) + auxiliary(x)`` (params prefixed
    ``primary.`` and ``auxiliary.``, each laid out as in :func:`ffn_gelu`)."""
    return ffn_gelu(x, p, "primary.") + ffn_gelu(x, p, "auxiliary.")


# --------------------------------------------------------------------------
# Embedding and LM head
# --------------------------------------------------------------------------

def embedding(ids: Tensor, weight: Tensor) -> Tensor:
    """Row lookup ``out[..., :] = weight[ids[...], :]``; the weight gradient
    accumulates (sums) over repeated ids."""
    return weight[ids]


def lm_head_ce(x: Tensor, weight: Tensor, targets: Tensor,
               ignore_index: int = -100) -> Tuple[Tensor, Tensor]:
    """Bias-free LM head followed by mean cross-entropy.

    ``logits = x W^T`` (shape (..., V)); per-position loss
    ``logsumexp(logits) - logits[target]``; the result is the mean over the
    positions whose target != ignore_index (0-d tensor).
    Returns ``(loss, logits)``.
    """
    logits = linear(x, weight)
    V = logits.shape[-1]
    flat = logits.reshape(-1, V)
    tgt = targets.reshape(-1)
    valid = tgt != ignore_index
    safe_tgt = torch.where(valid, tgt, torch.zeros_like(tgt))
    lse = torch.logsumexp(flat, dim=-1)
    picked = flat.gather(1, safe_tgt[:, None])[:, 0]
    per_pos = (lse - picked) * valid.to(flat.dtype)
    count = valid.sum()
    if int(count) == 0:
        raise ValueError("all targets ignored (handled on the C++ side, no golden)")
    return per_pos.sum() / count.to(flat.dtype), logits


# --------------------------------------------------------------------------
# Case dispatch shared by make_golden.py and check_golden.py
# --------------------------------------------------------------------------

def forward_case(case: str, config: dict, x: Tensor, params: Params,
                 targets: Optional[Tensor] = None) -> Dict[str, Tensor]:
    """Run the forward of golden case ``case``.  Returns ``{"output": ...}``
    (plus ``"logits"`` for lm_head_ce).  ``config`` is the case's config dict."""
    if case in ("linear_bias", "linear_nobias"):
        return {"output": linear(x, params["weight"], params.get("bias"))}
    if case == "rmsnorm":
        return {"output": rms_norm(x, params["weight"], config["eps"])}
    if case == "layernorm":
        return {"output": layer_norm(x, params["weight"], params["bias"], config["eps"])}
    if case in ("rope_full", "rope_partial"):
        return {"output": rope(x, config["rotary_dim"], config["base"], config["position_offset"])}
    if case in ACTIVATIONS:
        fn = ACTIVATIONS[case]
        if case == "softplus":
            return {"output": softplus(x, config["beta"], config["threshold"])}
        return {"output": fn(x)}
    if case == "ffn_gelu":
        return {"output": ffn_gelu(x, params)}
    if case == "ffn_swiglu":
        return {"output": ffn_swiglu(x, params)}
    if case == "dual_ffn":
        return {"output": dual_ffn(x, params)}
    if case == "embedding":
        return {"output": embedding(x, params["weight"])}
    if case == "lm_head_ce":
        loss, logits = lm_head_ce(x, params["weight"], targets, config["ignore_index"])
        return {"output": loss, "logits": logits}
    raise KeyError(f"unknown case {case!r}")


def forward_backward(forward, case: str, config: dict, x: Tensor, params: Params,
                     grad_output: Optional[Tensor],
                     targets: Optional[Tensor] = None) -> Dict[str, Tensor]:
    """Forward + autograd backward using ``forward`` (a function with the
    signature of :func:`forward_case`).

    L = sum(output * grad_output)  (or L = output for the scalar CE loss).
    Returns tensors named per the golden convention: "output", optional
    "logits", "grad_input" (float inputs only) and "grads/<name>".
    """
    float_input = x.is_floating_point()
    x = x.detach().clone().requires_grad_(float_input)
    p = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    res = forward(case, config, x, p, targets)
    out = res["output"]
    if grad_output is None:
        loss = out
    else:
        loss = (out * grad_output).sum()
    leaves = ([x] if float_input else []) + [p[k] for k in p]
    grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    result = {k: v.detach() for k, v in res.items()}
    gi = 0
    if float_input:
        result["grad_input"] = grads[0]
        gi = 1
    for k, g in zip(p.keys(), grads[gi:]):
        result["grads/" + k] = g if g is not None else torch.zeros_like(p[k])
    return result
