"""What the normalisation families share outside their kernels: row views, rung limits, inputs, costs,
tolerances, peers and argument checks for ``rms_norm``, ``layer_norm``, ``add_rms_norm`` and their backward passes.

No Triton here: specs and public ops import this module, and Triton may be imported only once the device is
settled (see :mod:`kernelwright.runtime`). The kernels shared by the families live in
``kernelwright/ops/rms_norm/triton.py`` (forward) and ``kernelwright/ops/rms_norm_bwd/triton.py`` (backward).

A family's *kind* says which op and direction it is: ``rms``, ``layer``, ``add_rms`` (forward) and ``rms_bwd``,
``layer_bwd``, ``add_rms_bwd``. Backward families take what the forward saves next to the primal inputs (the
per-row fp32 ``rstd``, and ``mean`` for layer norm; for add_rms_norm the sum h = x + residual, which the forward
returns anyway, instead of x and residual); their float64 references ignore those statistics and recompute
everything from the primal inputs.
"""

from __future__ import annotations

import math
import numbers

import torch
import torch.nn.functional as F

from kernelwright.errors import UsageError
from kernelwright.harness.inputs import random_values, with_layout
from kernelwright.harness.sizes import format_dims, parse_dims
from kernelwright.ops import _peers, _validate
from kernelwright.registry import Case, Family, Peer, Rung, Tolerance

FUSED_MAX_COLS = 32768
"""forward ``fused``: the widest row one program holds in registers (32 fp32 values a thread at 1024 threads)"""
FUSED_BWD_MAX_COLS = 16384
"""backward ``fused``: x, dy, w and the dweight accumulator of a row in registers, so half the forward's width"""
FUSED_PREFERRED_COLS = {"add_rms": 16384, "rms_bwd": 1024, "layer_bwd": 1024, "add_rms_bwd": 1024}
"""``variant=None`` takes ``fused`` up to this width (8192 for kinds not listed), then ``split`` (the CUDA
``cluster`` rung first where :func:`cluster_leads`). From the H200 run 7/8 sweeps (bf16, benchmarks/journal/norms.md):
at 16384 columns fused reached 2.57 / 2.19 TB/s (rms / layer) against split's 3.83 / 3.59, but add_rms fused 4.10
against 3.94. Backward (run 9, after the fused accumulator fix): fused wins at 1024 columns (rms / layer / add_rms
1.96 / 1.37 / 2.07 TB/s against split's 1.13 / 0.82 / 1.37), split at 4096 (3.32 / 2.52 / 3.50 against 2.74 / 2.24 /
2.83) and they tie at 8192; widths between 1024 and 4096 were not measured. Past 16384 columns ``chunked`` came first
until session 15, although split had overtaken it (runs 59-60, bf16 at 65536 / 262144: rms split 3.58 / 3.40
against chunked 2.78 / 2.66, layer 3.31 / 2.95 against 2.45 / 2.29)."""
CLUSTER_COLS = (8192, 16384, 65536, 262144)
"""Where ``variant=None`` takes the Hopper ``cluster`` rung (:func:`cluster_leads`): from the first width, to the
second, for rms_norm in 16-bit types to the third, and for rms_norm in bf16 to the fourth."""


