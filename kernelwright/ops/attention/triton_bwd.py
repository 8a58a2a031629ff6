"""Flash attention backward in Triton: dq, dk, dv from q, k, v, the forward's output o and its log-sum-exp lse.

Legend: B batch, Hq / Hkv query / key-value heads (GQA group G = Hq / Hkv), Sq / Skv lengths of one sequence, D
head dim, BM / BN query-row / key block sizes. Padded tensors are [B, H, S, D]; packed (varlen) ones [T, H, D]
with ``cu_seqlens`` offsets. Every kernel addresses both through (batch, head, token, dim) strides: a packed
tensor has batch stride 0 and its sequence starts at ``cu_seqlens[b]``.

With S = scale * q k^T (bottom-right causal mask: query i sees key j <= i + Skv - Sq), P = exp(S - lse),
dP = dO v^T and delta = rowsum(dO * o) (= sum_j P dP):

    dv = P^T dO,   dS = P * (dP - delta),   dk = scale * dS^T q,   dq = scale * dS k

Kernels (the FA2 split: no atomics, every output element summed in one fixed order, so bitwise deterministic):

* ``_bwd_preprocess_kernel``: delta (minus the gradient of lse when the caller differentiates lse too) and
  lse * log2(e) as fp32 [B, Hq, Sq] (packed: [Hq, Tq]), +inf where lse = -inf (a fully masked row), so that
  P = exp2(S * scale * log2(e) - lse2) is exactly 0 there and no row needs a NaN guard.
* ``_bwd_dkdv_kernel``: one program per (key block, batch, kv head) keeps k and v in registers and walks the query
  blocks that can see them, of every query head of its GQA group (dk, dv are sums over the group, in registers).
  Under a causal mask it starts at the first query row that sees the block and masks only the diagonal blocks.
* ``_bwd_dq_kernel``: one program per (query block, batch, query head) walks the key blocks its rows can see;
  unmasked blocks first, the diagonal and ragged last block with a mask.

The dq kernel recomputes S and dP (7 matmuls a pair instead of 5): the price of determinism without atomics.
P and dS are rounded to the input dtype before their matmuls (as FA2), accumulators are fp32, outputs rounded
once. Under the CPU interpreter ``tl.dot`` on bf16 operands is wrong (Triton 3.6), so bf16 tiles are upcast to
fp32 there (``UPCAST``) after the same rounding; the GPU never does.

The ``naive`` rung materialises P and dS as fp32 [B, Hq, Sq, Skv] buffers (as eager attention does) and reads them
back for dq, dk and dv: the ladder's first step.

Launchers take ``out=(dq, dk, dv)`` and return it. Config dataclasses give the block sizes, warps and pipeline
stages; the ``tuned`` rung searches them per shape bucket (see ``DKDV_SPACE`` / ``DQ_SPACE``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernelwright import runtime, tune
from kernelwright.ops._triton_helpers import to_output

LOG2E = 1.4426950408889634


# ---------------------------------------------------------------------------------------------------------------
# shared @triton.jit helpers


@triton.jit
def _le0(x):
    """P's exponent, <= 0 in exact arithmetic; the FFMA with the unrounded product can put it ~1e5 above that at
    scores of ~1e12, and exp2 then gives inf. Clamped to 0 (NaN still propagates)."""
    return tl.minimum(x, 0.0, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _dot(a, b, UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    """a @ b with an fp32 result (exact fp32 products for fp32 operands: PRECISION "ieee")."""
    if UPCAST:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return tl.dot(a, b, input_precision=PRECISION)


@triton.jit
def _seq(CU, b, seqlen, VARLEN: tl.constexpr):
    """(first token, length) of sequence ``b``: from ``cu_seqlens`` when packed, (0, seqlen) when padded."""
    if VARLEN:
        start = tl.load(CU + b).to(tl.int64)  # token offsets times strides can pass 2^31 in a packed batch
        return start, tl.load(CU + b + 1).to(tl.int64) - start
    else:
        return b * 0, b * 0 + seqlen


@triton.jit
def _program(CU_Q, CU_K, bh, n_heads, seqlen_q, seqlen_k, VARLEN: tl.constexpr):
    """A program's (batch, head, first query token, query count, first key token, key count) from its batch-head
    index ``bh`` (``n_heads``: of the kind the grid walks, query or kv heads)."""
    b = (bh // n_heads).to(tl.int64)
    q_start, len_q = _seq(CU_Q, b, seqlen_q, VARLEN)
    k_start, len_k = _seq(CU_K, b, seqlen_k, VARLEN)
    return b, (bh % n_heads).to(tl.int64), q_start, len_q, k_start, len_k


@triton.jit
def _tile(base, rows, stride_s, stride_d, n_rows, offs_d, HEAD_DIM: tl.constexpr, EVEN_D: tl.constexpr):
    """[len(rows), BLOCK_D] tile of a (token, dim) matrix; rows >= n_rows and dims >= HEAD_DIM read as 0."""
    ptrs = base + rows[:, None] * stride_s + offs_d[None, :] * stride_d
    if EVEN_D:
        return tl.load(ptrs, mask=(rows < n_rows)[:, None], other=0.0)
    else:
        return tl.load(ptrs, mask=(rows < n_rows)[:, None] & (offs_d < HEAD_DIM)[None, :], other=0.0)


@triton.jit
def _store_tile(base, val, rows, stride_s, stride_d, n_rows, offs_d, HEAD_DIM: tl.constexpr):
    ptrs = base + rows[:, None] * stride_s + offs_d[None, :] * stride_d
    tl.store(ptrs, to_output(val, base.dtype.element_ty), mask=(rows < n_rows)[:, None] & (offs_d < HEAD_DIM)[None, :])


@triton.jit
def _rounded(x, DTYPE: tl.constexpr, UPCAST: tl.constexpr):
    """x (fp32) rounded to the input dtype for a matmul operand (kept fp32 under UPCAST, after the rounding)."""
    y = to_output(x, DTYPE)
    if UPCAST:
        y = y.to(tl.float32)
    return y


# ---------------------------------------------------------------------------------------------------------------
# preprocess: delta = rowsum(dO * o) (- dlse), lse2 = lse * log2(e) (+inf for fully masked rows)


@triton.jit
def _bwd_preprocess_kernel(o_ptr, do_ptr, lse_ptr, dlse_ptr, delta_ptr, lse2_ptr, cu_q_ptr,
                           s_ob, s_oh, s_os, s_od, s_dob, s_doh, s_dos, s_dod, s_lb, s_lh, s_ls,
                           s_gb, s_gh, s_gs, s_tb, s_th,
                           n_heads, seqlen_q,
                           HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
                           VARLEN: tl.constexpr, HAS_DLSE: tl.constexpr):
    # grid (query blocks, B * Hq)
    bh = tl.program_id(1)
    b = (bh // n_heads).to(tl.int64)
    h = (bh % n_heads).to(tl.int64)
    q_start, len_q = _seq(cu_q_ptr, b, seqlen_q, VARLEN)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    rows = offs_m < len_q
    tok = q_start + offs_m
    dmask = rows[:, None] & (offs_d < HEAD_DIM)[None, :]
    o = tl.load(o_ptr + b * s_ob + h * s_oh + tok[:, None] * s_os + offs_d[None, :] * s_od, mask=dmask, other=0.0)
    do = tl.load(do_ptr + b * s_dob + h * s_doh + tok[:, None] * s_dos + offs_d[None, :] * s_dod, mask=dmask, other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)                            # [BM]
    if HAS_DLSE:
        delta -= tl.load(dlse_ptr + b * s_gb + h * s_gh + tok * s_gs, mask=rows, other=0.0).to(tl.float32)
    lse = tl.load(lse_ptr + b * s_lb + h * s_lh + tok * s_ls, mask=rows, other=0.0)
    lse2 = tl.where(lse == float("-inf"), float("inf"), lse * 1.4426950408889634)
    out = b * s_tb + h * s_th + tok
    tl.store(delta_ptr + out, delta, mask=rows)
    tl.store(lse2_ptr + out, lse2, mask=rows)


# ---------------------------------------------------------------------------------------------------------------
# fa2 split, kernel 1: dk and dv, one key block a program


@triton.jit
def _dkdv_steps(dk, dv, k, v, q_base, do_base, lse2_base, delta_base, s_qs, s_qd, s_dos, s_dod,
                offs_n, offs_d, len_q, len_k, causal_off, m_lo, m_hi, qk_scale2,
                HEAD_DIM: tl.constexpr, EVEN_D: tl.constexpr, EVEN_N: tl.constexpr, BLOCK_M: tl.constexpr,
                MASK: tl.constexpr, DTYPE: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    """Accumulate the query blocks [m_lo, m_hi) of one query head into dk, dv [BN, BLOCK_D] (transposed
    formulation: S^T = k q^T [BN, BM], so P^T feeds dv = P^T dO without a transpose). Rows past len_q read as
    zeros and add nothing; keys past len_k (a ragged last block, unless EVEN_N) are zeroed in P, or their
    P = exp2(-lse2) and dS (unstored) could overflow."""
    for m0 in range(m_lo, m_hi, BLOCK_M):
        offs_m = m0 + tl.arange(0, BLOCK_M)
        q = _tile(q_base, offs_m, s_qs, s_qd, len_q, offs_d, HEAD_DIM, EVEN_D)          # [BM, BD]
        do = _tile(do_base, offs_m, s_dos, s_dod, len_q, offs_d, HEAD_DIM, EVEN_D)      # [BM, BD]
        lse2 = tl.load(lse2_base + offs_m, mask=offs_m < len_q, other=0.0)              # [BM]
        delta = tl.load(delta_base + offs_m, mask=offs_m < len_q, other=0.0)            # [BM]
        st = _dot(k, tl.trans(q), UPCAST, PRECISION)                                     # [BN, BM]
        pt = tl.math.exp2(_le0(st * qk_scale2 - lse2[None, :]))
        if MASK:
            pt = tl.where(offs_n[:, None] <= offs_m[None, :] + causal_off, pt, 0.0)
        if not EVEN_N:
            pt = tl.where((offs_n < len_k)[:, None], pt, 0.0)
        dv += _dot(_rounded(pt, DTYPE, UPCAST), do, UPCAST, PRECISION)                  # P^T dO
        dpt = _dot(v, tl.trans(do), UPCAST, PRECISION)                                   # dP^T = v dO^T
        dst = pt * (dpt - delta[None, :])
        dk += _dot(_rounded(dst, DTYPE, UPCAST), q, UPCAST, PRECISION)                  # dS^T q
    return dk, dv


@triton.jit
def _bwd_dkdv_kernel(Q, K, V, DO, DK, DV, LSE2, DELTA, CU_Q, CU_K, qk_scale2, sm_scale,
                     s_qb, s_qh, s_qs, s_qd, s_kb, s_kh, s_ks, s_kd, s_vb, s_vh, s_vs, s_vd,
                     s_dob, s_doh, s_dos, s_dod, s_dkb, s_dkh, s_dks, s_dkd, s_dvb, s_dvh, s_dvs, s_dvd,
                     s_tb, s_th, n_heads_kv, seqlen_q, seqlen_k,
                     GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr, EVEN_N: tl.constexpr, CAUSAL: tl.constexpr, VARLEN: tl.constexpr,
                     UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    # grid (key blocks, B * Hkv); EVEN_N: every sequence's key count is a multiple of BLOCK_N
    b, hkv, q_start, len_q, k_start, len_k = _program(CU_Q, CU_K, tl.program_id(1), n_heads_kv, seqlen_q, seqlen_k,
                                                      VARLEN)
    EVEN_D: tl.constexpr = BLOCK_D == HEAD_DIM
    DTYPE: tl.constexpr = Q.dtype.element_ty
    n0 = tl.program_id(0) * BLOCK_N
    if n0 < len_k:
        offs_n = n0 + tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, BLOCK_D)
        k_base = K + b * s_kb + hkv * s_kh + k_start * s_ks
        v_base = V + b * s_vb + hkv * s_vh + k_start * s_vs
        k = _tile(k_base, offs_n, s_ks, s_kd, len_k, offs_d, HEAD_DIM, EVEN_D)            # [BN, BD]
        v = _tile(v_base, offs_n, s_vs, s_vd, len_k, offs_d, HEAD_DIM, EVEN_D)            # [BN, BD]
        dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
        dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
        causal_off = len_k - len_q  # query i sees key j <= i + causal_off
        if CAUSAL:
            # rows below m_lo see no key of this block; blocks from m_mid on see all of them
            m_lo = tl.maximum(n0 - causal_off, 0) // BLOCK_M * BLOCK_M
            m_mid = m_lo + tl.cdiv(tl.maximum(n0 + BLOCK_N - 1 - causal_off - m_lo, 0), BLOCK_M) * BLOCK_M
        else:
            m_lo = n0 * 0
            m_mid = n0 * 0
        for g in range(GROUP):
            hq = hkv * GROUP + g
            q_base = Q + b * s_qb + hq * s_qh + q_start * s_qs
            do_base = DO + b * s_dob + hq * s_doh + q_start * s_dos
            t_off = b * s_tb + hq * s_th + q_start
            if CAUSAL:
                dk, dv = _dkdv_steps(dk, dv, k, v, q_base, do_base, LSE2 + t_off, DELTA + t_off, s_qs, s_qd,
                                     s_dos, s_dod, offs_n, offs_d, len_q, len_k, causal_off, m_lo,
                                     tl.minimum(m_mid, len_q), qk_scale2, HEAD_DIM, EVEN_D, EVEN_N, BLOCK_M, True,
                                     DTYPE, UPCAST, PRECISION)
            dk, dv = _dkdv_steps(dk, dv, k, v, q_base, do_base, LSE2 + t_off, DELTA + t_off, s_qs, s_qd,
                                 s_dos, s_dod, offs_n, offs_d, len_q, len_k, causal_off, m_mid, len_q, qk_scale2,
                                 HEAD_DIM, EVEN_D, EVEN_N, BLOCK_M, False, DTYPE, UPCAST, PRECISION)
        dk_base = DK + b * s_dkb + hkv * s_dkh + k_start * s_dks
        dv_base = DV + b * s_dvb + hkv * s_dvh + k_start * s_dvs
        _store_tile(dk_base, dk * sm_scale, offs_n, s_dks, s_dkd, len_k, offs_d, HEAD_DIM)
        _store_tile(dv_base, dv, offs_n, s_dvs, s_dvd, len_k, offs_d, HEAD_DIM)


# ---------------------------------------------------------------------------------------------------------------
# fa2 split, kernel 2: dq, one query block a program


@triton.jit
def _dq_steps(dq, q, do, lse2, delta, k_base, v_base, s_ks, s_kd, s_vs, s_vd, offs_m, offs_d, len_k, causal_off,
              n_lo, n_hi, qk_scale2, HEAD_DIM: tl.constexpr, EVEN_D: tl.constexpr, BLOCK_N: tl.constexpr,
              MASK: tl.constexpr, CAUSAL: tl.constexpr, DTYPE: tl.constexpr, UPCAST: tl.constexpr,
              PRECISION: tl.constexpr):
    """Accumulate the key blocks [n_lo, n_hi) into dq [BM, BLOCK_D]; MASK: the causal diagonal and keys past
    len_k (a ragged last block: its zero-filled keys would give P = exp2(-lse2), possibly inf, times k = 0)."""
    for n0 in range(n_lo, n_hi, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        k = _tile(k_base, offs_n, s_ks, s_kd, len_k, offs_d, HEAD_DIM, EVEN_D)           # [BN, BD]
        v = _tile(v_base, offs_n, s_vs, s_vd, len_k, offs_d, HEAD_DIM, EVEN_D)           # [BN, BD]
        s = _dot(q, tl.trans(k), UPCAST, PRECISION)                                       # [BM, BN]
        p = tl.math.exp2(_le0(s * qk_scale2 - lse2[:, None]))
        if MASK:
            keep = (offs_n < len_k)[None, :]
            if CAUSAL:
                keep = keep & (offs_n[None, :] <= offs_m[:, None] + causal_off)
            p = tl.where(keep, p, 0.0)
        dp = _dot(do, tl.trans(v), UPCAST, PRECISION)                                    # [BM, BN]
        ds = p * (dp - delta[:, None])
        dq += _dot(_rounded(ds, DTYPE, UPCAST), k, UPCAST, PRECISION)                    # dS k
    return dq


@triton.jit
def _bwd_dq_kernel(Q, K, V, DO, DQ, LSE2, DELTA, CU_Q, CU_K, qk_scale2, sm_scale,
                   s_qb, s_qh, s_qs, s_qd, s_kb, s_kh, s_ks, s_kd, s_vb, s_vh, s_vs, s_vd,
                   s_dob, s_doh, s_dos, s_dod, s_dqb, s_dqh, s_dqs, s_dqd, s_tb, s_th,
                   n_heads, seqlen_q, seqlen_k,
                   GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, VARLEN: tl.constexpr, UPCAST: tl.constexpr,
                   PRECISION: tl.constexpr):
    # grid (query blocks, B * Hq)
    b, h, q_start, len_q, k_start, len_k = _program(CU_Q, CU_K, tl.program_id(1), n_heads, seqlen_q, seqlen_k,
                                                    VARLEN)
    hkv = h // GROUP
    EVEN_D: tl.constexpr = BLOCK_D == HEAD_DIM
    DTYPE: tl.constexpr = Q.dtype.element_ty
    m0 = tl.program_id(0) * BLOCK_M
    if m0 < len_q:
        offs_m = m0 + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, BLOCK_D)
        q = _tile(Q + b * s_qb + h * s_qh + q_start * s_qs, offs_m, s_qs, s_qd, len_q, offs_d, HEAD_DIM, EVEN_D)
        do = _tile(DO + b * s_dob + h * s_doh + q_start * s_dos, offs_m, s_dos, s_dod, len_q, offs_d, HEAD_DIM,
                   EVEN_D)
        t_off = b * s_tb + h * s_th + q_start
        lse2 = tl.load(LSE2 + t_off + offs_m, mask=offs_m < len_q, other=0.0)
        delta = tl.load(DELTA + t_off + offs_m, mask=offs_m < len_q, other=0.0)
        k_base = K + b * s_kb + hkv * s_kh + k_start * s_ks
        v_base = V + b * s_vb + hkv * s_vh + k_start * s_vs
        dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
        causal_off = len_k - len_q
        full = len_k // BLOCK_N * BLOCK_N  # key blocks with no column past len_k
        if CAUSAL:
            # keys the block's last row sees end at n_hi; blocks before n_full are seen whole by its first row
            n_hi = tl.minimum(len_k, tl.maximum(m0 + BLOCK_M + causal_off, 0))
            n_full = tl.minimum(tl.maximum(m0 + causal_off + 1, 0) // BLOCK_N * BLOCK_N, full)
        else:
            n_hi = len_k
            n_full = full
        dq = _dq_steps(dq, q, do, lse2, delta, k_base, v_base, s_ks, s_kd, s_vs, s_vd, offs_m, offs_d, len_k,
                       causal_off, 0, n_full, qk_scale2, HEAD_DIM, EVEN_D, BLOCK_N, False, CAUSAL, DTYPE, UPCAST,
                       PRECISION)
        dq = _dq_steps(dq, q, do, lse2, delta, k_base, v_base, s_ks, s_kd, s_vs, s_vd, offs_m, offs_d, len_k,
                       causal_off, n_full, n_hi, qk_scale2, HEAD_DIM, EVEN_D, BLOCK_N, True, CAUSAL, DTYPE, UPCAST,
                       PRECISION)
        _store_tile(DQ + b * s_dqb + h * s_dqh + q_start * s_dqs, dq * sm_scale, offs_m, s_dqs, s_dqd, len_q,
                    offs_d, HEAD_DIM)


# ---------------------------------------------------------------------------------------------------------------
# naive: P and dS materialised in fp32, then three matmul-like kernels read them back


@triton.jit
def _naive_pds_kernel(Q, K, V, DO, P, DS, LSE2, DELTA, CU_Q, CU_K, qk_scale2,
                      s_qb, s_qh, s_qs, s_qd, s_kb, s_kh, s_ks, s_kd, s_vb, s_vh, s_vs, s_vd,
                      s_dob, s_doh, s_dos, s_dod, s_pb, s_ph, s_ps, s_tb, s_th,
                      n_heads, seqlen_q, seqlen_k,
                      GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
                      BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, VARLEN: tl.constexpr, UPCAST: tl.constexpr,
                      PRECISION: tl.constexpr):
    # grid (query blocks, key blocks, B * Hq): every tile of the score matrix, masked or not (as eager code)
    b, h, q_start, len_q, k_start, len_k = _program(CU_Q, CU_K, tl.program_id(2), n_heads, seqlen_q, seqlen_k,
                                                    VARLEN)
    hkv = h // GROUP
    EVEN_D: tl.constexpr = BLOCK_D == HEAD_DIM
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    q = _tile(Q + b * s_qb + h * s_qh + q_start * s_qs, offs_m, s_qs, s_qd, len_q, offs_d, HEAD_DIM, EVEN_D)
    do = _tile(DO + b * s_dob + h * s_doh + q_start * s_dos, offs_m, s_dos, s_dod, len_q, offs_d, HEAD_DIM, EVEN_D)
    k = _tile(K + b * s_kb + hkv * s_kh + k_start * s_ks, offs_n, s_ks, s_kd, len_k, offs_d, HEAD_DIM, EVEN_D)
    v = _tile(V + b * s_vb + hkv * s_vh + k_start * s_vs, offs_n, s_vs, s_vd, len_k, offs_d, HEAD_DIM, EVEN_D)
    t_off = b * s_tb + h * s_th + q_start
    lse2 = tl.load(LSE2 + t_off + offs_m, mask=offs_m < len_q, other=0.0)
    delta = tl.load(DELTA + t_off + offs_m, mask=offs_m < len_q, other=0.0)
    inside = (offs_m < len_q)[:, None] & (offs_n < len_k)[None, :]
    keep = inside
    if CAUSAL:
        keep = keep & (offs_n[None, :] <= offs_m[:, None] + (len_k - len_q))
    p = tl.where(keep, tl.math.exp2(_le0(_dot(q, tl.trans(k), UPCAST, PRECISION) * qk_scale2 - lse2[:, None])), 0.0)
    ds = p * (_dot(do, tl.trans(v), UPCAST, PRECISION) - delta[:, None])
    at = b * s_pb + h * s_ph + (q_start + offs_m)[:, None] * s_ps + offs_n[None, :]
    tl.store(P + at, p, mask=inside)     # write 4 B x Sq x Skv a head
    tl.store(DS + at, ds, mask=inside)   # and again


@triton.jit
def _naive_dq_kernel(DS, K, DQ, CU_Q, CU_K, sm_scale, s_pb, s_ph, s_ps, s_kb, s_kh, s_ks, s_kd,
                     s_dqb, s_dqh, s_dqs, s_dqd, n_heads, seqlen_q, seqlen_k,
                     GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr, VARLEN: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    # grid (query blocks, B * Hq): dq = scale * dS k, reading the whole dS row block
    b, h, q_start, len_q, k_start, len_k = _program(CU_Q, CU_K, tl.program_id(1), n_heads, seqlen_q, seqlen_k,
                                                    VARLEN)
    EVEN_D: tl.constexpr = BLOCK_D == HEAD_DIM
    DTYPE: tl.constexpr = K.dtype.element_ty
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    k_base = K + b * s_kb + (h // GROUP) * s_kh + k_start * s_ks
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    for n0 in range(0, len_k, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        at = b * s_pb + h * s_ph + (q_start + offs_m)[:, None] * s_ps + offs_n[None, :]
        ds = tl.load(DS + at, mask=(offs_m < len_q)[:, None] & (offs_n < len_k)[None, :], other=0.0)
        k = _tile(k_base, offs_n, s_ks, s_kd, len_k, offs_d, HEAD_DIM, EVEN_D)
        dq += _dot(_rounded(ds, DTYPE, UPCAST), k, UPCAST, PRECISION)
    _store_tile(DQ + b * s_dqb + h * s_dqh + q_start * s_dqs, dq * sm_scale, offs_m, s_dqs, s_dqd, len_q, offs_d,
                HEAD_DIM)


@triton.jit
def _naive_dkdv_kernel(P, DS, Q, DO, DK, DV, CU_Q, CU_K, sm_scale, s_pb, s_ph, s_ps,
                       s_qb, s_qh, s_qs, s_qd, s_dob, s_doh, s_dos, s_dod,
                       s_dkb, s_dkh, s_dks, s_dkd, s_dvb, s_dvh, s_dvs, s_dvd, n_heads_kv, seqlen_q, seqlen_k,
                       GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
                       BLOCK_N: tl.constexpr, VARLEN: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    # grid (key blocks, B * Hkv): dk = scale * sum_g dS^T q, dv = sum_g P^T dO, reading whole columns of P and dS
    b, hkv, q_start, len_q, k_start, len_k = _program(CU_Q, CU_K, tl.program_id(1), n_heads_kv, seqlen_q, seqlen_k,
                                                      VARLEN)
    EVEN_D: tl.constexpr = BLOCK_D == HEAD_DIM
    DTYPE: tl.constexpr = Q.dtype.element_ty
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    for g in range(GROUP):
        h = hkv * GROUP + g
        for m0 in range(0, len_q, BLOCK_M):
            offs_m = m0 + tl.arange(0, BLOCK_M)
            at = b * s_pb + h * s_ph + (q_start + offs_m)[None, :] * s_ps + offs_n[:, None]        # [BN, BM]
            inside = (offs_m < len_q)[None, :] & (offs_n < len_k)[:, None]
            pt = tl.load(P + at, mask=inside, other=0.0)
            dst = tl.load(DS + at, mask=inside, other=0.0)
            q = _tile(Q + b * s_qb + h * s_qh + q_start * s_qs, offs_m, s_qs, s_qd, len_q, offs_d, HEAD_DIM, EVEN_D)
            do = _tile(DO + b * s_dob + h * s_doh + q_start * s_dos, offs_m, s_dos, s_dod, len_q, offs_d, HEAD_DIM,
                       EVEN_D)
            dv += _dot(_rounded(pt, DTYPE, UPCAST), do, UPCAST, PRECISION)
            dk += _dot(_rounded(dst, DTYPE, UPCAST), q, UPCAST, PRECISION)
    _store_tile(DK + b * s_dkb + hkv * s_dkh + k_start * s_dks, dk * sm_scale, offs_n, s_dks, s_dkd, len_k, offs_d,
                HEAD_DIM)
    _store_tile(DV + b * s_dvb + hkv * s_dvh + k_start * s_dvs, dv, offs_n, s_dvs, s_dvd, len_k, offs_d, HEAD_DIM)


# ---------------------------------------------------------------------------------------------------------------
# configs


@dataclass(frozen=True)
class KernelConfig:
    """Launch config of one backward kernel: ``BLOCK_M`` query rows and ``BLOCK_N`` keys a tile (the dk/dv kernel
    keeps BLOCK_N keys and steps over BLOCK_M rows; the dq kernel keeps BLOCK_M rows and steps over BLOCK_N keys)."""

    BLOCK_M: int
    BLOCK_N: int
    num_warps: int
    num_stages: int


@dataclass(frozen=True)
class BwdConfig:
    dkdv: KernelConfig
    dq: KernelConfig


def default_config(d: int, dtype: torch.dtype, group: int = 1) -> BwdConfig:
    """Default configs (H100/H200, wgmma). At D 64 and 128 in 16 bits, the configs ``kw tune attention_bwd`` chose
    on the H200 (runs 47-49: B4 H32 without GQA, S 1k-16k, both masks): the dk/dv kernel keeps 64 keys on 4 warps
    over 3 stages of 32 query rows (13 of 14 buckets), the dq kernel 128 rows on 8 warps over 3 stages of 64 keys
    (the non-causal buckets). Until then the dk/dv kernel kept 128 keys on 8 warps, 2 stages: 10-40% slower there.
    With a GQA ``group`` > 1 at D 128 the dk/dv kernel keeps the old config: the new one spills 520 bytes a thread
    in its group loop (kw inspect, sm_90; the old one 96), and no GQA bucket has been timed. D 256: the largest
    tiles that compile without spills (kw inspect, sm_90)."""
    bd = block_d(d)
    if dtype == torch.float32:  # exact fp32 products run as FMAs from shared memory: small tiles, 8 warps (the
        # largest that compile without spills on sm_90 at D 64 and 128: kw inspect)
        if bd <= 128:
            return BwdConfig(KernelConfig(16, 64, 8, 2), KernelConfig(64, 16, 8, 2))
        return BwdConfig(KernelConfig(16, 32, 8, 2), KernelConfig(32, 16, 8, 2))
    if bd <= 64 or (bd <= 128 and group <= 1):
        return BwdConfig(KernelConfig(32, 64, 4, 3), KernelConfig(128, 64, 8, 3))
    if bd <= 128:
        return BwdConfig(KernelConfig(32, 128, 8, 2), KernelConfig(128, 64, 8, 3))
    return BwdConfig(KernelConfig(16, 64, 8, 2), KernelConfig(64, 32, 8, 2))


def naive_config(d: int) -> KernelConfig:
    """The naive rung's tiles (one config for its three kernels): 64 x 64, or 32 x 32 at D 256, where the dk/dv
    kernel's 64-row stages would need 256 KB of shared memory (kw inspect, sm_90)."""
    return KernelConfig(64, 64, 4, 2) if block_d(d) <= 128 else KernelConfig(32, 32, 8, 2)


