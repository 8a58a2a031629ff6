"""attention reference: o = softmax(scale * q @ k^T + mask) @ v, with the log-sum-exp of each row.

Shapes (padded): q [B, Hq, Sq, D], k and v [B, Hkv, Skv, D] -> o [B, Hq, Sq, D], lse [B, Hq, Sq]. Varlen: q
[total_q, Hq, D], k and v [total_k, Hkv, D], sequence b at rows cu[b]:cu[b + 1] -> o [total_q, Hq, D], lse
[Hq, total_q]. Query head h reads kv head h // (Hq / Hkv) (GQA). Causal: query i attends to keys
j <= i + Lk - Lq (bottom right); a row with no key gets o = 0 and lse = -inf.

Work: 4 * D flops per attended (query, key) pair (two matmuls). Memory: read q, k, v once and write o (and lse):
(2 * total_q * Hq + 2 * total_k * Hkv) * D elements. The eager formula below also writes and reads the
[Hq, Lq, Lk] score matrix, which is what the flash rungs avoid; here it is computed a block of query rows at a
time so that a float64 check of a 16k-token sequence fits in memory.
"""

from __future__ import annotations

import math

import torch

_CHUNK_BYTES = 256 * 2**20  # float64 scores per block of query rows


def _attend(q, k, v, causal: bool, scale: float, want_scale: bool = False):
    """One sequence: q [Hq, Lq, D], k and v [Hkv, Lk, D] -> o [Hq, Lq, D], lse [Hq, Lq] (and P @ |v|)."""
    hq, lq, d = q.shape
    hkv, lk, _ = k.shape
    o = torch.zeros((hq, lq, d), dtype=q.dtype, device=q.device)
    lse = torch.full((hq, lq), float("-inf"), dtype=q.dtype, device=q.device)
    err = torch.zeros_like(o) if want_scale else None
    if lq == 0 or lk == 0:
        return o, lse, err
    group = hq // hkv
    k = k.repeat_interleave(group, 0)  # [Hq, Lk, D]
    v = v.repeat_interleave(group, 0)
    rows = max(1, _CHUNK_BYTES // (hq * lk * q.element_size()))
    for r0 in range(0, lq, rows):
        r1 = min(lq, r0 + rows)
        s = scale * (q[:, r0:r1] @ k.mT)  # [Hq, rows, Lk]
        if causal:
            i = torch.arange(r0, r1, device=q.device)[:, None]
            j = torch.arange(lk, device=q.device)[None, :]
            s = s.masked_fill(j > i + (lk - lq), float("-inf"))
        m = torch.logsumexp(s, -1)  # -inf where the row attends to nothing
        p = torch.exp(s - m[..., None]).nan_to_num(0.0)  # (-inf) - (-inf) = NaN on empty rows: no weight
        o[:, r0:r1] = p @ v
        lse[:, r0:r1] = m
        if want_scale:
            err[:, r0:r1] = p @ v.abs()
    return o, lse, err


def _run(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, scale, want_scale):
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    if cu_seqlens_q is None:  # padded [B, H, S, D]
        outs = [_attend(q[b], k[b], v[b], causal, scale, want_scale) for b in range(q.shape[0])]
        if not outs:
            empty = q.new_zeros(q.shape)
            return empty, q.new_zeros(q.shape[:3]), empty
        o = torch.stack([x[0] for x in outs])
        lse = torch.stack([x[1] for x in outs])
        err = torch.stack([x[2] for x in outs]) if want_scale else None
        return o, lse, err
    # varlen [total, H, D]
    o = q.new_zeros(q.shape)
    lse = q.new_full((q.shape[1], q.shape[0]), float("-inf"))
    err = q.new_zeros(q.shape) if want_scale else None
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for b in range(len(cq) - 1):
        qs, ks = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        ob, lb, eb = _attend(q[qs].transpose(0, 1), k[ks].transpose(0, 1), v[ks].transpose(0, 1), causal, scale,
                             want_scale)
        o[qs] = ob.transpose(0, 1)
        lse[:, qs] = lb
        if want_scale:
            err[qs] = eb.transpose(0, 1)
    return o, lse, err


def attention_with_lse(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, *, causal=False, scale=None,
                       max_seqlen_q=None, max_seqlen_k=None):
    """(o, lse) in q's dtype (run it on float64 inputs for a check); lse in natural log."""
    o, lse, _ = _run(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, scale, False)
    return o, lse


def attention(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, *, causal=False, scale=None, max_seqlen_q=None,
              max_seqlen_k=None):
    """o only: the family's output."""
    return _run(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, scale, False)[0]


def error_scale(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, *, causal=False, scale=None, max_seqlen_q=None,
                max_seqlen_k=None):
    """``P @ |V|`` (P the exact attention weights): rounding each weight relatively (to bf16 before the second
    matmul, or by an error in its score) errs o by a multiple of this, however much the terms of o cancel."""
    return _run(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, scale, True)[2]
