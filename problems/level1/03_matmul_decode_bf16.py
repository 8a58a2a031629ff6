"""Decode-shaped skinny matmul in bf16: Y = X @ W, X [TOKENS, HIDDEN] (a decode batch of 16 tokens), W [HIDDEN,
OUT_FEATURES] (a Llama-3-8B MLP up projection). Memory-bound: reading W (117 MB) dominates.

kernelwright family: matmul.
"""

import torch
import torch.nn as nn

TOKENS = 16
HIDDEN = 4096
OUT_FEATURES = 14336
DTYPE = torch.bfloat16


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.matmul(x, w)


def get_inputs():
    x = torch.randn(TOKENS, HIDDEN).to(DTYPE)
    w = (torch.randn(HIDDEN, OUT_FEATURES) / HIDDEN**0.5).to(DTYPE)
    return [x, w]


def get_init_inputs():
    return []
