"""A tiny pre-norm MLP block written by hand, for the pattern tests: a hand-written RMSNorm
(x * rsqrt(mean(x^2) + eps) * w) of a residual sum, an nn.Linear gate/up pair through silu(g) * u written with
sigmoid, an nn.Linear down projection, a softmax over the result."""

import torch
import torch.nn as nn

TOKENS = 16
HIDDEN = 32
INTER = 48
EPS = 1e-6


class Model(nn.Module):
    def __init__(self, hidden: int, inter: int, eps: float):
        super().__init__()
        self.eps = eps
        self.norm_weight = nn.Parameter(1.0 + 0.5 * torch.randn(hidden))
        self.gate = nn.Linear(hidden, inter, bias=False)
        self.up = nn.Linear(hidden, inter, bias=False)
        self.down = nn.Linear(inter, hidden)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        h = x + residual
        n = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps) * self.norm_weight
        g = self.gate(n)
        m = g * torch.sigmoid(g) * self.up(n)
        return torch.softmax(h + self.down(m), dim=-1)


def get_inputs():
    return [torch.randn(TOKENS, HIDDEN), torch.randn(TOKENS, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, INTER, EPS]
