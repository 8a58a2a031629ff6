"""matmul: the family's registration (two ladders, inputs, cost, tolerances, sweep).

The CUDA C ladder (fp32 on CUDA cores, compiled at run time by NVRTC) walks the classic SGEMM road from one
thread per output to warp tiling; the Triton ladder (tensor cores for fp16/bf16) goes from a tiled kernel to a
persistent TMA kernel, with split-K for skinny shapes. Sizes are ``M x N x K`` (``4096`` alone means a cube).
"""

from __future__ import annotations

import math

import torch

from kernelwright.errors import UsageError
from kernelwright.harness.inputs import random_values, with_layout
from kernelwright.harness.sizes import format_dims, parse_dims
from kernelwright.ops import _peers
from kernelwright.ops.matmul import cuda as _cuda
from kernelwright.ops.matmul.reference import error_scale, matmul
from kernelwright.registry import Case, Family, Rung, Tolerance

_C = "kernelwright.ops.matmul.cuda"
_T = "kernelwright.ops.matmul.triton"
_I = "kernelwright.ops.matmul.hooks"
FP32 = (torch.float32,)

CUDA_RUNGS = tuple(
    Rung(name, "cuda", f"{_C}:{name}", _cuda.NOTES[name], needs="cuda", dtypes=FP32,
         artifacts=f"{_I}:cuda_artifacts_{name}")
    for name in ("cuda_naive", "cuda_coalesced", "cuda_smem", "cuda_blocktile1d", "cuda_blocktile2d",
                 "cuda_vectorized", "cuda_warptile")
)

TRITON_RUNGS = (
    Rung(
        "triton_tiled", "triton", f"{_T}:triton_tiled",
        "Tensor cores through tl.dot: one program per 128x128 tile of C, K walked in 64-wide steps with a "
        "3-stage software pipeline (Triton's num_stages), fp32 accumulators, one rounding at the store. Tiles "
        "are launched row by row, so the programs running at once share one A row panel but touch every B "
        "column panel. Predicted (bf16, 4096^3): 60-75% of cuBLAS.",
        artifacts=f"{_I}:triton_artifacts_tiled",
    ),
    Rung(
        "triton_grouped", "triton", f"{_T}:triton_grouped",
        "Same kernel and tile; programs visit tiles in groups of 8 row blocks, column by column, so the ~132 "
        "tiles in flight need ~8 A panels and ~16 B panels instead of 1 and 132: more hits in L2. Predicted: "
        "+5-15% at 4096^3 and 8192^3 where B (32-128 MB) exceeds the 60 MB L2; nothing at 1024^3 (all in L2).",
        artifacts=f"{_I}:triton_artifacts_grouped",
    ),
    Rung(
        "triton_autotuned", "triton", f"{_T}:triton_autotuned",
        "The grouped kernel with tile shape, warps and pipeline depth searched per shape bucket by the core "
        "autotuner (configs pruned by shared-memory and register limits before any launch; winners cached on "
        "disk). Predicted: 128x256x64 with 8 warps wins at 4096^3+ (more FLOPs per byte of shared memory read "
        "by wgmma), reaching >= 90% of cuBLAS; smaller tiles win at 1024^3 (more tiles to fill 132 SMs).",
        tune=f"{_I}:tune_autotuned", artifacts=f"{_I}:triton_artifacts_autotuned",
    ),
    Rung(
        "triton_persistent", "triton", f"{_T}:triton_persistent",
        "One program per SM loops over tiles in grouped order; on Hopper A, B and C move by TMA descriptors "
        "(the copy engine generates addresses and zero-fills the borders, freeing registers and issue slots), "
        "with a pointer-load fallback elsewhere. Predicted: +3-8% over autotuned at 4096^3-8192^3 (no tail "
        "wave, cheaper loads), about equal at 1024^3.",
        tune=f"{_I}:tune_persistent", artifacts=f"{_I}:triton_artifacts_persistent",
    ),
    Rung(
        "triton_splitk", "triton", f"{_T}:triton_splitk",
        "For skinny M (decoding: 16-128 rows): a 16-64-row tile gives only N/128 = 64 programs for 132 SMs; "
        "cutting K into 2-8 slices multiplies the programs, each slice's fp32 partial goes to a workspace, and a "
        "second kernel adds them in a fixed order (deterministic, no atomics). The product is memory-bound "
        "there (B is read once): predicted >= 85% of cuBLAS, i.e. streaming B near the copy bandwidth.",
        tune=f"{_I}:tune_splitk", artifacts=f"{_I}:triton_artifacts_splitk",
        limit=lambda size, kwargs: splitk_limit(size),
    ),
)


SPLITK_MAX_M = 512


def splitk_limit(size) -> str | None:
    if size and size[0] > SPLITK_MAX_M:
        return f"triton_splitk: for skinny products (M <= {SPLITK_MAX_M}); M = {size[0]} has tiles enough"
    return None


