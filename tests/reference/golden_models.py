#!/usr/bin/env python3
"""Golden files of whole language models: tests/golden/model_*.safetensors.

    pip install torch safetensors numpy [transformers]
    python3 tests/reference/golden_models.py [--out tests/golden]

or from make_golden.py: ``golden_models.write_model_goldens(out)``.

The models are tests/reference/models.py (built from the per-layer references), with the
shapes of the C++ cases in tests/cases/model_cases.hpp:

    model_pha          PhaTiny: 2 PHA blocks, E 8, attention 2 q heads / 1 kv head of 4
                       (cosine, per-head temperature, causal), GSS F 16 H 6 N 4, Dual-FFN 16 + 8
    model_transformer  2 NeoX layers cooper_tf(8, 2, window 4): 2 summed heads of 8, RoPE on 2
                       dims, QKV/out biases, MLP 16 SiLU
    model_mamba_lm     2 Mamba layers cooper_ssm(8, 2): d_state 2, expand 2, conv 4, dt_rank 1
    model_hybrid       Stack [Mamba, NeoX, NeoX] ×1, final LayerNorm
    model_pha_tied     model_pha with tied input/output embeddings (Options::tie_embeddings):
                       logits = y Eᵀ, no head.weight, grads/embed.weight = lookup + head parts
    model_transformer_tied  model_transformer, tied likewise
    model_pha_dropout  model_pha with dropout (embed 0.1, block outputs 0.2, attention
                       probabilities 0.25) in training pass (seed 7, pass 3)
    model_hybrid_dropout    model_hybrid, dropout likewise

Dropout cases: loss and gradients come from a training pass with the C++ masks
(dropout.py); logits from a pass without (LanguageModel::logits never drops).

Vocabulary 11, batch 2, time 9. Same conventions as make_golden.py (README.md): a fixed seed
per case; parameters drawn in float64 and rounded to float32; forward and backward
(autograd of the mean cross-entropy) in float64 on those values; stored as F32 with ids and
targets as I64:

    input (B, T) ids, targets (B, T) (two are -100, ignored), output = the loss (0-d),
    logits (B, T, V), params/<C++ dotted name>, grads/<C++ dotted name>

Parameters: linear weights ~ N(0, 1/fan_in), biases ~ N(0, 0.1²), norm gains 1 + 0.1 N(0,1),
embedding ~ N(0,1) (when tied, E is drawn once and there is no head), head ~ N(0, 0.5²);
cosine temperatures log 10 + 0.3 N(0,1); mixer logits log(e−1) + 0.5 N(0,1) (unequal mixing
weights); GSS and Mamba SSM parameters as in golden_gss.py / golden_mamba.py.

Every tied case is cross-checked before writing against its untied model with head.weight set
to E (the untied module path): the same loss and logits, every body/norm gradient equal, and
the tied E's gradient equal to the untied embed.weight + head.weight gradients.

Regenerate only some files with ``--only NAME ...`` (e.g. ``--only model_pha_tied``).

When transformers is installed, the Mamba LM is also run as Hugging Face's
MambaForCausalLM (untied head, norm eps 1e-6, residual kept in the model dtype) on the same
weights, and its logits, loss and every gradient must agree (HF rounds some intermediates
to float32 even in a float64 model, hence the 1e-5 relative bound, not 1e-12).
"""

from __future__ import annotations

import math
import os
import sys
from typing import Callable, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import dropout  # noqa: E402
import make_golden  # noqa: E402
import models  # noqa: E402
from make_golden import f32_round, lm_forward_backward, randn  # noqa: E402

GENERATOR = "tests/reference/golden_models.py"
F64 = torch.float64
VOCAB, BATCH, TIME = 11, 2, 9
IGNORED = [(0, 2), (1, 6)]  # (b, t) of the two ignored targets

PHA_TINY = dict(d_model=8, heads=2, kv_heads=1, head_dim=4, gss_gate=16, gss_ssm=6, gss_state=4,
                ffn_primary=16, ffn_auxiliary=8)
TF_TINY = models.cooper_tf(8, 2, 4)
SSM_TINY = models.cooper_ssm(8, 2)


def build_pha():
    return models.pha(VOCAB, PHA_TINY, 2), {"model": "Pha", "blocks": 2, "shape": PHA_TINY,
                                           "alpha": models.deepnorm_alpha(2), "layout": "pha (default)"}


def build_transformer():
    return models.transformer(VOCAB, TF_TINY, 2), {"model": "Transformer", "layers": 2, "shape": TF_TINY}


def build_mamba_lm():
    return models.mamba_lm(VOCAB, SSM_TINY, 2), {"model": "MambaLm", "layers": 2, "shape": SSM_TINY}


