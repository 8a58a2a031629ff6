# problem: softmax; honest: exp(x - logsumexp(x)), other rounding than torch.softmax
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.exp(x - torch.logsumexp(x, dim=-1, keepdim=True))
