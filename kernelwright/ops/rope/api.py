"""Public op: ``kernelwright.ops.rope``, differentiable in q and k (backward: the ``rope_bwd`` family).

Layers: rung launchers -> :func:`rope_forward` / :func:`rope_backward` -> :class:`RopeFunction` (eager autograd)
-> the ``kernelwright::rope`` custom op (``torch.compile``) -> :func:`rope` (checks, dispatch).
"""

from __future__ import annotations

import math

import torch

from kernelwright.errors import UsageError
from kernelwright.ops import _validate

LAYOUTS = ("bhsd", "bshd")
INTS = (torch.int32, torch.int64)


def _family(name: str):
    from kernelwright.registry import get_family

    return get_family(name)


def _check_positions(positions: torch.Tensor | None, cos: torch.Tensor) -> None:
    """Position values must index rows of the tables (reads them: one device sync; skipped while a CUDA graph
    is captured, where the values do not exist yet)."""
    if positions is None or positions.numel() == 0:
        return
    if positions.is_cuda and torch.cuda.is_current_stream_capturing():
        return
    lo, hi = int(positions.min()), int(positions.max())
    if lo < 0 or hi >= cos.shape[0]:
        raise UsageError(f"cos: {cos.shape[0]} rows (and sin), shorter than the positions: positions hold values "
                         f"from {lo} to {hi}, expected 0 <= position < {cos.shape[0]}")


def _run(family: str, variant, x, y, cos, sin, positions, out, interleaved, qk_layout, check=True):
    if check:
        _check_positions(positions, cos)
    if out is None:
        out = (torch.empty(x.shape, dtype=x.dtype, device=x.device),
               torch.empty(y.shape, dtype=y.dtype, device=y.device))
    if x.numel() + y.numel() == 0:
        return out
    kwargs = {"interleaved": interleaved, "qk_layout": qk_layout}
    rung = _validate.pick_rung(_family(family), variant, x.device.type, _size(x, y, qk_layout), kwargs, x.dtype)
    return rung.load()(x, y, cos, sin, positions, out=out, **kwargs)


def _size(q, k, qk_layout) -> tuple[int, ...]:
    """The family's size spec ``(B, S, H, KH, D)`` of a call."""
    hd, sd = (-3, -2) if qk_layout == "bhsd" else (-2, -3)
    return (math.prod(q.shape[:-3]), q.shape[sd], q.shape[hd], k.shape[hd], q.shape[-1])


def rope_forward(q, k, cos, sin, positions=None, out=None, interleaved=False, qk_layout="bhsd", variant=None):
    """Rotated (q, k) into ``out`` (allocated when ``None``; ``(q, k)`` themselves for in place); no shape checks."""
    return _run("rope", variant, q, k, cos, sin, positions, out, interleaved, qk_layout)


def rope_backward(dq, dk, cos, sin, positions=None, out=None, interleaved=False, qk_layout="bhsd"):
    """(dq, dk) from the gradients of the rotated tensors: the transposed rotation; no checks (the forward checked
    the positions)."""
    return _run("rope_bwd", None, dq, dk, cos, sin, positions, out, interleaved, qk_layout, check=False)


class RopeFunction(torch.autograd.Function):
    """rope with its backward, out of place. cos and sin are constants (no gradient), as Hugging Face's rotary
    embedding computes them under no_grad. An unused output's gradient arrives as zeros (autograd materializes
    it)."""

    @staticmethod
    def forward(ctx, q, k, cos, sin, positions, interleaved, qk_layout, variant):
        ctx.save_for_backward(cos, sin, positions)
        ctx.cfg = (interleaved, qk_layout)
        return rope_forward(q, k, cos, sin, positions, None, interleaved, qk_layout, variant)

    @staticmethod
    def backward(ctx, dq, dk):
        cos, sin, positions = ctx.saved_tensors
        dq_in, dk_in = rope_backward(dq, dk, cos, sin, positions, None, *ctx.cfg)
        return dq_in, dk_in, None, None, None, None, None, None


@torch.library.custom_op("kernelwright::rope", mutates_args=())
def _rope_op(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor | None,
             interleaved: bool, qk_layout: str, variant: str | None) -> tuple[torch.Tensor, torch.Tensor]:
    return rope_forward(q, k, cos, sin, positions, None, interleaved, qk_layout, variant)