def cluster_leads(kind: str, d: int, dtype: torch.dtype | None) -> bool:
    """Whether the CUDA ``cluster`` rung leads for rows of ``d`` columns. H200 runs 60-61 (TB/s, cluster against the
    best Triton rung): at 8192 and 16384 columns rms_norm and layer_norm in every dtype (bf16 4.01-4.07 against
    split's 3.60-3.85; fp32 4.07-4.15; the one loss rms fp32 at 8192, 4.07 against fused's 4.17); rms_norm at 65536
    in bf16 / fp16 (3.91 / 3.88 against split's 3.58 / 3.60) but not fp32 (3.39 against 3.66); neither at 262144
    (rms 3.40 against split's 3.39-3.45 in 16-bit, 3.09 against 3.67 in fp32) nor layer_norm past 16384 (bf16 3.09
    against 3.33 at 65536). Since FAST_STATS (run 85) rms_norm's bf16 rung leads at 262144 too: run 87, the same
    processes, cluster 3.48 / 3.45 against split 3.41 / 3.39 (and the early w loads, session 25, +2% on the H200 in
    run 65, +4% under the H200 stand-in); fp16 there was last measured before both (3.40 against split's 3.45, run
    61) and stays with split past 65536. Widths between those measured follow their neighbours; only widths a
    multiple of 8 (the 16-byte path: the one-element path was never timed), and the chooser also wants 16-byte row
    starts (``kwargs["aligned"]``, from :func:`pick`)."""
    if kind not in ("rms", "layer") or d % 8:
        return False
    lo, hi, wide, widest = CLUSTER_COLS
    top = hi
    if kind == "rms" and dtype in (torch.float16, torch.bfloat16):
        top = widest if dtype == torch.bfloat16 else wide
    return lo <= d <= top


BWD_CLUSTER_FROM = {"rms_bwd": 1024, "layer_bwd": 1024, "add_rms_bwd": 1024}
"""Where ``variant=None`` takes the Hopper backward ``cluster`` rung (:func:`bwd_cluster_leads`): from this width to
262144 columns, 16-bit types. H200 run 68 (bf16 TB/s, cluster against the best Triton rung, 16384 x 1024 / 4096 /
8192 / 16384, 4096 x 65536, 1024 x 262144): rms 2.38 / 3.48 / 3.85 / 3.82 / 3.46 / 3.00 against 2.08 / 3.31 / 3.87 /
3.02 / 3.11 / 2.37; layer norm 1.50 / 2.94 / 3.42 / 3.17 / 3.31 / 2.94 against 1.58 / 2.81 / 2.80 / 2.44 / 2.51 / 1.96
(and 1.86-1.88 / 3.18 at 1024 / 4096 with its narrow launch shape, runs 71-72); add_rms 2.65 / 3.56 / 3.87 / 4.06 /
3.51 / 2.93 against 2.49 / 3.49 / 3.84 / 3.17 / 3.15 / 2.56. At 8192 columns rms and add_rms tie the fused rung
(within 1%). fp32 takes another launch shape (16 columns a thread), never timed: not chosen."""


def bwd_cluster_leads(kind: str, d: int, dtype: torch.dtype | None) -> bool:
    """Whether the backward ``cluster`` rung leads for rows of ``d`` columns of ``dtype`` (see
    :data:`BWD_CLUSTER_FROM`; widths a multiple of 8, the kernel's 16-byte path)."""
    lo = BWD_CLUSTER_FROM.get(kind)
    return (lo is not None and dtype in (torch.float16, torch.bfloat16) and d % 8 == 0
            and lo <= d <= 262144)


FORWARD_KINDS = ("rms", "layer", "add_rms")
KINDS = FORWARD_KINDS + ("rms_bwd", "layer_bwd", "add_rms_bwd")
_DEFAULT_EPS = {"rms": 1e-6, "layer": 1e-5, "add_rms": 1e-6}


def base_kind(kind: str) -> str:
    return kind.removesuffix("_bwd")


def rows2d(t: torch.Tensor) -> torch.Tensor:
    """[R, D] view of ``t`` over its last dim with unit column stride (a packed copy when the layout needs one)."""
    t2 = t.reshape(-1, t.shape[-1])
    return t2 if t2.stride(-1) == 1 or t2.shape[-1] <= 1 else t2.contiguous()


# --- rung limits and the default choice -----------------------------------------------------------------------------
def fused_limit(size: tuple[int, ...], kwargs: dict) -> str | None:
    d = size[-1] if size else 1
    if d > FUSED_MAX_COLS:
        return f"fused: a row of {d} columns exceeds {FUSED_MAX_COLS} (the whole row must fit in registers)"
    return None


