"""Public op: ``kernelwright.ops.matmul``."""

from __future__ import annotations

import torch

from kernelwright.errors import UsageError
from kernelwright.ops import _validate

ACTIVATIONS = (None, "relu", "gelu", "gelu_tanh", "silu")


def apply_activation(y: torch.Tensor, activation: str | None) -> torch.Tensor:
    """One of :data:`ACTIVATIONS` in torch (the unfused path, and the reference the fused one must match)."""
    import torch.nn.functional as F

    if activation == "relu":
        return F.relu(y)
    if activation in ("gelu", "gelu_tanh"):
        return F.gelu(y, approximate="tanh" if activation == "gelu_tanh" else "none")
    if activation == "silu":
        return F.silu(y)
    return y


def _torch_epilogue(out: torch.Tensor, bias, activation, residual) -> torch.Tensor:
    """The epilogue in fp32 after the product, for rungs that do not fuse it (the CUDA C ladder)."""
    y = out.float()
    if bias is not None:
        y += bias.float()
    y = apply_activation(y, activation)
    if residual is not None:
        y += residual.float()
    return out.copy_(y)


def matmul(a: torch.Tensor, b: torch.Tensor, *, variant: str | None = None, allow_tf32: bool = False,
           out: torch.Tensor | None = None, bias: torch.Tensor | None = None, activation: str | None = None,
           residual: torch.Tensor | None = None) -> torch.Tensor:
    """Matrix product ``a @ b`` with fp32 accumulation, optionally ``activation(a @ b + bias) + residual``.

    Parameters
    ----------
    a : torch.Tensor
        ``[M, K]``, float32, float16 or bfloat16, CPU or CUDA, any strides (transposed views included).
    b : torch.Tensor
        ``[K, N]``, same dtype and device as ``a``.
    variant : str, optional
        A rung of the ``matmul`` family (``kw list`` shows them): CUDA C rungs ``"cuda_naive"`` ...
        ``"cuda_warptile"`` (float32, CUDA GPU), Triton rungs ``"triton_tiled"``, ``"triton_grouped"``,
        ``"triton_autotuned"``, ``"triton_persistent"``, ``"triton_splitk"``. ``None`` takes the best rung for
        the device and shape.
    allow_tf32 : bool
        float32 inputs only: let Triton rungs use TF32 tensor cores (10-bit mantissa products, about 7x faster on
        an H200, about 1e-3 relative error). Off by default: float32 in, float32 products out.
    out : torch.Tensor, optional
        Contiguous ``[M, N]`` buffer of ``a``'s dtype to write into.
    bias : torch.Tensor, optional
        ``[N]`` of ``a``'s dtype, added to every row.
    activation : str, optional
        ``"relu"``, ``"gelu"`` (exact), ``"gelu_tanh"`` or ``"silu"``, applied after the bias.
    residual : torch.Tensor, optional
        ``[M, N]`` of ``a``'s dtype (any strides), added last.

    The Triton rungs fuse bias, activation and residual into the product's epilogue: they act on the fp32
    accumulator and the result is rounded once (eager PyTorch rounds after the product and again after each
    op). The CUDA C rungs apply them afterwards, in fp32.

    Returns
    -------
    torch.Tensor
        ``[M, N]`` in ``a``'s dtype (``out`` if given).
    """
    from kernelwright.registry import get_family

    _validate.tensor("a", a)
    _validate.tensor("b", b)
    for name, t in (("a", a), ("b", b)):
        if t.dim() != 2:
            raise UsageError(f"{name}: expected a 2-D tensor, got {t.dim()}-D with shape {tuple(t.shape)}")
    if a.device != b.device:
        raise UsageError(f"b: expected device {a.device} like a, got {b.device}")
    if a.dtype != b.dtype:
        raise UsageError(f"b: expected dtype {str(a.dtype).removeprefix('torch.')} like a, got "
                         f"{str(b.dtype).removeprefix('torch.')} (mixed dtypes are not promoted)")
    if a.shape[1] != b.shape[0]:
        raise UsageError(f"b: expected {a.shape[1]} rows to match a's {a.shape[1]} columns (inner dimension K), "
                         f"got shape {tuple(b.shape)}")
    if not isinstance(allow_tf32, bool):
        raise UsageError(f"allow_tf32: expected a bool, got {type(allow_tf32).__name__}")
    m, k = a.shape
    n = b.shape[1]
    if activation not in ACTIVATIONS:
        raise UsageError(f"activation: expected one of {', '.join(str(x) for x in ACTIVATIONS)}, got {activation!r}")
    for name, t, shape in (("bias", bias, (n,)), ("residual", residual, (m, n))):
        if t is None:
            continue
        _validate.tensor(name, t)
        if tuple(t.shape) != shape or t.dtype != a.dtype or t.device != a.device:
            raise UsageError(f"{name}: expected shape {list(shape)}, dtype {str(a.dtype).removeprefix('torch.')} on "
                             f"{a.device}, got {list(t.shape)}, {str(t.dtype).removeprefix('torch.')} on {t.device}")
    fused = bias is not None or activation is not None or residual is not None
    if residual is not None and out is not None and residual.data_ptr() == out.data_ptr():
        raise UsageError("residual: must not be the out buffer")
    out = _validate.out_buffer(out, (m, n), a.dtype, a.device)
    if out.numel() == 0:
        return out
    rung = _validate.pick_rung(get_family("matmul"), variant, a.device.type, (m, n, k), {}, a.dtype)
    if k == 0 or (fused and rung.backend != "triton"):
        if k == 0:
            out.zero_()
        else:
            rung.load()(a, b, out=out)
        return _torch_epilogue(out, bias, activation, residual) if fused else out
    fn = rung.load()
    if rung.backend == "triton":
        if fused:
            from kernelwright.ops.matmul.triton import Epilogue

            return fn(a, b, out=out, allow_tf32=allow_tf32, epilogue=Epilogue(bias, activation, residual))
        return fn(a, b, out=out, allow_tf32=allow_tf32)
    return fn(a, b, out=out)
