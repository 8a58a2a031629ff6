"""Output projection + residual add in bf16 (the end of a Llama attention or MLP block): y = residual + x @ W^T,
x [TOKENS, IN_FEATURES], W [HIDDEN, IN_FEATURES], residual [TOKENS, HIDDEN]. The add belongs in the matmul's
epilogue (read the residual tile, write once).

kernelwright family: matmul (+ an epilogue).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 8192
IN_FEATURES = 4096
HIDDEN = 4096
DTYPE = torch.bfloat16


class Model(nn.Module):
    def __init__(self, in_features: int, hidden: int, dtype: torch.dtype):
        super().__init__()
        self.weight = nn.Parameter((torch.randn(hidden, in_features) / in_features**0.5).to(dtype))

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return residual + F.linear(x, self.weight)


def get_inputs():
    x = torch.randn(TOKENS, IN_FEATURES).to(DTYPE)
    residual = (torch.randn(TOKENS, HIDDEN) * 2).to(DTYPE)
    return [x, residual]


def get_init_inputs():
    return [IN_FEATURES, HIDDEN, DTYPE]
