"""attention forward for decoding: ``split_kv``, the key range split over programs (flash-decoding).

At decode time a sequence has one (or a few) new query rows and a long key/value cache. The flash rungs give each
program a tile of query rows of one head (128, shrunk to 16 for a single row) and stream every key through it: with
one real row in the tile, there is one program per (batch, query head), too few to keep the GPU's memory busy, each
reading its kv head's whole cache, and GQA's query heads each reading the same cache again (H200 run 43, l1/20: 32 x
32 heads over 8 kv heads, 4096 keys, fp16: our flash rungs at 0.38-0.47x eager SDPA). Two changes, as in flash-
decoding (Dao, Haziza, Massa, Sizov, 2023, https://crfm.stanford.edu/2023/10/12/flashdecoding.html) and its GQA
packing:

* the query rows of the ``group`` heads that share a kv head form one tile (``group x Sq`` rows, head-major), so
  the cache is read once per kv head, not once per query head;
* the keys are split into ``splits`` ranges, one program each; each writes its rows' partial output (normalised
  by its own sum, fp32) and partial log-sum-exp (log2 units); a second, small kernel merges the ranges per row:
  lse = log2(sum_s 2^lse_s), o = sum_s 2^(lse_s - lse) o_s.

Any shape the family takes runs here (padded or varlen, causal bottom-right, Sq > 1), but only rows-per-kv-head
``group x Sq`` up to a few tiles are what it is for. Scores are in the exp2 domain with the scale folded in, the
running output rescaled every tile (the exp2 rung's softmax). Rows that see no key get o = 0 and lse = -inf.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernelwright import runtime
from kernelwright.ops._triton_helpers import to_output
from kernelwright.ops.attention.triton import (
    _LN2,
    LOG2E,
    _precision,
    _problem,
    _scratch_lse,
    _sequence,
    _trivial,
    _upcast,
    block_d,
)

PROGRAMS_PER_SM = 4
"""split count target: about this many partial programs per SM (``split_count``); a prediction, not yet tuned"""
MIN_KEYS_PER_SPLIT = 256
"""a split shorter than this costs more in its partial row and the merge than it saves (GPU only)"""


@triton.jit
def _decode_rows(rows, len_q):
    """(head in the group, query row) of tile rows laid out head-major: row r is head r // Lq, query r % Lq."""
    lq = tl.maximum(len_q, 1)
    return rows // lq, rows % lq


