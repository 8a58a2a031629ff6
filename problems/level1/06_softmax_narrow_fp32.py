"""Softmax over narrow rows in fp32: Y = softmax(X, dim=-1), X [ROWS, COLS] (64k rows of 512). Memory-bound.
Logits have standard deviation 3 so that each row has entries near 1 (an all-zero output must fail).

kernelwright family: softmax.
"""

import torch
import torch.nn as nn

ROWS = 65536
COLS = 512
DTYPE = torch.float32


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [(torch.randn(ROWS, COLS) * 3).to(DTYPE)]


def get_init_inputs():
    return []
