"""softmax backward in Triton over rows of 2-D views [R, D]: dx = y * (dy - sum(y * dy)), fp32 math.

Minimum traffic: read y and dy once, write dx once (3 R D elements). Rungs:

* ``naive``: three kernels, as eager autograd code would run them: y * dy into an fp32 temporary, its row sums,
  then y * (dy - sum).
* ``fused``: one program per row holds y and dy in registers: one read, one write; rows up to 32768.
* ``twopass``: any width; one program per row streams it twice in 8192-column chunks (the dot product, then dx):
  the second read of y and dy hits L2 only while the rows in flight fit.
* ``split``: any width, one read: a row is split over cooperating programs, each holding its chunk of y and dy in
  registers. Each publishes its partial dot product (fp32 bits in a 64-bit slot, -1 meaning "not yet") with a
  relaxed atomic and spins until its partners' are there; every program of a row adds the partials in the same
  order, so all write with the same sum. The grid is persistent and no larger than what the GPU holds at once
  (the softmax split rung's occupancy calculation), so partners are resident and the wait ends. Under the CPU
  interpreter, which runs programs one after another, a row is one chunk.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelwright import runtime
from kernelwright.ops._triton_helpers import to_output
from kernelwright.ops.softmax.triton import _resident_programs, _rows, _warps

CHUNK = 8192          # columns a step of the naive and twopass rungs (int64 indices: see cross_entropy.triton)
SPLIT_CHUNK = 8192    # columns a program of the split rung
SPLIT_WARPS = 8


def _launch_rows(y: torch.Tensor, dy: torch.Tensor, dim: int, out: torch.Tensor, launch) -> torch.Tensor:
    """Run ``launch(y2, dy2, dx2)`` on [R, D] rows (the softmax dim last, unit column stride) into ``out``."""
    if out.numel() == 0:
        return out
    dim = dim % y.dim()
    y2, dy2 = _rows(y, dim), _rows(dy, dim)
    if dim == y.dim() - 1:
        launch(y2, dy2, out.view(-1, y.shape[-1]))
    else:  # an inner dim: compute in the moved layout, then scatter back
        tmp = torch.empty(y2.shape, dtype=out.dtype, device=out.device)
        launch(y2, dy2, tmp)
        out.copy_(tmp.view(y.movedim(dim, -1).shape).movedim(-1, dim))
    return out


# --- rung 1: naive ---------------------------------------------------------------------------------------------
@triton.jit
def _sbwd_map_kernel(y_ptr, dy_ptr, sum_ptr, out_ptr, n_cols, y_stride, dy_stride, out_stride, OP: tl.constexpr,
                     BLOCK: tl.constexpr):
    # grid (rows, column blocks). OP 0: out = y * dy (fp32); 1: out = y * (dy - sum[row])
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK).to(tl.int64) + tl.program_id(1) * BLOCK
    mask = cols < n_cols
    y = tl.load(y_ptr + row * y_stride + cols, mask=mask).to(tl.float32)
    dy = tl.load(dy_ptr + row * dy_stride + cols, mask=mask).to(tl.float32)
    v = y * dy if OP == 0 else y * (dy - tl.load(sum_ptr + row))
    tl.store(out_ptr + row * out_stride + cols, to_output(v, out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _sbwd_rowsum_kernel(src_ptr, dst_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = tl.arange(0, BLOCK).to(tl.int64) + start
        acc += tl.load(src_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    tl.store(dst_ptr + row, tl.sum(acc, 0))


def _naive(y2, dy2, dx2) -> None:
    r, d = y2.shape
    block = min(CHUNK, triton.next_power_of_2(d))
    prod = torch.empty((r, d), dtype=torch.float32, device=y2.device)
    sums = torch.empty(r, dtype=torch.float32, device=y2.device)
    grid = (r, triton.cdiv(d, block))
    _sbwd_map_kernel[grid](y2, dy2, sums, prod, d, y2.stride(0), dy2.stride(0), d, OP=0, BLOCK=block)  # r 2N, w N
    _sbwd_rowsum_kernel[(r,)](prod, sums, d, BLOCK=block)                                             # read N
    _sbwd_map_kernel[grid](y2, dy2, sums, dx2, d, y2.stride(0), dy2.stride(0), dx2.stride(0), OP=1,
                           BLOCK=block)                                                               # r 2N, w N


def softmax_bwd_naive(y, dy, dim=-1, *, out):
    return _launch_rows(y, dy, dim, out, _naive)


# --- rung 2: fused, the row in registers -------------------------------------------------------------------------
@triton.jit
def _sbwd_fused_kernel(y_ptr, dy_ptr, dx_ptr, n_cols, y_stride, dy_stride, dx_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    y = tl.load(y_ptr + row * y_stride + cols, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + row * dy_stride + cols, mask=mask, other=0.0).to(tl.float32)
    dx = y * (dy - tl.sum(y * dy, 0))
    tl.store(dx_ptr + row * dx_stride + cols, to_output(dx, dx_ptr.dtype.element_ty), mask=mask)


def _fused(y2, dy2, dx2) -> None:
    r, d = y2.shape
    block = triton.next_power_of_2(d)
    _sbwd_fused_kernel[(r,)](y2, dy2, dx2, d, y2.stride(0), dy2.stride(0), dx2.stride(0), BLOCK=block,
                             num_warps=_warps(block))


def softmax_bwd_fused(y, dy, dim=-1, *, out):
    return _launch_rows(y, dy, dim, out, _fused)


# --- rung 3: twopass, streaming ----------------------------------------------------------------------------------
@triton.jit
def _sbwd_twopass_kernel(y_ptr, dy_ptr, dx_ptr, n_cols, y_stride, dy_stride, dx_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    y_row, dy_row = y_ptr + row * y_stride, dy_ptr + row * dy_stride
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = tl.arange(0, BLOCK).to(tl.int64) + start
        mask = cols < n_cols
        acc += (tl.load(y_row + cols, mask=mask, other=0.0).to(tl.float32) *
                tl.load(dy_row + cols, mask=mask, other=0.0).to(tl.float32))  # read y, dy
    dot = tl.sum(acc, 0)
    for start in range(0, n_cols, BLOCK):
        cols = tl.arange(0, BLOCK).to(tl.int64) + start
        mask = cols < n_cols
        y = tl.load(y_row + cols, mask=mask).to(tl.float32)  # read again (L2 if lucky)
        dy = tl.load(dy_row + cols, mask=mask).to(tl.float32)
        tl.store(dx_ptr + row * dx_stride + cols, to_output(y * (dy - dot), dx_ptr.dtype.element_ty), mask=mask)


def _twopass(y2, dy2, dx2) -> None:
    r, d = y2.shape
    block = min(CHUNK, triton.next_power_of_2(d))
    _sbwd_twopass_kernel[(r,)](y2, dy2, dx2, d, y2.stride(0), dy2.stride(0), dx2.stride(0), BLOCK=block,
                               num_warps=_warps(block))


def softmax_bwd_twopass(y, dy, dim=-1, *, out):
    return _launch_rows(y, dy, dim, out, _twopass)


# --- rung 4: split rows over cooperating programs ----------------------------------------------------------------
@triton.jit
def _sbwd_split_kernel(y_ptr, dy_ptr, dx_ptr, slot_ptr, n_rows, n_cols, y_stride, dy_stride, dx_stride,
                       N_CHUNKS: tl.constexpr, CHUNKS_POW2: tl.constexpr, CHUNK: tl.constexpr):
    # slot: [R, N_CHUNKS] int64, all -1 at launch; a chunk publishes the bits of its partial dot product,
    # zero-extended (never -1), with one relaxed atomic: no counter, no fence
    pid = tl.program_id(0)
    chunk = pid % N_CHUNKS
    groups = tl.num_programs(0) // N_CHUNKS  # rows in flight; each group of N_CHUNKS programs takes one row
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = cols < n_cols
    ks = tl.arange(0, CHUNKS_POW2)
    kmask = ks < N_CHUNKS
    first = pid // N_CHUNKS
    # the next row's chunk is loaded while this row waits for its partners
    m0 = mask & (first < n_rows)
    y_next = tl.load(y_ptr + tl.cast(first, tl.int64) * y_stride + cols, mask=m0, other=0.0)
    dy_next = tl.load(dy_ptr + tl.cast(first, tl.int64) * dy_stride + cols, mask=m0, other=0.0)
    for row in range(first, n_rows, groups):
        row64 = tl.cast(row, tl.int64)
        y = y_next.to(tl.float32)
        dy = dy_next.to(tl.float32)
        nxt = row + groups
        mn = mask & (nxt < n_rows)
        y_next = tl.load(y_ptr + tl.cast(nxt, tl.int64) * y_stride + cols, mask=mn, other=0.0)
        dy_next = tl.load(dy_ptr + tl.cast(nxt, tl.int64) * dy_stride + cols, mask=mn, other=0.0)
        part = tl.sum(y * dy, 0)
        if N_CHUNKS == 1:
            dot = part
        else:
            slots = slot_ptr + row64 * N_CHUNKS
            tl.atomic_xchg(slots + chunk, part.to(tl.uint32, bitcast=True).to(tl.int64), sem="relaxed")
            w = tl.load(slots + ks, mask=kmask, other=0, volatile=True)
            while tl.sum((w == -1).to(tl.int32), 0) > 0:
                w = tl.load(slots + ks, mask=kmask, other=0, volatile=True)
            parts = tl.where(kmask, (w & 0xFFFFFFFF).to(tl.uint32).to(tl.float32, bitcast=True), 0.0)
            dot = tl.sum(parts, 0)  # the same partials in the same order in every program of the row
        tl.store(dx_ptr + row64 * dx_stride + cols, to_output(y * (dy - dot), dx_ptr.dtype.element_ty), mask=mask)


_split_resident: dict[tuple, int] = {}  # (device, dtypes, chunk, n_chunks, warps) -> programs resident at once


def _split(y2, dy2, dx2, chunk: int | None = None, num_warps: int | None = None) -> None:
    r, d = y2.shape
    warps = num_warps or SPLIT_WARPS
    if runtime.interpreting():
        chunk = triton.next_power_of_2(d)  # programs run one after another: no partner to wait for
    else:
        chunk = min(chunk or SPLIT_CHUNK, triton.next_power_of_2(d))
    n_chunks = triton.cdiv(d, chunk)
    slots = torch.full((r, n_chunks) if n_chunks > 1 else (1,), -1, dtype=torch.int64, device=y2.device)
    meta = dict(N_CHUNKS=n_chunks, CHUNKS_POW2=triton.next_power_of_2(n_chunks), CHUNK=chunk)
    args = (y2, dy2, dx2, slots, r, d, y2.stride(0), dy2.stride(0), dx2.stride(0))
    if runtime.interpreting():
        groups = r
    else:
        key = (y2.device.index or 0, y2.dtype, dx2.dtype, chunk, n_chunks, warps)
        if key not in _split_resident:
            compiled = _sbwd_split_kernel.warmup(*args, **meta, num_warps=warps, grid=(1,))
            compiled._init_handles()
            _split_resident[key] = _resident_programs(key[0], compiled.n_regs, compiled.metadata.shared, warps)
        resident = _split_resident[key]
        if resident < n_chunks:
            raise RuntimeError(f"split: the GPU holds {resident} programs at once, a row needs {n_chunks}")
        groups = min(r, resident // n_chunks)
    _sbwd_split_kernel[(groups * n_chunks,)](*args, **meta, num_warps=warps)


def softmax_bwd_split(y, dy, dim=-1, *, out):
    return _launch_rows(y, dy, dim, out, _split)
