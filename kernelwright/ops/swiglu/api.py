"""Public op: ``kernelwright.ops.swiglu``, differentiable (backward: the ``swiglu_bwd`` family).

Layers: rung launchers (``triton.py``) -> :func:`swiglu_forward` / :func:`swiglu_backward` (allocate, dispatch)
-> :class:`SwiGLUFunction` (eager autograd) -> the ``kernelwright::swiglu`` custom op with a fake and an autograd
formula (what ``torch.compile`` graphs hold) -> :func:`swiglu`, which validates once and picks one of them.
"""

from __future__ import annotations

import torch

from kernelwright.errors import UsageError
from kernelwright.ops import _validate


def _family(name: str):
    from kernelwright.registry import get_family

    return get_family(name)


def swiglu_forward(gate: torch.Tensor, up: torch.Tensor, variant: str | None = None,
                   out: torch.Tensor | None = None) -> torch.Tensor:
    """silu(gate) * up into ``out`` (contiguous, allocated when ``None``) by a rung of ``swiglu``; no checks."""
    out = torch.empty(gate.shape, dtype=gate.dtype, device=gate.device) if out is None else out
    if out.numel() == 0:
        return out
    rung = _validate.pick_rung(_family("swiglu"), variant, gate.device.type, tuple(gate.shape), {}, gate.dtype)
    return rung.load()(gate, up, out=out)


def swiglu_backward(gate: torch.Tensor, up: torch.Tensor, dy: torch.Tensor,
                    out: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(dgate, dup) for an incoming gradient ``dy`` by the best rung of ``swiglu_bwd``. ``out`` may be two
    strided views (the halves of one [..., 2I] buffer); no checks."""
    if out is None:
        out = (torch.empty(gate.shape, dtype=gate.dtype, device=gate.device),
               torch.empty(up.shape, dtype=up.dtype, device=up.device))
    if gate.numel() == 0:
        return out
    rung = _validate.pick_rung(_family("swiglu_bwd"), None, gate.device.type, tuple(gate.shape), {}, gate.dtype)
    return rung.load()(gate, up, dy.to(gate.dtype), out=out)


class SwiGLUFunction(torch.autograd.Function):
    """silu(gate) * up with its backward; saves gate and up (not the output: sigmoid is recomputed)."""

    @staticmethod
    def forward(ctx, gate, up, variant=None):
        ctx.save_for_backward(gate, up)
        return swiglu_forward(gate, up, variant)

    @staticmethod
    def backward(ctx, dy):
        gate, up = ctx.saved_tensors
        dgate, dup = swiglu_backward(gate, up, dy)
        return dgate, dup, None


@torch.library.custom_op("kernelwright::swiglu", mutates_args=())
def _swiglu_op(gate: torch.Tensor, up: torch.Tensor, variant: str | None = None) -> torch.Tensor:
    return swiglu_forward(gate, up, variant)


@_swiglu_op.register_fake
def _(gate, up, variant=None):
    return torch.empty_like(gate, memory_format=torch.contiguous_format)


@torch.library.custom_op("kernelwright::swiglu_bwd", mutates_args=())
def _swiglu_bwd_op(gate: torch.Tensor, up: torch.Tensor, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return swiglu_backward(gate, up, dy)


@_swiglu_bwd_op.register_fake
def _(gate, up, dy):
    return (torch.empty_like(gate, memory_format=torch.contiguous_format),
            torch.empty_like(up, memory_format=torch.contiguous_format))


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], inputs[1])


def _op_backward(ctx, dy):
    gate, up = ctx.saved_tensors
    dgate, dup = torch.ops.kernelwright.swiglu_bwd(gate, up, dy)
    return dgate, dup, None


_swiglu_op.register_autograd(_op_backward, setup_context=_setup_context)


def check_inputs(gate, up) -> None:
    """The public op's checks, shared with the modules built on it."""
    _validate.tensor("gate", gate)
    _validate.tensor("up", up)
    _validate.same(("gate", "up"), gate, up)


def swiglu(gate: torch.Tensor, up: torch.Tensor, *, variant: str | None = None,
           out: torch.Tensor | None = None) -> torch.Tensor:
    """SwiGLU activation ``silu(gate) * up``, ``silu(g) = g * sigmoid(g)``, computed in fp32, rounded once.

    Parameters
    ----------
    gate, up : torch.Tensor
        Same shape (any, including 0-d and empty), device (CPU or CUDA) and dtype (float32, float16 or
        bfloat16); any layout: strided views such as the two halves of one ``[..., 2I]`` projection are read in
        place by the ``vectorized`` rung. Differentiable in both (the backward is the ``swiglu_bwd`` family).
    variant : str, optional
        A rung of the ``swiglu`` family: ``"naive"``, ``"fused"``, ``"vectorized"``. ``None`` takes the best.
    out : torch.Tensor, optional
        Contiguous buffer of ``gate``'s shape and dtype to write into; not with inputs that require grad.

    Returns
    -------
    torch.Tensor
        ``gate``'s shape and dtype, contiguous.
    """
    check_inputs(gate, up)
    _validate.pick_rung(_family("swiglu"), variant, gate.device.type, tuple(gate.shape), {}, gate.dtype)
    grad = torch.is_grad_enabled() and (gate.requires_grad or up.requires_grad)
    if out is not None and grad:
        raise UsageError("out: not supported when gate or up requires grad (autograd cannot record out=)")
    if torch.compiler.is_compiling():
        if out is not None:
            raise UsageError("out: not supported under torch.compile")
        return torch.ops.kernelwright.swiglu(gate, up, variant)
    if grad:
        return SwiGLUFunction.apply(gate, up, variant)
    return swiglu_forward(gate, up, variant, _validate.out_buffer(out, gate.shape, gate.dtype, gate.device))
