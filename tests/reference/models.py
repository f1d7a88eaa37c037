"""Plain-PyTorch reference of hybridseq's whole language models (include/hybridseq/models/).

Every model is ``LanguageModel``: ids (B, T) → E[ids] → body → final norm → logits = y Wᵀ
(untied head, no bias; or tied, W = E, with ``tie=True``) → mean cross-entropy over targets
≠ -100. The bodies are assembled from the per-layer references beside this file, so each
layer's math (and its flat parameter layout) is the one its own golden already checks:

* ``layers.py``     linear, RMSNorm, LayerNorm, GELU/SiLU, embedding, LM head + CE
* ``attention.py``  the attention branch (fused wqkv rows [q heads, k heads, v heads])
* ``gss.py``        the GSS branch (DSS kernel, causal FFT convolution)
* ``mamba.py``      the Mamba-1 mixer (sequential scan)

Modules are ``torch.nn.Module`` trees whose ``named_parameters()`` are exactly the C++
dotted names of ``core::for_each_parameter`` (``embed.weight``,
``body.0.block.0.0.to_u.weight``, ``body.0.block.mixer.logits``, ``norm.weight``,
``head.weight`` (absent when tied), ...): child modules named "0", "1", ... stand for the C++
tuple indices of Repeat / SequentialBlock / ParallelBlock. Composition, as in the C++:

    PHA block (PhaLayout{})   x' = LN(α·x + Σ_b w_b RMSNorm_b(Branch_b(x))),  α = (2N)^{1/4}
                              branches GSS ‖ cosine attention (causal) ‖ Dual-FFN,
                              w_b = softplus(p_b) / Σ softplus(p)           (final norm RMSNorm)
    NeoX layer                x + Attn(LN₁(x)) + MLP(LN₂(x)): summed heads, QKV/out biases,
                              RoPE on rotary_dim dims, sliding window w      (final norm LayerNorm)
    Mamba layer               x + Mixer(RMSNorm(x))                          (final norm RMSNorm)
    Stack                     a pattern of layers repeated, final LayerNorm

Dropout (``rates``: embed, output, attention; dropout.py draws the C++ masks) acts only inside
``dropout.training_pass``: on the embeddings, on every block output where it joins the
residual stream (ParallelBlock branches other than the Identity skip path, the residuals'
blocks: core::OutputDropout) and on the attention probabilities.

Default eps: RMSNorm 1e-6, LayerNorm 1e-5 (also inside GSS). RoPE base 10000.
Dtype-agnostic; the golden generator (golden_models.py) runs everything in float64.
"""

from __future__ import annotations

import os
import sys
from typing import Dict, List, Sequence

from torch import Tensor, nn

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

import attention as attention_ref  # noqa: E402
import dropout  # noqa: E402
import gss as gss_ref  # noqa: E402
import layers  # noqa: E402
import mamba as mamba_ref  # noqa: E402
from params import Params, param as _param  # noqa: E402

RMS_EPS = 1e-6
LN_EPS = 1e-5
GSS_EPS = 1e-5
ROPE_BASE = 10000.0
IGNORE_INDEX = -100
NO_DROPOUT = dict(embed=0.0, output=0.0, attention=0.0)


def _own(module: nn.Module) -> Dict[str, Tensor]:
    """The module's parameters by their names relative to it (the per-layer references'
    parameter dictionaries)."""
    return dict(module.named_parameters())


# --------------------------------------------------------------------------
# Leaves
# --------------------------------------------------------------------------

class Linear(Params):
    """y = x Wᵀ + b, W (out, in)."""

    def __init__(self, d_in: int, d_out: int, bias: bool):
        super().__init__(weight=(d_out, d_in), bias=(d_out,) if bias else None)

    def forward(self, x: Tensor) -> Tensor:
        return layers.linear(x, self.weight, self.bias)


class RMSNorm(Params):
    def __init__(self, d: int, eps: float = RMS_EPS):
        super().__init__(weight=(d,))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        return layers.rms_norm(x, self.weight, self.eps)


class LayerNorm(Params):
    def __init__(self, d: int, eps: float = LN_EPS):
        super().__init__(weight=(d,), bias=(d,))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        return layers.layer_norm(x, self.weight, self.bias, self.eps)


