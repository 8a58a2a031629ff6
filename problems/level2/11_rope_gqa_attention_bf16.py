"""RoPE on q and k + causal grouped-query attention in bf16 (Llama-3-8B attention core): q, k rotated by
cos/sin (half-split), then O = sdpa(q, k, v, causal, GQA); q [BATCH, KV_HEADS * GQA_GROUP, SEQ, HEAD_DIM], k and v
[BATCH, KV_HEADS, SEQ, HEAD_DIM], cos and sin [SEQ, HEAD_DIM] (theta 500000). The rotation can be applied
as q and k tiles are loaded.

kernelwright family: rope + attention (being added).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 2
KV_HEADS = 8
GQA_GROUP = 4
SEQ = 2048
HEAD_DIM = 128
ROPE_THETA = 500000.0
DTYPE = torch.bfloat16


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor,
                sin: torch.Tensor) -> torch.Tensor:
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def _rope_tables(seq: int, dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    freqs = torch.outer(torch.arange(seq, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def get_inputs():
    q = (torch.randn(BATCH, KV_HEADS * GQA_GROUP, SEQ, HEAD_DIM) * 1.6).to(DTYPE)
    k = (torch.randn(BATCH, KV_HEADS, SEQ, HEAD_DIM) * 1.6).to(DTYPE)
    v = torch.randn(BATCH, KV_HEADS, SEQ, HEAD_DIM).to(DTYPE)
    cos, sin = (t.to(DTYPE) for t in _rope_tables(SEQ, HEAD_DIM, ROPE_THETA))
    return [q, k, v, cos, sin]


def get_init_inputs():
    return []
