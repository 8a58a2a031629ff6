"""Residual add + RMSNorm in bf16 (a decoder layer's pre-norm): h = x + residual, y = rms_norm(h) * w, x and
residual [TOKENS, HIDDEN], w [HIDDEN]. Returns y only (a decoder also keeps h for the next residual; here a
kernel may skip writing it). Memory-bound.

kernelwright family: add_rms_norm.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 16384
HIDDEN = 4096
EPS = 1e-5
DTYPE = torch.bfloat16


class Model(nn.Module):
    def __init__(self, hidden: int, eps: float, dtype: torch.dtype):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter((1.0 + 0.5 * torch.randn(hidden)).to(dtype))

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        h = x + residual
        return F.rms_norm(h, (h.shape[-1],), self.weight, self.eps)


def get_inputs():
    x = torch.randn(TOKENS, HIDDEN).to(DTYPE)
    residual = (torch.randn(TOKENS, HIDDEN) * 4).to(DTYPE)
    return [x, residual]


def get_init_inputs():
    return [HIDDEN, EPS, DTYPE]
