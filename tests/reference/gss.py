"""Plain-PyTorch reference of the GSS branch (hybridseq::layers::Gss).

Written from the definition (Mehta et al. 2022, pseudocode 3.2, with the DSS kernel of
Gupta et al. 2022), not from hybridseq's C++; gradients come from autograd:

    u  = GELU(x W_u^T)                    W_u: (F, E), no bias
    v  = GELU(x W_v^T)                    W_v: (H, E), no bias
    ũ  = LayerNorm(v)                     over H, gain and bias
    y_h = (K_h * ũ_h)[0..L) + D_h ũ_h     causal convolution per channel h
    o  = ((y W_g^T) ⊙ u) W_o^T + b_o      W_g: (F, H) no bias, W_o: (E, F) with bias

    Λ_n = −exp(λre_n) + i·exp(λim_n),   C̃_{h,n} = C_{h,n} (e^{Λ_n} − 1) / Λ_n,
    K_h[ℓ] = Re Σ_n C̃_{h,n} e^{Λ_n ℓ}      (no conjugate-pair doubling)

The convolution is the reference implementation's (lucidrains/gated-state-spaces-pytorch):
rfft/irfft zero-padded to n = 2L, first L outputs. `dss_recurrent` is the same map as the
plain diagonal recurrence, used by golden_gss.py to check the FFT form before writing.
Parameter names are the C++ ones: to_u.weight, to_v.weight, norm.weight, norm.bias,
lambda_re, lambda_im, c_re, c_im, d, to_gate.weight, to_out.weight, to_out.bias.
"""

from __future__ import annotations

import math
from typing import Dict

import torch
from torch import Tensor

Params = Dict[str, Tensor]


def gelu(x: Tensor) -> Tensor:
    """Exact GELU, x·Φ(x)."""
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    y = x @ weight.transpose(0, 1)
    return y if bias is None else y + bias


def layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> Tensor:
    mean = x.mean(dim=-1, keepdim=True)
    xc = x - mean
    var = (xc * xc).mean(dim=-1, keepdim=True)
    return xc / torch.sqrt(var + eps) * weight + bias


def dss_lambda(lambda_re: Tensor, lambda_im: Tensor) -> Tensor:
    """Λ (N,) complex."""
    return torch.complex(-torch.exp(lambda_re), torch.exp(lambda_im))


def dss_c_tilde(p: Params) -> Tensor:
    """C̃ (H, N) complex."""
    lam = dss_lambda(p["lambda_re"], p["lambda_im"])
    c = torch.complex(p["c_re"], p["c_im"])
    return c * (torch.exp(lam) - 1.0) / lam


def dss_kernel(p: Params, length: int) -> Tensor:
    """K (L, H) real: K[ℓ, h] = Re Σ_n C̃[h, n] exp(Λ_n ℓ)."""
    lam = dss_lambda(p["lambda_re"], p["lambda_im"])
    ell = torch.arange(length, dtype=p["lambda_re"].dtype)
    vandermonde = torch.exp(lam[:, None] * ell[None, :])  # (N, L)
    return (dss_c_tilde(p) @ vandermonde).real.transpose(0, 1)


def causal_conv_fft(k: Tensor, u: Tensor) -> Tensor:
    """y[b, t, h] = Σ_{s≤t} k[t−s, h] u[b, s, h] via FFT zero-padded to 2L."""
    length = u.shape[-2]
    n = 2 * length
    uf = torch.fft.rfft(u, n=n, dim=-2)
    kf = torch.fft.rfft(k, n=n, dim=-2)
    return torch.fft.irfft(uf * kf, n=n, dim=-2)[..., :length, :]


def dss(ut: Tensor, p: Params) -> Tensor:
    """SSM output y (B, L, H) from ũ (B, L, H)."""
    k = dss_kernel(p, ut.shape[-2])
    return causal_conv_fft(k, ut) + ut * p["d"]


def dss_recurrent(ut: Tensor, p: Params) -> Tensor:
    """The same map as `dss`, as the diagonal recurrence s[t] = e^Λ s[t−1] + ũ[t]."""
    lam = dss_lambda(p["lambda_re"], p["lambda_im"])
    a = torch.exp(lam)  # (N,)
    ct = dss_c_tilde(p)  # (H, N)
    bsz, length, h = ut.shape
    s = torch.zeros(bsz, h, lam.shape[0], dtype=torch.complex128 if ut.dtype == torch.float64 else torch.complex64)
    ys = []
    for t in range(length):
        s = a * s + ut[:, t, :, None]
        ys.append((ct * s).sum(-1).real + p["d"] * ut[:, t, :])
    return torch.stack(ys, dim=1)


def gss(x: Tensor, p: Params, eps: float = 1e-5, recurrent: bool = False) -> Tensor:
    """The GSS branch x (B, L, E) → o (B, L, E)."""
    u = gelu(linear(x, p["to_u.weight"]))
    v = gelu(linear(x, p["to_v.weight"]))
    ut = layer_norm(v, p["norm.weight"], p["norm.bias"], eps)
    y = dss_recurrent(ut, p) if recurrent else dss(ut, p)
    g = linear(y, p["to_gate.weight"])
    return linear(g * u, p["to_out.weight"], p["to_out.bias"])
