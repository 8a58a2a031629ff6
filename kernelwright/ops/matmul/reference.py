"""matmul reference: C = A @ B for A [M, K] and B [K, N].

Work: 2*M*N*K flops. Memory: read A and B once, write C once; at least (M*K + K*N + M*N) elements moved, so a
matmul is compute-bound once M, N and K are all large (arithmetic intensity grows with the smallest of them) and
memory-bound when one is small (decoding: M = batch of tokens).
"""

import torch


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b


def error_scale(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``|A| @ |B|``: a correct fp32 accumulation of ``C[i, j]`` errs by a small multiple of this, however much its
    terms cancel."""
    return a.abs() @ b.abs()