def block_d(d: int) -> int:
    return max(16, triton.next_power_of_2(d))


# tuned rung: two spaces, one a kernel, searched separately (each timed alone on the same problem)
_DKDV_CANDIDATES = ((32, 128, 4, 3), (32, 128, 8, 2), (32, 128, 8, 3), (64, 128, 8, 2), (16, 128, 4, 3),
                    (32, 64, 4, 3), (64, 64, 4, 3), (16, 64, 8, 2))
_DQ_CANDIDATES = ((128, 32, 4, 3), (128, 32, 8, 2), (128, 64, 8, 2), (128, 64, 8, 3), (64, 64, 4, 3),
                  (64, 32, 4, 3), (128, 16, 4, 3), (64, 32, 8, 2))


def _space_configs(candidates):
    return lambda dtype: [KernelConfig(*c) for c in candidates]


def _elt(dtype: torch.dtype) -> int:
    return torch.finfo(dtype).bits // 8


def _prune_for(kernel: str):
    def prune(cfg: KernelConfig, size, dtype, limits: tune.Limits) -> str | None:
        d = block_d(size[5])
        threads = 32 * cfg.num_warps
        # fp32 accumulators: dk and dv [BN, D] (dkdv), dq [BM, D] (dq); kept plus streamed tiles in smem
        kept, streamed = (cfg.BLOCK_N, cfg.BLOCK_M) if kernel == "dkdv" else (cfg.BLOCK_M, cfg.BLOCK_N)
        # registers a thread for the kept block's state: dk and dv in fp32 (dkdv); dq in fp32 plus q and dO in
        # 16 bits (dq). Past 128 of the 255 the compiler spills (kw inspect, sm_90: D128 dq 128x32 with 4 warps
        # spills 284 B a thread; 128x64 with 8 warps does not)
        regs = 2 * kept * d // threads
        if regs > 128:
            return f"~{regs} registers a thread for the {kept}-row block's state (> 128 of 255: spills)"
        smem = 2 * (kept + cfg.num_stages * streamed) * d * _elt(dtype)
        if smem > limits.smem_per_block:
            return f"~{smem // 1024} KB of shared memory > {limits.smem_per_block // 1024} KB"
        if kept > max(64, tune.pow2_bucket(size[4 if kernel == "dkdv" else 3])):
            return "block longer than the sequence"
        return None

    return prune


