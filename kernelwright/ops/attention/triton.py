"""attention forward in Triton: naive -> flash -> causal_skip -> exp2 -> exp2_lazy -> pipelined -> tuned (and, for
decoding, split_kv in :mod:`kernelwright.ops.attention.decode`).

Legend: B batch, Hq query heads, Hkv kv heads (query head h reads kv head h // (Hq / Hkv)), Lq / Lk one
sequence's query / key count, D head dim (BD: D rounded up to a power of two >= 16), BM x BN a tile of
(query rows x keys). Every rung takes the padded layout (q [B, Hq, Sq, D], k and v [B, Hkv, Skv, D]) or the
varlen layout (q [total_q, Hq, D], k and v [total_k, Hkv, D] with int32 offsets cu_seqlens [B + 1]) at any
strides; a varlen program finds its sequence's start and length in the offsets, a padded one uses batch strides,
and the code after that is the same. Causal masking is bottom-right aligned per sequence: query i sees keys
j <= i + Lk - Lq.

* ``naive``: three kernels with the [B, Hq, Lq, Lk] fp32 score matrix in memory between them (scores, row
  softmax in place with the log-sum-exp, P @ V): the memory wall, 12 bytes per (query, key) pair of traffic.
* ``flash``: one kernel, one program per (BM query rows, head); k and v stream through in BN-key tiles with an
  online softmax (running max m, running sum l, output accumulator rescaled when m grows); every tile is
  masked elementwise, the causal tiles above the diagonal included.
* ``causal_skip``: the same loop split in two: tiles every row of the block sees in full run without any mask;
  only the tiles the diagonal (or the end of the keys) crosses are masked, and tiles wholly above the diagonal
  are never loaded.
* ``exp2``: scores in the exp2 domain with ``scale * log2(e)`` folded into one FMA with the max subtraction;
  the running output rescaled every tile, row by row, as FlashAttention-2 and -3 do.
* ``exp2_lazy``: exp2 with FlashAttention-4's lazy rescaling: the running max used as the reference is kept (stale)
  until some row's max grows past it by more than 8 (a factor 2^8 = 256, safe in fp32 and in the fp16/bf16 P
  fed to the second matmul); then, and only then, the accumulator is rescaled. The final division by l is
  exact whatever reference was used. The decision is one for the whole block (a ``tl.max`` over its rows): on
  sm_90 that costs block barriers every tile, and on the H200 the rung is slower than exp2 (run 34).
* ``pipelined``: exp2_lazy with the next key tile's scores issued before this tile's softmax.
* ``tuned``: the exp2 kernel with (BM, BN, warps, pipeline stages, k/v by TMA, pipelined or not, lazy rescale or
  not) searched per bucket by :mod:`kernelwright.tune`, and causal query blocks launched longest first.

Every kernel writes o (q's dtype) and lse (float32, natural log; -inf on rows that attend to no key). A row with
no key gets l = 0: o is written as 0 and lse as -inf rather than 0/0.

fp32 inputs use exact fp32 products (``input_precision="ieee"``). Under the CPU interpreter ``tl.dot`` on bf16
operands is wrong (Triton 3.6), so bf16 tiles are upcast to fp32 there (``UPCAST``); P is still rounded to bf16
first (round to nearest even, as on the GPU), so the CPU sees the GPU's rounding of P.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernelwright import runtime, tune
from kernelwright.ops._triton_helpers import to_output

LOG2E = 1.4426950408889634
_LN2: tl.constexpr = tl.constexpr(0.6931471805599453)
# log2 units: rescale only when a row's max grows by more than 8, a factor 2^8 = 256 (FlashAttention-4)
RESCALE_THRESHOLD: tl.constexpr = tl.constexpr(8.0)
_FLOOR: tl.constexpr = tl.constexpr(-3.0e38)  # finite stand-in for -inf in the lazy rescale's comparisons
NAIVE_MAX_SCORE_BYTES = 16 * 2**30  # the naive rung's fp32 score matrix; beyond this it refuses the case


# ---------------------------------------------------------------------------------------------------------------
# shared pieces


@triton.jit
def _sequence(cu_ptr, b, seqlen, VARLEN: tl.constexpr):
    """(first row, length) of sequence ``b``: from the offsets (varlen) or (0, the padded length)."""
    if VARLEN:
        start = tl.load(cu_ptr + b)
        length = tl.load(cu_ptr + b + 1) - start
    else:
        start = b * 0
        length = seqlen + b * 0
    return start, length


@triton.jit
def _load_rows(base, rows, offs_d, n_rows, stride_s, stride_d, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
               MASK_ROWS: tl.constexpr):
    """A [len(rows), BD] tile of a [n_rows, D] matrix; rows past ``n_rows`` and columns past D read as 0. With
    ``MASK_ROWS`` False the caller guarantees every row exists, so the load needs no row predicate."""
    ptrs = base + rows[:, None] * stride_s + offs_d[None, :] * stride_d
    if BLOCK_D == HEAD_DIM:
        if MASK_ROWS:
            return tl.load(ptrs, mask=(rows < n_rows)[:, None], other=0.0)
        return tl.load(ptrs)
    if MASK_ROWS:
        return tl.load(ptrs, mask=(rows < n_rows)[:, None] & (offs_d < HEAD_DIM)[None, :], other=0.0)
    return tl.load(ptrs, mask=(offs_d < HEAD_DIM)[None, :], other=0.0)


@triton.jit
def _program_bases(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, cu_q_ptr, cu_k_ptr, bh, n_heads, group, seqlen_q, seqlen_k,
                   sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, sob, soh, sos, slb, slh, sls,
                   VARLEN: tl.constexpr):
    """Base pointers of one (batch, query head)'s q, k, v, o and lse rows, the sequence lengths, and (batch, kv
    head, first key row) for TMA coordinates. 64-bit offsets: a packed batch can exceed 2^31 elements."""
    b = bh // n_heads
    h = bh % n_heads
    hk = h // group
    q0, len_q = _sequence(cu_q_ptr, b, seqlen_q, VARLEN)
    k0, len_k = _sequence(cu_k_ptr, b, seqlen_k, VARLEN)
    b64, h64, hk64, q064, k064 = b.to(tl.int64), h.to(tl.int64), hk.to(tl.int64), q0.to(tl.int64), k0.to(tl.int64)
    q_base = q_ptr + b64 * sqb + h64 * sqh + q064 * sqs
    k_base = k_ptr + b64 * skb + hk64 * skh + k064 * sks
    v_base = v_ptr + b64 * svb + hk64 * svh + k064 * svs
    o_base = o_ptr + b64 * sob + h64 * soh + q064 * sos
    l_base = lse_ptr + b64 * slb + h64 * slh + q064 * sls
    return q_base, k_base, v_base, o_base, l_base, len_q, len_k, b, hk, k0


# ---------------------------------------------------------------------------------------------------------------
# rung 1: naive, the score matrix in memory


@triton.jit
def _naive_scores_kernel(q_ptr, k_ptr, s_ptr, cu_q_ptr, cu_k_ptr, seqlen_q, seqlen_k, n_heads, group, sm_scale,
                         sqb, sqh, sqs, sqd, skb, skh, sks, skd, max_q, max_k,
                         HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
                         BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, VARLEN: tl.constexpr, UPCAST: tl.constexpr,
                         PRECISION: tl.constexpr):
    """S[bh, i, j] = scale * q_i . k_j, or -inf where masked; S is [B * Hq, max_q, max_k] fp32 (write 4 bytes a
    pair: the first crossing of the memory wall)."""
    bh = tl.program_id(2)
    q_base, k_base, _, _, _, len_q, len_k, _, _, _ = _program_bases(
        q_ptr, k_ptr, k_ptr, q_ptr, q_ptr, cu_q_ptr, cu_k_ptr, bh, n_heads, group, seqlen_q, seqlen_k,
        sqb, sqh, sqs, skb, skh, sks, skb, skh, sks, sqb, sqh, sqs, sqb, sqh, sqs, VARLEN)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    q = _load_rows(q_base, offs_m, offs_d, len_q, sqs, sqd, HEAD_DIM, BLOCK_D, True)  # [BM, BD]
    k = _load_rows(k_base, offs_n, offs_d, len_k, sks, skd, HEAD_DIM, BLOCK_D, True)  # [BN, BD]
    if UPCAST:
        q = q.to(tl.float32)
        k = k.to(tl.float32)
    s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * sm_scale  # [BM, BN]
    valid = (offs_n < len_k)[None, :]
    if CAUSAL:
        valid = valid & (offs_n[None, :] <= offs_m[:, None] + (len_k - len_q))
    s = tl.where(valid, s, float("-inf"))
    rows = bh.to(tl.int64) * max_q + offs_m
    ptrs = s_ptr + rows[:, None] * max_k + offs_n[None, :]
    tl.store(ptrs, s, mask=(offs_m < len_q)[:, None] & (offs_n < max_k)[None, :])


@triton.jit
def _naive_softmax_kernel(s_ptr, lse_ptr, cu_q_ptr, cu_k_ptr, seqlen_q, seqlen_k, n_heads, slb, slh, sls, max_q,
                          max_k, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, VARLEN: tl.constexpr):
    """P = exp(S - lse) in place, row by row (two passes over S: read, then read and write), and lse."""
    bh = tl.program_id(1)
    b = bh // n_heads
    h = bh % n_heads
    q0, len_q = _sequence(cu_q_ptr, b, seqlen_q, VARLEN)
    _, len_k = _sequence(cu_k_ptr, b, seqlen_k, VARLEN)
    offs_r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_ok = offs_r < len_q
    rows = s_ptr + (bh.to(tl.int64) * max_q + offs_r)[:, None] * max_k
    m = tl.full([BLOCK_R], float("-inf"), tl.float32)
    total = tl.zeros([BLOCK_R], tl.float32)
    for c in range(0, len_k, BLOCK_C):
        cols = c + tl.arange(0, BLOCK_C)
        x = tl.load(rows + cols[None, :], mask=row_ok[:, None] & (cols < len_k)[None, :], other=float("-inf"))
        m_new = tl.maximum(m, tl.max(x, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row masked so far: shift by 0, not -inf
        total = total * tl.exp(m - m_use) + tl.sum(tl.exp(x - m_use[:, None]), 1)
        m = m_new
    empty = total == 0.0
    lse = tl.where(empty, float("-inf"), m + tl.log(tl.where(empty, 1.0, total)))
    shift = tl.where(empty, 0.0, lse)
    for c in range(0, len_k, BLOCK_C):
        cols = c + tl.arange(0, BLOCK_C)
        mask = row_ok[:, None] & (cols < len_k)[None, :]
        x = tl.load(rows + cols[None, :], mask=mask, other=float("-inf"))
        tl.store(rows + cols[None, :], tl.exp(x - shift[:, None]), mask=mask)
    l_base = lse_ptr + b.to(tl.int64) * slb + h.to(tl.int64) * slh + q0.to(tl.int64) * sls
    tl.store(l_base + offs_r * sls, lse, mask=row_ok)


@triton.jit
def _naive_pv_kernel(p_ptr, v_ptr, o_ptr, cu_q_ptr, cu_k_ptr, seqlen_q, seqlen_k, n_heads, group,
                     svb, svh, svs, svd, sob, soh, sos, sod, max_q, max_k,
                     HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     VARLEN: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    """O = P @ V, P read back from memory (4 bytes a pair again) and rounded to v's dtype as flash does."""
    bh = tl.program_id(1)
    _, _, v_base, o_base, _, len_q, len_k, _, _, _ = _program_bases(
        v_ptr, v_ptr, v_ptr, o_ptr, o_ptr, cu_q_ptr, cu_k_ptr, bh, n_heads, group, seqlen_q, seqlen_k,
        sob, soh, sos, svb, svh, svs, svb, svh, svs, sob, soh, sos, sob, soh, sos, VARLEN)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    rows = p_ptr + (bh.to(tl.int64) * max_q + offs_m)[:, None] * max_k
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    for start_n in range(0, len_k, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        p = tl.load(rows + offs_n[None, :], mask=(offs_m < len_q)[:, None] & (offs_n < len_k)[None, :], other=0.0)
        v = _load_rows(v_base, offs_n, offs_d, len_k, svs, svd, HEAD_DIM, BLOCK_D, True)
        p = to_output(p, v.dtype)
        if UPCAST:
            p = p.to(tl.float32)
            v = v.to(tl.float32)
        acc = tl.dot(p, v, acc, input_precision=PRECISION)
    ptrs = o_base + offs_m[:, None] * sos + offs_d[None, :] * sod
    mask = (offs_m < len_q)[:, None] & (offs_d < HEAD_DIM)[None, :]
    tl.store(ptrs, to_output(acc, o_ptr.dtype.element_ty), mask=mask)


# ---------------------------------------------------------------------------------------------------------------
# rungs 2-7: one flash kernel; the rungs differ by constexpr switches (SKIP, EXP2, LAZY, PIPE, LONGEST_FIRST) and config


@triton.jit
def _kv_tile(base, desc, b, hk, k0, start_n, len_k, stride_s, stride_d, HEAD_DIM: tl.constexpr,
             BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, MASK: tl.constexpr, USE_TMA: tl.constexpr,
             VARLEN: tl.constexpr):
    """Keys [start_n, start_n + BN) of the sequence (its first row k0) from k or v as [BN, BD], by pointers or by
    TMA (the copy engine makes the addresses; rows past a padded head's Skv and columns past D arrive as zeros, rows
    of the next packed sequence arrive as they are and are masked by the caller)."""
    # (if/else, not early returns: the compiler type-checks a constexpr branch's code after a return)
    if USE_TMA:
        if VARLEN:  # descriptor over [total, Hkv, D], box [BN, 1, BD]
            tile = desc.load([k0 + start_n, hk, 0]).reshape(BLOCK_N, BLOCK_D)
        else:  # over [B, Hkv, Skv, D], box [1, 1, BN, BD]
            tile = desc.load([b, hk, start_n, 0]).reshape(BLOCK_N, BLOCK_D)
    else:
        tile = _load_rows(base, start_n + tl.arange(0, BLOCK_N), tl.arange(0, BLOCK_D), len_k, stride_s, stride_d,
                          HEAD_DIM, BLOCK_D, MASK)
    return tile


@triton.jit
def _kv_tiles(acc, l_i, m_i, q, k_base, v_base, k_desc, v_desc, b, hk, k0, sks, skd, svs, svd, lo, hi, len_k, offs_m,
              diag, qk_scale, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
              MASK: tl.constexpr, CAUSAL: tl.constexpr, EXP2: tl.constexpr, LAZY: tl.constexpr, UPCAST: tl.constexpr,
              PRECISION: tl.constexpr, WARP_SPEC: tl.constexpr, USE_TMA: tl.constexpr, VARLEN: tl.constexpr,
              PIPE: tl.constexpr = False):
    """Fold key tiles [lo, hi) into the running (acc [BM, BD], l [BM], m [BM]). ``MASK``: mask keys past the end
    and (causal) above the diagonal, and guard rows that have seen no key yet; without it the tiles are known to
    be fully visible to every row and the loads and the softmax carry no predicate at all. ``PIPE``: the scores
    of the next tile are computed at the top of each iteration, before this tile's softmax (software pipelining
    by hand, FlashAttention-3's intra-warpgroup overlap): their wgmma runs on the tensor cores while the softmax
    runs on the FMA and MUFU units (in the sm_90 SASS the HGMMAs are interleaved with the MUFU.EX2s; without it
    a wait for all wgmmas sits between the two). Costs a second [BM, BN] fp32 score tile in registers and one
    wasted tile of scores a call (the last iteration's)."""
    if PIPE:  # the prologue: the first tile's scores (a masked load: the loop may be empty)
        k = _kv_tile(k_base, k_desc, b, hk, k0, lo, len_k, sks, skd, HEAD_DIM, BLOCK_D, BLOCK_N, True, USE_TMA,
                     VARLEN)
        if UPCAST:
            k = k.to(tl.float32)
        qk_next = tl.dot(q, tl.trans(k), input_precision=PRECISION)
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPEC):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        offs_n = start_n + tl.arange(0, BLOCK_N)
        if PIPE:
            qk = qk_next
            # the next tile; in unmasked loops the last iteration reloads its own tile (always in bounds, unused)
            nxt = start_n + BLOCK_N if MASK else tl.minimum(start_n + BLOCK_N, hi - BLOCK_N)
            k = _kv_tile(k_base, k_desc, b, hk, k0, nxt, len_k, sks, skd, HEAD_DIM, BLOCK_D, BLOCK_N, MASK, USE_TMA,
                         VARLEN)
            if UPCAST:
                k = k.to(tl.float32)
            qk_next = tl.dot(q, tl.trans(k), input_precision=PRECISION)
        else:
            k = _kv_tile(k_base, k_desc, b, hk, k0, start_n, len_k, sks, skd, HEAD_DIM, BLOCK_D, BLOCK_N, MASK,
                         USE_TMA, VARLEN)  # [BN, BD]
            if UPCAST:
                k = k.to(tl.float32)
            qk = tl.dot(q, tl.trans(k), input_precision=PRECISION)  # [BM, BN] fp32, unscaled
        if MASK:
            valid = (offs_n < len_k)[None, :]
            if CAUSAL:
                valid = valid & (offs_n[None, :] <= offs_m[:, None] + diag)
            qk = tl.where(valid, qk, float("-inf"))
        if EXP2:
            # qk_scale = scale * log2(e): scores in log2 units, the scale folded into the FMA below
            m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            # -inf (no key seen yet) clamped to the lowest float: a row going from -inf to a finite max grows by
            # ~3e38 (rescale), a row staying at -inf by 0 (no NaN from -inf - -inf), and alpha is 0 or 1 for them
            m_old = tl.maximum(m_i, _FLOOR)
            m_now = tl.maximum(m_new, _FLOOR)
            if not LAZY:  # every tile, every row (FA2, FA3): no block-wide decision, no block barrier for it
                alpha = tl.math.exp2(m_old - m_now)
                acc = acc * alpha[:, None]
                l_i = l_i * alpha
                m_i = m_new
            elif tl.max(m_now - m_old, 0) > RESCALE_THRESHOLD:  # lazy: one decision for the whole block
                alpha = tl.math.exp2(m_old - m_now)
                acc = acc * alpha[:, None]
                l_i = l_i * alpha
                m_i = m_new
            if MASK:
                m_use = tl.where(m_i == float("-inf"), 0.0, m_i)
            else:
                m_use = m_i
            # one FFMA and one MUFU.EX2 per score (sm_90 SASS: tl.math.exp2 is already the ftz approximation).
            # The max was taken of rounded products, the FFMA subtracts it from the unrounded one: at scores of
            # ~1e12 they differ by ~1e5 and exp2 of that is inf (inf / inf = NaN). The exponent is <= 8 in exact
            # arithmetic, so it is clamped there (NaN still propagates).
            p = tl.math.exp2(tl.minimum(qk * qk_scale - m_use[:, None], RESCALE_THRESHOLD,
                                        propagate_nan=tl.PropagateNan.ALL))
            l_i = l_i + tl.sum(p, 1)
        else:
            s = qk * qk_scale  # qk_scale = scale
            m_new = tl.maximum(m_i, tl.max(s, 1))
            if MASK:
                m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # no key yet: exp(-inf - 0) = 0, not NaN
            else:
                m_use = m_new
            p = tl.exp(tl.minimum(s - m_use[:, None], 0.0, propagate_nan=tl.PropagateNan.ALL))  # (see above)
            alpha = tl.exp(m_i - m_use)
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None]
            m_i = m_new
        v = _kv_tile(v_base, v_desc, b, hk, k0, start_n, len_k, svs, svd, HEAD_DIM, BLOCK_D, BLOCK_N, MASK, USE_TMA,
                     VARLEN)  # [BN, BD]
        p = to_output(p, v.dtype)
        if UPCAST:
            p = p.to(tl.float32)
            v = v.to(tl.float32)
        acc = tl.dot(p, v, acc, input_precision=PRECISION)
    return acc, l_i, m_i


