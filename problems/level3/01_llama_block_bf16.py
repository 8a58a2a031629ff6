"""A Llama-3-8B-style decoder block in bf16 (prefill, no KV cache):

    h = x + o_proj(attention(rope(q_proj(n)), rope(k_proj(n)), v_proj(n), causal, GQA)),  n = rms_norm(x)
    y = h + down(silu(gate(m)) * up(m)),                                                 m = rms_norm(h)

x [BATCH, SEQ, HIDDEN] with HIDDEN = KV_HEADS * GQA_GROUP * HEAD_DIM (4096: 32 query heads share 8 KV heads of
128), MLP INTERMEDIATE 14336, cos and sin [SEQ, HEAD_DIM] (theta 500000, half-split layout). Weights are
unit-gain (1/sqrt(fan_in)), with q and k projections scaled by 1.6 so that attention is peaked.

kernelwright families: rms_norm / add_rms_norm, matmul, rope, attention (being added), swiglu.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 2
SEQ = 2048
KV_HEADS = 8
GQA_GROUP = 4
HEAD_DIM = 128
INTERMEDIATE = 14336
EPS = 1e-5
ROPE_THETA = 500000.0
DTYPE = torch.bfloat16


def _weight(out_features: int, in_features: int, dtype: torch.dtype, gain: float = 1.0) -> nn.Parameter:
    return nn.Parameter((torch.randn(out_features, in_features) * (gain / in_features**0.5)).to(dtype))


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Model(nn.Module):
    def __init__(self, kv_heads: int, gqa_group: int, head_dim: int, intermediate: int, eps: float,
                 dtype: torch.dtype):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim, self.eps = kv_heads * gqa_group, kv_heads, head_dim, eps
        hidden = self.heads * head_dim
        self.attn_norm = nn.Parameter((1.0 + 0.2 * torch.randn(hidden)).to(dtype))
        self.q_weight = _weight(self.heads * head_dim, hidden, dtype, gain=1.6)
        self.k_weight = _weight(kv_heads * head_dim, hidden, dtype, gain=1.6)
        self.v_weight = _weight(kv_heads * head_dim, hidden, dtype)
        self.o_weight = _weight(hidden, self.heads * head_dim, dtype)
        self.mlp_norm = nn.Parameter((1.0 + 0.2 * torch.randn(hidden)).to(dtype))
        self.gate_weight = _weight(intermediate, hidden, dtype)
        self.up_weight = _weight(intermediate, hidden, dtype)
        self.down_weight = _weight(hidden, intermediate, dtype)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, hidden = x.shape
        n = F.rms_norm(x, (hidden,), self.attn_norm, self.eps)
        q = F.linear(n, self.q_weight).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = F.linear(n, self.k_weight).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = F.linear(n, self.v_weight).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        h = x + F.linear(o.transpose(1, 2).reshape(b, s, hidden), self.o_weight)
        m = F.rms_norm(h, (hidden,), self.mlp_norm, self.eps)
        return h + F.linear(F.silu(F.linear(m, self.gate_weight)) * F.linear(m, self.up_weight), self.down_weight)


def _rope_tables(seq: int, dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    freqs = torch.outer(torch.arange(seq, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def get_inputs():
    x = torch.randn(BATCH, SEQ, KV_HEADS * GQA_GROUP * HEAD_DIM).to(DTYPE)
    cos, sin = (t.to(DTYPE) for t in _rope_tables(SEQ, HEAD_DIM, ROPE_THETA))
    return [x, cos, sin]


def get_init_inputs():
    return [KV_HEADS, GQA_GROUP, HEAD_DIM, INTERMEDIATE, EPS, DTYPE]