def _bucket(size) -> str:
    """Head dim, mask, GQA group and the lengths in four classes: tile choices depend on D (registers) and on how
    many blocks fill the GPU, not on the exact length."""
    b, hq, hkv, sq, sk, d, mask = size

    def cls(n):
        return "s" if n <= 512 else "m" if n <= 2048 else "l" if n <= 8192 else "xl"

    return f"d{block_d(d)}-{'causal' if mask == 2 else 'full'}-g{hq // max(hkv, 1)}-q{cls(sq)}-k{cls(sk)}-" \
           f"bh{tune.pow2_bucket(b * hq)}"


def _space_default(kernel: str):
    def default(size, dtype) -> KernelConfig:
        cfg = default_config(size[5], dtype, size[1] // max(size[2], 1))
        return cfg.dkdv if kernel == "dkdv" else cfg.dq

    return default


DKDV_SPACE = tune.Space("attention_bwd.dkdv", KernelConfig, _space_configs(_DKDV_CANDIDATES), _prune_for("dkdv"),
                        _bucket, _space_default("dkdv"))
DQ_SPACE = tune.Space("attention_bwd.dq", KernelConfig, _space_configs(_DQ_CANDIDATES), _prune_for("dq"), _bucket,
                      _space_default("dq"))


# ---------------------------------------------------------------------------------------------------------------
# launchers


@dataclass
class Problem:
    """One backward call's tensors and geometry, padded or packed, with the (batch, head, token, dim) strides
    every kernel takes."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    o: torch.Tensor
    lse: torch.Tensor
    do: torch.Tensor
    dlse: torch.Tensor | None
    causal: bool
    scale: float
    cu_q: torch.Tensor | None
    cu_k: torch.Tensor | None
    batch: int
    hq: int
    hkv: int
    sq: int
    """Sq (padded) or the longest query sequence (packed)"""
    sk: int
    d: int

    @property
    def varlen(self) -> bool:
        return self.cu_q is not None

    def size(self) -> tuple[int, ...]:
        """The family's size tuple (B, Hq, Hkv, Sq, Skv, D, mask): what tuning buckets are keyed on."""
        return (self.batch, self.hq, self.hkv, self.sq, self.sk, self.d, 2 if self.causal else 1)

    def strides(self, t: torch.Tensor) -> tuple[int, int, int, int]:
        """(batch, head, token, dim) strides of a q- or k-shaped tensor."""
        if self.varlen:
            return 0, t.stride(1), t.stride(0), t.stride(2)
        return t.stride(0), t.stride(1), t.stride(2), t.stride(3)

    def stat_strides(self, t: torch.Tensor) -> tuple[int, int, int]:
        """(batch, head, token) strides of an lse-shaped tensor ([B, Hq, Sq] or [Hq, Tq])."""
        if self.varlen:
            return 0, t.stride(0), t.stride(1)
        return t.stride(0), t.stride(1), t.stride(2)

    def cu(self):
        return (self.cu_q, self.cu_k) if self.varlen else (self.lse, self.lse)  # unused pointers when padded


def make_problem(q, k, v, o, lse, do, *, causal: bool = False, scale: float | None = None, cu_seqlens_q=None,
                 cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None, dlse=None) -> Problem:
    """A :class:`Problem` from the family's inputs (shapes as in the module docstring; no checks beyond
    geometry: the public ops validate)."""
    d = q.shape[-1]
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    if cu_seqlens_q is not None:
        batch = cu_seqlens_q.numel() - 1
        hq, hkv = q.shape[1], k.shape[1]
        lens_q = (cu_seqlens_q[1:] - cu_seqlens_q[:-1]) if max_seqlen_q is None else None
        lens_k = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]) if max_seqlen_k is None else None
        sq = int(max_seqlen_q if max_seqlen_q is not None else (lens_q.max() if batch else 0))
        sk = int(max_seqlen_k if max_seqlen_k is not None else (lens_k.max() if batch else 0))
        cu_q, cu_k = cu_seqlens_q.to(torch.int32), cu_seqlens_k.to(torch.int32)
    else:
        batch, hq, sq = q.shape[0], q.shape[1], q.shape[2]
        hkv, sk = k.shape[1], k.shape[2]
        cu_q = cu_k = None
    return Problem(q, k, v, o, lse, do, dlse, bool(causal), scale, cu_q, cu_k, batch, hq, hkv, sq, sk, d)


