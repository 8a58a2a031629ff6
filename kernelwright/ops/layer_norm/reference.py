"""layer_norm reference: y = (x - mean) / sqrt(var + eps) * w + b over the last dim (population variance, as
torch.nn.LayerNorm).

Shapes: x [..., D], weight and bias [D], y like x. Memory: read x, write y, read w, b: at least 2N + 2D moves.
"""

import torch


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    mean = x.mean(-1, keepdim=True)
    var = (x - mean).pow(2).mean(-1, keepdim=True)
    return (x - mean) * torch.rsqrt(var + eps) * weight + bias
