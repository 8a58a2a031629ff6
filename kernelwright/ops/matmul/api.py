"""Public op: ``kernelwright.ops.matmul``."""

from __future__ import annotations

import torch

from kernelwright.errors import UsageError
from kernelwright.ops import _validate


def matmul(a: torch.Tensor, b: torch.Tensor, *, variant: str | None = None, allow_tf32: bool = False,
           out: torch.Tensor | None = None) -> torch.Tensor:
    """Matrix product ``a @ b`` with fp32 accumulation.

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
    out = _validate.out_buffer(out, (m, n), a.dtype, a.device)
    if out.numel() == 0:
        return out
    if k == 0:
        return out.zero_()
    rung = _validate.pick_rung(get_family("matmul"), variant, a.device.type, (m, n, k), {}, a.dtype)
    fn = rung.load()
    if rung.backend == "triton":
        return fn(a, b, out=out, allow_tf32=allow_tf32)
    return fn(a, b, out=out)
