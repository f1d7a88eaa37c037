#!/usr/bin/env python3
"""Generate the golden safetensors files the C++ layer tests compare against.

Regenerate (from the repository root):

    pip install torch safetensors numpy
    python3 tests/reference/make_golden.py [--out tests/golden]

Every case uses its own fixed seed (torch.Generator), so reruns produce
byte-identical files.  Inputs/params/grad_output are drawn in float64 and then
rounded to float32 (the values that are stored); forward and backward are run
in float64 with autograd on exactly those rounded values, and the results are
stored as F32 (integer ids/targets as I64).  See tests/reference/README.md for
the tensor naming convention.

The script also calls ``golden_io.write_io_goldens(out)`` (I/O goldens, written
by a separate module) and, when ``<out>/io_cpp_written.safetensors`` exists,
``golden_io.check_cpp_written(path)``; if golden_io is not available a note is
printed and the layer goldens are still written.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
from typing import Callable, Dict, List, Optional, Tuple

import torch
import safetensors.torch

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import layers  # noqa: E402

GENERATOR = "tests/reference/make_golden.py"
F64 = torch.float64


# --------------------------------------------------------------------------
# Random helpers (all draws go through the per-case generator)
# --------------------------------------------------------------------------

def f32_round(t: torch.Tensor) -> torch.Tensor:
    """Round a float64 tensor to float32 precision (kept as float64)."""
    return t.to(torch.float32).to(F64)


def randn(g: torch.Generator, *shape, std: float = 1.0, mean: float = 0.0) -> torch.Tensor:
    return f32_round(mean + std * torch.randn(*shape, generator=g, dtype=F64))


def weight(g, *shape):
    return randn(g, *shape, std=0.5)


def bias(g, n):
    return randn(g, n, std=0.1)


def gain(g, n):
    return randn(g, n, std=0.1, mean=1.0)


# --------------------------------------------------------------------------
# Case builders: each returns (config, input, params, targets)
# --------------------------------------------------------------------------

Build = Tuple[dict, torch.Tensor, Dict[str, torch.Tensor], Optional[torch.Tensor]]


def build_linear_bias(g) -> Build:
    shape, fin, fout = (2, 3, 5), 5, 7
    x = randn(g, *shape)
    p = {"weight": weight(g, fout, fin), "bias": bias(g, fout)}
    cfg = {"input_shape": list(shape), "in_features": fin, "out_features": fout, "bias": True}
    return cfg, x, p, None


def build_linear_nobias(g) -> Build:
    shape, fin, fout = (2, 3, 8), 8, 3
    x = randn(g, *shape)
    p = {"weight": weight(g, fout, fin)}
    cfg = {"input_shape": list(shape), "in_features": fin, "out_features": fout, "bias": False}
    return cfg, x, p, None


def build_rmsnorm(g) -> Build:
    shape, d, eps = (2, 3, 6), 6, 1e-6
    x = randn(g, *shape)
    p = {"weight": gain(g, d)}
    return {"input_shape": list(shape), "dim": d, "eps": eps}, x, p, None


def build_layernorm(g) -> Build:
    shape, d, eps = (2, 3, 6), 6, 1e-5
    x = randn(g, *shape)
    p = {"weight": gain(g, d), "bias": bias(g, d)}
    return {"input_shape": list(shape), "dim": d, "eps": eps}, x, p, None


def _rope(shape, fraction, base, offset):
    def build(g) -> Build:
        B, T, H, Dh = shape
        x = randn(g, *shape)
        r = layers.rope_rotary_dim(Dh, fraction)
        cfg = {"input_shape": list(shape), "layout": "BTHD", "head_dim": Dh,
               "num_heads": H, "fraction": float(fraction), "rotary_dim": r,
               "base": float(base), "position_offset": offset,
               "convention": "rotate_half"}
        return cfg, x, {}, None
    return build


def _activation(kind):
    def build(g) -> Build:
        shape = (2, 3, 5)
        x = randn(g, *shape, std=3.0)
        flat = x.view(-1)
        special = [-25.0, -6.0, 0.0, 6.0, 25.0]
        positions = [0, 7, 14, 21, 28]
        for pos, v in zip(positions, special):
            flat[pos] = v
        cfg = {"input_shape": list(shape), "activation": kind,
               "special_values": special, "special_flat_positions": positions}
        if kind == "gelu":
            cfg["approximate"] = "none"
        elif kind == "gelu_tanh":
            cfg["approximate"] = "tanh"
        elif kind == "softplus":
            cfg["beta"] = 1.0
            cfg["threshold"] = 20.0
        return cfg, x, {}, None
    return build


def _mlp_params(g, prefix, d, hidden):
    return {
        prefix + "fc1.weight": weight(g, hidden, d),
        prefix + "fc1.bias": bias(g, hidden),
        prefix + "fc2.weight": weight(g, d, hidden),
        prefix + "fc2.bias": bias(g, d),
    }


def build_ffn_gelu(g) -> Build:
    shape, d, hidden = (2, 3, 6), 6, 10
    x = randn(g, *shape)
    p = _mlp_params(g, "", d, hidden)
    cfg = {"input_shape": list(shape), "dim": d, "hidden": hidden,
           "activation": "gelu", "approximate": "none", "bias": True}
    return cfg, x, p, None


def build_ffn_swiglu(g) -> Build:
    shape, d, hidden = (2, 3, 6), 6, 8
    x = randn(g, *shape)
    p = {"gate.weight": weight(g, hidden, d), "up.weight": weight(g, hidden, d),
         "down.weight": weight(g, d, hidden)}
    cfg = {"input_shape": list(shape), "dim": d, "hidden": hidden,
           "activation": "silu", "bias": False}
    return cfg, x, p, None


def build_dual_ffn(g) -> Build:
    shape, d, hp, ha = (2, 3, 6), 6, 12, 4
    x = randn(g, *shape)
    p = {}
    p.update(_mlp_params(g, "primary.", d, hp))
    p.update(_mlp_params(g, "auxiliary.", d, ha))
    cfg = {"input_shape": list(shape), "dim": d, "primary_hidden": hp,
           "auxiliary_hidden": ha, "activation": "gelu", "approximate": "none",
           "bias": True}
    return cfg, x, p, None


def build_embedding(g) -> Build:
    shape, vocab, d = (2, 5), 11, 4
    ids = torch.randint(0, vocab, shape, generator=g, dtype=torch.int64)
    # Force repeated ids so gradient accumulation is exercised.
    ids[0, 3] = ids[0, 0]
    ids[1, 2] = ids[0, 0]
    ids[1, 4] = ids[0, 1]
    p = {"weight": randn(g, vocab, d, std=1.0)}
    cfg = {"input_shape": list(shape), "num_embeddings": vocab, "embedding_dim": d}
    return cfg, ids, p, None


def build_lm_head_ce(g) -> Build:
    shape, d, vocab, ignore = (2, 4, 6), 6, 13, -100
    x = randn(g, *shape)
    p = {"weight": weight(g, vocab, d)}
    t = torch.randint(0, vocab, shape[:2], generator=g, dtype=torch.int64)
    t[0, 1] = ignore
    t[1, 3] = ignore
    cfg = {"input_shape": list(shape), "dim": d, "vocab": vocab,
           "ignore_index": ignore, "reduction": "mean", "bias": False}
    return cfg, x, p, t


# (name, seed, builder)
CASES: List[Tuple[str, int, Callable]] = [
    ("linear_bias", 1001, build_linear_bias),
    ("linear_nobias", 1002, build_linear_nobias),
    ("rmsnorm", 1003, build_rmsnorm),
    ("layernorm", 1004, build_layernorm),
    ("rope_full", 1005, _rope((2, 5, 3, 8), 1.0, 10000, 0)),
    ("rope_partial", 1006, _rope((2, 5, 2, 16), 0.25, 500, 3)),
    ("gelu", 1007, _activation("gelu")),
    ("gelu_tanh", 1008, _activation("gelu_tanh")),
    ("silu", 1009, _activation("silu")),
    ("softplus", 1010, _activation("softplus")),
    ("ffn_gelu", 1011, build_ffn_gelu),
    ("ffn_swiglu", 1012, build_ffn_swiglu),
    ("dual_ffn", 1013, build_dual_ffn),
    ("embedding", 1014, build_embedding),
    ("lm_head_ce", 1015, build_lm_head_ce),
]


# --------------------------------------------------------------------------
# Deterministic safetensors writing
# --------------------------------------------------------------------------

def canonical_safetensors_bytes(tensors: Dict[str, torch.Tensor], metadata: Dict[str, str]) -> bytes:
    """Serialize with safetensors, then rewrite the JSON header with the
    ``__metadata__`` keys sorted.

    safetensors keeps metadata in a Rust HashMap, so its key order (and thus
    the file bytes) varies from run to run.  The tensor data layout is left
    exactly as the library produced it; only the header is normalized
    (compact JSON, space-padded to a multiple of 8 bytes like the library).
    """
    raw = safetensors.torch.save(tensors, metadata=metadata)
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    canon = {"__metadata__": dict(sorted(header.pop("__metadata__").items()))}
    canon.update(header)  # tensor entries keep the library's order
    hb = json.dumps(canon, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    hb += b" " * ((-len(hb)) % 8)
    return struct.pack("<Q", len(hb)) + hb + data


def write_golden(outdir: str, case: str, generator: str, tensors: Dict[str, torch.Tensor], cfg: dict) -> Tuple[str, int]:
    """Writes ``<outdir>/<case>.safetensors`` with the standard metadata (case, generator, torch
    version, config as sorted JSON) in canonical bytes, and checks that safetensors reads back
    exactly those tensors. Returns (path, bytes written)."""
    metadata = {"case": case, "generator": generator, "torch": torch.__version__,
                "config": json.dumps(cfg, sort_keys=True)}
    path = os.path.join(outdir, case + ".safetensors")
    blob = canonical_safetensors_bytes(tensors, metadata)
    with open(path, "wb") as f:
        f.write(blob)
    back = safetensors.torch.load_file(path)
    assert set(back) == set(tensors), path
    for k in tensors:
        assert back[k].dtype == tensors[k].dtype and torch.equal(back[k], tensors[k]), (path, k)
    return path, len(blob)


def f32(t: torch.Tensor) -> torch.Tensor:
    """A result as it is stored: detached, float32, contiguous."""
    return t.detach().to(torch.float32).contiguous()


def layer_tensors(x: torch.Tensor, params: Dict[str, torch.Tensor], grad_output: Optional[torch.Tensor],
                  res: Dict[str, torch.Tensor], targets: Optional[torch.Tensor] = None) -> Dict[str, torch.Tensor]:
    """The stored tensors of a layer or branch case: input (F32, or I64 ids as they are), targets
    (I64), params/<name>, grad_output (when given) and every result (output, grad_input,
    grads/<name>, ...) under its own name."""
    tensors: Dict[str, torch.Tensor] = {"input": f32(x) if x.is_floating_point() else x.contiguous()}
    if targets is not None:
        tensors["targets"] = targets.to(torch.int64).contiguous()
    for k, v in params.items():
        tensors["params/" + k] = f32(v)
    if grad_output is not None:
        tensors["grad_output"] = f32(grad_output)
    for k, v in res.items():
        tensors[k] = f32(v)
    return tensors


def write_cases(outdir: str, write_case: Callable[..., str], cases) -> List[str]:
    """``write_case(outdir, *case)`` for every case, single-threaded; returns the paths."""
    os.makedirs(outdir, exist_ok=True)
    with single_threaded():
        return [write_case(outdir, *case) for case in cases]


def case_writer(generator: str, build_case: Callable, write: Optional[Callable] = None) -> Callable[..., str]:
    """``write_case(outdir, name, *args)``: writes ``build_case(name, *args)`` (tensors, config) as
    ``<outdir>/<name>.safetensors`` with `write` (write_described unless given); returns the path."""
    def write_case(outdir: str, name: str, *args) -> str:
        tensors, cfg = build_case(name, *args)
        return (write or write_described)(outdir, name, generator, tensors, cfg)[0]
    return write_case


def out_dir(doc: str, argv=None, extra: Callable[[argparse.ArgumentParser], None] = lambda ap: None):
    """The command line of a golden generator: ``--out DIR`` (default tests/golden), plus the
    options `extra` adds; described by the first paragraph of `doc`. Returns the parsed args."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join("tests", "golden"), help="output directory (default: tests/golden)")
    extra(ap)
    return ap.parse_args(argv)


