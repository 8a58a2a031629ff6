"""Decode attention in fp16 (one new token per sequence against a KV cache, grouped-query): Q [BATCH, KV_HEADS *
GQA_GROUP, 1, HEAD_DIM], K and V caches [BATCH, KV_HEADS, CONTEXT, HEAD_DIM]; no mask (the token sees its whole
context). Memory-bound: reading the cache (1 GB) dominates; a split-K (flash-decoding) kernel wins here.

kernelwright family: attention (being added).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 32
KV_HEADS = 8
GQA_GROUP = 4
CONTEXT = 4096
HEAD_DIM = 128
DTYPE = torch.float16


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k_cache, v_cache, enable_gqa=True)


def get_inputs():
    q = (torch.randn(BATCH, KV_HEADS * GQA_GROUP, 1, HEAD_DIM) * 1.6).to(DTYPE)
    k = (torch.randn(BATCH, KV_HEADS, CONTEXT, HEAD_DIM) * 1.6).to(DTYPE)
    v = torch.randn(BATCH, KV_HEADS, CONTEXT, HEAD_DIM).to(DTYPE)
    return [q, k, v]


def get_init_inputs():
    return []
