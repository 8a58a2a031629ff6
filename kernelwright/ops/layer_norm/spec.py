"""layer_norm: the family's registration (rungs; inputs, cost, tolerances, sweep and peers from _norm_common)."""

from __future__ import annotations

from kernelwright.ops._norm_common import FUSED_MAX_COLS, fused_limit, norm_family
from kernelwright.ops.layer_norm.reference import layer_norm
from kernelwright.registry import Rung

_T = "kernelwright.ops.layer_norm.triton"


def _cuda_limit(size: tuple[int, ...], kwargs: dict) -> str | None:
    from kernelwright.ops import _cluster_norm

    return _cluster_norm.limit(size, kwargs)


RUNGS = (
    Rung(
        "naive", "triton", f"{_T}:layer_norm_naive",
        "Three kernels, as unfused eager code runs them: mean and variance (read x), normalise into fp32 (read "
        "x, write fp32), affine (read fp32, read w and b, write y). ~7 element-widths of traffic in bf16 "
        "against the minimum 2. Predicted: ~1/3 of fused.",
    ),
    Rung(
        "fused", "triton", f"{_T}:layer_norm_fused",
        "One program per tile of rows held in registers: the mean, then the variance of the centred values "
        "(two passes over registers, exact), one read and one write. Predicted: >= 90% of the copy ceiling for "
        f"1k-16k columns, like rms_norm's fused rung. Rows wider than {FUSED_MAX_COLS} do not fit.",
        limit=fused_limit,
    ),
    Rung(
        "chunked", "triton", f"{_T}:layer_norm_chunked",
        "Any width: one program per row, pass 1 merges per-chunk (mean, M2) with Chan's pairwise formula, pass 2 "
        "re-reads and writes. Predicted: as rms_norm's chunked rung (~2/3 of the ceiling at 256k columns).",
    ),
    Rung(
        "split", "triton", f"{_T}:layer_norm_split",
        "Any width at one read and one write: chunks of a row over cooperating programs exchanging (exponent, "
        "mean) and (exponent, M2) as two 64-bit words each, merged with Chan's formula. Predicted: >= 85% of the "
        "copy ceiling at 64k-256k columns; equal to fused below 8k.",
    ),
    Rung(
        "cluster", "cuda", "kernelwright.ops.layer_norm.cuda:layer_norm_cluster",
        "CUDA C for Hopper, rms_norm's cluster rung with LayerNorm's statistics: each CTA's (exponent, mean, M2, "
        "count) of its chunk (held in registers and, for wide 16-bit rows, shared memory) meets its partners' in "
        "distributed shared memory at one cluster barrier and merges by Chan's formula; w and b read from L2 in "
        "the output. Predicted: above split's 3.32 / 2.95 TB/s at 4096x65536 / 1024x262144 bf16, below rms "
        "norm's cluster rung (3.65 / 3.19, run 59) by the bias reads and a third block reduction: 3.4-3.6 / "
        "3.0-3.2. H200 runs 60-62: 3.07 / 2.64 (refuted, below split), but 3.97 / 4.07 at 8192 / 16384 "
        "columns (split 3.64 / 3.63), where variant=None takes it.",
        needs="hopper", limit=_cuda_limit, artifacts="kernelwright.ops.layer_norm.cuda:inspect_artifacts",
    ),
)

FAMILY = norm_family(
    "layer", "layer_norm",
    "LayerNorm forward over the last dim (weight and bias): mean and variance of each row, memory-bound",
    layer_norm, RUNGS,
)
