"""swiglu_bwd: the backward family of swiglu (inputs gate, up, dy -> outputs dgate, dup)."""

from __future__ import annotations

import dataclasses
import math

import torch

from kernelwright.harness.inputs import random_values, with_layout
from kernelwright.harness.sizes import format_dims, parse_dims
from kernelwright.ops import _peers
from kernelwright.ops.swiglu import spec as fwd
from kernelwright.ops.swiglu_bwd.reference import error_scale, swiglu_bwd
from kernelwright.registry import Case, Family, Rung

_T = "kernelwright.ops.swiglu_bwd.triton"

RUNGS = (
    Rung(
        "naive", "triton", f"{_T}:swiglu_bwd_naive",
        "Four kernels, as eager autograd runs the backward of F.silu(gate) * up: silu(gate) to fp32 (the "
        "forward's saved output), dup = dy * silu, dy * up to fp32, dgate = that * silu'(gate). Traffic in bf16: "
        "34 bytes an element against the minimum 10. Predicted: ~30% of the vectorized rung.",
    ),
    Rung(
        "fused", "triton", f"{_T}:swiglu_bwd_fused",
        "One kernel: read gate, up, dy once, recompute sigmoid(gate) in registers, write dgate and dup once; "
        "flat, 2048 elements a program. Predicted: >= 80% of the copy ceiling, 3x naive.",
    ),
    Rung(
        "vectorized", "triton", f"{_T}:swiglu_bwd_vectorized",
        "The fused math over strided [R, D] tiles, 4 KB of each of the five tensors a program; the outputs may "
        "be strided views too, so the SiluAndMul backward writes dgate and dup straight into the two halves of "
        "one [..., 2I] gradient (no torch.cat). Predicted: >= 85% of the copy ceiling (>= 3.6 TB/s) on "
        "contiguous tensors.",
    ),
)


def make_case(size, dtype, device, gen, dist="normal", layout="contiguous") -> Case:
    gate = random_values(size, dtype, device, gen, dist)
    # as in the forward: up and dy stay O(1) under "large", so dgate does not just overflow fp16
    other = "normal" if dist == "large" else dist
    up = random_values(size, dtype, device, gen, other)
    dy = random_values(size, dtype, device, gen, other)
    args = tuple(with_layout(t, layout) for t in (gate, up, dy))
    return Case(tuple(size), args, {}, format_dims(size))


def cost(size, dtype) -> tuple[float, float]:
    n = math.prod(size)
    return 10.0 * n, float(5 * n * torch.finfo(dtype).bits // 8)  # read gate, up, dy; write dgate, dup


def _torch_swiglu_bwd(gate, up, dy):
    # what eager autograd runs for F.silu(gate) * up (silu recomputed: the forward's output is not an input here)
    return torch.ops.aten.silu_backward(dy * up, gate), dy * torch.nn.functional.silu(gate)


def _liger_swiglu_bwd():
    from liger_kernel.ops.swiglu import swiglu_backward

    # Liger writes the gradients over its gate and up inputs; timed as it runs in training
    return lambda gate, up, dy: swiglu_backward(gate, up, dy)


TOLERANCES = {
    # acc: fp32 rounding of dgate's terms, on the scale of error_scale (cancellation near gate = -1.278)
    dtype: dataclasses.replace(tol, acc=2**-20) for dtype, tol in fwd.TOLERANCES.items()
}

FAMILY = Family(
    name="swiglu_bwd",
    summary="swiglu backward: (gate, up, dy) -> (dgate, dup), sigmoid recomputed; elementwise, memory-bound",
    reference=swiglu_bwd,
    rungs=RUNGS,
    peers=(
        _peers.eager(_torch_swiglu_bwd),
        _peers.torch_compile(_torch_swiglu_bwd),
        _peers.optional_library("liger", "liger_kernel", _liger_swiglu_bwd),
    ),
    make_case=make_case,
    out_shape=lambda case: [tuple(case.args[0].shape)] * 2,
    cost=cost,
    tolerances=TOLERANCES,
    sweep=fwd.sweep,
    fuzz=fwd.fuzz,
    parse_size=lambda s: parse_dims(s, what="sizes"),
    format_size=format_dims,
    flop_unit="vector",
    baseline="torch",
    scale_axis=("row width (columns)", lambda size: float(size[-1])),
    multi_output=True,
    error_scale=error_scale,
)
