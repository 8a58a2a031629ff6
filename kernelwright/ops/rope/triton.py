"""rope in Triton: rotary embedding of q and k, fp32 math, any strides, both pair layouts.

Every launcher first views q, k and the outputs as 4-D [B, S, H, D] (a ``"bhsd"`` tensor is transposed as a view:
only strides change) and the angles as [B, S', Dc] rows (batch stride 0 when shared) or a [T, Dc] table indexed
through positions [B, S]. A pair is (e1, e2) = (i, i + D/2) half-split or (2i, 2i + 1) interleaved, i < D/2.

Minimum traffic: read q and k, write them, one cos and one sin row per token. Rungs:

* ``naive``: Hugging Face's eager ``q * cos + rotate_half(q) * sin`` as three kernels per tensor: rotate_half into
  an fp32 temporary, x * cos into another, then the sum; q and k one after the other.
* ``fused``: one kernel per tensor, 16 (token, head) rows a program: one read and one write of q and k; cos and
  sin are re-read for every head (from L1/L2: the rows of a token are neighbours).
* ``token``: one kernel for q and k together, one program per token: its cos and sin row is loaded once and applied
  to all H + KH heads as one [heads, D/2] tile.

The backward (``rope_bwd``) is the transposed rotation: the same kernels with (s1, s2) -> (-s2, -s1) (a rotation
by -theta when the two elements of a pair share an angle).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from kernelwright.ops._triton_helpers import to_output

ROWS_PER_PROGRAM = 16


# --- layouts ------------------------------------------------------------------------------------------------------
def as_bshd(x: torch.Tensor, qk_layout: str) -> torch.Tensor:
    """[B, S, H, D] view of q or k (batch dims merged into B; packed only when they do not merge)."""
    if qk_layout == "bhsd":
        x = x.transpose(-3, -2)
    b = math.prod(x.shape[:-3])
    try:
        return x.view(b, *x.shape[-3:])
    except RuntimeError:
        return x.reshape(b, *x.shape[-3:])


def angle_rows(cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor | None, lead: tuple):
    """(cos, sin, positions) as the kernels read them: tables [T, Dc] with positions [B, S], or rows [B, S', Dc]
    (a batch shared by all keeps stride 0), with positions ``None``."""
    b = math.prod(lead)
    if positions is not None:
        p = positions.expand(*lead, positions.shape[-1])
        return cos, sin, p.reshape(b, p.shape[-1])
    out = []
    for t in (cos, sin):
        t = t.expand(*lead, *t.shape[-2:]) if len(lead) else t
        try:
            out.append(t.view(b, *t.shape[-2:]))
        except RuntimeError:  # expanded batch dims that do not merge into one stride
            out.append(t.reshape(b, *t.shape[-2:]))
    return out[0], out[1], None


def _angle_strides(c: torch.Tensor, p: torch.Tensor | None):
    """(batch, row, element) strides of an angle tensor, and (batch, seq) strides of positions."""
    cs = (0, c.stride(0), c.stride(1)) if p is not None else (c.stride(0), c.stride(1), c.stride(2))
    ps = (p.stride(0), p.stride(1)) if p is not None else (0, 0)
    return cs, ps


@triton.jit
def _pair_angles(c_ptr, s_ptr, c_sd, s_sd, i, e1, e2, mask, FULL_COS: tl.constexpr, BACKWARD: tl.constexpr):
    """(c1, c2, s1, s2) for pair indices i, fp32; the backward's transposed rotation uses (-s2, -s1)."""
    if FULL_COS:
        c1 = tl.load(c_ptr + e1 * c_sd, mask=mask, other=0.0).to(tl.float32)
        c2 = tl.load(c_ptr + e2 * c_sd, mask=mask, other=0.0).to(tl.float32)
        s1 = tl.load(s_ptr + e1 * s_sd, mask=mask, other=0.0).to(tl.float32)
        s2 = tl.load(s_ptr + e2 * s_sd, mask=mask, other=0.0).to(tl.float32)
    else:
        c1 = tl.load(c_ptr + i * c_sd, mask=mask, other=0.0).to(tl.float32)
        c2 = c1
        s1 = tl.load(s_ptr + i * s_sd, mask=mask, other=0.0).to(tl.float32)
        s2 = s1
    if BACKWARD:
        s1, s2 = -s2, -s1
    return c1, c2, s1, s2


@triton.jit
def _pair_index(HALF, BD: tl.constexpr, INTERLEAVED: tl.constexpr):
    i = tl.arange(0, BD)
    if INTERLEAVED:
        return i, 2 * i, 2 * i + 1
    return i, i, i + HALF


# --- rungs 1 and 2: row kernels, one tensor at a time ---------------------------------------------------------------
@triton.jit
def _rope_rows_kernel(x_ptr, y_ptr, o_ptr, cos_ptr, sin_ptr, pos_ptr, n_rows, S, H, HALF,
                      x_sb, x_ss, x_sh, x_sd, y_sb, y_ss, y_sh, y_sd, o_sb, o_ss, o_sh, o_sd,
                      c_sb, c_ss, c_sd, s_sb, s_ss, s_sd, p_sb, p_ss,
                      OP: tl.constexpr, HAS_POS: tl.constexpr, FULL_COS: tl.constexpr,
                      INTERLEAVED: tl.constexpr, BACKWARD: tl.constexpr, BR: tl.constexpr, BD: tl.constexpr):
    # rows r = (b, s, h), h fastest; OP 0: o = rotate_half(x); 1: o = x * cos; 2: o = y + x * sin (x rotated
    # already); 3: o = x * cos + rotate_half(x) * sin in one pass
    r = (tl.program_id(0).to(tl.int64) * BR + tl.arange(0, BR))[:, None]  # [BR, 1]
    h = r % H
    t = r // H
    s = t % S
    b = t // S
    i, e1, e2 = _pair_index(HALF, BD, INTERLEAVED)
    mask = (r < n_rows) & (i < HALF)[None, :]  # [BR, BD]
    if HAS_POS:
        row = tl.load(pos_ptr + b * p_sb + s * p_ss, mask=r < n_rows, other=0).to(tl.int64)
        c_row = cos_ptr + row * c_ss
        s_row = sin_ptr + row * s_ss
    else:
        c_row = cos_ptr + b * c_sb + s * c_ss
        s_row = sin_ptr + b * s_sb + s * s_ss
    c1, c2, s1, s2 = _pair_angles(c_row, s_row, c_sd, s_sd, i[None, :], e1[None, :], e2[None, :], mask,
                                  FULL_COS, BACKWARD)
    xr = x_ptr + b * x_sb + s * x_ss + h * x_sh
    x1 = tl.load(xr + e1[None, :] * x_sd, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(xr + e2[None, :] * x_sd, mask=mask, other=0.0).to(tl.float32)
    if OP == 0:
        o1, o2 = -x2, x1
    elif OP == 1:
        o1, o2 = x1 * c1, x2 * c2
    elif OP == 2:
        yr = y_ptr + b * y_sb + s * y_ss + h * y_sh
        o1 = tl.load(yr + e1[None, :] * y_sd, mask=mask, other=0.0) + x1 * s1
        o2 = tl.load(yr + e2[None, :] * y_sd, mask=mask, other=0.0) + x2 * s2
    else:
        o1 = x1 * c1 - x2 * s1
        o2 = x2 * c2 + x1 * s2
    orow = o_ptr + b * o_sb + s * o_ss + h * o_sh
    tl.store(orow + e1[None, :] * o_sd, to_output(o1, o_ptr.dtype.element_ty), mask=mask)
    tl.store(orow + e2[None, :] * o_sd, to_output(o2, o_ptr.dtype.element_ty), mask=mask)


def _rows_pass(x, o, angles, op: int, interleaved: bool, backward: bool, y=None) -> None:
    """One launch of the row kernel over a [B, S, H, D] tensor (``y``: the second operand of op 2)."""
    cos, sin, pos = angles
    bsz, seq, heads, d = x.shape
    n_rows = bsz * seq * heads
    if n_rows == 0:
        return
    y = x if y is None else y
    (c_sb, c_ss, c_sd), (p_sb, p_ss) = _angle_strides(cos, pos)
    s_strides = _angle_strides(sin, pos)[0]
    bd = triton.next_power_of_2(max(d // 2, 1))
    _rope_rows_kernel[(triton.cdiv(n_rows, ROWS_PER_PROGRAM),)](
        x, y, o, cos, sin, cos if pos is None else pos, n_rows, seq, heads, d // 2,
        *x.stride(), *y.stride(), *o.stride(), c_sb, c_ss, c_sd, *s_strides, p_sb, p_ss,
        OP=op, HAS_POS=pos is not None, FULL_COS=cos.shape[-1] == d, INTERLEAVED=interleaved, BACKWARD=backward,
        BR=ROWS_PER_PROGRAM, BD=bd, num_warps=4)


def _views(q, k, cos, sin, positions, out, qk_layout):
    """4-D views of inputs and outputs, the angles, and the (scratch, out) pairs for :func:`_land`: an output
    whose batch dims do not merge into one stride is written through a [B, S, H, D] scratch buffer."""
    q4, k4 = as_bshd(q, qk_layout), as_bshd(k, qk_layout)
    outs, pending = [], []
    for o, like in zip(out, (q4, k4), strict=True):
        o4 = o.transpose(-3, -2) if qk_layout == "bhsd" else o
        try:
            o4 = o4.view(like.shape)
        except RuntimeError:
            o4 = torch.empty(like.shape, dtype=o.dtype, device=o.device)
            pending.append((o4, o))
        outs.append(o4)
    return q4, k4, outs, angle_rows(cos, sin, positions, tuple(q.shape[:-3])), pending


def _land(pending, qk_layout) -> None:
    for scratch, o in pending:
        logical = o.transpose(-3, -2) if qk_layout == "bhsd" else o  # [..., S, H, D], a view of o
        logical.copy_(scratch.view(logical.shape))


def run_rows(q, k, cos, sin, positions, out, interleaved, qk_layout, backward, naive) -> tuple:
    q4, k4, (qo, ko), angles, pending = _views(q, k, cos, sin, positions, out, qk_layout)
    for x, o in ((q4, qo), (k4, ko)):
        if naive:
            rot = torch.empty(x.shape, dtype=torch.float32, device=x.device)
            scaled = torch.empty(x.shape, dtype=torch.float32, device=x.device)
            _rows_pass(x, rot, angles, 0, interleaved, backward)                  # read N, write N (fp32)
            _rows_pass(x, scaled, angles, 1, interleaved, backward)               # read N, write N (fp32)
            _rows_pass(rot, o, angles, 2, interleaved, backward, y=scaled)        # read 2N (fp32), write N
        else:
            _rows_pass(x, o, angles, 3, interleaved, backward)                    # read N, write N
    _land(pending, qk_layout)
    return out


def rope_naive(q, k, cos, sin, positions=None, *, out, interleaved=False, qk_layout="bhsd"):
    return run_rows(q, k, cos, sin, positions, out, interleaved, qk_layout, backward=False, naive=True)


def rope_fused(q, k, cos, sin, positions=None, *, out, interleaved=False, qk_layout="bhsd"):
    return run_rows(q, k, cos, sin, positions, out, interleaved, qk_layout, backward=False, naive=False)


# --- rung 3: one program per token, q and k together ----------------------------------------------------------------
@triton.jit
def _rotate_heads(x_ptr, o_ptr, x_sh, x_sd, o_sh, o_sd, n_heads, i, e1, e2, c1, c2, s1, s2, HALF,
                  BH: tl.constexpr):
    # the [heads, D/2] pairs of one token: every head takes the same angles (broadcast along dim 0)
    h = tl.arange(0, BH)[:, None]
    mask = (h < n_heads) & (i < HALF)[None, :]
    x1 = tl.load(x_ptr + h * x_sh + e1[None, :] * x_sd, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptr + h * x_sh + e2[None, :] * x_sd, mask=mask, other=0.0).to(tl.float32)
    o1 = x1 * c1[None, :] - x2 * s1[None, :]
    o2 = x2 * c2[None, :] + x1 * s2[None, :]
    tl.store(o_ptr + h * o_sh + e1[None, :] * o_sd, to_output(o1, o_ptr.dtype.element_ty), mask=mask)
    tl.store(o_ptr + h * o_sh + e2[None, :] * o_sd, to_output(o2, o_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rope_token_kernel(q_ptr, k_ptr, qo_ptr, ko_ptr, cos_ptr, sin_ptr, pos_ptr, S, H, KH, HALF,
                       q_sb, q_ss, q_sh, q_sd, k_sb, k_ss, k_sh, k_sd,
                       qo_sb, qo_ss, qo_sh, qo_sd, ko_sb, ko_ss, ko_sh, ko_sd,
                       c_sb, c_ss, c_sd, s_sb, s_ss, s_sd, p_sb, p_ss,
                       HAS_POS: tl.constexpr, FULL_COS: tl.constexpr, INTERLEAVED: tl.constexpr,
                       BACKWARD: tl.constexpr, BQ: tl.constexpr, BK: tl.constexpr, BD: tl.constexpr):
    tok = tl.program_id(0).to(tl.int64)
    s = tok % S
    b = tok // S
    i, e1, e2 = _pair_index(HALF, BD, INTERLEAVED)
    dmask = i < HALF
    if HAS_POS:
        row = tl.load(pos_ptr + b * p_sb + s * p_ss).to(tl.int64)
        c_row = cos_ptr + row * c_ss
        s_row = sin_ptr + row * s_ss
    else:
        c_row = cos_ptr + b * c_sb + s * c_ss
        s_row = sin_ptr + b * s_sb + s * s_ss
    c1, c2, s1, s2 = _pair_angles(c_row, s_row, c_sd, s_sd, i, e1, e2, dmask, FULL_COS, BACKWARD)  # once a token
    _rotate_heads(q_ptr + b * q_sb + s * q_ss, qo_ptr + b * qo_sb + s * qo_ss, q_sh, q_sd, qo_sh, qo_sd, H,
                  i, e1, e2, c1, c2, s1, s2, HALF, BQ)
    _rotate_heads(k_ptr + b * k_sb + s * k_ss, ko_ptr + b * ko_sb + s * ko_ss, k_sh, k_sd, ko_sh, ko_sd, KH,
                  i, e1, e2, c1, c2, s1, s2, HALF, BK)


def run_token(q, k, cos, sin, positions, out, interleaved, qk_layout, backward) -> tuple:
    q4, k4, (qo, ko), (c, s, p), pending = _views(q, k, cos, sin, positions, out, qk_layout)
    bsz, seq, heads, d = q4.shape
    if bsz * seq:
        (c_sb, c_ss, c_sd), (p_sb, p_ss) = _angle_strides(c, p)
        s_strides = _angle_strides(s, p)[0]
        bq, bk = triton.next_power_of_2(heads), triton.next_power_of_2(k4.shape[2])
        bd = triton.next_power_of_2(max(d // 2, 1))
        _rope_token_kernel[(bsz * seq,)](
            q4, k4, qo, ko, c, s, c if p is None else p, seq, heads, k4.shape[2], d // 2,
            *q4.stride(), *k4.stride(), *qo.stride(), *ko.stride(), c_sb, c_ss, c_sd, *s_strides, p_sb, p_ss,
            HAS_POS=p is not None, FULL_COS=c.shape[-1] == d, INTERLEAVED=interleaved, BACKWARD=backward,
            BQ=bq, BK=bk, BD=bd, num_warps=4 if (bq + bk) * bd <= 4096 else 8)
    _land(pending, qk_layout)
    return out


def rope_token(q, k, cos, sin, positions=None, *, out, interleaved=False, qk_layout="bhsd"):
    return run_token(q, k, cos, sin, positions, out, interleaved, qk_layout, backward=False)
