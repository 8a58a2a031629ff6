"""Llama MLP in bf16: y = down(silu(gate(x)) * up(x)), x [TOKENS, HIDDEN], gate and up [INTERMEDIATE, HIDDEN],
down [HIDDEN, INTERMEDIATE], no biases (Llama-3-8B sizes). Three matmuls; the SwiGLU can live in the epilogue of
a fused gate/up matmul.

kernelwright family: matmul + swiglu.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 4096
HIDDEN = 4096
INTERMEDIATE = 14336
DTYPE = torch.bfloat16


def _weight(out_features: int, in_features: int, dtype: torch.dtype) -> nn.Parameter:
    return nn.Parameter((torch.randn(out_features, in_features) / in_features**0.5).to(dtype))


class Model(nn.Module):
    def __init__(self, hidden: int, intermediate: int, dtype: torch.dtype):
        super().__init__()
        self.gate_weight = _weight(intermediate, hidden, dtype)
        self.up_weight = _weight(intermediate, hidden, dtype)
        self.down_weight = _weight(hidden, intermediate, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.silu(F.linear(x, self.gate_weight)) * F.linear(x, self.up_weight)
        return F.linear(h, self.down_weight)


def get_inputs():
    return [torch.randn(TOKENS, HIDDEN).to(DTYPE)]


def get_init_inputs():
    return [HIDDEN, INTERMEDIATE, DTYPE]
