"""cross_entropy in Triton: loss and gradient of logits [N, V] in one pass over the vocabulary where possible.

No rung makes a float32 copy of the logits except ``naive`` (which shows what that costs). The row statistics
are streamed in BLOCK-column chunks with a per-lane running max and rescaled sum (online log-sum-exp), reduced
once at the end of the row. The gradient p - q is written in the logits' dtype into ``dlogits``, which may be the
logits' own storage (the autograd path writes it in place, as Liger does): every rung reads a chunk before it
writes the same chunk, and reads the target's logit before any gradient is written.

* ``naive``: as eager code runs it: log_softmax into an fp32 [N, V] temporary, the loss from it, the gradient
  exp(logp) - q from it, then the reduction: 4 kernels, 3 passes over fp32 [N, V].
* ``online``: one program per row, two passes over the row: statistics (and the loss), then the gradient. The
  second read comes from L2 while the rows in flight fit there.
* ``persistent``: the online row procedure in a grid of at most two programs per SM walking the rows, so the rows
  in flight (and re-read) stay within L2.
* ``split``: the vocabulary split into chunks over programs (for few rows: 16 rows of 128k give 16 programs in the
  other rungs): partial statistics per (row, chunk), then each (row, chunk) combines its row's partials and
  writes its chunk of the gradient.

The loss of each row is summed in a fixed order by one program (mean: divided by the count of rows not ignored,
read from device memory, so no host sync): results are bitwise reproducible.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelwright import runtime
from kernelwright.ops._triton_helpers import to_output

BLOCK = 8192         # columns a step in every streaming loop (fewer for narrower rows)
# Column indices are int64 (tl.arange(...).to(tl.int64) + start): rows of any length, and the CPU interpreter
# skips its int32 overflow checks, which otherwise cost a third of the CPU tests' time.
SPLIT_CHUNK = 16384  # at least this many columns a program in the split rung
SUM_BLOCK = 1024


# --- shared @jit pieces --------------------------------------------------------------------------------------------
@triton.jit
def _stats(x_row, x_sc, start, stop, BLOCK: tl.constexpr, SMOOTH: tl.constexpr):
    """(max, sum of exp(x - max), sum of x) of x_row[start:stop], streamed; lanes keep their own max and sum."""
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    sx = tl.zeros([BLOCK], tl.float32)
    for c in range(start, stop, BLOCK):
        cols = tl.arange(0, BLOCK).to(tl.int64) + c
        mask = cols < stop
        x = tl.load(x_row + cols * x_sc, mask=mask, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a lane that saw only -inf: (-inf) - (-inf) = NaN
        s = s * tl.exp(m - m_safe) + tl.exp(x - m_safe)
        m = m_new
        if SMOOTH:
            sx += tl.where(mask, x, 0.0)
    row_max = tl.max(m, 0)
    safe = tl.where(row_max == float("-inf"), 0.0, row_max)
    return row_max, tl.sum(s * tl.exp(m - safe), 0), tl.sum(sx, 0)


@triton.jit
def _row_loss(m, log_s, sx, x_t, n_cols, eps, SMOOTH: tl.constexpr):
    # lse - (1 - eps) x_t - eps mean(x) as three non-negative terms (m >= x_t, m >= mean, log s >= 0): no
    # cancellation, and m + log s is never rounded at the logits' magnitude
    loss = (m - x_t) * (1.0 - eps) + log_s
    if SMOOTH:
        loss += eps * (m - sx / n_cols)
    return loss


@triton.jit
def _write_grad(x_row, x_sc, g_row, g_sc, start, stop, t, m, log_s, scale, n_cols, eps, BLOCK: tl.constexpr):
    """g = (p - eps / V - (1 - eps) [col == t]) * scale over columns [start, stop), p = exp((x - m) - log s)."""
    for c in range(start, stop, BLOCK):
        cols = tl.arange(0, BLOCK).to(tl.int64) + c
        mask = cols < stop
        x = tl.load(x_row + cols * x_sc, mask=mask, other=float("-inf")).to(tl.float32)  # read (L2 if lucky)
        g = tl.exp((x - m) - log_s) - eps / n_cols - tl.where(cols == t, 1.0 - eps, 0.0)
        tl.store(g_row + cols * g_sc, to_output(g * scale, g_row.dtype.element_ty), mask=mask)


@triton.jit
def _write_zeros(g_row, g_sc, start, stop, BLOCK: tl.constexpr):
    for c in range(start, stop, BLOCK):
        cols = tl.arange(0, BLOCK).to(tl.int64) + c
        tl.store(g_row + cols * g_sc, tl.zeros([BLOCK], tl.float32).to(g_row.dtype.element_ty), mask=cols < stop)


@triton.jit
def _scale(nvalid_ptr, MEAN: tl.constexpr):
    """dloss / dloss_i: 1 / max(rows not ignored, 1) for "mean", else 1."""
    if MEAN:
        return 1.0 / tl.maximum(tl.load(nvalid_ptr).to(tl.float32), 1.0)
    return 1.0


@triton.jit
def _ce_row(row, x_ptr, t_ptr, loss_ptr, g_ptr, nvalid_ptr, n_cols, x_sr, x_sc, t_s, g_sr, g_sc, ignore_index,
            eps, MEAN: tl.constexpr, SMOOTH: tl.constexpr, GRAD: tl.constexpr, BLOCK: tl.constexpr):
    """One row, start to end: statistics and loss in one pass, the gradient in a second."""
    t = tl.load(t_ptr + row * t_s).to(tl.int64)
    x_row = x_ptr + row * x_sr
    g_row = g_ptr + row * g_sr
    if t != ignore_index:
        x_t = tl.load(x_row + t * x_sc).to(tl.float32)  # before any gradient overwrites it (in place)
        m, s, sx = _stats(x_row, x_sc, 0, n_cols, BLOCK, SMOOTH)
        log_s = tl.log(s)
        tl.store(loss_ptr + row, _row_loss(m, log_s, sx, x_t, n_cols, eps, SMOOTH))
        if GRAD:
            _write_grad(x_row, x_sc, g_row, g_sc, 0, n_cols, t, m, log_s, _scale(nvalid_ptr, MEAN), n_cols, eps,
                        BLOCK)
    else:
        tl.store(loss_ptr + row, 0.0)
        if GRAD:
            _write_zeros(g_row, g_sc, 0, n_cols, BLOCK)


@triton.jit
def _ce_sum_kernel(rows_ptr, out_ptr, n_rows, nvalid_ptr, MEAN: tl.constexpr, BLOCK: tl.constexpr):
    # one program: the same order on every run
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_rows, BLOCK):
        offs = tl.arange(0, BLOCK).to(tl.int64) + start
        acc += tl.load(rows_ptr + offs, mask=offs < n_rows, other=0.0)
    tl.store(out_ptr, tl.sum(acc, 0) * _scale(nvalid_ptr, MEAN))


# --- driver shared by the rungs ------------------------------------------------------------------------------------
class _Call:
    """One call's tensors and switches, as every rung's launcher needs them."""

    def __init__(self, logits, target, out, ignore_index, label_smoothing, reduction):
        self.x, self.t = logits, target
        self.loss, self.g = out
        self.n, self.v = logits.shape
        self.ignore_index, self.eps, self.reduction = int(ignore_index), float(label_smoothing), reduction
        # the loss of each row: the output itself for "none", else a scratch row summed at the end
        self.rows = self.loss if reduction == "none" else torch.empty(self.n, dtype=torch.float32,
                                                                      device=logits.device)
        self.nvalid = (target != ignore_index).sum() if reduction == "mean" else self.rows  # device scalar
        gx = self.g if self.g is not None else logits  # no gradient: a dummy pointer, never written
        self.row_args = (logits, target, self.rows, gx, self.nvalid, self.v, logits.stride(0), logits.stride(1),
                         target.stride(0), gx.stride(0), gx.stride(1), self.ignore_index, self.eps)
        self.flags = dict(MEAN=reduction == "mean", SMOOTH=self.eps != 0.0, GRAD=self.g is not None)
        self.block = min(BLOCK, triton.next_power_of_2(max(self.v, 1)))
        self.warps = max(1, min(16, self.block // 512))  # 16 columns a thread at 8192 columns a step

    def finish(self):
        if self.reduction != "none":
            _ce_sum_kernel[(1,)](self.rows, self.loss, self.n, self.nvalid, MEAN=self.reduction == "mean",
                                 BLOCK=SUM_BLOCK)
        return (self.loss, self.g)


def _run(logits, target, out, ignore_index, label_smoothing, reduction, launch):
    call = _Call(logits, target, out, ignore_index, label_smoothing, reduction)
    if call.n == 0:
        call.loss.zero_()
        return out
    launch(call)
    call.finish()
    return out


# --- rung 1: naive ---------------------------------------------------------------------------------------------------
@triton.jit
def _ce_logp_kernel(x_ptr, lp_ptr, n_cols, x_sr, x_sc, BLOCK: tl.constexpr):
    # log_softmax of one row into fp32: a pass for the statistics, a pass to write
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_sr
    m, s, _ = _stats(x_row, x_sc, 0, n_cols, BLOCK, False)
    log_s = tl.log(s)
    for c in range(0, n_cols, BLOCK):
        cols = tl.arange(0, BLOCK).to(tl.int64) + c
        mask = cols < n_cols
        x = tl.load(x_row + cols * x_sc, mask=mask).to(tl.float32)
        tl.store(lp_ptr + row * n_cols + cols, (x - m) - log_s, mask=mask)


@triton.jit
def _ce_nll_kernel(lp_ptr, t_ptr, rows_ptr, n_cols, t_s, ignore_index, eps, SMOOTH: tl.constexpr,
                   BLOCK: tl.constexpr):
    # loss_i = -(1 - eps) logp[t] - eps mean(logp), 0 when ignored
    row = tl.program_id(0).to(tl.int64)
    t = tl.load(t_ptr + row * t_s).to(tl.int64)
    loss = tl.full([], 0.0, tl.float32)
    if t != ignore_index:
        loss = -(1.0 - eps) * tl.load(lp_ptr + row * n_cols + t)
        if SMOOTH:
            acc = tl.zeros([BLOCK], tl.float32)
            for c in range(0, n_cols, BLOCK):
                cols = tl.arange(0, BLOCK).to(tl.int64) + c
                acc += tl.load(lp_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
            loss -= eps * tl.sum(acc, 0) / n_cols
    tl.store(rows_ptr + row, loss)


@triton.jit
def _ce_grad_from_logp_kernel(lp_ptr, t_ptr, g_ptr, nvalid_ptr, n_cols, t_s, g_sr, g_sc, ignore_index, eps,
                              MEAN: tl.constexpr, BLOCK: tl.constexpr):
    # grid (rows, column blocks): g = (exp(logp) - q) * scale, 0 when ignored
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK).to(tl.int64) + tl.program_id(1) * BLOCK
    mask = cols < n_cols
    t = tl.load(t_ptr + row * t_s).to(tl.int64)
    p = tl.exp(tl.load(lp_ptr + row * n_cols + cols, mask=mask, other=0.0))
    g = (p - eps / n_cols - tl.where(cols == t, 1.0 - eps, 0.0)) * _scale(nvalid_ptr, MEAN)
    g = tl.where(t != ignore_index, g, 0.0)
    tl.store(g_ptr + row * g_sr + cols * g_sc, to_output(g, g_ptr.dtype.element_ty), mask=mask)


def _naive(c: _Call) -> None:
    lp = torch.empty((c.n, c.v), dtype=torch.float32, device=c.x.device)  # the fp32 copy the other rungs avoid
    _ce_logp_kernel[(c.n,)](c.x, lp, c.v, c.x.stride(0), c.x.stride(1), BLOCK=c.block, num_warps=c.warps)
    _ce_nll_kernel[(c.n,)](lp, c.t, c.rows, c.v, c.t.stride(0), c.ignore_index, c.eps, SMOOTH=c.flags["SMOOTH"],
                           BLOCK=c.block, num_warps=c.warps)
    if c.g is not None:
        _ce_grad_from_logp_kernel[(c.n, triton.cdiv(c.v, c.block))](
            lp, c.t, c.g, c.nvalid, c.v, c.t.stride(0), c.g.stride(0), c.g.stride(1), c.ignore_index, c.eps,
            MEAN=c.flags["MEAN"], BLOCK=c.block, num_warps=c.warps)


def cross_entropy_naive(logits, target, *, out, ignore_index=-100, label_smoothing=0.0, reduction="mean"):
    return _run(logits, target, out, ignore_index, label_smoothing, reduction, _naive)


# --- rung 2: online, one program per row -----------------------------------------------------------------------------
@triton.jit
def _ce_online_kernel(x_ptr, t_ptr, loss_ptr, g_ptr, nvalid_ptr, n_cols, x_sr, x_sc, t_s, g_sr, g_sc, ignore_index,
                      eps, MEAN: tl.constexpr, SMOOTH: tl.constexpr, GRAD: tl.constexpr, BLOCK: tl.constexpr):
    _ce_row(tl.program_id(0).to(tl.int64), x_ptr, t_ptr, loss_ptr, g_ptr, nvalid_ptr, n_cols, x_sr, x_sc, t_s,
            g_sr, g_sc, ignore_index, eps, MEAN, SMOOTH, GRAD, BLOCK)


def _online(c: _Call) -> None:
    _ce_online_kernel[(c.n,)](*c.row_args, **c.flags, BLOCK=c.block, num_warps=c.warps)


def cross_entropy_online(logits, target, *, out, ignore_index=-100, label_smoothing=0.0, reduction="mean"):
    return _run(logits, target, out, ignore_index, label_smoothing, reduction, _online)


# --- rung 3: persistent, rows in flight bounded by L2 ----------------------------------------------------------------
@triton.jit
def _ce_persistent_kernel(x_ptr, t_ptr, loss_ptr, g_ptr, nvalid_ptr, n_rows, n_cols, x_sr, x_sc, t_s, g_sr, g_sc,
                          ignore_index, eps, MEAN: tl.constexpr, SMOOTH: tl.constexpr, GRAD: tl.constexpr,
                          BLOCK: tl.constexpr):
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        _ce_row(tl.cast(row, tl.int64), x_ptr, t_ptr, loss_ptr, g_ptr, nvalid_ptr, n_cols, x_sr, x_sc, t_s, g_sr,
                g_sc, ignore_index, eps, MEAN, SMOOTH, GRAD, BLOCK)


def persistent_programs(n_rows: int, row_bytes: int) -> int:
    """Programs of the persistent rung: two per SM while their rows fit in half the L2, else one per SM.

    (Compiled for sm_90 at 8192 columns a step and 16 warps, the row kernel takes 96-101 registers a thread, so
    one program fits an SM at a time; a second one waits for the first.)"""
    if runtime.interpreting():
        return min(n_rows, 4)
    facts = runtime.device_facts()
    sms, l2 = facts["sms"], facts["l2_bytes"]
    per_sm = 2 if 2 * sms * row_bytes <= l2 // 2 else 1
    return max(1, min(n_rows, per_sm * sms))


def _persistent(c: _Call) -> None:
    x, t, rows, gx, nvalid, *tail = c.row_args
    grid = (persistent_programs(c.n, c.v * c.x.element_size()),)
    _ce_persistent_kernel[grid](x, t, rows, gx, nvalid, c.n, *tail, **c.flags, BLOCK=c.block, num_warps=c.warps)


def cross_entropy_persistent(logits, target, *, out, ignore_index=-100, label_smoothing=0.0, reduction="mean"):
    return _run(logits, target, out, ignore_index, label_smoothing, reduction, _persistent)


# --- rung 4: split, the vocabulary over several programs ------------------------------------------------------------
@triton.jit
def _ce_partials_kernel(x_ptr, t_ptr, part_ptr, xt_ptr, n_cols, x_sr, x_sc, t_s, ignore_index,
                        N_CHUNKS: tl.constexpr, CHUNK: tl.constexpr, SMOOTH: tl.constexpr, BLOCK: tl.constexpr):
    # part [N, N_CHUNKS, 3]: (max, sum exp(x - max), sum x) of each chunk; xt [N]: the target's logit, saved by
    # the program whose chunk holds it (the gradient kernel may overwrite the logits in place)
    pid = tl.program_id(0)
    row = (pid // N_CHUNKS).to(tl.int64)
    chunk = pid % N_CHUNKS
    t = tl.load(t_ptr + row * t_s).to(tl.int64)
    if t != ignore_index:
        x_row = x_ptr + row * x_sr
        start = chunk * CHUNK
        stop = tl.minimum(start + CHUNK, n_cols)
        m, s, sx = _stats(x_row, x_sc, start, stop, BLOCK, SMOOTH)
        p = part_ptr + (row * N_CHUNKS + chunk) * 3
        tl.store(p, m)
        tl.store(p + 1, s)
        tl.store(p + 2, sx)
        if (t >= start) & (t < stop):
            tl.store(xt_ptr + row, tl.load(x_row + t * x_sc).to(tl.float32))


@triton.jit
def _ce_split_grad_kernel(x_ptr, t_ptr, part_ptr, xt_ptr, loss_ptr, g_ptr, nvalid_ptr, n_cols, x_sr, x_sc, t_s,
                          g_sr, g_sc, ignore_index, eps, N_CHUNKS: tl.constexpr, CHUNKS_POW2: tl.constexpr,
                          CHUNK: tl.constexpr, MEAN: tl.constexpr, SMOOTH: tl.constexpr, GRAD: tl.constexpr,
                          BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    row = (pid // N_CHUNKS).to(tl.int64)
    chunk = pid % N_CHUNKS
    start = chunk * CHUNK
    stop = tl.minimum(start + CHUNK, n_cols)
    t = tl.load(t_ptr + row * t_s).to(tl.int64)
    g_row = g_ptr + row * g_sr
    if t != ignore_index:
        ks = tl.arange(0, CHUNKS_POW2)
        kmask = ks < N_CHUNKS
        p = part_ptr + (row * N_CHUNKS + ks) * 3
        pm = tl.load(p, mask=kmask, other=float("-inf"))
        ps = tl.load(p + 1, mask=kmask, other=0.0)
        m = tl.max(pm, 0)
        safe = tl.where(m == float("-inf"), 0.0, m)
        log_s = tl.log(tl.sum(ps * tl.exp(pm - safe), 0))  # the same combine, in the same order, everywhere
        if chunk == 0:
            sx = tl.sum(tl.load(p + 2, mask=kmask, other=0.0), 0)
            tl.store(loss_ptr + row, _row_loss(m, log_s, sx, tl.load(xt_ptr + row), n_cols, eps, SMOOTH))
        if GRAD:
            _write_grad(x_ptr + row * x_sr, x_sc, g_row, g_sc, start, stop, t, m, log_s, _scale(nvalid_ptr, MEAN),
                        n_cols, eps, BLOCK)
    else:
        if chunk == 0:
            tl.store(loss_ptr + row, 0.0)
        if GRAD:
            _write_zeros(g_row, g_sc, start, stop, BLOCK)


def split_chunk(n_rows: int, n_cols: int) -> int:
    """Columns a program: enough (row, chunk) programs to fill the GPU (4 per SM), each at least SPLIT_CHUNK."""
    sms = 4 if runtime.interpreting() else runtime.device_facts()["sms"]
    per_row = max(1, triton.cdiv(4 * sms, n_rows))
    return max(SPLIT_CHUNK, triton.next_power_of_2(triton.cdiv(n_cols, per_row)))


def _split(c: _Call) -> None:
    chunk = split_chunk(c.n, c.v)
    n_chunks = triton.cdiv(c.v, chunk)
    part = torch.empty((c.n, n_chunks, 3), dtype=torch.float32, device=c.x.device)
    xt = torch.empty(c.n, dtype=torch.float32, device=c.x.device)
    grid = (c.n * n_chunks,)
    x, t, rows, gx, nvalid, v, x_sr, x_sc, t_s, g_sr, g_sc, ignore_index, eps = c.row_args
    _ce_partials_kernel[grid](x, t, part, xt, v, x_sr, x_sc, t_s, ignore_index, N_CHUNKS=n_chunks, CHUNK=chunk,
                              SMOOTH=c.flags["SMOOTH"], BLOCK=c.block, num_warps=c.warps)
    _ce_split_grad_kernel[grid](x, t, part, xt, rows, gx, nvalid, v, x_sr, x_sc, t_s, g_sr, g_sc, ignore_index,
                                eps, N_CHUNKS=n_chunks, CHUNKS_POW2=triton.next_power_of_2(n_chunks), CHUNK=chunk,
                                **c.flags, BLOCK=c.block, num_warps=c.warps)


def cross_entropy_split(logits, target, *, out, ignore_index=-100, label_smoothing=0.0, reduction="mean"):
    return _run(logits, target, out, ignore_index, label_smoothing, reduction, _split)


# --- the autograd backward: scale the saved gradient by the incoming one --------------------------------------------
@triton.jit
def _ce_scale_kernel(g_ptr, dloss_ptr, n_cols, g_sr, g_sc, PER_ROW: tl.constexpr, BLOCK: tl.constexpr):
    # in place, one program per row; a scale of exactly 1 (the loss is the last op) returns before touching the
    # row, so the usual backward costs a launch and no traffic, with no host sync to find out
    row = tl.program_id(0).to(tl.int64)
    scale = tl.load(dloss_ptr + row).to(tl.float32) if PER_ROW else tl.load(dloss_ptr).to(tl.float32)
    if scale != 1.0:
        g_row = g_ptr + row * g_sr
        for c in range(0, n_cols, BLOCK):
            cols = tl.arange(0, BLOCK).to(tl.int64) + c
            mask = cols < n_cols
            g = tl.load(g_row + cols * g_sc, mask=mask).to(tl.float32)
            tl.store(g_row + cols * g_sc, to_output(g * scale, g_ptr.dtype.element_ty), mask=mask)


def scale_rows_(g: torch.Tensor, dloss: torch.Tensor) -> torch.Tensor:
    """``g *= dloss`` in place (``dloss`` a scalar, or [N] for one scale a row), fp32 math."""
    n, v = g.shape
    if n * v:
        block = min(BLOCK, triton.next_power_of_2(v))
        _ce_scale_kernel[(n,)](g, dloss.contiguous(), v, g.stride(0), g.stride(1), PER_ROW=dloss.dim() == 1,
                               BLOCK=block, num_warps=max(1, min(16, block // 512)))
    return g
