"""swiglu reference: y = silu(gate) * up, silu(g) = g * sigmoid(g), elementwise.

Shapes: gate, up and y all [...] (any shape, the same). Memory: read 2N, write N (N = gate.numel()): at least
3N element moves; ~5 FLOP an element (exp, add, divide, two multiplies).
"""

import torch


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return gate * torch.sigmoid(gate) * up
