# problem: elementwise; honest: writes into a fresh buffer with out= (no input touched), non-contiguous-safe
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        out = torch.empty_like(x)
        torch.add(y, x, alpha=2.0, out=out)
        return out