@torch.library.custom_op("kernelwright::rope_bwd", mutates_args=())
def _rope_bwd_op(dq: torch.Tensor, dk: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                 positions: torch.Tensor | None, interleaved: bool,
                 qk_layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    return rope_backward(dq, dk, cos, sin, positions, None, interleaved, qk_layout)


def _fake_pair(x, y, *args):
    return (torch.empty_like(x, memory_format=torch.contiguous_format),
            torch.empty_like(y, memory_format=torch.contiguous_format))


_rope_op.register_fake(_fake_pair)
_rope_bwd_op.register_fake(_fake_pair)


def _setup_context(ctx, inputs, output):
    _, _, cos, sin, positions, interleaved, qk_layout, _ = inputs
    ctx.save_for_backward(cos, sin, positions)
    ctx.cfg = (interleaved, qk_layout)


def _op_backward(ctx, dq, dk):
    cos, sin, positions = ctx.saved_tensors
    dq_in, dk_in = torch.ops.kernelwright.rope_bwd(dq, dk, cos, sin, positions, *ctx.cfg)
    return dq_in, dk_in, None, None, None, None, None, None


_rope_op.register_autograd(_op_backward, setup_context=_setup_context)


def _check(q, k, cos, sin, positions, interleaved, inplace, qk_layout) -> None:
    for name, t in (("q", q), ("k", k), ("cos", cos), ("sin", sin)):
        _validate.tensor(name, t)
    for name, flag in (("interleaved", interleaved), ("inplace", inplace)):
        if not isinstance(flag, bool):
            raise UsageError(f"{name}: expected a bool, got {type(flag).__name__}")
    if qk_layout not in LAYOUTS:
        raise UsageError(f"qk_layout: expected one of {', '.join(LAYOUTS)}, got {qk_layout!r}")
    if q.dim() < 3:
        raise UsageError(f"q: expected [..., H, S, D] ({qk_layout}), got shape {tuple(q.shape)}")
    if k.dim() != q.dim():
        raise UsageError(f"k: expected {q.dim()} dims like q, got shape {tuple(k.shape)}")
    if k.device != q.device or k.dtype != q.dtype:
        raise UsageError(f"k: expected {_name(q.dtype)} on {q.device} like q, got {_name(k.dtype)} on {k.device}")
    seq_dim = -2 if qk_layout == "bhsd" else -3
    seq, d = q.shape[seq_dim], q.shape[-1]
    if k.shape[:-3] != q.shape[:-3] or k.shape[seq_dim] != seq or k.shape[-1] != d:
        raise UsageError(f"k: expected the batch dims, sequence length and head dim of q {tuple(q.shape)} "
                         f"({qk_layout}), got shape {tuple(k.shape)}")
    if d % 2 or d == 0:
        raise UsageError(f"q: expected an even head dim (the last dim), got {d}")
    if cos.dtype not in (q.dtype, torch.float32):
        raise UsageError(f"cos: expected dtype {_name(q.dtype)} (like q) or float32, got {_name(cos.dtype)}")
    if sin.dtype != cos.dtype or sin.shape != cos.shape or sin.device != cos.device:
        raise UsageError(f"sin: expected {_name(cos.dtype)} of shape {tuple(cos.shape)} on {cos.device} like cos, "
                         f"got {_name(sin.dtype)} of shape {tuple(sin.shape)} on {sin.device}")
    if cos.device != q.device:
        raise UsageError(f"cos: expected device {q.device} like q, got {cos.device}")
    if cos.dim() < 2 or cos.shape[-1] not in (d, d // 2):
        raise UsageError(f"cos: expected [..., rows, D] or [..., rows, D/2] for the head dim D = {d} of q, "
                         f"got shape {tuple(cos.shape)}")
    lead = tuple(q.shape[:-3])
    if positions is None:
        if cos.shape[-2] < seq:
            raise UsageError(f"cos: {cos.shape[-2]} rows (and sin), shorter than the sequence length {seq} of q")
        if not _broadcasts(tuple(cos.shape[:-2]), lead):
            raise UsageError(f"cos: batch dims {tuple(cos.shape[:-2])} do not broadcast to q's batch dims {lead}")
        return
    if not isinstance(positions, torch.Tensor) or positions.dtype not in INTS:
        what = _name(positions.dtype) if isinstance(positions, torch.Tensor) else type(positions).__name__
        raise UsageError(f"positions: expected an int32 or int64 tensor, got {what}")
    if positions.device != q.device:
        raise UsageError(f"positions: expected device {q.device} like q, got {positions.device}")
    if positions.dim() < 1 or positions.shape[-1] != seq or not _broadcasts(tuple(positions.shape[:-1]), lead):
        raise UsageError(f"positions: expected [..., S] with S = {seq} and batch dims broadcasting to {lead}, "
                         f"got shape {tuple(positions.shape)}")
    if cos.dim() != 2:
        raise UsageError(f"cos: with positions, expected a table [rows, D], got shape {tuple(cos.shape)}")


def _broadcasts(small: tuple, big: tuple) -> bool:
    return len(small) <= len(big) and all(a in (1, b) for a, b in zip(reversed(small), reversed(big), strict=False))


def _name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
         positions: torch.Tensor | None = None, interleaved: bool = False, inplace: bool = False, *,
         qk_layout: str = "bhsd", variant: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary position embedding of q and k, computed in fp32, rounded once to q's dtype.

    For each pair of elements (x1, x2) of a head with angles (c1, s1) at x1's slot and (c2, s2) at x2's:
    ``y1 = x1 c1 - x2 s1``, ``y2 = x2 c2 + x1 s2``, i.e. Hugging Face's ``x * cos + rotate_half(x) * sin``.

    Parameters
    ----------
    q, k : torch.Tensor
        ``qk_layout="bhsd"`` (the default, Hugging Face's): q ``[..., H, S, D]``, k ``[..., KH, S, D]``;
        ``"bshd"`` (flash-attn, vLLM): q ``[..., S, H, D]``, k ``[..., S, KH, D]``. Same batch dims ``...``
        (any number), S and even D; KH may differ from H (GQA, MQA). float32, float16 or bfloat16, any strides.
    cos, sin : torch.Tensor
        Without ``positions``: ``[..., S', Dc]`` with batch dims broadcasting to q's (Hugging Face's
        ``[batch or 1, S, D]``, or ``[S, D]``); row s serves position s, ``S' >= S``. With ``positions``: tables
        ``[T, Dc]``. ``Dc = D`` (one angle per element, Hugging Face's ``cat(freqs, freqs)`` for half-split,
        ``repeat_interleave`` for interleaved) or ``Dc = D / 2`` (one angle per pair). q's dtype or float32.
        Treated as constants: no gradient flows to them.
    positions : torch.Tensor, optional
        int32/int64 ``[..., S]`` broadcasting to q's batch dims: the table row of each token. Checked against T
        (one device sync).
    interleaved : bool
        False: pairs (i, i + D/2) (``rotate_half``, Llama); True: pairs (2i, 2i + 1) (GPT-J, the RoPE paper).
    inplace : bool
        Write the result over q and k and return them. Without autograd the kernels write q and k directly;
        when q or k requires grad (and under ``torch.compile``) the result is computed out of place and copied
        in (``copy_``, which autograd records even on views: a multi-output in-place autograd.Function on views
        is not supported by PyTorch).
    qk_layout : {"bhsd", "bshd"}
        Where the heads dim is; see q, k.
    variant : str, optional
        A rung of the ``rope`` family: ``"naive"``, ``"fused"``, ``"token"``; ``None``: the best.

    Returns
    -------
    tuple of torch.Tensor
        (q_rotated, k_rotated): q's and k's shapes and dtype, contiguous (q and k themselves when in place).
    """
    _check(q, k, cos, sin, positions, interleaved, inplace, qk_layout)
    kwargs = {"interleaved": interleaved, "qk_layout": qk_layout}
    _validate.pick_rung(_family("rope"), variant, q.device.type, _size(q, k, qk_layout), kwargs, q.dtype)
    if torch.compiler.is_compiling():
        qo, ko = torch.ops.kernelwright.rope(q, k, cos, sin, positions, interleaved, qk_layout, variant)
    elif torch.is_grad_enabled() and (q.requires_grad or k.requires_grad):
        qo, ko = RopeFunction.apply(q, k, cos, sin, positions, interleaved, qk_layout, variant)
    else:
        return rope_forward(q, k, cos, sin, positions, (q, k) if inplace else None, interleaved, qk_layout,
                            variant)
    return (q.copy_(qo), k.copy_(ko)) if inplace else (qo, ko)
