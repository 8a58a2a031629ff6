"""rms_norm_bwd: the family's registration (rungs; inputs, cost, tolerances, sweep and peers from _norm_common)."""

from __future__ import annotations

from kernelwright.ops._norm_common import FUSED_BWD_MAX_COLS, bwd_cluster_rung, fused_bwd_limit, norm_family
from kernelwright.ops.rms_norm_bwd.reference import rms_norm_bwd
from kernelwright.registry import Rung

_T = "kernelwright.ops.rms_norm_bwd.triton"


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
    bwd_cluster_rung("rms_bwd", "rms 2.40 / 3.46 / 3.84 / 3.87 / 3.45 / 3.07"),
)

FAMILY = norm_family(
    "rms_bwd", "rms_norm_bwd",
    "RMSNorm backward: dx and dweight from x, weight, dy and the saved rstd (dweight summed over rows, "
    "deterministically)",
    rms_norm_bwd, RUNGS,
)
