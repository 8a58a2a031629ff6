"""softmax in Triton, four rungs over rows of a 2-D view [R, D] (R rows, D columns; softmax along D).

Minimum traffic is one read and one write of the tensor (2 * R * D elements). The rungs differ in how close
they come to it:

* ``multipass``: five kernels (row max, subtract, exp, row sum, divide), fp32 intermediates in memory.
* ``fused``: one program per row holds the whole row in registers: one read, one write; rows up to 32768.
* ``online``: one program per row streams it in chunks twice: pass 1 keeps a running max and a rescaled sum
  (Milakov & Gimelshein, "Online normalizer calculation for softmax", 2018), pass 2 writes. Any width; the
  second read hits L2 only while the rows in flight fit in it.
* ``split``: a row is split over several programs, each holding its chunk in registers; the programs of one row
  trade (max, sum) partials through one 64-bit atomic each and wait for each other. One read, one write, any width.
  The grid is persistent and never larger than what the GPU holds at once, so every program of a row is
  resident and the wait cannot deadlock. Under the CPU interpreter, which runs programs one after another, a
  row is one chunk (no waiting).

Every launcher takes ``x`` (any layout, softmax over ``dim``) and a contiguous ``out``; ``fused``, ``online`` and
``split`` also compute log_softmax (``log=True``: ``x - max - log(sum exp(x - max))``, same traffic).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelwright import runtime
from kernelwright.ops._triton_helpers import register_cap, to_output

ONLINE_CHUNK = 4096
SPLIT_CHUNK = 8192  # columns per program in the split rung (16384 from 64k columns): see _split_config


# --- layout helpers: every rung works on rows with unit column stride ------------------------------------------
def _rows(x: torch.Tensor, dim: int) -> torch.Tensor:
    """[R, D] view (or packed copy) of ``x`` with the softmax dim last and unit column stride."""
    xm = x.movedim(dim, -1)
    if xm.stride(-1) != 1:
        xm = xm.contiguous()
    return xm.reshape(-1, xm.shape[-1])


def _launch_rows(x: torch.Tensor, dim: int, out: torch.Tensor, launch) -> torch.Tensor:
    """Run ``launch(x2, y2)`` on [R, D] rows and land the result in ``out`` (contiguous, ``x``'s shape)."""
    if out.numel() == 0:
        return out
    dim = dim % x.dim()
    x2 = _rows(x, dim)
    if dim == x.dim() - 1:
        launch(x2, out.view(-1, x.shape[-1]))
    else:  # softmax over an inner dim: compute in the moved layout, then scatter back
        tmp = torch.empty_like(x2)
        launch(x2, tmp)
        out.copy_(tmp.view(x.movedim(dim, -1).shape).movedim(-1, dim))
    return out


def _warps(block: int) -> int:
    return 4 if block <= 1024 else 8 if block <= 4096 else 16 if block <= 16384 else 32


# --- rung 1: multipass -----------------------------------------------------------------------------------------
@triton.jit
def _row_reduce_kernel(src_ptr, dst_ptr, n_cols, src_stride, IS_MAX: tl.constexpr, BLOCK: tl.constexpr):
    # one program per row: dst[row] = max(src[row, :]) or sum(src[row, :])
    row = tl.program_id(0).to(tl.int64)
    acc = tl.full([BLOCK], float("-inf") if IS_MAX else 0.0, tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        v = tl.load(src_ptr + row * src_stride + cols, mask=cols < n_cols,
                    other=float("-inf") if IS_MAX else 0.0).to(tl.float32)
        acc = tl.maximum(acc, v) if IS_MAX else acc + v
    tl.store(dst_ptr + row, tl.max(acc, 0) if IS_MAX else tl.sum(acc, 0))


@triton.jit
def _row_map_kernel(src_ptr, vec_ptr, dst_ptr, n_cols, src_stride, dst_stride, OP: tl.constexpr,
                    BLOCK: tl.constexpr):
    # grid (rows, column blocks): OP 0: dst = src - vec[row]; 1: dst = exp(src); 2: dst = src / vec[row]
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    v = tl.load(src_ptr + row * src_stride + cols, mask=mask).to(tl.float32)
    if OP == 0:
        v = v - tl.load(vec_ptr + row)
    elif OP == 1:
        v = tl.exp(v)
    else:
        v = v / tl.load(vec_ptr + row)
    tl.store(dst_ptr + row * dst_stride + cols, to_output(v, dst_ptr.dtype.element_ty), mask=mask)


def _multipass(x2: torch.Tensor, y2: torch.Tensor) -> None:
    R, D = x2.shape
    block = 1024
    stat = torch.empty(R, dtype=torch.float32, device=x2.device)
    tmp = torch.empty((R, D), dtype=torch.float32, device=x2.device)  # fp32 intermediates, as eager code would
    grid2 = (R, triton.cdiv(D, block))
    _row_reduce_kernel[(R,)](x2, stat, D, x2.stride(0), IS_MAX=True, BLOCK=block)          # read N
    _row_map_kernel[grid2](x2, stat, tmp, D, x2.stride(0), D, OP=0, BLOCK=block)          # read N, write N
    _row_map_kernel[grid2](tmp, stat, tmp, D, D, D, OP=1, BLOCK=block)                    # read N, write N
    _row_reduce_kernel[(R,)](tmp, stat, D, D, IS_MAX=False, BLOCK=block)                  # read N
    _row_map_kernel[grid2](tmp, stat, y2, D, D, y2.stride(0), OP=2, BLOCK=block)          # read N, write N


def softmax_multipass(x: torch.Tensor, dim: int = -1, *, out: torch.Tensor) -> torch.Tensor:
    return _launch_rows(x, dim, out, _multipass)


# --- rung 2: fused, one row per program in registers ---------------------------------------------------------------
@triton.jit
def _softmax_fused_kernel(x_ptr, y_ptr, n_cols, x_stride, y_stride, BLOCK: tl.constexpr, LOG: tl.constexpr = False):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=float("-inf")).to(tl.float32)  # read D
    m = tl.max(x, 0)
    e = tl.exp(x - m)
    if LOG:  # log_softmax: x - max - log(sum)
        y = x - m - tl.log(tl.sum(e, 0))
    else:
        y = e / tl.sum(e, 0)
    tl.store(y_ptr + row * y_stride + cols, to_output(y, y_ptr.dtype.element_ty), mask=mask)  # write D


FUSED_NARROW_WARPS: int | None = 2
"""Warps a program of the fused rung for rows of at most 1024 columns (None: :func:`_warps`, 4); a switch for
``benchmarks/experiments/switch_bench.py``. Run 31 (H200, 65536 x 512, kw bench): 4 warps 3.83 TB/s fp32 / 2.62
bf16, 2 warps (and 1) 3.98 / 3.03, torch 3.80 / 2.41 (kw optimize's l1/06 had the fused rung at 0.99x eager).
Measured at 512 columns only."""


def _fused(x2: torch.Tensor, y2: torch.Tensor, log: bool = False) -> None:
    R, D = x2.shape
    block = triton.next_power_of_2(D)
    warps = FUSED_NARROW_WARPS if FUSED_NARROW_WARPS and block <= 1024 else _warps(block)
    _softmax_fused_kernel[(R,)](x2, y2, D, x2.stride(0), y2.stride(0), BLOCK=block, LOG=log, num_warps=warps)


def softmax_fused(x: torch.Tensor, dim: int = -1, *, out: torch.Tensor, log: bool = False) -> torch.Tensor:
    return _launch_rows(x, dim, out, lambda x2, y2: _fused(x2, y2, log))


# --- rung 3: online, two streaming passes per row ------------------------------------------------------------------
@triton.jit
def _softmax_online_kernel(x_ptr, y_ptr, n_cols, x_stride, y_stride, BLOCK: tl.constexpr,
                           LOG: tl.constexpr = False):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_stride
    # pass 1: per-lane running max m and sum s of exp(x - m), rescaled when m grows; one reduction at the end
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)  # read D
        m_new = tl.maximum(m, x)
        # lanes that have seen only -inf (masked tail) would compute (-inf) - (-inf) = NaN: shift them by 0
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        s = s * tl.exp(m - m_safe) + tl.exp(x - m_safe)
        m = m_new
    row_max = tl.max(m, 0)
    row_sum = tl.sum(s * tl.exp(m - row_max), 0)  # lanes with m = -inf have s = 0 and weigh exp(-inf) = 0
    inv = 1.0 / row_sum
    log_sum = tl.log(row_sum)
    # pass 2: normalize and write
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=float("-inf")).to(tl.float32)  # read D again (L2 if lucky)
        if LOG:  # (x - max) first: max + log(sum) would lose log(sum) next to a huge max
            y = (x - row_max) - log_sum
        else:
            y = tl.exp(x - row_max) * inv
        tl.store(y_ptr + row * y_stride + cols, to_output(y, y_ptr.dtype.element_ty), mask=mask)  # write D


