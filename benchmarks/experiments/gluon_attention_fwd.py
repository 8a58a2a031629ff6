"""FlashAttention-3-style attention forward for Hopper (sm_90) written in Triton 3.6's Gluon dialect.

Design
------
One CTA owns ``BLOCK_M = 2 * 64`` query rows of one (batch, head). The CTA is warp-specialized with
``gl.warp_specialize`` into three partitions:

* default partition (4 warps = warpgroup 0): consumer 0, query rows ``m0 .. m0+63``;
* worker 0 (4 warps = warpgroup 1): consumer 1, query rows ``m0+64 .. m0+127``;
* worker 1 (4 warps, or 1 warp that Triton pads to a warpgroup): the producer. One elected thread TMA-loads the two
  64-row Q slices once (one mbarrier each) and then streams K and V tiles of ``BLOCK_N`` rows into a
  ``STAGES``-deep shared-memory ring (a [*, 128] bf16 tile with 128-byte swizzle is two TMA boxes of 64 columns).

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
async wgmma ``O += P_{j-1} V_{j-1}`` (A = P in registers as a bf16/fp16 DotOperandLayout, B = V from shared memory),
waits for S_j only (``warpgroup_mma_wait(1)``), releases K_j, does the online softmax of S_j in registers (exp2 with
``log2(e) * scale`` folded into one multiply-add per element, running max/sum per row), then waits for the P V wgmma,
releases V_{j-1}, and rescales O by ``alpha = exp2(m_old - m_new)``. A peeled prologue does S_0 alone and an
epilogue does the last P V. O is normalised by the row sum, written to the consumer's (now free) Q slice in shared
memory and stored by TMA; lse (natural log, scale included) is stored with ``gl.store``.

Register budget (per thread; 128 threads per consumer warpgroup; BLOCK_N = 128, D = 128): S accumulator 64 fp32,
O accumulator 64 fp32, P 32 (bf16x2), row max / sum and addressing: ptxas needs at most R185 (non-causal) and R221-237
(causal, two loop copies) with no spills. The CTA has 12 warps (Triton 3.6 pads a 1-warp producer to a full
warpgroup too), the launch cap is 168 registers (65536 / 384), and Triton's AllocateWarpGroups pass emits
``setmaxnreg``: producer warpgroup ``PRODUCER_REGS`` (24), consumer 1 ``CONSUMER_REGS`` (240) and the default
partition the remainder (240); 240 + 240 + 24 = 504 = 3 * 168.

Shared memory: Q 2*64*D*2 B (32 KiB for D = 128) + STAGES * 2 * BLOCK_N * D * 2 B (32 KiB per K or V tile at
BLOCK_N = 128), i.e. 160 KiB at STAGES = 2, 224 KiB at STAGES = 3 (limit 227 KiB). One CTA per SM. The output
tile reuses the Q slice; the P operand never touches shared memory (the S accumulator layout converts to the wgmma
register A-operand layout without data movement).

Supported: q, k, v of shape [B, H, S, D], contiguous, bf16 or fp16, D in {64, 128}, Sq == Skv == S with S a multiple
of 128 (BLOCK_M) and of BLOCK_N (asserted), BLOCK_N in {64, 128} (Gluon tensors need power-of-two shapes, so FA3's
176 is not expressible), non-causal and causal (bottom-right aligned == ordinary lower triangle for Sq == Skv: tiles
above the diagonal are skipped, the diagonal tiles are masked; CTAs are launched heaviest first). Not supported:
Sq != Skv, ragged S, GQA, dropout, backward, persistent scheduling, fp8.

Usage: ``python benchmarks/experiments/gluon_attention_fwd.py --compile-only`` (no GPU needed: compiles every
configuration for sm_90a and reports registers / shared memory / spills / instruction checks) or, on an H200,
``python benchmarks/experiments/gluon_attention_fwd.py [--out results.json]`` (correctness, timing vs. torch SDPA
flash and cuDNN, and a small knob sweep).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import torch
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

WG_M = 64  # query rows per consumer warpgroup
NUM_CONSUMERS = 2
BLOCK_M = WG_M * NUM_CONSUMERS
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


# ---------------------------------------------------------------------------------------------------------------
# Kernel
# ---------------------------------------------------------------------------------------------------------------


@gluon.jit
def _producer(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bars, k_ready, k_empty, v_ready, v_empty,  #
              q_row0, kv_row0, n_cta_tiles,  #
              BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    wg_m: gl.constexpr = q_desc.block_type.shape[0]
    for w in gl.static_range(2):
        mbarrier.expect(q_bars.index(w), q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [q_row0 + w * wg_m, 0], q_bars.index(w), q_smem.index(w))
    for j in range(n_cta_tiles):
        s = j % STAGES
        ph = (j // STAGES) & 1
        row = kv_row0 + j * BLOCK_N
        # A fresh mbarrier counts as "phase 1 complete", so the first lap (ph = 0) passes at once.
        mbarrier.wait(k_empty.index(s), ph ^ 1)
        mbarrier.expect(k_ready.index(s), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [row, 0], k_ready.index(s), k_smem.index(s))
        mbarrier.wait(v_empty.index(s), ph ^ 1)
        mbarrier.expect(v_ready.index(s), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [row, 0], v_ready.index(s), v_smem.index(s))


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
def _softmax_step(s_acc, m_i, l_i, qk_scale, r0, c0, MASK: gl.constexpr, s_layout: gl.constexpr):
    """Online-softmax update for one S tile (fp32, s_layout). Returns (p fp32, alpha, m_new, l_new)."""
    if MASK:
        rows = r0 + gl.arange(0, s_acc.shape[0], layout=gl.SliceLayout(1, s_layout))
        cols = c0 + gl.arange(0, s_acc.shape[1], layout=gl.SliceLayout(0, s_layout))
        keep = gl.expand_dims(cols, 0) <= gl.expand_dims(rows, 1)
        s_acc = gl.where(keep, s_acc, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s_acc, axis=1) * qk_scale)
    alpha = gl.exp2(m_i - m_new)
    p = gl.exp2(s_acc * qk_scale - gl.expand_dims(m_new, 1))
    l_new = l_i * alpha + gl.sum(p, axis=1)
    return p, alpha, m_new, l_new


@gluon.jit
def _consumer_step(j, q, k_smem, v_smem, k_ready, k_empty, v_ready, v_empty, turn_bars,  #
                   acc, p16, m_i, l_i, qk_scale, r0, turn,  #
                   WG: gl.constexpr, STAGES: gl.constexpr, MASK: gl.constexpr, PINGPONG: gl.constexpr,
                   s_layout: gl.constexpr, o_row_layout: gl.constexpr, p_layout: gl.constexpr):
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
    p, alpha, m_i, l_i = _softmax_step(s_acc, m_i, l_i, qk_scale, r0, j * block_n, MASK, s_layout)
    acc, p16 = warpgroup_mma_wait(0, deps=(o_tok, p16))
    mbarrier.arrive(v_empty.index(sp), count=1)
    acc = acc * gl.expand_dims(gl.convert_layout(alpha, o_row_layout, assert_trivial=True), 1)
    p16 = gl.convert_layout(p.to(p16.dtype), p_layout, assert_trivial=True)
    return acc, p16, m_i, l_i


@gluon.jit
def _consumer(WG: gl.constexpr, o_desc, q_smem, k_smem, v_smem, q_bars, k_ready, k_empty, v_ready, v_empty,
              turn_bars, lse_ptr, q_row0, m0, n_cta_tiles, qk_scale,  #
              HEAD_D: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
              PINGPONG: gl.constexpr):
    dtype: gl.constexpr = o_desc.dtype
    wg_m: gl.constexpr = o_desc.block_type.shape[0]
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_D, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    o_row_layout: gl.constexpr = gl.SliceLayout(1, o_layout)

    r0 = m0 + WG * wg_m  # first query row (within the sequence) of this consumer
    if CAUSAL:
        n_tiles = (r0 + wg_m + BLOCK_N - 1) // BLOCK_N  # tiles this consumer needs
        n_full = r0 // BLOCK_N  # tiles entirely at or below the diagonal: no mask
    else:
        n_tiles = n_cta_tiles
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
    p, alpha, m_i, l_i = _softmax_step(s_acc, m_i, l_i, qk_scale, r0, 0, CAUSAL, s_layout)
    p16 = gl.convert_layout(p.to(dtype), p_layout, assert_trivial=True)
    acc = gl.zeros([wg_m, HEAD_D], gl.float32, o_layout)

    # ---- steady state: issue S_j and O += P_{j-1} V_{j-1} together; softmax(S_j) overlaps the P V wgmma.
    # Unmasked tiles first, then (causal) the diagonal tiles with the mask.
    n_lo = gl.minimum(gl.maximum(n_full, 1), n_tiles)
    for j in range(1, n_lo):
        acc, p16, m_i, l_i = _consumer_step(j, q, k_smem, v_smem, k_ready, k_empty, v_ready, v_empty, turn_bars,
                                            acc, p16, m_i, l_i, qk_scale, r0, j, WG, STAGES, False, PINGPONG,
                                            s_layout, o_row_layout, p_layout)
    if CAUSAL:
        for j in range(n_lo, n_tiles):
            acc, p16, m_i, l_i = _consumer_step(j, q, k_smem, v_smem, k_ready, k_empty, v_ready, v_empty, turn_bars,
                                                acc, p16, m_i, l_i, qk_scale, r0, j, WG, STAGES, True, PINGPONG,
                                                s_layout, o_row_layout, p_layout)
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
    rows = q_row0 + WG * wg_m + gl.arange(0, wg_m, layout=gl.SliceLayout(1, s_layout))
    gl.store(lse_ptr + rows, lse)
    # Q slice is no longer read by any wgmma (all waited): reuse it as the output staging buffer.
    q.store(out.to(dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(o_desc, [q_row0 + WG * wg_m, 0], q)
    tma.store_wait(0)


@gluon.jit
def _attn_fwd_kernel(q_desc, k_desc, v_desc, o_desc, lse_ptr, seq_len, qk_scale,  #
                     HEAD_D: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                     PINGPONG: gl.constexpr, PRODUCER_WARPS: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                     PRODUCER_REGS: gl.constexpr):
    wg_m: gl.constexpr = q_desc.block_type.shape[0]
    block_m: gl.constexpr = 2 * wg_m
    pid_m = gl.program_id(0)
    bh = gl.program_id(1)
    if CAUSAL:
        pid_m = gl.num_programs(0) - 1 - pid_m  # heaviest query blocks first
    m0 = pid_m * block_m
    q_row0 = bh * seq_len + m0
    kv_row0 = bh * seq_len
    if CAUSAL:
        n_cta_tiles = (m0 + block_m + BLOCK_N - 1) // BLOCK_N
    else:
        n_cta_tiles = seq_len // BLOCK_N

    q_smem = gl.allocate_shared_memory(q_desc.dtype, [2, wg_m, HEAD_D], q_desc.layout)
    k_smem = gl.allocate_shared_memory(k_desc.dtype, [STAGES, BLOCK_N, HEAD_D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(v_desc.dtype, [STAGES, BLOCK_N, HEAD_D], v_desc.layout)
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

    gl.warp_specialize([
        (_consumer, (0, o_desc, q_smem, k_smem, v_smem, q_bars, k_ready, k_empty, v_ready, v_empty, turn_bars,
                     lse_ptr, q_row0, m0, n_cta_tiles, qk_scale, HEAD_D, BLOCK_N, STAGES, CAUSAL, PINGPONG)),
        (_consumer, (1, o_desc, q_smem, k_smem, v_smem, q_bars, k_ready, k_empty, v_ready, v_empty, turn_bars,
                     lse_ptr, q_row0, m0, n_cta_tiles, qk_scale, HEAD_D, BLOCK_N, STAGES, CAUSAL, PINGPONG)),
        (_producer, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bars, k_ready, k_empty, v_ready, v_empty,
                     q_row0, kv_row0, n_cta_tiles, BLOCK_N, STAGES)),
    ], [4, PRODUCER_WARPS], [CONSUMER_REGS, PRODUCER_REGS])


# ---------------------------------------------------------------------------------------------------------------
# Host side
# ---------------------------------------------------------------------------------------------------------------

_GL_DTYPE = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16}


def _launch_params(head_d, block_n, stages, pingpong, producer_warps, consumer_regs, producer_regs, maxnreg):
    """Constexprs and launch options shared by the GPU launch and the CPU compile."""
    if producer_warps not in (1, 4):
        raise ValueError(f"producer_warps must be 1 or 4, got {producer_warps}")
    if maxnreg is None and producer_warps == 4:
        maxnreg = 168  # 65536 / (12 warps * 32) rounded down to 8: setmaxnreg moves registers to the consumers
    constexprs = dict(HEAD_D=head_d, BLOCK_N=block_n, STAGES=stages, PINGPONG=pingpong, PRODUCER_WARPS=producer_warps,
                      CONSUMER_REGS=consumer_regs, PRODUCER_REGS=producer_regs)
    options = dict(num_warps=4, **({"maxnreg": maxnreg} if maxnreg is not None else {}))
    return constexprs, options


def _check_shapes(q, k, v, block_n, stages):
    if q.dim() != 4 or q.shape != k.shape or q.shape != v.shape:
        raise ValueError(f"q, k, v must all be [B, H, S, D] of one shape, got {q.shape}, {k.shape}, {v.shape}")
    if q.dtype not in _GL_DTYPE or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"dtype must be bf16 or fp16 (all equal), got {q.dtype}, {k.dtype}, {v.dtype}")
    B, H, S, D = q.shape
    if D not in (64, 128):
        raise ValueError(f"head dim must be 64 or 128, got {D}")
    if block_n not in (64, 128):
        raise ValueError(f"block_n must be 64 or 128 (power of two for Gluon tensors), got {block_n}")
    if S % BLOCK_M or S % block_n:
        raise ValueError(f"S={S} must be a multiple of BLOCK_M={BLOCK_M} and block_n={block_n}")
    smem = (2 * WG_M * D + 2 * stages * block_n * D) * q.element_size()
    if smem > 227 * 1024 - 256:
        raise ValueError(f"stages={stages}, block_n={block_n}, D={D} need {smem} B of shared memory (> 227 KiB)")
    for t in (q, k, v):
        if not t.is_contiguous():
            raise ValueError("q, k, v must be contiguous")
    return B, H, S, D


def _descriptors(q, k, v, o, block_n):
    B, H, S, D = q.shape
    gdt = _GL_DTYPE[q.dtype]
    q_layout = gl.NVMMASharedLayout.get_default_for([WG_M, D], gdt)
    kv_layout = gl.NVMMASharedLayout.get_default_for([block_n, D], gdt)
    q2, k2, v2, o2 = (t.view(B * H * S, D) for t in (q, k, v, o))
    return (TensorDescriptor.from_tensor(q2, [WG_M, D], q_layout),
            TensorDescriptor.from_tensor(k2, [block_n, D], kv_layout),
            TensorDescriptor.from_tensor(v2, [block_n, D], kv_layout),
            TensorDescriptor.from_tensor(o2, [WG_M, D], q_layout))


def gluon_attention(q, k, v, causal=False, scale=None, *, block_n=128, stages=2, pingpong=True, producer_warps=4,
                    consumer_regs=240, producer_regs=24, maxnreg=None, out=None, lse=None):
    """Attention forward. q, k, v: [B, H, S, D] contiguous bf16/fp16. Returns (o [B, H, S, D], lse [B, H, S] fp32).

    lse is the natural log of the softmax denominator with the scale included: log(sum_j exp(scale * q.k_j)).
    """
    B, H, S, D = _check_shapes(q, k, v, block_n, stages)
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    if scale <= 0:
        raise ValueError("scale must be positive (the running max is taken before scaling)")
    o = torch.empty_like(q) if out is None else out
    lse = torch.empty((B, H, S), device=q.device, dtype=torch.float32) if lse is None else lse
    q_desc, k_desc, v_desc, o_desc = _descriptors(q, k, v, o, block_n)
    constexprs, options = _launch_params(D, block_n, stages, pingpong, producer_warps, consumer_regs, producer_regs,
                                         maxnreg)
    grid = (S // BLOCK_M, B * H)
    _attn_fwd_kernel[grid](q_desc, k_desc, v_desc, o_desc, lse, S, scale * LOG2E, CAUSAL=causal, **constexprs,
                           **options)
    return o, lse


# ---------------------------------------------------------------------------------------------------------------
# CPU compile (sm_90a) and inspection
# ---------------------------------------------------------------------------------------------------------------

DEFAULT_CONFIG = dict(block_n=128, stages=2, pingpong=True, producer_warps=4)


def _configs_to_compile():
    """Every configuration the GPU mode launches (correctness default + sweep), bf16 and fp16, D 128 and 64."""
    cfgs = []
    for causal in (False, True):
        for dt in (torch.bfloat16, torch.float16):
            cfgs.append(dict(DEFAULT_CONFIG, dtype=dt, head_d=128, causal=causal))
        cfgs.append(dict(DEFAULT_CONFIG, dtype=torch.bfloat16, head_d=64, causal=causal))
    for sw in SWEEP:
        for causal in (False, True):
            c = dict(DEFAULT_CONFIG, dtype=torch.bfloat16, head_d=128, causal=causal)
            c.update(sw)
            if c not in cfgs:
                cfgs.append(c)
    return cfgs


SWEEP = [
    dict(block_n=128, stages=2, pingpong=True, producer_warps=4),
    dict(block_n=128, stages=2, pingpong=False, producer_warps=4),
    dict(block_n=128, stages=3, pingpong=True, producer_warps=4),
    dict(block_n=128, stages=3, pingpong=False, producer_warps=4),
    dict(block_n=64, stages=3, pingpong=True, producer_warps=4),
    dict(block_n=64, stages=4, pingpong=False, producer_warps=4),
    dict(block_n=128, stages=2, pingpong=True, producer_warps=1),
]


def _tool(name):
    here = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)
    return here if os.path.exists(here) else shutil.which(name)


def compile_one(dtype=torch.bfloat16, head_d=128, causal=False, block_n=128, stages=2, pingpong=True,
                producer_warps=4, consumer_regs=240, producer_regs=24, maxnreg=None, seq_len=4096):
    """Compile the kernel for sm_90a without a GPU; returns the CompiledKernel."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    # Host-side descriptors over small CPU tensors give exactly the signature strings the launcher would produce.
    x = torch.empty(BLOCK_M, head_d, dtype=dtype)
    gdt = _GL_DTYPE[dtype]
    q_desc = TensorDescriptor.from_tensor(x, [WG_M, head_d], gl.NVMMASharedLayout.get_default_for([WG_M, head_d], gdt))
    kv_desc = TensorDescriptor.from_tensor(x, [block_n, head_d],
                                           gl.NVMMASharedLayout.get_default_for([block_n, head_d], gdt))
    constexprs, options = _launch_params(head_d, block_n, stages, pingpong, producer_warps, consumer_regs,
                                         producer_regs, maxnreg)
    constexprs["CAUSAL"] = causal
    fn = _attn_fwd_kernel
    sig = {}
    for name in fn.arg_names:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name in ("q_desc", "o_desc"):
            sig[name] = mangle_type(q_desc)
        elif name in ("k_desc", "v_desc"):
            sig[name] = mangle_type(kv_desc)
        elif name == "lse_ptr":
            sig[name] = "*fp32"
        elif name == "seq_len":
            sig[name] = "i32"
        elif name == "qk_scale":
            sig[name] = "fp32"
        else:
            raise AssertionError(name)
    # The launcher specialises 16-divisible pointers / ints; mirror it (S is a multiple of 128).
    attrs = {(fn.arg_names.index("lse_ptr"), ): [["tt.divisibility", 16]]}
    if seq_len % 16 == 0:
        attrs[(fn.arg_names.index("seq_len"), )] = [["tt.divisibility", 16]]
    src = GluonASTSource(fn, sig, constexprs, attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def inspect_compiled(ck):
    """Registers / smem / spills (ptxas -v on the PTX) and instruction checks (PTX + SASS)."""
    ptx = ck.asm["ptx"]
    info = dict(shared=ck.metadata.shared, num_warps=ck.metadata.num_warps)
    info["total_warps"] = ck.metadata.num_warps  # all partitions, after warp specialization
    m = re.search(r"\.maxnreg\s+(\d+)", ptx)
    info["maxnreg"] = int(m.group(1)) if m else None
    info["setmaxnreg"] = sorted({f"{a}{b}" for a, b in re.findall(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+)",
                                                                   ptx)})
    ptxas = _tool("ptxas")
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "k.ptx")
        with open(p, "w") as f:
            f.write(ptx)
        r = subprocess.run([ptxas, "-v", "--gpu-name=sm_90a", p, "-o", os.path.join(d, "k.cubin")],
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
            s = subprocess.run([cuobjdump, "-sass", os.path.join(d, "k.cubin")], capture_output=True, text=True)
            sass = s.stdout
    regs_seen = [int(r) for r in re.findall(r"\bR(\d+)\b", sass)]
    info["sass_max_reg_index"] = max(regs_seen) if regs_seen else None  # highest R used anywhere (any partition)
    info["ptx_counts"] = {k: len(re.findall(pat, ptx)) for k, pat in [
        ("wgmma.mma_async", r"wgmma\.mma_async"), ("wgmma.wait_group", r"wgmma\.wait_group"),
        ("cp.async.bulk.tensor(g2s)", r"cp\.async\.bulk\.tensor\.\dd\.shared::cluster\.global"),
        ("cp.async.bulk.tensor(s2g)", r"cp\.async\.bulk\.tensor\.\dd\.global\.shared"),
        ("mbarrier.try_wait", r"mbarrier\.try_wait"), ("mbarrier.arrive", r"mbarrier\.arrive"),
        ("bar.sync/barrier.sync", r"\b(?:bar|barrier)\.sync"), ("ld.local/st.local", r"\b(?:ld|st)\.local")]}
    info["sass_counts"] = {k: len(re.findall(pat, sass)) for k, pat in [
        ("HGMMA", r"\bHGMMA\b"), ("UTMALDG", r"\bUTMALDG\b"), ("UTMASTG", r"\bUTMASTG\b"),
        ("SYNCS(mbarrier)", r"\bSYNCS\."), ("LDL/STL", r"\b(?:LDL|STL)\b"), ("USETMAXREG", r"\bUSETMAXREG\b")]}
    return info


def compile_only():
    ok = True
    rows = []
    for cfg in _configs_to_compile():
        name = (f"{str(cfg['dtype']).replace('torch.', '')} D{cfg['head_d']} {'causal' if cfg['causal'] else 'full'}"
                f" bn{cfg['block_n']} st{cfg['stages']} {'pp' if cfg['pingpong'] else 'nopp'}"
                f" prodw{cfg['producer_warps']}")
        t0 = time.time()
        try:
            ck = compile_one(**cfg)
            info = inspect_compiled(ck)
        except Exception as e:  # noqa: BLE001 - report and continue with the other configurations
            ok = False
            print(f"[FAIL] {name}: {type(e).__name__}: {str(e)[:3000]}")
            rows.append(dict(config=name, error=f"{type(e).__name__}: {e}"))
            continue
        checks = dict(wgmma=info["sass_counts"]["HGMMA"] > 0 and info["ptx_counts"]["wgmma.mma_async"] > 0,
                      tma_load=info["sass_counts"]["UTMALDG"] > 0, tma_store=info["sass_counts"]["UTMASTG"] > 0,
                      mbarrier=info["ptx_counts"]["mbarrier.try_wait"] > 0
                      and info["sass_counts"]["SYNCS(mbarrier)"] > 0,
                      no_spills=info["spill_stores"] == 0 and info["spill_loads"] == 0
                      and info["sass_counts"]["LDL/STL"] == 0,
                      ptxas_clean=info["ptxas_rc"] == 0 and not info["ptxas_warnings"])
        good = all(checks.values())
        ok &= good
        print(f"[{'ok' if good else 'CHECK'}] {name}: {time.time() - t0:.1f}s regs={info['regs']} "
              f"(maxnreg={info['maxnreg']}, setmaxnreg={info['setmaxnreg']}, warps={info['total_warps']}) "
              f"sass_max_R={info['sass_max_reg_index']} smem={info['shared']} B "
              f"spills={info['spill_stores']}/{info['spill_loads']} stack={info['stack']}")
        print(f"       ptx: {info['ptx_counts']}")
        print(f"       sass: {info['sass_counts']}")
        if info["ptxas_warnings"]:
            print(f"       ptxas warnings: {info['ptxas_warnings']}")
        print(f"       checks: {checks}")
        rows.append(dict(config=name, **{k: v for k, v in info.items()}, checks=checks))
    print("compile-only:", "ALL OK" if ok else "SOME CHECKS FAILED")
    return ok, rows


# ---------------------------------------------------------------------------------------------------------------
# GPU mode: correctness, timing, sweep
# ---------------------------------------------------------------------------------------------------------------


def _reference(q, k, v, causal, scale):
    qd, kd, vd = q.double(), k.double(), v.double()
    s = torch.matmul(qd, kd.transpose(-1, -2)) * scale
    if causal:
        S = q.shape[2]
        mask = torch.ones(S, S, dtype=torch.bool, device=q.device).tril()
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    o = torch.matmul(torch.softmax(s, dim=-1), vd)
    return o, lse


_SEED = [1234]


def check_correctness(cfg, shapes, dtypes, causals):
    results = []
    for dt in dtypes:
        for causal in causals:
            for (B, H, S, D) in shapes:
                name = f"B{B} H{H} S{S} D{D} {str(dt).replace('torch.', '')} {'causal' if causal else 'full'}"
                row = dict(shape=[B, H, S, D], dtype=str(dt), causal=causal, config=dict(cfg))
                _WATCHDOG.beat(f"correctness {cfg} {name}")
                try:
                    _SEED[0] += 1
                    torch.manual_seed(_SEED[0])
                    q = torch.randn(B, H, S, D, device="cuda", dtype=dt)
                    k = torch.randn(B, H, S, D, device="cuda", dtype=dt)
                    v = torch.randn(B, H, S, D, device="cuda", dtype=dt)
                    scale = 1.0 / math.sqrt(D)
                    outs = []
                    for _ in range(2):
                        o = torch.full_like(q, float("nan"))
                        lse = torch.full((B, H, S), float("nan"), device="cuda", dtype=torch.float32)
                        gluon_attention(q, k, v, causal=causal, scale=scale, out=o, lse=lse, **cfg)
                        torch.cuda.synchronize()
                        outs.append((o, lse))
                    o_ref, lse_ref = _reference(q, k, v, causal, scale)
                    (o, lse), (o2, lse2) = outs
                    err_o = (o.double() - o_ref).abs().max().item()
                    err_lse = (lse.double() - lse_ref).abs().max().item()
                    nan = bool(torch.isnan(o).any().item() or torch.isnan(lse).any().item())
                    bitwise = bool(torch.equal(o, o2) and torch.equal(lse, lse2))
                    tol_o = 2e-2 if dt == torch.bfloat16 else 5e-3
                    ok = (not nan) and err_o <= tol_o and err_lse <= 1e-3 and bitwise
                    row.update(err_o=err_o, err_lse=err_lse, nan=nan, bitwise_repeat=bitwise, tol_o=tol_o,
                               passed=ok)
                    print(f"  [{'PASS' if ok else 'FAIL'}] {name}: max|o-ref|={err_o:.3e} (tol {tol_o:g}) "
                          f"max|lse-ref|={err_lse:.3e} (tol 1e-3) nan={nan} repeat-bitwise-equal={bitwise}")
                except Exception as e:  # noqa: BLE001
                    row.update(passed=False, error=f"{type(e).__name__}: {e}")
                    print(f"  [FAIL] {name}: {type(e).__name__}: {str(e)[:500]}")
                results.append(row)
    return results


def _time_ms(fn, reps=20, inner=10):
    """Median over `reps` of the mean time of `inner` back-to-back launches (CUDA events), after warm-up."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / inner)
    times.sort()
    return times[len(times) // 2]


def _sdpa_ms(q, k, v, causal, backend):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    be = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[backend]
    try:
        with sdpa_kernel(be):
            fn = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
            fn()
            return _time_ms(fn)
    except Exception as e:  # noqa: BLE001
        print(f"    sdpa {backend} failed: {type(e).__name__}: {str(e)[:200]}")
        return None


def _tflops(B, H, S, D, causal, ms):
    if ms is None:
        return None
    flops = 4.0 * B * H * S * S * D / (2 if causal else 1)
    return flops / (ms * 1e-3) / 1e12


def _fmt(x, width=7):
    return f"{x:{width}.1f}" if x else " " * (width - 3) + "n/a"


def run_timing(cfg, shapes, causals, with_sdpa=True, label="default"):
    rows = []
    for causal in causals:
        for (B, H, S, D) in shapes:
            _WATCHDOG.beat(f"timing {label} B{B} H{H} S{S} D{D} causal={causal}")
            q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            row = dict(shape=[B, H, S, D], causal=causal, config=dict(cfg), label=label)
            try:
                o = torch.empty_like(q)
                lse = torch.empty((B, H, S), device="cuda", dtype=torch.float32)
                fn = functools.partial(gluon_attention, q, k, v, causal=causal, out=o, lse=lse, **cfg)
                ms = _time_ms(fn)
                row.update(gluon_ms=ms, gluon_tflops=_tflops(B, H, S, D, causal, ms))
            except Exception as e:  # noqa: BLE001
                row.update(gluon_ms=None, gluon_tflops=None, error=f"{type(e).__name__}: {e}")
                print(f"    gluon failed {cfg}: {type(e).__name__}: {str(e)[:500]}")
            if with_sdpa:
                for be in ("flash", "cudnn"):
                    _WATCHDOG.beat(f"timing sdpa-{be} B{B} H{H} S{S} D{D} causal={causal}")
                    ms = _sdpa_ms(q, k, v, causal, be)
                    row[f"{be}_ms"] = ms
                    row[f"{be}_tflops"] = _tflops(B, H, S, D, causal, ms)
            g, c = row.get("gluon_tflops"), row.get("cudnn_tflops")
            row["gluon_over_cudnn"] = g / c if g and c else None
            rows.append(row)
            kind = "causal" if causal else "full  "
            line = f"    B{B} H{H} S{S} D{D} {kind} [{label}] gluon {_fmt(row['gluon_tflops'])}"
            if with_sdpa:
                line += f" flash {_fmt(row.get('flash_tflops'))} cudnn {_fmt(row.get('cudnn_tflops'))}"
            print(line + " TFLOP/s", flush=True)
    return rows


class _Watchdog:
    """A GPU hang (e.g. an mbarrier deadlock) cannot be caught: report what was running, save partial results, exit."""

    def __init__(self, timeout_s=90.0):
        self.timeout_s = timeout_s
        self.label = "start"
        self.last = time.time()
        self.results = None
        self.out_path = None
        self.thread = None

    def beat(self, label):
        self.label = label
        self.last = time.time()

    def start(self, results, out_path):
        import threading

        self.results, self.out_path = results, out_path
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while True:
            time.sleep(5)
            if time.time() - self.last > self.timeout_s:
                print(f"\nWATCHDOG: no progress for {self.timeout_s:.0f}s during '{self.label}': "
                      "probable kernel hang (deadlock); aborting.", flush=True)
                if self.out_path and self.results is not None:
                    try:
                        self.results["hang"] = self.label
                        with open(self.out_path, "w") as fh:
                            json.dump(self.results, fh, indent=1, default=str)
                    except Exception as e:  # noqa: BLE001
                        print("could not write partial results:", e, flush=True)
                os._exit(3)


_WATCHDOG = _Watchdog()


def gpu_main(out_path, quick=False):
    t_start = time.time()
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  triton {triton.__version__}")
    results = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__)
    _WATCHDOG.start(results, out_path)
    cfg = dict(DEFAULT_CONFIG)

    print("== correctness (default config", cfg, ")")
    shapes = [(1, 2, 128, 128), (1, 2, 256, 128), (1, 2, 512, 128), (1, 2, 1024, 128), (2, 4, 2048, 128)]
    corr = check_correctness(cfg, shapes, (torch.bfloat16, torch.float16), (False, True))
    corr += check_correctness(cfg, [(1, 2, 256, 64), (2, 4, 1024, 64)], (torch.bfloat16, ), (False, True))
    print("== correctness of the sweep configs (bf16, D128)")
    for sw in SWEEP:
        if sw != cfg:
            print(" ", sw)
            corr += check_correctness(dict(sw), [(1, 2, 512, 128), (2, 4, 1024, 128)], (torch.bfloat16, ),
                                      (False, True))
    results["correctness"] = corr
    n_fail = sum(not r.get("passed") for r in corr)
    print(f"correctness: {len(corr) - n_fail}/{len(corr)} passed  ({time.time() - t_start:.0f}s)")

    print("== timing (bf16)")
    tshapes = [(4, 32, 4096, 128)] + [(16384 // S, 32, S, 128) for S in (1024, 2048, 8192, 16384)]
    if quick:
        tshapes = tshapes[:1]
    timing = run_timing(cfg, tshapes, (False, True))
    results["timing"] = timing
    print(f"  ({time.time() - t_start:.0f}s)")

    print("== knob sweep at B4 H32 S4096 D128 bf16")
    sweep = []
    for sw in SWEEP:
        sweep += run_timing(dict(sw), [(4, 32, 4096, 128)], (False, True), with_sdpa=False,
                            label=" ".join(f"{k}={v}" for k, v in sw.items()))
    results["sweep"] = sweep

    print("\n== summary (TFLOP/s, bf16; default config", cfg, ")")
    print(f"{'shape':<22}{'causal':<8}{'gluon':>8}{'flash':>8}{'cudnn':>8}{'g/cudnn':>9}")
    for r in timing:
        B, H, S, D = r["shape"]
        f = functools.partial(_fmt, width=8)
        ratio = f"{r['gluon_over_cudnn']:9.3f}" if r.get("gluon_over_cudnn") else "      n/a"
        print(f"{f'B{B} H{H} S{S} D{D}':<22}{str(r['causal']):<8}{f(r.get('gluon_tflops'))}"
              f"{f(r.get('flash_tflops'))}{f(r.get('cudnn_tflops'))}{ratio}")
    print("sweep (4k shape):")
    for r in sweep:
        t = r.get("gluon_tflops")
        print(f"  {r['label']:<70} {'causal' if r['causal'] else 'full  '} "
              + (f"{t:7.1f}" if t else "  error: " + str(r.get("error", ""))[:200]))
    best = max((r for r in sweep if r.get("gluon_tflops") and not r["causal"]), key=lambda r: r["gluon_tflops"],
               default=None)
    if best:
        print(f"best non-causal sweep config: {best['label']} -> {best['gluon_tflops']:.1f} TFLOP/s")
    results["elapsed_s"] = time.time() - t_start
    if out_path:
        os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
        with open(out_path, "w") as fh:
            json.dump(results, fh, indent=1, default=str)
        print("wrote", out_path)
    print(f"total {time.time() - t_start:.0f}s; correctness {'ALL PASS' if n_fail == 0 else f'{n_fail} FAILED'}")
    return n_fail == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--compile-only", action="store_true", help="compile every config for sm_90a (no GPU needed)")
    ap.add_argument("--quick", action="store_true", help="GPU mode: time only the 4k shape")
    default_out = os.path.join(os.environ["OUT"], "gluon_attention.json") if os.environ.get("OUT") else None
    ap.add_argument("--out", default=default_out, help="JSON results path (default $OUT/gluon_attention.json)")
    args = ap.parse_args()
    if args.compile_only:
        ok, rows = compile_only()
        if args.out:
            os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
            with open(args.out, "w") as fh:
                json.dump(rows, fh, indent=1, default=str)
        return 0 if ok else 1
    if not torch.cuda.is_available():
        print("no CUDA device: use --compile-only")
        return 2
    return 0 if gpu_main(args.out, quick=args.quick) else 1


if __name__ == "__main__":
    sys.exit(main())
