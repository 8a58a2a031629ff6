"""rms_norm's backward pass as a function and as the custom op ``kernelwright::rms_norm_backward`` (what the
autograd formula of ``kernelwright::rms_norm`` calls, so torch.compile can trace it with a fake)."""

import torch

from kernelwright.errors import UsageError
from kernelwright.ops import _norm_common as nc


def check_stat(name: str, t, x: torch.Tensor) -> torch.Tensor:
    """A saved row statistic: fp32, one value per row of ``x``, on its device."""
    if not isinstance(t, torch.Tensor):
        raise UsageError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.float32 or t.device != x.device or tuple(t.shape) != tuple(x.shape[:-1]):
        raise UsageError(f"{name}: expected a float32 tensor of shape {tuple(x.shape[:-1])} on {x.device} (one "
                         f"value per row of x, as the forward saves it), got {str(t.dtype).removeprefix('torch.')} "
                         f"{tuple(t.shape)} on {t.device}")
    return t


def rms_norm_backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor,
                      eps: float = 1e-6, offset: bool = False, *,
                      variant: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients of ``y = rms_norm(x, weight, eps, offset)``.

    Parameters
    ----------
    dy : torch.Tensor
        The gradient of y: x's shape, dtype and device, any layout.
    x, weight : torch.Tensor
        The forward's inputs.
    rstd : torch.Tensor
        float32, ``x.shape[:-1]``: 1 / sqrt(mean(x^2) + eps) per row, as the forward saved it.
    eps, offset
        The forward's arguments (``eps`` is not needed with ``rstd`` given; kept for symmetry).
    variant : str, optional
        A rung of the ``rms_norm_bwd`` family: ``"naive"``, ``"fused"`` (rows up to 16384), ``"split"``;
        ``None`` takes the best for the width.

    Returns
    -------
    (dx, dweight) : tuple of torch.Tensor
        dx like x (contiguous), dweight like weight, summed over rows in a fixed order (bitwise reproducible).
    """
    nc.check_x("x", x)
    nc.check_like("weight", weight, x, (x.shape[-1],), "the last dim of x")
    nc.check_like("dy", dy, x, tuple(x.shape), "x's shape")
    check_stat("rstd", rstd, x)
    dx, dw = torch.ops.kernelwright.rms_norm_backward(dy, x, weight, rstd, nc.check_eps(eps),
                                                       nc.check_offset(offset), variant)
    return dx, dw


@torch.library.custom_op("kernelwright::rms_norm_backward", mutates_args=())
def _rms_norm_backward_op(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor, eps: float,
                          offset: bool, variant: str | None) -> tuple[torch.Tensor, torch.Tensor]:
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    dw = torch.empty(weight.shape, dtype=weight.dtype, device=weight.device)
    rung = nc.pick("rms_norm_bwd", variant, x, {"eps": eps, "offset": offset})
    rung.load()(x, weight, dy, rstd, eps, offset, out=(dx, dw))
    return dx, dw


@_rms_norm_backward_op.register_fake
def _(dy, x, weight, rstd, eps, offset, variant):
    return x.new_empty(x.shape), weight.new_empty(weight.shape)