def fused_bwd_limit(size: tuple[int, ...], kwargs: dict) -> str | None:
    d = size[-1] if size else 1
    if d > FUSED_BWD_MAX_COLS:
        return f"fused: a row of {d} columns exceeds {FUSED_BWD_MAX_COLS} (x, dy, w and the dweight accumulator " \
               "must fit in registers)"
    return None


def chooser(rungs: tuple[Rung, ...], kind: str):
    """``choose(size, kwargs, dtype)``: best-first rung names by row width (and dtype, for the cluster rung), as
    measured on the H200 (:data:`FUSED_PREFERRED_COLS`, :func:`cluster_leads`); only the rungs the family has (the
    cluster rung, needing Hopper, is skipped elsewhere by ``variant=None``)."""
    names = {r.name for r in rungs}
    fused_max = FUSED_PREFERRED_COLS.get(kind, 8192)

    def choose(size: tuple[int, ...], kwargs: dict, dtype: torch.dtype | None = None) -> list[str]:
        d = size[-1] if size else 1
        if d <= fused_max:
            order = ["fused", "split", "chunked"]
        else:
            order = ["split", "fused", "chunked"]
        if (cluster_leads(kind, d, dtype) or bwd_cluster_leads(kind, d, dtype)) and kwargs.get("aligned", True):
            order = ["cluster", *order]
        return [n for n in order + ["naive"] if n in names]

    return choose


def _bwd_cluster_limit(size: tuple[int, ...], kwargs: dict) -> str | None:
    from kernelwright.ops.rms_norm_bwd import cuda

    return cuda.limit(size, kwargs)


def bwd_cluster_rung(kind: str, measured: str) -> Rung:
    """The backward families' CUDA ``cluster`` rung (one kernel for the three: ``rms_norm_bwd/cuda.py``), its journal
    line ending in the family's ``measured`` figures."""
    name = {"rms_bwd": "rms_norm_bwd", "layer_bwd": "layer_norm_bwd", "add_rms_bwd": "add_rms_norm_bwd"}[kind]
    module = "kernelwright.ops.rms_norm_bwd.cuda"
    return Rung(
        "cluster", "cuda", f"{module}:{name}_cluster",
        "CUDA C for Hopper: a persistent grid of thread-block clusters stepping over rows; each step's x and dy "
        "staged one step ahead in shared memory by cp.async, the row's sums traded through distributed shared "
        "memory at one cluster barrier (wide rows: 4 CTAs at 65536 bf16 columns, 16 at 262144) or by shuffles "
        "(narrow rows, several a CTA), w in shared memory, dweight partials in fp32 registers, one partial row a "
        "cluster. Unaligned rows and fp32 past 131072 columns run the fused (<= 16384 columns) or split kernel. "
        "Predicted: >= 3.0 TB/s at every width from 4096 (split's global-memory exchange and one-row prefetch "
        "held it to 2.3-3.1 at 65536 and 1.9-2.6 at 262144). H200 run 69 (bf16 TB/s at 1024 / 4096 / 8192 / "
        f"16384 / 65536 / 262144 columns): {measured}; w first read from L1 each pass (run 67) was 14-39% slower "
        "at the wide rows.",
        needs="hopper", limit=_bwd_cluster_limit, artifacts=f"{module}:{kind.removesuffix('_bwd')}_inspect_artifacts",
    )


# --- inputs -------------------------------------------------------------------------------------------------------
def _stats64(x: torch.Tensor, eps: float, center: bool) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.double()
    mean = x.mean(-1) if center else torch.zeros(x.shape[:-1], dtype=torch.float64, device=x.device)
    var = (x - mean[..., None]).pow(2).mean(-1) if center else x.pow(2).mean(-1)
    return mean, torch.rsqrt(var + eps)


