"""LayerNorm in fp32: y = (x - mean) / sqrt(var + eps) * w + b over the last dim, x [TOKENS, HIDDEN], w and b
[HIDDEN]. The input has a non-zero mean so that a kernel skipping the mean subtraction fails. Memory-bound.

kernelwright family: layer_norm.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 16384
HIDDEN = 4096
EPS = 1e-5
DTYPE = torch.float32


class Model(nn.Module):
    def __init__(self, hidden: int, eps: float, dtype: torch.dtype):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter((1.0 + 0.5 * torch.randn(hidden)).to(dtype))
        self.bias = nn.Parameter((0.5 * torch.randn(hidden)).to(dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)


def get_inputs():
    return [(torch.randn(TOKENS, HIDDEN) * 2 + 0.5).to(DTYPE)]


def get_init_inputs():
    return [HIDDEN, EPS, DTYPE]