def _online(x2: torch.Tensor, y2: torch.Tensor, log: bool = False) -> None:
    R, D = x2.shape
    block = min(ONLINE_CHUNK, triton.next_power_of_2(D))
    _softmax_online_kernel[(R,)](x2, y2, D, x2.stride(0), y2.stride(0), BLOCK=block, LOG=log,
                                 num_warps=_warps(block))


def softmax_online(x: torch.Tensor, dim: int = -1, *, out: torch.Tensor, log: bool = False) -> torch.Tensor:
    return _launch_rows(x, dim, out, lambda x2, y2: _online(x2, y2, log))


# --- rung 4: split rows over cooperating programs ------------------------------------------------------------------
@triton.jit
def _softmax_split_kernel(x_ptr, y_ptr, slot_ptr, n_rows, n_cols, x_stride, y_stride,
                          N_CHUNKS: tl.constexpr, CHUNKS_POW2: tl.constexpr, CHUNK: tl.constexpr,
                          LOG: tl.constexpr = False, EVICT: tl.constexpr = "", STORE_CACHE: tl.constexpr = ""):
    # slot: [R, N_CHUNKS] int64, all -1 at launch; a chunk publishes (max, sum of exp(x - max)) packed into one
    # 64-bit word, so a single relaxed atomic carries its whole message: no counter, no release fence (which
    # would wait for this program's earlier stores of y to drain).
    pid = tl.program_id(0)
    chunk = pid % N_CHUNKS
    groups = tl.num_programs(0) // N_CHUNKS  # rows processed at once; each group of N_CHUNKS programs, one row
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = cols < n_cols
    ks = tl.arange(0, CHUNKS_POW2)
    kmask = ks < N_CHUNKS
    first = pid // N_CHUNKS
    # software pipelining by hand: the load of a program's next row is in flight while it waits for its partners
    x_next = tl.load(x_ptr + tl.cast(first, tl.int64) * x_stride + cols, mask=mask & (first < n_rows),
                     other=float("-inf"), eviction_policy=EVICT)
    for row in range(first, n_rows, groups):
        row64 = tl.cast(row, tl.int64)
        x = x_next.to(tl.float32)  # read once
        nxt = row + groups
        x_next = tl.load(x_ptr + tl.cast(nxt, tl.int64) * x_stride + cols, mask=mask & (nxt < n_rows),
                         other=float("-inf"), eviction_policy=EVICT)
        m = tl.max(x, 0)  # every chunk holds at least one column (N_CHUNKS = cdiv(D, CHUNK)): m is finite
        e = tl.exp(x - m)
        s = tl.sum(e, 0)
        if N_CHUNKS == 1:
            scale = 1.0 / s
            row_max = m
            log_sum = tl.log(s)
        else:
            # high word: bits of m (finite, so never the all-ones NaN of the -1 sentinel); low word: bits of s
            word = (m.to(tl.int32, bitcast=True).to(tl.int64) << 32) | s.to(tl.uint32, bitcast=True).to(tl.int64)
            slots = slot_ptr + row64 * N_CHUNKS
            tl.atomic_xchg(slots + chunk, word, sem="relaxed")
            # volatile loads go to L2, where the atomics land; spin until every chunk of the row has published
            w = tl.load(slots + ks, mask=kmask, other=0, volatile=True)
            while tl.sum((w == -1).to(tl.int32), 0) > 0:
                w = tl.load(slots + ks, mask=kmask, other=0, volatile=True)
            pm = tl.where(kmask, (w >> 32).to(tl.int32).to(tl.float32, bitcast=True), float("-inf"))
            ps = tl.where(kmask, (w & 0xFFFFFFFF).to(tl.uint32).to(tl.float32, bitcast=True), 0.0)
            row_max = tl.max(pm, 0)
            row_sum = tl.sum(ps * tl.exp(pm - row_max), 0)
            scale = tl.exp(m - row_max) / row_sum
            log_sum = tl.log(row_sum)
        if LOG:  # log_softmax: (x - row max) first, then log(row sum) (their sum would lose it next to a huge max)
            y = (x - row_max) - log_sum
        else:
            y = e * scale
        tl.store(y_ptr + row64 * y_stride + cols, to_output(y, y_ptr.dtype.element_ty), mask=mask,
                 cache_modifier=STORE_CACHE)


