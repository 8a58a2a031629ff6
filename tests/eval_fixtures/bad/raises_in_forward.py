# for elementwise: compiles nothing, fails at launch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        raise ValueError("triton.CompilationError: shared memory exceeded")
