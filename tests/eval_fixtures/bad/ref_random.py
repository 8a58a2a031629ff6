"""Dropout in training mode: the reference itself is not repeatable, so nothing can be checked against it."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(x)


def get_inputs():
    return [torch.randn(32, 32)]


def get_init_inputs():
    return []
