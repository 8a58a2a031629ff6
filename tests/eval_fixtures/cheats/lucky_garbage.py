# problem: elementwise; caught as: nondeterministic
"""Right on one call, subtly wrong on the next (a race that passes a single check by luck)."""
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x, y):
        self.calls += 1
        out = x * 2.0 + y
        if self.calls % 2 == 0:
            out.view(-1)[::97] += 1.0
        return out