def _upcast(dtype) -> bool:
    return runtime.interpreting() and dtype == torch.bfloat16


def _precision(dtype) -> str:
    return "ieee" if dtype == torch.float32 or _upcast(dtype) else "tf32"


def _statistics(pb: Problem) -> tuple[torch.Tensor, torch.Tensor, tuple[int, int]]:
    """(delta, lse2, their (batch, head) strides): fp32, laid out like lse but contiguous."""
    shape = (pb.hq, pb.q.shape[0]) if pb.varlen else (pb.batch, pb.hq, pb.sq)
    delta = torch.empty(shape, dtype=torch.float32, device=pb.q.device)
    lse2 = torch.empty(shape, dtype=torch.float32, device=pb.q.device)
    st = (0, delta.stride(0)) if pb.varlen else (delta.stride(0), delta.stride(1))
    block = 64
    grid = (triton.cdiv(pb.sq, block), pb.batch * pb.hq)
    if grid[0] and grid[1]:
        g = pb.dlse if pb.dlse is not None else pb.lse
        _bwd_preprocess_kernel[grid](
            pb.o, pb.do, pb.lse, g, delta, lse2, pb.cu()[0],
            *pb.strides(pb.o), *pb.strides(pb.do), *pb.stat_strides(pb.lse), *pb.stat_strides(g), *st,
            pb.hq, pb.sq, HEAD_DIM=pb.d, BLOCK_D=block_d(pb.d), BLOCK_M=block, VARLEN=pb.varlen,
            HAS_DLSE=pb.dlse is not None, num_warps=4)
    return delta, lse2, st


