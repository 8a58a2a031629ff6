"""Rotary position embedding in bf16 (Hugging Face Llama's half-split layout): y = x * cos + rotate_half(x) * sin,
x [BATCH, HEADS, SEQ, HEAD_DIM], cos and sin [SEQ, HEAD_DIM] (built in fp32 with theta 500000 as Llama-3 does,
then cast to the input dtype). Elementwise, memory-bound.

kernelwright family: rope (q only here; the family rotates q and k in one launch).
"""

import torch
import torch.nn as nn

BATCH = 4
HEADS = 32
SEQ = 2048
HEAD_DIM = 128
ROPE_THETA = 500000.0
DTYPE = torch.bfloat16


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def _rope_tables(seq: int, dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    freqs = torch.outer(torch.arange(seq, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def get_inputs():
    x = torch.randn(BATCH, HEADS, SEQ, HEAD_DIM).to(DTYPE)
    cos, sin = (t.to(DTYPE) for t in _rope_tables(SEQ, HEAD_DIM, ROPE_THETA))
    return [x, cos, sin]


def get_init_inputs():
    return []
