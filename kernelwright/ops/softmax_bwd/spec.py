"""softmax_bwd: the backward family of softmax (inputs y = softmax(x), dy; output dx), over any dim."""

from __future__ import annotations

import math

import torch

from kernelwright.harness.inputs import random_values, with_layout
from kernelwright.harness.sizes import format_dims, parse_dims
from kernelwright.ops import _peers
from kernelwright.ops.softmax.spec import FUSED_MAX_COLS
from kernelwright.ops.softmax_bwd.reference import error_scale, softmax_bwd
from kernelwright.registry import Case, Family, Rung, Tolerance

_T = "kernelwright.ops.softmax_bwd.triton"


def fused_limit(size: tuple[int, ...], kwargs: dict) -> str | None:
    d = size[kwargs.get("dim", -1)] if size else 1
    if d > FUSED_MAX_COLS:
        return f"fused: a row of {d} columns exceeds {FUSED_MAX_COLS} (y and dy of the whole row must fit in registers)"
    return None


RUNGS = (
    Rung(
        "naive", "triton", f"{_T}:softmax_bwd_naive",
        "Three kernels, as eager autograd code would run them: y * dy into an fp32 temporary, its row sums, "
        "then y * (dy - sum). Traffic in bf16: 4 + 4 + 4 + 4 + 2 = 18 bytes an element against the minimum 6. "
        "Predicted: ~30% of fused.",
    ),
    Rung(
        "fused", "triton", f"{_T}:softmax_bwd_fused",
        "One program per row holds y and dy in registers: the dot product and dx without leaving them; one read "
        f"of each, one write. Rows up to {FUSED_MAX_COLS} columns. Predicted: >= 85% of the copy ceiling "
        "(>= 3.6 TB/s) from 1k to 32k columns, as the forward's fused rung.",
        limit=fused_limit,
    ),
    Rung(
        "twopass", "triton", f"{_T}:softmax_bwd_twopass",
        "Any width: one program per row streams y and dy twice in 8192-column chunks (the dot product, then dx). "
        "Traffic: 2 reads of y and dy, 1 write; the re-read hits L2 only while the rows in flight fit (a 256k bf16 "
        "row pair is 1 MB). Predicted: ~60% of the copy ceiling at 64k-256k columns (the forward's online rung "
        "reached 57-61%).",
    ),
    Rung(
        "split", "triton", f"{_T}:softmax_bwd_split",
        "Any width, one read: a row is split over cooperating programs (8192 columns of y and dy each, in "
        "registers); each publishes its partial dot product through one relaxed 64-bit atomic, waits for its "
        "partners and writes its chunk of dx; the next row's chunk is prefetched during the wait; the persistent "
        "grid is sized by the occupancy calculation of the forward's split rung. Predicted: >= 3.0 TB/s at 64k "
        "and 256k columns (the forward's split reached 3.4-3.6).",
    ),
)


def make_case(size, dtype, device, gen, dist="normal", layout="contiguous", dim=-1) -> Case:
    # y is a real softmax output (rows sum to 1, as the backward receives it) of normal logits; dy from the
    # distribution. Not of heavy-tailed logits: when every row of a tensor is nearly one-hot, dy_j - sum(dy * y)
    # cancels in every row, dx is all rounding error of the fp32 sum (torch's own fp32 backward is off by 2e-4 in
    # relative norm there), and no fp32 kernel can meet the harness's relative-norm bound, which has no error scale
    x = random_values(size, torch.float32, device, gen, "normal")
    y = torch.softmax(x, dim).to(dtype) if x.numel() else x.to(dtype)
    dy = random_values(size, dtype, device, gen, dist)
    label = format_dims(size) + ("" if dim in (-1, len(size) - 1) else f" dim={dim}")
    return Case(tuple(size), (with_layout(y, layout), with_layout(dy, layout)), {"dim": dim}, label)


def cost(size, dtype) -> tuple[float, float]:
    n = math.prod(size)
    # multiply, add, subtract, multiply: 4 operations an element; read y and dy, write dx
    return 4.0 * n, float(3 * n * torch.finfo(dtype).bits // 8)


def fuzz() -> list[tuple[tuple[int, ...], dict]]:
    return [
        ((0, 5), {}),                # empty
        ((1, 1), {}),                # one element: y = 1, dx = 0
        ((3, 127), {}),              # prime width
        ((5, 131), {}),              # just over a power of two
        ((2, 8193), {}),             # one past a twopass chunk
        ((17, 1000), {}),            # odd rows, non-power-of-two width
        ((33, 7), {"dim": 0}),       # over the first dim: strided rows
        ((2, 5, 3), {"dim": 1}),     # 3-D, middle dim
        ((2, 3, 5, 64), {}),         # 4-D
        ((1, 262144), {}),           # the widest row (past the fused limit: the wide rungs only)
    ]


def sweep(device: str) -> list[tuple[int, ...]]:
    if device == "cuda":
        return [(16384, 1024), (32768, 4096), (16384, 8192), (16384, 16384), (4096, 65536), (1024, 262144)]
    return [(64, 1024), (16, 8192), (4, 65536)]


def _torch_softmax_bwd(y, dy, dim=-1):
    return torch.ops.aten._softmax_backward_data(dy, y, dim, y.dtype)


def choose(size, kwargs, dtype=None) -> list[str]:
    wide = ["split", "twopass", "naive"]
    return wide if fused_limit(size, kwargs) else ["fused", *wide]


FAMILY = Family(
    name="softmax_bwd",
    summary="softmax backward: dx = y * (dy - sum(dy * y)) over any dim, from the forward's output",
    reference=softmax_bwd,
    rungs=RUNGS,
    peers=(_peers.eager(_torch_softmax_bwd), _peers.torch_compile(_torch_softmax_bwd)),
    make_case=make_case,
    out_shape=lambda case: tuple(case.args[0].shape),
    cost=cost,
    tolerances={
        # fp32 math, one rounding: 2 ulps of the dtype; acc: the rounding of dy - sum(dy * y) where it cancels,
        # on the scale of error_scale, allowing for a sum over up to 256k terms
        torch.float32: Tolerance(atol=1e-7, rtol=2e-5, norm=1e-5, acc=2**-17),
        torch.float16: Tolerance(atol=1e-6, rtol=2**-10, norm=2**-11, acc=2**-17),
        torch.bfloat16: Tolerance(atol=1e-6, rtol=2**-7, norm=2**-8, acc=2**-17),
    },
    sweep=sweep,
    fuzz=fuzz,
    parse_size=lambda s: parse_dims(s, what="sizes"),
    format_size=format_dims,
    flop_unit="vector",
    baseline="torch",
    choose=choose,
    scale_axis=("row width (columns)", lambda size: float(size[-1])),
    error_scale=error_scale,
)
