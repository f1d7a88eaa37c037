#!/usr/bin/env python3
"""Golden files of the Mamba-1 branch: tests/golden/mamba*.safetensors.

    pip install torch safetensors numpy transformers
    python3 tests/reference/golden_mamba.py [--out tests/golden]

or from make_golden.py: ``golden_mamba.write_mamba_goldens(out)``.

Same conventions as make_golden.py (tests/reference/README.md): a fixed seed per case;
inputs, params and grad_output drawn in float64 and rounded to float32; forward and
backward (autograd, L = sum(output * grad_output)) in float64 on those rounded values;
everything stored as F32 under input, params/<name>, output, grad_output, grad_input,
grads/<name>; bytes made deterministic by make_golden.canonical_safetensors_bytes.

Two sources of truth:
* mamba, mamba_t1, mamba_t13: tests/reference/mamba.py, the definition written out in
  plain torch (sequential scan). Before writing, each case is recomputed with torch
  built-ins (F.conv1d, F.softplus, F.silu) and must agree to 1e-12.
* mamba_hf, mamba_hf_t13: Hugging Face transformers' MambaMixer, loaded with the SAME
  parameters (load_state_dict by name) and run through its torch path (the CUDA kernels
  run only on CUDA; on CPU MambaMixer uses its sequential torch scan). The module runs in
  float64, but MambaMixer itself rounds A = -exp(A_log.float()), B and the scan input to
  float32, so this file agrees with mamba.safetensors to ~1e-7 relative, not 1e-15.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Dict, List, Tuple

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import mamba as reference  # noqa: E402
import make_golden  # noqa: E402
from make_golden import randn  # noqa: E402

GENERATOR = "tests/reference/golden_mamba.py"
F64 = torch.float64

# Shapes. "small": the shape of the C++ cases MambaSmall/MambaT1; "odd": MambaT13 (odd N,
# K = 3, default dt_rank = ceil(6/16) = 1, projection biases on, no conv bias).
SHAPES = {
    "small": dict(d_model=8, d_state=4, expand=2, d_conv=4, dt_rank=2, conv_bias=True, bias=False),
    "odd": dict(d_model=6, d_state=3, expand=2, d_conv=3, dt_rank=1, conv_bias=False, bias=True),
}

# (name, seed, shape, batch, time, source)
CASES: List[Tuple[str, int, str, int, int, str]] = [
    ("mamba", 3001, "small", 2, 7, "reference"),
    ("mamba_t1", 3002, "small", 3, 1, "reference"),
    ("mamba_t13", 3003, "odd", 2, 13, "reference"),
    ("mamba_hf", 3001, "small", 2, 7, "transformers"),
    ("mamba_hf_t13", 3003, "odd", 2, 13, "transformers"),
]


def config_of(shape: str, batch: int, time: int) -> dict:
    c = dict(SHAPES[shape])
    c["d_inner"] = c["expand"] * c["d_model"]
    c["input_shape"] = [batch, time, c["d_model"]]
    return c


def build(g: torch.Generator, cfg: dict) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    """Inputs and parameters at the scales of a trained mixer: weights ~ N(0, 1/fan_in), so
    activations stay O(1) (float rounding then stays near the stored values' own); Δ from
    ~0.01 to ~2 (decays from ~1 to ~0); A_log near log(1..N) as at initialisation."""
    d, di, n, k, r = cfg["d_model"], cfg["d_inner"], cfg["d_state"], cfg["d_conv"], cfg["dt_rank"]
    b, t = cfg["input_shape"][:2]
    x = randn(g, b, t, d)
    p: Dict[str, torch.Tensor] = {}
    p["in_proj.weight"] = randn(g, 2 * di, d, std=d ** -0.5)
    if cfg["bias"]:
        p["in_proj.bias"] = randn(g, 2 * di, std=0.1)
    p["conv1d.weight"] = randn(g, di, 1, k, std=k ** -0.5)
    if cfg["conv_bias"]:
        p["conv1d.bias"] = randn(g, di, std=0.1)
    p["x_proj.weight"] = randn(g, r + 2 * n, di, std=di ** -0.5)
    p["dt_proj.weight"] = randn(g, di, r, std=r ** -0.5)
    dt = torch.exp(torch.rand(di, generator=g, dtype=F64) * (torch.log(torch.tensor(0.5)) - torch.log(torch.tensor(0.01)))
                   + torch.log(torch.tensor(0.01)))
    p["dt_proj.bias"] = make_golden.f32_round(dt + torch.log(-torch.expm1(-dt)))
    p["A_log"] = make_golden.f32_round(torch.log(torch.arange(1, n + 1, dtype=F64)).expand(di, n)
                                       + 0.1 * torch.randn(di, n, generator=g, dtype=F64))
    p["D"] = randn(g, di, std=0.1, mean=1.0)
    p["out_proj.weight"] = randn(g, d, di, std=di ** -0.5)
    if cfg["bias"]:
        p["out_proj.bias"] = randn(g, d, std=0.1)
    return x, p


def builtin_mamba(x: torch.Tensor, p: Dict[str, torch.Tensor], cfg: dict) -> torch.Tensor:
    """The same mixer through torch built-ins (F.linear, F.conv1d, F.softplus, F.silu) and a
    state recurrence written differently: a second way to the reference's output."""
    di, n, r, k = cfg["d_inner"], cfg["d_state"], cfg["dt_rank"], cfg["d_conv"]
    xz = F.linear(x, p["in_proj.weight"], p.get("in_proj.bias"))
    xs, z = xz[..., :di], xz[..., di:]
    conv = F.conv1d(xs.transpose(1, 2), p["conv1d.weight"], p.get("conv1d.bias"), padding=k - 1, groups=di)
    u = F.silu(conv[..., : x.shape[1]].transpose(1, 2))
    dbc = F.linear(u, p["x_proj.weight"])
    delta = F.softplus(F.linear(dbc[..., :r], p["dt_proj.weight"], p["dt_proj.bias"]))
    bm, cm = dbc[..., r:r + n], dbc[..., r + n:]
    a = -torch.exp(p["A_log"])
    h = x.new_zeros(x.shape[0], di, n)
    ys = []
    for t in range(x.shape[1]):
        h = torch.exp(torch.einsum("bd,dn->bdn", delta[:, t], a)) * h + torch.einsum(
            "bd,bn->bdn", delta[:, t] * u[:, t], bm[:, t])
        ys.append(torch.einsum("bdn,bn->bd", h, cm[:, t]))
    y = torch.stack(ys, 1) + u * p["D"]
    return F.linear(y * F.silu(z), p["out_proj.weight"], p.get("out_proj.bias"))


def hf_mixer(cfg: dict, params: Dict[str, torch.Tensor]):
    """transformers' MambaMixer with our parameters, in float64, eval mode (torch path)."""
    from transformers import MambaConfig
    from transformers.models.mamba.modeling_mamba import MambaMixer

    config = MambaConfig(hidden_size=cfg["d_model"], state_size=cfg["d_state"], expand=cfg["expand"],
                         conv_kernel=cfg["d_conv"], time_step_rank=cfg["dt_rank"], use_bias=cfg["bias"],
                         use_conv_bias=cfg["conv_bias"], hidden_act="silu", num_hidden_layers=1)
    mixer = MambaMixer(config, layer_idx=0).to(F64).eval()
    missing, unexpected = mixer.load_state_dict(params, strict=True)
    assert not missing and not unexpected, (missing, unexpected)
    return mixer


def forward_backward(fn, x: torch.Tensor, params: Dict[str, torch.Tensor], grad_output: torch.Tensor):
    xg = x.clone().requires_grad_(True)
    pg = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    out = fn(xg, pg)
    grads = torch.autograd.grad((out * grad_output).sum(), [xg] + list(pg.values()))
    res = {"output": out.detach(), "grad_input": grads[0]}
    for k, gr in zip(pg.keys(), grads[1:]):
        res["grads/" + k] = gr
    return res


def build_case(name: str, seed: int, shape: str, batch: int, time: int, source: str):
    g = torch.Generator().manual_seed(seed)
    cfg = config_of(shape, batch, time)
    x, params = build(g, cfg)
    grad_output = randn(g, batch, time, cfg["d_model"])
    if source == "reference":
        res = forward_backward(lambda xx, pp: reference.mamba(xx, pp, cfg), x, params, grad_output)
        with torch.no_grad():
            other = builtin_mamba(x, params, cfg)
        err = (other - res["output"]).abs().max().item()
        assert err < 1e-12, f"{name}: reference and torch built-ins differ by {err}"
    else:
        import transformers

        mixer = hf_mixer(cfg, params)

        def run(xx, pp):
            # Functional call: MambaMixer's own code on our (grad-tracking) parameters.
            return torch.func.functional_call(mixer, pp, (xx,))

        res = forward_backward(run, x, params, grad_output)
        ref_out = reference.mamba(x, params, cfg)
        rel = ((res["output"] - ref_out).abs().max() / ref_out.abs().max()).item()
        assert rel < 1e-5, f"{name}: MambaMixer and the plain reference differ by {rel:.2e} (relative)"
        cfg = dict(cfg, transformers=transformers.__version__, reference_max_rel_diff=f"{rel:.3e}")
    cfg = dict(cfg, seed=seed, source=source)
    return make_golden.layer_tensors(x, params, grad_output, res), cfg


def write_case(outdir: str, name: str, seed: int, shape: str, batch: int, time: int, source: str) -> str:
    tensors, cfg = build_case(name, seed, shape, batch, time, source)
    path, size = make_golden.write_golden(outdir, name, GENERATOR, tensors, cfg)
    print(f"{name}.safetensors: {size} B, {len(tensors)} tensors ({source})")
    return path


def write_mamba_goldens(outdir: str) -> List[str]:
    """Writes every Mamba golden into `outdir`; returns their paths. Without transformers
    installed, the MambaMixer goldens are skipped with a note (the committed files stay)."""
    os.makedirs(outdir, exist_ok=True)
    have_hf = importlib.util.find_spec("transformers") is not None
    paths = []
    with make_golden.single_threaded():
        for case in CASES:
            if case[-1] == "transformers" and not have_hf:
                print(f"note: transformers is not installed; skipping {case[0]}.safetensors")
                continue
            paths.append(write_case(outdir, *case))
    return paths


if __name__ == "__main__":
    sys.exit(make_golden.generator_main(__doc__, write_mamba_goldens))
