"""RMSNorm in bf16: y = x / sqrt(mean(x^2) + eps) * w over the last dim, x [TOKENS, HIDDEN] (16k tokens of a
Llama-3-8B hidden state), w [HIDDEN]. Memory-bound.

kernelwright family: rms_norm.
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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def get_inputs():
    return [torch.randn(TOKENS, HIDDEN).to(DTYPE)]


def get_init_inputs():
    return [HIDDEN, EPS, DTYPE]
