"""RMSNorm + fused QKV projection in bf16 (the start of a Llama-3-8B attention block): y = rms_norm(x) * g @ W^T,
x [TOKENS, HIDDEN], g [HIDDEN], W [OUT_FEATURES, HIDDEN] with OUT_FEATURES = (32 + 2 * 8) heads x 128. The norm
can ride in the matmul's prologue (one rstd per row).

kernelwright family: rms_norm + matmul.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 8192
HIDDEN = 4096
OUT_FEATURES = 6144
EPS = 1e-5
DTYPE = torch.bfloat16


class Model(nn.Module):
    def __init__(self, hidden: int, out_features: int, eps: float, dtype: torch.dtype):
        super().__init__()
        self.eps = eps
        self.norm_weight = nn.Parameter((1.0 + 0.5 * torch.randn(hidden)).to(dtype))
        self.weight = nn.Parameter((torch.randn(out_features, hidden) / hidden**0.5).to(dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.rms_norm(x, (x.shape[-1],), self.norm_weight, self.eps)
        return F.linear(h, self.weight)


def get_inputs():
    return [(torch.randn(TOKENS, HIDDEN) * 3).to(DTYPE)]


def get_init_inputs():
    return [HIDDEN, OUT_FEATURES, EPS, DTYPE]
