"""Public op: ``kernelwright.ops.vector_add``."""

from __future__ import annotations

import torch

from kernelwright.ops import _validate


def vector_add(x: torch.Tensor, y: torch.Tensor, *, variant: str | None = None,
               out: torch.Tensor | None = None) -> torch.Tensor:
    """Elementwise sum ``x + y``.

    Parameters
    ----------
    x, y : torch.Tensor
        Same shape, same device (CPU or CUDA), same dtype (float32, float16 or bfloat16). Any layout;
        non-contiguous inputs are packed first.
    variant : str, optional
        A rung of the ``vector_add`` family (``"torch"``, ``"triton"``). ``None`` takes the best rung that runs
        on the inputs' device.
    out : torch.Tensor, optional
        Contiguous buffer of ``x``'s shape and dtype to write into.

    Returns
    -------
    torch.Tensor
        ``x + y`` with ``x``'s shape and dtype (``out`` if given).
    """
    from kernelwright.registry import get_family

    _validate.tensor("x", x)
    _validate.tensor("y", y)
    _validate.same(("x", "y"), x, y)
    out = _validate.out_buffer(out, x.shape, x.dtype, x.device)
    if x.numel() == 0:
        return out
    rung = _validate.pick_rung(get_family("vector_add"), variant, x.device.type, tuple(x.shape), {})
    return rung.load()(x, y, out=out)
