"""Public op: ``kernelwright.ops.cross_entropy``, the loss of logits [N, V] against targets, differentiable.

The forward computes the loss and the gradient for dloss = 1 in one pass over the vocabulary; the backward only
scales that gradient by the incoming one. Layers: rung launchers -> :func:`cross_entropy_forward` ->
:class:`CrossEntropyFunction` (eager autograd; the gradient may overwrite the logits) -> the
``kernelwright::cross_entropy`` custom op (``torch.compile``; a new gradient buffer) -> :func:`cross_entropy`.
"""

from __future__ import annotations

import torch

from kernelwright.errors import UsageError
from kernelwright.ops import _validate
from kernelwright.ops.cross_entropy.reference import REDUCTIONS

INTS = (torch.int32, torch.int64)


def _family():
    from kernelwright.registry import get_family

    return get_family("cross_entropy")


def _check_target(target: torch.Tensor, n_classes: int, ignore_index: int) -> None:
    """Every target is a class or ignore_index (reads the values: one device sync; skipped while a CUDA graph is
    captured, where they do not exist yet)."""
    if target.numel() == 0 or (target.is_cuda and torch.cuda.is_current_stream_capturing()):
        return
    bad = (target != ignore_index) & ((target < 0) | (target >= n_classes))
    if bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        raise UsageError(f"target: expected class indices in [0, {n_classes}) or ignore_index={ignore_index}, "
                         f"got {int(target[i])} at row {i}")


def cross_entropy_forward(logits, target, ignore_index=-100, label_smoothing=0.0, reduction="mean", variant=None,
                          dlogits: torch.Tensor | None = None):
    """(loss, dlogits): the loss (float32) and, when ``dlogits`` is given (any [N, V] buffer of the logits' dtype,
    the logits themselves included), the gradient for dloss = 1 written into it. Checks target values only."""
    n, v = logits.shape
    _check_target(target, v, ignore_index)
    loss = torch.empty((n,) if reduction == "none" else (), dtype=torch.float32, device=logits.device)
    kwargs = {"ignore_index": ignore_index, "label_smoothing": label_smoothing, "reduction": reduction}
    rung = _validate.pick_rung(_family(), variant, logits.device.type, (n, v), kwargs, logits.dtype)
    return rung.load()(logits, target, out=(loss, dlogits), **kwargs)


class CrossEntropyFunction(torch.autograd.Function):
    """The forward writes the gradient for dloss = 1 (over the logits when ``overwrite``) and saves it; the
    backward scales it in place by the incoming gradient (no traffic when that is exactly 1)."""

    @staticmethod
    def forward(ctx, logits, target, ignore_index, label_smoothing, reduction, overwrite, variant):
        grad = logits if overwrite else torch.empty_like(logits)
        loss, grad = cross_entropy_forward(logits, target, ignore_index, label_smoothing, reduction, variant, grad)
        if overwrite:
            # the values changed behind autograd's back: an op that saved these logits for its own backward now
            # fails with autograd's "modified by an inplace operation" error instead of using the gradient
            torch.autograd.graph.increment_version(logits)
        ctx.save_for_backward(grad)
        return loss

    @staticmethod
    def backward(ctx, dloss):
        from kernelwright.ops.cross_entropy.triton import scale_rows_

        (grad,) = ctx.saved_tensors
        return scale_rows_(grad, dloss), None, None, None, None, None, None


@torch.library.custom_op("kernelwright::cross_entropy", mutates_args=())
def _cross_entropy_op(logits: torch.Tensor, target: torch.Tensor, ignore_index: int, label_smoothing: float,
                      reduction: str, variant: str | None, with_grad: bool) -> tuple[torch.Tensor, torch.Tensor]:
    grad = torch.empty_like(logits) if with_grad else logits.new_empty(0)
    loss, _ = cross_entropy_forward(logits, target, ignore_index, label_smoothing, reduction, variant,
                                    grad if with_grad else None)
    return loss, grad


@_cross_entropy_op.register_fake
def _(logits, target, ignore_index, label_smoothing, reduction, variant, with_grad):
    loss = logits.new_empty((logits.shape[0],) if reduction == "none" else (), dtype=torch.float32)
    return loss, (torch.empty_like(logits) if with_grad else logits.new_empty(0))


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(output[1])


def _op_backward(ctx, dloss, _dgrad):
    (grad,) = ctx.saved_tensors
    scale = dloss[:, None] if dloss.dim() else dloss
    return (grad.float() * scale).to(grad.dtype), None, None, None, None, None, None