def make_case_for(kind: str):
    """``make_case`` of a family of ``kind``: activations (x, residual, dy, dh) from the trial's distribution and
    layout; weight and bias ~N(0, 1) in the same layout (a scale of one, as trained weights have, so that the
    distribution tests the row statistics rather than fp16's range); saved statistics contiguous fp32, computed
    from x as the forward would."""
    base = base_kind(kind)
    backward = kind.endswith("_bwd")

    def make_case(size, dtype, device, gen, dist="normal", layout="contiguous", eps=None, offset=False) -> Case:
        eps = _DEFAULT_EPS[base] if eps is None else eps
        size = tuple(size)
        d = size[-1]

        def act():
            return with_layout(random_values(size, dtype, device, gen, dist), layout)

        def vec():
            return with_layout(random_values((d,), dtype, device, gen, "normal"), layout)

        x, w = act(), vec()
        kwargs = {"eps": eps} if base == "layer" else {"eps": eps, "offset": offset}
        if not backward:
            args = {"rms": lambda: (x, w), "layer": lambda: (x, w, vec()), "add_rms": lambda: (x, act(), w)}[base]()
        else:
            mean, rstd = _stats64(x, eps, base == "layer")
            mean, rstd = mean.float().contiguous(), rstd.float().contiguous()
            if base == "rms":
                args = (x, w, act(), rstd)
            elif base == "layer":
                args = (x, w, act(), mean, rstd)
            else:  # (h, weight, dy, dh, rstd): h drawn directly, it is any sum x + residual
                args = (x, w, act(), act(), rstd)
        label = format_dims(size)
        if eps != _DEFAULT_EPS[base]:
            label += f" eps={eps:g}"
        if offset:
            label += " offset"
        return Case(size, args, kwargs, label)

    return make_case


def out_shape_for(kind: str):
    def out_shape(case: Case):
        shape = tuple(case.args[0].shape)
        d = (shape[-1],)
        return {"rms": shape, "layer": shape, "add_rms": [shape, shape], "rms_bwd": [shape, d],
                "layer_bwd": [shape, d, d], "add_rms_bwd": [shape, d]}[kind]

    return out_shape


def cost_for(kind: str):
    """``cost(size, dtype)``: FLOPs and minimum bytes: every activation read once and every output written once,
    plus the weight (and bias) vectors and the fp32 row statistics the backward reads."""
    # (activation tensors moved, vectors moved, fp32 values per row, FLOPs per element)
    plan = {"rms": (2, 1, 0, 4), "layer": (2, 2, 0, 7), "add_rms": (4, 1, 0, 5),
            "rms_bwd": (3, 2, 1, 8), "layer_bwd": (3, 3, 2, 11), "add_rms_bwd": (4, 2, 1, 9)}[kind]

    def cost(size, dtype) -> tuple[float, float]:
        n = math.prod(size)
        d = size[-1] if size else 1
        rows = n // d if d else 0
        acts, vecs, stats, flops = plan
        es = torch.finfo(dtype).bits // 8
        return float(flops * n), float(es * (acts * n + vecs * d) + 4 * stats * rows)

    return cost


def fuzz_for(kind: str):
    """Shapes for ``kw check`` and tests/test_ladders.py, small for the interpreter (~2 ms a program instance)."""
    base = base_kind(kind)
    variant = {"offset": True} if base != "layer" else {"eps": 1e-2}
    # One column: rms gives sign(x) * w, layer norm gives the bias. Its RMS backward is dx = rstd * w * dy *
    # (1 - xhat^2) with xhat^2 = x^2 / (x^2 + eps): at eps = 1e-6 the bracket is ~eps / x^2, below the rounding
    # of the fp32 rstd the forward saves, so no fp32 kernel (torch's included) meets a relative bound there. A
    # large eps keeps the width-1 path tested and well conditioned.
    one_col = {"eps": 1.0} if kind.endswith("_bwd") else {}

    def fuzz() -> list[tuple[tuple[int, ...], dict]]:
        return [
            ((0, 8), {}),            # no rows: nothing to write (dweight: zeros)
            ((1, 1), one_col),       # one column (see above)
            ((3, 127), {}),          # prime width, under one block
            ((5, 1000), variant),    # non-power-of-two width; the Gemma offset (rms) or a large eps (layer)
            ((2, 8193), {}),         # one past a chunk (8192): a one-column tail chunk
            ((2, 3, 33), {}),        # 3-D: leading dims flattened into rows
            ((19, 24), {}),          # narrow rows: a fused tile of 16 rows and a ragged one
            ((6, 250), {}),          # a few rows of a non-power-of-two width (fused backward: 8 rows a tile)
            ((2, 2, 80), {"eps": 0.5}),  # large eps against the row's variance
            ((1, 262144), {}),       # the widest row the issue asks for (fused refuses it)
        ]

    return fuzz


