"""Batched matmul in fp16: C[b] = A[b] @ B[b], A [BATCH, M, K], B [BATCH, K, N]; the shape of attention scores
(batch 2 x 32 heads, 1024 queries x 1024 keys, head dim 128).

kernelwright family: matmul (2-D only today: one launch per batch entry, or a batched rung to come).
"""

import torch
import torch.nn as nn

BATCH = 64
M = 1024
K = 128
N = 1024
DTYPE = torch.float16


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.bmm(a, b)


def get_inputs():
    a = torch.randn(BATCH, M, K).to(DTYPE)
    b = (torch.randn(BATCH, K, N) / K**0.5).to(DTYPE)
    return [a, b]


def get_init_inputs():
    return []
