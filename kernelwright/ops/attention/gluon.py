"""attention forward, FlashAttention-3 style, for Hopper (sm_90) in Triton 3.6's Gluon dialect: the ``fa3`` rung.

Legend as in :mod:`kernelwright.ops.attention.triton`: B batch, Hq / Hkv query / kv heads (query head h reads kv
head h // (Hq / Hkv)), Sq / Skv query / key rows, D head dim. Padded layout (q [B, Hq, Sq, D], k and v
[B, Hkv, Skv, D]) at any strides TMA can address (last stride 1, base and other strides 16-byte aligned; anything
else is copied to a contiguous tensor first); bf16 and fp16; D in {64, 128}; causal masking bottom-right aligned
(query i sees keys j <= i + Skv - Sq). The packed (varlen) layout has its own kernel behind :data:`FA3_VARLEN`
(on since H200 run 79); see "Varlen" below.

Design
------
One CTA owns ``BLOCK_M = 2 * 64`` query rows of one (batch, query head). It is warp-specialized with
``gl.warp_specialize`` into three partitions:

* default partition (4 warps = warpgroup 0): consumer 0, query rows ``m0 .. m0+63``;
* worker 0 (4 warps = warpgroup 1): consumer 1, query rows ``m0+64 .. m0+127``;
* worker 1 (4 warps, or 1 warp that Triton pads to a warpgroup): the producer. One elected thread TMA-loads the two
  64-row Q slices once (one mbarrier each) and then streams K and V tiles of ``BLOCK_N`` rows of the kv head into a
  ``STAGES``-deep shared-memory ring.

Descriptors are 4-D, over the [B, H, S, D] tensors themselves (strides as they are), with boxes [1, 1, rows, D]: TMA
bounds-checks every dimension, so the rows of a tile past the end of a head's sequence read as zeros (never the next
head's rows) and the rows of an output tile past Sq are not written. Shared memory holds 2-D [rows, D] tiles with
the same 128-byte swizzle; a ``reshape`` to [1, 1, rows, D] gives TMA its view of them.

Barriers (all ``mbarrier`` in shared memory):

* ``q_bars[2]`` (count 1): Q slice w has landed (TMA transaction count).
* ``k_ready[STAGES]``, ``v_ready[STAGES]`` (count 1 + TMA bytes): K / V tile in stage s has landed.
* ``k_empty[STAGES]``, ``v_empty[STAGES]`` (count 2): both consumers are done reading stage s; each consumer arrives
  once the wgmma that read it has completed (after ``warpgroup_mma_wait``). K and V have separate barriers so S = QK^T
  can start before V has arrived and K can be refilled before P V has finished.
* ``turn_bars[2]`` (count 1, only with ``PINGPONG``): explicit ping-pong. Consumer w waits on ``turn_bars[w]`` before
  issuing its wgmmas of a step and arrives on ``turn_bars[1-w]`` right after issuing them, so the two warpgroups
  alternate on the tensor cores and one's softmax overlaps the other's matmuls. Both consumers perform the same
  number of turns (``n_cta_tiles + 1``) so nobody is left waiting.

Each consumer (one warpgroup, 64 rows) runs the FA3 intra-warpgroup pipeline: in step j it issues, back to back,
the async wgmma ``S_j = Q K_j^T`` (A = Q from shared memory, B = K_j^T as a permuted shared-memory view) and the
async wgmma ``O += P_{j-1} V_{j-1}`` (A = P in registers as a DotOperandLayout, B = V from shared memory), waits for
S_j only (``warpgroup_mma_wait(1)``), releases K_j, does the online softmax of S_j in registers (exp2 with
``log2(e) * scale`` folded into one multiply-add per element), then waits for the P V wgmma, releases V_{j-1}, and
rescales O. A peeled prologue does S_0 alone and an epilogue does the last P V. O is normalised by the row sum,
written to the consumer's (now free) Q slice and stored by TMA; lse (natural log, scale included) with ``gl.store``
for the rows below Sq.

Masking
-------
Key tiles every row of a consumer sees in full run without a mask. Causal: only the tiles the diagonal crosses are
masked (``key <= row + Skv - Sq``), tiles wholly above it are never computed (the CTA's producer does not load the
tiles above its last row's diagonal; a consumer whose diagonal ends earlier releases the rest without computing).
The causal mask also hides the key tile's rows past Skv for every row below Sq. Non-causal with Skv not a multiple
of ``BLOCK_N`` (constexpr ``MASK_TAIL``): the last key tile is masked with ``key < Skv`` (its rows past Skv are TMA's
zeros, scores 0, not -inf). Query rows past Sq in the last block compute on zero rows and are never stored.

Rows that see no key (causal, Sq > Skv: rows i < Sq - Skv) are written by the host as o = 0 and lse = -inf and the
grid starts at row ``q_start = Sq - Skv``: every row a CTA computes sees key 0, so the running max is finite from
the first tile and no 0/0 or (-inf) - (-inf) can occur in the kernel.

Registers (per thread; 128 threads per consumer warpgroup; BLOCK_N = 128, D = 128): S 64 fp32, O 64 fp32, P 32
(16-bit pairs). The CTA has 12 warps (a 1-warp producer is padded to a warpgroup), the launch cap is 168 registers
(65536 / 384) and Triton's AllocateWarpGroups pass emits ``setmaxnreg``: producer ``producer_regs`` (24), consumers
``consumer_regs`` (240); 240 + 240 + 24 = 504 = 3 * 168. ptxas (sm_90a): at most R185 non-causal, R221 causal, no
spills (see :func:`compile_check`). Shared memory: Q 2*64*D*2 B + STAGES * 2 * BLOCK_N * D * 2 B (160 KiB at D128,
BLOCK_N 128, STAGES 2); the output tile reuses the Q slice and P never touches shared memory.

Measured (H200, bf16 D128, experiment script before this module, aligned shapes): B4 H32 S4096 577 TFLOP/s
non-causal (cuDNN 583), 512 causal (cuDNN 514).

Varlen
------
``_attn_fwd_varlen_kernel`` (while :data:`FA3_VARLEN` is on): q / o [total_q, Hq, D], k / v [total_k, Hkv, D],
int32 offsets cu_seqlens_q / cu_seqlens_k [B + 1], lse [Hq, total_q]; sequence b has Lq = cu_q[b+1] - cu_q[b] query
rows and Lk keys, causal bottom-right per sequence. The partitions are the padded kernel's with ``VARLEN`` on (the
padded kernels compile to the same SASS as before it existed). Grid (cdiv(max_seqlen_q, 128), B * Hq); each CTA
reads its sequence's start and lengths from the offsets.

* Descriptors are 4-D over [1, H, total, D] views of the packed tensors (the same descriptor type and boxes as the
  padded kernel; coordinates [0, head, cu[b] + row, 0]): a tile past a sequence's end reads the next sequence's rows
  (in bounds) or zeros past ``total``, never another head's.
* Keys: the non-causal key-tail mask (``MASK_TAIL``) is always compiled in and is per sequence at run time (the
  last tile masks keys >= Lk; when Lk is a multiple of BLOCK_N, no tile is masked); causal: the diagonal mask hides
  keys >= Lk from every row below Lq, as in the padded kernel. (Masked keys get p = 0, but P V still multiplies the
  next sequence's v rows by it: a non-finite v anywhere in the batch would reach this sequence too, as in the
  Triton rungs' TMA path.)
* Rows that see no key (causal Lq > Lk: rows i < Lq - Lk; Lk = 0: every row) are the padded host's ``q_start``,
  here per CTA: CTA pid_m zero-fills (o = 0, lse = -inf) the rows of [128 pid_m, 128 pid_m + 128) below q_start
  with the default warps, then computes rows m0 = q_start + 128 pid_m .. + 127 only if m0 < Lq (a CTA with none
  exits before allocating its barriers): every computed row sees key 0, so no -inf - -inf in the kernel. Lq = 0:
  the CTA does nothing.
* Output: a consumer whose 64 rows all lie in the sequence stores them by TMA (staged in its Q slice, as padded);
  the sequence's last rows (a partial 64-row slice) go by a masked ``gl.store`` from the wgmma registers, since TMA
  would overwrite the next sequence's first rows. lse by ``gl.store`` masked to rows < Lq.
* The host launches nothing else (no zero-fill, no sync); only ``total_k == 0`` and the family's trivial cases
  (no query rows, max_seqlen_k = 0) are written on the host.

Not supported: D other than 64 / 128, fp32 / fp8, dropout, backward.
"""

