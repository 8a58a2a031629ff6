"""Activation modules: :class:`SiluAndMul`, the SwiGLU MLP's gated activation on a fused gate/up projection."""

from __future__ import annotations

import torch

from kernelwright.errors import UsageError
from kernelwright.ops.swiglu import api as _swiglu


class _SiluAndMulFunction(torch.autograd.Function):
    """The backward writes dgate and dup straight into the two halves of one [..., 2d] gradient (the vectorized
    backward rung takes strided outputs), instead of two gradients that autograd would copy into a zeroed one."""

    @staticmethod
    def forward(ctx, x, variant=None):
        d = x.shape[-1] // 2
        ctx.save_for_backward(x)
        return _swiglu.swiglu_forward(x[..., :d], x[..., d:], variant)

    @staticmethod
    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        d = x.shape[-1] // 2
        dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        _swiglu.swiglu_backward(x[..., :d], x[..., d:], dy, out=(dx[..., :d], dx[..., d:]))
        return dx, None


def silu_and_mul(x: torch.Tensor, *, variant: str | None = None) -> torch.Tensor:
    """``silu(x[..., :d]) * x[..., d:]`` for ``x`` of shape ``[..., 2d]``: the first half is the gate, the second
    half is up (vLLM's ``SiluAndMul`` convention; a fused ``gate_up_proj`` stores its outputs in that order).

    Parameters
    ----------
    x : torch.Tensor
        ``[..., 2d]``, float32, float16 or bfloat16, CPU or CUDA, any layout. Differentiable.
    variant : str, optional
        A rung of the ``swiglu`` family for the forward (``None``: the best).

    Returns
    -------
    torch.Tensor
        ``[..., d]``, ``x``'s dtype.
    """
    _swiglu.check_inputs(x, x)
    if x.dim() == 0 or x.shape[-1] % 2:
        raise UsageError(f"x: expected a last dim of even size 2d (gate, then up), got shape {tuple(x.shape)}")
    d = x.shape[-1] // 2
    if torch.compiler.is_compiling():
        return _swiglu.swiglu(x[..., :d], x[..., d:], variant=variant)
    if torch.is_grad_enabled() and x.requires_grad:
        return _SiluAndMulFunction.apply(x, variant)
    return _swiglu.swiglu(x[..., :d], x[..., d:], variant=variant)


class SiluAndMul(torch.nn.Module):
    """``y = silu(x[..., :d]) * x[..., d:]``, ``x`` of shape ``[..., 2d]`` -> ``y`` of shape ``[..., d]``.

    The gate is the first half of the last dim, up the second half (as vLLM's ``SiluAndMul``). For a Hugging Face
    style MLP with separate ``gate_proj`` and ``up_proj``, call :func:`kernelwright.ops.swiglu` directly.
    """

    def __init__(self, variant: str | None = None):
        super().__init__()
        self.variant = variant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return silu_and_mul(x, variant=self.variant)

    def extra_repr(self) -> str:
        return f"variant={self.variant!r}" if self.variant else ""
