#!/usr/bin/env python3
"""Golden files of the ECP-paper family: tests/golden/model_{ecp,ecp_faithful,perceiver_ar,double_attention,
ssplit_attention,compressed_double}.safetensors.

    pip install torch safetensors numpy
    python3 tests/reference/golden_ecp.py [--out tests/golden]

or from make_golden.py: ``golden_ecp.write_ecp_goldens(out)``.

The models are tests/reference/ecp_models.py, with the shapes of the C++ cases in
tests/cases/ecp_cases.hpp (vocabulary 11, batch 2, n 12, 2 layers):

    model_ecp            EcpShape{8, 2, 4, 4, 32}: d 8, 2 heads of 4, segment m 4, FFN 32, RoPE
    model_ecp_faithful   the same with the reference code's quirks (K = V, RoPE in layer 0 only,
                         to_out_0 for the first segment)
    model_perceiver_ar   PerceiverArShape{8, 2, 4, 4, 32}: M 4 latents, cross layer + 1 latent layer
    model_double_attention  DoubleAttentionShape{8, 2, 4, 4, 32}: history 8 unmasked, M 4 latents
    model_ssplit_attention  DoubleAttentionShape{8, 2, 4, 4, 32, 4}: history split 2 × 4
    model_compressed_double CompressedDoubleShape{8, 2, 4, 4, 32, 8}: history 8 → 2 in layer 1

Same conventions as golden_models.py: a fixed seed per case; parameters drawn in float64 and
rounded to float32 (linear weights N(0, 1/fan_in), biases N(0, 0.1²), LayerNorm gains
1 + 0.1 N(0,1) and biases 0.1 N(0,1), embedding N(0,1), head N(0, 0.5²)); loss, logits and
autograd gradients in float64; stored as F32, ids and targets as I64:

    input (B, n), targets (B, n) (two are -100), output = the loss (0-d),
    logits (B, n, V) — (B, M, V) for the latent-loss models —, params/<C++ name>, grads/<C++ name>

ECP is computed twice, by segment pairs and with the explicit (n, n) mask; the two must agree
to 1e-12 before a file is written.
"""

from __future__ import annotations

import os
import sys
from typing import Callable, Dict, List, Tuple

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import ecp_models  # noqa: E402
import make_golden  # noqa: E402
from make_golden import lm_forward_backward, randn  # noqa: E402

GENERATOR = "tests/reference/golden_ecp.py"
VOCAB, BATCH, TIME, LAYERS = 11, 2, 12, 2

ECP_TINY = dict(d_model=8, heads=2, head_dim=4, segment=4, ffn=32, rope=True, faithful=False)
ECP_TINY_FAITHFUL = dict(ECP_TINY, faithful=True)
PERCEIVER_TINY = dict(d_model=8, heads=2, head_dim=4, latents=4, ffn=32, rope=True)


def build_ecp(segments=True):
    return ecp_models.ecp(VOCAB, ECP_TINY, LAYERS, segments), {"model": "Ecp", "layers": LAYERS, "shape": ECP_TINY}


def build_ecp_faithful(segments=True):
    return (ecp_models.ecp(VOCAB, ECP_TINY_FAITHFUL, LAYERS, segments),
            {"model": "Ecp", "layers": LAYERS, "shape": ECP_TINY_FAITHFUL})


def build_perceiver_ar(segments=True):
    return (ecp_models.perceiver_ar(VOCAB, PERCEIVER_TINY, LAYERS),
            {"model": "PerceiverAr", "layers": LAYERS, "latent_layers": LAYERS - 1, "shape": PERCEIVER_TINY})


DOUBLE_TINY = dict(d_model=8, heads=2, head_dim=4, latents=4, ffn=32, split=0, rope=True)
SSPLIT_TINY = dict(DOUBLE_TINY, split=4)


def build_double_attention(segments=True):
    return (ecp_models.double_attention_ar(VOCAB, DOUBLE_TINY, LAYERS),
            {"model": "DoubleAttentionAr", "layers": LAYERS, "shape": DOUBLE_TINY})