from __future__ import annotations

import functools
import math
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass

import torch

from kernelwright import runtime
from kernelwright.errors import Unavailable, UsageError

try:  # Gluon arrived with Triton 3.5/3.6; without it the rung is unavailable (fa3_limit still answers)
    import triton
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    HAVE_GLUON = True
except ImportError:  # pragma: no cover - depends on the installed Triton
    HAVE_GLUON = False

WG_M = 64  # query rows per consumer warpgroup
NUM_CONSUMERS = 2
BLOCK_M = WG_M * NUM_CONSUMERS
HEAD_DIMS = (64, 128)
LOG2E = 1.4426950408889634
SMEM_LIMIT = 227 * 1024
DTYPES = (torch.float16, torch.bfloat16)

FA3_VARLEN = True
"""The packed (varlen) layout in the fa3 rung (``_attn_fwd_varlen_kernel``). On: :func:`fa3_limit` takes varlen cases
and :func:`attention_fa3` takes ``cu_seqlens``; off: varlen cases are refused (auto falls to the Triton rungs,
``variant="fa3"`` raises UsageError). Turned on after H200 run 79 (``benchmarks/h200/attention.sh fa3varlen``):
``tests/test_attention_gluon.py -m gpu -k varlen`` 16 passed, and the varlen experiment's packed batch (32
sequences, 128..8192 tokens, GQA 32/8, D128, bf16) matched float64 and ran at 0.95x the fixed-length 4k rate."""


