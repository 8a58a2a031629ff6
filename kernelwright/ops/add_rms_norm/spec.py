"""add_rms_norm: the family's registration (rungs; inputs, cost, tolerances, sweep and peers from _norm_common)."""

from __future__ import annotations

from kernelwright.ops._norm_common import FUSED_MAX_COLS, fused_limit, norm_family
from kernelwright.ops.add_rms_norm.reference import add_rms_norm
from kernelwright.registry import Rung

_T = "kernelwright.ops.add_rms_norm.triton"

RUNGS = (
    Rung(
        "naive", "triton", f"{_T}:add_rms_norm_naive",
        "Four kernels, as eager code: h = x + residual (written in fp32 and in the output dtype), then the "
        "naive RMS kernels on the fp32 h. ~13 element-widths of traffic in bf16 against the minimum 4. "
        "Predicted: ~1/3 of fused.",
    ),
    Rung(
        "fused", "triton", f"{_T}:add_rms_norm_fused",
        "One program per tile of rows: x and residual read once, h formed in fp32 registers, stored once, and "
        "normalised there; y written once. Predicted: >= 90% of the copy ceiling for 1k-16k columns; against "
        "eager (an add kernel, then a norm that reads h again) ~1.5x from traffic alone. Rows wider than "
        f"{FUSED_MAX_COLS} do not fit.",
        limit=fused_limit,
    ),
    Rung(
        "split", "triton", f"{_T}:add_rms_norm_split",
        "Any width at the minimum traffic: chunks of x + residual in registers over cooperating programs, the "
        "rms_norm split exchange. Predicted: >= 85% of the copy ceiling at 64k-256k columns.",
    ),
)

FAMILY = norm_family(
    "add_rms", "add_rms_norm",
    "residual add fused with RMSNorm, as in decoder layers: (rms_norm(x + residual), x + residual)",
    add_rms_norm, RUNGS,
)
