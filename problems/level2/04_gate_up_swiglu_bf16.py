"""Fused gate/up projection + SwiGLU in bf16 (vLLM's merged MLP input): [g, u] = x @ W^T, y = silu(g) * u,
x [TOKENS, HIDDEN], W [2 * INTERMEDIATE, HIDDEN] (gate rows first). The SwiGLU belongs in the matmul's epilogue,
halving the bytes written.

kernelwright family: matmul + swiglu.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 4096
HIDDEN = 4096
INTERMEDIATE = 14336
DTYPE = torch.bfloat16


class Model(nn.Module):
    def __init__(self, hidden: int, intermediate: int, dtype: torch.dtype):
        super().__init__()
        self.weight = nn.Parameter((torch.randn(2 * intermediate, hidden) / hidden**0.5).to(dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = F.linear(x, self.weight).chunk(2, dim=-1)
        return F.silu(gate) * up


def get_inputs():
    return [torch.randn(TOKENS, HIDDEN).to(DTYPE)]


def get_init_inputs():
    return [HIDDEN, INTERMEDIATE, DTYPE]