def _fit(cfg: KernelConfig, rows: int, cols: int) -> KernelConfig:
    """Shrink blocks far longer than the problem (16 is the smallest tile tl.dot takes)."""
    bm = min(cfg.BLOCK_M, max(16, triton.next_power_of_2(max(rows, 1))))
    bn = min(cfg.BLOCK_N, max(16, triton.next_power_of_2(max(cols, 1))))
    return KernelConfig(bm, bn, cfg.num_warps, cfg.num_stages)


def _launch_dkdv(pb: Problem, dk, dv, delta, lse2, st, cfg: KernelConfig) -> None:
    cfg = _fit(cfg, pb.sq, pb.sk)
    grid = (triton.cdiv(pb.sk, cfg.BLOCK_N), pb.batch * pb.hkv)
    if not (grid[0] and grid[1]):
        return
    cu_q, cu_k = pb.cu()
    _bwd_dkdv_kernel[grid](
        pb.q, pb.k, pb.v, pb.do, dk, dv, lse2, delta, cu_q, cu_k, pb.scale * LOG2E, pb.scale,
        *pb.strides(pb.q), *pb.strides(pb.k), *pb.strides(pb.v), *pb.strides(pb.do), *pb.strides(dk),
        *pb.strides(dv), *st, pb.hkv, pb.sq, pb.sk,
        GROUP=pb.hq // pb.hkv, HEAD_DIM=pb.d, BLOCK_D=block_d(pb.d), BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N,
        EVEN_N=not pb.varlen and pb.sk % cfg.BLOCK_N == 0, CAUSAL=pb.causal, VARLEN=pb.varlen,
        UPCAST=_upcast(pb.q.dtype), PRECISION=_precision(pb.q.dtype), num_warps=cfg.num_warps,
        num_stages=cfg.num_stages)


