"""Public op ``kernelwright.ops.add_rms_norm``, differentiable: the custom op ``kernelwright::add_rms_norm`` (a
fake for torch.compile, an autograd formula calling ``kernelwright::add_rms_norm_backward``) and
:class:`AddRMSNormFunction`."""

import torch

from kernelwright.errors import UsageError
from kernelwright.ops import _norm_common as nc
from kernelwright.ops.add_rms_norm_bwd import api as _bwd  # noqa: F401  (registers the backward op)
from kernelwright.ops.rms_norm_bwd import api as _rms_bwd  # noqa: F401  (when h's gradient is absent)


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
                 offset: bool = False, *, variant: str | None = None,
                 keep_h: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The residual add of a decoder layer fused with the RMSNorm after it: ``h = x + residual``, returns
    ``(rms_norm(h, weight, eps, offset), h)``.

    h is formed in fp32, stored once in x's dtype, and normalised unrounded. Differentiable with respect to x,
    residual and weight (their gradients: dx = dresidual), usable inside ``torch.compile`` graphs.

    Parameters
    ----------
    x, residual : torch.Tensor
        ``[..., D]``, the same shape, dtype (float32, float16 or bfloat16) and device; any layouts.
    weight : torch.Tensor
        ``[D]``, x's dtype and device.
    eps : float
        Added to the mean square, >= 0.
    offset : bool
        ``True``: scale by ``1 + weight`` (Gemma).
    variant : str, optional
        A rung of the ``add_rms_norm`` family: ``"naive"``, ``"fused"`` (rows up to 32768 columns), ``"split"``;
        ``None`` takes the best for the device and width.
    keep_h : bool
        ``False``: h is formed and normalised but never stored (a quarter less memory traffic in a pre-norm whose
        caller needs only y); then h is returned as ``None`` and nothing may require a gradient (the backward
        pass reads h).

    Returns
    -------
    (y, h) : tuple of torch.Tensor
        Both x's shape and dtype, contiguous (h ``None`` with ``keep_h=False``).
    """
    nc.check_x("x", x)
    nc.check_like("residual", residual, x, tuple(x.shape), "x's shape")
    nc.check_like("weight", weight, x, (x.shape[-1],), "the last dim of x")
    if not isinstance(keep_h, bool):
        raise UsageError(f"keep_h: expected a bool, got {type(keep_h).__name__}")
    if not keep_h:
        if torch.is_grad_enabled() and any(t.requires_grad for t in (x, residual, weight)):
            raise UsageError("keep_h=False: an input requires a gradient, and the backward pass needs h; keep h "
                             "or run under torch.no_grad()")
        y = torch.ops.kernelwright.add_rms_norm_y(x, residual, weight, nc.check_eps(eps), nc.check_offset(offset),
                                                  nc.check_variant(variant))
        return y, None
    y, h, _ = torch.ops.kernelwright.add_rms_norm(x, residual, weight, nc.check_eps(eps), nc.check_offset(offset),
                                                  nc.check_variant(variant))
    return y, h


@torch.library.custom_op("kernelwright::add_rms_norm", mutates_args=())
def _add_rms_norm_op(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, offset: bool,
                     variant: str | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, h, rstd): rstd is float32, one value per row, saved for the backward pass."""
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    h = torch.empty_like(y)
    rstd = torch.zeros(x.shape[:-1], dtype=torch.float32, device=x.device)
    if x.numel():
        rung = nc.pick("add_rms_norm", variant, x, {"eps": eps, "offset": offset})
        rung.load()(x, residual, weight, eps, offset, out=(y, h), stats=(rstd,))
    return y, h, rstd


@_add_rms_norm_op.register_fake
def _(x, residual, weight, eps, offset, variant):
    return x.new_empty(x.shape), x.new_empty(x.shape), x.new_empty(x.shape[:-1], dtype=torch.float32)


def _setup_context(ctx, inputs, output):
    _x, _residual, weight, eps, offset, _variant = inputs
    ctx.save_for_backward(output[1], weight, output[2])  # h, not x and residual: the backward reads one tensor
    ctx.eps, ctx.offset = eps, offset


def _backward(ctx, dy, dh, _drstd):
    h, weight, rstd = ctx.saved_tensors
    if dh is None:
        dx, dw = torch.ops.kernelwright.rms_norm_backward(dy, h, weight, rstd, ctx.eps, ctx.offset, None)
    else:
        dx, dw = torch.ops.kernelwright.add_rms_norm_backward(dy, dh, h, weight, rstd, ctx.eps, ctx.offset, None)
    return dx, dx, dw, None, None, None  # dresidual = dx


_add_rms_norm_op.register_autograd(_backward, setup_context=_setup_context)


@torch.library.custom_op("kernelwright::add_rms_norm_y", mutates_args=())
def _add_rms_norm_y_op(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, offset: bool,
                       variant: str | None) -> torch.Tensor:
    """y alone: h = x + residual normalised in registers and never stored (no autograd: the backward reads h)."""
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x.numel():
        rung = nc.pick("add_rms_norm", variant, x, {"eps": eps, "offset": offset})
        rung.load()(x, residual, weight, eps, offset, out=(y, None))
    return y


@_add_rms_norm_y_op.register_fake
def _(x, residual, weight, eps, offset, variant):
    return x.new_empty(x.shape)


class AddRMSNormFunction(torch.autograd.Function):
    """``AddRMSNormFunction.apply(x, residual, weight, eps=1e-6, offset=False, variant=None) -> (y, h)``: the same
    kernels as :func:`add_rms_norm` as an ``autograd.Function`` (Liger's ``LigerFusedAddRMSNormFunction`` takes
    ``(x, residual, weight, eps, offset)`` likewise)."""

    @staticmethod
    def forward(ctx, x, residual, weight, eps=1e-6, offset=False, variant=None):
        y, h, rstd = torch.ops.kernelwright.add_rms_norm(x, residual, weight, eps, offset, variant)
        _setup_context(ctx, (x, residual, weight, eps, offset, variant), (y, h, rstd))
        return y, h

    @staticmethod
    def backward(ctx, dy, dh):
        return _backward(ctx, dy, dh, None)
