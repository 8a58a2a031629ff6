# problem: matmul_bias_relu; honest: the product as two half-K products summed (another accumulation order),
# parameters declared under other names (so only the shared seed gives it the same weights)
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        lin = nn.Linear(in_features, out_features)
        self.w = nn.Parameter(lin.weight.detach().clone())
        self.b = nn.Parameter(lin.bias.detach().clone())

    def forward(self, x):
        k = x.shape[-1] // 2
        y = x[:, :k] @ self.w[:, :k].t() + x[:, k:] @ self.w[:, k:].t()
        return torch.relu(y + self.b)
