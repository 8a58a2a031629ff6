"""rope: the family's registration. Sizes are ``BxSxHxKHxD`` (batch, sequence, q heads, kv heads, head dim) with
an optional sixth number T: angles from a [T, D] table through positions [B, S] instead of per-token rows [B, S, D].
The backward family ``rope_bwd`` shares inputs, shapes and tolerances from here."""

from __future__ import annotations

import dataclasses

import torch

from kernelwright.errors import UsageError
from kernelwright.harness.inputs import random_values, with_layout
from kernelwright.harness.sizes import format_dims, parse_dims
from kernelwright.ops import _peers
from kernelwright.ops.rope.reference import error_scale, rope
from kernelwright.ops.swiglu.spec import TOLERANCES as _ELEMENTWISE
from kernelwright.registry import Case, Family, Rung

_T = "kernelwright.ops.rope.triton"

RUNGS = (
    Rung(
        "naive", "triton", f"{_T}:rope_naive",
        "Hugging Face's eager q * cos + rotate_half(q) * sin as three kernels per tensor (rotate_half to an fp32 "
        "temporary, x * cos to another, the sum), q then k: in bf16 2 + 4 + 2 + 4 + 8 + 2 = 22 bytes an element "
        "against the minimum 4. Predicted: ~20-25% of the token rung.",
    ),
    Rung(
        "fused", "triton", f"{_T}:rope_fused",
        "One kernel per tensor, 16 (token, head) rows a program, the pair (x1, x2) rotated in registers: one read "
        "and one write of q and k; cos/sin re-read per head, mostly from L1/L2. Predicted: 75-85% of the copy "
        "ceiling in bf16 (two launches; with D = 128 each row is one 256-byte segment).",
    ),
    Rung(
        "token", "triton", f"{_T}:rope_token",
        "One kernel for q and k, one program per token: the token's cos/sin row is loaded once and applied to "
        "its H + KH heads as [heads, D/2] tiles (for Llama-8B 40 heads x 64 pairs). Predicted: >= 85% of the "
        "copy ceiling in bf16 on [B, S, H, D] tensors (each token's heads are one contiguous 10 KB block); on "
        "Hugging Face's [B, H, S, D] the heads of a token are S*D apart, still 256-byte segments: ~80%.",
    ),
)


def parse_size(text: str) -> tuple[int, ...]:
    dims = parse_dims(text, what="sizes")
    if len(dims) not in (5, 6) or dims[4] % 2:
        raise UsageError(f"sizes: expected BxSxHxKHxD[xT] with an even head dim D, got {text!r}")
    return dims


def _inv_freq(d: int, device) -> torch.Tensor:
    return 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float32, device=device) / d)  # [D/2]


