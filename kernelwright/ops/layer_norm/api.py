"""Public op ``kernelwright.ops.layer_norm``, differentiable: the custom op ``kernelwright::layer_norm`` (a fake
for torch.compile, an autograd formula calling ``kernelwright::layer_norm_backward``) and
:class:`LayerNormFunction`."""

import torch

from kernelwright.ops import _norm_common as nc
from kernelwright.ops.layer_norm_bwd import api as _bwd  # noqa: F401  (registers kernelwright::layer_norm_backward)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5, *,
               variant: str | None = None) -> torch.Tensor:
    """LayerNorm over the last dim: ``(x - mean) / sqrt(var + eps) * weight + bias`` (population variance, as
    ``torch.nn.functional.layer_norm``).

    Statistics in fp32 (mean, then the variance of the centred values: no cancellation), output rounded once.
    Differentiable with respect to x, weight and bias, and usable inside ``torch.compile`` graphs.

    Parameters
    ----------
    x : torch.Tensor
        ``[..., D]``, any number of leading dims, any layout; float32, float16 or bfloat16, CPU or CUDA.
    weight, bias : torch.Tensor
        ``[D]``, x's dtype and device.
    eps : float
        Added to the variance, >= 0.
    variant : str, optional
        A rung of the ``layer_norm`` family: ``"naive"``, ``"fused"`` (rows up to 32768 columns), ``"chunked"``,
        ``"split"``, ``"cluster"`` (CUDA C, Hopper GPUs; rows up to 262144 columns); ``None`` takes the best
        measured for the device and width (the cluster rung on Hopper for 8192 to 16384 columns).

    Returns
    -------
    torch.Tensor
        x's shape and dtype, contiguous.
    """
    nc.check_x("x", x)
    nc.check_like("weight", weight, x, (x.shape[-1],), "the last dim of x")
    nc.check_like("bias", bias, x, (x.shape[-1],), "the last dim of x")
    y, _, _ = torch.ops.kernelwright.layer_norm(x, weight, bias, nc.check_eps(eps), nc.check_variant(variant))
    return y


@torch.library.custom_op("kernelwright::layer_norm", mutates_args=())
def _layer_norm_op(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float,
                   variant: str | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, mean, rstd): mean and rstd are float32, one value per row, saved for the backward pass."""
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    mean = torch.zeros(x.shape[:-1], dtype=torch.float32, device=x.device)
    rstd = torch.zeros_like(mean)
    if x.numel():
        rung = nc.pick("layer_norm", variant, x, {"eps": eps})
        rung.load()(x, weight, bias, eps, out=y, stats=(mean, rstd))
    return y, mean, rstd


@_layer_norm_op.register_fake
def _(x, weight, bias, eps, variant):
    stat = x.new_empty(x.shape[:-1], dtype=torch.float32)
    return x.new_empty(x.shape), stat, stat.new_empty(stat.shape)


def _setup_context(ctx, inputs, output):
    x, weight, _bias, eps, _variant = inputs
    ctx.save_for_backward(x, weight, output[1], output[2])
    ctx.eps = eps


def _backward(ctx, dy, _dmean, _drstd):
    x, weight, mean, rstd = ctx.saved_tensors
    dx, dw, db = torch.ops.kernelwright.layer_norm_backward(dy, x, weight, mean, rstd, ctx.eps, None)
    return dx, dw, db, None, None


_layer_norm_op.register_autograd(_backward, setup_context=_setup_context)


class LayerNormFunction(torch.autograd.Function):
    """``LayerNormFunction.apply(x, weight, bias, eps=1e-5, variant=None)``: the same kernels as :func:`layer_norm`
    as an ``autograd.Function`` (the signature of Liger's ``LigerLayerNormFunction``)."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps=1e-5, variant=None):
        y, mean, rstd = torch.ops.kernelwright.layer_norm(x, weight, bias, eps, variant)
        _setup_context(ctx, (x, weight, bias, eps, variant), (y, mean, rstd))
        return y

    @staticmethod
    def backward(ctx, dy):
        return _backward(ctx, dy, None, None)
