"""Differentiable attention: the custom ops ``kernelwright::attention_fwd`` (the forward family's best rung, saving
o and lse) and ``kernelwright::attention_bwd`` (the ``attention_bwd`` family: dq, dk, dv by recomputation from the
saved log-sum-exp), both with fake (meta) functions so ``torch.compile`` traces through them, the autograd formula
tying them together, and :class:`AttentionFunction` for code written against an ``autograd.Function``.

:func:`attention_autograd` is what ``kernelwright.ops.attention`` and ``attention_varlen`` call when an input
requires grad; inputs arrive checked by those ops.
"""

from __future__ import annotations

import math

import torch

from kernelwright.errors import UsageError
from kernelwright.ops import _validate


def _forward(q, k, v, causal, scale, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, variant=None):
    from kernelwright.ops.attention.api import attention_forward

    return attention_forward(q, k, v, causal=causal, scale=scale, cu_seqlens_q=cu_seqlens_q,
                             cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
                             variant=variant)


def attention_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                       lse: torch.Tensor, *, causal: bool, scale: float | None = None, dlse: torch.Tensor | None = None,
                       cu_seqlens_q: torch.Tensor | None = None, cu_seqlens_k: torch.Tensor | None = None,
                       max_seqlen_q: int | None = None, max_seqlen_k: int | None = None, deterministic: bool = False,
                       variant: str | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv of attention by a rung of the ``attention_bwd`` family. q, k, v and the flags are taken as
    checked by the forward's op (``kernelwright.ops.attention``); o, dO, lse and dlse are checked here.

    Parameters
    ----------
    do : torch.Tensor
        Gradient of o: o's shape, q's dtype, any strides.
    q, k, v, o, lse : torch.Tensor
        The forward's inputs and what it saved: padded q, o ``[B, Hq, Sq, D]``, k, v ``[B, Hkv, Skv, D]``, lse
        float32 ``[B, Hq, Sq]``; packed q, o ``[Tq, Hq, D]``, k, v ``[Tk, Hkv, D]``, lse ``[Hq, Tq]`` (natural log,
        -inf on rows that attend to no key).
    causal, scale, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k
        The forward's arguments (``scale`` None: 1/sqrt(D)).
    dlse : torch.Tensor, optional
        Gradient of lse when the caller used it (``return_lse=True``): lse's shape, float32.
    deterministic : bool
        Every rung is deterministic (no atomics: the same inputs give the same bits). ``True`` also pins the
        ``fa2`` rung's fixed configs, so the bits do not depend on a tuning cache either (the same on every run
        of every process on a given GPU model).
    variant : str, optional
        A rung (``naive``, ``fa2``, ``tuned``); ``None`` takes the family's best (``fa2`` with ``deterministic``).

    Returns
    -------
    (dq, dk, dv) : tuple of torch.Tensor
        Contiguous, like q, k, v. Rows that attend to no key get dq = 0; keys no query attends get dk = dv = 0.
    """
    from kernelwright.ops.attention import spec as fwd
    from kernelwright.registry import get_family

    varlen = cu_seqlens_q is not None
    _check_saved(do, q, o, lse, dlse, varlen)
    if do.stride(-1) != 1:
        do = do.contiguous()  # the kernels take any strides; a unit dim stride keeps their loads vectorized
    dq, dk, dv = (torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in (q, k, v))
    if varlen:
        if max_seqlen_q is None or max_seqlen_k is None:
            lens_q, lens_k = torch.diff(cu_seqlens_q), torch.diff(cu_seqlens_k)
            max_seqlen_q = int(lens_q.max()) if lens_q.numel() else 0
            max_seqlen_k = int(lens_k.max()) if lens_k.numel() else 0
        size = fwd.encode(cu_seqlens_q.shape[0] - 1, q.shape[1], k.shape[1], max_seqlen_q, max_seqlen_k,
                          q.shape[-1], causal=causal, varlen=True)
    else:
        size = fwd.encode(q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[-1], causal=causal)
    if variant is None and deterministic:
        variant = "fa2"
    fam = get_family("attention_bwd")
    kwargs = {"causal": causal, "scale": scale, "cu_seqlens_q": cu_seqlens_q, "cu_seqlens_k": cu_seqlens_k,
              "max_seqlen_q": max_seqlen_q, "max_seqlen_k": max_seqlen_k}
    rung = _validate.pick_rung(fam, variant, q.device.type, size, kwargs, q.dtype)
    return rung.load()(q, k, v, o, lse, do, out=(dq, dk, dv), dlse=dlse, **kwargs)


def _check_saved(do, q, o, lse, dlse, varlen: bool) -> None:
    """What the backward reads besides q, k, v (checked by the forward's op): o and dO like the forward's output,
    lse (and its gradient) float32 with one value per query row and head. Shapes only: no device sync."""
    for name, t in (("o", o), ("do", do)):
        _validate.tensor(name, t)
        if tuple(t.shape) != tuple(q.shape) or t.dtype != q.dtype or t.device != q.device:
            raise UsageError(f"{name}: expected {str(q.dtype).removeprefix('torch.')} {tuple(q.shape)} on "
                             f"{q.device} like q (the forward's output), got {str(t.dtype).removeprefix('torch.')} "
                             f"{tuple(t.shape)} on {t.device}")
    want = (q.shape[1], q.shape[0]) if varlen else tuple(q.shape[:3])
    for name, t in (("lse", lse), ("dlse", dlse)):
        if t is None:
            continue
        _validate.tensor(name, t, (torch.float32,))
        if tuple(t.shape) != tuple(want) or t.device != q.device:
            raise UsageError(f"{name}: expected float32 {tuple(want)} on {q.device} (one log-sum-exp per query row "
                             f"and head, as the forward returns it), got {tuple(t.shape)} on {t.device}")


# --- custom ops (torch.compile sees these, with their fakes) --------------------------------------------------------
@torch.library.custom_op("kernelwright::attention_fwd", mutates_args=())
def _attention_fwd_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
                      cu_seqlens_q: torch.Tensor | None, cu_seqlens_k: torch.Tensor | None, max_seqlen_q: int | None,
                      max_seqlen_k: int | None, deterministic: bool,
                      variant: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(o, lse); ``deterministic`` is for the backward (recorded with the saved tensors); ``variant`` picks the
    forward's rung (the no-grad call under ``torch.compile`` comes here too: traced into, the Triton launch would be
    recompiled by Inductor with the float scale as fp64, which the kernel's loop-carried types refuse)."""
    return _forward(q, k, v, causal, scale, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, variant)


@_attention_fwd_op.register_fake
def _(q, k, v, causal, scale, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, deterministic, variant=None):
    lse_shape = (q.shape[1], q.shape[0]) if cu_seqlens_q is not None else q.shape[:3]
    return q.new_empty(q.shape), q.new_empty(lse_shape, dtype=torch.float32)


@torch.library.custom_op("kernelwright::attention_bwd", mutates_args=())
def _attention_bwd_op(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                      lse: torch.Tensor, dlse: torch.Tensor | None, causal: bool, scale: float,
                      cu_seqlens_q: torch.Tensor | None, cu_seqlens_k: torch.Tensor | None, max_seqlen_q: int | None,
                      max_seqlen_k: int | None, deterministic: bool
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return attention_backward(do, q, k, v, o, lse, causal=causal, scale=scale, dlse=dlse, cu_seqlens_q=cu_seqlens_q,
                              cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
                              deterministic=deterministic)


@_attention_bwd_op.register_fake
def _(do, q, k, v, o, lse, dlse, causal, scale, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
      deterministic):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    q, k, v, causal, scale, cu_q, cu_k, max_q, max_k, deterministic, *_ = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, cu_q, cu_k)
    ctx.causal, ctx.scale, ctx.max_q, ctx.max_k, ctx.deterministic = causal, scale, max_q, max_k, deterministic


def _backward(ctx, do, dlse):
    q, k, v, o, lse, cu_q, cu_k = ctx.saved_tensors
    if do is None:  # only lse was used
        do = torch.zeros_like(o)
    dq, dk, dv = torch.ops.kernelwright.attention_bwd(do, q, k, v, o, lse, dlse, ctx.causal, ctx.scale, cu_q, cu_k,
                                                      ctx.max_q, ctx.max_k, ctx.deterministic)
    return dq, dk, dv, None, None, None, None, None, None, None, None


_attention_fwd_op.register_autograd(_backward, setup_context=_setup_context)


class AttentionFunction(torch.autograd.Function):
    """``AttentionFunction.apply(q, k, v, causal, scale, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
    deterministic)`` -> (o, lse): the same kernels as :func:`attention_autograd`, as an ``autograd.Function`` (the
    forward saves q, k, v, o and lse; the backward recomputes P from lse)."""

    @staticmethod
    def forward(ctx, q, k, v, causal=False, scale=None, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None,
                max_seqlen_k=None, deterministic=False):
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
        o, lse = _forward(q, k, v, causal, scale, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
        _setup_context(ctx, (q, k, v, causal, scale, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                             deterministic), (o, lse))
        return o, lse

    @staticmethod
    def backward(ctx, do, dlse):
        q, k, v, o, lse, cu_q, cu_k = ctx.saved_tensors
        if do is None:
            do = torch.zeros_like(o)
        dq, dk, dv = attention_backward(do, q, k, v, o, lse, causal=ctx.causal, scale=ctx.scale, dlse=dlse,
                                        cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=ctx.max_q,
                                        max_seqlen_k=ctx.max_k, deterministic=ctx.deterministic)
        return dq, dk, dv, None, None, None, None, None, None, None, None


def attention_autograd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                       scale: float | None = None, cu_seqlens_q: torch.Tensor | None = None,
                       cu_seqlens_k: torch.Tensor | None = None, max_seqlen_q: int | None = None,
                       max_seqlen_k: int | None = None, return_lse: bool = False, deterministic: bool = False):
    """Differentiable attention: forward by the ``attention`` family, backward (dq, dk, dv, and through lse when
    it is returned and used) by the ``attention_bwd`` family, through the custom op ``kernelwright::attention_fwd``
    so eager autograd and ``torch.compile`` share one path.

    Parameters
    ----------
    q, k, v : torch.Tensor
        Padded q ``[B, Hq, Sq, D]``, k, v ``[B, Hkv, Skv, D]``, or packed q ``[Tq, Hq, D]``, k, v ``[Tk, Hkv, D]``
        with ``cu_seqlens_q/k``; float16, bfloat16 or float32 (checked by the calling op).
    causal : bool
        Bottom-right aligned per sequence (query i sees keys j <= i + Skv - Sq).
    scale : float, optional
        On q . k; default 1/sqrt(D).
    cu_seqlens_q, cu_seqlens_k : torch.Tensor, optional
        int32 ``[B + 1]`` offsets of packed sequences; ``max_seqlen_q/k`` their longest (read from them if None).
    return_lse : bool
        Also return the float32 lse (``[B, Hq, Sq]`` or ``[Hq, Tq]``), itself differentiable.
    deterministic : bool
        Bitwise-reproducible gradients across runs and processes (see :func:`attention_backward`; every rung is
        already run-to-run deterministic: there are no atomics).

    Returns
    -------
    torch.Tensor or (torch.Tensor, torch.Tensor)
        o (q's shape and dtype, contiguous), and lse with ``return_lse``.
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    if cu_seqlens_q is not None and (max_seqlen_q is None or max_seqlen_k is None) \
            and not torch.compiler.is_compiling():
        max_seqlen_q = max_seqlen_q if max_seqlen_q is not None else int(torch.diff(cu_seqlens_q).max())
        max_seqlen_k = max_seqlen_k if max_seqlen_k is not None else int(torch.diff(cu_seqlens_k).max())
    o, lse = torch.ops.kernelwright.attention_fwd(q, k, v, bool(causal), scale, cu_seqlens_q, cu_seqlens_k,
                                                  max_seqlen_q, max_seqlen_k, bool(deterministic))
    return (o, lse) if return_lse else o
