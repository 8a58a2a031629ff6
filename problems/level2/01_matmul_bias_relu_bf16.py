"""Linear + bias + ReLU in bf16: y = relu(x @ W^T + b), x [TOKENS, IN_FEATURES], W [OUT_FEATURES, IN_FEATURES],
b [OUT_FEATURES]. The bias and activation belong in the matmul's epilogue. Weights are scaled by 1/sqrt(fan_in),
so pre-activations are unit-variance and about half the outputs are positive and O(1).

kernelwright family: matmul (+ an epilogue).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 8192
IN_FEATURES = 4096
OUT_FEATURES = 4096
DTYPE = torch.bfloat16


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