@triton.jit
def _flash_fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, k_desc, v_desc, cu_q_ptr, cu_k_ptr, seqlen_q, seqlen_k,
                      n_heads, group,
                      qk_scale, sqb, sqh, sqs, sqd, skb, skh, sks, skd, svb, svh, svs, svd, sob, soh, sos, sod,
                      slb, slh, sls,
                      HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      CAUSAL: tl.constexpr, VARLEN: tl.constexpr, SKIP: tl.constexpr, EXP2: tl.constexpr,
                      LAZY: tl.constexpr, LONGEST_FIRST: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
                      WARP_SPEC: tl.constexpr, USE_TMA: tl.constexpr, PIPE: tl.constexpr = False):
    """One program per (BM query rows, batch x query head): q stays in registers, k and v stream through once
    (read D elements of k and v per key, write o and lse once: the minimum traffic)."""
    pid_m = tl.program_id(0)
    if LONGEST_FIRST:  # causal: the last query block sees the most keys; start it first, no long tail at the end
        pid_m = tl.num_programs(0) - 1 - pid_m
    q_base, k_base, v_base, o_base, l_base, len_q, len_k, b, hk, k0 = _program_bases(
        q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, cu_q_ptr, cu_k_ptr, tl.program_id(1), n_heads, group, seqlen_q,
        seqlen_k, sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, sob, soh, sos, slb, slh, sls, VARLEN)
    start_m = pid_m * BLOCK_M
    if start_m < len_q:  # a varlen program past its sequence's end has nothing to do
        offs_m = start_m + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, BLOCK_D)
        q = _load_rows(q_base, offs_m, offs_d, len_q, sqs, sqd, HEAD_DIM, BLOCK_D, True)  # [BM, BD], read once
        if UPCAST:
            q = q.to(tl.float32)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
        diag = len_k - len_q  # bottom-right alignment: row i sees keys j <= i + diag
        if SKIP:
            if CAUSAL:
                hi = tl.maximum(tl.minimum(len_k, start_m + BLOCK_M + diag), 0)  # keys past it: no row sees them
                full = tl.minimum(start_m + diag + 1, len_k)  # keys [0, full) are seen by every row of the block
            else:
                hi = len_k
                full = len_k
            full_hi = (tl.maximum(full, 0) // BLOCK_N) * BLOCK_N
            acc, l_i, m_i = _kv_tiles(acc, l_i, m_i, q, k_base, v_base, k_desc, v_desc, b, hk, k0, sks, skd, svs,
                                      svd, 0, full_hi, len_k, offs_m, diag, qk_scale, HEAD_DIM, BLOCK_D, BLOCK_N,
                                      False, CAUSAL, EXP2, LAZY, UPCAST, PRECISION, WARP_SPEC, USE_TMA, VARLEN, PIPE)
            acc, l_i, m_i = _kv_tiles(acc, l_i, m_i, q, k_base, v_base, k_desc, v_desc, b, hk, k0, sks, skd, svs,
                                      svd, full_hi, hi, len_k, offs_m, diag, qk_scale, HEAD_DIM, BLOCK_D, BLOCK_N,
                                      True, CAUSAL, EXP2, LAZY, UPCAST, PRECISION, False, USE_TMA, VARLEN, PIPE)
        else:
            acc, l_i, m_i = _kv_tiles(acc, l_i, m_i, q, k_base, v_base, k_desc, v_desc, b, hk, k0, sks, skd, svs,
                                      svd, 0, len_k, len_k, offs_m, diag, qk_scale, HEAD_DIM, BLOCK_D, BLOCK_N,
                                      True, CAUSAL, EXP2, LAZY, UPCAST, PRECISION, False, USE_TMA, VARLEN, PIPE)
        # epilogue: exact normalization; a row that saw no key has l = 0 -> o = 0, lse = -inf
        empty = l_i == 0.0
        l_safe = tl.where(empty, 1.0, l_i)
        o = acc / l_safe[:, None]
        if EXP2:
            lse = (m_i + tl.math.log2(l_safe)) * _LN2
        else:
            lse = m_i + tl.log(l_safe)
        lse = tl.where(empty, float("-inf"), lse)
        row_ok = offs_m < len_q
        o_ptrs = o_base + offs_m[:, None] * sos + offs_d[None, :] * sod
        tl.store(o_ptrs, to_output(o, o_ptr.dtype.element_ty), mask=row_ok[:, None] & (offs_d < HEAD_DIM)[None, :])
        tl.store(l_base + offs_m * sls, lse, mask=row_ok)


# ---------------------------------------------------------------------------------------------------------------
# configs


@dataclass(frozen=True)
class AttentionConfig:
    """Launch configuration of the flash kernel: query rows and keys per tile, warps, software-pipeline depth of
    the k/v loads, Triton's automatic warp specialization of the key loop, and k/v loads by TMA descriptors
    (Hopper; the pointer path where the strides do not allow it)."""

    BLOCK_M: int
    BLOCK_N: int
    num_warps: int
    num_stages: int
    warp_specialize: bool = False
    tma: bool = False
    pipeline: bool = False  # the next tile's scores computed before this tile's softmax (_kv_tiles' PIPE)
    lazy: bool = True
    """FlashAttention-4's lazy rescale (exp2_lazy) or a rescale every tile (exp2). Configs cached before this field
    existed were all lazy, hence the default; the untuned default and half of the candidates are not."""

    def smem_bytes(self, block_d: int, elt: int) -> int:
        """q's tile plus ``num_stages`` buffered k and v tiles (an estimate of what the pipeliner allocates)."""
        return (self.BLOCK_M * block_d + self.num_stages * 2 * self.BLOCK_N * block_d) * elt


def block_d(d: int) -> int:
    return max(16, triton.next_power_of_2(d))


def default_config(d: int) -> AttentionConfig:
    """The fixed config of the flash, causal_skip and exp2_lazy rungs (and the tuned rung's untuned default):
    128-row query blocks (two wgmma m64 row groups per warpgroup), 64-key tiles, as many warps as keep the fp32
    accumulator [BM, BD] at 64 registers a thread or fewer."""
    bd = block_d(d)
    if bd <= 64:
        return AttentionConfig(128, 64, 4, 3)
    if bd <= 128:
        return AttentionConfig(128, 64, 8, 3)
    return AttentionConfig(64, 64, 8, 2)


def pipelined_config(d: int) -> AttentionConfig:
    """The pipelined rung's fixed config: k and v by TMA (where the layout allows; pointers otherwise), 128 x 64
    tiles over 8 warps (64 x 32 at D 256). sm_90 SASS, bf16 at 4k, non-causal: with TMA ptxas interleaves 6 of
    the 40 HGMMAs with the softmax's MUFU.EX2s (185 registers at D128, 128 at D64, 223 at D256, no spills); with
    pointer loads over 8 warps it interleaves none (194 registers), the same order as exp2_lazy."""
    bd = block_d(d)
    if bd <= 128:
        return AttentionConfig(128, 64, 8, 3, tma=True, pipeline=True)
    return AttentionConfig(64, 32, 8, 2, tma=True, pipeline=True)


def fit(cfg: AttentionConfig, max_q: int, max_k: int) -> AttentionConfig:
    """Shrink a tile taller or wider than the problem (decoding has one query row; 16 is tl.dot's minimum)."""
    bm = min(cfg.BLOCK_M, max(16, triton.next_power_of_2(max(max_q, 1))))
    bn = min(cfg.BLOCK_N, max(16, triton.next_power_of_2(max(max_k, 1))))
    if (bm, bn) == (cfg.BLOCK_M, cfg.BLOCK_N):
        return cfg
    warps = cfg.num_warps if bm * bn >= 64 * 64 else 4
    return dataclasses.replace(cfg, BLOCK_M=bm, BLOCK_N=bn, num_warps=warps)


# (BM, BN, warps, stages, TMA): shapes that suit Hopper's wgmma (m64 per warpgroup), big to small. No warp-
# specialized candidates: Triton 3.6 documents tl.range(warp_specialize=True) for Blackwell, and on sm_90 it
# compiles this kernel to the very same cubin as without it (checked with kw inspect's compiler, 2026-12).
_CANDIDATES = (
    (128, 128, 8, 2, False), (128, 128, 8, 3, False), (128, 64, 8, 3, False), (128, 64, 8, 4, False),
    (128, 64, 4, 3, False), (128, 32, 4, 4, False), (64, 128, 4, 3, False), (64, 64, 4, 3, False),
    (64, 64, 8, 2, False), (64, 32, 8, 3, False), (128, 128, 8, 2, True), (128, 64, 8, 3, True),
)
# the pipelined rung's configurations that keep two score tiles and the accumulator within the register file;
# mostly TMA ones, the loads with which ptxas interleaves the next scores' HGMMAs with the softmax (pipelined_config)
_PIPELINED = ((128, 64, 8, 3, True), (128, 64, 8, 2, True), (64, 64, 4, 3, True), (128, 32, 4, 3, True),
              (128, 64, 8, 3, False), (64, 64, 4, 3, False))


def _configs(dtype) -> list[AttentionConfig]:
    # each shape with the rescale every tile and lazily: H200 run 34 had every tile 8-14% ahead on exp2_lazy's
    # fixed config but 20% behind on the (lazy-tuned) 4-warp pipelined config of D128 causal
    return [AttentionConfig(bm, bn, w, s, tma=tma, pipeline=pipe, lazy=lazy)
            for lazy in (False, True)
            for pipe, shapes in ((False, _CANDIDATES), (True, _PIPELINED))
            for bm, bn, w, s, tma in shapes]


def _elt(dtype) -> int:
    return torch.finfo(dtype).bits // 8


def _prune(cfg: AttentionConfig, size, dtype, limits: tune.Limits) -> str | None:
    from kernelwright.ops.attention.spec import decode

    p = decode(size)
    bd = block_d(p.d)
    smem = cfg.smem_bytes(bd, _elt(dtype))
    if smem > limits.smem_per_block:
        return f"{smem // 1024} KB of shared memory > {limits.smem_per_block // 1024} KB per block"
    acc = cfg.BLOCK_M * bd // (32 * cfg.num_warps)
    if acc > 64:  # sm_90 SASS of 128 x 64 tiles at D 128: 4 warps (128 a thread) spill, 8 warps (64) use 198 registers
        return f"{acc} fp32 accumulators per thread (> 64: with the score tile and P, over 255 registers)"
    if cfg.BLOCK_M == 64 and cfg.num_warps == 8 and bd < 256:
        return "8 warps on 64 query rows: only for D = 256, whose accumulator 4 warps cannot hold"
    scores = cfg.BLOCK_M * cfg.BLOCK_N // (32 * cfg.num_warps)
    if scores > 64:
        return "score tile over 64 registers per thread"
    if cfg.pipeline and 2 * scores + acc > 128:
        return f"two score tiles and the accumulator take {2 * scores + acc} registers a thread (> 128)"
    if cfg.BLOCK_M > max(16, tune.pow2_bucket(p.sq)) or cfg.BLOCK_N > max(16, tune.pow2_bucket(p.skv)):
        return "tile larger than the problem"
    return None


def _bucket(size) -> str:
    """Head dim, mask, and the query length in four classes (<= 512, <= 2k, <= 8k, longer). Two classes (<= 512
    or longer) let a config tuned at 4k serve 1k, where it reached 1.10x SDPA flash against 1.20-1.34x at 2k-16k
    (H200 run 11), and let a GPU test's small problem set the config of every long one (run 10: 326 against 415
    TFLOP/s at 4k causal)."""
    from kernelwright.ops.attention.spec import decode

    p = decode(size)
    n = p.sq
    length = "s" if n <= 512 else "m" if n <= 2048 else "l" if n <= 8192 else "xl"
    return f"d{block_d(p.d)}-{'causal' if p.causal else 'full'}-q{length}"


def _default(size, dtype) -> AttentionConfig:
    from kernelwright.ops.attention.spec import decode

    p = decode(size)
    return fit(dataclasses.replace(default_config(p.d), lazy=False), p.sq, p.skv)


TUNED = tune.Space("attention.tuned", AttentionConfig, _configs, _prune, _bucket, _default)
SPACES = {"tuned": TUNED}


# ---------------------------------------------------------------------------------------------------------------
# launchers


def _precision(dtype) -> str:
    return "ieee" if dtype == torch.float32 else "tf32"


def _upcast(dtype) -> bool:
    return runtime.interpreting() and dtype == torch.bfloat16


@dataclass
class _Problem:
    """One call's shapes and strides, the padded and varlen layouts brought to the same (b, h, s, d) strides."""

    batch: int
    hq: int
    hkv: int
    d: int
    max_q: int
    max_k: int
    seqlen_q: int
    seqlen_k: int
    varlen: bool
    cu_q: torch.Tensor | None
    cu_k: torch.Tensor | None
    sq: tuple
    sk: tuple
    sv: tuple
    so: tuple
    sl: tuple


def _bhsd(t: torch.Tensor, varlen: bool) -> tuple[int, int, int, int]:
    """(batch, head, row, dim) strides; a packed [total, H, D] tensor has no batch stride (offsets instead)."""
    if varlen:
        return 0, t.stride(1), t.stride(0), t.stride(2)
    return t.stride(0), t.stride(1), t.stride(2), t.stride(3)


def _problem(q, k, v, cu_q, cu_k, max_q, max_k, out, lse) -> _Problem:
    varlen = cu_q is not None
    d = q.shape[-1]
    if varlen:
        cu_q = cu_q.to(torch.int32).contiguous()
        cu_k = cu_k.to(torch.int32).contiguous()
        batch = cu_q.shape[0] - 1
        if max_q is None:
            max_q = int((cu_q[1:] - cu_q[:-1]).max()) if batch else 0
        if max_k is None:
            max_k = int((cu_k[1:] - cu_k[:-1]).max()) if batch else 0
        hq, hkv = q.shape[1], k.shape[1]
        sl = (0, lse.stride(0), lse.stride(1))
        seqlen_q = seqlen_k = 0
    else:
        batch, hq, max_q, _ = q.shape
        hkv, max_k = k.shape[1], k.shape[2]
        sl = (lse.stride(0), lse.stride(1), lse.stride(2))
        seqlen_q, seqlen_k = max_q, max_k
    return _Problem(batch, hq, hkv, d, max_q, max_k, seqlen_q, seqlen_k, varlen, cu_q, cu_k,
                    _bhsd(q, varlen), _bhsd(k, varlen), _bhsd(v, varlen), _bhsd(out, varlen), sl)


def _trivial(p: _Problem, out: torch.Tensor, lse: torch.Tensor) -> bool:
    """Nothing to launch: no query rows at all, or no keys anywhere (every row: o = 0, lse = -inf)."""
    if out.numel() == 0 or p.batch == 0 or p.max_q == 0:
        return True
    if p.max_k == 0:
        out.zero_()
        lse.fill_(float("-inf"))
        return True
    return False


def _scratch_lse(out, varlen: bool, lse):
    if lse is not None:
        return lse
    shape = (out.shape[1], out.shape[0]) if varlen else out.shape[:3]
    return torch.empty(shape, dtype=torch.float32, device=out.device)


def tma_possible() -> bool:
    """TMA needs Hopper (or newer); the interpreter emulates descriptors, so CPU tests run the TMA path too."""
    return runtime.interpreting() or runtime.is_hopper()


def _kv_descriptors(k: torch.Tensor, v: torch.Tensor, p: _Problem, cfg: AttentionConfig) -> tuple:
    """TMA descriptors over k and v with a [BN, BD] box ([B, Hkv, Skv, D] padded, [total, Hkv, D] varlen; columns
    past D read as zeros), or (None, None) when TMA cannot address them (a non-unit last stride, strides or base
    not 16-byte aligned)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    bd = block_d(p.d)
    block = [cfg.BLOCK_N, 1, bd] if p.varlen else [1, 1, cfg.BLOCK_N, bd]
    for t in (k, v):
        if t.stride(-1) != 1 or t.data_ptr() % 16 or any(s * t.element_size() % 16 for s in t.stride()[:-1]):
            return None, None
    return tuple(TensorDescriptor(t, list(t.shape), list(t.stride()), block) for t in (k, v))


def _launch_flash(q, k, v, out, lse, p: _Problem, causal: bool, scale: float, cfg: AttentionConfig, *, skip: bool,
                  exp2: bool, lazy: bool, longest_first: bool):
    bd = block_d(p.d)
    grid = (triton.cdiv(p.max_q, cfg.BLOCK_M), p.batch * p.hq)
    qk_scale = scale * LOG2E if exp2 else scale
    k_desc = v_desc = None
    if cfg.tma and tma_possible():
        k_desc, v_desc = _kv_descriptors(k, v, p, cfg)
    _flash_fwd_kernel[grid](
        q, k, v, out, lse, k_desc, v_desc, p.cu_q, p.cu_k, p.seqlen_q, p.seqlen_k, p.hq, p.hq // p.hkv, qk_scale,
        *p.sq, *p.sk, *p.sv, *p.so, *p.sl,
        HEAD_DIM=p.d, BLOCK_D=bd, BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, CAUSAL=causal, VARLEN=p.varlen,
        SKIP=skip, EXP2=exp2, LAZY=lazy and exp2, LONGEST_FIRST=longest_first and causal, UPCAST=_upcast(q.dtype),
        PRECISION=_precision(q.dtype), WARP_SPEC=cfg.warp_specialize, USE_TMA=k_desc is not None,
        PIPE=cfg.pipeline, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    return out


def _fixed_rung(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, scale, max_seqlen_q, max_seqlen_k, out, lse,
                pipeline: bool = False, **switches):
    lse = _scratch_lse(out, cu_seqlens_q is not None, lse)
    p = _problem(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, out, lse)
    if _trivial(p, out, lse):
        return out
    scale = 1.0 / math.sqrt(p.d) if scale is None else scale
    cfg = fit(pipelined_config(p.d) if pipeline else default_config(p.d), p.max_q, p.max_k)
    return _launch_flash(q, k, v, out, lse, p, causal, scale, cfg, **switches)


# --- the rung functions: (q, k, v[, cu_seqlens_q, cu_seqlens_k], *, causal, scale, max_seqlen_q, max_seqlen_k,
#     out, lse=None) -> out; lse (float32, natural log) is written when given ----------------------------------------
def attention_naive(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, *, causal=False, scale=None, max_seqlen_q=None,
                    max_seqlen_k=None, out, lse=None):
    """Scores, softmax and P @ V as three kernels with the fp32 score matrix [B * Hq, max_q, max_k] in memory."""
    lse = _scratch_lse(out, cu_seqlens_q is not None, lse)
    p = _problem(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, out, lse)
    if _trivial(p, out, lse):
        return out
    scale = 1.0 / math.sqrt(p.d) if scale is None else scale
    bd = block_d(p.d)
    scores = torch.empty((p.batch * p.hq, p.max_q, p.max_k), dtype=torch.float32, device=q.device)
    common = dict(HEAD_DIM=p.d, BLOCK_D=bd, VARLEN=p.varlen, UPCAST=_upcast(q.dtype), PRECISION=_precision(q.dtype))
    bm = min(64, max(16, triton.next_power_of_2(p.max_q)))
    bn = min(64, max(16, triton.next_power_of_2(p.max_k)))
    grid = (triton.cdiv(p.max_q, bm), triton.cdiv(p.max_k, bn), p.batch * p.hq)
    _naive_scores_kernel[grid](q, k, scores, p.cu_q, p.cu_k, p.seqlen_q, p.seqlen_k, p.hq, p.hq // p.hkv, scale,
                               *p.sq, *p.sk, p.max_q, p.max_k, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, **common,
                               num_warps=4)
    block_c = min(1024, triton.next_power_of_2(p.max_k))
    _naive_softmax_kernel[(triton.cdiv(p.max_q, 8), p.batch * p.hq)](
        scores, lse, p.cu_q, p.cu_k, p.seqlen_q, p.seqlen_k, p.hq, *p.sl, p.max_q, p.max_k, BLOCK_R=8,
        BLOCK_C=block_c, VARLEN=p.varlen, num_warps=8)
    _naive_pv_kernel[(triton.cdiv(p.max_q, bm), p.batch * p.hq)](
        scores, v, out, p.cu_q, p.cu_k, p.seqlen_q, p.seqlen_k, p.hq, p.hq // p.hkv, *p.sv, *p.so, p.max_q,
        p.max_k, BLOCK_M=bm, BLOCK_N=bn, **common, num_warps=4)
    return out


def attention_flash(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, *, causal=False, scale=None, max_seqlen_q=None,
                    max_seqlen_k=None, out, lse=None):
    """Online softmax over every key tile, each tile masked elementwise."""
    return _fixed_rung(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, scale, max_seqlen_q, max_seqlen_k, out, lse,
                       skip=False, exp2=False, lazy=False, longest_first=False)


def attention_causal_skip(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, *, causal=False, scale=None,
                          max_seqlen_q=None, max_seqlen_k=None, out, lse=None):
    """Tiles above the diagonal never loaded; only diagonal (and ragged last) tiles masked."""
    return _fixed_rung(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, scale, max_seqlen_q, max_seqlen_k, out, lse,
                       skip=True, exp2=False, lazy=False, longest_first=False)


def attention_exp2(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, *, causal=False, scale=None, max_seqlen_q=None,
                   max_seqlen_k=None, out, lse=None):
    """causal_skip in the exp2 domain with the scale folded in; the output rescaled every tile."""
    return _fixed_rung(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, scale, max_seqlen_q, max_seqlen_k, out, lse,
                       skip=True, exp2=True, lazy=False, longest_first=False)


def attention_exp2_lazy(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, *, causal=False, scale=None,
                        max_seqlen_q=None, max_seqlen_k=None, out, lse=None):
    """exp2, rescaling only when a row max grows by > 2^8 (decided for the whole block)."""
    return _fixed_rung(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, scale, max_seqlen_q, max_seqlen_k, out, lse,
                       skip=True, exp2=True, lazy=True, longest_first=False)


def attention_pipelined(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, *, causal=False, scale=None,
                        max_seqlen_q=None, max_seqlen_k=None, out, lse=None):
    """exp2_lazy with the next key tile's scores computed before this tile's softmax (their wgmma overlaps it)."""
    return _fixed_rung(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, scale, max_seqlen_q, max_seqlen_k, out, lse,
                       pipeline=True, skip=True, exp2=True, lazy=True, longest_first=False)


def launch_tuned(q, k, v, out, lse, p: _Problem, causal: bool, scale: float, cfg: AttentionConfig):
    return _launch_flash(q, k, v, out, lse, p, causal, scale, fit(cfg, p.max_q, p.max_k), skip=True, exp2=True,
                         lazy=cfg.lazy, longest_first=True)


def tuned_size(p: _Problem, causal: bool) -> tuple[int, ...]:
    from kernelwright.ops.attention.spec import encode

    return encode(p.batch, p.hq, p.hkv, p.max_q, p.max_k, p.d, causal=causal, varlen=p.varlen)


def attention_tuned(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, *, causal=False, scale=None, max_seqlen_q=None,
                    max_seqlen_k=None, out, lse=None, config: AttentionConfig | None = None):
    """exp2_lazy with the launch config searched per bucket (``config`` forces one) and causal blocks longest
    first."""
    lse = _scratch_lse(out, cu_seqlens_q is not None, lse)
    p = _problem(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, out, lse)
    if _trivial(p, out, lse):
        return out
    scale = 1.0 / math.sqrt(p.d) if scale is None else scale
    if config is None:
        config = tune.best(TUNED, tuned_size(p, causal), q.dtype,
                           lambda cfg: lambda: launch_tuned(q, k, v, out, lse, p, causal, scale, cfg))
    return launch_tuned(q, k, v, out, lse, p, causal, scale, config)
