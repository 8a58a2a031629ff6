"""A GPT-2-medium-style decoder block in fp32 (pre-norm, biases, learned positions not included):

    h = x + out_proj(attention(split_heads(qkv_proj(layer_norm(x))), causal))
    y = h + fc2(gelu_tanh(fc1(layer_norm(h))))

x [BATCH, SEQ, HIDDEN] with HIDDEN = HEADS * HEAD_DIM (1024 = 16 heads of 64), MLP 4 * HIDDEN. Weights are
unit-gain (1/sqrt(fan_in)), the fused QKV projection scaled by 1.6 so that attention is peaked.

kernelwright families: layer_norm, matmul, attention (being added).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 8
SEQ = 1024
HEADS = 16
HEAD_DIM = 64
EPS = 1e-5
DTYPE = torch.float32


def _linear(out_features: int, in_features: int, dtype: torch.dtype, gain: float = 1.0):
    w = nn.Parameter((torch.randn(out_features, in_features) * (gain / in_features**0.5)).to(dtype))
    b = nn.Parameter((0.2 * torch.randn(out_features)).to(dtype))
    return w, b


def _norm(hidden: int, dtype: torch.dtype):
    return (nn.Parameter((1.0 + 0.2 * torch.randn(hidden)).to(dtype)),
            nn.Parameter((0.2 * torch.randn(hidden)).to(dtype)))


class Model(nn.Module):
    def __init__(self, heads: int, head_dim: int, eps: float, dtype: torch.dtype):
        super().__init__()
        self.heads, self.head_dim, self.eps = heads, head_dim, eps
        hidden = heads * head_dim
        self.ln1_weight, self.ln1_bias = _norm(hidden, dtype)
        self.qkv_weight, self.qkv_bias = _linear(3 * hidden, hidden, dtype, gain=1.6)
        self.out_weight, self.out_bias = _linear(hidden, hidden, dtype)
        self.ln2_weight, self.ln2_bias = _norm(hidden, dtype)
        self.fc1_weight, self.fc1_bias = _linear(4 * hidden, hidden, dtype)
        self.fc2_weight, self.fc2_bias = _linear(hidden, 4 * hidden, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, hidden = x.shape
        n = F.layer_norm(x, (hidden,), self.ln1_weight, self.ln1_bias, self.eps)
        qkv = F.linear(n, self.qkv_weight, self.qkv_bias).view(b, s, 3, self.heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each [B, H, S, D]
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = x + F.linear(o.transpose(1, 2).reshape(b, s, hidden), self.out_weight, self.out_bias)
        m = F.layer_norm(h, (hidden,), self.ln2_weight, self.ln2_bias, self.eps)
        m = F.gelu(F.linear(m, self.fc1_weight, self.fc1_bias), approximate="tanh")
        return h + F.linear(m, self.fc2_weight, self.fc2_bias)


def get_inputs():
    return [torch.randn(BATCH, SEQ, HEADS * HEAD_DIM).to(DTYPE)]


def get_init_inputs():
    return [HEADS, HEAD_DIM, EPS, DTYPE]
