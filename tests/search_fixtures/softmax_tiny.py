"""A tiny softmax problem for the search tests (CPU, Triton interpreter): Y = softmax(X, dim=-1), X [ROWS, COLS]."""

import torch
import torch.nn as nn

ROWS = 16
COLS = 48
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
