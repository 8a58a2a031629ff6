"""vector_add: the family's registration (rungs, inputs, cost, tolerances, sweep)."""

from __future__ import annotations

import math

import torch

from kernelwright.harness.inputs import random_values, with_layout
from kernelwright.harness.sizes import format_dims, parse_dims
from kernelwright.ops import _peers
from kernelwright.ops.vector_add.reference import vector_add
from kernelwright.registry import Case, Family, Rung, Tolerance

_PKG = "kernelwright.ops.vector_add"

RUNGS = (
    Rung(
        "torch", "torch", f"{_PKG}.eager:vector_add_torch",
        "The eager baseline: one torch.add kernel (vectorized, grid-stride). Predicted: near the copy ceiling "
        "at large sizes, launch-bound below ~1M elements.",
    ),
    Rung(
        "triton", "triton", f"{_PKG}.triton:vector_add_triton",
        "The first Triton kernel: each program adds a 4096-element block with masked loads, 8 warps. "
        "Predicted: the same bytes as torch.add, so the same time within a few percent (>= 90% of the copy "
        "ceiling at 2^28); no fusion is possible in a single add.",
    ),
)


def make_case(size, dtype, device, gen, dist="normal", layout="contiguous") -> Case:
    x = with_layout(random_values(size, dtype, device, gen, dist), layout)
    y = with_layout(random_values(size, dtype, device, gen, dist), layout)
    return Case(tuple(size), (x, y), {}, format_dims(size))


def cost(size, dtype) -> tuple[float, float]:
    n = math.prod(size)
    return float(n), float(3 * n * torch.finfo(dtype).bits // 8)  # read x and y, write z


def fuzz() -> list[tuple[tuple[int, ...], dict]]:
    # 0: empty; 1: a single element; 127/131/10007: primes, never a multiple of the 4096 block;
    # 4095/4096/4097: either side of one block; (3, 1000): 2-D, so layouts make real strided views.
    return [((n,), {}) for n in (0, 1, 127, 131, 4095, 4096, 4097, 10007)] + [((3, 1000), {})]


def sweep(device: str) -> list[tuple[int, ...]]:
    exps = (20, 22, 24, 26, 28) if device == "cuda" else (12, 16, 18)
    return [(2**e,) for e in exps]


FAMILY = Family(
    name="vector_add",
    summary="z = x + y, elementwise: the first kernel, and the cleanest test of memory bandwidth",
    reference=vector_add,
    rungs=RUNGS,
    peers=(_peers.torch_compile(vector_add),),
    make_case=make_case,
    out_shape=lambda case: tuple(case.args[0].shape),
    cost=cost,
    tolerances={
        # one rounding of an exact sum: half an ulp, so 2^-24 / 2^-11 / 2^-8 relative bounds it with room
        torch.float32: Tolerance(atol=1e-30, rtol=2**-23, norm=2**-24),
        torch.float16: Tolerance(atol=2**-24, rtol=2**-10, norm=2**-11),
        torch.bfloat16: Tolerance(atol=1e-30, rtol=2**-7, norm=2**-8),
    },
    sweep=sweep,
    fuzz=fuzz,
    parse_size=lambda s: parse_dims(s, what="sizes"),
    format_size=format_dims,
    flop_unit="vector",
    baseline="torch",
)
