import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, y):
        return x * 2.0 + y
