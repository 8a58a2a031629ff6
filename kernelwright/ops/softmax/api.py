"""Public op: ``kernelwright.ops.softmax``."""

from __future__ import annotations

import torch

from kernelwright.errors import UsageError
from kernelwright.ops import _validate


def _check(x, dim) -> None:
    _validate.tensor("x", x)
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise UsageError(f"dim: expected an int, got {type(dim).__name__}")
    if x.dim() == 0:
        raise UsageError("x: expected a tensor with at least one dimension, got a scalar (0-d) tensor")
    if not -x.dim() <= dim < x.dim():
        raise UsageError(f"dim: expected a value in [{-x.dim()}, {x.dim() - 1}] for a {x.dim()}-d tensor, got {dim}")


def softmax(x: torch.Tensor, dim: int = -1, *, variant: str | None = None,
            out: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax of ``x`` along ``dim``: ``exp(x - max) / sum(exp(x - max))``.

    Parameters
    ----------
    x : torch.Tensor
        Any shape with at least one dimension, CPU or CUDA, float32, float16 or bfloat16, any layout.
        Differentiable: the backward runs the ``softmax_bwd`` family on the saved output.
    dim : int
        The dimension to normalize over; negative counts from the end.
    variant : str, optional
        A rung of the ``softmax`` family: ``"multipass"``, ``"fused"`` (rows up to 32768), ``"online"``,
        ``"split"``. ``None`` takes the best rung for the device and row width.
    out : torch.Tensor, optional
        Contiguous buffer of ``x``'s shape and dtype to write into; not when x requires grad.

    Returns
    -------
    torch.Tensor
        Same shape and dtype as ``x``; every slice along ``dim`` sums to 1 (up to rounding).
    """
    from kernelwright.registry import get_family

    _check(x, dim)
    if torch.compiler.is_compiling() or (torch.is_grad_enabled() and x.requires_grad):
        from kernelwright.ops.softmax_bwd.api import differentiable_softmax  # autograd: the softmax_bwd family

        return differentiable_softmax(x, dim, variant, out)
    out = _validate.out_buffer(out, x.shape, x.dtype, x.device)
    if x.numel() == 0:
        return out
    rung = _validate.pick_rung(get_family("softmax"), variant, x.device.type, tuple(x.shape), {"dim": dim}, x.dtype)
    return rung.load()(x, dim, out=out)


LOG_RUNGS = ("fused", "online", "split")
"""the softmax rungs that also compute log_softmax (multipass does not)"""


def log_softmax(x: torch.Tensor, dim: int = -1, *, variant: str | None = None,
                out: torch.Tensor | None = None) -> torch.Tensor:
    """``log(softmax(x))`` along ``dim``, computed stably as ``x - max - log(sum(exp(x - max)))``: the softmax
    family's ``fused``, ``online`` and ``split`` rungs with a different last line (same traffic: one read, one
    write). Forward only: a tensor that requires grad is refused (use ``torch.log_softmax`` there).

    >>> y = log_softmax(torch.randn(4, 1000), dim=-1)   # rows of y.exp() sum to 1

    Parameters and returns as :func:`softmax`; ``variant`` is one of ``"fused"`` (rows up to 32768),
    ``"online"``, ``"split"``, or ``None`` for the family's choice.
    """
    from kernelwright.registry import get_family

    _check(x, dim)
    if torch.is_grad_enabled() and x.requires_grad:
        raise UsageError("x: log_softmax has no backward here; x requires grad (use torch.log_softmax, or "
                         "torch.no_grad())")
    if variant is not None and variant not in LOG_RUNGS:
        raise UsageError(f"variant {variant!r}: log_softmax runs on {', '.join(LOG_RUNGS)}")
    out = _validate.out_buffer(out, x.shape, x.dtype, x.device)
    if x.numel() == 0:
        return out
    fam = get_family("softmax")
    size, kwargs = tuple(x.shape), {"dim": dim}
    if variant is None:
        variant = next((n for n in fam.preferred(size, kwargs, x.dtype) if n in LOG_RUNGS), "online")
    rung = _validate.pick_rung(fam, variant, x.device.type, size, kwargs, x.dtype)
    return rung.load()(x, dim, out=out, log=True)
