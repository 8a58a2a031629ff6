"""Causal grouped-query attention in bf16 (Llama-3-8B: 32 query heads share 8 KV heads): Q [BATCH, KV_HEADS *
GQA_GROUP, SEQ, HEAD_DIM], K and V [BATCH, KV_HEADS, SEQ, HEAD_DIM]; query head h reads KV head h // GQA_GROUP.
Q and K have standard deviation 1.6 so that attention is peaked (see 18).

kernelwright family: attention (being added).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 4
KV_HEADS = 8
GQA_GROUP = 4
SEQ = 2048
HEAD_DIM = 128
DTYPE = torch.bfloat16


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def get_inputs():
    q = (torch.randn(BATCH, KV_HEADS * GQA_GROUP, SEQ, HEAD_DIM) * 1.6).to(DTYPE)
    k = (torch.randn(BATCH, KV_HEADS, SEQ, HEAD_DIM) * 1.6).to(DTYPE)
    v = torch.randn(BATCH, KV_HEADS, SEQ, HEAD_DIM).to(DTYPE)
    return [q, k, v]


def get_init_inputs():
    return []
