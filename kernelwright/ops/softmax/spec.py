"""softmax: the family's registration (rungs, inputs, cost, tolerances, sweep)."""

from __future__ import annotations

import math

import torch

from kernelwright.harness.inputs import random_values, with_layout
from kernelwright.harness.sizes import format_dims, parse_dims
from kernelwright.ops import _peers
from kernelwright.ops.softmax.reference import softmax
from kernelwright.registry import Case, Family, Rung, Tolerance

_T = "kernelwright.ops.softmax.triton"
FUSED_MAX_COLS = 32768  # fp32 values of one row held by <= 1024 threads: 32 registers each


def fused_limit(size: tuple[int, ...], kwargs: dict) -> str | None:
    d = size[kwargs.get("dim", -1)] if size else 1
    if d > FUSED_MAX_COLS:
        return f"fused: a row of {d} columns exceeds {FUSED_MAX_COLS} (the whole row must fit in registers)"
    return None


def _cuda_limit(size: tuple[int, ...], kwargs: dict) -> str | None:
    from kernelwright.ops.softmax import cuda

    return cuda.limit(size, kwargs)


RUNGS = (
    Rung(
        "multipass", "triton", f"{_T}:softmax_multipass",
        "Five kernels, as eager code without fusion would run them: row max, subtract, exp, row sum, divide, "
        "with fp32 intermediates. Traffic: 4 reads and 3 writes of the tensor, 2 of them at fp32 width. "
        "Predicted: about 1/4 to 1/6 of the fused rung in bf16.",
    ),
    Rung(
        "fused", "triton", f"{_T}:softmax_fused",
        "One program per row keeps the whole row in registers: one read, one write, no intermediates in "
        "memory. Predicted: >= 85% of the copy ceiling for rows of 1k-32k columns, 4-6x the multipass rung. "
        f"Rows wider than {FUSED_MAX_COLS} do not fit in registers.",
        limit=fused_limit,
    ),
    Rung(
        "online", "triton", f"{_T}:softmax_online",
        "Any row width: stream the row in 4096-column chunks keeping a running max and a rescaled sum, then "
        "stream it again to write. Reads the row twice; the second read comes from L2 only while the rows in "
        "flight fit there. Predicted: near the fused rung up to ~64k columns, falling towards 2/3 of the "
        "ceiling on very wide rows (three tensor passes through HBM).",
    ),
    Rung(
        "split", "triton", f"{_T}:softmax_split",
        "Wide rows split over cooperating programs, 8-16k columns each held in registers. Each program publishes "
        "its chunk's (max, sum) as one packed 64-bit relaxed atomic, one row ahead of waiting for its partners', "
        "and prefetches the row after; the persistent grid is sized by an occupancy calculation so every partner "
        "is resident. One read, one write at any width. Predicted: >= 85% of the copy ceiling at 64k and 256k "
        "columns, where online pays a second read.",
    ),
    Rung(
        "cluster", "cuda", "kernelwright.ops.softmax.cuda:softmax_cluster",
        "CUDA C for Hopper: a row split over the 1-16 CTAs of a thread-block cluster (past 8 a non-portable size "
        "set at launch), each holding its chunk in registers (64 bf16 values a thread, 16-byte loads); the CTAs' "
        "(max, sum) partials meet in distributed shared memory at one hardware cluster barrier instead of the split "
        "rung's global-memory words and spinning loads, and since a cluster's CTAs are co-scheduled there is no "
        "persistent grid: a CTA loads, reduces, trades, writes and exits, and the next cluster takes its place. "
        "Predicted: 3.7-3.9 TB/s at 4096x65536 and 3.6-3.8 at 1024x262144, bf16, above split's 3.58 / 3.44. H200: "
        "with CTAs of 512 and clusters of 8 at most, 3.70 / 3.34 (run 52; 2 CTAs an SM reduce and wait in step); "
        "with CTAs of 256 (4 an SM) and clusters to 16, 3.81 / 3.52 (run 53); with CTAs of 512 holding half their "
        "chunk in shared memory (cp.async), 4.01 / 3.80, 1.84x / 1.98x torch (run 58): confirmed (journal "
        "softmax.md, sessions 12-14).",
        needs="hopper", limit=_cuda_limit, artifacts="kernelwright.ops.softmax.cuda:inspect_artifacts",
    ),
)


