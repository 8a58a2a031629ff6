"""add_rms_norm_bwd: the family's registration (rungs; inputs, cost, tolerances, sweep and peers from
_norm_common)."""

from __future__ import annotations

from kernelwright.ops._norm_common import FUSED_BWD_MAX_COLS, fused_bwd_limit, norm_family
from kernelwright.ops.add_rms_norm_bwd.reference import add_rms_norm_bwd
from kernelwright.registry import Rung

_T = "kernelwright.ops.add_rms_norm_bwd.triton"


def _cuda_limit(size: tuple[int, ...], kwargs: dict) -> str | None:
    from kernelwright.ops.rms_norm_bwd import cuda

    return cuda.limit(size, kwargs)


RUNGS = (
    Rung(
        "naive", "triton", f"{_T}:add_rms_norm_bwd_naive",
        "As unfused eager autograd: the naive rms_norm backward kernels, with dh added in the dx kernel (eager "
        "adds it in a separate kernel). Predicted: ~1/5 of fused.",
    ),
    Rung(
        "fused", "triton", f"{_T}:add_rms_norm_bwd_fused",
        "The rms_norm_bwd fused rung reading h, dy and dh and writing dx = dresidual once: the gradient add is "
        "free (eager adds dh in a separate kernel: 3 more element-widths). Predicted: >= 3.0 TB/s for 1k-16k "
        f"columns. Rows wider than {FUSED_BWD_MAX_COLS} do not fit.",
        limit=fused_bwd_limit,
    ),
    Rung(
        "split", "triton", f"{_T}:add_rms_norm_bwd_split",
        "The rms_norm_bwd split rung with dh added. Predicted: >= 3.0 TB/s at 64k and 256k columns.",
    ),
    Rung(
        "cluster", "cuda", "kernelwright.ops.rms_norm_bwd.cuda:add_rms_norm_bwd_cluster",
        "CUDA C for Hopper: a persistent grid of thread-block clusters stepping over rows; each step's x and dy "
        "staged one step ahead in shared memory by cp.async, the row's sums traded through distributed shared "
        "memory at one cluster barrier (wide rows: 4 CTAs at 65536 bf16 columns, 16 at 262144) or by shuffles "
        "(narrow rows, several a CTA), dweight partials in fp32 registers, one partial row a cluster. Unaligned "
        "rows and fp32 past 131072 columns run split's kernel. Predicted: >= 3.0 TB/s at every width from 4096 "
        "(split's global-memory exchange and one-row prefetch held it to 2.3-3.1 at 65536 and 1.9-2.6 at "
        "262144). H200 run 69 (bf16 TB/s at 1024 / 4096 / 8192 / 16384 / 65536 / 262144 columns): "
        "add_rms 2.65 / 3.59 / 3.87 / 3.98 / 3.53 / 2.93; "
        "w first read from L1 each pass (run 67) was 14-39% slower at the wide rows.",
        needs="hopper", limit=_cuda_limit,
        artifacts="kernelwright.ops.rms_norm_bwd.cuda:add_rms_inspect_artifacts",
    ),
)

FAMILY = norm_family(
    "add_rms_bwd", "add_rms_norm_bwd",
    "add_rms_norm backward: dx (= dresidual) and dweight from h, weight, dy, dh and the saved rstd",
    add_rms_norm_bwd, RUNGS,
)