# ---------------------------------------------------------------------------------------------------------------
# Kernel
# ---------------------------------------------------------------------------------------------------------------
if HAVE_GLUON:

    @gluon.jit
    def _producer(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bars, k_ready, k_empty, v_ready, v_empty,  #
                  b, h, hk, m0, n_cta_tiles, q_row, k_row,  #
                  BLOCK_N: gl.constexpr, STAGES: gl.constexpr, VARLEN: gl.constexpr):
        """TMA loads. Padded: coordinates [b, head, row, 0]. VARLEN: the descriptors are over the packed tensors
        viewed as [1, H, total, D] and the sequence starts at packed row q_row (queries) / k_row (keys)."""
        wg_m: gl.constexpr = q_desc.block_type.shape[2]
        head_d: gl.constexpr = q_desc.block_type.shape[3]
        if VARLEN:
            cb = 0  # the [1, H, total, D] view's one batch
        else:
            cb = b  # (q_row = k_row = 0)
        for w in gl.static_range(2):
            mbarrier.expect(q_bars.index(w), q_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(q_desc, [cb, h, q_row + m0 + w * wg_m, 0], q_bars.index(w),
                                            q_smem.index(w).reshape([1, 1, wg_m, head_d]))
        for j in range(n_cta_tiles):
            s = j % STAGES
            ph = (j // STAGES) & 1
            row = k_row + j * BLOCK_N
            # A fresh mbarrier counts as "phase 1 complete", so the first lap (ph = 0) passes at once.
            mbarrier.wait(k_empty.index(s), ph ^ 1)
            mbarrier.expect(k_ready.index(s), k_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(k_desc, [cb, hk, row, 0], k_ready.index(s),
                                            k_smem.index(s).reshape([1, 1, BLOCK_N, head_d]))
            mbarrier.wait(v_empty.index(s), ph ^ 1)
            mbarrier.expect(v_ready.index(s), v_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(v_desc, [cb, hk, row, 0], v_ready.index(s),
                                            v_smem.index(s).reshape([1, 1, BLOCK_N, head_d]))

    # Reductions through combine functions of this module: gl.max / gl.sum wrap triton.language.standard's, whose
    # combine functions are interpreted (not compilable) in a process that runs Triton's CPU interpreter.
    @gluon.jit
    def _max_combine(a, b):
        return gl.maximum(a, b)

    @gluon.jit
    def _sum_combine(a, b):
        return a + b

    @gluon.jit
    def _turn_wait(turn_bars, turn, WG: gl.constexpr, PINGPONG: gl.constexpr):
        if PINGPONG:
            # Consumer 0 goes first: its first wait is on parity 1, which a fresh barrier already has.
            mbarrier.wait(turn_bars.index(WG), (turn + 1 - WG) & 1)

    @gluon.jit
    def _turn_pass(turn_bars, WG: gl.constexpr, PINGPONG: gl.constexpr):
        if PINGPONG:
            mbarrier.arrive(turn_bars.index(1 - WG), count=1)

    @gluon.jit
    def _softmax_step(s_acc, m_i, l_i, qk_scale, d0, c0, n_keys, MASK: gl.constexpr, CAUSAL: gl.constexpr,
                      s_layout: gl.constexpr):
        """Online-softmax update for one S tile (fp32, s_layout). Returns (p fp32, alpha, m_new, l_new).

        Masks (MASK): causal, key c0 + c is kept for the tile's row r when c0 + c <= d0 + r (d0: the first row's
        last visible key); otherwise (a ragged last tile) when c0 + c < n_keys."""
        if MASK:
            cols = c0 + gl.arange(0, s_acc.shape[1], layout=gl.SliceLayout(0, s_layout))
            if CAUSAL:
                rows = d0 + gl.arange(0, s_acc.shape[0], layout=gl.SliceLayout(1, s_layout))
                keep = gl.expand_dims(cols, 0) <= gl.expand_dims(rows, 1)
            else:
                keep = gl.expand_dims(cols < n_keys, 0)
            s_acc = gl.where(keep, s_acc, float("-inf"))
        m_new = gl.maximum(m_i, gl.reduce(s_acc, 1, _max_combine) * qk_scale)
        alpha = gl.exp2(m_i - m_new)
        p = gl.exp2(s_acc * qk_scale - gl.expand_dims(m_new, 1))
        l_new = l_i * alpha + gl.reduce(p, 1, _sum_combine)
        return p, alpha, m_new, l_new

    @gluon.jit
    def _consumer_step(j, q, k_smem, v_smem, k_ready, k_empty, v_ready, v_empty, turn_bars,  #
                       acc, p16, m_i, l_i, qk_scale, d0, n_keys, turn,  #
                       WG: gl.constexpr, STAGES: gl.constexpr, MASK: gl.constexpr, CAUSAL: gl.constexpr,
                       PINGPONG: gl.constexpr, s_layout: gl.constexpr, o_row_layout: gl.constexpr,
                       p_layout: gl.constexpr):
        """Step j >= 1 of a consumer: S_j = Q K_j^T and O += P_{j-1} V_{j-1}, then softmax(S_j) and rescale O."""
        block_n: gl.constexpr = k_smem.shape[1]
        wg_m: gl.constexpr = q.shape[0]
        s = j % STAGES
        sp = (j - 1) % STAGES
        mbarrier.wait(k_ready.index(s), (j // STAGES) & 1)
        mbarrier.wait(v_ready.index(sp), ((j - 1) // STAGES) & 1)
        _turn_wait(turn_bars, turn, WG, PINGPONG)
        s_tok = warpgroup_mma(q, k_smem.index(s).permute((1, 0)), gl.zeros([wg_m, block_n], gl.float32, s_layout),
                              use_acc=False, is_async=True)
        o_tok = warpgroup_mma(p16, v_smem.index(sp), acc, is_async=True)
        _turn_pass(turn_bars, WG, PINGPONG)
        # wgmma groups retire in order: with one group outstanding, S_j (issued first) is complete.
        s_acc = warpgroup_mma_wait(1, deps=(s_tok, ))
        mbarrier.arrive(k_empty.index(s), count=1)
        p, alpha, m_i, l_i = _softmax_step(s_acc, m_i, l_i, qk_scale, d0, j * block_n, n_keys, MASK, CAUSAL,
                                           s_layout)
        acc, p16 = warpgroup_mma_wait(0, deps=(o_tok, p16))
        mbarrier.arrive(v_empty.index(sp), count=1)
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, o_row_layout, assert_trivial=True), 1)
        p16 = gl.convert_layout(p.to(p16.dtype), p_layout, assert_trivial=True)
        return acc, p16, m_i, l_i

    @gluon.jit
    def _consumer(WG: gl.constexpr, o_desc, q_smem, k_smem, v_smem, q_bars, k_ready, k_empty, v_ready, v_empty,
                  turn_bars, lse_ptr, slb, slh, sls, b, h, m0, seq_q, seq_k, n_cta_tiles, qk_scale, o_ptr, sot,
                  q_row,  #
                  HEAD_D: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                  MASK_TAIL: gl.constexpr, PINGPONG: gl.constexpr, VARLEN: gl.constexpr):
        dtype: gl.constexpr = o_desc.dtype
        wg_m: gl.constexpr = o_desc.block_type.shape[2]
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                           instr_shape=[16, BLOCK_N, 16])
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                           instr_shape=[16, HEAD_D, 16])
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
        o_row_layout: gl.constexpr = gl.SliceLayout(1, o_layout)

        r0 = m0 + WG * wg_m  # first query row (within the sequence) of this consumer
        if CAUSAL:
            d0 = r0 + seq_k - seq_q  # last key row r0 sees (>= 0: rows that see nothing are not launched)
            n_tiles = (gl.minimum(d0 + wg_m, seq_k) + BLOCK_N - 1) // BLOCK_N  # tiles this consumer needs
            n_full = d0 // BLOCK_N  # tiles every row sees in full: no mask
        else:
            d0 = r0
            n_tiles = n_cta_tiles
            if MASK_TAIL:
                n_full = seq_k // BLOCK_N
            else:
                n_full = n_cta_tiles

        q = q_smem.index(WG)
        mbarrier.wait(q_bars.index(WG), 0)

        # ---- prologue: S_0 = Q K_0^T, softmax, no P V yet
        mbarrier.wait(k_ready.index(0), 0)
        _turn_wait(turn_bars, 0, WG, PINGPONG)
        s_tok = warpgroup_mma(q, k_smem.index(0).permute((1, 0)), gl.zeros([wg_m, BLOCK_N], gl.float32, s_layout),
                              use_acc=False, is_async=True)
        _turn_pass(turn_bars, WG, PINGPONG)
        s_acc = warpgroup_mma_wait(0, deps=(s_tok, ))
        mbarrier.arrive(k_empty.index(0), count=1)
        m_i = gl.full([wg_m], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout))
        l_i = gl.zeros([wg_m], gl.float32, gl.SliceLayout(1, s_layout))
        p, alpha, m_i, l_i = _softmax_step(s_acc, m_i, l_i, qk_scale, d0, 0, seq_k, CAUSAL or MASK_TAIL, CAUSAL,
                                           s_layout)
        p16 = gl.convert_layout(p.to(dtype), p_layout, assert_trivial=True)
        acc = gl.zeros([wg_m, HEAD_D], gl.float32, o_layout)

        # ---- steady state: issue S_j and O += P_{j-1} V_{j-1} together; softmax(S_j) overlaps the P V wgmma.
        # Unmasked tiles first, then (causal: the diagonal's; ragged: the last) tiles with the mask.
        n_lo = gl.minimum(gl.maximum(n_full, 1), n_tiles)
        for j in range(1, n_lo):
            acc, p16, m_i, l_i = _consumer_step(j, q, k_smem, v_smem, k_ready, k_empty, v_ready, v_empty, turn_bars,
                                                acc, p16, m_i, l_i, qk_scale, d0, seq_k, j, WG, STAGES, False,
                                                CAUSAL, PINGPONG, s_layout, o_row_layout, p_layout)
        if CAUSAL or MASK_TAIL:
            for j in range(n_lo, n_tiles):
                acc, p16, m_i, l_i = _consumer_step(j, q, k_smem, v_smem, k_ready, k_empty, v_ready, v_empty,
                                                    turn_bars, acc, p16, m_i, l_i, qk_scale, d0, seq_k, j, WG,
                                                    STAGES, True, CAUSAL, PINGPONG, s_layout, o_row_layout,
                                                    p_layout)
        turn = n_tiles

        # ---- epilogue: O += P_last V_last
        sp = (n_tiles - 1) % STAGES
        mbarrier.wait(v_ready.index(sp), ((n_tiles - 1) // STAGES) & 1)
        _turn_wait(turn_bars, turn, WG, PINGPONG)
        o_tok = warpgroup_mma(p16, v_smem.index(sp), acc, is_async=True)
        _turn_pass(turn_bars, WG, PINGPONG)
        turn += 1
        acc, p16 = warpgroup_mma_wait(0, deps=(o_tok, p16))
        mbarrier.arrive(v_empty.index(sp), count=1)

        # ---- causal: the CTA's remaining tiles lie above this consumer's diagonal. Release them (and keep the
        # ping-pong turn count equal to the other consumer's) without computing.
        if CAUSAL:
            for j in range(n_tiles, n_cta_tiles):
                s = j % STAGES
                ph = (j // STAGES) & 1
                mbarrier.wait(k_ready.index(s), ph)
                mbarrier.arrive(k_empty.index(s), count=1)
                mbarrier.wait(v_ready.index(s), ph)
                mbarrier.arrive(v_empty.index(s), count=1)
                _turn_wait(turn_bars, turn, WG, PINGPONG)
                _turn_pass(turn_bars, WG, PINGPONG)
                turn += 1

        # ---- finalize: O / l, lse = ln(sum exp(scale * s)) = m * ln2 + ln(l)   (m is in log2 units)
        l_o = gl.convert_layout(l_i, o_row_layout, assert_trivial=True)
        out = acc / gl.expand_dims(l_o, 1)
        lse = m_i * 0.6931471805599453 + gl.log(l_i)
        rows = r0 + gl.arange(0, wg_m, layout=gl.SliceLayout(1, s_layout))
        if VARLEN:
            # lse_ptr / o_ptr point at this (sequence, head)'s first row; rows past Lq belong to the next sequence
            gl.store(lse_ptr + rows.to(gl.int64) * sls, lse, mask=rows < seq_q)
            if r0 + wg_m <= seq_q:  # every row is the sequence's: the TMA store, as padded
                q.store(out.to(dtype))
                fence_async_shared()
                tma.async_copy_shared_to_global(o_desc, [0, h, q_row + r0, 0], q.reshape([1, 1, wg_m, HEAD_D]))
                tma.store_wait(0)
            else:  # the sequence's last rows: TMA would write the next sequence's; a masked store from registers
                o_rows = r0 + gl.arange(0, wg_m, layout=gl.SliceLayout(1, o_layout))
                cols = gl.arange(0, HEAD_D, layout=gl.SliceLayout(0, o_layout))
                ptrs = o_ptr + gl.expand_dims(o_rows.to(gl.int64) * sot, 1) + gl.expand_dims(cols, 0)
                gl.store(ptrs, out.to(dtype), mask=gl.expand_dims(o_rows < seq_q, 1))
        else:
            gl.store(lse_ptr + b.to(gl.int64) * slb + h.to(gl.int64) * slh + rows.to(gl.int64) * sls, lse,
                     mask=rows < seq_q)
            # Q slice is no longer read by any wgmma (all waited): reuse it as the output staging buffer. TMA
            # clips the rows past Sq.
            q.store(out.to(dtype))
            fence_async_shared()
            tma.async_copy_shared_to_global(o_desc, [b, h, r0, 0], q.reshape([1, 1, wg_m, HEAD_D]))
            tma.store_wait(0)

    @gluon.jit
    def _allocate(dtype: gl.constexpr, wg_m: gl.constexpr, HEAD_D: gl.constexpr, BLOCK_N: gl.constexpr,
                  STAGES: gl.constexpr):
        """Shared memory of a CTA (Q slices, K / V rings) and its mbarriers, initialised (see the module doc)."""
        q_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([wg_m, HEAD_D], dtype)
        kv_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, HEAD_D], dtype)
        q_smem = gl.allocate_shared_memory(dtype, [2, wg_m, HEAD_D], q_layout)
        k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_D], kv_layout)
        v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_D], kv_layout)
        q_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        turn_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(2):
            mbarrier.init(q_bars.index(i), count=1)
            mbarrier.init(turn_bars.index(i), count=1)
        for i in gl.static_range(STAGES):
            mbarrier.init(k_ready.index(i), count=1)
            mbarrier.init(v_ready.index(i), count=1)
            mbarrier.init(k_empty.index(i), count=2)
            mbarrier.init(v_empty.index(i), count=2)
        fence_async_shared()
        return q_smem, k_smem, v_smem, q_bars, turn_bars, k_ready, k_empty, v_ready, v_empty

    @gluon.jit
    def _program_ids(n_heads, group, CAUSAL: gl.constexpr):
        """(query block, batch, query head, kv head) of this CTA; causal grids take the heaviest blocks first."""
        pid_m = gl.program_id(0)
        bh = gl.program_id(1)
        if CAUSAL:
            pid_m = gl.num_programs(0) - 1 - pid_m
        return pid_m, bh // n_heads, bh % n_heads, (bh % n_heads) // group

    _INT_ARGS = ("slb", "slh", "sls", "seq_q", "seq_k", "q_start", "n_heads", "group")

    @gluon.jit(do_not_specialize=_INT_ARGS, do_not_specialize_on_alignment=("lse_ptr", ))
    def _attn_fwd_kernel(q_desc, k_desc, v_desc, o_desc, lse_ptr, slb, slh, sls, seq_q, seq_k, q_start, n_heads,
                         group, qk_scale,  #
                         HEAD_D: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                         MASK_TAIL: gl.constexpr, PINGPONG: gl.constexpr, PRODUCER_WARPS: gl.constexpr,
                         CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr):
        dtype: gl.constexpr = q_desc.dtype
        wg_m: gl.constexpr = q_desc.block_type.shape[2]
        block_m: gl.constexpr = 2 * wg_m
        pid_m, b, h, hk = _program_ids(n_heads, group, CAUSAL)
        m0 = q_start + pid_m * block_m
        if CAUSAL:
            n_cta_tiles = (gl.minimum(m0 + block_m + seq_k - seq_q, seq_k) + BLOCK_N - 1) // BLOCK_N
        else:
            n_cta_tiles = (seq_k + BLOCK_N - 1) // BLOCK_N

        q_smem, k_smem, v_smem, q_bars, turn_bars, k_ready, k_empty, v_ready, v_empty = _allocate(
            dtype, wg_m, HEAD_D, BLOCK_N, STAGES)
        gl.warp_specialize([
            (_consumer, (0, o_desc, q_smem, k_smem, v_smem, q_bars, k_ready, k_empty, v_ready, v_empty, turn_bars,
                         lse_ptr, slb, slh, sls, b, h, m0, seq_q, seq_k, n_cta_tiles, qk_scale, 0, 0, 0, HEAD_D,
                         BLOCK_N, STAGES, CAUSAL, MASK_TAIL, PINGPONG, False)),
            (_consumer, (1, o_desc, q_smem, k_smem, v_smem, q_bars, k_ready, k_empty, v_ready, v_empty, turn_bars,
                         lse_ptr, slb, slh, sls, b, h, m0, seq_q, seq_k, n_cta_tiles, qk_scale, 0, 0, 0, HEAD_D,
                         BLOCK_N, STAGES, CAUSAL, MASK_TAIL, PINGPONG, False)),
            (_producer, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bars, k_ready, k_empty, v_ready, v_empty,
                         b, h, hk, m0, n_cta_tiles, 0, 0, BLOCK_N, STAGES, False)),
        ], [4, PRODUCER_WARPS], [CONSUMER_REGS, PRODUCER_REGS])

    _VARLEN_INT_ARGS = ("sot", "soh", "slh", "slt", "n_heads", "group")

    @gluon.jit(do_not_specialize=_VARLEN_INT_ARGS,
               do_not_specialize_on_alignment=("o_ptr", "lse_ptr", "cu_q_ptr", "cu_k_ptr"))
    def _attn_fwd_varlen_kernel(q_desc, k_desc, v_desc, o_desc, o_ptr, lse_ptr, cu_q_ptr, cu_k_ptr, sot, soh, slh,
                                slt, n_heads, group, qk_scale,  #
                                HEAD_D: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                                CAUSAL: gl.constexpr, MASK_TAIL: gl.constexpr, PINGPONG: gl.constexpr,
                                PRODUCER_WARPS: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                                PRODUCER_REGS: gl.constexpr):
        """The packed (varlen) layout: q / o [total_q, Hq, D], k / v [total_k, Hkv, D], lse [Hq, total_q]; sequence
        b is packed rows cu_q[b] .. cu_q[b + 1] (cu_k for keys). The descriptors are over [1, H, total, D] views.
        Grid (cdiv(max_seqlen_q, BLOCK_M), B * Hq). Per CTA: rows [0, q_start) of its sequence see no key (causal
        Lq > Lk: q_start = Lq - Lk; Lk = 0: q_start = Lq); the CTA zero-fills the ones of them in its own block
        index's 128 rows (o = 0, lse = -inf), then computes rows m0 = q_start + pid_m * BLOCK_M .. + 127 if m0 < Lq
        (every such row sees key 0, as in the padded kernel) with the padded kernel's partitions (VARLEN: packed TMA
        coordinates, and the sequence's last rows stored by a masked register store). MASK_TAIL is always on
        (non-causal): the key tail mask is per sequence (n_full = Lk // BLOCK_N at run time)."""
        dtype: gl.constexpr = q_desc.dtype
        wg_m: gl.constexpr = q_desc.block_type.shape[2]
        block_m: gl.constexpr = 2 * wg_m
        pid_m, b, h, hk = _program_ids(n_heads, group, CAUSAL)
        q_row = gl.load(cu_q_ptr + b)
        seq_q = gl.load(cu_q_ptr + b + 1) - q_row
        k_row = gl.load(cu_k_ptr + b)
        seq_k = gl.load(cu_k_ptr + b + 1) - k_row
        if CAUSAL:
            q_start = gl.maximum(seq_q - seq_k, 0)  # bottom-right: row i sees keys j <= i + Lk - Lq
        else:
            q_start = seq_q * 0
        if seq_k == 0:
            q_start = seq_q  # no key at all: every row
        # this (sequence, head)'s first row of o and lse
        o_ptr = o_ptr + q_row.to(gl.int64) * sot + h.to(gl.int64) * soh
        lse_ptr = lse_ptr + h.to(gl.int64) * slh + q_row.to(gl.int64) * slt

        # ---- rows that see no key: o = 0, lse = -inf (block pid_m's share of rows [0, q_start))
        z0 = pid_m * block_m
        if z0 < q_start:
            fill_layout: gl.constexpr = gl.BlockedLayout([1, 8], [32 // (HEAD_D // 8), HEAD_D // 8], [4, 1], [1, 0])
            zr = z0 + gl.arange(0, block_m, layout=gl.SliceLayout(1, fill_layout))
            zc = gl.arange(0, HEAD_D, layout=gl.SliceLayout(0, fill_layout))
            dead = zr < q_start
            gl.store(o_ptr + gl.expand_dims(zr.to(gl.int64) * sot, 1) + gl.expand_dims(zc, 0),
                     gl.zeros([block_m, HEAD_D], dtype, fill_layout), mask=gl.expand_dims(dead, 1))
            gl.store(lse_ptr + zr.to(gl.int64) * slt,
                     gl.full([block_m], float("-inf"), gl.float32, gl.SliceLayout(1, fill_layout)), mask=dead)

        # ---- rows that see a key
        m0 = q_start + pid_m * block_m
        if m0 < seq_q:
            if CAUSAL:
                n_cta_tiles = (gl.minimum(m0 + block_m + seq_k - seq_q, seq_k) + BLOCK_N - 1) // BLOCK_N
            else:
                n_cta_tiles = (seq_k + BLOCK_N - 1) // BLOCK_N
            q_smem, k_smem, v_smem, q_bars, turn_bars, k_ready, k_empty, v_ready, v_empty = _allocate(
                dtype, wg_m, HEAD_D, BLOCK_N, STAGES)
            gl.warp_specialize([
                (_consumer, (0, o_desc, q_smem, k_smem, v_smem, q_bars, k_ready, k_empty, v_ready, v_empty,
                             turn_bars, lse_ptr, 0, 0, slt, b, h, m0, seq_q, seq_k, n_cta_tiles, qk_scale, o_ptr, sot,
                             q_row, HEAD_D, BLOCK_N, STAGES, CAUSAL, MASK_TAIL, PINGPONG, True)),
                (_consumer, (1, o_desc, q_smem, k_smem, v_smem, q_bars, k_ready, k_empty, v_ready, v_empty,
                             turn_bars, lse_ptr, 0, 0, slt, b, h, m0, seq_q, seq_k, n_cta_tiles, qk_scale, o_ptr, sot,
                             q_row, HEAD_D, BLOCK_N, STAGES, CAUSAL, MASK_TAIL, PINGPONG, True)),
                (_producer, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bars, k_ready, k_empty, v_ready,
                             v_empty, b, h, hk, m0, n_cta_tiles, q_row, k_row, BLOCK_N, STAGES, True)),
            ], [4, PRODUCER_WARPS], [CONSUMER_REGS, PRODUCER_REGS])


# ---------------------------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FA3Config:
    """Launch knobs. ``block_n``: keys a tile (64 or 128: Gluon tensors are powers of two); ``stages``: K/V ring
    depth; ``pingpong``: the two consumer warpgroups alternate on the tensor cores; ``producer_warps``: 4 (a
    warpgroup) or 1 (padded to one by Triton); ``consumer_regs`` / ``producer_regs``: setmaxnreg targets;
    ``maxnreg``: the launch cap (None: 168 with a 4-warp producer, Triton's default with 1)."""

    block_n: int = 128
    stages: int = 2
    pingpong: bool = True
    producer_warps: int = 4
    consumer_regs: int = 240
    producer_regs: int = 24
    maxnreg: int | None = None

    def smem_bytes(self, d: int, elt: int = 2) -> int:
        return (NUM_CONSUMERS * WG_M * d + 2 * self.stages * self.block_n * d) * elt

    def problem(self, d: int) -> str | None:
        """Why this config cannot launch at head dim d, or None."""
        if self.block_n not in (64, 128):
            return f"block_n must be 64 or 128 (a power of two for Gluon tensors), got {self.block_n}"
        if self.stages < 1:
            return f"stages must be >= 1, got {self.stages}"
        if self.producer_warps not in (1, 4):
            return f"producer_warps must be 1 or 4, got {self.producer_warps}"
        if self.smem_bytes(d) > SMEM_LIMIT - 256:
            return (f"stages={self.stages}, block_n={self.block_n}, D={d} need {self.smem_bytes(d)} B of shared "
                    f"memory (> 227 KiB)")
        return None

    def label(self) -> str:
        return (f"bn{self.block_n} st{self.stages} {'pp' if self.pingpong else 'nopp'} prodw{self.producer_warps}"
                + (f" regs{self.consumer_regs}/{self.producer_regs}" if (self.consumer_regs, self.producer_regs)
                   != (240, 24) else "") + (f" maxnreg{self.maxnreg}" if self.maxnreg else ""))


def default_config(d: int, causal: bool) -> FA3Config:
    """The measured best (H200, bf16 D128, B4 H32 S4096): 128-key tiles, a 2-deep ring, ping-pong (within noise of
    off non-causal, +5% causal). D64 was not swept; it takes the same."""
    return FA3Config(block_n=128, stages=2, pingpong=True, producer_warps=4)


def _launch_params(d: int, cfg: FA3Config, causal: bool, mask_tail: bool) -> tuple[dict, dict]:
    """Constexprs and launch options shared by the GPU launch and the CPU compile."""
    maxnreg = cfg.maxnreg
    if maxnreg is None and cfg.producer_warps == 4:
        maxnreg = 168  # 65536 / (12 warps * 32) rounded down to 8: setmaxnreg moves registers to the consumers
    constexprs = dict(HEAD_D=d, BLOCK_N=cfg.block_n, STAGES=cfg.stages, CAUSAL=bool(causal),
                      MASK_TAIL=bool(mask_tail) and not causal, PINGPONG=bool(cfg.pingpong),
                      PRODUCER_WARPS=cfg.producer_warps, CONSUMER_REGS=cfg.consumer_regs,
                      PRODUCER_REGS=cfg.producer_regs)
    options = dict(num_warps=4, **({"maxnreg": maxnreg} if maxnreg is not None else {}))
    return constexprs, options


def _mask_tail(skv: int, causal: bool, cfg: FA3Config) -> bool:
    """Non-causal and the last key tile is partial: it needs the key < Skv mask (causal's mask covers it)."""
    return not causal and skv % cfg.block_n != 0


# ---------------------------------------------------------------------------------------------------------------
# The rung
# ---------------------------------------------------------------------------------------------------------------
def fa3_limit(size, kwargs) -> str | None:
    """Why the fa3 rung cannot take a case of this size (the family's encoded size), or None."""
    from kernelwright.ops.attention.spec import decode

    p = decode(size)
    if p.varlen and not FA3_VARLEN:
        return "fa3: varlen (packed) layout switched off (gluon.FA3_VARLEN); the Triton rungs take it"
    if p.d not in HEAD_DIMS:
        return f"fa3: head dim {p.d} not in {HEAD_DIMS}"
    if p.hkv < 1 or p.hq % p.hkv:
        return f"fa3: Hq = {p.hq} is not a multiple of Hkv = {p.hkv}"
    return None


def _tma_ok(t: torch.Tensor) -> bool:
    """TMA can address t as it is: last stride 1, base and every other stride 16-byte aligned (size-1 dimensions'
    strides are replaced in the descriptor, see :func:`_strides`), no broadcast (stride 0) dimension."""
    elt = t.element_size()
    if t.stride(-1) != 1 and t.shape[-1] != 1:
        return False
    if t.data_ptr() % 16:
        return False
    for n, s in zip(t.shape[:-1], t.stride()[:-1], strict=True):
        if n != 1 and (s <= 0 or (s * elt) % 16):
            return False
    return True


def _strides(t: torch.Tensor) -> list[int]:
    """t's strides with those of size-1 dimensions (never stepped, any value is right) made contiguous-like, so
    that TMA's 16-byte stride rule holds for them."""
    out = list(t.stride())
    out[-1] = 1
    inner = t.shape[-1]
    for i in range(t.dim() - 2, -1, -1):
        if t.shape[i] == 1:
            out[i] = inner
        inner = max(inner, out[i] * t.shape[i])
    return out


def _descriptor(t: torch.Tensor, rows: int):
    d = t.shape[-1]
    layout = gl.NVMMASharedLayout.get_default_for([1, 1, rows, d], _GL_DTYPE[t.dtype])
    return TensorDescriptor(t, list(t.shape), _strides(t), [1, 1, rows, d], layout)


if HAVE_GLUON:
    _GL_DTYPE = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16}


