"""Rotary position embedding for models: a drop-in for Hugging Face's ``apply_rotary_pos_emb`` and a module that
owns its angle tables. Both run :func:`kernelwright.ops.rope` (forward and backward in Triton kernels)."""

from __future__ import annotations

import torch

from kernelwright.errors import UsageError
from kernelwright.ops.rope.api import rope


def apply_rotary_pos_emb(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                         position_ids: torch.Tensor | None = None, unsqueeze_dim: int = 1):
    """Hugging Face's ``apply_rotary_pos_emb`` (Llama, Mistral, Qwen2, ...) with the same arguments and results.

    Parameters
    ----------
    q, k : torch.Tensor
        ``[batch, heads, seq, head_dim]`` with ``unsqueeze_dim=1`` (Hugging Face's attention layout), or
        ``[batch, seq, heads, head_dim]`` with ``unsqueeze_dim=2``; k may have fewer heads.
    cos, sin : torch.Tensor
        ``[batch or 1, seq, head_dim]`` from the model's rotary embedding (half-split layout: ``cat(freqs,
        freqs)``), q's dtype or float32.
    position_ids : torch.Tensor, optional
        Ignored, as in transformers (cos and sin are already per token).
    unsqueeze_dim : int
        1 or 2, as in transformers: where cos and sin broadcast over the heads.

    Returns
    -------
    tuple of torch.Tensor
        (q_embed, k_embed) in q's dtype (transformers promotes to float32 when cos is float32; here the result
        stays in q's dtype, computed in fp32).
    """
    if unsqueeze_dim not in (1, 2):
        raise UsageError(f"unsqueeze_dim: expected 1 ([B, H, S, D]) or 2 ([B, S, H, D]), got {unsqueeze_dim!r}")
    return rope(q, k, cos, sin, qk_layout="bhsd" if unsqueeze_dim == 1 else "bshd")


class RotaryEmbedding(torch.nn.Module):
    """Applies rotary embeddings with its own float32 angle tables (one angle a pair, ``base ** (-2i / D)``).

    ``forward(q, k, positions=None)``: without positions, token s of the sequence takes position s; with
    ``positions`` (int ``[..., S]``), each token its own row of the tables (packed sequences, decoding with a
    cache). Layouts as :func:`kernelwright.ops.rope`.
    """

    def __init__(self, head_dim: int, max_positions: int, base: float = 10000.0, interleaved: bool = False,
                 qk_layout: str = "bhsd"):
        super().__init__()
        if head_dim % 2 or head_dim <= 0:
            raise UsageError(f"head_dim: expected a positive even number, got {head_dim!r}")
        inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        freqs = torch.arange(max_positions, dtype=torch.float64)[:, None] * inv_freq  # [T, D/2]
        self.register_buffer("cos", freqs.cos().float(), persistent=False)
        self.register_buffer("sin", freqs.sin().float(), persistent=False)
        self.interleaved, self.qk_layout = interleaved, qk_layout

    def forward(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor | None = None):
        return rope(q, k, self.cos, self.sin, positions, self.interleaved, qk_layout=self.qk_layout)

    def extra_repr(self) -> str:
        return (f"head_dim={2 * self.cos.shape[1]}, max_positions={self.cos.shape[0]}, "
                f"interleaved={self.interleaved}, qk_layout={self.qk_layout!r}")
