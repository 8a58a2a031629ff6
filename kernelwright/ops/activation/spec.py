"""activation: the family's registration (rungs, inputs, cost, tolerances, sweep, peers)."""

from __future__ import annotations

import math

import torch

from kernelwright.harness.inputs import random_values, with_layout
from kernelwright.harness.sizes import format_dims, parse_dims
from kernelwright.ops import _peers
from kernelwright.ops.activation.reference import activation
from kernelwright.ops.matmul.api import apply_activation
from kernelwright.ops.swiglu.spec import TOLERANCES
from kernelwright.registry import Case, Family, Rung

_T = "kernelwright.ops.activation.triton"

RUNGS = (
    Rung(
        "fused", "triton", f"{_T}:activation_fused",
        "The tutorial kernel: 1024 elements a program, 4 warps, fp32 math, one rounding; one read of x, one write "
        "of y over the flattened tensor (non-contiguous inputs are packed first). Predicted: within a few percent "
        "of torch's own vectorized elementwise kernels (~3.4-3.5 TB/s measured for F.gelu on the H200 by kw "
        "optimize's run 18), torch.compile included.",
    ),
    Rung(
        "wide", "triton", f"{_T}:activation_wide",
        "16 KB of x a program over 8 warps: four 16-byte loads a thread issued together, so each program keeps "
        "4x the bytes of fused in flight and the grid has 4-8x fewer programs. Predicted: >= 90% of the copy "
        "ceiling (>= 3.8 TB/s) on large tensors, the level the swiglu rungs reach with the same access pattern "
        "(4.1-4.3 TB/s), >= 1.1x torch eager.",
    ),
)


def make_case(size, dtype, device, gen, dist="normal", layout="contiguous", kind="silu") -> Case:
    x = with_layout(random_values(size, dtype, device, gen, dist), layout)
    return Case(tuple(size), (x,), {"kind": kind}, format_dims(size) + ("" if kind == "silu" else f" {kind}"))


def cost(size, dtype) -> tuple[float, float]:
    n = math.prod(size)
    return 5.0 * n, float(2 * n * torch.finfo(dtype).bits // 8)  # read x, write y


def fuzz() -> list[tuple[tuple[int, ...], dict]]:
    return [
        ((0, 5), {}),                         # empty: returns empty
        ((1, 1), {"kind": "gelu"}),           # one element
        ((3, 127), {"kind": "gelu_tanh"}),    # prime count, under one block
        ((5, 131), {"kind": "relu"}),         # prime, past a power of two
        ((2, 8193), {}),                      # one past a multiple of every block: a one-element tail
        ((17, 1000), {"kind": "gelu"}),       # several blocks, the last short
        ((4, 3, 33), {"kind": "gelu_tanh"}),  # 3-D
        ((2, 3, 5, 64), {"kind": "relu"}),    # 4-D
        ((1, 65537), {"kind": "silu"}),       # several wide blocks and a tail
    ]


def sweep(device: str) -> list[tuple[int, ...]]:
    if device == "cuda":
        return [(16384, 1024), (16384, 4096), (8192, 14336), (8192, 16384), (1024, 262144)]
    return [(64, 1024), (16, 8192)]


def _torch_activation(x, kind="silu"):
    return apply_activation(x, kind)


FAMILY = Family(
    name="activation",
    summary="y = act(x) for silu, gelu (erf), gelu_tanh (GPT-2) and relu, forward: elementwise, memory-bound",
    reference=activation,
    rungs=RUNGS,
    peers=(_peers.eager(_torch_activation), _peers.torch_compile(_torch_activation)),
    make_case=make_case,
    out_shape=lambda case: tuple(case.args[0].shape),
    cost=cost,
    tolerances=TOLERANCES,  # fp32 math rounded once, as swiglu: 2 ulps of the output dtype
    sweep=sweep,
    fuzz=fuzz,
    parse_size=lambda s: parse_dims(s, what="sizes"),
    format_size=format_dims,
    flop_unit="vector",
    baseline="torch",
)
