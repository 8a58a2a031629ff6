"""layer_norm backward reference: (dx, dweight, dbias) = the gradients of sum(layer_norm(x, w, b) * dy), by
autograd in float64 through the forward reference.

Shapes: x, dy [..., D], weight [D], mean and rstd [...] (what the forward saved: ignored here, recomputed from x);
dx like x, dweight and dbias [D]. Memory: read x, dy, write dx (and w, dweight, dbias, the statistics): at least
3N + 3D element moves.
"""

import torch

from kernelwright.ops.layer_norm.reference import layer_norm


def layer_norm_bwd(x: torch.Tensor, weight: torch.Tensor, dy: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor,
                   eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    del mean, rstd  # recomputed from x
    with torch.enable_grad():
        x, w = x.detach().requires_grad_(), weight.detach().requires_grad_()
        b = torch.zeros_like(w, requires_grad=True)  # dbias does not depend on the bias
        dx, dw, db = torch.autograd.grad(layer_norm(x, w, b, eps), (x, w, b), dy)
    return dx, dw, db
