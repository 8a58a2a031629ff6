"""rms_norm_bwd: the family's registration (rungs; inputs, cost, tolerances, sweep and peers from _norm_common)."""

from __future__ import annotations

from kernelwright.ops._norm_common import FUSED_BWD_MAX_COLS, fused_bwd_limit, norm_family
from kernelwright.ops.rms_norm_bwd.reference import rms_norm_bwd
from kernelwright.registry import Rung

_T = "kernelwright.ops.rms_norm_bwd.triton"


def _cuda_limit(size: tuple[int, ...], kwargs: dict) -> str | None:
    from kernelwright.ops.rms_norm_bwd import cuda

    return cuda.limit(size, kwargs)


RUNGS = (
    Rung(
        "naive", "triton", f"{_T}:rms_norm_bwd_naive",
        "As unfused eager autograd: xhat and w * dy written as fp32 tensors, row sums, a dx kernel, and dweight "
        "as a two-stage column sum reading dy and xhat again. ~17 element-widths of traffic in bf16 against the "
        "minimum 3. Predicted: ~1/5 of fused.",
    ),
    Rung(
        "fused", "triton", f"{_T}:rms_norm_bwd_fused",
        "A persistent grid sized by occupancy (one 1024-thread program per SM): each program takes tiles of "
        "8192 values (1-8 rows) in turn, whole rows in registers and the next tile's x and dy already loading, "
        "writes dx, and accumulates dweight for its rows in fp32 registers; one partial row per program is summed "
        "in a fixed order by a second small kernel (deterministic, no atomics; +1% traffic at 1k columns). "
        "Predicted: >= 3.0 TB/s (70% of the ceiling) for 1k-8k columns, less at 16k where the tile spills. Rows "
        f"wider than {FUSED_BWD_MAX_COLS} do not fit in registers.",
        limit=fused_bwd_limit,
    ),
    Rung(
        "split", "triton", f"{_T}:rms_norm_bwd_split",
        "Wide rows: 8192-column chunks (32 warps; 8 warps with streaming hints beyond 16k columns, from the "
        "H200 sweep of run 20) over cooperating programs that exchange their chunk's "
        "sum(xhat * w * dy) (one 64-bit word, relaxed atomic) and wait for each other; each chunk's program "
        "keeps the dweight partials of its columns over its rows. One read of x and dy, one write of dx at any "
        "width. Predicted: >= 3.0 TB/s at 64k and 256k columns.",
    ),
    Rung(
        "cluster", "cuda", "kernelwright.ops.rms_norm_bwd.cuda:rms_norm_bwd_cluster",
        "CUDA C for Hopper: a persistent grid of thread-block clusters stepping over rows; each step's x and dy "
        "staged one step ahead in shared memory by cp.async, the row's sums traded through distributed shared "
        "memory at one cluster barrier (wide rows: 4 CTAs at 65536 bf16 columns, 16 at 262144) or by shuffles "
        "(narrow rows, several a CTA), dweight partials in fp32 registers, one partial row a cluster. Unaligned "
        "rows and fp32 past 131072 columns run split's kernel. Predicted: >= 3.0 TB/s at every width from 4096 "
        "(split's global-memory exchange and one-row prefetch held it to 2.3-3.1 at 65536 and 1.9-2.6 at "
        "262144). H200 run 69 (bf16 TB/s at 1024 / 4096 / 8192 / 16384 / 65536 / 262144 columns): "
        "rms 2.40 / 3.46 / 3.84 / 3.87 / 3.45 / 3.07; "
        "w first read from L1 each pass (run 67) was 14-39% slower at the wide rows.",
        needs="hopper", limit=_cuda_limit,
        artifacts="kernelwright.ops.rms_norm_bwd.cuda:rms_inspect_artifacts",
    ),
)

FAMILY = norm_family(
    "rms_bwd", "rms_norm_bwd",
    "RMSNorm backward: dx and dweight from x, weight, dy and the saved rstd (dweight summed over rows, "
    "deterministically)",
    rms_norm_bwd, RUNGS,
)
