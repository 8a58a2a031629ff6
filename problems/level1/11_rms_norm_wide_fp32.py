"""RMSNorm in fp32 at a Llama-3-70B width: y = x / sqrt(mean(x^2) + eps) * w over the last dim, x [TOKENS,
HIDDEN] (4k tokens of 8192), w [HIDDEN]. Memory-bound.

kernelwright family: rms_norm.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 4096
HIDDEN = 8192
EPS = 1e-5
DTYPE = torch.float32


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
