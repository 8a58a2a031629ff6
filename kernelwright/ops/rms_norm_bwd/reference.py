"""rms_norm backward reference: (dx, dweight) = the gradients of sum(rms_norm(x, weight) * dy), by autograd in
float64 through the forward reference.

Shapes: x, dy [..., D], weight [D], rstd [...] (what the forward saved: ignored here, recomputed from x); dx like
x, dweight like weight. Memory: read x, dy, write dx (and w, dweight, rstd): at least 3N + 2D element moves.
"""

import torch

from kernelwright.ops.rms_norm.reference import rms_norm


def rms_norm_bwd(x: torch.Tensor, weight: torch.Tensor, dy: torch.Tensor, rstd: torch.Tensor, eps: float = 1e-6,
                 offset: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    del rstd  # recomputed from x
    with torch.enable_grad():
        x, w = x.detach().requires_grad_(), weight.detach().requires_grad_()
        dx, dw = torch.autograd.grad(rms_norm(x, w, eps, offset), (x, w), dy)
    return dx, dw
