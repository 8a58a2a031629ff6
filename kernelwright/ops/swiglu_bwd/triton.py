"""swiglu backward in Triton: (gate, up, dy) -> (dgate, dup), sigmoid(gate) recomputed, fp32 math.

Minimum traffic: read gate, up and dy, write dgate and dup (5N elements). Rungs:

* ``naive``: four kernels, as eager autograd runs the backward of ``F.silu(gate) * up``: silu(gate) into an fp32
  temporary (the forward's saved output), dup = dy * silu, dy * up into a second temporary, dgate = that *
  silu'(gate).
* ``fused``: one kernel over the flattened (packed) tensors, 2048 elements a program.
* ``vectorized``: one kernel over strided [R, D] tiles (no packing copies; outputs may be views too, such as the
  two halves of one [..., 2I] gradient buffer), 4 KB of each of the five tensors a program (61 registers a
  thread on sm_90).

Layout helpers and the silu formulas come from the forward's module.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelwright.ops._triton_helpers import to_output
from kernelwright.ops.swiglu.triton import (
    FLAT_BLOCK,
    TILE_WARPS,
    flat,
    flat_out,
    land,
    naive_map,
    rows_views,
    silu,
    silu_grad,
    tile_grid,
    tile_shape,
)


# --- rung 1: naive, four kernels -----------------------------------------------------------------------------------
def swiglu_bwd_naive(gate: torch.Tensor, up: torch.Tensor, dy: torch.Tensor, *,
                     out: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    dgate, dup = out
    if dgate.numel() == 0:
        return out
    g, u, d = flat(gate), flat(up), flat(dy)
    dg, du = flat_out(dgate), flat_out(dup)
    tmp = torch.empty(g.numel(), dtype=torch.float32, device=g.device)
    naive_map(g, g, tmp, 0)     # silu(gate): read N, write N (fp32)
    naive_map(d, tmp, du, 1)    # dup = dy * silu: read 2N, write N
    naive_map(d, u, tmp, 1)     # dy * up: read 2N, write N (fp32)
    naive_map(tmp, g, dg, 2)    # dgate = (dy * up) * silu'(gate): read 2N, write N
    land(dg, dgate)
    land(du, dup)
    return out


# --- rung 2: fused, flat -------------------------------------------------------------------------------------------
@triton.jit
def _swiglu_bwd_flat_kernel(g_ptr, u_ptr, dy_ptr, dg_ptr, du_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    g = tl.load(g_ptr + offs, mask=mask).to(tl.float32)
    u = tl.load(u_ptr + offs, mask=mask).to(tl.float32)
    dy = tl.load(dy_ptr + offs, mask=mask).to(tl.float32)
    tl.store(dg_ptr + offs, to_output(dy * u * silu_grad(g), dg_ptr.dtype.element_ty), mask=mask)
    tl.store(du_ptr + offs, to_output(dy * silu(g), du_ptr.dtype.element_ty), mask=mask)


def swiglu_bwd_fused(gate: torch.Tensor, up: torch.Tensor, dy: torch.Tensor, *,
                     out: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    dgate, dup = out
    if dgate.numel() == 0:
        return out
    g, u, d = flat(gate), flat(up), flat(dy)
    dg, du = flat_out(dgate), flat_out(dup)
    n = g.numel()
    _swiglu_bwd_flat_kernel[(triton.cdiv(n, FLAT_BLOCK),)](g, u, d, dg, du, n, BLOCK=FLAT_BLOCK, num_warps=8)
    land(dg, dgate)
    land(du, dup)
    return out


# --- rung 3: vectorized, strided tiles -----------------------------------------------------------------------------
@triton.jit
def _swiglu_bwd_tile_kernel(g_ptr, u_ptr, dy_ptr, dg_ptr, du_ptr, n_rows, n_cols,
                            g_sr, g_sc, u_sr, u_sc, dy_sr, dy_sc, dg_sr, dg_sc, du_sr, du_sc,
                            BR: tl.constexpr, BC: tl.constexpr):
    pid = tl.program_id(0)
    col_tiles = tl.cdiv(n_cols, BC)
    rows = (pid // col_tiles).to(tl.int64) * BR + tl.arange(0, BR)[:, None]
    cols = (pid % col_tiles).to(tl.int64) * BC + tl.arange(0, BC)[None, :]
    mask = (rows < n_rows) & (cols < n_cols)
    g = tl.load(g_ptr + rows * g_sr + cols * g_sc, mask=mask).to(tl.float32)
    u = tl.load(u_ptr + rows * u_sr + cols * u_sc, mask=mask).to(tl.float32)
    dy = tl.load(dy_ptr + rows * dy_sr + cols * dy_sc, mask=mask).to(tl.float32)
    tl.store(dg_ptr + rows * dg_sr + cols * dg_sc, to_output(dy * u * silu_grad(g), dg_ptr.dtype.element_ty),
             mask=mask)
    tl.store(du_ptr + rows * du_sr + cols * du_sc, to_output(dy * silu(g), du_ptr.dtype.element_ty), mask=mask)


def swiglu_bwd_vectorized(gate: torch.Tensor, up: torch.Tensor, dy: torch.Tensor, *,
                          out: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    if out[0].numel() == 0:
        return out
    (g, u, d), (dg, du), pending = rows_views([gate, up, dy], list(out))
    r, c = g.shape
    br, bc = tile_shape(r, c, g.element_size())
    _swiglu_bwd_tile_kernel[tile_grid(r, c, br, bc)](
        g, u, d, dg, du, r, c, g.stride(0), g.stride(1), u.stride(0), u.stride(1), d.stride(0), d.stride(1),
        dg.stride(0), dg.stride(1), du.stride(0), du.stride(1), BR=br, BC=bc, num_warps=TILE_WARPS)
    for buf, o in pending:
        o.copy_(buf.view(o.shape))
    return out
