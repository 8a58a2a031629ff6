"""vector_add reference: z = x + y, elementwise.

Shapes: x, y, z all [N] (any shape works; the kernels flatten). Memory: read 2N elements, write N.
"""

import torch


def vector_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y
