#!/usr/bin/env python3
"""Check the attention goldens (tests/golden/attn_*.safetensors).

    python3 tests/reference/check_attention.py [--dir tests/golden]

For every case of golden_attention.CASES this
  1. reads the file, checks metadata (case, generator, config == the case's
     config), tensor names, F32 dtypes, shapes and the < 40 KB size bound;
  2. recomputes forward + backward in float64 from the stored input, params and
     grad_output three ways and requires the stored F32 values to match each to
     float32 rounding:
       a. attention.py (the generator's own reference);
       b. torch.nn.functional: F.linear, complex-number RoPE, F.normalize,
          F.scaled_dot_product_attention with a boolean attn_mask built from
          vectorised index formulas and enable_gqa=True;
       c. the same with repeat_interleave'd kv heads and an additive
          (0 / -inf) float mask, plus a per-query Python loop (explicit
          visible-key list, hand-written softmax) for the attention core;
  3. prints softmax statistics (mean max-probability, mean normalised entropy
     over rows with >= 2 visible keys) and requires them to be away from
     one-hot and uniform;
  4. when the installed torch version equals the file's, regenerates the
     case and requires byte-identical output.
"""

from __future__ import annotations

import json
import math
import os
import sys

import torch
import torch.nn.functional as F
from safetensors import safe_open

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import attention  # noqa: E402
import golden_attention as ga  # noqa: E402
from check_golden import golden_dir, worst_error  # noqa: E402
from make_golden import canonical_safetensors_bytes  # noqa: E402

F64 = torch.float64


# --------------------------------------------------------------------------
# Independent formulation
# --------------------------------------------------------------------------

