"""GPT-2 MLP sub-block in fp32: y = x + fc2(gelu_tanh(fc1(layer_norm(x)))), x [TOKENS, HIDDEN], fc1 [MLP_DIM,
HIDDEN] + bias, fc2 [HIDDEN, MLP_DIM] + bias (GPT-2 medium: 1024 -> 4096 -> 1024). Norm in a prologue, bias and
GELU and the residual in epilogues.

kernelwright family: layer_norm + matmul.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 8192
HIDDEN = 1024
MLP_DIM = 4096
EPS = 1e-5
DTYPE = torch.float32


class Model(nn.Module):
    def __init__(self, hidden: int, mlp_dim: int, eps: float, dtype: torch.dtype):
        super().__init__()
        self.eps = eps
        self.ln_weight = nn.Parameter((1.0 + 0.5 * torch.randn(hidden)).to(dtype))
        self.ln_bias = nn.Parameter((0.5 * torch.randn(hidden)).to(dtype))
        self.fc1_weight = nn.Parameter((torch.randn(mlp_dim, hidden) / hidden**0.5).to(dtype))
        self.fc1_bias = nn.Parameter((0.5 * torch.randn(mlp_dim)).to(dtype))
        self.fc2_weight = nn.Parameter((torch.randn(hidden, mlp_dim) / mlp_dim**0.5).to(dtype))
        self.fc2_bias = nn.Parameter((0.5 * torch.randn(hidden)).to(dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.layer_norm(x, (x.shape[-1],), self.ln_weight, self.ln_bias, self.eps)
        h = F.gelu(F.linear(h, self.fc1_weight, self.fc1_bias), approximate="tanh")
        return x + F.linear(h, self.fc2_weight, self.fc2_bias)


def get_inputs():
    return [torch.randn(TOKENS, HIDDEN).to(DTYPE)]


def get_init_inputs():
    return [HIDDEN, MLP_DIM, EPS, DTYPE]
