"""Square matmul in fp32: C = A @ B, A [M, K], B [K, N]. Compute-bound (2 M N K = 137 GFLOP).

kernelwright family: matmul.
"""

import torch
import torch.nn as nn

M = 4096
K = 4096
N = 4096
DTYPE = torch.float32


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    a = torch.randn(M, K).to(DTYPE)
    b = (torch.randn(K, N) / K**0.5).to(DTYPE)  # unit-variance output
    return [a, b]


def get_init_inputs():
    return []
