# problem: matmul_bias_relu; honest: computes in float64 and rounds once (more exact than eager)
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        w, b = self.linear.weight.double(), self.linear.bias.double()
        return torch.relu(x.double() @ w.t() + b).float()
