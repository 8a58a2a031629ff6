"""Public op ``kernelwright.ops.rms_norm``, differentiable: the custom op ``kernelwright::rms_norm`` (a fake for
torch.compile, an autograd formula calling ``kernelwright::rms_norm_backward``) and :class:`RMSNormFunction`."""

import torch

from kernelwright.ops import _norm_common as nc
from kernelwright.ops.rms_norm_bwd import api as _bwd  # noqa: F401  (registers kernelwright::rms_norm_backward)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, offset: bool = False, *,
             variant: str | None = None) -> torch.Tensor:
    """RMSNorm over the last dim: ``x / sqrt(mean(x^2) + eps) * weight`` (``* (1 + weight)`` with ``offset``).

    Statistics are computed in fp32 on exactly rescaled values (no overflow for any finite input) and the output
    is rounded once. Differentiable with respect to x and weight (Triton backward kernels; dweight summed in a
    fixed order), and usable inside ``torch.compile`` graphs.

    Parameters
    ----------
    x : torch.Tensor
        ``[..., D]``, any number of leading dims, any layout; float32, float16 or bfloat16, CPU or CUDA.
    weight : torch.Tensor
        ``[D]``, x's dtype and device.
    eps : float
        Added to the mean square, >= 0.
    offset : bool
        ``True``: scale by ``1 + weight`` (Gemma's RMSNorm, whose weight starts at zero).
    variant : str, optional
        A rung of the ``rms_norm`` family: ``"naive"``, ``"fused"`` (rows up to 32768 columns), ``"chunked"``,
        ``"split"``, ``"cluster"`` (CUDA C, Hopper GPUs; rows up to 262144 columns). ``None`` takes the best
        rung measured for the device, width and dtype (the cluster rung on Hopper for 8192 to 16384 columns, and to
        65536 in 16-bit types). The backward pass always takes
        the best ``rms_norm_bwd`` rung.

    Returns
    -------
    torch.Tensor
        x's shape and dtype, contiguous.
    """
    nc.check_x("x", x)
    nc.check_like("weight", weight, x, (x.shape[-1],), "the last dim of x")
    y, _ = torch.ops.kernelwright.rms_norm(x, weight, nc.check_eps(eps), nc.check_offset(offset),
                                           nc.check_variant(variant))
    return y


@torch.library.custom_op("kernelwright::rms_norm", mutates_args=())
def _rms_norm_op(x: torch.Tensor, weight: torch.Tensor, eps: float, offset: bool,
                 variant: str | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, rstd): rstd is float32, one value per row, saved for the backward pass."""
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    rstd = torch.zeros(x.shape[:-1], dtype=torch.float32, device=x.device)
    if x.numel():
        rung = nc.pick("rms_norm", variant, x, {"eps": eps, "offset": offset})
        rung.load()(x, weight, eps, offset, out=y, stats=(rstd,))
    return y, rstd


@_rms_norm_op.register_fake
def _(x, weight, eps, offset, variant):
    return x.new_empty(x.shape), x.new_empty(x.shape[:-1], dtype=torch.float32)


def _setup_context(ctx, inputs, output):
    x, weight, eps, offset, _variant = inputs
    ctx.save_for_backward(x, weight, output[1])
    ctx.eps, ctx.offset = eps, offset


def _backward(ctx, dy, _drstd):
    x, weight, rstd = ctx.saved_tensors
    dx, dw = torch.ops.kernelwright.rms_norm_backward(dy, x, weight, rstd, ctx.eps, ctx.offset, None)
    return dx, dw, None, None, None


_rms_norm_op.register_autograd(_backward, setup_context=_setup_context)


class RMSNormFunction(torch.autograd.Function):
    """``RMSNormFunction.apply(x, weight, eps=1e-6, offset=False, variant=None)``: the same kernels as
    :func:`rms_norm`, as an ``autograd.Function`` for code written against one (Liger's ``LigerRMSNormFunction``
    takes ``(x, weight, eps, offset)`` likewise, with a float offset)."""

    @staticmethod
    def forward(ctx, x, weight, eps=1e-6, offset=False, variant=None):
        y, rstd = torch.ops.kernelwright.rms_norm(x, weight, eps, offset, variant)
        _setup_context(ctx, (x, weight, eps, offset, variant), (y, rstd))
        return y

    @staticmethod
    def backward(ctx, dy):
        return _backward(ctx, dy, None)
