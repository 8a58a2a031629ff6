"""Row normalisation backward kernels in Triton, shared by ``rms_norm_bwd``, ``layer_norm_bwd`` and
``add_rms_norm_bwd`` (constexpr flags as in the forward: ``CENTER`` for layer norm, ``DH`` for the gradient that
reaches add_rms_norm's h directly, ``OFFSET`` for the Gemma weight).

With xhat = (x - mean) * rstd (mean = 0 for RMS) and g = w * dy, per row of D columns::

    dx = rstd * (g - xhat * sum(xhat * g) / D - sum(g) / D)      (the last term for layer norm only)
    dx += dh                                                     (add_rms_norm: dx is also dresidual)
    dweight = sum over rows of dy * xhat,   dbias = sum over rows of dy

``rstd`` (and ``mean``) are the fp32 statistics the forward saved. dweight and dbias are column sums over every
row: each program accumulates its rows' contributions in fp32 registers and writes one partial row; a second
small kernel adds the partials column by column in a fixed order. No float atomics, so results are bitwise
reproducible, and x and dy are read once.

Rungs:

* ``naive``: as unfused eager autograd: xhat and g written as fp32 tensors, a row-sum kernel, a dx kernel, and
  column sums in two stages (per block of rows, then over blocks).
* ``fused``: a persistent grid as large as the GPU holds at once; each program takes tiles of rows in turn, holds
  a whole tile in registers (the next tile's x and dy already loading), writes dx and keeps dweight partials in a
  [rows, columns] register accumulator, summed over its rows once at the end (run 8 on the H200: summing over the
  tile's rows every tile, a cross-warp reduction, held rms_norm_bwd at 16384 x 1024 to 0.56 TB/s). Rows up to
  :data:`~kernelwright.ops._norm_common.FUSED_BWD_MAX_COLS` columns.
* ``split``: wide rows cut into chunks over cooperating programs, which exchange their two row sums (one 64-bit
  word each) as the forward ``split`` does; each chunk's program keeps the dweight partials of its columns.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelwright import runtime
from kernelwright.ops._norm_common import rows2d
from kernelwright.ops._triton_helpers import register_cap, to_output
from kernelwright.ops.rms_norm import triton as _fwd
from kernelwright.ops.rms_norm.triton import NO_HINTS, STREAM, naive_block, persistent_groups, warps_for

FUSED_TILE = 4096  # values of x (and of dy) a fused program holds per step (rows narrower than this are tiled)
SPLIT_MAXNREG: int | None = None
"""register cap a thread of the backward split rung (an experiment switch, as the forward's: at 8192 x 8 warps it
takes 223 (rms) / 245 (layer) registers, one program an SM)."""
WEIGHT_HOLD = True
"""the split rung holds its weight chunk in registers (in the input dtype) across rows instead of reloading it for
every row. H200 run 24 (bf16, ``norm_configs.py --library``, TB/s at 4096x65536 / 1024x262144): rms 2.53 -> 3.12
/ 2.06 -> 2.38, layer 2.19 -> 2.31 / 1.91 -> 1.95, add_rms 2.82 -> 3.18 / 2.35 -> 2.60. The reload was an L1 hit
only while the streamed x and dy had not evicted it. From :data:`WEIGHT_HOLD_FROM` columns only."""
WEIGHT_HOLD_FROM = 16385
"""rows at least this wide hold the weight (the wide configuration, where it was measured); the narrower one
(8192 x 32 warps, 64 registers) spills more with it (sm_90: 16 -> 32 bytes for rms, 56 -> 80 for layer norm),
not timed."""
FUSED_PREFETCH = True  # the fused rung loads its next tile while it reduces this one (norm_configs.py --library)
FUSED_MAXNREG: int | None = None
"""register cap a thread of the fused backward (Triton's ``maxnreg``; None: the compiler's choice), an experiment
switch: 168 is what lets three 4-warp programs share an SM (see :data:`FUSED_DW_PER_TILE`); measured and off
(H200 run 36: -12% to -50% alone, spilling, and no gain with the per-tile sums)."""
FUSED_DW_PER_TILE = False
"""Experiment switch (``benchmarks/experiments/switch_bench.py``; measured and off: H200 run 36, bf16 at 1024 columns,
per tile -7% to -22% at 16384 rows for rms / add_rms, +2% rms and -2% layer norm at 65536 rows, add_rms -30%;
with FUSED_MAXNREG = 168 no better; journal "Session 9"): the fused backward sums each
tile's dweight (and dbias) contributions over its rows at once, into a ``[BLOCK]`` accumulator, instead of
keeping ``[BLOCK_R, BLOCK]`` accumulators summed after the loop. sm_90 SASS at 1024 columns, bf16, 4 rows over 4
warps (the configuration used there): every thread holds all 4 rows of its 8 columns, so the per-tile sum is
thread-local (block barriers a tile unchanged: rms 3, layer norm 6) and the registers drop from 210 to 187 (rms)
and 251 to 210 (layer norm). Both still fit two programs an SM; with :data:`FUSED_MAXNREG` = 168 three do
(the lever that gave layer norm's wide forward +17-20%): capped at 168, rms spills nothing and layer norm 12 bytes
with this switch, 148 / 520 bytes without it. At 8 rows over 8 warps the rows of a tile are split across warps
and the same change adds shared-memory traffic and barriers (6 / 12 a tile): do not combine."""
PAIRED_SUMS: bool | None = None
"""None (default): on for the GPU, off under the interpreter (see :func:`paired_sums`); True / False force it.
On since H200 run 41 (``benchmarks/h200/ops.sh paired``; journal "Session 11"): bf16 layer norm backward, off -> on,
split rung 16384x4096 2.64 -> 2.81 TB/s, 4096x16384 2.10 -> 2.21, 4096x65536 2.32 -> 2.54, 1024x262144 2.04 -> 2.05;
fused rung 65536x1024 2.71 -> 2.80, 16384x1024 1.57 both. Layer norm's
backward computes its two row sums, sum(xhat * g) and sum(g), with one two-operand ``tl.reduce`` instead of two
``tl.sum``, in the fused and the split rungs. The sums are independent, and Triton lowers a multi-operand reduction
through one shared-memory round: the sm_90 SASS of the fused kernel at 1024 columns (bf16, 4 rows over 4 warps)
drops from 6 block barriers a tile to 3 (rms's count), 251 -> 255 registers (still two programs an SM); at 4096
columns (one row over 16 warps) 6 -> 3, 92 -> 88 registers (``benchmarks/experiments/sass_loops.py paired``).
RMS norm has one sum: the switch does not touch it."""


def paired_sums() -> bool:
    """:data:`PAIRED_SUMS` resolved: forced when set; else on, except under the interpreter, which folds a
    ``tl.reduce`` with a combine function sequentially (fp32 error growing with the row: 5.7e-5 relative on a sum of
    262144 squares, against 1.3e-7 for ``tl.sum``'s pairwise numpy sum), where the GPU reduces each thread's few
    values and then a tree. The CPU tests force it on where they test it."""
    return bool(PAIRED_SUMS) if PAIRED_SUMS is not None else not runtime.interpreting()


SPLIT_CHUNK, SPLIT_WARPS = 8192, 32  # columns and warps per program of the split rung up to 16384 columns
WIDE_CHUNK, WIDE_WARPS = 8192, 8  # beyond 16384 columns: see split_config
NAIVE_ROWS = 256  # rows per program of the naive rung's first column-sum stage


# --- rung: fused ---------------------------------------------------------------------------------------------------
@triton.jit
def _add_pair(a1, b1, a2, b2):
    return a1 + a2, b1 + b2


@triton.jit
def _norm_bwd_fused_kernel(
    x_ptr, w_ptr, dy_ptr, dh_ptr, mean_ptr, rstd_ptr, dx_ptr, dw_ptr, db_ptr,
    n_rows, n_cols, x_stride, dy_stride, dh_stride, dx_stride,
    CENTER: tl.constexpr, DH: tl.constexpr, OFFSET: tl.constexpr, PREFETCH: tl.constexpr, BLOCK_R: tl.constexpr,
    BLOCK: tl.constexpr, DW_PER_TILE: tl.constexpr = False, PAIRED_SUMS: tl.constexpr = False,
):
    pid = tl.program_id(0)
    n_progs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK)
    cmask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    if OFFSET:
        w += 1.0
    # [BLOCK_R, BLOCK] accumulators, summed over rows once after the loop: a per-tile sum over the rows would be a
    # cross-warp reduction through shared memory on every tile (rows of a tile live in different warps)
    if DW_PER_TILE:
        dw_acc = tl.zeros([BLOCK], tl.float32)
        db_acc = tl.zeros([BLOCK], tl.float32)
    else:
        dw_acc = tl.zeros([BLOCK_R, BLOCK], tl.float32)
        db_acc = tl.zeros([BLOCK_R, BLOCK], tl.float32)
    rr = tl.arange(0, BLOCK_R)
    if PREFETCH:
        rows = pid.to(tl.int64) * BLOCK_R + rr
        mask = (rows < n_rows)[:, None] & cmask[None, :]
        x_next = tl.load(x_ptr + rows[:, None] * x_stride + cols[None, :], mask=mask, other=0.0)
        dy_next = tl.load(dy_ptr + rows[:, None] * dy_stride + cols[None, :], mask=mask, other=0.0)
    for tile in range(pid, tl.cdiv(n_rows, BLOCK_R), n_progs):
        rows = tl.cast(tile, tl.int64) * BLOCK_R + rr
        rmask = rows < n_rows
        mask = rmask[:, None] & cmask[None, :]
        if PREFETCH:
            # software pipelining by hand: the next tile's loads are in flight during this tile's reductions
            x = x_next.to(tl.float32)
            dy = dy_next.to(tl.float32)
            nrows = rows + n_progs * BLOCK_R
            nmask = (nrows < n_rows)[:, None] & cmask[None, :]
            x_next = tl.load(x_ptr + nrows[:, None] * x_stride + cols[None, :], mask=nmask, other=0.0)
            dy_next = tl.load(dy_ptr + nrows[:, None] * dy_stride + cols[None, :], mask=nmask, other=0.0)
        else:
            x = tl.load(x_ptr + rows[:, None] * x_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(dy_ptr + rows[:, None] * dy_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(rstd_ptr + rows, mask=rmask, other=0.0)
        if CENTER:
            mean = tl.load(mean_ptr + rows, mask=rmask, other=0.0)
            xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
        else:
            xhat = x * rstd[:, None]
        g = dy * w[None, :]
        if CENTER and PAIRED_SUMS:
            s_xg, s_g = tl.reduce((xhat * g, g), 1, _add_pair)
            dx = g - xhat * (s_xg / n_cols)[:, None] - (s_g / n_cols)[:, None]
        else:
            dx = g - xhat * (tl.sum(xhat * g, 1) / n_cols)[:, None]
            if CENTER:
                dx -= (tl.sum(g, 1) / n_cols)[:, None]
        dx = dx * rstd[:, None]
        if DH:
            dx += tl.load(dh_ptr + rows[:, None] * dh_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        tl.store(dx_ptr + rows[:, None] * dx_stride + cols[None, :], to_output(dx, dx_ptr.dtype.element_ty),
                 mask=mask)
        if DW_PER_TILE:
            dw_acc += tl.sum(dy * xhat, 0)
            if CENTER:
                db_acc += tl.sum(dy, 0)
        else:
            dw_acc += dy * xhat
            if CENTER:
                db_acc += dy
    part = pid.to(tl.int64) * n_cols + cols
    if DW_PER_TILE:
        tl.store(dw_ptr + part, dw_acc, mask=cmask)
        if CENTER:
            tl.store(db_ptr + part, db_acc, mask=cmask)
    else:
        tl.store(dw_ptr + part, tl.sum(dw_acc, 0), mask=cmask)
        if CENTER:
            tl.store(db_ptr + part, tl.sum(db_acc, 0), mask=cmask)


# --- rung: split ---------------------------------------------------------------------------------------------------
@triton.jit
def _norm_bwd_split_kernel(
    x_ptr, w_ptr, dy_ptr, dh_ptr, mean_ptr, rstd_ptr, dx_ptr, dw_ptr, db_ptr, slot_ptr,
    n_rows, n_cols, x_stride, dy_stride, dh_stride, dx_stride,
    CENTER: tl.constexpr, DH: tl.constexpr, OFFSET: tl.constexpr,
    N_CHUNKS: tl.constexpr, CHUNKS_POW2: tl.constexpr, CHUNK: tl.constexpr,
    EVICT: tl.constexpr = "", STORE_CACHE: tl.constexpr = "", W_EVICT: tl.constexpr = "",
    W_HOLD: tl.constexpr = False, PAIRED_SUMS: tl.constexpr = False,
):
    # Program p holds chunk p % N_CHUNKS of rows p // N_CHUNKS, + groups, ...; slot: [R, N_CHUNKS] int64, -1 at
    # launch. A chunk publishes (sum(g), sum(xhat * g)) over its columns as one 64-bit word (high half: fp32 bits
    # of sum(g) with NaN made canonical, or of 1.0 for RMS, so never the all-ones -1 sentinel) by a relaxed
    # atomic exchange, then reads its partners' words until none is -1.
    pid = tl.program_id(0)
    chunk = pid % N_CHUNKS
    groups = tl.num_programs(0) // N_CHUNKS
    group = pid // N_CHUNKS
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = cols < n_cols
    ks = tl.arange(0, CHUNKS_POW2)
    kmask = ks < N_CHUNKS
    dw_acc = tl.zeros([CHUNK], tl.float32)
    db_acc = tl.zeros([CHUNK], tl.float32)
    nmask = mask & (group < n_rows)
    g64 = group.to(tl.int64)
    x_next = tl.load(x_ptr + g64 * x_stride + cols, mask=nmask, other=0.0, eviction_policy=EVICT)
    dy_next = tl.load(dy_ptr + g64 * dy_stride + cols, mask=nmask, other=0.0, eviction_policy=EVICT)
    if W_HOLD:  # in the input dtype (half the registers of fp32), converted where used
        w_held = tl.load(w_ptr + cols, mask=mask, other=0.0)
    for row in range(group, n_rows, groups):
        row64 = tl.cast(row, tl.int64)
        x = x_next.to(tl.float32)
        dy = dy_next.to(tl.float32)
        nxt = tl.cast(row + groups, tl.int64)
        nmask = mask & (nxt < n_rows)
        x_next = tl.load(x_ptr + nxt * x_stride + cols, mask=nmask, other=0.0, eviction_policy=EVICT)
        dy_next = tl.load(dy_ptr + nxt * dy_stride + cols, mask=nmask, other=0.0, eviction_policy=EVICT)
        rstd = tl.load(rstd_ptr + row64)
        if CENTER:
            xhat = tl.where(mask, (x - tl.load(mean_ptr + row64)) * rstd, 0.0)
        else:
            xhat = x * rstd
        if W_HOLD:  # held across rows (WEIGHT_HOLD), or loaded again for every row
            w = w_held.to(tl.float32)
        else:
            w = tl.load(w_ptr + cols, mask=mask, other=0.0, eviction_policy=W_EVICT).to(tl.float32)
        if OFFSET:
            w += 1.0
        g = dy * w
        if CENTER and PAIRED_SUMS:
            s1, s2 = tl.reduce((xhat * g, g), 0, _add_pair)
        else:
            s1 = tl.sum(xhat * g, 0)
            if CENTER:
                s2 = tl.sum(g, 0)
        if N_CHUNKS > 1:
            if CENTER:
                hi = tl.where(s2 != s2, float("nan"), s2).to(tl.int32, bitcast=True).to(tl.int64) << 32
            else:
                hi = tl.full([], 0x3F800000, tl.int64) << 32
            slots = slot_ptr + row64 * N_CHUNKS
            tl.atomic_xchg(slots + chunk, hi | s1.to(tl.uint32, bitcast=True).to(tl.int64), sem="relaxed")
            words = tl.load(slots + ks, mask=kmask, other=0, volatile=True)
            while tl.sum((words == -1).to(tl.int32), 0) > 0:
                words = tl.load(slots + ks, mask=kmask, other=0, volatile=True)
            s1 = tl.sum(tl.where(kmask, (words & 0xFFFFFFFF).to(tl.uint32).to(tl.float32, bitcast=True), 0.0), 0)
            if CENTER:
                s2 = tl.sum(tl.where(kmask, (words >> 32).to(tl.int32).to(tl.float32, bitcast=True), 0.0), 0)
        dx = g - xhat * (s1 / n_cols)
        if CENTER:
            dx -= s2 / n_cols
        dx = dx * rstd
        if DH:
            dx += tl.load(dh_ptr + row64 * dh_stride + cols, mask=mask, other=0.0, eviction_policy=EVICT).to(tl.float32)
        tl.store(dx_ptr + row64 * dx_stride + cols, to_output(dx, dx_ptr.dtype.element_ty), mask=mask,
                 cache_modifier=STORE_CACHE)
        dw_acc += dy * xhat
        if CENTER:
            db_acc += dy
    part = g64 * n_cols + cols
    tl.store(dw_ptr + part, dw_acc, mask=mask)
    if CENTER:
        tl.store(db_ptr + part, db_acc, mask=mask)


# --- the second stage: partial rows summed in a fixed order --------------------------------------------------------
@triton.jit
def _sum_partials_kernel(part_ptr, out_ptr, n_parts, n_cols, BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < n_cols
    acc = tl.zeros([BLOCK_P, BLOCK_C], tl.float32)
    for p0 in range(0, n_parts, BLOCK_P):
        ps = (p0 + tl.arange(0, BLOCK_P)).to(tl.int64)
        acc += tl.load(part_ptr + ps[:, None] * n_cols + cols[None, :],
                       mask=(ps < n_parts)[:, None] & cmask[None, :], other=0.0)
    tl.store(out_ptr + cols, to_output(tl.sum(acc, 0), out_ptr.dtype.element_ty), mask=cmask)


def _sum_partials(parts: torch.Tensor, out: torch.Tensor) -> None:
    n_parts, n_cols = parts.shape
    # under the interpreter one program takes every column: each program instance costs ~2 ms there
    block_c = min(triton.next_power_of_2(n_cols), 262144 if runtime.interpreting() else 256)
    block_p = min(triton.next_power_of_2(max(n_parts, 1)), 16)
    _sum_partials_kernel[(triton.cdiv(n_cols, block_c),)](parts, out, n_parts, n_cols, BLOCK_P=block_p,
                                                          BLOCK_C=block_c, num_warps=4)


# --- rung: naive ---------------------------------------------------------------------------------------------------
@triton.jit
def _naive_bwd_prep_kernel(x_ptr, w_ptr, dy_ptr, mean_ptr, rstd_ptr, xhat_ptr, g_ptr, n_cols, x_stride, dy_stride,
                           w_stride, CENTER: tl.constexpr, OFFSET: tl.constexpr, BLOCK: tl.constexpr):
    # xhat = (x - mean) * rstd and g = w * dy, both written as fp32 tensors (eager recomputes and stores them)
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask).to(tl.float32)
    if CENTER:
        x -= tl.load(mean_ptr + row)
    w = tl.load(w_ptr + cols * w_stride, mask=mask).to(tl.float32)
    if OFFSET:
        w += 1.0
    tl.store(xhat_ptr + row * n_cols + cols, x * tl.load(rstd_ptr + row), mask=mask)
    tl.store(g_ptr + row * n_cols + cols, tl.load(dy_ptr + row * dy_stride + cols, mask=mask).to(tl.float32) * w,
             mask=mask)


@triton.jit
def _naive_bwd_rowsum_kernel(xhat_ptr, g_ptr, c1_ptr, c2_ptr, n_cols, BLOCK: tl.constexpr):
    # c1 = mean(xhat * g), c2 = mean(g) per row
    row = tl.program_id(0).to(tl.int64)
    a1 = tl.zeros([BLOCK], tl.float32)
    a2 = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        g = tl.load(g_ptr + row * n_cols + cols, mask=mask, other=0.0)
        a1 += tl.load(xhat_ptr + row * n_cols + cols, mask=mask, other=0.0) * g
        a2 += g
    tl.store(c1_ptr + row, tl.sum(a1, 0) / n_cols)
    tl.store(c2_ptr + row, tl.sum(a2, 0) / n_cols)


@triton.jit
def _naive_bwd_dx_kernel(xhat_ptr, g_ptr, c1_ptr, c2_ptr, rstd_ptr, dh_ptr, dx_ptr, n_cols, dh_stride, dx_stride,
                         CENTER: tl.constexpr, DH: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    xhat = tl.load(xhat_ptr + row * n_cols + cols, mask=mask)
    dx = tl.load(g_ptr + row * n_cols + cols, mask=mask) - xhat * tl.load(c1_ptr + row)
    if CENTER:
        dx -= tl.load(c2_ptr + row)
    dx = dx * tl.load(rstd_ptr + row)
    if DH:
        dx += tl.load(dh_ptr + row * dh_stride + cols, mask=mask).to(tl.float32)
    tl.store(dx_ptr + row * dx_stride + cols, to_output(dx, dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _naive_colsum_kernel(dy_ptr, xhat_ptr, dw_ptr, db_ptr, n_rows, n_cols, dy_stride, ROWS: tl.constexpr,
                         CENTER: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    # first stage of eager's column sums: partials of ROWS rows per program (then summed by _sum_partials)
    blk = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < n_cols
    aw = tl.zeros([BLOCK_R, BLOCK_C], tl.float32)
    ab = tl.zeros([BLOCK_R, BLOCK_C], tl.float32)
    for r0 in range(0, tl.minimum(ROWS, n_rows - blk * ROWS), BLOCK_R):
        rows = (blk * ROWS + r0 + tl.arange(0, BLOCK_R)).to(tl.int64)
        mask = (rows < n_rows)[:, None] & cmask[None, :]
        dy = tl.load(dy_ptr + rows[:, None] * dy_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        aw += dy * tl.load(xhat_ptr + rows[:, None] * n_cols + cols[None, :], mask=mask, other=0.0)
        if CENTER:
            ab += dy
    tl.store(dw_ptr + blk.to(tl.int64) * n_cols + cols, tl.sum(aw, 0), mask=cmask)
    if CENTER:
        tl.store(db_ptr + blk.to(tl.int64) * n_cols + cols, tl.sum(ab, 0), mask=cmask)


def _naive_backward(x2, w, dy2, dh2, mean, rstd, dx2, dw, db, offset) -> None:
    n_rows, n_cols = x2.shape
    dev = x2.device
    center = db is not None
    block = naive_block(n_cols)
    grid = (n_rows, triton.cdiv(n_cols, block))
    xhat = torch.empty((n_rows, n_cols), dtype=torch.float32, device=dev)
    g = torch.empty_like(xhat)
    _naive_bwd_prep_kernel[grid](x2, w, dy2, mean, rstd, xhat, g, n_cols, x2.stride(0), dy2.stride(0), w.stride(0),
                                 CENTER=center, OFFSET=bool(offset), BLOCK=block)
    c1 = torch.empty(n_rows, dtype=torch.float32, device=dev)
    c2 = torch.empty_like(c1)
    _naive_bwd_rowsum_kernel[(n_rows,)](xhat, g, c1, c2, n_cols,
                                        BLOCK=min(max(4096, block), triton.next_power_of_2(n_cols)))
    _naive_bwd_dx_kernel[grid](xhat, g, c1, c2, rstd, dh2, dx2, n_cols, dh2.stride(0), dx2.stride(0), CENTER=center,
                               DH=dh2 is not dy2, BLOCK=block)
    n_blocks = triton.cdiv(n_rows, NAIVE_ROWS)
    pw = torch.empty((n_blocks, n_cols), dtype=torch.float32, device=dev)
    pb = torch.empty_like(pw) if center else pw
    block_c = min(triton.next_power_of_2(n_cols), 65536 if runtime.interpreting() else 256)
    _naive_colsum_kernel[(n_blocks, triton.cdiv(n_cols, block_c))](
        dy2, xhat, pw, pb, n_rows, n_cols, dy2.stride(0), ROWS=NAIVE_ROWS, CENTER=center, BLOCK_R=8,
        BLOCK_C=block_c)
    _sum_partials(pw, dw)
    if center:
        _sum_partials(pb, db)


# --- launcher ------------------------------------------------------------------------------------------------------
def split_config(n_cols: int) -> tuple[int, int, tuple[str, str]]:
    """(columns per program, warps, cache hints) of the backward split rung; one chunk a row under the interpreter.

    Up to 16384 columns: 8192-column chunks over 32 warps (run 8: 3.28-3.70 TB/s for rms at 4096-16384). Wider:
    8192 x 8 warps with streaming hints (loads of x, dy, dh evict-first, stores of dx ``.cs``), from the H200 sweep
    of 2026-12-03 (runs 20 and 22, bf16): rms 2.53 / 2.11 TB/s at 65536 / 262144 columns (2.32 / 0.87 with
    8192 x 32), layer 2.19 / 1.98 (1.67 / 0.88), add_rms 2.83 / 2.39 (2.66 / 1.06). 4096 x 4-8 was within 5-8%
    at 65536 columns and slower at 262144.
    """
    if runtime.interpreting():
        return triton.next_power_of_2(n_cols), 4, NO_HINTS
    if n_cols > 16384:
        return WIDE_CHUNK, WIDE_WARPS, STREAM
    chunk = min(SPLIT_CHUNK, triton.next_power_of_2(n_cols))
    return chunk, min(SPLIT_WARPS, warps_for(chunk)), NO_HINTS


def fused_bwd_config(n_cols: int, dh: bool = False) -> tuple[int, int, int]:
    """(columns block, rows per tile, warps) of the fused backward. Narrow rows are grouped into tiles of
    :data:`FUSED_TILE` values over 16 warps: x, dy, their prefetched successors, w and the [rows, columns] dweight
    (and dbias) accumulators take 88-112 registers a thread at 8 values a thread (sm_90 cubins, ``kw inspect``
    style compile); the same tile over 32 warps is capped at 64 registers and spills (24-252 bytes of local memory
    a thread). Rows wider than a tile take one row a program, 32 warps.

    Rows of <= 1024 columns, from the H200 sweep of 2026-12-03 (runs 20 and 22, bf16 16384x1024, one run each):
    4096-value tiles over 4 warps for rms / layer norm (2.09 / 1.55 TB/s; 1.66 / 1.32 over 8 warps), 8192-value
    tiles over 8 warps with ``dh`` (add_rms_norm, which also reads the residual's gradient: 2.47 against 2.13)."""
    block = triton.next_power_of_2(n_cols)
    if block <= 1024:
        tile, warps = (8192, 8) if dh else (4096, 4)
        return block, max(1, min(16, tile // block)), warps
    block_r = max(1, min(16, FUSED_TILE // block))
    tile = block_r * block
    return block, block_r, 32 if tile > FUSED_TILE else 16 if tile == FUSED_TILE else warps_for(tile)


def norm_backward(rung: str, x: torch.Tensor, weight: torch.Tensor, dy: torch.Tensor, rstd: torch.Tensor, *,
                  dx: torch.Tensor, dw: torch.Tensor, mean: torch.Tensor | None = None, db: torch.Tensor | None = None,
                  dh: torch.Tensor | None = None, offset: bool = False, split_chunk: int | None = None,
                  slots: torch.Tensor | None = None, groups: int | None = None) -> None:
    """Run backward rung ``rung``: ``dx`` (contiguous, x's shape), ``dw`` (and ``db`` for layer norm, given with
    ``mean``) from x, weight, dy and the saved fp32 statistics; ``dh`` is added to dx (add_rms_norm).
    ``split_chunk``, ``slots`` and ``groups`` override the split rung's configuration (tests)."""
    n_cols = x.shape[-1]
    if n_cols == 0:
        return
    center = mean is not None
    n_rows = x.numel() // n_cols
    if n_rows == 0:  # sums over no rows
        dw.zero_()
        if center:
            db.zero_()
        return
    x2, dy2 = rows2d(x), rows2d(dy)
    dh2 = rows2d(dh) if dh is not None else dy2
    dx2 = dx.view(-1, n_cols)
    rstd = rstd.reshape(-1).contiguous()
    mean = mean.reshape(-1).contiguous() if center else rstd
    if rung == "naive":
        _naive_backward(x2, weight, dy2, dh2, mean, rstd, dx2, dw, db, offset)
        return
    flags = dict(CENTER=center, DH=dh is not None, OFFSET=bool(offset))
    weight = weight.contiguous()  # indexed as a contiguous vector (see norm_forward)
    tail = (n_rows, n_cols, x2.stride(0), dy2.stride(0), dh2.stride(0), dx2.stride(0))
    if rung == "fused":
        block, block_r, warps = fused_bwd_config(n_cols, dh is not None)
        n_tiles = triton.cdiv(n_rows, block_r)
        pw = torch.empty((1, n_cols), dtype=torch.float32, device=x.device)
        meta = dict(**flags, PREFETCH=FUSED_PREFETCH, BLOCK_R=block_r, BLOCK=block, DW_PER_TILE=FUSED_DW_PER_TILE,
                    PAIRED_SUMS=paired_sums(), **register_cap(FUSED_MAXNREG))
        args = (x2, weight, dy2, dh2, mean, rstd, dx2, pw, pw, *tail)
        n_progs = persistent_groups(_norm_bwd_fused_kernel, args, meta, warps, 1, n_tiles, x.device)
        pw = torch.empty((n_progs, n_cols), dtype=torch.float32, device=x.device)
        pb = torch.empty_like(pw) if center else pw
        _norm_bwd_fused_kernel[(n_progs,)](x2, weight, dy2, dh2, mean, rstd, dx2, pw, pb, *tail, **meta,
                                           num_warps=warps)
    elif rung == "split":
        chunk, warps, hints = split_config(n_cols)
        chunk = split_chunk or chunk
        n_chunks = triton.cdiv(n_cols, chunk)
        if slots is None:
            slots = torch.full((n_rows, n_chunks) if n_chunks > 1 else (1,), -1, dtype=torch.int64, device=x.device)
        meta = dict(**flags, N_CHUNKS=n_chunks, CHUNKS_POW2=triton.next_power_of_2(n_chunks), CHUNK=chunk,
                    EVICT=hints[0], STORE_CACHE=hints[1], W_EVICT=_fwd.WEIGHT_EVICT,
                    W_HOLD=WEIGHT_HOLD and n_cols >= WEIGHT_HOLD_FROM, PAIRED_SUMS=paired_sums(),
                    **register_cap(SPLIT_MAXNREG))
        # the occupancy compile needs arguments of the right types; the partial rows come once groups is known
        probe = torch.empty((1, n_cols), dtype=torch.float32, device=x.device)
        args = (x2, weight, dy2, dh2, mean, rstd, dx2, probe, probe, slots, *tail)
        groups = groups or persistent_groups(_norm_bwd_split_kernel, args, meta, warps, n_chunks, n_rows, x.device)
        pw = torch.empty((groups, n_cols), dtype=torch.float32, device=x.device)
        pb = torch.empty_like(pw) if center else pw
        _norm_bwd_split_kernel[(groups * n_chunks,)](x2, weight, dy2, dh2, mean, rstd, dx2, pw, pb, slots, *tail,
                                                     **meta, num_warps=warps)
    else:
        raise ValueError(f"unknown backward rung {rung!r}")
    _sum_partials(pw, dw)
    if center:
        _sum_partials(pb, db)


# --- the rms_norm_bwd family's rungs --------------------------------------------------------------------------------
def _rung(name: str):
    def run(x, weight, dy, rstd, eps=1e-6, offset=False, *, out):
        dx, dw = out
        norm_backward(name, x, weight, dy, rstd, dx=dx, dw=dw, offset=offset)
        return out

    run.__name__ = f"rms_norm_bwd_{name}"
    run.__doc__ = f"rms_norm backward, rung ``{name}``: ``out`` = (dx, dweight) from x, weight, dy and rstd."
    return run


rms_norm_bwd_naive = _rung("naive")
rms_norm_bwd_fused = _rung("fused")
rms_norm_bwd_split = _rung("split")