def build_ssplit_attention(segments=True):
    return (ecp_models.double_attention_ar(VOCAB, SSPLIT_TINY, LAYERS),
            {"model": "DoubleAttentionAr", "layers": LAYERS, "shape": SSPLIT_TINY})


COMPRESSED_TINY = dict(d_model=8, heads=2, head_dim=4, latents=4, ffn=32, history=8, compressed=0, rope=True)


def build_compressed_double(segments=True):
    return (ecp_models.compressed_double_attention_ar(VOCAB, COMPRESSED_TINY, LAYERS),
            {"model": "CompressedDoubleAttentionAr", "layers": LAYERS, "shape": COMPRESSED_TINY})


# (name, seed, builder, ignored target positions)
CASES: List[Tuple[str, int, Callable, List[Tuple[int, int]]]] = [
    ("model_ecp", 5001, build_ecp, [(0, 2), (1, 7)]),
    ("model_ecp_faithful", 5002, build_ecp_faithful, [(0, 2), (1, 7)]),
    ("model_perceiver_ar", 5003, build_perceiver_ar, [(0, 9), (1, 2)]),
    ("model_double_attention", 5004, build_double_attention, [(0, 9), (1, 2)]),
    ("model_ssplit_attention", 5005, build_ssplit_attention, [(0, 10), (1, 3)]),
    ("model_compressed_double", 5006, build_compressed_double, [(0, 11), (1, 5)]),
]


def draw_parameters(model: torch.nn.Module, g: torch.Generator) -> Dict[str, torch.Tensor]:
    values: Dict[str, torch.Tensor] = {}
    for name, m in model.named_modules():
        own = dict(m.named_parameters(recurse=False))
        prefix = name + "." if name else ""
        if isinstance(m, torch.nn.Linear):
            values[prefix + "weight"] = randn(g, *m.weight.shape, std=m.weight.shape[1] ** -0.5)
            if m.bias is not None:
                values[prefix + "bias"] = randn(g, *m.bias.shape, std=0.1)
        elif isinstance(m, torch.nn.LayerNorm):
            values[prefix + "weight"] = randn(g, *m.weight.shape, std=0.1, mean=1.0)
            values[prefix + "bias"] = randn(g, *m.bias.shape, std=0.1)
        elif name == "embed":
            values["embed.weight"] = randn(g, *own["weight"].shape, std=1.0)
        elif name == "head":
            values["head.weight"] = randn(g, *own["weight"].shape, std=0.5)
        else:
            assert not own, (name, list(own))
    assert set(values) == {k for k, _ in model.named_parameters()}
    return values


def build_case(name: str, seed: int, builder: Callable, ignored):
    g = torch.Generator().manual_seed(seed)
    model, cfg = builder()
    values = draw_parameters(model, g)
    ids, targets = make_golden.lm_tokens(g, VOCAB, BATCH, TIME, ignored, ecp_models.IGNORE_INDEX)
    loss, logits, grads = lm_forward_backward(model, values, ids, targets)
    if cfg["model"] == "Ecp":  # the second way: the explicit (n, n) mask
        loss2, logits2, grads2 = lm_forward_backward(builder(segments=False)[0], values, ids, targets)
        assert abs(loss - loss2) <= 1e-12 and (logits - logits2).abs().max() <= 1e-12, name
        assert all((grads[k] - grads2[k]).abs().max() <= 1e-12 for k in grads), name

    tensors = make_golden.lm_tensors(ids, targets, loss, logits, values, grads)
    cfg = dict(cfg, vocab=VOCAB, input_shape=[BATCH, TIME], ignore_index=ecp_models.IGNORE_INDEX, reduction="mean",
               layernorm_eps=ecp_models.LN_EPS, rope_base=ecp_models.ROPE_BASE, rope="rotate_half", seed=seed)
    return tensors, cfg


write_case = make_golden.case_writer(GENERATOR, build_case, make_golden.write_lm_golden)


def write_ecp_goldens(outdir: str) -> List[str]:
    """Writes every ECP-family golden into `outdir`; returns their paths."""
    return make_golden.write_cases(outdir, write_case, CASES)


if __name__ == "__main__":
    sys.exit(make_golden.generator_main(__doc__, write_ecp_goldens))
