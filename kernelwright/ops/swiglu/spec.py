"""swiglu: the family's registration (rungs, inputs, cost, tolerances, sweep). The backward family
``swiglu_bwd`` shares its inputs, shapes and tolerances from here."""

from __future__ import annotations

import math

import torch

from kernelwright.harness.inputs import random_values, with_layout
from kernelwright.harness.sizes import format_dims, parse_dims
from kernelwright.ops import _peers
from kernelwright.ops.swiglu.reference import swiglu
from kernelwright.registry import Case, Family, Rung, Tolerance

_T = "kernelwright.ops.swiglu.triton"

RUNGS = (
    Rung(
        "naive", "triton", f"{_T}:swiglu_naive",
        "Two kernels, as eager F.silu(gate) * up runs: silu(gate) into an fp32 temporary, then the product. "
        "Traffic in bf16: 2 + 4 + 4 + 2 + 2 = 14 bytes an element against the minimum 6. Predicted: ~40% of the "
        "vectorized rung (the extra bytes at the same bandwidth).",
    ),
    Rung(
        "fused", "triton", f"{_T}:swiglu_fused",
        "One kernel: read gate and up once, write y once, fp32 in registers; 2048 elements a program over the "
        "flattened tensors (non-contiguous inputs are packed first). Predicted: >= 85% of the copy ceiling on "
        "contiguous inputs, 2.2x naive; a strided view pays a packing copy.",
    ),
    Rung(
        "vectorized", "triton", f"{_T}:swiglu_vectorized",
        "One kernel over [R, D] tiles addressed through row and column strides: the gate and up halves of a "
        "[T, 2I] projection are read in place (no packing), a unit column stride becomes 16-byte accesses, and "
        "each program moves 4 KB of each tensor whatever the dtype (one 16-byte access per thread per tensor; "
        "56 registers a thread on sm_90, where 16 KB tiles took 221 and fit one program an SM). Predicted: "
        ">= 90% of the copy ceiling (3.8 TB/s) at every width; equal to fused on contiguous inputs, ~2x fused on "
        "strided halves (no packing copies).",
    ),
)


def make_case(size, dtype, device, gen, dist="normal", layout="contiguous") -> Case:
    gate = random_values(size, dtype, device, gen, dist)
    # up stays O(1) under "large" so that the check is about silu at |gate| ~ 1e3 (sigmoid saturated at 0 and 1),
    # not about agreeing that 1e3 * 1e3 overflows fp16
    up = random_values(size, dtype, device, gen, "normal" if dist == "large" else dist)
    return Case(tuple(size), (with_layout(gate, layout), with_layout(up, layout)), {}, format_dims(size))


def cost(size, dtype) -> tuple[float, float]:
    n = math.prod(size)
    return 5.0 * n, float(3 * n * torch.finfo(dtype).bits // 8)  # read gate and up, write y


def fuzz() -> list[tuple[tuple[int, ...], dict]]:
    return [
        ((0, 5), {}),            # empty: returns empty
        ((1, 1), {}),            # one element
        ((3, 127), {}),          # prime width, under one tile
        ((5, 131), {}),          # prime width, just over a power of two
        ((2, 8193), {}),         # one past a multiple of every block and tile: a one-column tail
        ((17, 1000), {}),        # several rows a tile, the last tile of rows short
        ((4, 3, 33), {}),        # 3-D: leading dims merge (or are packed when transposed)
        ((2, 3, 5, 64), {}),     # 4-D
        ((1, 262144), {}),       # the widest row
    ]


def sweep(device: str) -> list[tuple[int, ...]]:
    if device == "cuda":
        return [(16384, 1024), (16384, 4096), (16384, 8192), (16384, 14336), (16384, 16384), (4096, 65536),
                (1024, 262144)]
    return [(64, 1024), (16, 8192), (4, 65536)]


TOLERANCES = {
    # computed in fp32, rounded once: 2 ulps of the output dtype; atol for results that underflow
    torch.float32: Tolerance(atol=1e-7, rtol=2e-5, norm=1e-5),
    torch.float16: Tolerance(atol=1e-6, rtol=2**-10, norm=2**-11),
    torch.bfloat16: Tolerance(atol=1e-6, rtol=2**-7, norm=2**-8),
}


def _torch_swiglu(gate, up):
    return torch.nn.functional.silu(gate) * up


def _liger_swiglu():
    from liger_kernel.ops.swiglu import LigerSiLUMulFunction

    return lambda gate, up: LigerSiLUMulFunction.apply(gate, up)


FAMILY = Family(
    name="swiglu",
    summary="y = silu(gate) * up (the SwiGLU MLP's activation), forward: elementwise, memory-bound",
    reference=swiglu,
    rungs=RUNGS,
    peers=(
        _peers.eager(_torch_swiglu),
        _peers.torch_compile(_torch_swiglu),
        _peers.optional_library("liger", "liger_kernel", _liger_swiglu),
    ),
    make_case=make_case,
    out_shape=lambda case: tuple(case.args[0].shape),
    cost=cost,
    tolerances=TOLERANCES,
    sweep=sweep,
    fuzz=fuzz,
    parse_size=lambda s: parse_dims(s, what="sizes"),
    format_size=format_dims,
    flop_unit="vector",
    baseline="torch",
    scale_axis=("row width (columns)", lambda size: float(size[-1])),
)
