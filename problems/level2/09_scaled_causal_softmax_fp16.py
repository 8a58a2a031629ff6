"""Scale + causal mask + softmax in fp16 (unfused attention's middle step, Megatron's
scaled_upper_triang_masked_softmax): p = softmax(scores * SCALE with j > i set to -inf), scores [BATCH, HEADS, SEQ,
SEQ]. Scores have standard deviation 16 (raw q.k over a head dim of 128), so p is peaked. Memory-bound.

kernelwright family: softmax (with a scale and a causal mask; no rung takes them yet).
"""

import torch
import torch.nn as nn

BATCH = 2
HEADS = 32
SEQ = 2048
SCALE = 0.08838834764831845  # 1 / sqrt(128)
DTYPE = torch.float16


class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        s = scores.shape[-1]
        future = scores.new_ones((s, s), dtype=torch.bool).triu(1)  # j > i
        return torch.softmax((scores * self.scale).masked_fill(future, float("-inf")), dim=-1)


def get_inputs():
    return [(torch.randn(BATCH, HEADS, SEQ, SEQ) * 16).to(DTYPE)]


def get_init_inputs():
    return [SCALE]