def parse_size(text: str) -> tuple[int, int, int]:
    dims = parse_dims(text, what="sizes")
    if len(dims) == 1:
        return (dims[0],) * 3
    if len(dims) != 3:
        raise UsageError(f"sizes: expected MxNxK (or one number for a cube), got {text!r}")
    return dims


def make_case(size, dtype, device, gen, dist="normal", layout="contiguous") -> Case:
    m, n, k = size
    a = random_values((m, k), dtype, device, gen, dist)
    b = random_values((k, n), dtype, device, gen, "normal" if dist == "large" else dist)
    if dist == "large":
        # A around 1e3, B scaled so |C| lands near 1e4: large magnitudes that every dtype (fp16 tops at 65504)
        # still represents, so the check is about accuracy, not agreeing on Inf
        b = (b.float() * (10.0 / math.sqrt(max(k, 1)))).to(dtype)
    return Case(tuple(size), (with_layout(a, layout), with_layout(b, layout)), {}, format_dims(size))


def cost(size, dtype) -> tuple[float, float]:
    m, n, k = size
    return 2.0 * m * n * k, float((m * k + k * n + m * n) * torch.finfo(dtype).bits // 8)


def fuzz() -> list[tuple[tuple[int, ...], dict]]:
    return [
        ((1, 1, 1), {}),          # one element: a dot product of length 1
        ((127, 131, 129), {}),    # primes around a power of two: every tile edge is ragged
        ((64, 64, 64), {}),       # exactly one tile of the small configs
        ((33, 17, 100), {}),      # K not a multiple of any BK
        ((16, 96, 520), {}),      # skinny: split-K takes several slices, the last one short
        ((3, 200, 7), {}),        # K smaller than one tile step
        ((100, 5, 64), {}),       # N smaller than the smallest tile
        ((1100, 40, 16), {}),     # 9-18 row blocks: the grouped order's last group is short
        ((0, 8, 8), {}),          # empty: returns empty
        ((4, 4, 0), {}),          # K = 0: C is all zeros (an empty sum)
    ]


def sweep(device: str) -> list[tuple[int, ...]]:
    if device == "cuda":
        return [(1024,) * 3, (2048,) * 3, (4096,) * 3, (8192,) * 3, (16, 8192, 8192), (64, 8192, 8192),
                (128, 8192, 8192), (127, 131, 129), (1000, 1000, 1000), (4097, 4095, 4093)]
    return [(64, 64, 64), (127, 131, 129), (16, 96, 520)]


def _torch_matmul(a, b):
    return a @ b


def choose(size, kwargs, dtype=None) -> list[str]:
    m, n, k = size
    triton_order = ["triton_autotuned", "triton_persistent", "triton_grouped", "triton_tiled"]
    if (n % 16 or k % 16) and n % 8 == 0 and k % 8 == 0:
        # rows Triton cannot assume 16-element aligned load narrowly through pointers, but are still 16-byte
        # aligned for 16-bit dtypes, which TMA needs: the persistent rung's TMA path (run 6: 1000^3 fp16 10.5 us
        # against 42-47 us for the pointer-load rungs)
        triton_order.remove("triton_persistent")
        triton_order.insert(0, "triton_persistent")
    if m <= 256 and k >= 1024:  # decode-like: few output tiles, long K
        triton_order.insert(0, "triton_splitk")
    return triton_order + ["triton_splitk", "cuda_warptile", "cuda_vectorized"]


FAMILY = Family(
    name="matmul",
    summary="C = A @ B (fp32 on CUDA cores in CUDA C; fp16/bf16 on tensor cores in Triton): the memory hierarchy, "
            "rung by rung",
    reference=matmul,
    rungs=CUDA_RUNGS + TRITON_RUNGS,
    peers=(_peers.eager(_torch_matmul, note="torch.matmul (cuBLAS on CUDA)"),),
    make_case=make_case,
    out_shape=lambda case: (case.args[0].shape[0], case.args[1].shape[1]),
    cost=cost,
    tolerances={
        # Each element: rounding the exact result once to the output dtype (rtol), plus fp32 accumulation error
        # that scales with |A| @ |B| (acc): K additions in fp32 err by ~sqrt(K) * 2^-24 relative to the terms'
        # magnitude on random data; 2^-16 leaves 100x headroom up to K = 16k and no room for bf16/fp16
        # accumulation (2^-8 / 2^-11) or a lost product.
        torch.float32: Tolerance(atol=1e-30, rtol=2**-20, norm=2e-5, acc=2**-16),
        torch.float16: Tolerance(atol=1e-7, rtol=2**-10, norm=2**-10, acc=2**-16),
        torch.bfloat16: Tolerance(atol=1e-30, rtol=2**-7, norm=2**-7, acc=2**-16),
    },
    sweep=sweep,
    fuzz=fuzz,
    parse_size=parse_size,
    format_size=format_dims,
    flop_unit="tensor",
    baseline="torch",
    choose=choose,
    scale_axis=("problem size (cube root of M*N*K)", lambda size: round(math.prod(size) ** (1 / 3))),
    error_scale=error_scale,
)