def generator_main(doc: str, write_goldens: Callable[[str], object], argv=None) -> int:
    """main() of a generator module: ``write_goldens(--out)``."""
    write_goldens(out_dir(doc, argv).out)
    return 0


def write_described(outdir: str, case: str, generator: str, tensors: Dict[str, torch.Tensor], cfg: dict) -> Tuple[str, int]:
    """write_golden, then prints the file's size and every tensor's name and shape."""
    path, size = write_golden(outdir, case, generator, tensors, cfg)
    desc = " ".join(f"{k}{list(v.shape)}" for k, v in sorted(tensors.items()))
    print(f"{case}.safetensors: {size} B, {len(tensors)} tensors: {desc}")
    return path, size


# --------------------------------------------------------------------------
# Language-model goldens (golden_models.py, golden_ecp.py): ids and targets in, mean CE out
# --------------------------------------------------------------------------

def lm_tokens(g: torch.Generator, vocab: int, batch: int, time: int, ignored: List[Tuple[int, int]],
              ignore_index: int = -100) -> Tuple[torch.Tensor, torch.Tensor]:
    """(B, T) ids and targets; ids[1, 4] repeats ids[0, 0] and the `ignored` (b, t) targets are
    `ignore_index`."""
    ids = torch.randint(0, vocab, (batch, time), generator=g, dtype=torch.int64)
    targets = torch.randint(0, vocab, (batch, time), generator=g, dtype=torch.int64)
    ids[1, 4] = ids[0, 0]  # a repeated id: embedding gradients accumulate
    for b, t in ignored:
        targets[b, t] = ignore_index
    return ids, targets


