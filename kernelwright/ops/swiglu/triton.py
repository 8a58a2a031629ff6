"""swiglu in Triton: y = silu(gate) * up, elementwise, fp32 math, one rounding to the output dtype.

Minimum traffic is read gate and up, write y (3N elements). The rungs differ in how close they come to it:

* ``naive``: two kernels, as eager ``F.silu(gate) * up`` runs: silu(gate) into an fp32 temporary, then the
  product. Inputs are packed first when they are not contiguous.
* ``fused``: one kernel over the flattened (packed) tensors, 2048 elements a program: one read of each input, one
  write.
* ``vectorized``: one kernel over [R, D] tiles addressed through strides, so the halves of a [T, 2I] projection
  (``x[..., :I]``, ``x[..., I:]``: row stride 2I) and other views are read in place, with no packing copy; 4 KB
  of each tensor a program whatever the dtype, so each thread makes one 16-byte access per tensor (8 bf16 or 4
  fp32 elements). Larger tiles hold more bytes in flight per thread but cost registers: compiled for sm_90, 8192
  bf16 elements a program took 221 registers a thread (one program an SM), 2048 took 56.

The helpers here (layout views, tile shapes, the silu formulas) are shared with the ``swiglu_bwd`` rungs.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelwright.ops._triton_helpers import to_output

FLAT_BLOCK = 2048
NAIVE_BLOCK = 8192
TILE_BYTES = 4096  # bytes of each tensor a vectorized program moves: 16 a thread with TILE_WARPS
TILE_WARPS = 8


# --- math shared by every rung, forward and backward ---------------------------------------------------------
@triton.jit
def sigmoid(g):
    # from e = exp(-|g|) in (0, 1]: never overflows (exp(-g) would be inf for g < -88), and for g < 0 the result
    # e / (1 + e) keeps full relative precision where 1 / (1 + exp(-g)) would lose it to the rounding of 1 + ...
    e = tl.exp(-tl.abs(g))
    r = 1.0 / (1.0 + e)
    return tl.where(g >= 0, r, e * r)


@triton.jit
def silu(g):
    return g * sigmoid(g)


@triton.jit
def silu_grad(g):
    # d silu / dg = s * (1 + g * (1 - s)), s = sigmoid(g), 1 - s = sigmoid(-g): both from e = exp(-|g|), so
    # neither is a rounded difference; s = 0 at g << 0 gives 0 * (finite) = 0
    e = tl.exp(-tl.abs(g))
    r = 1.0 / (1.0 + e)
    pos = g >= 0
    s = tl.where(pos, r, e * r)
    return s * (1.0 + g * tl.where(pos, e * r, r))


# --- layouts: flat views for the flat rungs, [R, D] strided views for the tiled ones -----------------------------
def flat(t: torch.Tensor) -> torch.Tensor:
    """1-D view of ``t``, packed first when it is not contiguous."""
    return t.contiguous().view(-1)


def flat_out(out: torch.Tensor) -> torch.Tensor:
    """A contiguous 1-D buffer to write: ``out`` itself, or a scratch buffer to copy into ``out`` afterwards
    (see :func:`land`)."""
    return out.view(-1) if out.is_contiguous() else torch.empty(out.numel(), dtype=out.dtype, device=out.device)


def land(buf: torch.Tensor, out: torch.Tensor) -> None:
    """Copy the result of :func:`flat_out`'s scratch buffer into a non-contiguous ``out``."""
    if not out.is_contiguous():
        out.copy_(buf.view(out.shape))