def _launch_dq(pb: Problem, dq, delta, lse2, st, cfg: KernelConfig) -> None:
    cfg = _fit(cfg, pb.sq, pb.sk)
    grid = (triton.cdiv(pb.sq, cfg.BLOCK_M), pb.batch * pb.hq)
    if not (grid[0] and grid[1]):
        return
    cu_q, cu_k = pb.cu()
    _bwd_dq_kernel[grid](
        pb.q, pb.k, pb.v, pb.do, dq, lse2, delta, cu_q, cu_k, pb.scale * LOG2E, pb.scale,
        *pb.strides(pb.q), *pb.strides(pb.k), *pb.strides(pb.v), *pb.strides(pb.do), *pb.strides(dq), *st,
        pb.hq, pb.sq, pb.sk,
        GROUP=pb.hq // pb.hkv, HEAD_DIM=pb.d, BLOCK_D=block_d(pb.d), BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N,
        CAUSAL=pb.causal, VARLEN=pb.varlen, UPCAST=_upcast(pb.q.dtype), PRECISION=_precision(pb.q.dtype),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages)


def _zero_empty(pb: Problem, out) -> bool:
    """Outputs with nothing to sum (no keys, no queries, no heads): zeros. True when nothing is left to do."""
    if pb.q.numel() == 0 or pb.k.numel() == 0 or pb.batch == 0:
        for t in out:
            t.zero_()
        return True
    return False


