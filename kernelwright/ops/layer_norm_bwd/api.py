"""layer_norm's backward pass as a function and as the custom op ``kernelwright::layer_norm_backward`` (what the
autograd formula of ``kernelwright::layer_norm`` calls, so torch.compile can trace it with a fake)."""

import torch

from kernelwright.ops import _norm_common as nc
from kernelwright.ops.rms_norm_bwd.api import check_stat


def layer_norm_backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, mean: torch.Tensor,
                        rstd: torch.Tensor, eps: float = 1e-5, *,
                        variant: str | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of ``y = layer_norm(x, weight, bias, eps)`` (they do not depend on the bias).

    Parameters
    ----------
    dy : torch.Tensor
        The gradient of y: x's shape, dtype and device, any layout.
    x, weight : torch.Tensor
        The forward's inputs.
    mean, rstd : torch.Tensor
        float32, ``x.shape[:-1]``: the row means and 1 / sqrt(var + eps), as the forward saved them.
    eps : float
        The forward's eps (not needed with ``rstd`` given; kept for symmetry).
    variant : str, optional
        A rung of the ``layer_norm_bwd`` family: ``"naive"``, ``"fused"`` (rows up to 16384), ``"split"``.

    Returns
    -------
    (dx, dweight, dbias) : tuple of torch.Tensor
        dx like x (contiguous); dweight and dbias like weight, summed over rows in a fixed order.
    """
    nc.check_x("x", x)
    nc.check_like("weight", weight, x, (x.shape[-1],), "the last dim of x")
    nc.check_like("dy", dy, x, tuple(x.shape), "x's shape")
    check_stat("mean", mean, x)
    check_stat("rstd", rstd, x)
    dx, dw, db = torch.ops.kernelwright.layer_norm_backward(dy, x, weight, mean, rstd, nc.check_eps(eps), variant)
    return dx, dw, db


@torch.library.custom_op("kernelwright::layer_norm_backward", mutates_args=())
def _layer_norm_backward_op(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, mean: torch.Tensor,
                            rstd: torch.Tensor, eps: float,
                            variant: str | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    dw = torch.empty(weight.shape, dtype=weight.dtype, device=weight.device)
    db = torch.empty_like(dw)
    rung = nc.pick("layer_norm_bwd", variant, x, {"eps": eps})
    rung.load()(x, weight, dy, mean, rstd, eps, out=(dx, dw, db))
    return dx, dw, db


@_layer_norm_backward_op.register_fake
def _(dy, x, weight, mean, rstd, eps, variant):
    return x.new_empty(x.shape), weight.new_empty(weight.shape), weight.new_empty(weight.shape)