def sweep(device: str) -> list[tuple[int, ...]]:
    if device == "cuda":
        return [(16384, 1024), (16384, 4096), (16384, 8192), (16384, 16384), (4096, 65536), (1024, 262144)]
    return [(64, 1024), (16, 8192), (2, 65536)]


FORWARD_TOLERANCES = {
    # computed in fp32, rounded once: ~2 ulps of the output dtype; layer norm's y = xhat * w + b may cancel, so
    # its error scale adds acc * (|xhat * w| + |b|) (fp32 rounding of the terms), |xhat| counting |mean| * rstd
    # too: the mean's own fp32 rounding (a row of 1000 + N(0, 1): 3e-5 in fp32 whatever the kernel, run 60)
    torch.float32: Tolerance(atol=1e-6, rtol=2e-5, norm=1e-5, acc=4e-6),
    torch.float16: Tolerance(atol=1e-6, rtol=2**-10, norm=2**-11, acc=4e-6),
    torch.bfloat16: Tolerance(atol=1e-6, rtol=2**-7, norm=2**-8, acc=4e-6),
}
BACKWARD_TOLERANCES = {
    # dx = rstd * (w * dy - xhat * c1 - c2) cancels, and dweight sums over rows: every output carries an error
    # scale (the sum of the magnitudes of its terms), times acc: fp32 accumulation over up to ~1e3 terms
    # (2^-24 each, growing like the square root of their count)
    torch.float32: Tolerance(atol=1e-6, rtol=2e-5, norm=1e-5, acc=1e-5),
    torch.float16: Tolerance(atol=1e-6, rtol=2**-10, norm=2**-11, acc=1e-5),
    torch.bfloat16: Tolerance(atol=1e-6, rtol=2**-7, norm=2**-8, acc=1e-5),
}


def error_scale_for(kind: str):
    """``error_scale(*float64 inputs, **kwargs)``: per output, the magnitude its accumulated rounding errors scale
    with; ``None`` where errors scale with the result (RMS forward: products only)."""
    if kind in ("rms", "add_rms"):
        return None
    base = base_kind(kind)

    def scale(*args, eps=1e-6, offset=False):
        x, w = args[0], args[1]
        if kind == "layer":  # x - mean: the fp32 mean is rounded relative to |mean|, not to |x - mean|
            mean, rstd = _stats64(x, eps, True)
            xhat = ((x - mean[..., None]).abs() + mean[..., None].abs()) * rstd[..., None]
            return (xhat * w).abs() + args[2].abs()
        dy = args[2]
        mean, rstd = _stats64(x, eps, base == "layer")
        xhat = (x - mean[..., None]) * rstd[..., None]
        wdy = dy * ((1 + w) if offset else w)
        d = x.shape[-1]
        rows = (-1, d)
        c1 = (xhat * wdy).abs().mean(-1, keepdim=True)
        dx = rstd[..., None] * (wdy.abs() + xhat.abs() * c1 + wdy.abs().mean(-1, keepdim=True))
        dw = (dy * xhat).abs().reshape(rows).sum(0)
        if base == "layer":
            return dx, dw, dy.abs().reshape(rows).sum(0)
        if base == "add_rms":
            dx = dx + args[3].abs()
        return dx, dw

    return scale