def fa2_backward(pb: Problem, out, config: BwdConfig | None = None):
    """The FA2 split: preprocess, dk/dv kernel, dq kernel, with ``config`` (default: :func:`default_config`)."""
    dq, dk, dv = out
    if _zero_empty(pb, out):
        return out
    if pb.varlen:  # tokens past the last sequence (if any) belong to no sequence: their gradients are 0
        for t, cu in ((dq, pb.cu_q), (dk, pb.cu_k), (dv, pb.cu_k)):
            t[int(cu[-1]):].zero_()
    config = config or default_config(pb.d, pb.q.dtype, pb.hq // pb.hkv)
    delta, lse2, st = _statistics(pb)
    _launch_dkdv(pb, dk, dv, delta, lse2, st, config.dkdv)
    _launch_dq(pb, dq, delta, lse2, st, config.dq)
    return out


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    """A tuning candidate's output against the default config's: the same sums in another order (and P, dS
    rounded from scores summed in another order), so within a few units of the output dtype's last place of the
    largest value; a config that drops or repeats a block is off by the size of the values."""
    eps = torch.finfo(a.dtype).eps
    bound = 4 * eps * float(b.abs().max()) + 1e-30
    return bool(torch.isfinite(a).all()) and float((a.float() - b.float()).abs().max()) <= bound


def tuned_backward(pb: Problem, out, config: BwdConfig | None = None):
    """The FA2 split with each kernel's config tuned per shape bucket (cached winner, else tuned now on CUDA, else
    the default)."""
    if _zero_empty(pb, out):
        return out
    if config is None:
        config = tuned_config(pb)
    return fa2_backward(pb, out, config)


def tuned_config(pb: Problem, force: bool = False, on_step=None) -> BwdConfig:
    """The winners for this problem's bucket (searching now when none is cached and autotuning is on, or with
    ``force``); each kernel is timed alone, candidates checked against the default config's output."""
    size, dtype = pb.size(), pb.q.dtype
    cached = (tune.lookup(DKDV_SPACE, size, dtype), tune.lookup(DQ_SPACE, size, dtype))
    if all(c is not None for c in cached) and not force:
        return BwdConfig(*cached)
    if not (force or tune.autotune_enabled()):
        return BwdConfig(cached[0] or DKDV_SPACE.default(size, dtype), cached[1] or DQ_SPACE.default(size, dtype))
    return BwdConfig(*(r.best for r in tune_problem(pb, force=force, on_step=on_step)))


def tune_problem(pb: Problem, force: bool = False, on_step=None) -> list:
    """Search both spaces for this problem (``kw tune`` and first use on CUDA); returns the two TuneResults."""
    size, dtype = pb.size(), pb.q.dtype
    default = default_config(pb.d, dtype, pb.hq // pb.hkv)
    delta, lse2, st = _statistics(pb)
    ref_dk, ref_dv, ref_dq = torch.empty_like(pb.k), torch.empty_like(pb.v), torch.empty_like(pb.q)
    _launch_dkdv(pb, ref_dk, ref_dv, delta, lse2, st, default.dkdv)
    _launch_dq(pb, ref_dq, delta, lse2, st, default.dq)

    def dkdv_call(cfg):
        dk, dv = torch.full_like(pb.k, float("nan")), torch.full_like(pb.v, float("nan"))
        return lambda: (_launch_dkdv(pb, dk, dv, delta, lse2, st, cfg), (dk, dv))[1]

    def dq_call(cfg):
        dq = torch.full_like(pb.q, float("nan"))
        return lambda: (_launch_dq(pb, dq, delta, lse2, st, cfg), dq)[1]

    results = []
    for space, call, check in (
        (DKDV_SPACE, dkdv_call, lambda o: _close(o[0], ref_dk) and _close(o[1], ref_dv)),
        (DQ_SPACE, dq_call, lambda o: _close(o, ref_dq)),
    ):
        cached = None if force else tune.lookup(space, size, dtype)
        if cached is not None:
            results.append(tune.TuneResult(space.name, tune.cache_key(space, size, dtype), cached, None, "cache"))
        else:
            results.append(tune.tune(space, size, dtype, call, check=check, on_step=on_step))
    return results


def _scratch_strides(pb: Problem, p: torch.Tensor) -> tuple[int, int, int]:
    return (0, p.stride(0), p.stride(1)) if pb.varlen else (p.stride(0), p.stride(1), p.stride(2))


def naive_backward(pb: Problem, out, config: KernelConfig | None = None):
    """Materialised: P and dS as fp32 [B, Hq, Sq, Skv] (packed: [Hq, Tq, max Skv]) buffers, then dq, dk, dv read
    them back."""
    dq, dk, dv = out
    if _zero_empty(pb, out):
        return out
    if pb.varlen:
        for t, cu in ((dq, pb.cu_q), (dk, pb.cu_k), (dv, pb.cu_k)):
            t[int(cu[-1]):].zero_()
    delta, lse2, st = _statistics(pb)
    shape = (pb.hq, pb.q.shape[0], pb.sk) if pb.varlen else (pb.batch, pb.hq, pb.sq, pb.sk)
    p = torch.empty(shape, dtype=torch.float32, device=pb.q.device)
    ds = torch.empty_like(p)
    sp = _scratch_strides(pb, p)
    cfg = _fit(config or naive_config(pb.d), pb.sq, pb.sk)
    bm, bn, bd = cfg.BLOCK_M, cfg.BLOCK_N, block_d(pb.d)
    cu_q, cu_k = pb.cu()
    common = dict(GROUP=pb.hq // pb.hkv, HEAD_DIM=pb.d, BLOCK_D=bd, BLOCK_M=bm, BLOCK_N=bn, VARLEN=pb.varlen,
                  UPCAST=_upcast(pb.q.dtype), PRECISION=_precision(pb.q.dtype), num_warps=cfg.num_warps,
                  num_stages=cfg.num_stages)
    _naive_pds_kernel[(triton.cdiv(pb.sq, bm), triton.cdiv(pb.sk, bn), pb.batch * pb.hq)](
        pb.q, pb.k, pb.v, pb.do, p, ds, lse2, delta, cu_q, cu_k, pb.scale * LOG2E,
        *pb.strides(pb.q), *pb.strides(pb.k), *pb.strides(pb.v), *pb.strides(pb.do), *sp, *st,
        pb.hq, pb.sq, pb.sk, CAUSAL=pb.causal, **common)
    _naive_dq_kernel[(triton.cdiv(pb.sq, bm), pb.batch * pb.hq)](
        ds, pb.k, dq, cu_q, cu_k, pb.scale, *sp, *pb.strides(pb.k), *pb.strides(dq), pb.hq, pb.sq, pb.sk, **common)
    _naive_dkdv_kernel[(triton.cdiv(pb.sk, bn), pb.batch * pb.hkv)](
        p, ds, pb.q, pb.do, dk, dv, cu_q, cu_k, pb.scale, *sp, *pb.strides(pb.q), *pb.strides(pb.do),
        *pb.strides(dk), *pb.strides(dv), pb.hkv, pb.sq, pb.sk, **common)
    return out


# ---------------------------------------------------------------------------------------------------------------
# rung functions: the attention_bwd family's inputs, out=(dq, dk, dv); ``dlse``, the gradient of the lse output
# when a caller used it, enters through delta (dS = P * (dP - delta + dlse))


def _rung(backward):
    def rung(q, k, v, o, lse, do, *, causal=False, scale=None, cu_seqlens_q=None, cu_seqlens_k=None,
             max_seqlen_q=None, max_seqlen_k=None, out, dlse=None):
        pb = make_problem(q, k, v, o, lse, do, causal=causal, scale=scale, cu_seqlens_q=cu_seqlens_q,
                          cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
                          dlse=None if dlse is None else dlse.float())
        return backward(pb, out)

    rung.__name__ = backward.__name__
    rung.__doc__ = backward.__doc__
    return rung


attention_bwd_naive = _rung(naive_backward)
attention_bwd_fa2 = _rung(fa2_backward)
attention_bwd_tuned = _rung(tuned_backward)
