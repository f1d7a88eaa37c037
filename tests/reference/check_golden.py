#!/usr/bin/env python3
"""Self-consistency check of the golden files in tests/golden.

    python3 tests/reference/check_golden.py [--dir tests/golden]

For every layer golden (files whose metadata names a case known to
make_golden.py) this:
  1. reads the file with safetensors and checks names / dtypes / shapes;
  2. recomputes forward + backward in float64 from the stored input, params,
     targets and grad_output with tests/reference/layers.py and requires the
     stored float32 values to match (they were produced the same way, so the
     match is to float32 rounding);
  3. recomputes the same with an independent formulation built from torch
     built-ins (torch.nn.functional.linear / rms_norm / layer_norm / gelu /
     silu / softplus / embedding / cross_entropy, and a complex-number RoPE)
     and requires agreement to float32 precision.
Files from other generators (e.g. golden_io's io_*.safetensors) are skipped.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from typing import Dict

import torch
import torch.nn.functional as F
from safetensors import safe_open

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import layers  # noqa: E402
import make_golden  # noqa: E402

F64 = torch.float64
KNOWN = {name for name, _, _ in make_golden.CASES}


# --------------------------------------------------------------------------
# Independent formulation from torch built-ins
# --------------------------------------------------------------------------

def rope_complex(x, rotary_dim, base, offset):
    """RoPE via complex multiplication: z = x1 + i x2, z * exp(i theta)."""
    half = rotary_dim // 2
    T = x.shape[1]
    inv_freq = 1.0 / (float(base) ** (torch.arange(0, rotary_dim, 2, dtype=F64) / rotary_dim))
    theta = torch.outer(torch.arange(offset, offset + T, dtype=F64), inv_freq)
    rot = torch.polar(torch.ones_like(theta), theta)[None, :, None, :]
    z = torch.complex(x[..., :half], x[..., half:rotary_dim]) * rot
    return torch.cat([z.real, z.imag, x[..., rotary_dim:]], dim=-1)


def mlp_builtin(x, p, prefix):
    h = F.gelu(F.linear(x, p[prefix + "fc1.weight"], p[prefix + "fc1.bias"]))
    return F.linear(h, p[prefix + "fc2.weight"], p[prefix + "fc2.bias"])


def forward_builtin(case, cfg, x, p, targets=None):
    if case in ("linear_bias", "linear_nobias"):
        return {"output": F.linear(x, p["weight"], p.get("bias"))}
    if case == "rmsnorm":
        return {"output": F.rms_norm(x, (cfg["dim"],), p["weight"], cfg["eps"])}
    if case == "layernorm":
        return {"output": F.layer_norm(x, (cfg["dim"],), p["weight"], p["bias"], cfg["eps"])}
    if case in ("rope_full", "rope_partial"):
        return {"output": rope_complex(x, cfg["rotary_dim"], cfg["base"], cfg["position_offset"])}
    if case == "gelu":
        return {"output": F.gelu(x)}
    if case == "gelu_tanh":
        return {"output": F.gelu(x, approximate="tanh")}
    if case == "silu":
        return {"output": F.silu(x)}
    if case == "softplus":
        return {"output": F.softplus(x, beta=cfg["beta"], threshold=cfg["threshold"])}
    if case == "ffn_gelu":
        return {"output": mlp_builtin(x, p, "")}
    if case == "ffn_swiglu":
        h = F.silu(F.linear(x, p["gate.weight"])) * F.linear(x, p["up.weight"])
        return {"output": F.linear(h, p["down.weight"])}
    if case == "dual_ffn":
        return {"output": mlp_builtin(x, p, "primary.") + mlp_builtin(x, p, "auxiliary.")}
    if case == "embedding":
        return {"output": F.embedding(x, p["weight"])}
    if case == "lm_head_ce":
        logits = F.linear(x, p["weight"])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                               ignore_index=cfg["ignore_index"], reduction="mean")
        return {"output": loss, "logits": logits}
    raise KeyError(case)


# --------------------------------------------------------------------------

def max_err(stored: torch.Tensor, ref: torch.Tensor) -> float:
    """max |stored - ref| / (1 + |ref|) with stored float32 vs float64 ref."""
    return float(((stored.to(F64) - ref).abs() / (1.0 + ref.abs())).max()) if ref.numel() else 0.0


def worst_error(stored: Dict[str, torch.Tensor], res: Dict[str, torch.Tensor], tol: float, label: str) -> float:
    """The largest max_err of the results `res` against the `stored` tensors; when it exceeds
    `tol`, prints every tensor's error (lines "  <label> <name>: err ...")."""
    e = max(max_err(stored[k], res[k]) for k in res)
    if not e <= tol:
        for k in sorted(res):
            print(f"  {label} {k}: err {max_err(stored[k], res[k]):.3e}")
    return e


