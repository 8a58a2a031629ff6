"""Causal attention + output projection in bf16: o = sdpa(q, k, v, causal), y = merge_heads(o) @ Wo^T,
q, k, v [BATCH, HEADS, SEQ, HEAD_DIM], Wo [HEADS * HEAD_DIM, HEADS * HEAD_DIM]; y [BATCH, SEQ, HEADS * HEAD_DIM].
Q and K have standard deviation 1.6 so that attention is peaked and outputs stay O(1).

kernelwright family: attention (being added) + matmul.
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
    def __init__(self, heads: int, head_dim: int, dtype: torch.dtype):
        super().__init__()
        width = heads * head_dim
        self.o_weight = nn.Parameter((torch.randn(width, width) / width**0.5).to(dtype))

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [B, H, S, D]
        b, h, s, d = o.shape
        return F.linear(o.transpose(1, 2).reshape(b, s, h * d), self.o_weight)


def get_inputs():
    shape = (BATCH, HEADS, SEQ, HEAD_DIM)
    q = (torch.randn(shape) * 1.6).to(DTYPE)
    k = (torch.randn(shape) * 1.6).to(DTYPE)
    v = torch.randn(shape).to(DTYPE)
    return [q, k, v]


def get_init_inputs():
    return [HEADS, HEAD_DIM, DTYPE]