def lm_forward_backward(model: torch.nn.Module, values: Dict[str, torch.Tensor], ids, targets):
    """Sets the model's parameters to `values`, runs ``loss, logits = model(ids, targets)`` and
    returns the loss, the logits and d loss / d every parameter (autograd)."""
    params = dict(model.named_parameters())
    with torch.no_grad():
        for k, v in values.items():
            params[k].copy_(v)
    loss, logits = model(ids, targets)
    grads = torch.autograd.grad(loss, list(params.values()))
    return loss.detach(), logits.detach(), dict(zip(params.keys(), grads))


def lm_tensors(ids, targets, loss, logits, values: Dict[str, torch.Tensor],
               grads: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """input and targets (I64), output (the loss) and logits, params/<name> and grads/<name>."""
    tensors: Dict[str, torch.Tensor] = {"input": ids.contiguous(), "targets": targets.contiguous(),
                                        "output": f32(loss), "logits": f32(logits)}
    for k, v in values.items():
        tensors["params/" + k] = f32(v)
        tensors["grads/" + k] = f32(grads[k])
    return tensors


def write_lm_golden(outdir: str, case: str, generator: str, tensors: Dict[str, torch.Tensor],
                    cfg: dict) -> Tuple[str, int]:
    """write_golden, then prints the file's size, its parameter count and the loss."""
    path, size = write_golden(outdir, case, generator, tensors, cfg)
    n_params = sum(1 for k in tensors if k.startswith("params/"))
    print(f"{case}.safetensors: {size} B, {n_params} parameters, loss {tensors['output'].item():.6f}")
    return path, size


class single_threaded:
    """``with single_threaded():`` — torch on one thread, so float64 reductions keep their order."""

    def __enter__(self):
        self.threads = torch.get_num_threads()
        torch.set_num_threads(1)

    def __exit__(self, *exc):
        torch.set_num_threads(self.threads)


def build_case(name: str, seed: int, builder: Callable) -> Tuple[Dict[str, torch.Tensor], dict]:
    g = torch.Generator().manual_seed(seed)
    cfg, x, params, targets = builder(g)
    cfg = dict(cfg, seed=seed)
    # Scalar-loss case: upstream gradient is 1 (no grad_output stored).
    if name == "lm_head_ce":
        grad_output = None
    else:
        out_shape = layers.forward_case(name, cfg, x, params, targets)["output"].shape
        grad_output = randn(g, *out_shape)
    res = layers.forward_backward(layers.forward_case, name, cfg, x, params, grad_output, targets)
    return layer_tensors(x, params, grad_output, res, targets), cfg


write_case = case_writer(GENERATOR, build_case)


def main(argv=None) -> int:
    out = out_dir(__doc__, argv).out
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(1)  # keep float64 reductions order-stable

    for name, seed, builder in CASES:
        write_case(out, name, seed, builder)

    import golden_adamw
    import golden_attention
    import golden_ecp
    import golden_gss
    import golden_io
    import golden_mamba
    import golden_models

    print(golden_adamw.write_adamw_golden(out))
    golden_mamba.write_mamba_goldens(out)
    golden_gss.write_gss_goldens(out)
    for path in golden_attention.write_attention_goldens(out):
        print(path)
    golden_models.write_model_goldens(out)
    golden_ecp.write_ecp_goldens(out)
    golden_io.write_io_goldens(out)
    cpp_path = os.path.join(out, "io_cpp_written.safetensors")
    if os.path.exists(cpp_path):
        golden_io.check_cpp_written(cpp_path)
    else:
        print(f"note: {cpp_path} not present; skipping check_cpp_written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
