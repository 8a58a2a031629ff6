"""rms_norm: the family's registration (rungs; inputs, cost, tolerances, sweep and peers from _norm_common)."""

from __future__ import annotations

from kernelwright.ops._norm_common import FUSED_MAX_COLS, fused_limit, norm_family
from kernelwright.ops.rms_norm.reference import rms_norm
from kernelwright.registry import Rung

_T = "kernelwright.ops.rms_norm.triton"


def _cuda_limit(size: tuple[int, ...], kwargs: dict) -> str | None:
    from kernelwright.ops import _cluster_norm

    return _cluster_norm.limit(size, kwargs)


RUNGS = (
    Rung(
        "naive", "triton", f"{_T}:rms_norm_naive",
        "Three kernels, as unfused eager code runs them: row statistics (read x), normalise into an fp32 tensor "
        "(read x, write 2 bytes-per-bf16-element x2), scale by the weight (read fp32, write y). Traffic in bf16: "
        "~7 element-widths against the minimum 2. Predicted: ~1/3 of the fused rung.",
    ),
    Rung(
        "fused", "triton", f"{_T}:rms_norm_fused",
        "One program per tile of rows (whole rows in registers, ~4096 values a tile): one read of x, one write "
        "of y, the statistics never leave registers. Predicted: >= 90% of the copy ceiling (>= 3.8 TB/s) for "
        f"1k-16k columns. Rows wider than {FUSED_MAX_COLS} do not fit in registers.",
        limit=fused_limit,
    ),
    Rung(
        "chunked", "triton", f"{_T}:rms_norm_chunked",
        "Any width: one program per row streams it in 8192-column chunks for the sum of squares, then streams it "
        "again to write. Three passes when the re-read misses L2. Predicted: 70-85% of fused at narrow widths "
        "(less memory parallelism per program), ~2/3 of the ceiling at 256k columns.",
    ),
    Rung(
        "split", "triton", f"{_T}:rms_norm_split",
        "Any width at one read and one write: a row is cut into chunks (16384 columns over 32 warps up to 16k "
        "columns; beyond, 8192 over 4 warps with streaming cache hints, from the H200 sweep of run 20), "
        "held in registers; the programs of a row exchange (scale exponent, sum of squares) as one 64-bit word "
        "through a relaxed atomic and wait for each other; the persistent grid is sized by occupancy so every "
        "partner is resident, and each program loads its next row before waiting. Predicted: >= 85% of the copy "
        "ceiling at 64k and 256k columns (the softmax split rung reached 3.4-3.6 TB/s with the same protocol), "
        "near fused at 16k (one chunk: no exchange).",
    ),
    Rung(
        "cluster", "cuda", "kernelwright.ops.rms_norm.cuda:rms_norm_cluster",
        "CUDA C for Hopper, the softmax cluster rung's scheme with RMSNorm's statistic: a row over the 1-16 CTAs "
        "of a thread-block cluster, each holding its chunk as raw words in registers and, for wide 16-bit rows, "
        "half of it in shared memory (cp.async); each CTA's (exponent, scaled sum of squares) meets its partners' "
        "in distributed shared memory at one cluster barrier, instead of split's global-memory words and spinning "
        "loads. Predicted (the softmax rung reached 4.01 / 3.80 TB/s at 4096x65536 / 1024x262144 bf16, run 58; "
        "rms reads w from L2 on top): 3.8-4.0 / 3.6-3.8 TB/s, above split's 3.57 / 3.36. H200 runs 59-62: 3.65 / "
        "3.19, then with w of 4 accesses loaded together 3.91 / 3.41 (split 3.58 / 3.42); 4.01 / 4.07 at 8192 / "
        "16384 columns.",
        needs="hopper", limit=_cuda_limit, artifacts="kernelwright.ops.rms_norm.cuda:inspect_artifacts",
    ),
)

FAMILY = norm_family(
    "rms", "rms_norm",
    "RMSNorm forward over the last dim (Gemma's 1 + w with offset): a row reduction that must stay memory-bound",
    rms_norm, RUNGS,
)