@triton.jit
def _split_partial_kernel(q_ptr, k_ptr, v_ptr, po_ptr, pl_ptr, cu_q_ptr, cu_k_ptr, seqlen_q, seqlen_k, n_kv_heads,
                          group, qk_scale, keys_per_split, sqb, sqh, sqs, sqd, skb, skh, sks, skd, svb, svh, svs, svd,
                          spb, sps, spm, plb, pls,
                          HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
                          BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, VARLEN: tl.constexpr, UPCAST: tl.constexpr,
                          PRECISION: tl.constexpr):
    """One program per (batch x kv head, key range, tile of the group's query rows): the online softmax over its
    keys only; writes the rows' partial o (divided by the range's own sum) and lse (log2 units, -inf where the
    range holds no key a row sees). Partials are [B * Hkv, splits, rows, BD] and [B * Hkv, splits, rows] fp32."""
    bhk = tl.program_id(0)
    split = tl.program_id(1)
    pid_m = tl.program_id(2)
    b = bhk // n_kv_heads
    hk = bhk % n_kv_heads
    q0, len_q = _sequence(cu_q_ptr, b, seqlen_q, VARLEN)
    k0, len_k = _sequence(cu_k_ptr, b, seqlen_k, VARLEN)
    n_rows = group * len_q
    if pid_m * BLOCK_M < n_rows:  # a varlen program past its sequence's rows has nothing to do
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        g, i = _decode_rows(rows, len_q)
        row_ok = rows < n_rows
        offs_d = tl.arange(0, BLOCK_D)
        d_ok = offs_d < HEAD_DIM
        b64, hk64 = b.to(tl.int64), hk.to(tl.int64)
        h64 = hk64 * group + g.to(tl.int64)
        q_rows = b64 * sqb + h64 * sqh + (q0.to(tl.int64) + i.to(tl.int64)) * sqs
        q = tl.load(q_ptr + q_rows[:, None] + offs_d[None, :] * sqd, mask=row_ok[:, None] & d_ok[None, :], other=0.0)
        if UPCAST:
            q = q.to(tl.float32)
        k_base = k_ptr + b64 * skb + hk64 * skh + k0.to(tl.int64) * sks
        v_base = v_ptr + b64 * svb + hk64 * svh + k0.to(tl.int64) * svs
        lo = split * keys_per_split
        hi = tl.minimum(lo + keys_per_split, len_k)
        diag = len_k - len_q  # bottom-right alignment: query i sees keys j <= i + diag
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
        for start_n in range(lo, hi, BLOCK_N):
            offs_n = start_n + tl.arange(0, BLOCK_N)
            n_ok = offs_n < hi
            kv_mask = n_ok[:, None] & d_ok[None, :]
            k = tl.load(k_base + offs_n[:, None] * sks + offs_d[None, :] * skd, mask=kv_mask, other=0.0)
            if UPCAST:
                k = k.to(tl.float32)
            s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale  # [BM, BN], log2 units
            valid = n_ok[None, :]
            if CAUSAL:
                valid = valid & (offs_n[None, :] <= i[:, None] + diag)
            s = tl.where(valid, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # no key seen yet: 2^(-inf - 0) = 0, not NaN
            # s - m_use <= 0 in exact arithmetic; the clamp keeps it so if the compiler fuses the scale's multiply
            # into the subtraction (an unrounded product against a rounded max: 2^(1e5) at scores of 1e12)
            p = tl.math.exp2(tl.minimum(s - m_use[:, None], 0.0, propagate_nan=tl.PropagateNan.ALL))
            alpha = tl.math.exp2(m_i - m_use)  # m_i = -inf: 0 (l and acc are 0 then anyway)
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(v_base + offs_n[:, None] * svs + offs_d[None, :] * svd, mask=kv_mask, other=0.0)
            p = to_output(p, v.dtype)
            if UPCAST:
                p = p.to(tl.float32)
                v = v.to(tl.float32)
            acc = tl.dot(p, v, acc * alpha[:, None], input_precision=PRECISION)
            m_i = m_new
        empty = l_i == 0.0
        l_safe = tl.where(empty, 1.0, l_i)
        part = po_ptr + bhk.to(tl.int64) * spb + split * sps
        tl.store(part + rows[:, None] * spm + offs_d[None, :], acc / l_safe[:, None], mask=row_ok[:, None])
        lse2 = tl.where(empty, float("-inf"), m_i + tl.math.log2(l_safe))
        tl.store(pl_ptr + bhk.to(tl.int64) * plb + split * pls + rows, lse2, mask=row_ok)


@triton.jit
def _split_combine_kernel(po_ptr, pl_ptr, o_ptr, lse_ptr, cu_q_ptr, seqlen_q, n_kv_heads, group, n_splits,
                          spb, sps, spm, plb, pls, sob, soh, sos, sod, slb, slh, sls,
                          HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_R: tl.constexpr,
                          VARLEN: tl.constexpr):
    """One program per (batch x kv head, BLOCK_R of its rows): merge the key ranges' partials of each row, write
    o (the input dtype) and lse (natural log; -inf and o = 0 where no range held a key the row sees)."""
    bhk = tl.program_id(0)
    pid = tl.program_id(1)
    b = bhk // n_kv_heads
    hk = bhk % n_kv_heads
    q0, len_q = _sequence(cu_q_ptr, b, seqlen_q, VARLEN)
    n_rows = group * len_q
    if pid * BLOCK_R < n_rows:
        rows = pid * BLOCK_R + tl.arange(0, BLOCK_R)
        g, i = _decode_rows(rows, len_q)
        row_ok = rows < n_rows
        offs_d = tl.arange(0, BLOCK_D)
        pl_rows = pl_ptr + bhk.to(tl.int64) * plb + rows
        m = tl.full([BLOCK_R], float("-inf"), tl.float32)
        for s in range(n_splits):
            m = tl.maximum(m, tl.load(pl_rows + s * pls, mask=row_ok, other=float("-inf")))
        m_use = tl.where(m == float("-inf"), 0.0, m)
        total = tl.zeros([BLOCK_R], tl.float32)
        acc = tl.zeros([BLOCK_R, BLOCK_D], tl.float32)
        part = po_ptr + bhk.to(tl.int64) * spb + rows[:, None] * spm + offs_d[None, :]
        for s in range(n_splits):
            w = tl.math.exp2(tl.load(pl_rows + s * pls, mask=row_ok, other=float("-inf")) - m_use)
            o_s = tl.load(part + s * sps, mask=row_ok[:, None], other=0.0)
            acc += w[:, None] * o_s
            total += w
        empty = total == 0.0
        t_safe = tl.where(empty, 1.0, total)
        o = acc / t_safe[:, None]
        lse = tl.where(empty, float("-inf"), (m + tl.math.log2(t_safe)) * _LN2)
        b64 = b.to(tl.int64)
        h64 = hk.to(tl.int64) * group + g.to(tl.int64)
        at = q0.to(tl.int64) + i.to(tl.int64)
        o_ptrs = o_ptr + (b64 * sob + h64 * soh + at * sos)[:, None] + offs_d[None, :] * sod
        tl.store(o_ptrs, to_output(o, o_ptr.dtype.element_ty), mask=row_ok[:, None] & (offs_d < HEAD_DIM)[None, :])
        tl.store(lse_ptr + b64 * slb + h64 * slh + at * sls, lse, mask=row_ok)


@dataclass(frozen=True)
class DecodeConfig:
    """Rows of the group's query tile, keys per tile, warps and pipeline stages of the partial kernel."""

    BLOCK_M: int
    BLOCK_N: int
    num_warps: int
    num_stages: int


def decode_config(d: int, rows: int, dtype=torch.bfloat16) -> DecodeConfig:
    """A 16-row tile (tl.dot's minimum) up to 64 rows for the group's query rows; 64-key tiles (32 at D 256); 4
    warps. fp32 (exact products: FMA, no tensor cores) keeps 16 rows and narrower key tiles as D grows: in the
    sm_90 code 64 x 64 at D 64 spills ~10 KB a thread, 16 x 64 takes 72 registers; at D 128, 16 x 64 spills and
    16 x 32 in one stage takes 200; at D 256, 16 x 16 takes 114. Not tuned yet."""
    bd = block_d(d)
    wide = bd > 128
    if dtype == torch.float32:
        if bd <= 64:
            return DecodeConfig(16, 64, 4, 2)
        return DecodeConfig(16, 16, 4, 2) if wide else DecodeConfig(16, 32, 4, 1)
    bm = min(32 if wide else 64, max(16, triton.next_power_of_2(max(rows, 1))))
    return DecodeConfig(bm, 32 if wide else 64, 4, 2 if wide else 3)


def merge_rows(d: int, rows: int) -> int:
    """Rows a merge program takes: its fp32 accumulator and one partial within ~64 registers each (D 256 at 64
    rows spilled in the sm_90 code)."""
    return max(16, min(64, triton.next_power_of_2(max(rows, 1)), 4096 // block_d(d)))


def split_count(batch_kv_heads: int, m_tiles: int, max_k: int, block_n: int, sms: int | None = None) -> int:
    """Key ranges per (batch, kv head): enough programs for ``PROGRAMS_PER_SM`` per SM (``sms``: the current
    GPU's), no range shorter than ``MIN_KEYS_PER_SPLIT`` keys (nor than one tile). Under the interpreter, with no
    ``sms`` given: up to 8 programs in all, so the CPU tests run the merge."""
    tiles = max(1, triton.cdiv(max_k, block_n))
    if sms is None:
        if runtime.interpreting():
            return max(1, min(tiles, 8 // max(1, batch_kv_heads * m_tiles)))
        sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    want = triton.cdiv(PROGRAMS_PER_SM * sms, max(1, batch_kv_heads * m_tiles))
    longest = max(1, triton.cdiv(max_k, max(block_n, MIN_KEYS_PER_SPLIT)))
    return max(1, min(want, longest, tiles))


def key_ranges(max_k: int, splits: int, block_n: int) -> tuple[int, int]:
    """(keys a range, ranges): ``splits`` ranges of whole key tiles, fewer where the last ones would be empty."""
    keys_per_split = triton.cdiv(triton.cdiv(max_k, splits), block_n) * block_n
    return keys_per_split, triton.cdiv(max_k, keys_per_split)


def _forced_splits() -> int | None:
    """``KW_SPLIT_KV_SPLITS``: a split count for every call (the benchmark's sweep of split counts), else None."""
    text = os.environ.get("KW_SPLIT_KV_SPLITS", "").strip()
    if not text:
        return None
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"KW_SPLIT_KV_SPLITS must be a whole number >= 1, got {text!r}")
    return n


def attention_split_kv(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, *, causal=False, scale=None,
                       max_seqlen_q=None, max_seqlen_k=None, out, lse=None, splits: int | None = None):
    """The group's query rows in one tile per kv head, the keys split into ``splits`` ranges (None or 0:
    ``KW_SPLIT_KV_SPLITS`` if set, else :func:`split_count`), partials merged by a second kernel."""
    varlen = cu_seqlens_q is not None
    lse = _scratch_lse(out, varlen, lse)
    p = _problem(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, out, lse)
    if _trivial(p, out, lse):
        return out
    scale = 1.0 / math.sqrt(p.d) if scale is None else scale
    group = p.hq // p.hkv
    bd = block_d(p.d)
    cfg = decode_config(p.d, group * p.max_q, q.dtype)
    m_tiles = triton.cdiv(group * p.max_q, cfg.BLOCK_M)
    n_bhk = p.batch * p.hkv
    n_splits = splits or _forced_splits() or split_count(n_bhk, m_tiles, p.max_k, cfg.BLOCK_N)
    if n_splits < 1:
        raise ValueError(f"splits must be >= 1, got {n_splits}")
    keys_per_split, n_splits = key_ranges(p.max_k, n_splits, cfg.BLOCK_N)
    rows_pad = m_tiles * cfg.BLOCK_M
    po = torch.empty((n_bhk, n_splits, rows_pad, bd), dtype=torch.float32, device=q.device)
    pl = torch.empty((n_bhk, n_splits, rows_pad), dtype=torch.float32, device=q.device)
    common = dict(HEAD_DIM=p.d, BLOCK_D=bd, VARLEN=p.varlen)
    _split_partial_kernel[(n_bhk, n_splits, m_tiles)](
        q, k, v, po, pl, p.cu_q, p.cu_k, p.seqlen_q, p.seqlen_k, p.hkv, group, scale * LOG2E, keys_per_split,
        *p.sq, *p.sk, *p.sv, po.stride(0), po.stride(1), po.stride(2), pl.stride(0), pl.stride(1), **common,
        BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, CAUSAL=causal, UPCAST=_upcast(q.dtype),
        PRECISION=_precision(q.dtype), num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    block_r = merge_rows(p.d, group * p.max_q)
    _split_combine_kernel[(n_bhk, triton.cdiv(rows_pad, block_r))](
        po, pl, out, lse, p.cu_q, p.seqlen_q, p.hkv, group, n_splits, po.stride(0), po.stride(1), po.stride(2),
        pl.stride(0), pl.stride(1), *p.so, *p.sl, **common, BLOCK_R=block_r, num_warps=4)
    return out
