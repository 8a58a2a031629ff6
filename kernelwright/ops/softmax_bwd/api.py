"""Autograd for ``kernelwright.ops.softmax``: the backward is the ``softmax_bwd`` family.

The softmax forward kernels are used as they are: :class:`SoftmaxFunction` (eager) and the ``kernelwright::softmax``
custom op (``torch.compile``) call the forward family's rung, save its output y and run dx = y * (dy - sum(dy * y))
in the backward. ``kernelwright.ops.softmax`` routes here when x requires grad or under ``torch.compile``.
"""

from __future__ import annotations

import torch

from kernelwright.errors import UsageError
from kernelwright.ops import _validate


def _family(name: str):
    from kernelwright.registry import get_family

    return get_family(name)


def softmax_forward(x: torch.Tensor, dim: int, variant: str | None = None) -> torch.Tensor:
    """softmax(x) along ``dim`` by a rung of the ``softmax`` family into a new contiguous tensor; no checks."""
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x.numel() == 0:
        return out
    rung = _validate.pick_rung(_family("softmax"), variant, x.device.type, tuple(x.shape), {"dim": dim}, x.dtype)
    return rung.load()(x, dim, out=out)


def softmax_backward(y: torch.Tensor, dy: torch.Tensor, dim: int, variant: str | None = None) -> torch.Tensor:
    """dx = y * (dy - sum(dy * y, dim)) by a rung of ``softmax_bwd`` (``None``: the best); no checks."""
    out = torch.empty(y.shape, dtype=y.dtype, device=y.device)
    if y.numel() == 0:
        return out
    rung = _validate.pick_rung(_family("softmax_bwd"), variant, y.device.type, tuple(y.shape), {"dim": dim},
                               y.dtype)
    return rung.load()(y, dy.to(y.dtype), dim, out=out)


class SoftmaxFunction(torch.autograd.Function):
    """softmax with its backward; saves the output (the backward needs y, not x)."""

    @staticmethod
    def forward(ctx, x, dim, variant=None):
        y = softmax_forward(x, dim, variant)
        ctx.save_for_backward(y)
        ctx.dim = dim
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        return softmax_backward(y, dy, ctx.dim), None, None


@torch.library.custom_op("kernelwright::softmax", mutates_args=())
def _softmax_op(x: torch.Tensor, dim: int, variant: str | None = None) -> torch.Tensor:
    return softmax_forward(x, dim, variant)


@_softmax_op.register_fake
def _(x, dim, variant=None):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("kernelwright::softmax_bwd", mutates_args=())
def _softmax_bwd_op(y: torch.Tensor, dy: torch.Tensor, dim: int) -> torch.Tensor:
    return softmax_backward(y, dy, dim)


@_softmax_bwd_op.register_fake
def _(y, dy, dim):
    return torch.empty_like(y, memory_format=torch.contiguous_format)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(output)
    ctx.dim = inputs[1]


def _op_backward(ctx, dy):
    (y,) = ctx.saved_tensors
    return torch.ops.kernelwright.softmax_bwd(y, dy, ctx.dim), None, None


_softmax_op.register_autograd(_op_backward, setup_context=_setup_context)


def differentiable_softmax(x: torch.Tensor, dim: int, variant: str | None, out: torch.Tensor | None) -> torch.Tensor:
    """The path of ``kernelwright.ops.softmax`` (inputs already checked) when x requires grad or under
    ``torch.compile``: the custom op while compiling, else :class:`SoftmaxFunction`."""
    if out is not None:
        raise UsageError("out: not supported when x requires grad or under torch.compile (autograd cannot record "
                         "out=)")
    _validate.pick_rung(_family("softmax"), variant, x.device.type, tuple(x.shape), {"dim": dim}, x.dtype)
    if torch.compiler.is_compiling():
        return torch.ops.kernelwright.softmax(x, dim, variant)
    return SoftmaxFunction.apply(x, dim, variant)
