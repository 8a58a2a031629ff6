"""add_rms_norm's backward pass as a function and as the custom op ``kernelwright::add_rms_norm_backward`` (what
the autograd formula of ``kernelwright::add_rms_norm`` calls, so torch.compile can trace it with a fake)."""

import torch

from kernelwright.ops import _norm_common as nc
from kernelwright.ops.rms_norm_bwd.api import check_stat


def add_rms_norm_backward(dy: torch.Tensor, dh: torch.Tensor, h: torch.Tensor, weight: torch.Tensor,
                          rstd: torch.Tensor, eps: float = 1e-6, offset: bool = False, *,
                          variant: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients of ``(y, h) = add_rms_norm(x, residual, weight, eps, offset)``.

    Parameters
    ----------
    dy, dh : torch.Tensor
        The gradients of y and of h: h's shape, dtype and device, any layout.
    h : torch.Tensor
        The forward's output h = x + residual (read instead of x and residual: one tensor, not two).
    weight : torch.Tensor
        The forward's weight.
    rstd : torch.Tensor
        float32, ``h.shape[:-1]``, as the forward saved it.
    eps, offset
        The forward's arguments.
    variant : str, optional
        A rung of the ``add_rms_norm_bwd`` family: ``"naive"``, ``"fused"`` (rows up to 16384), ``"split"``.

    Returns
    -------
    (dx, dweight) : tuple of torch.Tensor
        dx = dresidual (one tensor: the two gradients are equal), like h; dweight like weight.
    """
    nc.check_x("h", h)
    nc.check_like("weight", weight, h, (h.shape[-1],), "the last dim of h")
    nc.check_like("dy", dy, h, tuple(h.shape), "h's shape")
    nc.check_like("dh", dh, h, tuple(h.shape), "h's shape")
    check_stat("rstd", rstd, h)
    dx, dw = torch.ops.kernelwright.add_rms_norm_backward(dy, dh, h, weight, rstd, nc.check_eps(eps),
                                                           nc.check_offset(offset), variant)
    return dx, dw


@torch.library.custom_op("kernelwright::add_rms_norm_backward", mutates_args=())
def _add_rms_norm_backward_op(dy: torch.Tensor, dh: torch.Tensor, h: torch.Tensor, weight: torch.Tensor,
                              rstd: torch.Tensor, eps: float, offset: bool,
                              variant: str | None) -> tuple[torch.Tensor, torch.Tensor]:
    dx = torch.empty(h.shape, dtype=h.dtype, device=h.device)
    dw = torch.empty(weight.shape, dtype=weight.dtype, device=weight.device)
    rung = nc.pick("add_rms_norm_bwd", variant, h, {"eps": eps, "offset": offset})
    rung.load()(h, weight, dy, dh, rstd, eps, offset, out=(dx, dw))
    return dx, dw


@_add_rms_norm_backward_op.register_fake
def _(dy, dh, h, weight, rstd, eps, offset, variant):
    return h.new_empty(h.shape), weight.new_empty(weight.shape)