_cross_entropy_op.register_autograd(_op_backward, setup_context=_setup_context)


def _check(logits, target, ignore_index, label_smoothing, reduction) -> None:
    _validate.tensor("logits", logits)
    if logits.dim() != 2:
        raise UsageError(f"logits: expected [N, V] (rows, classes), got shape {tuple(logits.shape)}")
    if logits.shape[1] == 0 and logits.shape[0]:
        raise UsageError("logits: expected at least one class (V >= 1), got V = 0")
    if not isinstance(target, torch.Tensor) or target.dtype not in INTS:
        what = str(target.dtype).removeprefix("torch.") if isinstance(target, torch.Tensor) else type(target).__name__
        raise UsageError(f"target: expected an int64 (or int32) tensor of class indices, got {what}")
    if target.shape != logits.shape[:1]:
        raise UsageError(f"target: expected shape ({logits.shape[0]},) (one class a row of logits), "
                         f"got {tuple(target.shape)}")
    if target.device != logits.device:
        raise UsageError(f"target: expected device {logits.device} like logits, got {target.device}")
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise UsageError(f"ignore_index: expected an int, got {type(ignore_index).__name__}")
    if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, (int, float)) \
            or not 0.0 <= label_smoothing <= 1.0:
        raise UsageError(f"label_smoothing: expected a float in [0, 1], got {label_smoothing!r}")
    if reduction not in REDUCTIONS:
        raise UsageError(f"reduction: expected one of {', '.join(REDUCTIONS)}, got {reduction!r}")


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100,
                  label_smoothing: float = 0.0, reduction: str = "mean", *, variant: str | None = None,
                  overwrite_logits: bool = True) -> torch.Tensor:
    """Cross-entropy loss of ``logits`` against class ``target``s, as ``torch.nn.functional.cross_entropy``.

    The vocabulary is streamed in chunks (online log-sum-exp): no float32 copy of the logits is made. When the
    logits require grad, the forward also writes the gradient for dloss = 1 and the backward only scales it.

    Parameters
    ----------
    logits : torch.Tensor
        ``[N, V]``, float32, float16 or bfloat16, CPU or CUDA, any strides. V up to 256k and beyond.
    target : torch.Tensor
        ``[N]`` int64 (or int32) class indices in ``[0, V)``, or ``ignore_index``; anything else is a
        :class:`~kernelwright.errors.UsageError` (checking reads the targets: one device sync).
    ignore_index : int
        Rows with this target have loss 0 and gradient 0 and do not count in the mean.
    label_smoothing : float
        In [0, 1]: the target distribution is ``(1 - eps) onehot + eps / V``.
    reduction : {"mean", "sum", "none"}
        "mean" divides by the number of rows not ignored; when every row is ignored the loss is 0 (torch: NaN)
        and the gradient 0.
    variant : str, optional
        A rung of the ``cross_entropy`` family: ``"naive"``, ``"online"``, ``"persistent"``, ``"split"``;
        ``None``: the best for the shape (split under 256 rows, else persistent).
    overwrite_logits : bool
        Only when logits require grad. True (default, as Liger): the gradient is written over the logits' storage,
        so fwd + bwd allocate only O(N) bytes beyond the logits (the loss and per-row scratch, 8 bytes a row);
        the logits' values are gone after the call, and an op that saved them for its own backward makes
        autograd raise (their version counter is bumped). False: the gradient gets a new logits-sized buffer.
        Under ``torch.compile`` the gradient always gets a new buffer (a custom op may not mutate and be
        differentiable).

    Returns
    -------
    torch.Tensor
        float32: a scalar for "mean" and "sum", ``[N]`` for "none".
    """
    _check(logits, target, ignore_index, label_smoothing, reduction)
    n, v = logits.shape
    kwargs = {"ignore_index": ignore_index, "label_smoothing": float(label_smoothing), "reduction": reduction}
    _validate.pick_rung(_family(), variant, logits.device.type, (n, v), kwargs, logits.dtype)
    grad = torch.is_grad_enabled() and logits.requires_grad
    if torch.compiler.is_compiling():
        return torch.ops.kernelwright.cross_entropy(logits, target, ignore_index, float(label_smoothing), reduction,
                                                    variant, grad)[0]
    if grad:
        return CrossEntropyFunction.apply(logits, target, ignore_index, float(label_smoothing), reduction,
                                          overwrite_logits, variant)
    return cross_entropy_forward(logits, target, ignore_index, float(label_smoothing), reduction, variant)[0]
