"""add_rms_norm backward reference. With h = x + residual and (y, h) the forward's outputs, gradients dy and dh
reach them; dx = dresidual = d(sum(y * dy))/dh + dh (one output: the two are equal), dweight as for rms_norm.

Inputs: h (the forward's output, which the backward reads instead of x and residual), weight, dy, dh and rstd
[...] (saved by the forward: ignored here, recomputed from h). Memory: read h, dy, dh, write dx (and w, dweight,
rstd): at least 4N + 2D element moves.
"""

import torch

from kernelwright.ops.rms_norm_bwd.reference import rms_norm_bwd


def add_rms_norm_bwd(h: torch.Tensor, weight: torch.Tensor, dy: torch.Tensor, dh: torch.Tensor, rstd: torch.Tensor,
                     eps: float = 1e-6, offset: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    dx, dw = rms_norm_bwd(h, weight, dy, rstd, eps, offset)
    return dx + dh, dw
