"""swiglu backward reference: gradients of y = silu(gate) * up for an incoming gradient dy.

    dup   = dy * silu(gate)                                        silu(g) = g * s, s = sigmoid(g)
    dgate = dy * up * silu'(gate),  silu'(g) = s * (1 + g * (1 - s))

Shapes: gate, up, dy, dgate, dup all [...] (the same). Memory: read 3N, write 2N (N = gate.numel()). The forward
output is not needed: sigmoid(gate) is recomputed, which costs no memory traffic.
"""

import torch


def swiglu_bwd(gate: torch.Tensor, up: torch.Tensor, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    s = torch.sigmoid(gate)
    return dy * up * s * (1 + gate * (1 - s)), dy * gate * s


def error_scale(gate: torch.Tensor, up: torch.Tensor, dy: torch.Tensor) -> tuple[torch.Tensor, None]:
    """Per-element magnitude of the fp32 rounding error of dgate: ``1 + g (1 - s)`` cancels near g = -1.278 (the
    minimum of silu), where dgate -> 0 but the rounding error of its terms does not. dup has no cancellation."""
    s = torch.sigmoid(gate)
    return (dy * up).abs() * s * (1 + gate.abs() * (1 - s)), None
