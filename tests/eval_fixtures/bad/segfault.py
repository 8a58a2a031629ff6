# for elementwise: an invalid memory access (SIGSEGV)
import ctypes

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        ctypes.string_at(0)
        return x
