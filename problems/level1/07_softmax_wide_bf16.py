"""Softmax over 65k-wide rows in bf16: Y = softmax(X, dim=-1), X [ROWS, COLS]. One row no longer fits a
thread block's registers (a split or online softmax). Logits have standard deviation 4 so that every row keeps
entries well above 1e-2 (with unit logits all 65k probabilities are below 1e-3 and an all-zero output passes).

kernelwright family: softmax.
"""

import torch
import torch.nn as nn

ROWS = 4096
COLS = 65536
DTYPE = torch.bfloat16


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [(torch.randn(ROWS, COLS) * 4).to(DTYPE)]


def get_init_inputs():
    return []
