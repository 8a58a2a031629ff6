# for elementwise: grows without bound
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.hoard = []

    def forward(self, x, y):
        while True:
            self.hoard.append(torch.ones(2**25))  # 128 MiB each, touched