SPLIT_WARPS = 8
SPLIT_MAXNREG: int | None = None
"""register cap a thread of the split kernel (Triton's ``maxnreg``; None: the compiler's choice), an experiment
switch (``benchmarks/experiments/switch_bench.py``). At 8192 x 4 warps the kernel takes 128 registers, 4 programs
an SM; capped at 96 (5 programs, 136 bytes of spills) it fell from 3.45 to 2.43 TB/s at 1024x262144 (H200 run 24)."""
NO_HINTS, STREAM = ("", ""), ("evict_first", ".cs")
"""cache hints of the split rung: (eviction policy of its loads of x, cache modifier of its stores of y)"""
_split_resident: dict[tuple, int] = {}  # (device, dtypes, chunk, n_chunks) -> programs resident at once


def _resident_programs(device_index: int, n_regs: int, shared: int, num_warps: int) -> int:
    """How many programs of this kernel the GPU holds at once (the occupancy calculation)."""
    props = torch.cuda.get_device_properties(device_index)
    threads = 32 * num_warps
    regs_per_warp = -(-max(n_regs, 1) * 32 // 256) * 256  # registers are allocated per warp, 256 at a time
    by_regs = getattr(props, "regs_per_multiprocessor", 65536) // (regs_per_warp * num_warps)
    by_threads = getattr(props, "max_threads_per_multi_processor", 2048) // threads
    smem = getattr(props, "shared_memory_per_multiprocessor", 0)
    by_smem = smem // shared if shared and smem else 32
    per_sm = max(0, min(by_regs, by_threads, by_smem, 32))
    return per_sm * props.multi_processor_count


def _split_config(n_cols: int) -> tuple[int, int, tuple[str, str]]:
    """(columns per program, warps, cache hints), from the H200 sweeps of 2026-12-02 and 2026-12-03
    (benchmarks/results/h200/*/split_configs*): 16384 x 8 won at 64k columns (3.58 TB/s; 3.51 with streaming
    hints), 8192 x 4 at 256k, where streaming hints (x loaded evict-first, y stored ``.cs``) took it from 3.36 to
    3.44 TB/s in run 20; 8192 x 8 is within 1% of the best below 64k."""
    if n_cols >= 131072:
        return SPLIT_CHUNK, 4, STREAM
    if n_cols >= 65536:
        return 2 * SPLIT_CHUNK, SPLIT_WARPS, NO_HINTS
    return SPLIT_CHUNK, SPLIT_WARPS, NO_HINTS


def _split(x2: torch.Tensor, y2: torch.Tensor, chunk: int | None = None, num_warps: int | None = None,
           kernel=None, log: bool = False, hints: tuple[str, str] | None = None) -> None:
    """Launch the split kernel (``kernel``: another with the same signature, for experiments; ``chunk``,
    ``num_warps`` and ``hints`` override the configuration)."""
    kernel = kernel or _softmax_split_kernel
    R, D = x2.shape
    default_chunk, default_warps, default_hints = _split_config(D)
    hints = default_hints if hints is None else hints
    warps = num_warps or default_warps
    chunk = chunk or default_chunk
    if runtime.interpreting():
        # programs run one after another: a program waiting for a later one would wait forever
        chunk = triton.next_power_of_2(D)
    else:
        chunk = min(chunk, triton.next_power_of_2(D))
    n_chunks = triton.cdiv(D, chunk)
    slots = torch.full((R, n_chunks) if n_chunks > 1 else (1,), -1, dtype=torch.int64, device=x2.device)
    meta = dict(N_CHUNKS=n_chunks, CHUNKS_POW2=triton.next_power_of_2(n_chunks), CHUNK=chunk)
    if log:
        meta["LOG"] = True
    if hints[0]:
        meta["EVICT"] = hints[0]
    if hints[1]:
        meta["STORE_CACHE"] = hints[1]
    meta.update(register_cap(SPLIT_MAXNREG))
    if runtime.interpreting():
        groups = R
    else:
        key = (x2.device.index or 0, x2.dtype, y2.dtype, chunk, n_chunks, warps, kernel, log, hints)
        if key not in _split_resident:
            compiled = kernel.warmup(x2, y2, slots, R, D, x2.stride(0), y2.stride(0), **meta, num_warps=warps,
                                     grid=(1,))
            compiled._init_handles()
            _split_resident[key] = _resident_programs(key[0], compiled.n_regs, compiled.metadata.shared, warps)
        resident = _split_resident[key]
        if resident < n_chunks:
            raise RuntimeError(f"split: the GPU holds {resident} programs at once, a row needs {n_chunks}")
        groups = min(R, resident // n_chunks)
    kernel[(groups * n_chunks,)](x2, y2, slots, R, D, x2.stride(0), y2.stride(0), **meta, num_warps=warps)


def softmax_split(x: torch.Tensor, dim: int = -1, *, out: torch.Tensor, log: bool = False) -> torch.Tensor:
    return _launch_rows(x, dim, out, lambda x2, y2: _split(x2, y2, log=log))
