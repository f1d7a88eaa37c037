#!/usr/bin/env python3
"""Golden files of the GSS branch: tests/golden/gss*.safetensors.

    python3 tests/reference/golden_gss.py [--out tests/golden]

or from make_golden.py: ``golden_gss.write_gss_goldens(out)``.

Same conventions as make_golden.py (tests/reference/README.md): a fixed seed per case;
inputs, params and grad_output drawn in float64 and rounded to float32; forward and
backward (autograd, L = sum(output * grad_output)) in float64 on those rounded values;
everything stored as F32 with the names input, params/<name>, output, grad_output,
grad_input, grads/<name>; bytes made deterministic by make_golden.canonical_safetensors_bytes.
Before writing, each case's FFT-form output is checked against the plain recurrence.
"""

from __future__ import annotations

import os
import sys
from typing import Dict, List, Tuple

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import gss as reference  # noqa: E402
import make_golden  # noqa: E402
from make_golden import bias, gain, randn, weight  # noqa: E402

GENERATOR = "tests/reference/golden_gss.py"

# E, F, H, N of every case: all different, none a multiple of the C++ 8-lane mode loop.
D_MODEL, D_GATE, D_SSM, D_STATE = 6, 8, 5, 4
EPS = 1e-5

# (name, seed, batch, time)
CASES: List[Tuple[str, int, int, int]] = [
    ("gss", 2001, 2, 7),
    ("gss_t17", 2002, 2, 17),
    ("gss_t1", 2003, 3, 1),
]


def build(g: torch.Generator, batch: int, time: int) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    e, f, h, n = D_MODEL, D_GATE, D_SSM, D_STATE
    x = randn(g, batch, time, e)
    p = {
        "to_u.weight": weight(g, f, e),
        "to_v.weight": weight(g, h, e),
        "norm.weight": gain(g, h),
        "norm.bias": bias(g, h),
        # Decay rates exp(λre) from ~0.1 to ~3, frequencies exp(λim) around 1: kernels that
        # neither vanish after one step nor stay flat over 17.
        "lambda_re": randn(g, n, std=0.6, mean=-0.5),
        "lambda_im": randn(g, n, std=0.6),
        "c_re": randn(g, h, n, std=0.5),
        "c_im": randn(g, h, n, std=0.5),
        "d": randn(g, h, std=0.5),
        "to_gate.weight": weight(g, f, h),
        "to_out.weight": weight(g, e, f),
        "to_out.bias": bias(g, e),
    }
    return x, p


def build_case(name: str, seed: int, batch: int, time: int) -> Tuple[Dict[str, torch.Tensor], dict]:
    g = torch.Generator().manual_seed(seed)
    x, params = build(g, batch, time)
    xg = x.clone().requires_grad_(True)
    pg = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    out = reference.gss(xg, pg, EPS)
    with torch.no_grad():
        rec = reference.gss(x, params, EPS, recurrent=True)
        err = (rec - out).abs().max().item() / max(out.abs().max().item(), 1e-300)
        assert err < 1e-12, f"{name}: FFT form and recurrence differ by {err:.3e} (relative)"
    grad_output = randn(g, *out.shape)
    (out * grad_output).sum().backward()
    res = dict({"output": out, "grad_input": xg.grad}, **{"grads/" + k: pg[k].grad for k in params})
    tensors = make_golden.layer_tensors(x, params, grad_output, res)
    cfg = {
        "input_shape": [batch, time, D_MODEL],
        "d_model": D_MODEL,
        "d_gate": D_GATE,
        "d_ssm": D_SSM,
        "d_state": D_STATE,
        "eps": EPS,
        "activation": "gelu",
        "approximate": "none",
        "lambda": "-exp(lambda_re) + i*exp(lambda_im)",
        "c_tilde": "C*(exp(lambda)-1)/lambda",
        "conv": "rfft/irfft n=2L, first L",
        "seed": seed,
    }
    return tensors, cfg


def write_gss_goldens(outdir: str) -> List[str]:
    """Writes every GSS golden into `outdir`; returns the paths."""
    return make_golden.write_cases(outdir, make_golden.case_writer(GENERATOR, build_case), CASES)


if __name__ == "__main__":
    sys.exit(make_golden.generator_main(__doc__, write_gss_goldens))
