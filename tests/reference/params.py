"""Parameter holders of the whole-model references (models.py, ecp_models.py).

They hold zero-initialised float64 parameters under the C++ names and do no math (each
reference writes its own forward; the golden writers draw the values).
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import nn


def param(*shape: int) -> nn.Parameter:
    return nn.Parameter(torch.zeros(*shape, dtype=torch.float64))


class Params(nn.Module):
    """Parameters by name and shape, registered in the order given; a shape of None leaves the
    name an attribute set to None (e.g. a Linear without bias)."""

    def __init__(self, **shapes: Optional[Tuple[int, ...]]):
        super().__init__()
        for name, shape in shapes.items():
            setattr(self, name, None if shape is None else param(*shape))
