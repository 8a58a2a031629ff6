"""add_rms_norm reference: h = x + residual; y = rms_norm(h) (the residual add of a decoder layer, fused with the
norm that follows it). Returns (y, h).

Shapes: x, residual [..., D], weight [D]; y and h like x. Memory: read x, residual, write y, h (and read w): at
least 4N + D element moves.
"""

import torch

from kernelwright.ops.rms_norm.reference import rms_norm


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
                 offset: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    h = x + residual
    return rms_norm(h, weight, eps, offset), h
