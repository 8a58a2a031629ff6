"""Public ops: ``kernelwright.ops.attention`` (padded [B, H, S, D]) and ``kernelwright.ops.attention_varlen``
(packed sequences with cumulative offsets, as ``flash_attn_varlen_func``), and :func:`attention_forward`, the
stable entry point the backward (``kernelwright.ops.attention.autograd``) calls.

Causal masking is aligned to the bottom right: query ``i`` of a sequence with ``Sq`` queries and ``Skv`` keys
attends to keys ``j <= i + Skv - Sq`` (new tokens attending to a cache). Query rows that see no key at all
(``Sq > Skv`` with ``causal``, or ``Skv = 0``) return zeros and a log-sum-exp of ``-inf``, never NaN.
"""

from __future__ import annotations

import math

import torch

from kernelwright.errors import UsageError
from kernelwright.ops import _validate

MAX_HEAD_DIM = 256


def attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool, scale: float | None,
                      cu_seqlens_q: torch.Tensor | None = None, cu_seqlens_k: torch.Tensor | None = None,
                      max_seqlen_q: int | None = None, max_seqlen_k: int | None = None,
                      variant: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention forward with its log-sum-exp, by a rung of the ``attention`` family. Stable: the backward uses it.

    Inputs are taken as already checked (the public ops check them); no autograd graph is recorded.

    Parameters
    ----------
    q, k, v : torch.Tensor
        Padded layout (``cu_seqlens_q is None``): q ``[B, Hq, Sq, D]``, k and v ``[B, Hkv, Skv, D]``.
        Varlen layout: q ``[total_q, Hq, D]``, k and v ``[total_k, Hkv, D]``, sequence ``b`` being rows
        ``cu_seqlens[b]:cu_seqlens[b + 1]``. float16, bfloat16 or float32, one device, any strides;
        ``Hq % Hkv == 0`` (query head ``h`` reads kv head ``h // (Hq // Hkv)``); ``1 <= D <= 256``.
    causal : bool
        Bottom-right aligned per sequence: query ``i`` attends to keys ``j <= i + Lk - Lq``.
    scale : float or None
        Multiplies ``q . k`` before the softmax; ``None`` means ``1 / sqrt(D)``.
    cu_seqlens_q, cu_seqlens_k : torch.Tensor, optional
        int32 ``[B + 1]`` cumulative offsets (non-decreasing from 0; zero-length sequences allowed); both or neither.
    max_seqlen_q, max_seqlen_k : int, optional
        Longest sequence of each (sizes the grid); ``None`` reads them from the offsets (a device sync).
    variant : str, optional
        A rung name (``naive``, ``flash``, ``causal_skip``, ``exp2``, ``exp2_lazy``, ``pipelined``, ``tuned``, or
        ``split_kv`` for decoding: few query rows, a long cache); ``None`` takes the best.

    Returns
    -------
    o : torch.Tensor
        Contiguous, q's dtype: ``[B, Hq, Sq, D]`` (padded) or ``[total_q, Hq, D]`` (varlen).
        Zeros on query rows that attend to no key.
    lse : torch.Tensor
        Contiguous float32, NATURAL log: ``lse = log(sum_j exp(scale * q_i . k_j))`` over the keys row ``i``
        attends to (so ``P = exp(scale * q . k - lse)``); ``-inf`` on rows that attend to no key.
        ``[B, Hq, Sq]`` (padded) or ``[Hq, total_q]`` (varlen, as flash-attn's ``softmax_lse``).
    """
    from kernelwright.registry import get_family

    varlen = cu_seqlens_q is not None
    d = q.shape[-1]
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    if varlen:
        if max_seqlen_q is None:
            max_seqlen_q = _max_len(cu_seqlens_q)
        if max_seqlen_k is None:
            max_seqlen_k = _max_len(cu_seqlens_k)
        batch = cu_seqlens_q.shape[0] - 1
        size = (batch, q.shape[1], k.shape[1], max_seqlen_q, max_seqlen_k, d)
        o = torch.empty((q.shape[0], q.shape[1], d), dtype=q.dtype, device=q.device)
        lse = torch.empty((q.shape[1], q.shape[0]), dtype=torch.float32, device=q.device)
        args = (q, k, v, cu_seqlens_q, cu_seqlens_k)
        kwargs = {"causal": causal, "scale": scale, "max_seqlen_q": max_seqlen_q, "max_seqlen_k": max_seqlen_k}
    else:
        size = (q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], d)
        o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
        args = (q, k, v)
        kwargs = {"causal": causal, "scale": scale}
    from kernelwright.ops.attention.spec import encode

    size = encode(*size, causal=causal, varlen=varlen)
    rung = _validate.pick_rung(get_family("attention"), variant, q.device.type, size, kwargs, q.dtype)
    rung.load()(*args, out=o, lse=lse, **kwargs)
    return o, lse


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
              scale: float | None = None, return_lse: bool = False, variant: str | None = None):
    """Scaled dot-product attention ``softmax(scale * q @ k^T + mask) @ v`` of padded batches, one pass over k and
    v (FlashAttention's online softmax; the scores matrix is never stored except by the ``naive`` rung).

    Parameters
    ----------
    q : torch.Tensor
        ``[B, Hq, Sq, D]``: float16, bfloat16 or float32, CPU or CUDA, any strides; ``1 <= D <= 256``.
    k, v : torch.Tensor
        ``[B, Hkv, Skv, D]``, q's dtype and device; ``Hq`` a multiple of ``Hkv`` (MHA ``Hkv = Hq``, GQA, MQA
        ``Hkv = 1``). ``Sq`` and ``Skv`` may differ.
    causal : bool
        Mask aligned to the bottom right: query ``i`` attends to keys ``j <= i + Skv - Sq`` (a chunk of new tokens
        attending to a cache that ends with them). Rows with no key to attend to return zeros (lse ``-inf``).
    scale : float, optional
        Positive factor on ``q . k``; default ``1 / sqrt(D)``.
    return_lse : bool
        Also return the float32 log-sum-exp ``[B, Hq, Sq]`` (natural log) of the scaled, masked scores.
    variant : str, optional
        A rung of the ``attention`` family: ``"naive"``, ``"flash"``, ``"causal_skip"``, ``"exp2"``, ``"exp2_lazy"``,
        ``"pipelined"``, ``"tuned"``, ``"split_kv"`` (flash-decoding: for few query rows against a long cache);
        ``None`` takes the best one for the device.

    Returns
    -------
    torch.Tensor or (torch.Tensor, torch.Tensor)
        ``o`` ``[B, Hq, Sq, D]`` contiguous in q's dtype; with ``return_lse``, ``(o, lse)``.
        Differentiable in q, k and v when any of them requires grad.
    """
    _check_padded(q, k, v)
    causal, scale = _check_flags(causal, scale, return_lse, q.shape[-1])
    if _wants_grad(q, k, v):
        return _autograd()(q, k, v, causal=causal, scale=scale, cu_seqlens_q=None, cu_seqlens_k=None,
                           max_seqlen_q=None, max_seqlen_k=None, return_lse=return_lse)
    if torch.compiler.is_compiling():  # the custom op, opaque to Inductor (see autograd._attention_fwd_op)
        _autograd()  # registers it
        o, lse = torch.ops.kernelwright.attention_fwd(q, k, v, causal, scale, None, None, None, None, False, variant)
    else:
        o, lse = attention_forward(q, k, v, causal=causal, scale=scale, variant=variant)
    return (o, lse) if return_lse else o


def attention_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                     cu_seqlens_k: torch.Tensor, max_seqlen_q: int | None = None, max_seqlen_k: int | None = None,
                     *, causal: bool = False, scale: float | None = None, return_lse: bool = False,
                     variant: str | None = None):
    """Attention over a batch of sequences of different lengths packed without padding (``flash_attn_varlen_func``).

    Parameters
    ----------
    q : torch.Tensor
        ``[total_q, Hq, D]``: the queries of every sequence one after another; dtypes and devices as
        :func:`attention`.
    k, v : torch.Tensor
        ``[total_k, Hkv, D]``; ``Hq`` a multiple of ``Hkv``.
    cu_seqlens_q, cu_seqlens_k : torch.Tensor
        int32 (or int64) ``[B + 1]`` on q's device: sequence ``b`` is rows ``cu[b]:cu[b + 1]``. Non-decreasing from
        0 (a zero-length sequence is allowed), the last value equal to ``total_q`` (``total_k``).
    max_seqlen_q, max_seqlen_k : int, optional
        At least the longest sequence; ``None`` reads it from the offsets.
    causal, scale, return_lse, variant
        As in :func:`attention`; the causal mask is bottom-right aligned within each sequence.

    Returns
    -------
    torch.Tensor or (torch.Tensor, torch.Tensor)
        ``o`` ``[total_q, Hq, D]`` in q's dtype; with ``return_lse``, also the float32 ``lse`` ``[Hq, total_q]``.
    """
    _check_varlen(q, k, v)
    causal, scale = _check_flags(causal, scale, return_lse, q.shape[-1])
    cu_seqlens_q, max_seqlen_q = _check_offsets("cu_seqlens_q", cu_seqlens_q, q, "max_seqlen_q", max_seqlen_q)
    cu_seqlens_k, max_seqlen_k = _check_offsets("cu_seqlens_k", cu_seqlens_k, k, "max_seqlen_k", max_seqlen_k)
    if cu_seqlens_q.shape != cu_seqlens_k.shape:
        raise UsageError(f"cu_seqlens_k: expected {cu_seqlens_q.shape[0]} offsets like cu_seqlens_q (one more than "
                         f"the number of sequences), got {cu_seqlens_k.shape[0]}")
    if _wants_grad(q, k, v):
        return _autograd()(q, k, v, causal=causal, scale=scale, cu_seqlens_q=cu_seqlens_q,
                           cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
                           return_lse=return_lse)
    if torch.compiler.is_compiling():  # the custom op, opaque to Inductor (see autograd._attention_fwd_op)
        _autograd()  # registers it
        o, lse = torch.ops.kernelwright.attention_fwd(q, k, v, causal, scale, cu_seqlens_q, cu_seqlens_k,
                                                      max_seqlen_q, max_seqlen_k, False, variant)
    else:
        o, lse = attention_forward(q, k, v, causal=causal, scale=scale, cu_seqlens_q=cu_seqlens_q,
                                   cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
                                   variant=variant)
    return (o, lse) if return_lse else o


# --- checks: each error names the argument and what was expected --------------------------------------------------
def _wants_grad(*ts: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in ts)


def _autograd():
    try:
        from kernelwright.ops.attention.autograd import attention_autograd
    except ModuleNotFoundError as e:
        if e.name != "kernelwright.ops.attention.autograd":
            raise
        raise NotImplementedError("attention: the backward (kernelwright.ops.attention.autograd) is not available "
                                  "yet; call with tensors that do not require grad, or under torch.no_grad()") from None
    return attention_autograd


def _check_common(q, k, v, rank: int, layout: str) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        _validate.tensor(name, t)
        if t.dim() != rank:
            raise UsageError(f"{name}: expected a {rank}-D tensor {layout}, got {t.dim()}-D with shape "
                             f"{tuple(t.shape)}")
    for name, t in (("k", k), ("v", v)):
        if t.device != q.device:
            raise UsageError(f"{name}: expected device {q.device} like q, got {t.device}")
        if t.dtype != q.dtype:
            raise UsageError(f"{name}: expected dtype {str(q.dtype).removeprefix('torch.')} like q, got "
                             f"{str(t.dtype).removeprefix('torch.')}")
        if t.shape[-1] != q.shape[-1]:
            raise UsageError(f"{name}: expected head dim D = {q.shape[-1]} like q (last dim), got {t.shape[-1]}")
    d = q.shape[-1]
    if not 1 <= d <= MAX_HEAD_DIM:
        raise UsageError(f"q: head dim D = {d} is not supported; expected 1 <= D <= {MAX_HEAD_DIM}")
    if v.shape != k.shape:
        raise UsageError(f"v: expected shape {tuple(k.shape)} like k, got {tuple(v.shape)}")


def _check_heads(hq: int, hkv: int) -> None:
    if hkv == 0 or hq % hkv:
        raise UsageError(f"k: expected a number of heads that divides q's {hq} (MHA, GQA or MQA), got {hkv}")


def _check_padded(q, k, v) -> None:
    _check_common(q, k, v, 4, "[B, H, S, D]")
    if k.shape[0] != q.shape[0]:
        raise UsageError(f"k: expected batch size {q.shape[0]} like q (dim 0), got {k.shape[0]}")
    _check_heads(q.shape[1], k.shape[1])


def _check_varlen(q, k, v) -> None:
    _check_common(q, k, v, 3, "[total_tokens, H, D]")
    _check_heads(q.shape[1], k.shape[1])


def _check_flags(causal, scale, return_lse, d: int) -> tuple[bool, float]:
    if not isinstance(causal, bool):
        raise UsageError(f"causal: expected a bool, got {type(causal).__name__}")
    if not isinstance(return_lse, bool):
        raise UsageError(f"return_lse: expected a bool, got {type(return_lse).__name__}")
    if scale is None:
        return causal, 1.0 / math.sqrt(d)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
        raise UsageError(f"scale: expected a positive finite number (or None for 1/sqrt(D)), got {scale!r}")
    return causal, float(scale)


def _max_len(cu: torch.Tensor) -> int:
    return int((cu[1:] - cu[:-1]).max()) if cu.numel() > 1 else 0


def _check_offsets(name: str, cu, x: torch.Tensor, max_name: str, max_len) -> tuple[torch.Tensor, int]:
    """Checked int32 offsets (a device sync: the values are read) and the longest sequence."""
    if not isinstance(cu, torch.Tensor):
        raise UsageError(f"{name}: expected a torch.Tensor of int32 offsets, got {type(cu).__name__}")
    if cu.dtype not in (torch.int32, torch.int64):
        raise UsageError(f"{name}: expected dtype int32 (or int64), got {str(cu.dtype).removeprefix('torch.')}")
    if cu.device != x.device:
        raise UsageError(f"{name}: expected device {x.device} like q, got {cu.device}")
    if cu.dim() != 1 or cu.shape[0] < 2:
        raise UsageError(f"{name}: expected a 1-D tensor [B + 1] with B >= 1, got shape {tuple(cu.shape)}")
    host = cu.tolist()
    if host[0] != 0 or any(b < a for a, b in zip(host, host[1:], strict=False)):
        raise UsageError(f"{name}: expected non-decreasing offsets starting at 0, got {_short(host)}")
    if host[-1] != x.shape[0]:
        raise UsageError(f"{name}: expected the last offset to equal the packed length {x.shape[0]} (dim 0), got "
                         f"{host[-1]}")
    longest = max(b - a for a, b in zip(host, host[1:], strict=False))
    if max_len is None:
        max_len = longest
    elif isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < longest:
        raise UsageError(f"{max_name}: expected an int >= the longest sequence ({longest}), got {max_len!r}")
    return cu.to(torch.int32).contiguous(), max_len


def _short(values: list[int]) -> str:
    return str(values) if len(values) <= 12 else f"[{', '.join(map(str, values[:12]))}, ...]"
