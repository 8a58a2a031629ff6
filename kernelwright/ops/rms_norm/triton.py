"""Row normalisation forward kernels in Triton, shared by ``rms_norm``, ``layer_norm`` and ``add_rms_norm``.

Every kernel works on rows of a 2-D view [R, D] (D columns, unit column stride) and is one kernel for the three
ops, specialised at compile time by constexpr flags: ``CENTER`` (layer norm: subtract the mean, add a bias),
``RESIDUAL`` (add_rms_norm: h = x + residual is formed in registers, stored, and normalised), ``OFFSET`` (the
Gemma weight 1 + w) and ``SAVE_STATS`` (write the per-row mean and rstd the backward pass reads). A flag that is
off costs nothing: its code is not generated.

Rungs (the launchers at the bottom; each family's ``triton.py`` wraps them):

* ``naive``: what unfused eager code runs: (residual add into an fp32 tensor), a row-statistics kernel, a
  normalise kernel writing fp32, an affine kernel. 3-4 kernels, ~3.5x the minimum traffic in bf16.
* ``fused``: one program per tile of rows, the whole row in registers: one read, one write. Rows up to
  :data:`FUSED_MAX_COLS` columns.
* ``chunked``: one program per row, any width: pass 1 streams the row in 8192-column chunks keeping running statistics,
  pass 2 streams it again to write. The second read comes from L2 while the rows in flight fit there.
* ``split``: a row is cut into chunks held in registers by cooperating programs, which exchange per-chunk
  statistics through one 64-bit word each (the softmax ``split`` rung's protocol): one read, one write,
  any width. Under the CPU interpreter (programs run one after another, none can wait for a later one) a row is
  one chunk; ``tests/test_norms.py`` runs the multi-chunk exchange with pre-published words.

Numerics. Statistics are computed in fp32 on values scaled by a power of two 2^-K chosen from the row's (or the
chunk's) largest magnitude, so squares cannot overflow for any finite input (bf16 and fp32 reach 3e38, whose
square does not fit fp32) and scaling is exact. ``rstd = 2^-K / sqrt(var_s + eps * 4^-K)`` where ``var_s`` is the
variance (mean square for RMS) of the scaled values. Partial statistics of pieces of a row are merged with the
pairwise formula of Chan, Golub and LeVeque (1979): M2 = sum(M2_i + n_i * (mean_i - mean)^2), after bringing
every piece to the largest scale.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelwright import runtime
from kernelwright.ops._norm_common import rows2d
from kernelwright.ops._triton_helpers import register_cap, to_output

CHUNK = 8192  # columns per step of the chunked rung and the naive statistics kernel
SPLIT_CHUNK, SPLIT_WARPS = 16384, 32  # the split rung up to 16384 columns (one chunk): see split_config
WIDE_CHUNK, WIDE_WARPS = 8192, 4  # the split rung beyond 16384 columns
WIDE_RES_CHUNK, WIDE_RES_WARPS = 16384, 8  # the same with a residual (add_rms_norm: twice the loads a column)
FUSED_NARROW_TILE, FUSED_NARROW_WARPS = 2048, 4  # the fused rung's tile of rows of <= 1024 columns: see fused_tile
NAIVE_BLOCK = 1024  # columns per program in the naive rung's elementwise kernels (GPU)
SPLIT_MAXNREG: int | None = None
"""register cap a thread of the split rungs' programs (Triton's ``maxnreg``; None: the compiler's choice). An
experiment switch: fewer registers let more programs, and so more prefetched chunks, sit on each SM (sm_90, 8192
columns x 4 warps at 262144: rms 150 registers, 3 programs an SM; layer 193, 2; softmax's split kernel 128, 4)."""
CHUNKED_STAGES = 1
"""pipeline depth of the chunked rung's two loops over a row (Triton's ``tl.range(num_stages=)``: loads through
shared memory by cp.async, STAGES - 1 chunks in flight). An experiment switch; 1 (off) until measured. The split
rung cannot use it: Triton 3.6 does not pipeline a loop holding another loop (its spin-wait), checked on the sm_90
cubin (24 LDGSTS without the wait, none with it)."""
WIDE_LAYER_MAXNREG = 168
"""register cap a thread of layer norm's wide split forward (8192 columns x 4 warps, beyond 16384 columns): it
takes 193 registers uncapped, two programs an SM; at 168 (8 bytes of spills, sm_90) three fit. H200 run 24 (bf16,
``norm_configs.py --library``): 2.67 -> 3.14 TB/s at 4096x65536, 2.14 -> 2.57 at 1024x262144; a cap of 128 (four
an SM, 80 bytes of spills) was slower than none (2.40 / 1.99), and so was 128 on rms (3.58 -> 3.31 at 65536)."""
FUSED_BIAS_EARLY = False
"""Experiment switch: the fused forward loads layer norm's bias with the weight, before the row's statistics, as
Liger's kernel does; off, the compiled kernel (sm_90, bf16, 4096 columns) loads it after the last reduction, an L2
round trip in front of the stores (SASS: LDG x LDG w ... 8 barriers ... LDG b STG). Liger 3.62 TB/s against fused's
3.44 at 16384x4096 (run 62). Not timed yet."""
WEIGHT_HOLD = False
"""the forward split rung holds its weight (and bias) chunk in registers across rows instead of reloading it every
row. Off: H200 run 24 (bf16): rms 3.58 -> 3.28 TB/s at 65536 columns, 3.24 -> 2.94 at 262144 (the held chunk
costs a program an SM); layer +3-4%, add_rms the same, both below what the register cap gives. The backward has
its own switch (``rms_norm_bwd.triton.WEIGHT_HOLD``, on)."""
FAST_STATS: bool | None = None
"""the split forward's chunk statistics with one dependent block reduction fewer (see :func:`_chunk_stats`; results
equal to the scaled computation's wherever the fast path applies, CPU test
``test_fast_chunk_statistics_match_the_scaled_ones``). True / False force it (experiments); None (default) takes
:func:`fast_stats`'s measured choice."""
FUSED_FAST: bool | None = None
"""the fused forward's statistics with one dependent reduction fewer (rms: one instead of two; layer norm: two
instead of three, as Liger's kernel has): the first sum and the largest magnitude in one two-operand reduction,
rows whose largest magnitude lies in the fast range (:data:`FAST_LO`..:data:`FAST_HI`) left unscaled, the others
scaled and summed again. H200 run 75 (``ops.sh fusedfast``, bf16 TB/s, off / on twice, each in its own process,
every row float64-checked): layer norm 3.44 / 3.42 -> 3.52 / 3.51 at 16384 x 4096, 3.50 / 3.51 -> 3.60 / 3.58 at
8192, 3.73 / 3.51 -> 3.83 / 3.55 at 65536 x 1024; rms 3.83 / 3.84 -> 3.94 / 3.95 at 8192, 2.59 -> 2.89 at 16384;
add_rms_norm within +-0.5%; never slower in a pair. True / False force it; None (default) takes
:func:`fused_fast`."""
FUSED_SUM_FIRST = False
"""Experiment switch (rms_norm, add_rms_norm): the fused forward's statistic as torch.compile's generated kernel
has it (``benchmarks/experiments/inductor_norm_code.py``, run 84): one single-operand ``tl.sum`` of the unscaled
squares, where FUSED_FAST reduces the sum and the largest magnitude together; rows whose sum is not finite or lies
below 2^-60 are scaled by their largest magnitude's exponent and summed again (only in programs that hold one).
torch.compile's rms at 16384 x 8192 ran 4.21 TB/s against our best 4.02 (cluster) and fused's 3.89-3.99 (runs
80-82). Not yet run on a GPU (session 19; ``ops.sh normpair`` times it)."""
FUSED_RELOAD = False
"""Experiment switch (rms_norm): the fused forward shaped as torch.compile's kernel at 16384 x 8192 (run 84,
``benchmarks/experiments/inductor_norm_code.py``: one program a row, 16 warps, x loaded ``evict_last`` for the
statistic and loaded again ``evict_first`` for the output, w ``evict_last``): x is not held across the reduction but
read a second time, from L2. The output is bit for bit the default's (the same scaled value, the same products).
torch.compile's rms ran 4.17-4.21 TB/s there against our best 4.02 (cluster) and fused's 3.89-3.99 (runs 80-86);
the single unscaled sum (FUSED_SUM_FIRST) alone changed nothing (run 86). Not yet run on a GPU (session 23)."""
SPLIT_ONE_PASS = False
"""Experiment switch (layer norm's split forward): :func:`_chunk_stats`'s fast path with the sum of squares in the
same reduction as the sum and the largest magnitude (one block reduction a chunk instead of two), M2 = Q - S mean
where at most 4 bits cancel (at most ~4 standard deviations of mean), else the centred sum as before; 16-bit rows
only. Turns the fast path on at every width for layer norm (:func:`fast_stats` keeps it off past 65536 columns,
where it did not gain alone). The cluster rung's FAST_STATS, in Triton. Not yet run on a GPU (session 22)."""
FAST_LO, FAST_HI = tl.constexpr(-20), tl.constexpr(30)
"""the range of floor(log2(max |v|)) where :func:`_chunk_stats`'s fast path applies: squares up to 2^62 (sums up
to 2^80: no overflow), and a value whose square underflows (|v| < 2^-63) is under 2^-43 of the largest, far below
the sum's rounding"""
WEIGHT_EVICT = ""
"""eviction policy of the split rungs' per-row reloads of the weight (and bias) chunk: "" (the compiler's
default). "evict_last" was never timed: run 24 measured holding the chunk in registers instead (WEIGHT_HOLD)."""
NO_HINTS, STREAM = ("", ""), ("evict_first", ".cs")
"""cache hints of a split rung: (eviction policy of its loads of the rows, cache modifier of its stores); empty
strings leave the compiler's defaults. ``STREAM``: the rows are read once and written once, so neither should
displace what is reused (the weight, the exchange words)."""


# --- helpers shared with the backward kernels ---------------------------------------------------------------------
@triton.jit
def pow2_exponent(amax):
    """floor(log2(amax)) for amax >= 0, clamped to [-63, 126] (int32): the row is scaled by 2^-k, bringing its
    largest magnitude into [1, 2) (zero and subnormal rows get 2^63, enough to lift any fp32 subnormal)."""
    e = ((amax.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127
    return tl.minimum(tl.maximum(e, -63), 126)


@triton.jit
def exp2i(k):
    """2^k as fp32, exactly, for integer k <= 127; k < -126 gives 2^-126 (callers use it only where a factor
    that small makes its term negligible)."""
    k = tl.maximum(k, -126)
    return ((k + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _add_and_max(s1, a1, s2, a2):
    return s1 + s2, tl.maximum(a1, a2)


@triton.jit
def _add_add_and_max(s1, q1, a1, s2, q2, a2):
    return s1 + s2, q1 + q2, tl.maximum(a1, a2)


@triton.jit
def _chunk_stats(v, mask, n, CENTER: tl.constexpr, FAST: tl.constexpr = False, ONE_PASS: tl.constexpr = False):
    """(k, mean, M2) of one chunk of a row, in the chunk's scale 2^-k: mean of the n valid lanes (0 without
    CENTER) and the sum of squared deviations (of squares without CENTER).

    FAST (:data:`FAST_STATS`): the largest magnitude and the first sum (of v, or of v * v without CENTER) in one
    two-operand reduction, unscaled, then brought to the scale 2^-k exactly (a power of two), where max |v| lies
    in [2^FAST_LO, 2^(FAST_HI + 1)): there no square overflows and none that matters underflows, so the result
    is the scaled computation's, one dependent block reduction fewer (rms: 2 -> 1; layer norm: 3 -> 2). Outside
    that range (and for Inf or NaN) the scaled path below runs.

    ONE_PASS (with FAST and CENTER: :data:`SPLIT_ONE_PASS`): the sum of squares Q joins that reduction, and M2 = Q -
    S mean where that keeps at least Q / 16 (else the centred sum): layer norm 2 -> 1."""
    if FAST:
        if CENTER and ONE_PASS:
            first, sq, amax = tl.reduce((v, v * v, tl.abs(v)), 0, _add_add_and_max)
        elif CENTER:
            first, amax = tl.reduce((v, tl.abs(v)), 0, _add_and_max)
        else:
            first, amax = tl.reduce((v * v, tl.abs(v)), 0, _add_and_max)
        k = pow2_exponent(amax)
        if (k >= FAST_LO) & (k <= FAST_HI):
            s = exp2i(-k)
            if CENTER:
                mean_u = first / n
                mean = mean_u * s
                if ONE_PASS:
                    m2_u = sq - first * mean_u
                    if m2_u < sq * 0.0625:  # more than 4 bits cancelled: the centred sum
                        d = tl.where(mask, v - mean_u, 0.0)
                        m2_u = tl.sum(d * d, 0)
                    m2 = m2_u * (s * s)
                else:
                    d = tl.where(mask, v - mean_u, 0.0)
                    m2 = tl.sum(d * d, 0) * (s * s)
            else:
                mean = tl.zeros([], tl.float32)
                m2 = first * (s * s)
        else:
            mean, m2 = _scaled_stats(v, mask, n, k, CENTER)
    else:
        k = pow2_exponent(tl.max(tl.abs(v), 0))
        mean, m2 = _scaled_stats(v, mask, n, k, CENTER)
    return k, mean, m2


@triton.jit
def _scaled_stats(v, mask, n, k, CENTER: tl.constexpr):
    """(mean, M2) of a chunk in the scale 2^-k (see :func:`_chunk_stats`)."""
    s = exp2i(-k)
    vs = v * s
    if CENTER:
        mean = tl.sum(vs, 0) / n
        # the deviations from v again (an fma, not vs - mean), so that no second copy of the chunk need stay live
        # next to v; the sm_90 compile barely noticed (195 -> 193 registers at 8192 x 4 warps)
        d = tl.where(mask, tl.fma(v, s, -mean), 0.0)
        m2 = tl.sum(d * d, 0)
    else:
        mean = tl.zeros([], tl.float32)
        m2 = tl.sum(vs * vs, 0)
    return mean, m2


@triton.jit
def _row_stats(x_ptr, res_ptr, h_ptr, x_off, res_off, h_off, n_cols, CENTER: tl.constexpr, RESIDUAL: tl.constexpr,
               STORE_H: tl.constexpr, BLOCK: tl.constexpr, STAGES: tl.constexpr = 1):
    """Statistics of one row streamed in BLOCK-column chunks: (K, mean, M2) in the scale 2^-K, merged chunk by
    chunk (the running scale only grows; what came before is rescaled exactly, by a power of two). With
    RESIDUAL the row is x + residual, and h = x + residual is stored on the way."""
    big_k = tl.full([], -63, tl.int32)
    mean = tl.zeros([], tl.float32)
    m2 = tl.zeros([], tl.float32)
    for start in tl.range(0, n_cols, BLOCK, num_stages=STAGES):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        v = tl.load(x_ptr + x_off + cols, mask=mask, other=0.0).to(tl.float32)
        if RESIDUAL:
            v += tl.load(res_ptr + res_off + cols, mask=mask, other=0.0).to(tl.float32)
            if STORE_H:
                tl.store(h_ptr + h_off + cols, to_output(v, h_ptr.dtype.element_ty), mask=mask)
        n_b = tl.minimum(n_cols - start, BLOCK).to(tl.float32)
        k_b, mean_b, m2_b = _chunk_stats(v, mask, n_b, CENTER)
        new_k = tl.maximum(big_k, k_b)
        fa = exp2i(big_k - new_k)
        fb = exp2i(k_b - new_k)
        mean_a = mean * fa
        mean_b = mean_b * fb
        m2 = m2 * fa * fa + m2_b * fb * fb
        if CENTER:
            n_a = tl.full([], start, tl.float32)
            delta = mean_b - mean_a
            mean = mean_a + delta * (n_b / (n_a + n_b))
            m2 += delta * delta * (n_a * n_b / (n_a + n_b))
        big_k = new_k
    return big_k, mean, m2


@triton.jit
def _rsqrt_scaled(m2, n_cols, eps, big_k):
    """1 / sqrt(var_s + eps * 4^-K): the rstd of values in the scale 2^-K."""
    return tl.math.rsqrt(m2 / n_cols + eps * exp2i(-2 * big_k))


# --- rung: fused (whole rows in registers) ------------------------------------------------------------------------
@triton.jit
def _norm_fwd_fused_kernel(
    x_ptr, res_ptr, w_ptr, b_ptr, y_ptr, h_ptr, mean_ptr, rstd_ptr,
    n_rows, n_cols, x_stride, res_stride, y_stride, h_stride, eps,
    CENTER: tl.constexpr, RESIDUAL: tl.constexpr, STORE_H: tl.constexpr, OFFSET: tl.constexpr,
    SAVE_STATS: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK: tl.constexpr, BIAS_EARLY: tl.constexpr = False, FAST: tl.constexpr = False,
    SUM_FIRST: tl.constexpr = False, RELOAD: tl.constexpr = False,
):
    tl.static_assert(not (RELOAD and (CENTER or RESIDUAL)), "RELOAD: rms_norm's rows only")
    rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.arange(0, BLOCK)
    rmask = rows < n_rows
    cmask = cols < n_cols
    mask = rmask[:, None] & cmask[None, :]
    # (FUSED_RELOAD) x and w kept in L2 for x's second read below; otherwise the default policy
    keep: tl.constexpr = "evict_last" if RELOAD else ""
    x = tl.load(x_ptr + rows[:, None] * x_stride + cols[None, :], mask=mask, other=0.0,
                eviction_policy=keep).to(tl.float32)
    if RESIDUAL:
        x += tl.load(res_ptr + rows[:, None] * res_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        if STORE_H:
            tl.store(h_ptr + rows[:, None] * h_stride + cols[None, :], to_output(x, h_ptr.dtype.element_ty),
                     mask=mask)
    w = tl.load(w_ptr + cols, mask=cmask, other=0.0, eviction_policy=keep).to(tl.float32)
    if OFFSET:
        w += 1.0
    if CENTER and BIAS_EARLY:  # (FUSED_BIAS_EARLY) held in its own dtype until used
        b_early = tl.load(b_ptr + cols, mask=cmask, other=0.0)
    if SUM_FIRST and not CENTER:  # (FUSED_SUM_FIRST) one single-operand reduction where the unscaled sum is safe
        first = tl.sum(x * x, 1)
        # a finite sum of at least 2^-60: its largest square is at least 2^-60 / n >= 2^-78, so squares that
        # underflow (below 2^-126) are under 2^-48 of it; other rows (and Inf / NaN) are scaled and summed again
        plain = (first >= 8.673617379884035e-19) & (first <= 3.4028234663852886e38)  # 2^-60, fp32's largest
        k = tl.zeros([BLOCK_R], dtype=tl.int32)
        if tl.max(tl.where(plain, 0, 1), 0) > 0:
            k = tl.where(plain, 0, pow2_exponent(tl.max(tl.abs(x), 1)))
            xk = x * exp2i(-k)[:, None]
            first = tl.where(plain, first, tl.sum(xk * xk, 1))
        xs = x * exp2i(-k)[:, None]
        r = _rsqrt_scaled(first, n_cols, eps, k)
    elif FAST:  # (FUSED_FAST) the first sum and the largest magnitude in one two-operand reduction, unscaled
        if CENTER:
            first, amax = tl.reduce((x, tl.abs(x)), 1, _add_and_max)
        else:
            first, amax = tl.reduce((x * x, tl.abs(x)), 1, _add_and_max)
        k = pow2_exponent(amax)
        # rows inside the fast range (or all zeros) are left unscaled (k = 0: every factor below is exactly 1);
        # the others take the scale 2^-k and, only when the program holds one, their sum again in that scale
        plain = ((k >= FAST_LO) & (k <= FAST_HI)) | (amax == 0.0)
        k = tl.where(plain, 0, k)
        xs = x * exp2i(-k)[:, None]
        if tl.max(tl.where(plain, 0, 1), 0) > 0:
            first = tl.where(plain, first, tl.sum(xs if CENTER else xs * xs, 1))
        if CENTER:
            mean = first / n_cols
            xs = tl.where(mask, xs - mean[:, None], 0.0)
            r = _rsqrt_scaled(tl.sum(xs * xs, 1), n_cols, eps, k)
        else:
            r = _rsqrt_scaled(first, n_cols, eps, k)
    else:
        k = pow2_exponent(tl.max(tl.abs(x), 1))
        xs = x * exp2i(-k)[:, None]
        if CENTER:
            mean = tl.sum(xs, 1) / n_cols
            xs = tl.where(mask, xs - mean[:, None], 0.0)  # two passes over registers: exact centring
        r = _rsqrt_scaled(tl.sum(xs * xs, 1), n_cols, eps, k)
    if RELOAD:  # x read again (from L2, its last use) instead of held across the reduction: the same bits
        xl = tl.load(x_ptr + rows[:, None] * x_stride + cols[None, :], mask=mask, other=0.0,
                     eviction_policy="evict_first").to(tl.float32)
        y = xl * exp2i(-k)[:, None] * r[:, None] * w[None, :]
    else:
        y = xs * r[:, None] * w[None, :]
    if CENTER:
        if BIAS_EARLY:
            y += b_early.to(tl.float32)[None, :]
        else:
            y += tl.load(b_ptr + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + rows[:, None] * y_stride + cols[None, :], to_output(y, y_ptr.dtype.element_ty), mask=mask)
    if SAVE_STATS:
        tl.store(rstd_ptr + rows, r * exp2i(-k), mask=rmask)
        if CENTER:
            tl.store(mean_ptr + rows, mean * exp2i(k), mask=rmask)


# --- rung: chunked (one program per row, two streaming passes) ---------------------------------------------------
@triton.jit
def _norm_fwd_chunked_kernel(
    x_ptr, res_ptr, w_ptr, b_ptr, y_ptr, h_ptr, mean_ptr, rstd_ptr,
    n_rows, n_cols, x_stride, res_stride, y_stride, h_stride, eps,
    CENTER: tl.constexpr, RESIDUAL: tl.constexpr, STORE_H: tl.constexpr, OFFSET: tl.constexpr,
    SAVE_STATS: tl.constexpr,
    BLOCK: tl.constexpr, STAGES: tl.constexpr = 1,
):
    row = tl.program_id(0).to(tl.int64)
    # pass 1: statistics (and h = x + residual, stored on the way); STAGES > 1: Triton's pipeliner keeps STAGES - 1
    # chunks in flight through shared memory (cp.async)
    big_k, mean, m2 = _row_stats(x_ptr, res_ptr, h_ptr, row * x_stride, row * res_stride, row * h_stride, n_cols,
                                 CENTER, RESIDUAL, STORE_H, BLOCK, STAGES)
    r = _rsqrt_scaled(m2, n_cols, eps, big_k)
    scale = exp2i(-big_k)
    # pass 2: read the row again (from L2 while it is still there), normalise, write
    for start in tl.range(0, n_cols, BLOCK, num_stages=STAGES):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        v = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
        if RESIDUAL:
            v += tl.load(res_ptr + row * res_stride + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        if OFFSET:
            w += 1.0
        y = (v * scale - mean) * r * w
        if CENTER:
            y += tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * y_stride + cols, to_output(y, y_ptr.dtype.element_ty), mask=mask)
    if SAVE_STATS:
        tl.store(rstd_ptr + row, r * scale)
        if CENTER:
            tl.store(mean_ptr + row, mean * exp2i(big_k))


# --- rung: split (a row over cooperating programs) -----------------------------------------------------------------
@triton.jit
def _norm_fwd_split_kernel(
    x_ptr, res_ptr, w_ptr, b_ptr, y_ptr, h_ptr, mean_ptr, rstd_ptr, slot_ptr,
    n_rows, n_cols, x_stride, res_stride, y_stride, h_stride, eps,
    CENTER: tl.constexpr, RESIDUAL: tl.constexpr, STORE_H: tl.constexpr, OFFSET: tl.constexpr,
    SAVE_STATS: tl.constexpr,
    N_CHUNKS: tl.constexpr, CHUNKS_POW2: tl.constexpr, CHUNK: tl.constexpr,
    EVICT: tl.constexpr = "", STORE_CACHE: tl.constexpr = "", W_EVICT: tl.constexpr = "",
    W_HOLD: tl.constexpr = False, FAST: tl.constexpr = False, ONE_PASS: tl.constexpr = False,
):
    # Program p holds chunk p % N_CHUNKS of rows p // N_CHUNKS, + groups, ... (a persistent grid of groups x
    # N_CHUNKS programs, all resident at once). slot: [R, N_CHUNKS] int64, -1 at launch. A chunk publishes its
    # statistics as one 64-bit word (RMS: its scale exponent and sum of squares; CENTER: its mean and std / 4,
    # unscaled) by a relaxed atomic exchange, then reads its partners' words until none is -1.
    pid = tl.program_id(0)
    chunk = pid % N_CHUNKS
    groups = tl.num_programs(0) // N_CHUNKS
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = cols < n_cols
    n_mine = tl.minimum(n_cols - chunk * CHUNK, CHUNK).to(tl.float32)
    ks = tl.arange(0, CHUNKS_POW2)
    kmask = ks < N_CHUNKS
    ns = tl.where(kmask, tl.minimum(n_cols - ks * CHUNK, CHUNK), 0).to(tl.float32)
    first = pid // N_CHUNKS
    # software pipelining by hand: the next row's chunk is in flight while this one is reduced and exchanged
    nmask = mask & (first < n_rows)
    first64 = first.to(tl.int64)
    x_next = tl.load(x_ptr + first64 * x_stride + cols, mask=nmask, other=0.0, eviction_policy=EVICT)
    if RESIDUAL:
        r_next = tl.load(res_ptr + first64 * res_stride + cols, mask=nmask, other=0.0, eviction_policy=EVICT)
    if W_HOLD:  # in the input dtype (half the registers of fp32), converted where used
        w_held = tl.load(w_ptr + cols, mask=mask, other=0.0)
        if CENTER:
            b_held = tl.load(b_ptr + cols, mask=mask, other=0.0)
    for row in range(first, n_rows, groups):
        row64 = tl.cast(row, tl.int64)
        v = x_next.to(tl.float32)
        if RESIDUAL:
            v += r_next.to(tl.float32)
        nxt = row + groups
        nmask = mask & (nxt < n_rows)
        nxt64 = tl.cast(nxt, tl.int64)
        x_next = tl.load(x_ptr + nxt64 * x_stride + cols, mask=nmask, other=0.0, eviction_policy=EVICT)
        if RESIDUAL:
            r_next = tl.load(res_ptr + nxt64 * res_stride + cols, mask=nmask, other=0.0, eviction_policy=EVICT)
            if STORE_H:
                tl.store(h_ptr + row64 * h_stride + cols, to_output(v, h_ptr.dtype.element_ty), mask=mask,
                         cache_modifier=STORE_CACHE)
        k, mean, m2 = _chunk_stats(v, mask, n_mine, CENTER, FAST, ONE_PASS)
        if N_CHUNKS > 1:
            slots = slot_ptr + row64 * N_CHUNKS
            if CENTER:
                # (mean, std / 4) of the chunk as two unscaled fp32 in one word: |mean| <= max |v| and
                # std / 4 < max |v| cannot overflow; a NaN mean made canonical (high half never all ones)
                mu = mean * exp2i(k)
                mu = tl.where(mu != mu, float("nan"), mu)
                q = tl.sqrt(m2 / n_mine) * exp2i(k - 2)
                word = (mu.to(tl.int32, bitcast=True).to(tl.int64) << 32) | q.to(tl.uint32, bitcast=True).to(tl.int64)
            else:
                # the chunk's scale exponent + 256 (never all ones) over the fp32 bits of its sum of squares
                word = ((k + 256).to(tl.int64) << 32) | m2.to(tl.uint32, bitcast=True).to(tl.int64)
            tl.atomic_xchg(slots + chunk, word, sem="relaxed")
            # volatile loads go to L2, where the atomics land; spin until every chunk of the row has published
            words = tl.load(slots + ks, mask=kmask, other=0, volatile=True)
            while tl.sum((words == -1).to(tl.int32), 0) > 0:
                words = tl.load(slots + ks, mask=kmask, other=0, volatile=True)
            lo = (words & 0xFFFFFFFF).to(tl.uint32).to(tl.float32, bitcast=True)
            if CENTER:
                # every piece brought to one scale 2^-k chosen from the largest |mean| and std / 4, then merged
                mus = tl.where(kmask, (words >> 32).to(tl.int32).to(tl.float32, bitcast=True), 0.0)
                qs = tl.where(kmask, lo, 0.0)
                k = pow2_exponent(tl.max(tl.maximum(tl.abs(mus), qs), 0))
                f = exp2i(-k)
                means = mus * f
                sds = qs * (f * 4.0)
                mean = tl.sum(ns * means, 0) / n_cols
                dm = means - mean
                m2 = tl.sum(ns * (sds * sds + dm * dm), 0)
            else:
                kk = ((words >> 32) - 256).to(tl.int32)
                k = tl.max(tl.where(kmask, kk, -1000), 0)
                m2 = tl.sum(tl.where(kmask, lo * exp2i(kk - k) * exp2i(kk - k), 0.0), 0)
        r = _rsqrt_scaled(m2, n_cols, eps, k)
        scale = exp2i(-k)
        # the weight (and bias) chunk is loaded again for every row (an L1 hit while the streamed rows have not
        # evicted it): held (W_HOLD) it takes registers that cost a program an SM (WEIGHT_HOLD)
        if W_HOLD:
            w = w_held.to(tl.float32)
        else:
            w = tl.load(w_ptr + cols, mask=mask, other=0.0, eviction_policy=W_EVICT).to(tl.float32)
        if OFFSET:
            w += 1.0
        y = (v * scale - mean) * r * w
        if CENTER:
            if W_HOLD:
                y += b_held.to(tl.float32)
            else:
                y += tl.load(b_ptr + cols, mask=mask, other=0.0, eviction_policy=W_EVICT).to(tl.float32)
        tl.store(y_ptr + row64 * y_stride + cols, to_output(y, y_ptr.dtype.element_ty), mask=mask,
                 cache_modifier=STORE_CACHE)
        if SAVE_STATS:
            if chunk == 0:
                tl.store(rstd_ptr + row64, r * scale)
                if CENTER:
                    tl.store(mean_ptr + row64, mean * exp2i(k))


# --- rung: naive (separate kernels with fp32 intermediates, as unfused eager code) ---------------------------------
@triton.jit
def _naive_add_kernel(x_ptr, res_ptr, h32_ptr, h_ptr, n_cols, x_stride, res_stride, h_stride, BLOCK: tl.constexpr):
    # h32 = float(x) + float(residual) (what the rest of the naive rung reads), h = h32 in the output dtype
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    v = tl.load(x_ptr + row * x_stride + cols, mask=mask).to(tl.float32)
    v += tl.load(res_ptr + row * res_stride + cols, mask=mask).to(tl.float32)
    tl.store(h32_ptr + row * n_cols + cols, v, mask=mask)
    tl.store(h_ptr + row * h_stride + cols, to_output(v, h_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _naive_stats_kernel(src_ptr, mean_ptr, rstd_ptr, n_cols, src_stride, eps, CENTER: tl.constexpr,
                        BLOCK: tl.constexpr):
    # one program per row: mean and rstd in fp32, like eager's var_mean/rsqrt kernels
    row = tl.program_id(0).to(tl.int64)
    big_k, mean, m2 = _row_stats(src_ptr, src_ptr, src_ptr, row * src_stride, 0, 0, n_cols, CENTER, False, False,
                                 BLOCK)
    tl.store(rstd_ptr + row, _rsqrt_scaled(m2, n_cols, eps, big_k) * exp2i(-big_k))
    tl.store(mean_ptr + row, mean * exp2i(big_k))


@triton.jit
def _naive_normalize_kernel(src_ptr, mean_ptr, rstd_ptr, t_ptr, n_cols, src_stride, BLOCK: tl.constexpr):
    # t = (src - mean) * rstd, an fp32 tensor
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    v = tl.load(src_ptr + row * src_stride + cols, mask=mask).to(tl.float32)
    t = (v - tl.load(mean_ptr + row)) * tl.load(rstd_ptr + row)
    tl.store(t_ptr + row * n_cols + cols, t, mask=mask)


@triton.jit
def _naive_affine_kernel(t_ptr, w_ptr, b_ptr, y_ptr, n_cols, y_stride, w_stride, b_stride, CENTER: tl.constexpr,
                         OFFSET: tl.constexpr, BLOCK: tl.constexpr):
    # y = t * w (+ b), rounded once to the output dtype
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(w_ptr + cols * w_stride, mask=mask).to(tl.float32)
    if OFFSET:
        w += 1.0
    y = tl.load(t_ptr + row * n_cols + cols, mask=mask) * w
    if CENTER:
        y += tl.load(b_ptr + cols * b_stride, mask=mask).to(tl.float32)
    tl.store(y_ptr + row * y_stride + cols, to_output(y, y_ptr.dtype.element_ty), mask=mask)


# --- launchers -----------------------------------------------------------------------------------------------------
def warps_for(elements: int) -> int:
    """Warps for a program holding ``elements`` fp32 values: 8-16 values a thread."""
    return 4 if elements <= 1024 else 8 if elements <= 4096 else 16 if elements <= 8192 else 32


FUSED_CENTER_TILES = {4096: (1, 4), 8192: (2, 8)}
"""Layer norm's fused tiles (rows a program, warps) by row width, where they differ from rms's: H200 run 80
(``benchmarks/experiments/norm_configs.py --fused-wide``, bf16, 16384 rows, one process, each config float64-checked
first, FUSED_FAST on): 4096 columns 1 x 4 warps 3.81 TB/s against 1 x 8 (the shared rule) 3.48 and 2 x 8 3.77; 8192
columns 2 x 8 3.79 against 1 x 16 3.56. rms_norm in the same run kept its rule (4096: 1 x 8 3.91 against 1 x 4 3.81;
8192: 1 x 16 3.89, 1 x 4 3.99, within the runs' spread and taken by the cluster rung there); 65536 x 1024 for both:
the narrow rule (2 x 4) within 0.5% of the best. 16-bit rows only (fp16 moves bf16's bytes); fp32 rows keep the
shared rule, not timed with these (2 x 8 at 8192 takes 172 registers a thread in fp32, sm_90: one program an SM)."""


FUSED_CENTER_NARROW = (65536, 1024, 2, 2)
"""(rows at least, width, rows a program, warps): layer norm's 16-bit rows of 513-1024 columns in grids of that many
rows take one warp a row. H200 runs 89-90 (``norm_configs.py --narrow``, bf16, each config float64-checked first):
65536 x 1024 2 x 2 3.91 / 3.91 / 3.92 TB/s against the narrow rule's (2 x 4) 3.83 / 3.82 / 3.84 (1 x 1 3.91 / 3.89
/ 3.89; torch.compile's own choice there is one warp a row, run 84); at 16384 x 1024 it lost (3.06 / 3.07 against
3.09 / 3.10), so fewer rows keep the rule (between 16384 and 65536 rows: not measured). rms_norm and add_rms_norm
keep it (run 89: 3.97 / 4.10 against 3.94 / 4.11). None: off."""


def fused_tile(n_cols: int, center: bool = False, elt: int = 2, rows: int = 0) -> tuple[int, int, int]:
    """(rows per program, columns block, warps) of the fused forward kernel: narrow rows are grouped into tiles so
    a program moves enough bytes to hide its reductions.

    Rows of <= 1024 columns: 2048-value tiles over 4 warps. The H200 sweep of 2026-12-03 (run 20/22,
    ``benchmarks/experiments/norm_configs.py``, bf16 16384x1024) put 2 rows x 4 warps at 3.13 / 2.96 / 3.66 TB/s
    (rms / layer / add_rms) against 3.06 / 2.63 / 3.50 for the 4096-value tile over 8 warps used before; tiles of
    1-8 rows over 1-8 warps were within 2-5% of it, one run each. Wider rows: ~4096-value tiles, warps by size;
    layer norm (``center``) in 16-bit types (``elt`` bytes an element) takes :data:`FUSED_CENTER_TILES` at the
    widths listed there, and :data:`FUSED_CENTER_NARROW` at 1024 columns in grids of ``rows`` rows or more.
    """
    block = triton.next_power_of_2(n_cols)
    narrow = FUSED_CENTER_NARROW
    if center and elt == 2 and narrow and block == narrow[1] and rows >= narrow[0]:
        return narrow[2], block, narrow[3]
    if block <= 1024:
        return max(1, min(16, FUSED_NARROW_TILE // block)), block, FUSED_NARROW_WARPS
    if center and elt == 2 and block in FUSED_CENTER_TILES:
        rows, warps = FUSED_CENTER_TILES[block]
        return rows, block, warps
    block_r = max(1, min(16, 4096 // block))
    return block_r, block, warps_for(block_r * block)


def naive_block(n_cols: int) -> int:
    """Columns per program of the naive rung's elementwise kernels (larger under the interpreter, where each
    program instance costs ~2 ms)."""
    return min(triton.next_power_of_2(n_cols), 65536 if runtime.interpreting() else NAIVE_BLOCK)


def fast_stats(center: bool, residual: bool, n_cols: int) -> bool:
    """Whether the split forward takes :func:`_chunk_stats`'s fast path (:data:`FAST_STATS` None), from H200 runs 41-42
    (bf16, off / on in separate processes, three pairs, each pair within 1% of the others; journal "Session 11"):
    layer norm 3.51 -> 3.61 TB/s at 16384 columns, 3.23 -> 3.32 at 65536, 2.95 -> 2.93 at 262144; rms 3.86 -> 3.87,
    3.56 -> 3.28 (sic: slower) at 65536, 3.20 -> 3.36 at 262144; add_rms_norm within +-1% everywhere. So: layer norm
    up to 65536 columns (16384 is the one-chunk, 32-warp program; narrower split rows were not measured), rms beyond
    65536, add_rms_norm never. Why rms at 65536 loses 8% is not known yet (the same 8192-column, 4-warp programs as
    at 262144, three an SM in both; 162 against 152 registers, journal "Session 10").
    Off under the interpreter unless forced: it folds a ``tl.reduce`` with a combine function sequentially, whose
    fp32 sum of 262144 squares is off by ~5.7e-5 relative (the ladder test's rms 1x262144 fp32 failed at 2e-5),
    where the GPU sums each thread's few values and then a tree; ``tl.sum`` there is numpy's pairwise sum."""
    if FAST_STATS is not None:
        return bool(FAST_STATS)
    if residual or runtime.interpreting():  # the interpreter folds tl.reduce sequentially (above)
        return False
    return n_cols <= 65536 if center else n_cols > 65536


def split_one_pass(center: bool, residual: bool, dtype: torch.dtype) -> bool:
    """Whether the split forward takes :data:`SPLIT_ONE_PASS` (layer norm, 16-bit rows: in fp32 the M2's cancelled
    bits, up to ~1e-4 of it, would show in the output; off under the interpreter unless :data:`FAST_STATS` forces
    the fast path, as :func:`fast_stats`)."""
    if not (SPLIT_ONE_PASS and center and not residual and dtype.itemsize == 2):
        return False
    return bool(FAST_STATS) if FAST_STATS is not None else not runtime.interpreting()


def fused_fast() -> bool:
    """Whether the fused forward takes the fast statistics (:data:`FUSED_FAST`; None: on, every family, from run
    75). Off under the interpreter unless forced, as :func:`fast_stats` (its sequential fold of ``tl.reduce``)."""
    if FUSED_FAST is not None:
        return bool(FUSED_FAST)
    return not runtime.interpreting()


def split_config(n_cols: int, residual: bool = False) -> tuple[int, int, tuple[str, str]]:
    """(columns per program, warps, cache hints) of the forward split rung; one chunk a row under the interpreter.

    Up to 16384 columns: the whole row in one 32-warp program (no exchange; 3.83 / 3.59 TB/s for rms / layer at
    16384 columns in run 7). Wider: 8192-column chunks over 4 warps with streaming hints, from the H200 sweep of
    2026-12-03 (runs 20 and 22, bf16): rms 3.57 / 3.23 TB/s at 65536 / 262144 columns (16384 x 32 warps, used
    before: 2.79 / 2.12), layer 2.68 / 2.22 (2.11 / 0.92). Small programs (~240 registers a thread, 4 warps) let
    several rows' chunks per SM wait on their exchanges while others load; 32-warp programs fit one an SM and wait
    in lock step. With a residual (add_rms_norm: x and the residual loaded, h and y stored) 16384 x 8 with hints
    took 262144 columns to 3.61 (8192 x 4: 3.49; 16384 x 32: 3.07), and 16384 x 8 was 3.77 at 65536 (3.62).
    """
    if runtime.interpreting():
        return triton.next_power_of_2(n_cols), 4, NO_HINTS
    if n_cols > SPLIT_CHUNK:
        return (WIDE_RES_CHUNK, WIDE_RES_WARPS, STREAM) if residual else (WIDE_CHUNK, WIDE_WARPS, STREAM)
    chunk = min(SPLIT_CHUNK, triton.next_power_of_2(n_cols))
    return chunk, min(SPLIT_WARPS, warps_for(chunk)), NO_HINTS


_resident: dict[tuple, int] = {}


def _split_cap(wide_layer: bool) -> dict:
    """The ``maxnreg`` launch option of a split forward: SPLIT_MAXNREG when set (experiments), else
    WIDE_LAYER_MAXNREG for layer norm's wide configuration; none under the interpreter."""
    return register_cap(SPLIT_MAXNREG or (WIDE_LAYER_MAXNREG if wide_layer else None))


def persistent_groups(kernel, args: tuple, meta: dict, warps: int, n_chunks: int, n_rows: int, device) -> int:
    """Row groups of a persistent grid of ``kernel`` (``n_chunks`` programs a group): as many as the GPU holds
    at once, from the compiled kernel's registers and shared memory (in a split rung every chunk of a row must be
    running for the exchange to finish), at most one a row; 3 under the interpreter (exercises the row loop)."""
    if runtime.interpreting():
        return max(1, min(n_rows, 3))
    from kernelwright.ops.softmax.triton import _resident_programs

    key = (kernel, device.index or 0, tuple(str(a.dtype) for a in args if isinstance(a, torch.Tensor)),
           tuple(sorted(meta.items())), warps)
    if key not in _resident:
        compiled = kernel.warmup(*args, **meta, num_warps=warps, grid=(1,))
        compiled._init_handles()
        _resident[key] = _resident_programs(key[1], compiled.n_regs, compiled.metadata.shared, warps)
    resident = _resident[key]
    if resident < n_chunks:
        raise RuntimeError(f"split: the GPU holds {resident} programs at once, a row needs {n_chunks}")
    return max(1, min(n_rows, resident // n_chunks))


def _unpack_stats(stats, center: bool):
    if stats is None:
        return None, None
    return (stats[0], stats[1]) if center else (None, stats[0])


def norm_forward(rung: str, x: torch.Tensor, weight: torch.Tensor, eps: float, *, y: torch.Tensor,
                 bias: torch.Tensor | None = None, residual: torch.Tensor | None = None, h: torch.Tensor | None = None,
                 offset: bool = False, stats=None, split_chunk: int | None = None, slots: torch.Tensor | None = None,
                 groups: int | None = None) -> None:
    """Run forward rung ``rung`` over the last dim of ``x`` into the contiguous ``y`` (and ``h`` with a residual).

    ``bias`` given: layer norm; ``residual`` given: h = x + residual is normalised and stored in ``h`` (``h=None``:
    not stored, for a caller that needs only y). ``stats``:
    fp32 buffers of the row statistics to save, ``(mean, rstd)`` with a bias, ``(rstd,)`` without.
    ``split_chunk``, ``slots`` (pre-filled exchange words) and ``groups`` override the split rung's configuration
    (tests run its multi-chunk exchange under the interpreter with them).
    """
    n_cols = x.shape[-1]
    if y.numel() == 0:
        return
    center, has_res = bias is not None, residual is not None
    mean, rstd = _unpack_stats(stats, center)
    # the kernels index the weight and bias as contiguous vectors: Triton specialises a stride on divisibility by
    # 16, not on being 1, so a runtime stride would turn their 128-bit loads into 16-bit ones (read in the SASS)
    weight = weight.contiguous()
    bias = bias.contiguous() if center else None
    x2 = rows2d(x)
    r2 = rows2d(residual) if has_res else x2
    y2 = y.view(-1, n_cols)
    store_h = has_res and h is not None  # add_rms_norm without h: the sum is normalised, never stored
    h2 = h.view(-1, n_cols) if store_h else y2
    b = bias if center else weight
    n_rows = x2.shape[0]
    flags = dict(CENTER=center, RESIDUAL=has_res, STORE_H=store_h, OFFSET=bool(offset), SAVE_STATS=stats is not None)
    dummy = rstd if rstd is not None else y2
    mean_t, rstd_t = (mean if mean is not None else dummy), (rstd if rstd is not None else dummy)
    tail = (n_rows, n_cols, x2.stride(0), r2.stride(0), y2.stride(0), h2.stride(0), float(eps))
    ptrs = (x2, r2, weight, b, y2, h2, mean_t, rstd_t)
    if rung == "fused":
        block_r, block, warps = fused_tile(n_cols, center, x2.element_size(), n_rows)
        _norm_fwd_fused_kernel[(triton.cdiv(n_rows, block_r),)](
            *ptrs, *tail, **flags, BLOCK_R=block_r, BLOCK=block, BIAS_EARLY=FUSED_BIAS_EARLY,
            FAST=fused_fast(), SUM_FIRST=FUSED_SUM_FIRST and not center,
            RELOAD=FUSED_RELOAD and not center and not has_res, num_warps=warps)
    elif rung == "chunked":
        block = min(CHUNK, triton.next_power_of_2(n_cols))
        _norm_fwd_chunked_kernel[(n_rows,)](*ptrs, *tail, **flags, BLOCK=block, STAGES=CHUNKED_STAGES,
                                            num_warps=warps_for(block))
    elif rung == "split":
        chunk, warps, hints = split_config(n_cols, has_res)
        chunk = split_chunk or chunk
        n_chunks = triton.cdiv(n_cols, chunk)
        if slots is None:
            slots = torch.full((n_rows, n_chunks) if n_chunks > 1 else (1,), -1, dtype=torch.int64, device=x.device)
        one_pass = split_one_pass(center, has_res, x.dtype)
        meta = dict(**flags, N_CHUNKS=n_chunks, CHUNKS_POW2=triton.next_power_of_2(n_chunks), CHUNK=chunk,
                    EVICT=hints[0], STORE_CACHE=hints[1], W_EVICT=WEIGHT_EVICT, W_HOLD=WEIGHT_HOLD,
                    FAST=one_pass or fast_stats(center, has_res, n_cols), ONE_PASS=one_pass,
                    **_split_cap(center and not has_res and split_chunk is None and n_cols > SPLIT_CHUNK))
        args = (*ptrs, slots, *tail)
        groups = groups or persistent_groups(_norm_fwd_split_kernel, args, meta, warps, n_chunks, n_rows, x.device)
        _norm_fwd_split_kernel[(groups * n_chunks,)](*args, **meta, num_warps=warps)
    elif rung == "naive":
        if has_res and not store_h:  # the naive rung writes h as eager code would; a scratch h takes it
            h2 = torch.empty_like(y2)
        _naive_forward(x2, r2 if has_res else None, weight, bias, eps, offset, y2, h2 if has_res else None, mean,
                       rstd)
    else:
        raise ValueError(f"unknown forward rung {rung!r}")


def _naive_forward(x2, r2, weight, bias, eps, offset, y2, h2, mean, rstd) -> None:
    n_rows, n_cols = x2.shape
    dev = x2.device
    block = naive_block(n_cols)
    grid = (n_rows, triton.cdiv(n_cols, block))
    src = x2
    if r2 is not None:  # eager: h = x.float() + residual.float(), then the norm of h
        src = torch.empty((n_rows, n_cols), dtype=torch.float32, device=dev)
        _naive_add_kernel[grid](x2, r2, src, h2, n_cols, x2.stride(0), r2.stride(0), h2.stride(0), BLOCK=block)
    mean = mean if mean is not None else torch.empty(n_rows, dtype=torch.float32, device=dev)
    rstd = rstd if rstd is not None else torch.empty(n_rows, dtype=torch.float32, device=dev)
    center = bias is not None
    _naive_stats_kernel[(n_rows,)](src, mean, rstd, n_cols, src.stride(0), float(eps), CENTER=center,
                                   BLOCK=min(max(CHUNK, block), triton.next_power_of_2(n_cols)))
    t = torch.empty((n_rows, n_cols), dtype=torch.float32, device=dev)
    _naive_normalize_kernel[grid](src, mean, rstd, t, n_cols, src.stride(0), BLOCK=block)
    b = bias if center else weight
    _naive_affine_kernel[grid](t, weight, b, y2, n_cols, y2.stride(0), weight.stride(0), b.stride(0),
                               CENTER=center, OFFSET=bool(offset), BLOCK=block)


# --- the rms_norm family's rungs ------------------------------------------------------------------------------------
def _rung(name: str):
    def run(x, weight, eps=1e-6, offset=False, *, out, stats=None):
        norm_forward(name, x, weight, eps, y=out, offset=offset, stats=stats)
        return out

    run.__name__ = f"rms_norm_{name}"
    run.__doc__ = f"rms_norm, rung ``{name}``: ``out`` = x / sqrt(mean(x^2) + eps) * w (w + 1 with ``offset``)."
    return run


rms_norm_naive = _rung("naive")
rms_norm_fused = _rung("fused")
rms_norm_chunked = _rung("chunked")
rms_norm_split = _rung("split")
