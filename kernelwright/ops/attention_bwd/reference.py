"""Attention backward reference: (dq, dk, dv) of ``o = softmax(scale * q k^T + mask) v`` by the explicit formulas,
in the inputs' dtype (float64 when the harness checks), one sequence and one block of query rows at a time.

Shapes (legend: B batch, Hq query heads, Hkv key/value heads (Hq a multiple of Hkv: GQA, query head h reads
kv head h // (Hq / Hkv)), Sq/Skv query/key lengths, D head dim, Tq/Tk packed token counts):

* padded: q, o, do [B, Hq, Sq, D]; k, v [B, Hkv, Skv, D]; lse [B, Hq, Sq]
* varlen: q, o, do [Tq, Hq, D]; k, v [Tk, Hkv, D]; lse [Hq, Tq]; sequence b is rows
  cu_seqlens_q[b]:cu_seqlens_q[b+1] of q and cu_seqlens_k[b]:cu_seqlens_k[b+1] of k and v

Causal masking is aligned bottom-right: query i of a sequence attends key j when j <= i + Skv - Sq, so a query
row with i < Sq - Skv attends nothing (its output is 0, its lse -inf, its gradients 0).

With P = softmax(S) (S = scale * q k^T, masked), dP = dO v^T and delta_i = sum_j P_ij dP_ij (= rowsum(dO * O)):

    dS = P * (dP - delta),  dq = scale * dS k,  dk = scale * dS^T q,  dv = P^T dO   (dk, dv summed over a group)

Work: 5 matmuls over the attended (i, j) pairs, 2 * D flops a pair each (the FA convention: recomputing S, then
dv, dP, dq, dk). Memory, at least: read q, k, v, o, do and lse, write dq, dk, dv.

``lse`` is not used (P is recomputed exactly from q and k); ``o`` is, for delta = rowsum(dO * o), as in every
flash backward: this is the flash backward's formula given the forward's saved o. It is the exact gradient when o
is exact; with o rounded to fp16/bf16 it differs from it where dS cancels (dP_ij close to delta_i, a peaky softmax)
by o's rounding, which no backward kernel that reads o can undo, and which the family's tolerances therefore do
not have to absorb. tests/test_attention_bwd.py compares the kernels with exact float64 autograd as well, allowing
for that rounding.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch

_CHUNK_ELEMENTS = 1 << 25
"""score elements (heads x query rows x keys) a block of query rows may hold at once: a few of these are live
(S, P, dP, dS), 256 MB each in float64, so full-size GPU benchmarks need no O(S^2) buffer"""


def _sequences(q, k, v, o, do, cu_seqlens_q, cu_seqlens_k) -> Iterator[tuple]:
    """Per sequence: (index into q-shaped tensors, index into k-shaped ones, then q, k, v, o, do as [H, S, D]
    views)."""
    if cu_seqlens_q is None:
        for b in range(q.shape[0]):
            yield (b,), (b,), q[b], k[b], v[b], o[b], do[b]
        return
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for b in range(len(cq) - 1):
        sq, sk = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        yield ((sq,), (sk,), q[sq].transpose(0, 1), k[sk].transpose(0, 1), v[sk].transpose(0, 1),
               o[sq].transpose(0, 1), do[sq].transpose(0, 1))


def causal_keep(sq: int, sk: int, device, rows: slice | None = None) -> torch.Tensor:
    """[rows, sk] bool: query i (of sq) attends key j (of sk) when j <= i + sk - sq (bottom-right alignment)."""
    i = torch.arange(sq, device=device)[rows if rows is not None else slice(None)]
    j = torch.arange(sk, device=device)
    return j[None, :] <= i[:, None] + (sk - sq)


def _probabilities(qc, k, scale, causal, sq, sk, rows):
    """P [H, c, sk] for the query rows ``rows`` (qc [H, c, D], k [H, sk, D] already expanded to H heads); fully
    masked rows are all zero."""
    s = scale * (qc @ k.transpose(-1, -2))
    if causal:
        keep = causal_keep(sq, sk, s.device, rows)
        s = s.masked_fill(~keep, -math.inf)
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(s - m)
    z = e.sum(-1, keepdim=True)
    return e / torch.where(z > 0, z, torch.ones_like(z))


def _per_block(block_fn, q, k, v, o, do, causal, scale, cu_seqlens_q, cu_seqlens_k):
    """Outputs like (q, k, v) from ``block_fn(p, qc, ke, ve, oc, doc, scale)`` run on every sequence a block of
    query rows at a time (p = P [Hq, c, sk] of those rows; ke, ve the kv heads expanded to Hq): its first result
    [Hq, c, D] is written to those rows, its second and third [Hq, sk, D] are summed over the blocks and over each
    GQA group."""
    varlen = cu_seqlens_q is not None
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    out_q, out_k, out_v = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for iq, ik, qs, ks, vs, os_, dos in _sequences(q, k, v, o, do, cu_seqlens_q, cu_seqlens_k):
        hq, sq, _ = qs.shape
        hkv, sk, d = ks.shape
        if sq == 0 or sk == 0:
            continue  # nothing attended: zero gradients
        group = hq // hkv
        ke, ve = ks.repeat_interleave(group, 0), vs.repeat_interleave(group, 0)  # [Hq, sk, D]
        rq = torch.zeros_like(qs)
        rk = torch.zeros((hq, sk, d), dtype=ks.dtype, device=ks.device)
        rv = torch.zeros((hq, sk, vs.shape[-1]), dtype=vs.dtype, device=vs.device)
        step = max(1, _CHUNK_ELEMENTS // (hq * sk))
        for r0 in range(0, sq, step):
            rows = slice(r0, min(sq, r0 + step))
            p = _probabilities(qs[:, rows], ke, scale, causal, sq, sk, rows)
            bq, bk, bv = block_fn(p, qs[:, rows], ke, ve, os_[:, rows], dos[:, rows], scale)
            rq[:, rows] = bq
            rk += bk
            rv += bv
        for out, index, r in ((out_q, iq, rq), (out_k, ik, rk.view(hkv, group, sk, d).sum(1)),
                              (out_v, ik, rv.view(hkv, group, sk, -1).sum(1))):
            (out[index].transpose(0, 1) if varlen else out[index]).copy_(r)
    return out_q, out_k, out_v


def _gradient_block(p, qc, ke, ve, oc, doc, scale):
    dp = doc @ ve.transpose(-1, -2)                                  # dP = dO v^T
    ds = p * (dp - (doc * oc).sum(-1, keepdim=True))                 # delta = rowsum(dO * o)
    return scale * (ds @ ke), scale * (ds.transpose(-1, -2) @ qc), p.transpose(-1, -2) @ doc


def attention_bwd(q, k, v, o, lse, do, causal: bool = False, scale: float | None = None, cu_seqlens_q=None,
                  cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None):
    """(dq, dk, dv) like (q, k, v); see the module docstring for shapes. ``lse`` and the max lengths are not
    used."""
    return _per_block(_gradient_block, q, k, v, o, do, causal, scale, cu_seqlens_q, cu_seqlens_k)


def _scale_block(p, qc, ke, ve, oc, doc, scale):
    doa = doc.abs()
    m = p * (doa @ ve.abs().transpose(-1, -2) + (doa * oc.abs()).sum(-1, keepdim=True))
    return scale * (m @ ke.abs()), scale * (m.transpose(-1, -2) @ qc.abs()), p.transpose(-1, -2) @ doa


def error_scale(q, k, v, o, lse, do, causal: bool = False, scale: float | None = None, cu_seqlens_q=None,
                cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None):
    """Per output, the magnitude a kernel's rounding errors scale with (float64 inputs): with
    M = P * (|dO| |v|^T + rowsum(|dO| * |o|)), the magnitude of dS's terms (dP accumulates |dO||v| terms; delta
    accumulates |dO||o| terms; dS itself is rounded to the input dtype before its matmuls):

        dq: scale * M |k|,   dk: scale * M^T |q| (summed over a group),   dv: P^T |dO| (P rounded before it)

    A product of rounded factors errs in proportion to these sums of magnitudes even where dq or dk cancel to
    near zero."""
    return _per_block(_scale_block, q, k, v, o, do, causal, scale, cu_seqlens_q, cu_seqlens_k)