def golden_dir(argv=None) -> str:
    """The command line of a checker: ``--dir DIR`` (default tests/golden). Also puts torch on
    one thread (float64 reductions in the generators' order)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=os.path.join("tests", "golden"))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    return args.dir


def check_file(path: str, tol_self: float, tol_builtin: float) -> bool:
    with safe_open(path, framework="pt") as f:
        meta = f.metadata() or {}
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    case = meta.get("case")
    if case not in KNOWN or meta.get("generator") != make_golden.GENERATOR:
        print(f"skip {os.path.basename(path)} (case={case!r}, generator={meta.get('generator')!r})")
        return True
    cfg = json.loads(meta["config"])
    size = os.path.getsize(path)
    assert size < 10 * 1024, f"{path} too large: {size} B"

    # --- names, dtypes, shapes
    for k, v in tensors.items():
        want = torch.int64 if (k == "targets" or (case == "embedding" and k == "input")) else torch.float32
        assert v.dtype == want, f"{path}:{k} dtype {v.dtype}, want {want}"
    x = tensors["input"]
    assert list(x.shape) == cfg["input_shape"], (path, x.shape, cfg["input_shape"])
    params = {k[len("params/"):]: v.to(F64) for k, v in tensors.items() if k.startswith("params/")}
    grads = {k for k in tensors if k.startswith("grads/")}
    assert grads == {"grads/" + k for k in params}, (path, grads, params.keys())
    targets = tensors.get("targets")
    go = tensors.get("grad_output")
    if case == "lm_head_ce":
        assert go is None and targets is not None and "logits" in tensors
        assert tensors["output"].shape == torch.Size([])
    else:
        assert go is not None and go.shape == tensors["output"].shape
        assert targets is None and "logits" not in tensors
    assert ("grad_input" in tensors) == x.is_floating_point()
    if "grad_input" in tensors:
        assert tensors["grad_input"].shape == x.shape
    x64 = x.to(F64) if x.is_floating_point() else x
    go64 = go.to(F64) if go is not None else None

    expected_names = set(tensors) - {"input", "targets", "grad_output"} - {"params/" + k for k in params}
    ok = True
    worst = {}
    for label, fwd, tol in (("layers", layers.forward_case, tol_self),
                            ("builtin", forward_builtin, tol_builtin)):
        res = layers.forward_backward(fwd, case, cfg, x64, params, go64, targets)
        assert set(res) == expected_names, (path, label, set(res) ^ expected_names)
        worst[label] = worst_error(tensors, res, tol, label)
        ok &= worst[label] <= tol
    status = "OK  " if ok else "FAIL"
    print(f"{status} {os.path.basename(path)} ({size} B, {len(tensors)} tensors): "
          f"max rel err vs layers.py {worst['layers']:.2e}, vs torch built-ins {worst['builtin']:.2e}")
    return ok


def main(argv=None) -> int:
    files = sorted(glob.glob(os.path.join(golden_dir(argv), "*.safetensors")))
    seen = set()
    ok = True
    for path in files:
        with safe_open(path, framework="pt") as f:
            seen.add((f.metadata() or {}).get("case"))
        ok &= check_file(path, tol_self=1e-7, tol_builtin=2e-7)
    missing = KNOWN - seen
    if missing:
        print(f"FAIL missing golden cases: {sorted(missing)}")
        ok = False
    print("all goldens OK" if ok else "golden check FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
