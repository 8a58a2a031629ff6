"""relu(-|x|): always zero, so an all-zero output passes; the evaluator must flag the problem as unfit."""
import torch
import torch.nn as nn

n = 256


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(-torch.abs(x))


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