# --- peers ---------------------------------------------------------------------------------------------------------
def eager_rms_norm(x, weight, eps=1e-6, offset=False):
    return F.rms_norm(x, (x.shape[-1],), (1 + weight) if offset else weight, eps)


def eager_layer_norm(x, weight, bias, eps=1e-5):
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def eager_add_rms_norm(x, residual, weight, eps=1e-6, offset=False):
    h = x + residual
    return eager_rms_norm(h, weight, eps, offset), h


def grad_peer(forward, kind: str):
    """A backward family's peer from a differentiable forward: the gradients from a forward graph built once per
    input set and kept (``retain_graph``), so the timed call is the backward pass alone, as in training.

    The family's inputs are (primals..., output gradients..., saved statistics...); the statistics are ignored
    (the forward graph saved its own). Layer norm differentiates a zero bias too; add_rms_norm runs the forward
    on (h, 0, weight), whose backward is the one for (x, residual, weight).
    """
    cache: dict = {}

    def run(*args, eps=1e-6, offset=False):
        x, w = args[0], args[1]
        kw = {"eps": eps} if kind == "layer_bwd" else {"eps": eps, "offset": offset}
        key = (x.data_ptr(), w.data_ptr(), tuple(x.shape), x.dtype, tuple(sorted(kw.items())))
        if key not in cache:
            if cache and next(iter(cache))[2:] != key[2:]:
                cache.clear()  # graphs of one shape at a time (a benchmark's rotating input sets share it)
            leaves = [x.detach().requires_grad_(), w.detach().requires_grad_()]
            with torch.enable_grad():
                if kind == "layer_bwd":
                    leaves.append(torch.zeros_like(w, requires_grad=True))
                    outs = (forward(*leaves, **kw),)
                elif kind == "add_rms_bwd":
                    outs = forward(leaves[0], torch.zeros_like(x), leaves[1], **kw)
                else:
                    outs = (forward(*leaves, **kw),)
            cache[key] = (tuple(leaves), tuple(outs))
        leaves, outs = cache[key]
        grads = (args[2], args[3]) if kind == "add_rms_bwd" else (args[2],)
        return torch.autograd.grad(outs, leaves, grads, retain_graph=True)

    return run


def _liger(kind: str):
    """Liger-Kernel's autograd functions (casting_mode "gemma": everything in fp32, as ours; in_place=False:
    its default writes dx over dy, an input)."""
    base = base_kind(kind)
    if base == "rms":
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction

        def fwd(x, weight, eps=1e-6, offset=False):
            return LigerRMSNormFunction.apply(x, weight, eps, 1.0 if offset else 0.0, "gemma", False)
    elif base == "layer":
        from liger_kernel.ops.layer_norm import LigerLayerNormFunction

        def fwd(x, weight, bias, eps=1e-5):
            return LigerLayerNormFunction.apply(x, weight, bias, eps)
    else:
        from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction

        def fwd(x, residual, weight, eps=1e-6, offset=False):
            return LigerFusedAddRMSNormFunction.apply(x, residual, weight, eps, 1.0 if offset else 0.0, "gemma",
                                                      False)
    return grad_peer(fwd, kind) if kind.endswith("_bwd") else fwd


def peers_for(kind: str) -> tuple[Peer, ...]:
    eager = {"rms": eager_rms_norm, "layer": eager_layer_norm, "add_rms": eager_add_rms_norm}[base_kind(kind)]
    liger = _peers.optional_library("liger", "liger_kernel", lambda: _liger(kind))
    if not kind.endswith("_bwd"):
        return _peers.eager(eager), _peers.torch_compile(eager), liger
    compiled = _peers.torch_compile(eager)
    return (
        Peer("torch", lambda: grad_peer(eager, kind), "torch eager autograd (forward graph kept, backward timed)"),
        Peer("torch.compile", lambda: grad_peer(compiled.make(), kind),
             "the backward torch.compile (AOTAutograd + Inductor) generates for the eager forward"),
        liger,
    )


