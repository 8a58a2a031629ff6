"""Elementwise activations in Triton: y = act(x) in fp32, rounded once to the output dtype.

The minimum traffic is read x, write y (2N elements); both rungs move exactly that and differ in how many bytes a
program has in flight:

* ``fused``: the tutorial kernel, 1024 elements a program over the flattened tensor, 4 warps (8 bf16 values, one
  16-byte access, a thread).
* ``wide``: 16 KB of x a program over 8 warps: four 16-byte accesses a thread, all issued before the first
  result is needed, so fewer, longer-lived programs keep more loads in flight per SM.

Non-contiguous inputs are packed first (one copy); both rungs run on the flat contiguous tensor.

Formulas (``kind``, a compile-time constant: each kind is its own kernel):
silu = x * sigmoid(x) and gelu_tanh = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3) (the identity
0.5 (1 + tanh(u)) = sigmoid(2u)), with sigmoid from e = exp(-|.|) (no overflow, full relative precision for
negative arguments); gelu = x Phi(x) with Phi(-|x|) = erfc(|x| / sqrt 2) / 2 (not 0.5 (1 + erf(x / sqrt 2)), which
loses every digit to cancellation below x ~ -5 in fp32: torch's own fp32 gelu does); relu keeps NaN
(x < 0 ? 0 : x).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelwright.ops._triton_helpers import to_output
from kernelwright.ops.swiglu.triton import flat, flat_out, land, sigmoid

KIND_CODES = {"silu": 0, "gelu": 1, "gelu_tanh": 2, "relu": 3}
FUSED_BLOCK, FUSED_WARPS = 1024, 4
WIDE_BYTES, WIDE_WARPS = 16384, 8


@triton.jit
def erfc_pos(z):
    """erfc(z) for z >= 0 to a relative error of ~1.2e-7 in exact arithmetic (the Chebyshev-fitted formula of
    Numerical Recipes, 2nd ed., section 6.2, ``erfcc``); a few fp32 ulps more here. No cancellation: erfc(5) =
    1.5e-12 keeps its digits where 1 - erf(5) in fp32 is 0."""
    t = 1.0 / (1.0 + 0.5 * z)
    p = -0.82215223 + t * 0.17087277
    p = 1.48851587 + t * p
    p = -1.13520398 + t * p
    p = 0.27886807 + t * p
    p = -0.18628806 + t * p
    p = 0.09678418 + t * p
    p = 0.37409196 + t * p
    p = 1.00002368 + t * p
    p = -1.26551223 + t * p
    return t * tl.exp(p - z * z)


@triton.jit
def apply(x, KIND: tl.constexpr):
    """act(x) for fp32 ``x``: the formulas of the module docstring."""
    if KIND == 0:
        y = x * sigmoid(x)
    elif KIND == 1:
        c = 0.5 * erfc_pos(tl.abs(x) * 0.7071067811865476)  # Phi(-|x|), accurate however small
        y = x * tl.where(x < 0.0, c, 1.0 - c)
    elif KIND == 2:
        u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        y = x * sigmoid(2.0 * u)
    else:
        y = tl.where(x < 0.0, 0.0, x)
    return y


@triton.jit
def _activation_kernel(x_ptr, y_ptr, n, KIND: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)  # read N
    tl.store(y_ptr + offs, to_output(apply(x, KIND), y_ptr.dtype.element_ty), mask=mask)  # write N


def _launch(x: torch.Tensor, kind: str, out: torch.Tensor, block: int, warps: int) -> torch.Tensor:
    if kind not in KIND_CODES:
        raise ValueError(f"kind: expected one of {', '.join(KIND_CODES)}, got {kind!r}")
    if out.numel() == 0:
        return out
    xf, y = flat(x), flat_out(out)
    n = xf.numel()
    _activation_kernel[(triton.cdiv(n, block),)](xf, y, n, KIND=KIND_CODES[kind], BLOCK=block, num_warps=warps)
    land(y, out)
    return out


def activation_fused(x: torch.Tensor, kind: str = "silu", *, out: torch.Tensor) -> torch.Tensor:
    return _launch(x, kind, out, FUSED_BLOCK, FUSED_WARPS)


def activation_wide(x: torch.Tensor, kind: str = "silu", *, out: torch.Tensor) -> torch.Tensor:
    return _launch(x, kind, out, WIDE_BYTES // x.element_size(), WIDE_WARPS)