def _tables(pos: torch.Tensor, d: int, dtype, interleaved: bool):
    """cos, sin of pos * inv_freq with the layout's duplication (Hugging Face: cat(freqs, freqs))."""
    freqs = pos.float()[..., None] * _inv_freq(d, pos.device)
    emb = freqs.repeat_interleave(2, -1) if interleaved else torch.cat((freqs, freqs), -1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def make_case(size, dtype, device, gen, dist="normal", layout="contiguous", interleaved=False,
              qk_layout="bhsd") -> Case:
    b, s, h, kh, d = size[:5]
    table = size[5] if len(size) > 5 else 0
    shape = (lambda heads: (b, heads, s, d)) if qk_layout == "bhsd" else (lambda heads: (b, s, heads, d))
    q = random_values(shape(h), dtype, device, gen, dist)
    k = random_values(shape(kh), dtype, device, gen, dist)
    if table:
        # positions into a [T, D] table (paged decoding, packed sequences): random, repeats allowed
        positions = torch.randint(0, table, (b, s), generator=gen, device=device)
        cos, sin = _tables(torch.arange(table, device=device), d, dtype, interleaved)
    else:
        # per-token rows [B, S, D] as Hugging Face's rotary embedding returns them; each sequence starts at a
        # random offset so that large angles are covered
        start = torch.randint(0, 4096, (b, 1), generator=gen, device=device)
        positions = None
        cos, sin = _tables(start + torch.arange(s, device=device), d, dtype, interleaved)
    args = (with_layout(q, layout), with_layout(k, layout), with_layout(cos, layout), with_layout(sin, layout),
            positions)
    kwargs = {"interleaved": interleaved, "qk_layout": qk_layout}
    label = format_dims(size) + "".join(f" {k}={v}" for k, v in kwargs.items() if v not in (False, "bhsd"))
    return Case(tuple(size), args, kwargs, label)


def cost(size, dtype) -> tuple[float, float]:
    b, s, h, kh, d = size[:5]
    n = b * s * (h + kh) * d
    angles = 2 * b * s * d  # one cos and one sin row per token
    item = torch.finfo(dtype).bits // 8
    return 3.0 * n, float((2 * n + angles) * item + (8 * b * s if len(size) > 5 else 0))


def fuzz() -> list[tuple[tuple[int, ...], dict]]:
    return [
        ((1, 1, 1, 1, 2), {}),                                           # one token, one pair
        ((2, 3, 4, 2, 16), {}),                                          # GQA: 2 q heads per kv head
        ((1, 7, 3, 3, 24), {}),                                          # D/2 = 12: padded pair index
        ((2, 3, 2, 1, 128), {"qk_layout": "bshd"}),                      # MQA, real head dim, [B, S, H, D]
        ((1, 4, 2, 2, 64), {"interleaved": True}),                       # pairs (2i, 2i + 1)
        ((2, 4, 4, 2, 32, 16), {}),                                      # positions into a 16-row table
        ((1, 5, 2, 1, 16, 9), {"interleaved": True, "qk_layout": "bshd"}),  # every switch at once
        ((0, 3, 2, 2, 8), {}),                                           # empty batch
        ((3, 2, 5, 1, 8), {"qk_layout": "bshd"}),                        # 5 heads: a padded head tile
        ((1, 3, 2, 2, 256), {}),                                         # head dim 256 (Gemma)
    ]


def sweep(device: str) -> list[tuple[int, ...]]:
    if device == "cuda":
        # Llama-3-8B (32 q heads, 8 kv heads, D = 128) at 16k-32k tokens, Llama-3-70B (64 / 8), a position table
        return [(1, 16384, 32, 8, 128), (4, 4096, 32, 8, 128), (16, 2048, 32, 8, 128), (2, 8192, 64, 8, 128),
                (4, 4096, 32, 8, 128, 8192)]
    return [(1, 64, 8, 2, 64), (2, 32, 4, 4, 128)]


# cancellation in x1 c1 - x2 s1 is covered by the error scale |x1| + |x2|: a few fp32 roundings of it
TOLERANCES = {dtype: dataclasses.replace(tol, acc=2**-21) for dtype, tol in _ELEMENTWISE.items()}


def _torch_rope(q, k, cos, sin, positions=None, interleaved=False, qk_layout="bhsd"):
    # Hugging Face's apply_rotary_pos_emb (its rotate_half), for the half-split layout it is written for
    if interleaved:
        raise ValueError("the Hugging Face formula is for the half-split layout")
    if positions is not None:
        cos, sin = cos[positions], sin[positions]
    unsqueeze = 1 if qk_layout == "bhsd" else 2
    cos, sin = cos.unsqueeze(unsqueeze), sin.unsqueeze(unsqueeze)

    def rotate_half(x):
        x1, x2 = x.chunk(2, -1)
        return torch.cat((-x2, x1), -1)

    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def _liger_rope():
    from liger_kernel.ops.rope import rope_forward

    def run(q, k, cos, sin, positions=None, interleaved=False, qk_layout="bhsd"):
        if positions is not None or interleaved or qk_layout != "bhsd":
            raise ValueError("Liger's rope takes Hugging Face's layout and per-token cos/sin only")
        qo, ko, _, _ = rope_forward(q, k, cos, sin)
        return qo, ko

    return run


FAMILY = Family(
    name="rope",
    summary="rotary position embedding of q and k (Hugging Face Llama's apply_rotary_pos_emb), forward",
    reference=rope,
    rungs=RUNGS,
    peers=(
        _peers.eager(_torch_rope),
        _peers.torch_compile(_torch_rope),
        _peers.optional_library("liger", "liger_kernel", _liger_rope),
    ),
    make_case=make_case,
    out_shape=lambda case: [tuple(case.args[0].shape), tuple(case.args[1].shape)],
    cost=cost,
    tolerances=TOLERANCES,
    sweep=sweep,
    fuzz=fuzz,
    parse_size=parse_size,
    format_size=format_dims,
    flop_unit="vector",
    baseline="torch",
    scale_axis=("tokens", lambda size: float(size[0] * size[1])),
    multi_output=True,
    error_scale=error_scale,
)