# --- the family ----------------------------------------------------------------------------------------------------
def norm_family(kind: str, name: str, summary: str, reference, rungs: tuple[Rung, ...]) -> Family:
    backward = kind.endswith("_bwd")
    return Family(
        name=name,
        summary=summary,
        reference=reference,
        rungs=rungs,
        peers=peers_for(kind),
        make_case=make_case_for(kind),
        out_shape=out_shape_for(kind),
        cost=cost_for(kind),
        tolerances=BACKWARD_TOLERANCES if backward else FORWARD_TOLERANCES,
        sweep=sweep,
        fuzz=fuzz_for(kind),
        parse_size=lambda s: parse_dims(s, what="sizes"),
        format_size=format_dims,
        flop_unit="vector",
        baseline="torch",
        choose=chooser(rungs, kind),
        scale_axis=("row width (columns)", lambda size: float(size[-1])),
        multi_output=kind not in ("rms", "layer"),
        error_scale=error_scale_for(kind),
    )


# --- argument checks for the public ops ----------------------------------------------------------------------------
def check_x(name: str, x) -> torch.Tensor:
    _validate.tensor(name, x)
    if x.dim() == 0:
        raise UsageError(f"{name}: expected a tensor with at least one dimension (the normalised one), got a "
                         "scalar (0-d) tensor")
    return x


def check_like(name: str, t, x: torch.Tensor, shape: tuple[int, ...], what: str) -> torch.Tensor:
    """``t`` a float tensor of ``shape`` with ``x``'s dtype and device."""
    _validate.tensor(name, t)
    if t.dtype != x.dtype:
        raise UsageError(f"{name}: expected dtype {str(x.dtype).removeprefix('torch.')} like x, got "
                         f"{str(t.dtype).removeprefix('torch.')}")
    if t.device != x.device:
        raise UsageError(f"{name}: expected device {x.device} like x, got {t.device}")
    if tuple(t.shape) != tuple(shape):
        raise UsageError(f"{name}: expected shape {tuple(shape)} ({what}), got {tuple(t.shape)}")
    return t


def check_eps(eps) -> float:
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not math.isfinite(eps) or eps < 0:
        raise UsageError(f"eps: expected a finite number >= 0, got {eps!r}")
    return float(eps)


def check_offset(offset) -> bool:
    if not isinstance(offset, bool):
        raise UsageError(f"offset: expected a bool (True: scale by 1 + weight, as Gemma), got {offset!r}")
    return offset


def check_variant(variant) -> str | None:
    if variant is not None and not isinstance(variant, str):
        raise UsageError(f"variant: expected a rung name (str) or None, got {type(variant).__name__}")
    return variant


def pick(family_name: str, variant: str | None, x: torch.Tensor, kwargs: dict):
    """The rung to run (``variant`` or the family's best for this device and width), checked it can take it. The
    choice also sees whether x's rows start on 16 bytes (``aligned``: the cluster rung's timed path needs it)."""
    from kernelwright.registry import get_family

    if variant is None:
        kwargs = {**kwargs, "aligned": rows_aligned(x)}
    return _validate.pick_rung(get_family(family_name), variant, x.device.type, tuple(x.shape), kwargs, x.dtype)


def rows_aligned(x: torch.Tensor) -> bool:
    """Whether the rows the kernels will read take 16-byte accesses (the cluster rungs' test,
    ``softmax.cuda.aligned``, on x's rows, or True where :func:`rows2d` will make a contiguous copy of x)."""
    from kernelwright.ops.softmax.cuda import aligned

    if x.dim() == 0 or x.stride(-1) != 1:
        return True
    try:
        x2 = x.view(-1, x.shape[-1])
    except RuntimeError:  # not viewable as rows: rows2d copies it
        return True
    return aligned(x2, x2)
