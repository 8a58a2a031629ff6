"""Per-token cross-entropy over a 128k vocabulary (Llama 3's 128256): loss_i = logsumexp(x_i) - x_i[t_i],
logits [TOKENS, VOCAB] in bf16 upcast to fp32 as Hugging Face does, targets [TOKENS] int64 with about 10% set to
the ignore index -100 (padding; loss 0). Memory-bound: the logits are read once (1 GB); a fused kernel never
materialises the fp32 copy.

kernelwright family: cross_entropy (reduction="none").
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 4096
VOCAB = 128256
IGNORE_INDEX = -100
DTYPE = torch.bfloat16


class Model(nn.Module):
    def __init__(self, ignore_index: int):
        super().__init__()
        self.ignore_index = ignore_index

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.float(), target, ignore_index=self.ignore_index, reduction="none")


def get_inputs():
    logits = (torch.randn(TOKENS, VOCAB) * 2).to(DTYPE)
    target = torch.randint(0, VOCAB, (TOKENS,))
    target = torch.where(torch.rand(TOKENS) < 0.1, IGNORE_INDEX, target)
    return [logits, target]


def get_init_inputs():
    return [IGNORE_INDEX]
