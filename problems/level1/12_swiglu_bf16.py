"""SwiGLU activation in bf16: y = silu(gate) * up, gate and up [TOKENS, INTERMEDIATE] (8k tokens of a
Llama-3-8B MLP). Elementwise, memory-bound: read 2N, write N.

kernelwright family: swiglu.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 8192
INTERMEDIATE = 14336
DTYPE = torch.bfloat16


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return F.silu(gate) * up


def get_inputs():
    gate = (torch.randn(TOKENS, INTERMEDIATE) * 2).to(DTYPE)
    up = torch.randn(TOKENS, INTERMEDIATE).to(DTYPE)
    return [gate, up]


def get_init_inputs():
    return []
