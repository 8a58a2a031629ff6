"""softmax backward reference: dx = y * (dy - sum(dy * y)) along ``dim``, y = softmax(x) (the forward's output).

Shapes: y, dy, dx all the same [..., D, ...]. Memory: read 2N, write N (N = y.numel()): the forward's input is not
needed, only its output.
"""

import torch


def softmax_bwd(y: torch.Tensor, dy: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return y * (dy - (dy * y).sum(dim, keepdim=True))


def error_scale(y: torch.Tensor, dy: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """dy - sum(dy * y) cancels where dy is near the row's weighted mean; its rounding error stays on the scale of
    |dy| + sum |dy * y| (the sum over up to D terms), times y."""
    return y.abs() * (dy.abs() + (dy * y).abs().sum(dim, keepdim=True))