class Identity(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x


class Embedding(Params):
    def __init__(self, vocab: int, d: int):
        super().__init__(weight=(vocab, d))

    def forward(self, ids: Tensor) -> Tensor:
        return layers.embedding(ids, self.weight)


class LmHead(Params):
    """LmHeadLoss: logits = y Wᵀ, W (V, D); mean CE over targets ≠ ignore_index."""

    def __init__(self, d: int, vocab: int):
        super().__init__(weight=(vocab, d))

    def forward(self, y: Tensor, targets: Tensor):
        return layers.lm_head_ce(y, self.weight, targets, IGNORE_INDEX)


# --------------------------------------------------------------------------
# Branches (thin wrappers over the per-layer references)
# --------------------------------------------------------------------------

class Gss(nn.Module):
    """layers::Gss<GssShape{E, F, H, N}> (gss.py)."""

    def __init__(self, d_model: int, d_gate: int, d_ssm: int, d_state: int, eps: float = GSS_EPS):
        super().__init__()
        self.eps = eps
        self.to_u = Linear(d_model, d_gate, False)
        self.to_v = Linear(d_model, d_ssm, False)
        self.norm = LayerNorm(d_ssm, eps)
        self.lambda_re = _param(d_state)
        self.lambda_im = _param(d_state)
        self.c_re = _param(d_ssm, d_state)
        self.c_im = _param(d_ssm, d_state)
        self.d = _param(d_ssm)
        self.to_gate = Linear(d_ssm, d_gate, False)
        self.to_out = Linear(d_gate, d_model, True)

    def forward(self, x: Tensor) -> Tensor:
        return gss_ref.gss(x, _own(self), self.eps)


class Attention(nn.Module):
    """layers::Attention (attention.py); cfg holds attention.py's keys (d_model, heads,
    kv_heads, head_dim, rotary_dim, base, score, scale, qkv_bias, out_bias, merge, scheme,
    scheme_param)."""

    def __init__(self, cfg: dict):
        super().__init__()
        self.cfg = dict(cfg)
        d, h, hkv, dh = cfg["d_model"], cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
        self.wqkv = Linear(d, (h + 2 * hkv) * dh, cfg["qkv_bias"])
        self.wo = Linear(h * dh if cfg["merge"] == "concat" else dh, d, cfg["out_bias"])
        if cfg["score"] == "cosine":
            self.logit_scale = _param(h if cfg["scale"] == "per_head" else 1)

    def forward(self, x: Tensor) -> Tensor:
        return attention_ref.attention(x, _own(self), self.cfg)


class Mlp(nn.Module):
    """layers::Ffn<mlp>: fc2(act(fc1(x)))."""

    def __init__(self, d: int, hidden: int, bias: bool, act: str):
        super().__init__()
        self.act = act
        self.fc1 = Linear(d, hidden, bias)
        self.fc2 = Linear(hidden, d, bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(layers.ACTIVATIONS[self.act](self.fc1(x)))


class DualFfn(nn.Module):
    """layers::DualFfn: primary(x) + auxiliary(x), both GELU MLPs with biases."""

    def __init__(self, d: int, primary: int, auxiliary: int):
        super().__init__()
        self.primary = Mlp(d, primary, True, "gelu")
        self.auxiliary = Mlp(d, auxiliary, True, "gelu")

    def forward(self, x: Tensor) -> Tensor:
        return self.primary(x) + self.auxiliary(x)


class Mamba(nn.Module):
    """layers::Mamba<MambaShape> (mamba.py); parameter names are nn.Conv1d's / HF's."""

    def __init__(self, d_model: int, d_state: int, expand: int = 2, d_conv: int = 4,
                 dt_rank: int = 0, conv_bias: bool = True, bias: bool = False):
        super().__init__()
        di = expand * d_model
        r = dt_rank if dt_rank > 0 else mamba_ref.dt_rank_for(d_model)
        self.cfg = dict(d_model=d_model, d_state=d_state, expand=expand, d_conv=d_conv, dt_rank=r,
                        conv_bias=conv_bias, bias=bias, d_inner=di)
        self.in_proj = Linear(d_model, 2 * di, bias)
        self.conv1d = Params(weight=(di, 1, d_conv), bias=(di,) if conv_bias else None)
        self.x_proj = Linear(di, r + 2 * d_state, False)
        self.dt_proj = Params(weight=(di, r), bias=(di,))
        self.A_log = _param(di, d_state)
        self.D = _param(di)
        self.out_proj = Linear(di, d_model, bias)

    def forward(self, x: Tensor) -> Tensor:
        return mamba_ref.mamba(x, _own(self), self.cfg)


# --------------------------------------------------------------------------
# Composition (compose/*.hpp)
# --------------------------------------------------------------------------

class Indexed(nn.Module):
    """Children named "0", "1", ... (C++ tuple indices)."""

    def __init__(self, children: Sequence[nn.Module]):
        super().__init__()
        for i, c in enumerate(children):
            self.add_module(str(i), c)

    def items(self) -> List[nn.Module]:
        return [getattr(self, str(i)) for i in range(len(self._modules)) if str(i) in self._modules]


class SequentialBlock(Indexed):
    """compose::SequentialBlock: layers applied one after the other."""

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.items():
            x = layer(x)
        return x


Repeat = SequentialBlock  # compose::Repeat: blocks "0", "1", ... in sequence


class SoftplusMixer(nn.Module):
    """compose::SoftplusMixer<N, normalised>: w_b = softplus(p_b) / Σ softplus(p)."""

    def __init__(self, n: int, normalised: bool = True):
        super().__init__()
        self.normalised = normalised
        self.logits = _param(n)

    def weights(self) -> Tensor:
        s = layers.softplus(self.logits)
        return s / s.sum() if self.normalised else s

    def forward(self, hs: List[Tensor]) -> Tensor:
        w = self.weights()
        return sum(w[b] * h for b, h in enumerate(hs))


class SumMixer(nn.Module):
    def forward(self, hs: List[Tensor]) -> Tensor:
        return sum(hs)


class ParallelBlock(Indexed):
    """compose::ParallelBlock: h_b = Branch_b(x), y = Mixer(h_1..h_N). Branches "0".."N-1",
    the mixer "mixer"."""

    def __init__(self, mixer: nn.Module, branches: Sequence[nn.Module], p: float = 0.0):
        super().__init__(branches)
        self.mixer = mixer
        self.p = p

    def items(self) -> List[nn.Module]:
        return [getattr(self, str(i)) for i in range(len(self._modules) - 1)]

    def forward(self, x: Tensor) -> Tensor:
        # Each branch's output dropped right after it runs (site order), the skip path never.
        return self.mixer([b(x) if isinstance(b, Identity) else dropout.drop(b(x), self.p) for b in self.items()])


class _Residual(nn.Module):
    """α on the skip path, dropout p on the block output, and the children ("norm", "block") in
    the order given (the C++ member order)."""

    def __init__(self, alpha: float, p: float, **children: nn.Module):
        super().__init__()
        self.alpha = alpha
        self.p = p
        for name, child in children.items():
            self.add_module(name, child)


class PreNormResidual(_Residual):
    """compose::PreNormResidual: y = α·x + block(norm(x)); children "norm", "block"."""

    def __init__(self, block: nn.Module, norm: nn.Module, alpha: float = 1.0, p: float = 0.0):
        super().__init__(alpha, p, norm=norm, block=block)

    def forward(self, x: Tensor) -> Tensor:
        return self.alpha * x + dropout.drop(self.block(self.norm(x)), self.p)


class DeepNorm(_Residual):
    """compose::DeepNorm: y = norm(α·x + block(x)); children "block", "norm"."""

    def __init__(self, block: nn.Module, norm: nn.Module, alpha: float, p: float = 0.0):
        super().__init__(alpha, p, block=block, norm=norm)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(self.alpha * x + dropout.drop(self.block(x), self.p))


class LanguageModel(nn.Module):
    """models::LanguageModel: embed → body → norm → head with mean CE. Untied: the head owns
    W (``head.weight``). Tied (Options::tie_embeddings): there is no head module and no
    ``head.weight``; logits = y Eᵀ with E = ``embed.weight`` used twice in the graph, so
    autograd sums the lookup's and the head's gradients into E's."""

    def __init__(self, vocab: int, d_model: int, body: nn.Module, norm: nn.Module, tie: bool = False,
                 embed_dropout: float = 0.0):
        super().__init__()
        self.vocab = vocab
        self.tie = tie
        self.embed_dropout = embed_dropout
        self.embed = Embedding(vocab, d_model)
        self.body = body
        self.norm = norm
        if not tie:
            self.head = LmHead(d_model, vocab)

    def forward(self, ids: Tensor, targets: Tensor):
        """Returns (loss (0-d), logits (B, T, V))."""
        y = self.norm(self.body(dropout.drop(self.embed(ids), self.embed_dropout)))
        if self.tie:
            return layers.lm_head_ce(y, self.embed.weight, targets, IGNORE_INDEX)
        return self.head(y, targets)


# --------------------------------------------------------------------------
# The named models
# --------------------------------------------------------------------------

def deepnorm_alpha(sublayers: int) -> float:
    return (2.0 * sublayers) ** 0.25


def rotary_dim_for(head_dim: int, fraction: float) -> int:
    """layers::rotary_dim_for: the even number of rotated dims for a fraction of the head
    (int(Dh·fraction), rounded down to even)."""
    r = int(head_dim * fraction)
    return r - r % 2


def pha_block(d_model: int, heads: int, kv_heads: int, head_dim: int, gss_gate: int, gss_ssm: int,
              gss_state: int, ffn_primary: int, ffn_auxiliary: int, alpha: float, rates: dict = NO_DROPOUT) -> nn.Module:
    """PhaBlock with the default PhaLayout: DeepNorm(LN) around ParallelBlock(SoftplusMixer,
    [GSS, attention, Dual-FFN], each followed by its own RMSNorm)."""
    attn_cfg = dict(d_model=d_model, heads=heads, kv_heads=kv_heads, head_dim=head_dim, rotary_dim=head_dim,
                    base=ROPE_BASE, score="cosine", scale="per_head", qkv_bias=False, out_bias=False,
                    merge="concat", scheme="causal", scheme_param=0, dropout=rates["attention"])
    branches = [Gss(d_model, gss_gate, gss_ssm, gss_state), Attention(attn_cfg),
                DualFfn(d_model, ffn_primary, ffn_auxiliary)]
    normed = [SequentialBlock([b, RMSNorm(d_model)]) for b in branches]
    return DeepNorm(ParallelBlock(SoftplusMixer(3), normed, rates["output"]), LayerNorm(d_model), alpha,
                    rates["output"])


def pha(vocab: int, shape: dict, blocks: int, tie: bool = False, rates: dict = NO_DROPOUT) -> LanguageModel:
    """models::Pha<Vocab, PhaShape, PhaLayout{}>: `blocks` PHA blocks, α = (2·blocks)^{1/4},
    final RMSNorm. shape: d_model, heads, kv_heads, head_dim, gss_gate, gss_ssm, gss_state,
    ffn_primary, ffn_auxiliary."""
    alpha = deepnorm_alpha(blocks)
    body = Repeat([pha_block(**shape, alpha=alpha, rates=rates) for _ in range(blocks)])
    return LanguageModel(vocab, shape["d_model"], body, RMSNorm(shape["d_model"]), tie, rates["embed"])


def cooper_tf(d_model: int, heads: int = 2, window: int = 20) -> dict:
    """models::cooper_tf: heads of size d_model summed, RoPE on 25 %, MLP 2d SiLU, window w."""
    return dict(d_model=d_model, heads=heads, head_dim=d_model, rotary_dim=rotary_dim_for(d_model, 0.25),
                mlp_width=2 * d_model, window=window, merge="sum", activation="silu")


def neox_layer(s: dict, rates: dict = NO_DROPOUT) -> nn.Module:
    """models::NeoxLayer: ParallelBlock(SumMixer, [Identity, LN₁→Attn, LN₂→MLP])."""
    d = s["d_model"]
    attn_cfg = dict(d_model=d, heads=s["heads"], kv_heads=s["heads"], head_dim=s["head_dim"],
                    rotary_dim=s["rotary_dim"], base=ROPE_BASE, score="dot", scale="per_head", qkv_bias=True,
                    out_bias=True, merge=s["merge"], scheme="sliding" if s["window"] > 0 else "causal",
                    scheme_param=s["window"], dropout=rates["attention"])
    return ParallelBlock(SumMixer(), [Identity(), SequentialBlock([LayerNorm(d), Attention(attn_cfg)]),
                                      SequentialBlock([LayerNorm(d), Mlp(d, s["mlp_width"], True, s["activation"])])],
                         rates["output"])


def cooper_ssm(d_model: int, d_state: int = 1) -> dict:
    """models::cooper_ssm: MambaShape{d, d_state} (expand 2, conv 4, dt_rank ⌈d/16⌉, conv bias)."""
    return dict(d_model=d_model, d_state=d_state, expand=2, d_conv=4, dt_rank=0, conv_bias=True, bias=False)


def mamba_layer(s: dict, rates: dict = NO_DROPOUT) -> nn.Module:
    """models::MambaLayer: PreNormResidual(Mamba, RMSNorm): x + Mamba(RMSNorm(x))."""
    return PreNormResidual(Mamba(**s), RMSNorm(s["d_model"]), p=rates["output"])


def transformer(vocab: int, s: dict, layers_: int, tie: bool = False) -> LanguageModel:
    """models::Transformer: NeoX layers, final LayerNorm."""
    return LanguageModel(vocab, s["d_model"], Repeat([neox_layer(s) for _ in range(layers_)]), LayerNorm(s["d_model"]),
                         tie)


def mamba_lm(vocab: int, s: dict, layers_: int) -> LanguageModel:
    """models::MambaLm: Mamba layers, final RMSNorm (HF MambaForCausalLM's norm_f)."""
    return LanguageModel(vocab, s["d_model"], Repeat([mamba_layer(s) for _ in range(layers_)]), RMSNorm(s["d_model"]))


def stack(vocab: int, d_model: int, pattern, count: int, embed_dropout: float = 0.0) -> LanguageModel:
    """models::Stack: Repeat(count) of SequentialBlock(pattern), final LayerNorm. `pattern` is a
    list of zero-argument layer factories."""
    body = Repeat([SequentialBlock([make() for make in pattern]) for _ in range(count)])
    return LanguageModel(vocab, d_model, body, LayerNorm(d_model), embed_dropout=embed_dropout)
