"""Log-softmax over a vocabulary in fp32: Y = log_softmax(X, dim=-1), X [TOKENS, VOCAB] (Llama-2's 32k vocab).
Memory-bound; a softmax variant without a backward pass.

kernelwright family: softmax (nearest; cross_entropy computes the same log-sum-exp).
"""

import torch
import torch.nn as nn

TOKENS = 4096
VOCAB = 32000
DTYPE = torch.float32


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(logits, dim=-1)


def get_inputs():
    return [(torch.randn(TOKENS, VOCAB) * 2).to(DTYPE)]


def get_init_inputs():
    return []