def build_pha_tied():
    model, cfg = models.pha(VOCAB, PHA_TINY, 2, tie=True), build_pha()[1]
    return model, dict(cfg, tie_embeddings=True)


def build_transformer_tied():
    model, cfg = models.transformer(VOCAB, TF_TINY, 2, tie=True), build_transformer()[1]
    return model, dict(cfg, tie_embeddings=True)


def build_hybrid(rates: dict = models.NO_DROPOUT):
    pattern = [lambda: models.mamba_layer(SSM_TINY, rates), lambda: models.neox_layer(TF_TINY, rates),
               lambda: models.neox_layer(TF_TINY, rates)]
    return models.stack(VOCAB, 8, pattern, 1, rates["embed"]), {
        "model": "Stack", "pattern": ["MambaLayer", "NeoxLayer", "NeoxLayer"], "count": 1, "ssm": SSM_TINY,
        "tf": TF_TINY}


# The dropout cases: rates and the training pass (tests/cases/model_cases.hpp DropoutCase).
DROPOUT_RATES = dict(embed=0.1, output=0.2, attention=0.25)
DROPOUT_PASS = dict(seed=7, pass_=3)


def build_pha_dropout():
    model, cfg = models.pha(VOCAB, PHA_TINY, 2, rates=DROPOUT_RATES), build_pha()[1]
    return model, dict(cfg, dropout=DROPOUT_RATES, dropout_pass=DROPOUT_PASS)


def build_hybrid_dropout():
    model, cfg = build_hybrid(DROPOUT_RATES)
    return model, dict(cfg, dropout=DROPOUT_RATES, dropout_pass=DROPOUT_PASS)


# (name, seed, builder)
CASES: List[Tuple[str, int, Callable]] = [
    ("model_pha", 4001, build_pha),
    ("model_transformer", 4002, build_transformer),
    ("model_mamba_lm", 4003, build_mamba_lm),
    ("model_hybrid", 4004, build_hybrid),
    ("model_pha_tied", 4005, build_pha_tied),
    ("model_transformer_tied", 4006, build_transformer_tied),
    ("model_pha_dropout", 4007, build_pha_dropout),
    ("model_hybrid_dropout", 4008, build_hybrid_dropout),
]

# tied case → the builder of the same model untied (for tied_check)
UNTIED: Dict[str, Callable] = {"model_pha_tied": build_pha, "model_transformer_tied": build_transformer}


# --------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------

def _draw_module(g: torch.Generator, name: str, m: torch.nn.Module) -> Dict[str, torch.Tensor]:
    """Values of the module's own (non-recursive) parameters, in registration order."""
    own = dict(m.named_parameters(recurse=False))
    if not own:
        return {}
    if isinstance(m, models.Linear):
        out = {"weight": randn(g, *m.weight.shape, std=m.weight.shape[1] ** -0.5)}
        if m.bias is not None:
            out["bias"] = randn(g, *m.bias.shape, std=0.1)
        return out
    if isinstance(m, models.RMSNorm):
        return {"weight": randn(g, *m.weight.shape, std=0.1, mean=1.0)}
    if isinstance(m, models.LayerNorm):
        return {"weight": randn(g, *m.weight.shape, std=0.1, mean=1.0), "bias": randn(g, *m.bias.shape, std=0.1)}
    if isinstance(m, models.Embedding):
        return {"weight": randn(g, *m.weight.shape, std=1.0)}
    if isinstance(m, models.LmHead):
        return {"weight": randn(g, *m.weight.shape, std=0.5)}
    if isinstance(m, models.SoftplusMixer):
        return {"logits": randn(g, *m.logits.shape, std=0.5, mean=math.log(math.e - 1.0))}
    if isinstance(m, models.Attention):
        return {"logit_scale": randn(g, *m.logit_scale.shape, std=0.3, mean=math.log(10.0))}
    if isinstance(m, models.Gss):  # as golden_gss.py
        h, n = m.c_re.shape
        return {"lambda_re": randn(g, n, std=0.6, mean=-0.5), "lambda_im": randn(g, n, std=0.6),
                "c_re": randn(g, h, n, std=0.5), "c_im": randn(g, h, n, std=0.5), "d": randn(g, h, std=0.5)}
    if isinstance(m, models.Mamba):  # as golden_mamba.py
        di, n = m.A_log.shape
        return {"A_log": f32_round(torch.log(torch.arange(1, n + 1, dtype=F64)).expand(di, n)
                                   + 0.1 * torch.randn(di, n, generator=g, dtype=F64)),
                "D": randn(g, di, std=0.1, mean=1.0)}
    if name.endswith("conv1d"):
        k = m.weight.shape[-1]
        out = {"weight": randn(g, *m.weight.shape, std=k ** -0.5)}
        if "bias" in own:
            out["bias"] = randn(g, *m.bias.shape, std=0.1)
        return out
    if name.endswith("dt_proj"):
        di, r = m.weight.shape
        w = randn(g, di, r, std=r ** -0.5)
        # Δ = softplus(bias) log-uniform in [0.01, 0.5] (Mamba's initialisation).
        lo, hi = math.log(0.01), math.log(0.5)
        dt = torch.exp(torch.rand(di, generator=g, dtype=F64) * (hi - lo) + lo)
        return {"weight": w, "bias": f32_round(dt + torch.log(-torch.expm1(-dt)))}
    raise KeyError(f"no draw rule for {name} ({type(m).__name__})")