def _check_layout(q, k, v, out, rank: int, layout: str) -> None:
    """What both layouts need: rank, CUDA tensors, 16-bit dtypes throughout, k / v alike with q's head dim (the
    last), D in HEAD_DIMS, Hq a multiple of Hkv (heads are dim 1 in both layouts)."""
    for name, t in (("q", q), ("k", k), ("v", v), ("out", out)):
        if t.dim() != rank:
            raise UsageError(f"fa3: {name} must be {layout}, got shape {tuple(t.shape)}")
    if q.dtype not in DTYPES or k.dtype != q.dtype or v.dtype != q.dtype or out.dtype != q.dtype:
        raise UsageError(f"fa3: q, k, v, out must all be float16 or bfloat16, got {q.dtype}, {k.dtype}, {v.dtype}, "
                         f"{out.dtype}")
    d = q.shape[-1]
    if k.shape != v.shape or k.shape[-1] != d or (rank == 4 and k.shape[0] != q.shape[0]):
        what = "[B, Hkv, Skv, D]" if rank == 4 else "[total_k, Hkv, D]"
        raise UsageError(f"fa3: k and v must be {what} matching q {tuple(q.shape)}, got {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    if d not in HEAD_DIMS:
        raise UsageError(f"fa3: head dim {d} not in {HEAD_DIMS}")
    hq, hkv = q.shape[1], k.shape[1]
    if hkv < 1 or hq % hkv:
        raise UsageError(f"fa3: Hq = {hq} is not a multiple of Hkv = {hkv}")
    if tuple(out.shape) != tuple(q.shape):
        raise UsageError(f"fa3: out must have q's shape {tuple(q.shape)}, got {tuple(out.shape)}")


def _check_device(*named) -> None:
    for name, t in named:
        if t.device.type != "cuda":
            raise UsageError(f"fa3: {name} must be on a CUDA device (TMA descriptors), got {t.device}")


def _check_inputs(q, k, v, out) -> None:
    _check_layout(q, k, v, out, 4, "[B, H, S, D] (padded layout)")
    _check_device(("q", q), ("k", k), ("v", v), ("out", out))


def _check_varlen_inputs(q, k, v, out, cu_q, cu_k) -> None:
    _check_layout(q, k, v, out, 3, "[total, H, D] (varlen layout)")
    if cu_q is None or cu_k is None or cu_q.dim() != 1 or cu_q.shape != cu_k.shape or cu_q.shape[0] < 2:
        raise UsageError("fa3: varlen needs cu_seqlens_q and cu_seqlens_k, both [B + 1] with B >= 1")
    _check_device(("q", q), ("k", k), ("v", v), ("out", out), ("cu_seqlens_q", cu_q), ("cu_seqlens_k", cu_k))


def _packed(t: torch.Tensor) -> torch.Tensor:
    """[total, H, D] as the [1, H, total, D] view the descriptors take (no copy)."""
    return t.transpose(0, 1).unsqueeze(0)


def attention_fa3(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, *, causal=False, scale=None, max_seqlen_q=None,
                  max_seqlen_k=None, out, lse=None, config: FA3Config | None = None):
    """FlashAttention-3-style warp-specialized forward (Gluon, Hopper): writes ``out`` and, when given, ``lse``
    (float32, natural log, scale included; -inf on rows that see no key): padded q [B, Hq, Sq, D] with lse
    [B, Hq, Sq], or (with ``cu_seqlens_q`` / ``cu_seqlens_k``, while :data:`FA3_VARLEN` is on) packed q
    [total_q, Hq, D] with lse [Hq, total_q]. ``config`` forces one."""
    from kernelwright.ops.attention.triton import _problem, _scratch_lse, _trivial

    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    if varlen and not FA3_VARLEN:
        raise UsageError("fa3: varlen (packed) layout switched off (gluon.FA3_VARLEN); use the tuned rung")
    if varlen:
        _check_varlen_inputs(q, k, v, out, cu_seqlens_q, cu_seqlens_k)
    else:
        _check_inputs(q, k, v, out)
    if not HAVE_GLUON:
        raise Unavailable("fa3: needs Triton with Gluon (triton >= 3.6)")
    lse = _scratch_lse(out, varlen, lse)
    p = _problem(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, out, lse)
    if _trivial(p, out, lse):
        return out
    cfg = config or default_config(p.d, causal)
    why = cfg.problem(p.d)
    if why:
        raise UsageError(f"fa3: config {cfg}: {why}")
    scale = 1.0 / math.sqrt(p.d) if scale is None else float(scale)
    if scale <= 0:  # the kernel takes the running max before scaling: fold the sign into q
        q = -q if scale < 0 else torch.zeros_like(q)
        scale = -scale if scale < 0 else 1.0
    if varlen:
        return _launch_varlen(q, k, v, out, lse, p, causal, scale, cfg)
    sq, skv = p.max_q, p.max_k
    # causal with Sq > Skv: rows i < Sq - Skv see no key; written here, never launched
    q_start = max(0, sq - skv) if causal else 0
    if q_start:
        out[:, :, :q_start].zero_()
        lse[:, :, :q_start].fill_(float("-inf"))
    q, k, v = (t if _tma_ok(t) else t.contiguous() for t in (q, k, v))
    o = out if _tma_ok(out) else torch.empty(out.shape, dtype=out.dtype, device=out.device)
    constexprs, options = _launch_params(p.d, cfg, causal, _mask_tail(skv, causal, cfg))
    grid = (triton.cdiv(sq - q_start, BLOCK_M), p.batch * p.hq)
    _attn_fwd_kernel[grid](_descriptor(q, WG_M), _descriptor(k, cfg.block_n), _descriptor(v, cfg.block_n),
                           _descriptor(o, WG_M), lse, lse.stride(0), lse.stride(1), lse.stride(2), sq, skv, q_start,
                           p.hq, p.hq // p.hkv, scale * LOG2E, **constexprs, **options)
    if o is not out:
        out[:, :, q_start:].copy_(o[:, :, q_start:])
    return out


def _launch_varlen(q, k, v, out, lse, p, causal: bool, scale: float, cfg: FA3Config):
    """The packed layout (see ``_attn_fwd_varlen_kernel``): every row of out and lse is written by the kernel
    (rows that see no key as o = 0, lse = -inf), nothing on the host but the descriptors."""
    if k.shape[0] == 0:  # no keys in any sequence (max_seqlen_k may still be given > 0): nothing to attend to
        out.zero_()
        lse.fill_(float("-inf"))
        return out
    q, k, v = (t if _tma_ok(_packed(t)) else t.contiguous() for t in (q, k, v))
    o = out if _tma_ok(_packed(out)) else torch.empty(out.shape, dtype=out.dtype, device=out.device)
    constexprs, options = _launch_params(p.d, cfg, causal, True)
    grid = (triton.cdiv(p.max_q, BLOCK_M), p.batch * p.hq)
    _attn_fwd_varlen_kernel[grid](_descriptor(_packed(q), WG_M), _descriptor(_packed(k), cfg.block_n),
                                  _descriptor(_packed(v), cfg.block_n), _descriptor(_packed(o), WG_M), o, lse,
                                  p.cu_q, p.cu_k, o.stride(0), o.stride(1), lse.stride(0), lse.stride(1), p.hq,
                                  p.hq // p.hkv, scale * LOG2E, **constexprs, **options)
    if o is not out:
        out.copy_(o)
    return out


# ---------------------------------------------------------------------------------------------------------------
# CPU compile (sm_90a) and inspection
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Variant:
    """One compiled kernel: what changes the code (the kernel's constexprs and dtype). GQA ratios, lengths and
    strides are runtime arguments (never specialised): one kernel serves them all; ``ragged`` selects the
    non-causal last-tile mask (``MASK_TAIL``), which is the only length-dependent code."""

    dtype: torch.dtype = torch.bfloat16
    d: int = 128
    causal: bool = False
    ragged: bool = False
    config: FA3Config = FA3Config()
    varlen: bool = False
    """The packed-layout kernel (``_attn_fwd_varlen_kernel``); its key-tail mask is per sequence at run time, so
    ``ragged`` does not apply (one kernel per dtype, D and causal)."""

    def label(self) -> str:
        if self.varlen:
            kind = "varlen causal" if self.causal else "varlen full"
        else:
            kind = "causal" if self.causal else ("full ragged" if self.ragged else "full")
        return f"{str(self.dtype).replace('torch.', '')} D{self.d} {kind} {self.config.label()}"


def _require_toolchain() -> None:
    if not HAVE_GLUON:
        raise Unavailable("fa3: needs Triton with Gluon (triton >= 3.6)")
    if _tool("ptxas") is None:
        raise Unavailable("fa3: Triton's bundled ptxas not found")


@functools.cache
def compile_variant(var: Variant):
    """Compile the kernel for sm_90a without a GPU; returns Triton's CompiledKernel. The signature is the one the
    launcher's binder derives from the real arguments (descriptor types from the block shapes and layouts; the
    integer arguments are never specialised)."""
    _require_toolchain()
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    why = var.config.problem(var.d)
    if why:
        raise UsageError(f"fa3: {why}")
    x = torch.empty(1, 1, BLOCK_M, var.d, dtype=var.dtype)  # a small CPU tensor: only its descriptor's type matters
    q_ty, kv_ty = mangle_type(_descriptor(x, WG_M)), mangle_type(_descriptor(x, var.config.block_n))
    constexprs, options = _launch_params(var.d, var.config, var.causal, var.ragged or var.varlen)
    fn, int_args = (_attn_fwd_varlen_kernel, _VARLEN_INT_ARGS) if var.varlen else (_attn_fwd_kernel, _INT_ARGS)
    sig = {}
    for name in fn.arg_names:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name in ("q_desc", "o_desc"):
            sig[name] = q_ty
        elif name in ("k_desc", "v_desc"):
            sig[name] = kv_ty
        elif name == "lse_ptr":
            sig[name] = "*fp32"
        elif name == "o_ptr":
            sig[name] = "*" + {torch.bfloat16: "bf16", torch.float16: "fp16"}[var.dtype]
        elif name in ("cu_q_ptr", "cu_k_ptr"):
            sig[name] = "*i32"
        elif name == "qk_scale":
            sig[name] = "fp32"
        else:
            assert name in int_args, name
            sig[name] = "i32"
    if runtime.interpreting():  # a builtin the interpreter left patched would build wrong IR
        from kernelwright.harness.inspect import undo_interpreter_leak

        undo_interpreter_leak(triton.language)
    src = GluonASTSource(fn, sig, constexprs, {})
    with knobs.runtime.scope():
        knobs.runtime.interpret = False  # a test process may run Triton's interpreter; Gluon always compiles
        return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def _tool(name: str) -> str | None:
    here = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)
    return here if os.path.exists(here) else shutil.which(name)


_PTX_COUNTS = [("wgmma.mma_async", r"wgmma\.mma_async"), ("wgmma.wait_group", r"wgmma\.wait_group"),
               ("cp.async.bulk.tensor(g2s)", r"cp\.async\.bulk\.tensor\.\dd\.shared::cluster\.global"),
               ("cp.async.bulk.tensor(s2g)", r"cp\.async\.bulk\.tensor\.\dd\.global\.shared"),
               ("mbarrier.try_wait", r"mbarrier\.try_wait"), ("mbarrier.arrive", r"mbarrier\.arrive"),
               ("bar.sync/barrier.sync", r"\b(?:bar|barrier)\.sync"), ("ld.local/st.local", r"\b(?:ld|st)\.local")]
_SASS_COUNTS = [("HGMMA", r"\bHGMMA\b"), ("UTMALDG", r"\bUTMALDG\b"), ("UTMASTG", r"\bUTMASTG\b"),
                ("SYNCS(mbarrier)", r"\bSYNCS\."), ("LDL/STL", r"\b(?:LDL|STL)\b"), ("USETMAXREG", r"\bUSETMAXREG\b")]


def inspect_compiled(ck) -> dict:
    """Registers / smem / spills (ptxas -v on the PTX, Triton's bundled ptxas) and instruction counts (PTX, and
    SASS from cuobjdump when it is bundled too)."""
    ptx = ck.asm["ptx"]
    info = dict(kernel=ck.metadata.name, shared=ck.metadata.shared, total_warps=ck.metadata.num_warps)
    m = re.search(r"\.maxnreg\s+(\d+)", ptx)
    info["maxnreg"] = int(m.group(1)) if m else None
    info["setmaxnreg"] = sorted({f"{a}{b}" for a, b in re.findall(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+)",
                                                                   ptx)})
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.ptx")
        with open(path, "w") as f:
            f.write(ptx)
        r = subprocess.run([_tool("ptxas"), "-v", "--gpu-name=sm_90a", path, "-o", os.path.join(tmp, "k.cubin")],
                           capture_output=True, text=True)
        log = r.stdout + r.stderr
        info["ptxas_rc"] = r.returncode
        m = re.search(r"Used (\d+) registers", log)
        info["regs"] = int(m.group(1)) if m else None
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
        info["spill_stores"], info["spill_loads"] = (int(m.group(1)), int(m.group(2))) if m else (None, None)
        m = re.search(r"(\d+) bytes stack frame", log)
        info["stack"] = int(m.group(1)) if m else None
        info["ptxas_warnings"] = [ln.strip() for ln in log.splitlines() if "warning" in ln.lower()]
        sass = ""
        cuobjdump = _tool("cuobjdump")
        if cuobjdump and r.returncode == 0:
            sass = subprocess.run([cuobjdump, "-sass", os.path.join(tmp, "k.cubin")], capture_output=True,
                                  text=True).stdout
    info["have_sass"] = bool(sass)
    regs_seen = [int(x) for x in re.findall(r"\bR(\d+)\b", sass)]
    info["sass_max_reg_index"] = max(regs_seen) if regs_seen else None  # highest R any partition touches
    info["ptx_counts"] = {k: len(re.findall(pat, ptx)) for k, pat in _PTX_COUNTS}
    info["sass_counts"] = {k: len(re.findall(pat, sass)) for k, pat in _SASS_COUNTS}
    return info


def _checks(info: dict) -> dict:
    ptx, sass, have_sass = info["ptx_counts"], info["sass_counts"], info["have_sass"]
    return dict(
        wgmma=ptx["wgmma.mma_async"] > 0 and (not have_sass or sass["HGMMA"] > 0),
        tma_load=ptx["cp.async.bulk.tensor(g2s)"] > 0 and (not have_sass or sass["UTMALDG"] > 0),
        tma_store=ptx["cp.async.bulk.tensor(s2g)"] > 0 and (not have_sass or sass["UTMASTG"] > 0),
        mbarrier=ptx["mbarrier.try_wait"] > 0 and (not have_sass or sass["SYNCS(mbarrier)"] > 0),
        no_spills=info["spill_stores"] == 0 and info["spill_loads"] == 0 and sass["LDL/STL"] == 0
        and ptx["ld.local/st.local"] == 0,
        ptxas_clean=info["ptxas_rc"] == 0 and not info["ptxas_warnings"])


def default_variants(varlen: bool = True) -> list[Variant]:
    """Every kernel the rung launches with its default configs: bf16 and fp16, D64 and D128, causal, non-causal
    with Skv a multiple of 128 and ragged (GQA, Sq != Skv and strides are runtime: the same kernels); then (with
    ``varlen``) the packed-layout kernels, causal and not, which :data:`FA3_VARLEN` gates."""
    out = []
    for dtype in (torch.bfloat16, torch.float16):
        for d in HEAD_DIMS:
            for causal, ragged in ((False, False), (False, True), (True, False)):
                out.append(Variant(dtype, d, causal, ragged, default_config(d, causal)))
    if varlen:
        for dtype in (torch.bfloat16, torch.float16):
            for d in HEAD_DIMS:
                for causal in (False, True):
                    out.append(Variant(dtype, d, causal, False, default_config(d, causal), varlen=True))
    return out


def compile_check(configs=None) -> list[dict]:
    """Compile ``configs`` (:class:`Variant` s; default :func:`default_variants`) for sm_90a on the CPU; per
    variant: label, registers (ptxas -v: the launch cap under setmaxnreg), sass_max_reg_index (the highest R any
    partition uses), spill bytes, stack, shared memory, instruction counts, pass/fail checks (wgmma, TMA load and store,
    mbarrier, no spills, ptxas clean) and seconds. A failed compile is a row with ``error``."""
    rows = []
    for var in configs or default_variants():
        t0 = time.time()
        try:
            info = inspect_compiled(compile_variant(var))
        except Unavailable:
            raise
        except Exception as e:  # noqa: BLE001 - reported per variant
            rows.append(dict(label=var.label(), variant=var, error=f"{type(e).__name__}: {e}", ok=False))
            continue
        checks = _checks(info)
        rows.append(dict(label=var.label(), variant=var, **info, checks=checks, ok=all(checks.values()),
                         seconds=round(time.time() - t0, 2)))
    return rows


def artifacts_fa3(size, dtype) -> list:
    """``kw inspect attention --variant fa3``: the kernel the rung launches for ``size`` compiled for sm_90a.

    ``threads_per_block`` is the CTA's 12 warps (two consumer warpgroups and the producer's, padded); the cubin's
    register count is the launch cap (168): ``setmaxnreg`` then gives the consumers 240 and the producer 24 at run
    time, which an occupancy calculator cannot see (one CTA an SM either way: shared memory decides it).
    ``dynamic_smem`` is Triton's ``shared`` (rings, Q and barriers)."""
    import inspect as pyinspect

    from kernelwright.harness.inspect import Artifact
    from kernelwright.ops.attention.spec import decode

    why = fa3_limit(size, {})
    if why:
        raise UsageError(why)
    if dtype not in DTYPES:
        raise UsageError(f"fa3: dtype {dtype} not in float16 / bfloat16")
    p = decode(size)
    cfg = default_config(p.d, p.causal)
    if p.varlen:
        var = Variant(dtype, p.d, p.causal, False, cfg, varlen=True)
        grid = (triton.cdiv(p.sq, BLOCK_M), p.b * p.hq)
        kernel = _attn_fwd_varlen_kernel
    else:
        var = Variant(dtype, p.d, p.causal, _mask_tail(p.skv, p.causal, cfg), cfg)
        q_start = max(0, p.sq - p.skv) if p.causal else 0
        grid = (triton.cdiv(max(p.sq - q_start, 0), BLOCK_M), p.b * p.hq)
        kernel = _attn_fwd_kernel
    ck = compile_variant(var)
    source = pyinspect.getsource(kernel.fn)
    return [Artifact(kernel=ck.metadata.name, cubin=ck.asm["cubin"], threads_per_block=32 * ck.metadata.num_warps,
                     dynamic_smem=ck.metadata.shared, grid=grid, source=source,
                     note=f"fa3 (Gluon, warp-specialized: 2 consumer warpgroups + producer): {var.label()}; "
                          f"setmaxnreg {cfg.consumer_regs}/{cfg.consumer_regs}/{cfg.producer_regs} under the "
                          f"launch cap; triton {triton.__version__}")]


