"""activation reference: y = act(x), elementwise, for ``kind`` in :data:`KINDS`.

silu(x) = x * sigmoid(x); gelu(x) = x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)); gelu_tanh (GPT-2's approximation,
``F.gelu(approximate="tanh")``) = 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))); relu(x) = max(x, 0).
Memory: read N, write N elements; a few FLOP an element.
"""

import math

import torch

KINDS = ("silu", "gelu", "gelu_tanh", "relu")


def activation(x: torch.Tensor, kind: str = "silu") -> torch.Tensor:
    if kind == "silu":
        return x * torch.sigmoid(x)
    if kind == "gelu":  # Phi(x) = erfc(-x / sqrt 2) / 2: 1 + erf(x / sqrt 2) cancels to 0 in float64 below x ~ -8.5
        return 0.5 * x * torch.erfc(-x / math.sqrt(2.0))
    if kind == "gelu_tanh":
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    if kind == "relu":
        return torch.relu(x)
    raise ValueError(f"kind: expected one of {', '.join(KINDS)}, got {kind!r}")
