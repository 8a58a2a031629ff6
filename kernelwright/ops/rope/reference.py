"""rope reference: rotary position embedding of q and k, as Hugging Face Llama's ``apply_rotary_pos_emb``.

Layouts (``qk_layout``): ``"bhsd"`` q [..., H, S, D], k [..., KH, S, D] (Hugging Face); ``"bshd"`` q [..., S, H, D],
k [..., S, KH, D] (flash-attn, vLLM). Angles: ``cos``/``sin`` [..., S', Dc] broadcast over the batch dims (row s
for position s, S' >= S), or, with ``positions`` [..., S] (ints), tables [T, Dc] indexed by position. Dc is D (one
angle per element, Hugging Face's ``cat(freqs, freqs)``) or D/2 (one per pair).

Pairs: half-split (``rotate_half``) pairs element i with i + D/2; interleaved pairs 2i with 2i + 1. For a pair
(x1, x2) with angles (c1, s1) at x1's slot and (c2, s2) at x2's: y1 = x1 c1 - x2 s1, y2 = x2 c2 + x1 s2, which is
``x * cos + rotate_half(x) * sin`` elementwise. Memory: read q, k, write q, k ((H + KH) * B * S * D elements each
way) plus one cos and one sin row per token.
"""

import torch


def angles(cos, sin, positions, lead: tuple, seq: int, head_dim: int, interleaved: bool):
    """cos and sin as [*lead, S, 1, D] (one value per element, broadcast over heads)."""
    if positions is not None:
        idx = positions.expand(*lead, seq).long()
        c, s = cos[idx], sin[idx]
    else:
        c, s = cos[..., :seq, :], sin[..., :seq, :]
    if c.shape[-1] != head_dim:  # one angle per pair: give both elements of the pair the same value
        widen = (lambda t: t.repeat_interleave(2, -1)) if interleaved else (lambda t: torch.cat((t, t), -1))
        c, s = widen(c), widen(s)
    return c.unsqueeze(-2), s.unsqueeze(-2)


def rotate(x, c, s, interleaved: bool):
    """x [..., S, H, D] rotated by angles c, s [..., S, 1, D]."""
    if interleaved:
        x1, x2 = x[..., 0::2], x[..., 1::2]
        partner = torch.stack((-x2, x1), -1).flatten(-2)
    else:
        x1, x2 = x.chunk(2, -1)
        partner = torch.cat((-x2, x1), -1)
    return x * c + partner * s


def rope(q, k, cos, sin, positions=None, interleaved=False, qk_layout="bhsd"):
    bhsd = qk_layout == "bhsd"
    qs = q.transpose(-3, -2) if bhsd else q  # [..., S, H, D]
    ks = k.transpose(-3, -2) if bhsd else k
    c, s = angles(cos, sin, positions, tuple(qs.shape[:-3]), qs.shape[-3], qs.shape[-1], interleaved)
    qo, ko = rotate(qs, c, s, interleaved), rotate(ks, c, s, interleaved)
    return (qo.transpose(-3, -2), ko.transpose(-3, -2)) if bhsd else (qo, ko)


def error_scale(q, k, cos, sin, positions=None, interleaved=False, qk_layout="bhsd"):
    """Per-element magnitude of the fp32 rounding error: ``y1 = x1 c1 - x2 s1`` cancels, but its error stays on
    the scale of ``|x1| + |x2|`` (``|cos|, |sin| <= 1``). Used by the backward too (the same pairs)."""
    def pair_sum(x):
        a = x.abs()
        if interleaved:
            return (a[..., 0::2] + a[..., 1::2]).repeat_interleave(2, -1)
        a1, a2 = a.chunk(2, -1)
        return torch.cat((a1 + a2, a1 + a2), -1)

    return pair_sum(q), pair_sum(k)