def draw_parameters(model: torch.nn.Module, g: torch.Generator) -> Dict[str, torch.Tensor]:
    """Every parameter of `model` (C++ dotted names), drawn module by module in pre-order."""
    values: Dict[str, torch.Tensor] = {}
    for name, m in model.named_modules():
        drawn = _draw_module(g, name, m)
        own = dict(m.named_parameters(recurse=False))
        assert set(drawn) == set(own), (name, set(drawn), set(own))
        for k, v in drawn.items():
            assert v.shape == own[k].shape, (name, k)
            values[(name + "." if name else "") + k] = v
    assert set(values) == {k for k, _ in model.named_parameters()}
    return values


# --------------------------------------------------------------------------
# Tied embeddings: cross-check against the untied model with head.weight := E
# --------------------------------------------------------------------------

def tied_check(untied_builder: Callable, values: Dict[str, torch.Tensor], ids, targets, loss, logits, grads) -> dict:
    """Runs the untied model (its own LmHead module) with head.weight = embed.weight and asserts
    the tied results: same loss and logits, same gradients except E's, which must be the sum of
    the untied embed.weight and head.weight gradients."""
    model = untied_builder()[0].to(F64)
    assert "head.weight" not in values
    untied_values = dict(values, **{"head.weight": values["embed.weight"].clone()})
    u_loss, u_logits, u_grads = lm_forward_backward(model, untied_values, ids, targets)
    d_loss = abs(u_loss.item() - loss.item())
    d_logits = (u_logits - logits).abs().max().item()
    d_grad = 0.0
    for k, gk in grads.items():
        want = u_grads[k] + u_grads["head.weight"] if k == "embed.weight" else u_grads[k]
        d_grad = max(d_grad, ((gk - want).abs().max() / want.abs().max().clamp_min(1e-30)).item())
    print(f"  tied vs untied with head.weight = E: |Δloss| {d_loss:.1e}, max |Δlogits| {d_logits:.1e},"
          f" max relative Δgrad {d_grad:.1e}")
    assert d_loss <= 1e-12 and d_logits <= 1e-12 and d_grad <= 1e-12, "tied model disagrees with untied W = E"
    return {"loss": d_loss, "logits": d_logits, "grad_rel": d_grad}


# --------------------------------------------------------------------------
# Hugging Face cross-check of the Mamba LM
# --------------------------------------------------------------------------

