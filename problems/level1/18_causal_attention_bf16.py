"""Causal scaled-dot-product attention in bf16: O = softmax(Q K^T / sqrt(D) + causal mask) V, Q, K, V
[BATCH, HEADS, SEQ, HEAD_DIM]. Compute-bound (about 2 x 2 B H S^2 D / 2 = 69 GFLOP with the mask). Q and K have
standard deviation 1.6 so that attention is peaked and outputs stay O(1) (flat attention over 2k keys averages
V to about 0.03, which an all-zero output would match).

kernelwright family: attention (being added).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 4
HEADS = 32
SEQ = 2048
HEAD_DIM = 128
DTYPE = torch.bfloat16


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def get_inputs():
    shape = (BATCH, HEADS, SEQ, HEAD_DIM)
    q = (torch.randn(shape) * 1.6).to(DTYPE)
    k = (torch.randn(shape) * 1.6).to(DTYPE)
    v = torch.randn(shape).to(DTYPE)
    return [q, k, v]


def get_init_inputs():
    return []
