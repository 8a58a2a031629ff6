"""Drop-in normalisation modules: :class:`RMSNorm` (parameter ``weight``, like Hugging Face's ``LlamaRMSNorm``
and Gemma's, so their state dicts load) and :class:`LayerNorm` (``weight`` and ``bias``, like
``torch.nn.LayerNorm``)."""

from __future__ import annotations

import math
import numbers

import torch

from kernelwright.errors import UsageError
from kernelwright.ops._norm_common import check_eps
from kernelwright.ops.layer_norm.api import layer_norm
from kernelwright.ops.rms_norm.api import rms_norm


class RMSNorm(torch.nn.Module):
    """RMSNorm over the last dim, forward and backward in kernelwright's Triton kernels.

    Parameters
    ----------
    hidden_size : int
        The normalised (last) dim.
    eps : float
        Added to the mean square (Llama and Gemma use 1e-6).
    offset : bool
        ``True``: scale by ``1 + weight``, the weight starting at zero (Gemma); ``False``: by ``weight``, starting
        at one (Llama).
    variant : str, optional
        A rung of the ``rms_norm`` family for the forward pass (``None``: the best for the width).
    device, dtype
        Of the weight. Inputs of another dtype are normalised with the weight cast to theirs (as
        ``LlamaRMSNorm`` casts its output), so a float32 weight serves bfloat16 activations.
    """

    def __init__(self, hidden_size: int, eps: float = 1e-6, offset: bool = False, *, variant: str | None = None,
                 device=None, dtype=None):
        super().__init__()
        if isinstance(hidden_size, bool) or not isinstance(hidden_size, int) or hidden_size < 1:
            raise UsageError(f"hidden_size: expected an int >= 1, got {hidden_size!r}")
        self.hidden_size = hidden_size
        self.eps = check_eps(eps)
        self.offset = bool(offset)
        self.variant = variant
        self.weight = torch.nn.Parameter(torch.empty(hidden_size, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        torch.nn.init.zeros_(self.weight) if self.offset else torch.nn.init.ones_(self.weight)

    @property
    def variance_epsilon(self) -> float:
        """``LlamaRMSNorm``'s name for ``eps``."""
        return self.eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight if self.weight.dtype == x.dtype else self.weight.to(x.dtype)
        return rms_norm(x, w, self.eps, self.offset, variant=self.variant)

    def extra_repr(self) -> str:
        return f"{self.hidden_size}, eps={self.eps}" + (", offset=True" if self.offset else "")


class LayerNorm(torch.nn.Module):
    """LayerNorm over the trailing ``normalized_shape`` dims, forward and backward in kernelwright's Triton
    kernels; the arguments, parameters and state dict of ``torch.nn.LayerNorm``.

    Parameters
    ----------
    normalized_shape : int or tuple of int
        The trailing dims to normalise over (several are flattened into one row).
    eps : float
        Added to the variance.
    elementwise_affine : bool
        ``False``: no weight and no bias (the kernels then scale by ones and add zeros).
    bias : bool
        ``False``: no bias parameter.
    variant : str, optional
        A rung of the ``layer_norm`` family for the forward pass.
    device, dtype
        Of the parameters; inputs of another dtype use the parameters cast to theirs.
    """

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True, *,
                 variant: str | None = None, device=None, dtype=None):
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, numbers.Integral) else tuple(normalized_shape)
        if not shape or any(isinstance(d, bool) or not isinstance(d, numbers.Integral) or d < 1 for d in shape):
            raise UsageError(f"normalized_shape: expected an int or a tuple of ints >= 1, got {normalized_shape!r}")
        self.normalized_shape = tuple(int(d) for d in shape)
        self.eps = check_eps(eps)
        self.elementwise_affine = bool(elementwise_affine)
        self.variant = variant
        kw = {"device": device, "dtype": dtype}
        if self.elementwise_affine:
            self.weight = torch.nn.Parameter(torch.empty(self.normalized_shape, **kw))
            self.bias = torch.nn.Parameter(torch.empty(self.normalized_shape, **kw)) if bias else None
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight is not None:
            torch.nn.init.ones_(self.weight)
        if self.bias is not None:
            torch.nn.init.zeros_(self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = len(self.normalized_shape)
        if tuple(x.shape[x.dim() - k:]) != self.normalized_shape or x.dim() < k:
            raise UsageError(f"x: expected trailing dims {self.normalized_shape}, got shape {tuple(x.shape)}")
        d = math.prod(self.normalized_shape)
        w = self.weight.reshape(d).to(x.dtype) if self.weight is not None else x.new_ones(d)
        b = self.bias.reshape(d).to(x.dtype) if self.bias is not None else x.new_zeros(d)
        y = layer_norm(x.reshape(*x.shape[:x.dim() - k], d), w, b, self.eps, variant=self.variant)
        return y.view(x.shape)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
