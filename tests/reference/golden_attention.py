#!/usr/bin/env python3
"""Attention-branch goldens: tests/golden/attn_<case>.safetensors.

    python3 tests/reference/golden_attention.py tests/golden

The branch is defined in tests/reference/ATTENTION.md and implemented in
tests/reference/attention.py.  File conventions are those of make_golden.py
(same byte-stable writer, same tensor names): "input", "params/<name>",
"output", "grad_output", "grad_input", "grads/<name>", all F32; metadata
case / generator / torch / config (JSON, sorted keys, includes "seed").

Values: x ~ N(0,1); weights ~ N(0, 1/fan_in) (= 2 * N(0, 0.5^2) / sqrt(fan_in),
so q, k entries are O(1) and dot scores are O(1)); biases ~ N(0, 0.1^2);
logit_scale = log(10) + 0.3 N(0,1); grad_output ~ N(0,1).  All drawn in
float64 from a per-case torch.Generator, rounded to float32; forward and
backward run in float64 with autograd on the rounded values; stored as F32.
"""

from __future__ import annotations

import math
import os
import sys
from typing import Dict, List, Tuple

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import attention  # noqa: E402
import make_golden  # noqa: E402
from make_golden import f32_round  # noqa: E402

GENERATOR = "tests/reference/golden_attention.py"
F64 = torch.float64
PREFIX = "attn_"

DEFAULTS = dict(base=10000.0, score="dot", scale="per_head", qkv_bias=False,
                out_bias=False, merge="concat", scheme="causal", scheme_param=0)


def _cfg(**kw) -> dict:
    c = dict(DEFAULTS)
    c.update(kw)
    c["base"] = float(c["base"])
    return c


_GQA = dict(d_model=16, heads=4, kv_heads=2, head_dim=8, rotary_dim=8, base=10000)
_COS = dict(d_model=16, heads=4, kv_heads=2, head_dim=8, rotary_dim=4, base=500, score="cosine")

# (name, seed, config)
CASES: List[Tuple[str, int, dict]] = [
    ("causal_gqa", 3001, _cfg(**_GQA, B=2, T=7)),
    ("causal_mqa", 3002, _cfg(d_model=16, heads=4, kv_heads=1, head_dim=4, rotary_dim=4,
                             qkv_bias=True, out_bias=True, B=2, T=5)),
    ("causal_t1", 3003, _cfg(**_GQA, B=2, T=1)),
    ("cosine_head", 3004, _cfg(**_COS, scale="per_head", B=2, T=6)),
    ("cosine_layer", 3005, _cfg(**dict(_COS, kv_heads=4), scale="per_layer", B=2, T=6)),
    ("sliding", 3006, _cfg(d_model=16, heads=2, kv_heads=2, head_dim=8, rotary_dim=8,
                          scheme="sliding", scheme_param=3, B=1, T=9)),
    ("ecp", 3007, _cfg(d_model=16, heads=2, kv_heads=1, head_dim=8, rotary_dim=8,
                      scheme="ecp", scheme_param=3, B=2, T=9)),
    ("ssplit", 3008, _cfg(d_model=16, heads=2, kv_heads=2, head_dim=8, rotary_dim=0,
                         scheme="ssplit", scheme_param=3, B=1, T=9)),
    ("bidirectional", 3009, _cfg(d_model=16, heads=2, kv_heads=2, head_dim=8, rotary_dim=0,
                                scheme="bidirectional", B=1, T=5)),
    ("perceiver", 3010, _cfg(d_model=16, heads=2, kv_heads=2, head_dim=8, rotary_dim=8,
                            scheme="perceiver", scheme_param=3, B=2, T=8)),
    ("neox_sum", 3011, _cfg(d_model=8, heads=2, kv_heads=2, head_dim=8, rotary_dim=2,
                           merge="sum", qkv_bias=True, out_bias=True,
                           scheme="sliding", scheme_param=4, B=2, T=9)),
    ("long_tiles", 3012, _cfg(d_model=8, heads=2, kv_heads=1, head_dim=4, rotary_dim=4,
                             B=1, T=70)),
    ("long_ecp", 3013, _cfg(d_model=8, heads=2, kv_heads=2, head_dim=4, rotary_dim=4,
                           scheme="ecp", scheme_param=16, B=1, T=80)),
    ("long_sliding", 3014, _cfg(d_model=8, heads=2, kv_heads=2, head_dim=4, rotary_dim=4,
                               score="cosine", scale="per_head",
                               scheme="sliding", scheme_param=20, B=1, T=70)),
]

