"""Public op: ``kernelwright.ops.activation`` (forward kernels; the gradient is torch's formula, recomputed)."""

from __future__ import annotations

import torch

from kernelwright.errors import UsageError
from kernelwright.ops import _validate
from kernelwright.ops.activation.reference import KINDS


def _family():
    from kernelwright.registry import get_family

    return get_family("activation")


def activation_forward(x: torch.Tensor, kind: str, variant: str | None = None,
                       out: torch.Tensor | None = None) -> torch.Tensor:
    """act(x) into ``out`` (contiguous, allocated when ``None``) by a rung of ``activation``; no checks."""
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device) if out is None else out
    if out.numel() == 0:
        return out
    rung = _validate.pick_rung(_family(), variant, x.device.type, tuple(x.shape), {"kind": kind}, x.dtype)
    return rung.load()(x, kind, out=out)


def _torch_grad(x: torch.Tensor, kind: str, dy: torch.Tensor) -> torch.Tensor:
    from kernelwright.ops.matmul.api import apply_activation

    with torch.enable_grad():
        xr = x.detach().requires_grad_()
        (dx,) = torch.autograd.grad(apply_activation(xr, kind), xr, dy)
    return dx


class ActivationFunction(torch.autograd.Function):
    """The forward by our kernel; the backward by torch's own formula on the saved input."""

    @staticmethod
    def forward(ctx, x, kind, variant=None):
        ctx.save_for_backward(x)
        ctx.kind = kind
        return activation_forward(x, kind, variant)

    @staticmethod
    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        return _torch_grad(x, ctx.kind, dy), None, None


@torch.library.custom_op("kernelwright::activation", mutates_args=())
def _activation_op(x: torch.Tensor, kind: str, variant: str | None = None) -> torch.Tensor:
    return activation_forward(x, kind, variant)


@_activation_op.register_fake
def _(x, kind, variant=None):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])
    ctx.kind = inputs[1]


def _op_backward(ctx, dy):
    (x,) = ctx.saved_tensors
    return _torch_grad(x, ctx.kind, dy), None, None


_activation_op.register_autograd(_op_backward, setup_context=_setup_context)


def activation(x: torch.Tensor, kind: str = "silu", *, variant: str | None = None,
               out: torch.Tensor | None = None) -> torch.Tensor:
    """Elementwise activation ``act(x)``, computed in fp32 and rounded once.

    Parameters
    ----------
    x : torch.Tensor
        Any shape (including 0-d and empty), CPU or CUDA, float32, float16 or bfloat16; any layout
        (non-contiguous inputs are packed first). Differentiable: the backward is torch's own formula.
    kind : str
        ``"silu"`` (x * sigmoid(x)), ``"gelu"`` (exact, with erf), ``"gelu_tanh"`` (``F.gelu(approximate="tanh")``,
        GPT-2's) or ``"relu"``.
    variant : str, optional
        A rung of the ``activation`` family: ``"fused"``, ``"wide"``. ``None`` takes the best.
    out : torch.Tensor, optional
        Contiguous buffer of ``x``'s shape and dtype to write into; not with an input that requires grad.

    Returns
    -------
    torch.Tensor
        ``x``'s shape and dtype, contiguous.

    Examples
    --------
    >>> import torch, kernelwright.ops as ops
    >>> x = torch.randn(4, 1024)
    >>> torch.allclose(ops.activation(x, "gelu_tanh"), torch.nn.functional.gelu(x, approximate="tanh"), atol=1e-6)
    True
    """
    _validate.tensor("x", x)
    if kind not in KINDS:
        raise UsageError(f"kind: expected one of {', '.join(map(repr, KINDS))}, got {kind!r}")
    _validate.pick_rung(_family(), variant, x.device.type, tuple(x.shape), {"kind": kind}, x.dtype)
    grad = torch.is_grad_enabled() and x.requires_grad
    if out is not None and grad:
        raise UsageError("out: not supported when x requires grad (autograd cannot record out=)")
    if torch.compiler.is_compiling():
        if out is not None:
            raise UsageError("out: not supported under torch.compile")
        return torch.ops.kernelwright.activation(x, kind, variant)
    if grad:
        return ActivationFunction.apply(x, kind, variant)
    return activation_forward(x, kind, variant, _validate.out_buffer(out, x.shape, x.dtype, x.device))
