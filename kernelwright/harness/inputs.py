"""Inputs for checks and benchmarks: value distributions, memory layouts, poisoned outputs.

Every trial draws fresh values (never zeros, never the same seed twice unless asked), from distributions that
catch different bugs: ``normal`` (typical activations), ``uniform`` (bounded, dense), ``heavy`` (Student-t with
2 degrees of freedom: rare huge values stress max-subtraction and accumulation order) and ``large`` (magnitudes
around 1e3, near fp16's range after an add). Layouts make non-contiguous views of the same logical shape.
"""

from __future__ import annotations

import os

import torch

DISTRIBUTIONS = ("normal", "uniform", "heavy", "large")
LAYOUTS = ("contiguous", "strided", "transposed")
FLOAT_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
DTYPE_NAMES = {v: k for k, v in FLOAT_DTYPES.items()}


def parse_dtype(name: str) -> torch.dtype:
    from kernelwright.errors import UsageError

    key = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "half": "fp16", "float": "fp32"}.get(
        name, name
    )
    if key not in FLOAT_DTYPES:
        raise UsageError(f"dtype: expected one of {', '.join(FLOAT_DTYPES)}, got {name!r}")
    return FLOAT_DTYPES[key]


def dtype_name(dtype: torch.dtype) -> str:
    return DTYPE_NAMES.get(dtype, str(dtype).removeprefix("torch."))


def fresh_seed() -> int:
    return int.from_bytes(os.urandom(4), "little")


def generator(device: str | torch.device, seed: int | None = None) -> tuple[torch.Generator, int]:
    seed = fresh_seed() if seed is None else seed
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g, seed


def random_values(
    shape: tuple[int, ...], dtype: torch.dtype, device, gen: torch.Generator, dist: str = "normal"
) -> torch.Tensor:
    """A contiguous tensor of ``shape`` drawn from ``dist`` in float32, then rounded to ``dtype``."""
    kw = dict(device=device, generator=gen, dtype=torch.float32)
    if dist == "normal":
        v = torch.randn(shape, **kw)
    elif dist == "uniform":
        v = torch.rand(shape, **kw) * 2 - 1
    elif dist == "heavy":
        # Student-t(2) = N / sqrt(chi2_2 / 2), chi2_2 = -2 ln U; clipped to stay finite in fp16.
        u = torch.rand(shape, **kw).clamp_min_(1e-12)
        v = torch.randn(shape, **kw) / torch.sqrt(-torch.log(u))
        v.clamp_(-3e4, 3e4)
    elif dist == "large":
        v = torch.randn(shape, **kw) * 1e3
    else:
        from kernelwright.errors import UsageError

        raise UsageError(f"dist: expected one of {', '.join(DISTRIBUTIONS)}, got {dist!r}")
    return v.to(dtype)


def with_layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    """The same values as ``t`` in a non-contiguous view: ``strided`` (every other element of the last dim)
    or ``transposed`` (last two dims stored swapped). ``contiguous`` returns ``t``."""
    if layout == "contiguous" or t.dim() == 0:
        return t
    if layout == "strided":
        big = torch.empty((*t.shape[:-1], t.shape[-1] * 2), dtype=t.dtype, device=t.device)
        big.fill_(float("nan"))  # the skipped elements are poison: a kernel that reads them shows it
        view = big[..., ::2]
        view.copy_(t)
        return view
    if layout == "transposed":
        if t.dim() < 2:
            return with_layout(t, "strided")
        return t.mT.contiguous().mT
    raise ValueError(f"layout: expected one of {LAYOUTS}, got {layout!r}")


def poisoned_like(shape, dtype: torch.dtype, device) -> torch.Tensor:
    """An output buffer full of NaN, so that any element a kernel forgets to write fails the check."""
    out = torch.empty(shape, dtype=dtype, device=device)
    if out.is_floating_point():
        out.fill_(float("nan"))
    return out

