"""SiLU in bf16: y = x * sigmoid(x), x [TOKENS, FEATURES] (8k tokens of a Llama-3-8B MLP). Elementwise,
memory-bound.

kernelwright family: none yet (swiglu computes silu(gate) * up; the nearest).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 8192
FEATURES = 14336
DTYPE = torch.bfloat16


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(x)


def get_inputs():
    return [(torch.randn(TOKENS, FEATURES) * 2).to(DTYPE)]


def get_init_inputs():
    return []