def rows_views(inputs: list[torch.Tensor], outputs: list[torch.Tensor]):
    """[R, D] views of same-shaped tensors for the tiled kernels, and the scratch outputs to copy back.

    All contiguous: one row of N elements (the tiles then run along memory). Otherwise each tensor as
    ``view(-1, D)``, which keeps any row stride and column stride (a transposed 2-D tensor, the halves of a
    wider tensor); a tensor whose leading dims do not merge into one stride is packed (inputs) or written
    through a scratch buffer (outputs). Returns (inputs2d, outputs2d, pending) where ``pending`` lists
    (scratch, out) pairs for :func:`land`.
    """
    shape = inputs[0].shape
    if all(t.is_contiguous() for t in (*inputs, *outputs)):
        n = inputs[0].numel()
        return [t.view(1, n) for t in inputs], [t.view(1, n) for t in outputs], []
    d = shape[-1] if len(shape) else 1

    def view2d(t):
        try:
            return t.view(-1, d)
        except RuntimeError:  # leading dims with strides that do not merge
            return None

    ins = [v if (v := view2d(t)) is not None else t.reshape(-1, d) for t in inputs]
    outs, pending = [], []
    for t in outputs:
        v = view2d(t)
        if v is None:
            v = torch.empty((t.numel() // max(d, 1), d), dtype=t.dtype, device=t.device)
            pending.append((v, t))
        outs.append(v)
    return ins, outs, pending


def tile_shape(n_rows: int, n_cols: int, itemsize: int, tile_bytes: int = TILE_BYTES) -> tuple[int, int]:
    """(rows, columns) of one program's tile: ``tile_bytes`` of each tensor, as wide as the row allows."""
    tile = tile_bytes // itemsize
    bc = min(triton.next_power_of_2(max(n_cols, 1)), tile)
    br = min(max(1, tile // bc), triton.next_power_of_2(max(n_rows, 1)))
    return br, bc


def tile_grid(n_rows: int, n_cols: int, br: int, bc: int) -> tuple[int]:
    return (triton.cdiv(n_rows, br) * triton.cdiv(n_cols, bc),)


# --- rung 1: naive, two kernels with an fp32 temporary -----------------------------------------------------------
@triton.jit
def _swiglu_map_kernel(a_ptr, b_ptr, out_ptr, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    # OP 0: out = silu(a); 1: out = a * b; 2: out = a * silu'(b). Flat, contiguous.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask).to(tl.float32)
    if OP == 0:
        v = silu(a)
    elif OP == 1:
        v = a * tl.load(b_ptr + offs, mask=mask).to(tl.float32)
    else:
        v = a * silu_grad(tl.load(b_ptr + offs, mask=mask).to(tl.float32))
    tl.store(out_ptr + offs, to_output(v, out_ptr.dtype.element_ty), mask=mask)


def naive_map(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, op: int) -> None:
    """One elementwise kernel of the naive rungs on flat contiguous tensors (``b`` unused for op 0)."""
    n = a.numel()
    # 8 elements a thread, as torch's own elementwise kernels: the rung differs from fused by its traffic only
    _swiglu_map_kernel[(triton.cdiv(n, NAIVE_BLOCK),)](a, b, out, n, OP=op, BLOCK=NAIVE_BLOCK, num_warps=32)


def swiglu_naive(gate: torch.Tensor, up: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    if out.numel() == 0:
        return out
    g, u, y = flat(gate), flat(up), flat_out(out)
    tmp = torch.empty(g.numel(), dtype=torch.float32, device=g.device)  # fp32, as an upcasting eager op would
    naive_map(g, g, tmp, 0)   # read N, write N (fp32)
    naive_map(tmp, u, y, 1)   # read N (fp32) + N, write N
    land(y, out)
    return out


# --- rung 2: fused, flat -------------------------------------------------------------------------------------------
@triton.jit
def _swiglu_flat_kernel(g_ptr, u_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    g = tl.load(g_ptr + offs, mask=mask).to(tl.float32)
    u = tl.load(u_ptr + offs, mask=mask).to(tl.float32)
    tl.store(y_ptr + offs, to_output(silu(g) * u, y_ptr.dtype.element_ty), mask=mask)


def swiglu_fused(gate: torch.Tensor, up: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    if out.numel() == 0:
        return out
    g, u, y = flat(gate), flat(up), flat_out(out)
    n = g.numel()
    _swiglu_flat_kernel[(triton.cdiv(n, FLAT_BLOCK),)](g, u, y, n, BLOCK=FLAT_BLOCK, num_warps=8)
    land(y, out)
    return out


# --- rung 3: vectorized, strided tiles -----------------------------------------------------------------------------
@triton.jit
def _swiglu_tile_kernel(g_ptr, u_ptr, y_ptr, n_rows, n_cols, g_sr, g_sc, u_sr, u_sc, y_sr, y_sc,
                        BR: tl.constexpr, BC: tl.constexpr):
    # one [BR, BC] tile of the [R, D] views; a unit column stride is specialised by Triton into vector accesses
    pid = tl.program_id(0)
    col_tiles = tl.cdiv(n_cols, BC)
    rows = (pid // col_tiles).to(tl.int64) * BR + tl.arange(0, BR)[:, None]
    cols = (pid % col_tiles).to(tl.int64) * BC + tl.arange(0, BC)[None, :]
    mask = (rows < n_rows) & (cols < n_cols)
    g = tl.load(g_ptr + rows * g_sr + cols * g_sc, mask=mask).to(tl.float32)  # read N
    u = tl.load(u_ptr + rows * u_sr + cols * u_sc, mask=mask).to(tl.float32)  # read N
    tl.store(y_ptr + rows * y_sr + cols * y_sc, to_output(silu(g) * u, y_ptr.dtype.element_ty), mask=mask)


def swiglu_vectorized(gate: torch.Tensor, up: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    if out.numel() == 0:
        return out
    (g, u), (y,), pending = rows_views([gate, up], [out])
    r, d = g.shape
    br, bc = tile_shape(r, d, g.element_size())
    _swiglu_tile_kernel[tile_grid(r, d, br, bc)](
        g, u, y, r, d, g.stride(0), g.stride(1), u.stride(0), u.stride(1), y.stride(0), y.stride(1),
        BR=br, BC=bc, num_warps=TILE_WARPS)
    for buf, o in pending:
        o.copy_(buf.view(o.shape))
    return out
