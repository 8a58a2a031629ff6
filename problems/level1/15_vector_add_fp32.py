"""Vector add in fp32: c = a + b, a and b [N] (128M elements, 512 MB each). Pure bandwidth: read 2N, write N.

kernelwright family: vector_add.
"""

import torch
import torch.nn as nn

N = 134217728
DTYPE = torch.float32


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b


def get_inputs():
    return [torch.randn(N).to(DTYPE), torch.randn(N).to(DTYPE)]


def get_init_inputs():
    return []
