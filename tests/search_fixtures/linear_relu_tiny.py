"""A tiny linear + bias + ReLU problem for the search tests: y = relu(x @ W^T + b)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 16
IN_FEATURES = 32
OUT_FEATURES = 24
DTYPE = torch.float32


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int, dtype: torch.dtype):
        super().__init__()
        self.weight = nn.Parameter((torch.randn(out_features, in_features) / in_features**0.5).to(dtype))
        self.bias = nn.Parameter((0.5 * torch.randn(out_features)).to(dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(F.linear(x, self.weight, self.bias))


def get_inputs():
    return [torch.randn(TOKENS, IN_FEATURES).to(DTYPE)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES, DTYPE]
