"""Tall matmul in fp16: Y = X @ W, X [TOKENS, HIDDEN] (a 16k-token prefill), W [HIDDEN, OUT_FEATURES] (a
grouped-query K projection: 8 KV heads x 128). Compute-bound but with a narrow N.

kernelwright family: matmul.
"""

import torch
import torch.nn as nn

TOKENS = 16384
HIDDEN = 4096
OUT_FEATURES = 1024
DTYPE = torch.float16


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.matmul(x, w)


def get_inputs():
    x = torch.randn(TOKENS, HIDDEN).to(DTYPE)
    w = (torch.randn(HIDDEN, OUT_FEATURES) / HIDDEN**0.5).to(DTYPE)
    return [x, w]


def get_init_inputs():
    return []
