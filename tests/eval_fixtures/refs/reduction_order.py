"""Row sums taken in a different order on every call (as split-KV attention or atomics do on a GPU): the result
moves in its last bits from run to run. The problem stays checkable; only randomness in the values would not.
"""
import torch
import torch.nn as nn

ROWS = 64
COLS = 96


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        perm = torch.randperm(x.shape[-1], device=x.device)
        return x[:, perm].sum(-1)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
