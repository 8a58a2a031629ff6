"""The calls a rewritten forward makes in place of the reference's ops: one wrapper per site kind.

Each wrapper takes the values the replaced nodes took (tensors, the norm's ``normalized_shape``, ``eps``, ...)
plus ``variant=`` (a rung name, or ``None`` for the family's own choice) and returns what the replaced nodes
returned, in the same dtype and shape. A wrapper never changes the result's meaning:

* a rung that refuses this input (a softmax row too wide for the ``fused`` rung at the evaluator's second
  problem size, a CUDA C rung on the CPU) is replaced by the family's choice (``variant=None``);
* an input the kernelwright op does not take (mixed dtypes, a matmul with a batched right operand, a causal mask
  that torch aligns top-left while ours aligns bottom-right with ``Sq != Skv``, ...) runs the original torch
  expression instead.

Both are decided from the op's :class:`~kernelwright.errors.UsageError` / :class:`~kernelwright.errors.Unavailable`
(raised while validating, before any kernel runs) or from explicit shape checks here, never by catching a kernel's
failure. Wrappers are plain functions: the rewritten forward calls them from generated code, and under
``torch.compile`` they trace like any Python function (the ops are ``torch.library`` custom ops).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import torch
import torch.nn.functional as F

import kernelwright.ops as kwops  # the ops' modules compile nothing until a rung runs
from kernelwright.errors import Unavailable, UsageError

FALLBACKS: Counter = Counter()
"""per process: ``(wrapper, "auto")`` each time a refused rung gave way to the family's choice, ``(wrapper,
"torch")`` each time the original torch expression ran instead (tests assert the kernels really ran)"""


def attempt(call: Callable[[str | None], object], variant: str | None, fallback: Callable[[], object],
            what: str = ""):
    """``call(variant)``; when the rung refuses this input or cannot run here, ``call(None)``; when the op does
    not take the input at all, ``fallback()`` (the reference's own torch expression)."""
    try:
        return call(variant)
    except Unavailable:
        if variant is not None:
            FALLBACKS[what, "auto"] += 1
            return attempt(call, None, fallback, what)
        FALLBACKS[what, "torch"] += 1
        return fallback()
    except UsageError as e:
        if variant is not None and str(e).startswith(f"variant {variant!r}"):
            FALLBACKS[what, "auto"] += 1
            return attempt(call, None, fallback, what)
        FALLBACKS[what, "torch"] += 1
        return fallback()


def _floats(*ts) -> bool:
    t0 = ts[0]
    return all(isinstance(t, torch.Tensor) and t.dtype == t0.dtype and t.device == t0.device
               and t.dtype in (torch.float32, torch.float16, torch.bfloat16) for t in ts)


# --- matmul family ------------------------------------------------------------------------------------------------
def kw_linear(x, weight, bias=None, *, variant=None):
    """``F.linear(x, weight, bias)``: x ``[..., K]`` flattened to ``[M, K]`` times ``weight.T`` ``[K, N]``
    (a transposed view: the matmul rungs take any strides), bias added to the fresh output."""
    def run(v):
        if not _floats(x, weight) or weight.dim() != 2 or x.dim() < 1 or (bias is not None and not _floats(x, bias)):
            raise UsageError("linear: not a floating 2-D weight of x's dtype")
        y = kwops.matmul(x.reshape(-1, x.shape[-1]), weight.t(), variant=v)
        if bias is not None:
            y.add_(bias)
        return y.reshape(*x.shape[:-1], weight.shape[0])

    return attempt(run, variant, lambda: F.linear(x, weight, bias), "kw_linear")


def _torch_linear_epilogue(x, weight, bias, activation, residual):
    from kernelwright.ops.matmul.api import apply_activation

    y = apply_activation(F.linear(x, weight, bias), activation)
    return y if residual is None else y + residual


CUBLASLT = "cublaslt"
"""The linear_epilogue site's variant outside the matmul ladder: cuBLASLt's fused bias + ReLU / tanh-GELU epilogue
(``torch._addmm_activation``), the vendor's answer to the same fusion."""

CUBLASLT_ACTIVATIONS = ("relu", "gelu_tanh")


def kw_linear_epilogue(x, weight, bias=None, activation=None, residual=None, *, variant=None):
    """``act(F.linear(x, weight, bias)) + residual`` as one product with a fused epilogue (``activation`` and
    ``residual`` may each be None); a residual that would broadcast rather than match the output runs torch.
    ``variant="cublaslt"``: cuBLASLt's bias + activation epilogue (CUDA, a bias, ReLU or tanh-GELU, no residual)."""
    def run(v):
        if v == CUBLASLT:
            if not (x.is_cuda and bias is not None and residual is None and activation in CUBLASLT_ACTIVATIONS
                    and _floats(x, weight, bias) and weight.dim() == 2 and x.dim() >= 1):
                raise UsageError(f"variant {CUBLASLT!r}: needs CUDA tensors, a bias, ReLU or tanh-GELU and no "
                                 "residual")
            y = torch._addmm_activation(bias, x.reshape(-1, x.shape[-1]), weight.t(),
                                        use_gelu=activation == "gelu_tanh")
            return y.reshape(*x.shape[:-1], weight.shape[0])
        if not _floats(x, weight) or weight.dim() != 2 or x.dim() < 1 or (bias is not None and not _floats(x, bias)):
            raise UsageError("linear: not a floating 2-D weight of x's dtype")
        shape = (*x.shape[:-1], weight.shape[0])
        if residual is not None and (not _floats(x, residual) or tuple(residual.shape) != shape):
            raise UsageError("linear: the residual does not match the output")
        res = None if residual is None else residual.reshape(-1, weight.shape[0])
        y = kwops.matmul(x.reshape(-1, x.shape[-1]), weight.t(), variant=v, bias=bias, activation=activation,
                         residual=res)
        return y.reshape(shape)

    return attempt(run, variant, lambda: _torch_linear_epilogue(x, weight, bias, activation, residual),
                   "kw_linear_epilogue")


def kw_matmul(a, b, *, variant=None):
    """``a @ b`` for a ``[..., M, K]`` and a 2-D b ``[K, N]`` (leading dims of a flattened into M); anything
    else (a batched b, a vector) is torch's matmul."""
    def run(v):
        if not _floats(a, b) or b.dim() != 2 or a.dim() < 2:
            raise UsageError("matmul: b is not 2-D")
        y = kwops.matmul(a.reshape(-1, a.shape[-1]), b, variant=v)
        return y.reshape(*a.shape[:-1], b.shape[1])

    return attempt(run, variant, lambda: torch.matmul(a, b), "kw_matmul")


# --- row ops ------------------------------------------------------------------------------------------------------
def kw_softmax(x, dim, *, variant=None):
    return attempt(lambda v: kwops.softmax(x, dim=dim, variant=v), variant, lambda: torch.softmax(x, dim),
                   "kw_softmax")


def kw_log_softmax(x, dim, *, variant=None):
    return attempt(lambda v: kwops.log_softmax(x, dim=dim, variant=v), variant, lambda: torch.log_softmax(x, dim),
                   "kw_log_softmax")


def _last_dim_only(x, normalized_shape) -> bool:
    if normalized_shape is None:
        return True
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    return len(ns) == 1 and int(ns[0]) == x.shape[-1]


def _eps(x, eps) -> float:
    return float(torch.finfo(x.dtype).eps) if eps is None else float(eps)


def _shape(x, normalized_shape):
    return (x.shape[-1],) if normalized_shape is None else normalized_shape


def kw_rms_norm(x, normalized_shape, weight, eps, *, variant=None):
    """``F.rms_norm(x, normalized_shape, weight, eps)`` over the last dim (``normalized_shape=None``: a
    hand-written ``x * rsqrt(mean(x^2) + eps) * w``)."""
    def run(v):
        if weight is None or not _last_dim_only(x, normalized_shape):
            raise UsageError("rms_norm: not a weighted norm over the last dim")
        return kwops.rms_norm(x, weight, _eps(x, eps), variant=v)

    return attempt(run, variant, lambda: F.rms_norm(x, _shape(x, normalized_shape), weight, eps), "kw_rms_norm")


def kw_layer_norm(x, normalized_shape, weight, bias, eps, *, variant=None):
    def run(v):
        if weight is None or bias is None or not _last_dim_only(x, normalized_shape):
            raise UsageError("layer_norm: not an affine norm over the last dim")
        return kwops.layer_norm(x, weight, bias, float(eps), variant=v)

    return attempt(run, variant, lambda: F.layer_norm(x, _shape(x, normalized_shape), weight, bias, eps),
                   "kw_layer_norm")


def kw_add_rms_norm(a, b, normalized_shape, weight, eps, keep_h=True, *, variant=None):
    """``h = a + b; y = rms_norm(h)`` in one pass; returns ``(y, h)``, or ``y`` alone with ``keep_h=False`` (h used
    by nothing else: never stored)."""
    def run(v):
        if weight is None or not _floats(a, b) or a.shape != b.shape or not _last_dim_only(a, normalized_shape):
            raise UsageError("add_rms_norm: not two same-shape tensors into a weighted last-dim norm")
        y, h = kwops.add_rms_norm(a, b, weight, _eps(a, eps), variant=v, keep_h=keep_h)
        return (y, h) if keep_h else y

    def fallback():
        h = a + b
        y = F.rms_norm(h, _shape(h, normalized_shape), weight, eps)
        return (y, h) if keep_h else y

    return attempt(run, variant, fallback, "kw_add_rms_norm")


# --- elementwise --------------------------------------------------------------------------------------------------
def kw_swiglu(gate, up, *, variant=None):
    def run(v):
        if not _floats(gate, up) or gate.shape != up.shape:
            raise UsageError("swiglu: gate and up differ in shape or dtype")
        return kwops.swiglu(gate, up, variant=v)

    return attempt(run, variant, lambda: F.silu(gate) * up, "kw_swiglu")


def _rotate_torch(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def kw_rope(x, cos, sin, *, variant=None):
    """``x * cos + rotate_half(x) * sin`` for one tensor ``[..., H, S, D]``. The rope op rotates q and k in one
    launch; a one-head slice of x stands in for k (1/H extra work)."""
    def run(v):
        if not isinstance(x, torch.Tensor) or x.dim() < 3:
            raise UsageError("rope: x is not [..., H, S, D]")
        return kwops.rope(x, x[..., :1, :, :], cos, sin, variant=v)[0]

    return attempt(run, variant, lambda: _rotate_torch(x, cos, sin), "kw_rope")


def kw_rope_pair(q, k, cos, sin, *, variant=None):
    """Two rotations sharing cos and sin (q and k of one attention) in one launch; returns ``(q_rot, k_rot)``."""
    def run(v):
        if not isinstance(q, torch.Tensor) or q.dim() < 3:
            raise UsageError("rope: q is not [..., H, S, D]")
        return tuple(kwops.rope(q, k, cos, sin, variant=v))

    return attempt(run, variant, lambda: (_rotate_torch(q, cos, sin), _rotate_torch(k, cos, sin)), "kw_rope_pair")


def kw_activation(x, kind, *, variant=None):
    """A standalone relu / silu / gelu / tanh-gelu of one tensor."""
    from kernelwright.ops.matmul.api import apply_activation

    def run(v):
        if not _floats(x):
            raise UsageError("activation: not a floating-point tensor")
        return kwops.activation(x, kind, variant=v)

    return attempt(run, variant, lambda: apply_activation(x, kind), "kw_activation")


def kw_add(a, b, *, variant=None):
    def run(v):
        if not _floats(a, b) or a.shape != b.shape:
            raise UsageError("add: not two same-shape tensors")
        return kwops.vector_add(a, b, variant=v)

    return attempt(run, variant, lambda: a + b, "kw_add")


# --- loss and attention -------------------------------------------------------------------------------------------
def kw_cross_entropy(logits, target, ignore_index, reduction, label_smoothing, upcast, *, variant=None):
    """``F.cross_entropy(logits.float() if upcast else logits, target, ...)``. The kernel reads bf16/fp16 logits
    as they are and accumulates in fp32, so ``upcast`` (the reference's ``.float()``) costs no copy. Forward only:
    run without autograd, so the kernel does not also write the logits' gradient (the loss carries none)."""
    def run(v):
        with torch.no_grad():
            loss = kwops.cross_entropy(logits, target, ignore_index, label_smoothing, reduction, variant=v,
                                        overwrite_logits=False)
        return loss if upcast or loss.dtype == logits.dtype else loss.to(logits.dtype)

    def fallback():
        return F.cross_entropy(logits.float() if upcast else logits, target, ignore_index=ignore_index,
                               reduction=reduction, label_smoothing=label_smoothing)

    return attempt(run, variant, fallback, "kw_cross_entropy")


def kw_attention(q, k, v, is_causal, scale, enable_gqa, *, variant=None):
    """``F.scaled_dot_product_attention(q, k, v, is_causal=..., scale=..., enable_gqa=...)`` without a mask or
    dropout. torch aligns the causal mask top-left, ours bottom-right: the same only when ``Sq == Skv``."""
    def run(var):
        if not hasattr(kwops, "attention"):
            raise UsageError("attention: no kernelwright.ops.attention here")
        if not _floats(q, k, v) or q.dim() != 4 or (is_causal and q.shape[-2] != k.shape[-2]) \
                or (q.shape[1] != k.shape[1] and not enable_gqa):
            raise UsageError("attention: not a [B, H, S, D] case the op computes the same way")
        return kwops.attention(q, k, v, causal=bool(is_causal), scale=scale, variant=var)

    return attempt(run, variant, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale,
                                                                        enable_gqa=enable_gqa), "kw_attention")
