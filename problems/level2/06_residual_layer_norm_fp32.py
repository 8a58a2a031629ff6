"""Residual add + LayerNorm in fp32 (a post-norm transformer, BERT/GPT-2 medium width): y = layer_norm(x +
residual) * w + b, x and residual [TOKENS, HIDDEN], w and b [HIDDEN]. Memory-bound.

kernelwright family: layer_norm (after an add; no fused add_layer_norm rung yet).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 32768
HIDDEN = 1024
EPS = 1e-5
DTYPE = torch.float32


class Model(nn.Module):
    def __init__(self, hidden: int, eps: float, dtype: torch.dtype):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter((1.0 + 0.5 * torch.randn(hidden)).to(dtype))
        self.bias = nn.Parameter((0.5 * torch.randn(hidden)).to(dtype))

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x + residual, (x.shape[-1],), self.weight, self.bias, self.eps)


def get_inputs():
    x = torch.randn(TOKENS, HIDDEN).to(DTYPE)
    residual = (torch.randn(TOKENS, HIDDEN) * 3 + 1).to(DTYPE)
    return [x, residual]


def get_init_inputs():
    return [HIDDEN, EPS, DTYPE]
