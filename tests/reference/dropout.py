"""Dropout masks of hybridseq's training passes (include/hybridseq/core/dropout.hpp), written
again from the formula, for the PyTorch goldens:

    key_site      = CounterRng(seed, stream = pass * 2**16 + site)
    bits(i)       = mix64(key + (i + 1) * 0x9e3779b97f4a7c15)          (mod 2**64)
    keep(i)       = (bits(i) >> 32) >= floor(p * 2**32)
    factor(i)     = keep(i) / (1 - p)

with CounterRng(seed, stream).key = mix64(seed ^ mix64(stream + 0x9e3779b97f4a7c15)) and mix64
SplitMix64's finaliser. Element i is the flat row-major index of the tensor dropped
(attention probabilities: (B, H, Tq, Tk)).

Sites are numbered in forward order within a pass. A reference model runs in
``with training_pass(seed, pass):``; ``drop(x, p)`` outside one (or with p = 0) is the identity
and takes no site, as in the C++.
"""

from __future__ import annotations

import contextlib
from typing import Optional

import numpy as np
import torch
from torch import Tensor

GOLDEN_GAMMA = 0x9E3779B97F4A7C15
MASK64 = (1 << 64) - 1


def _mix64_int(z: int) -> int:
    z &= MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def _mix64(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def counter_key(seed: int, stream: int) -> int:
    return _mix64_int(seed ^ _mix64_int(stream + GOLDEN_GAMMA))


def factors(seed: int, pass_: int, site: int, p: float, n: int) -> np.ndarray:
    """float64 (n,) of 1/(1-p) where kept, 0 where dropped."""
    key = np.uint64(counter_key(seed, (pass_ << 16) + site))
    i = np.arange(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        bits = _mix64(key + (i + np.uint64(1)) * np.uint64(GOLDEN_GAMMA))
    keep = (bits >> np.uint64(32)) >= np.uint64(int(p * 4294967296.0))
    return keep.astype(np.float64) / (1.0 - p)


class _Pass:
    def __init__(self, seed: int, pass_: int):
        self.seed, self.pass_, self.site = seed, pass_, 0


_current: Optional[_Pass] = None


@contextlib.contextmanager
def training_pass(seed: int, pass_: int):
    """Dropout on for the forward passes run inside (core::TrainingPass)."""
    global _current
    saved, _current = _current, _Pass(seed, pass_)
    try:
        yield
    finally:
        _current = saved


def drop(x: Tensor, p: float) -> Tensor:
    """x ⊙ mask of the next site (the identity outside a training pass or for p = 0)."""
    if _current is None or p == 0:
        return x
    f = factors(_current.seed, _current.pass_, _current.site, p, x.numel())
    _current.site += 1
    return x * torch.from_numpy(f).to(x.dtype).reshape(x.shape)
