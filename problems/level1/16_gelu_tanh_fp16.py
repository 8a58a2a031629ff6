"""GELU (tanh approximation, GPT-2's) in fp16: y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), x [TOKENS,
FEATURES] (8k tokens of a 4 x 4096 MLP). Elementwise, memory-bound.

kernelwright family: none yet (an elementwise activation; swiglu's kernels are the nearest).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 8192
FEATURES = 16384
DTYPE = torch.float16


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x, approximate="tanh")


def get_inputs():
    return [(torch.randn(TOKENS, FEATURES) * 2).to(DTYPE)]


def get_init_inputs():
    return []