def mask_vectorised(scheme, param, T):
    """(Tq, T) boolean mask and the query rows, from index arithmetic."""
    t = torch.arange(T)[:, None]
    tau = torch.arange(T)[None, :]
    rows = torch.arange(T)
    if scheme == "causal":
        m = tau <= t
    elif scheme == "sliding":
        m = (tau <= t) & (tau > t - param)
    elif scheme == "ecp":
        j = t // param
        lo = torch.where(j == 0, torch.zeros_like(j), (j - 1) * param)
        m = (tau >= lo) & (tau <= t)
    elif scheme == "ssplit":
        m = (tau // param) == (t // param)
    elif scheme == "bidirectional":
        m = torch.ones(T, T, dtype=torch.bool)
    elif scheme == "perceiver":
        m = tau <= t
        rows = torch.arange(T - param, T)
    else:
        raise ValueError(scheme)
    return m[rows], rows


def rope_complex(x, r, base):
    """RoPE as complex multiplication: (x1 + i x2) * exp(i p base^(-2i/r))."""
    if r == 0:
        return x
    half = r // 2
    T = x.shape[1]
    inv_freq = 1.0 / (float(base) ** (torch.arange(0, r, 2, dtype=F64) / r))
    theta = torch.outer(torch.arange(T, dtype=F64), inv_freq)
    rot = torch.polar(torch.ones_like(theta), theta)[None, :, None, :]
    z = torch.complex(x[..., :half], x[..., half:r]) * rot
    return torch.cat([z.real, z.imag, x[..., r:]], dim=-1)


def project(x, p, cfg):
    """q (B,H,T,Dh), k, v (B,Hkv,T,Dh) after RoPE; cosine: q, k normalised and
    q multiplied by exp(min(logit_scale, log 100)).  Returns (q, k, v, scale)."""
    B, T, _ = x.shape
    H, Hkv, Dh = cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
    q, k, v = F.linear(x, p["wqkv.weight"], p.get("wqkv.bias")).split(
        [H * Dh, Hkv * Dh, Hkv * Dh], dim=-1)
    q = rope_complex(q.view(B, T, H, Dh), cfg["rotary_dim"], cfg["base"]).transpose(1, 2)
    k = rope_complex(k.view(B, T, Hkv, Dh), cfg["rotary_dim"], cfg["base"]).transpose(1, 2)
    v = v.reshape(B, T, Hkv, Dh).transpose(1, 2)
    if cfg["score"] == "cosine":
        ls = p["logit_scale"].reshape(-1)
        mult = torch.exp(torch.minimum(ls, torch.tensor(math.log(100.0), dtype=F64)))
        mult = mult.expand(H) if ls.numel() == 1 else mult
        q = F.normalize(q, dim=-1, eps=1e-12) * mult[None, :, None, None]
        k = F.normalize(k, dim=-1, eps=1e-12)
        return q, k, v, 1.0
    return q, k, v, 1.0 / math.sqrt(Dh)


def merge_out(o, p, cfg):
    """o (B, H, Tq, Dh) -> y (B, Tq, D)."""
    B, H, Tq, Dh = o.shape
    if cfg["merge"] == "concat":
        o = o.transpose(1, 2).reshape(B, Tq, H * Dh)
    else:
        o = o.sum(dim=1)
    return F.linear(o, p["wo.weight"], p.get("wo.bias"))


def forward_sdpa_bool(x, p, cfg):
    q, k, v, scale = project(x, p, cfg)
    mask, rows = mask_vectorised(cfg["scheme"], cfg["scheme_param"], x.shape[1])
    o = F.scaled_dot_product_attention(q[:, :, rows], k, v, attn_mask=mask, scale=scale,
                                       enable_gqa=cfg["heads"] != cfg["kv_heads"])
    return merge_out(o, p, cfg)


def forward_sdpa_additive(x, p, cfg):
    q, k, v, scale = project(x, p, cfg)
    group = cfg["heads"] // cfg["kv_heads"]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    mask, rows = mask_vectorised(cfg["scheme"], cfg["scheme_param"], x.shape[1])
    add = torch.zeros(mask.shape, dtype=F64).masked_fill(~mask, float("-inf"))
    o = F.scaled_dot_product_attention(q[:, :, rows], k, v, attn_mask=add, scale=scale)
    return merge_out(o, p, cfg)


def forward_loop(x, p, cfg):
    """Attention core as a loop over (batch, head, query) with explicit key lists."""
    q, k, v, scale = project(x, p, cfg)
    B, H, T, Dh = q.shape
    group = H // cfg["kv_heads"]
    scheme, prm = cfg["scheme"], cfg["scheme_param"]
    rows = attention.query_positions(scheme, prm, T)
    out_b = []
    for b in range(B):
        out_h = []
        for h in range(H):
            kv = h // group
            out_t = []
            for t in rows:
                if scheme == "causal" or scheme == "perceiver":
                    keys = range(0, t + 1)
                elif scheme == "sliding":
                    keys = range(max(0, t - prm + 1), t + 1)
                elif scheme == "ecp":
                    j = t // prm
                    keys = range(0 if j == 0 else (j - 1) * prm, t + 1)
                elif scheme == "ssplit":
                    keys = range((t // prm) * prm, min(T, (t // prm + 1) * prm))
                else:
                    keys = range(T)
                keys = list(keys)
                s = torch.stack([(q[b, h, t] * k[b, kv, tau]).sum() * scale for tau in keys])
                e = torch.exp(s - s.max().detach())
                w = e / e.sum()
                out_t.append((w[:, None] * v[b, kv, keys]).sum(dim=0))
            out_h.append(torch.stack(out_t))
        out_b.append(torch.stack(out_h))
    return merge_out(torch.stack(out_b), p, cfg)


# --------------------------------------------------------------------------

def fwd_bwd(forward, x, params, go, cfg):
    x = x.detach().clone().requires_grad_(True)
    p = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    y = forward(x, p, cfg)
    grads = torch.autograd.grad((y * go).sum(), [x] + list(p.values()))
    res = {"output": y.detach(), "grad_input": grads[0]}
    res.update({"grads/" + k: g for k, g in zip(p, grads[1:])})
    return res


def softmax_stats(x, params, cfg):
    with torch.no_grad():
        _, prob = attention.attention_with_probs(x, params, cfg)
    nvis = (prob > 0).sum(-1)
    sel = nvis >= 2
    if not bool(sel.any()):
        return None
    ent = -(prob * torch.log(prob.clamp_min(1e-300))).sum(-1) / torch.log(nvis.clamp_min(2).to(F64))
    return float(prob.max(-1).values[sel].mean()), float(ent[sel].mean()), float(ent[sel].min())


def check_case(directory, name, seed, cfg0, tol_self, tol_indep):
    case = ga.PREFIX + name
    path = os.path.join(directory, case + ".safetensors")
    size = os.path.getsize(path)
    assert size < 40 * 1024, (path, size)
    with safe_open(path, framework="pt") as f:
        meta = f.metadata() or {}
        t = {k: f.get_tensor(k) for k in f.keys()}
    assert meta.get("case") == case and meta.get("generator") == ga.GENERATOR, meta
    cfg = json.loads(meta["config"])
    assert cfg == dict(cfg0, seed=seed), (case, cfg)
    assert ga.CONFIG_KEYS <= set(cfg)

    shapes = ga.param_shapes(cfg)
    want = {"input": (cfg["B"], cfg["T"], cfg["d_model"]), "output": ga.output_shape(cfg),
            "grad_output": ga.output_shape(cfg), "grad_input": (cfg["B"], cfg["T"], cfg["d_model"])}
    for k, s in shapes.items():
        want["params/" + k] = s
        want["grads/" + k] = s
    assert set(t) == set(want), (case, set(t) ^ set(want))
    for k, s in want.items():
        assert t[k].dtype == torch.float32 and tuple(t[k].shape) == tuple(s), (case, k, t[k].shape, s)
        assert bool(torch.isfinite(t[k]).all()), (case, k)

    x = t["input"].to(F64)
    go = t["grad_output"].to(F64)
    params = {k[len("params/"):]: v.to(F64) for k, v in t.items() if k.startswith("params/")}
    stored = {k: v for k, v in t.items() if k == "output" or (k.startswith("grad")
              and k != "grad_output")}

    ok = True
    errs = {}
    for label, fwd, tol in (("attention.py", lambda a, b, c: attention.attention(a, b, c), tol_self),
                            ("sdpa-bool", forward_sdpa_bool, tol_indep),
                            ("sdpa-additive", forward_sdpa_additive, tol_indep),
                            ("per-query-loop", forward_loop, tol_indep)):
        res = fwd_bwd(fwd, x, params, go, cfg)
        assert set(res) == set(stored), (label, set(res) ^ set(stored))
        errs[label] = worst_error(stored, res, tol, f"{case} {label}")
        ok &= errs[label] <= tol

    regen = "skipped (torch version differs)"
    if meta.get("torch") == torch.__version__:
        tensors, c2 = ga.build_case(name, seed, cfg0)
        blob = canonical_safetensors_bytes(tensors, {
            "case": case, "generator": ga.GENERATOR, "torch": torch.__version__,
            "config": json.dumps(c2, sort_keys=True)})
        with open(path, "rb") as f:
            same = f.read() == blob
        regen = "byte-identical" if same else "DIFFERS"
        ok &= same

    st = softmax_stats(x, params, cfg)
    if st is None:
        stat = "softmax: single key per row"
    else:
        maxp, ent, ent_min = st
        stat = f"softmax: mean max-p {maxp:.2f}, mean norm-entropy {ent:.2f}"
        if not (maxp < 0.9 and ent < 0.99 and ent > 0.2):
            ok = False
            stat += " (OUT OF RANGE)"

    print(f"{'OK  ' if ok else 'FAIL'} {case} ({size} B): "
          + ", ".join(f"{k} {v:.1e}" for k, v in errs.items()) + f"; {stat}; regen {regen}")
    return ok


def main(argv=None) -> int:
    directory = golden_dir(argv)
    ok = True
    for name, seed, cfg in ga.CASES:
        ok &= check_case(directory, name, seed, cfg, tol_self=1e-7, tol_indep=2e-7)
    print("all attention goldens OK" if ok else "attention golden check FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
