# problem: elementwise; honest: "compiles" (sleeps 0.6 s) on its first call at each input shape, as torch.compile
# re-traces and an autotuner re-tunes at a new size; both belong to the candidate's compile time, not to overhead
import time

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.seen = set()

    def forward(self, x, y):
        if tuple(x.shape) not in self.seen:
            time.sleep(0.6)
            self.seen.add(tuple(x.shape))
        return x * 2.0 + y
