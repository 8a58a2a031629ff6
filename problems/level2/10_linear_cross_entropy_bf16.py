"""LM head + per-token cross-entropy in bf16 (Liger's fused linear cross-entropy): logits = h @ W^T, loss_i =
cross_entropy(logits_i.float(), t_i), h [TOKENS, HIDDEN], W [VOCAB, HIDDEN] (Llama-2/Mistral 32k vocab), targets
[TOKENS] with about 10% ignored (-100). A fused kernel never materialises the [TOKENS, VOCAB] logits.

kernelwright family: matmul + cross_entropy.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 4096
HIDDEN = 4096
VOCAB = 32000
IGNORE_INDEX = -100
DTYPE = torch.bfloat16


class Model(nn.Module):
    def __init__(self, hidden: int, vocab: int, ignore_index: int, dtype: torch.dtype):
        super().__init__()
        self.ignore_index = ignore_index
        self.lm_head = nn.Parameter((torch.randn(vocab, hidden) * (2 / hidden**0.5)).to(dtype))

    def forward(self, hidden: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        logits = F.linear(hidden, self.lm_head)
        return F.cross_entropy(logits.float(), target, ignore_index=self.ignore_index, reduction="none")


def get_inputs():
    hidden = torch.randn(TOKENS, HIDDEN).to(DTYPE)
    target = torch.randint(0, VOCAB, (TOKENS,))
    target = torch.where(torch.rand(TOKENS) < 0.1, IGNORE_INDEX, target)
    return [hidden, target]


def get_init_inputs():
    return [HIDDEN, VOCAB, IGNORE_INDEX, DTYPE]