def hf_mamba_check(values: Dict[str, torch.Tensor], ids, targets, loss, logits, grads) -> Optional[dict]:
    """Runs transformers' MambaForCausalLM on the same weights; returns the max differences
    (None when transformers is not installed). Asserts agreement."""
    try:
        from transformers import MambaConfig, MambaForCausalLM
    except ImportError:
        print("note: transformers is not installed; skipping the MambaForCausalLM cross-check")
        return None
    s = SSM_TINY
    layers_n = 1 + max(int(k.split(".")[1]) for k in values if k.startswith("body."))
    config = MambaConfig(vocab_size=VOCAB, hidden_size=s["d_model"], state_size=s["d_state"], expand=s["expand"],
                         conv_kernel=s["d_conv"], time_step_rank=models.mamba_ref.dt_rank_for(s["d_model"]),
                         use_bias=s["bias"], use_conv_bias=s["conv_bias"], hidden_act="silu",
                         num_hidden_layers=layers_n, layer_norm_epsilon=models.RMS_EPS, residual_in_fp32=False,
                         tie_word_embeddings=False)
    hf = MambaForCausalLM(config).to(F64).eval()

    def hf_name(k: str) -> str:
        if k == "embed.weight":
            return "backbone.embeddings.weight"
        if k == "norm.weight":
            return "backbone.norm_f.weight"
        if k == "head.weight":
            return "lm_head.weight"
        _, i, part, rest = k.split(".", 3)
        return f"backbone.layers.{i}.{'norm' if part == 'norm' else 'mixer'}.{rest}"

    names = {hf_name(k): k for k in values}
    want = {k for k, _ in hf.named_parameters()}
    assert set(names) == want, (set(names) ^ want)
    params = dict(hf.named_parameters())
    with torch.no_grad():
        for h, k in names.items():
            params[h].copy_(values[k])
    out = hf(input_ids=ids)
    hf_logits = out.logits
    hf_loss = F.cross_entropy(hf_logits.reshape(-1, VOCAB), targets.reshape(-1), ignore_index=models.IGNORE_INDEX)
    hf_grads = torch.autograd.grad(hf_loss, list(params.values()))
    d_logits = (hf_logits.detach() - logits).abs().max().item()
    d_loss = abs(hf_loss.item() - loss.item())
    d_grad = max(((gh - grads[names[h]]).abs().max() / grads[names[h]].abs().max().clamp_min(1e-30)).item()
                 for h, gh in zip(params.keys(), hf_grads))
    scale = logits.abs().max().item()
    print(f"model_mamba_lm vs transformers MambaForCausalLM: max |Δlogits| {d_logits:.2e} (max |logit| {scale:.2f}),"
          f" |Δloss| {d_loss:.2e}, max relative Δgrad per tensor {d_grad:.2e}")
    assert d_logits <= 1e-5 * scale and d_loss <= 1e-5 * abs(loss.item()) and d_grad <= 1e-4, \
        "the Mamba LM reference and transformers' MambaForCausalLM disagree"
    return {"logits": d_logits, "loss": d_loss, "grad_rel": d_grad}


# --------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------

def dropout_check(model, values, ids, targets, loss) -> None:
    """The training pass must differ from the plain forward (the masks drop something) and be
    reproducible (same seed and pass, same masks)."""
    plain = lm_forward_backward(model, values, ids, targets)[0]
    with dropout.training_pass(DROPOUT_PASS["seed"], DROPOUT_PASS["pass_"]):
        again = lm_forward_backward(model, values, ids, targets)[0]
    print(f"  dropout: training-pass loss {loss.item():.6f}, without dropout {plain.item():.6f}")
    assert abs(loss.item() - plain.item()) > 1e-3 and again.item() == loss.item()


def build_case(name: str, seed: int, builder: Callable):
    g = torch.Generator().manual_seed(seed)
    model, cfg = builder()
    model = model.to(F64)
    values = draw_parameters(model, g)
    ids, targets = make_golden.lm_tokens(g, VOCAB, BATCH, TIME, IGNORED, models.IGNORE_INDEX)
    if "dropout_pass" in cfg:
        with dropout.training_pass(cfg["dropout_pass"]["seed"], cfg["dropout_pass"]["pass_"]):
            loss, _, grads = lm_forward_backward(model, values, ids, targets)
        logits = lm_forward_backward(model, values, ids, targets)[1]
        dropout_check(model, values, ids, targets, loss)
    else:
        loss, logits, grads = lm_forward_backward(model, values, ids, targets)
    if name == "model_mamba_lm":
        hf_mamba_check(values, ids, targets, loss, logits, grads)
    if name in UNTIED:
        tied_check(UNTIED[name], values, ids, targets, loss, logits, grads)

    tensors = make_golden.lm_tensors(ids, targets, loss, logits, values, grads)
    cfg = dict(cfg, vocab=VOCAB, input_shape=[BATCH, TIME], ignore_index=models.IGNORE_INDEX, reduction="mean",
               rms_eps=models.RMS_EPS, layernorm_eps=models.LN_EPS, gss_eps=models.GSS_EPS,
               rope_base=models.ROPE_BASE, seed=seed)
    return tensors, cfg


write_case = make_golden.case_writer(GENERATOR, build_case, make_golden.write_lm_golden)


def write_model_goldens(outdir: str, only: Optional[List[str]] = None) -> List[str]:
    """Writes every model golden (or those named in `only`) into `outdir`; returns their paths."""
    names = {name for name, _, _ in CASES}
    unknown = set(only or []) - names
    if unknown:
        raise SystemExit(f"unknown model golden(s) {sorted(unknown)}; known: {sorted(names)}")
    return make_golden.write_cases(outdir, write_case, [case for case in CASES if only is None or case[0] in only])


def main(argv=None) -> int:
    args = make_golden.out_dir(__doc__, argv, lambda ap: ap.add_argument(
        "--only", nargs="+", metavar="NAME", help="write only these cases (e.g. model_pha_tied)"))
    write_model_goldens(args.out, args.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
