"""rms_norm reference: y = x / sqrt(mean(x^2) + eps) * w over the last dim (w + 1 with ``offset``, as Gemma).

Shapes: x [..., D], weight [D], y like x. Memory: read x, write y, read w: at least 2N + D element moves.
"""

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, offset: bool = False) -> torch.Tensor:
    w = (1 + weight) if offset else weight
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