def make_case(size, dtype, device, gen, dist="normal", layout="contiguous", dim=-1) -> Case:
    x = with_layout(random_values(size, dtype, device, gen, dist), layout)
    label = format_dims(size) + ("" if dim in (-1, len(size) - 1) else f" dim={dim}")
    return Case(tuple(size), (x,), {"dim": dim}, label)


def cost(size, dtype) -> tuple[float, float]:
    n = math.prod(size)
    # max, subtract, exp, sum, scale: ~5 operations an element; read x once, write y once
    return 5.0 * n, float(2 * n * torch.finfo(dtype).bits // 8)


def fuzz() -> list[tuple[tuple[int, ...], dict]]:
    return [
        ((0, 5), {}),                # empty: returns empty
        ((1, 1), {}),                # one element: exactly 1.0
        ((3, 127), {}),              # prime width, under one block
        ((5, 131), {}),              # prime width, just over a power of two
        ((2, 4097), {}),             # one past the online chunk: a one-column tail chunk
        ((17, 1000), {}),            # non-power-of-two width, odd row count
        ((4, 12289), {}),            # three online chunks plus one column
        ((33, 7), {"dim": 0}),       # softmax over the first dim: strided rows
        ((4, 3, 33), {"dim": 1}),    # 3-D, middle dim
        ((2, 3, 5, 64), {}),         # 4-D, last dim
    ]


def sweep(device: str) -> list[tuple[int, ...]]:
    if device == "cuda":
        return [(32768, 4096), (16384, 8192), (4096, 65536), (1024, 262144)]
    return [(64, 1024), (16, 8192), (4, 65536)]


def _torch_softmax(x, dim=-1):
    return torch.softmax(x, dim)


def _liger_softmax():
    from liger_kernel.ops.softmax import LigerSoftmaxFunction

    def run(x, dim=-1):
        if dim not in (-1, x.dim() - 1):
            raise ValueError("Liger's softmax normalizes the last dim only")
        return LigerSoftmaxFunction.apply(x)

    return run


CLUSTER_AUTO = True
"""``auto`` takes the cluster rung (Hopper only; rows of up to 262144 columns, a multiple of 8) for rows too wide
for the fused rung, ahead of split: H200 run 58, bf16, 4.01 / 3.80 TB/s at 4096x65536 / 1024x262144 against
split's 3.59 / 3.47; fp32 4.05 against 3.41 at 65536, but 3.34 against 3.40 at 262144 (clusters of 16), so fp32
rows past 131072 columns (where its clusters pass 8 CTAs) keep split. Off: split."""


def choose(size, kwargs, dtype=None) -> list[str]:
    # fused is simplest and best while a row fits in registers; wider rows go to the cluster rung on Hopper (its
    # 16-byte path: widths a multiple of 8), else split (one read)
    if not fused_limit(size, kwargs):
        return ["fused", "split", "online", "multipass"]
    n = size[kwargs.get("dim", -1)] if size else 1
    cluster = CLUSTER_AUTO and n % 8 == 0 and not (dtype == torch.float32 and n > 131072)
    return (["cluster"] if cluster else []) + ["split", "online", "multipass"]


FAMILY = Family(
    name="softmax",
    summary="softmax over any dim of an N-d tensor, forward: a row reduction that must stay memory-bound",
    reference=softmax,
    rungs=RUNGS,
    peers=(
        _peers.eager(_torch_softmax),
        _peers.torch_compile(_torch_softmax),
        _peers.optional_library("liger", "liger_kernel", _liger_softmax),
    ),
    make_case=make_case,
    out_shape=lambda case: tuple(case.args[0].shape),
    cost=cost,
    tolerances={
        # outputs in [0, 1], computed in fp32 then rounded once: 2 ulps of the output dtype, tiny atol for
        # values that underflow
        torch.float32: Tolerance(atol=1e-7, rtol=2e-5, norm=1e-5),
        torch.float16: Tolerance(atol=1e-6, rtol=2**-10, norm=2**-11),
        torch.bfloat16: Tolerance(atol=1e-6, rtol=2**-7, norm=2**-8),
    },
    sweep=sweep,
    fuzz=fuzz,
    parse_size=lambda s: parse_dims(s, what="sizes"),
    format_size=format_dims,
    flop_unit="vector",
    baseline="torch",
    choose=choose,
    scale_axis=("row width (columns)", lambda size: float(size[-1])),  # the default sweep keeps R x D fixed
)