CONFIG_KEYS = {"d_model", "heads", "kv_heads", "head_dim", "rotary_dim", "base", "score",
               "scale", "qkv_bias", "out_bias", "merge", "scheme", "scheme_param", "B", "T"}


def randn(g, *shape, std=1.0, mean=0.0):
    return f32_round(mean + std * torch.randn(*shape, generator=g, dtype=F64))


def param_shapes(cfg: dict) -> Dict[str, Tuple[int, ...]]:
    """Parameter names and shapes, in draw order."""
    D, H, Hkv, Dh = cfg["d_model"], cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
    shapes = {"wqkv.weight": ((H + 2 * Hkv) * Dh, D)}
    if cfg["qkv_bias"]:
        shapes["wqkv.bias"] = ((H + 2 * Hkv) * Dh,)
    shapes["wo.weight"] = (D, H * Dh) if cfg["merge"] == "concat" else (D, Dh)
    if cfg["out_bias"]:
        shapes["wo.bias"] = (D,)
    if cfg["score"] == "cosine":
        shapes["logit_scale"] = (H,) if cfg["scale"] == "per_head" else (1,)
    return shapes


def output_shape(cfg: dict) -> Tuple[int, int, int]:
    rows = cfg["scheme_param"] if cfg["scheme"] == "perceiver" else cfg["T"]
    return (cfg["B"], rows, cfg["d_model"])


def draw(g: torch.Generator, cfg: dict):
    x = randn(g, cfg["B"], cfg["T"], cfg["d_model"])
    params: Dict[str, torch.Tensor] = {}
    for name, shape in param_shapes(cfg).items():
        if name.endswith(".weight"):
            params[name] = randn(g, *shape, std=1.0 / math.sqrt(shape[1]))
        elif name.endswith(".bias"):
            params[name] = randn(g, *shape, std=0.1)
        elif name == "logit_scale":
            params[name] = randn(g, *shape, std=0.3, mean=math.log(10.0))
        else:
            raise KeyError(name)
    return x, params


def forward_backward(x, params, grad_output, cfg):
    """float64 forward + autograd backward with L = sum(output * grad_output)."""
    x = x.detach().clone().requires_grad_(True)
    p = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    y = attention.attention(x, p, cfg)
    grads = torch.autograd.grad((y * grad_output).sum(), [x] + list(p.values()))
    res = {"output": y.detach(), "grad_input": grads[0]}
    for k, gk in zip(p, grads[1:]):
        res["grads/" + k] = gk
    return res


def build_case(name: str, seed: int, cfg: dict):
    assert CONFIG_KEYS <= set(cfg), CONFIG_KEYS - set(cfg)
    g = torch.Generator().manual_seed(seed)
    cfg = dict(cfg, seed=seed)
    x, params = draw(g, cfg)
    grad_output = randn(g, *output_shape(cfg))
    res = forward_backward(x, params, grad_output, cfg)
    assert tuple(res["output"].shape) == output_shape(cfg)
    return make_golden.layer_tensors(x, params, grad_output, res), cfg


def write_case(outdir: str, name: str, seed: int, cfg: dict) -> str:
    tensors, cfg = build_case(name, seed, cfg)
    case = PREFIX + name
    path, size = make_golden.write_described(outdir, case, GENERATOR, tensors, cfg)
    assert size < 40 * 1024, (path, size)
    return path


def write_attention_goldens(outdir: str) -> List[str]:
    """Write every attn_<case>.safetensors into outdir; returns the paths."""
    return make_golden.write_cases(outdir, write_case, CASES)


if __name__ == "__main__":
    write_attention_goldens(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "golden"))
