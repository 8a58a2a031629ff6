# for elementwise: the process ends in the middle of a call
import os

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        os._exit(3)
