"""add_rms_norm_bwd: the family's registration (rungs; inputs, cost, tolerances, sweep and peers from
_norm_common)."""

from __future__ import annotations

from kernelwright.ops._norm_common import FUSED_BWD_MAX_COLS, bwd_cluster_rung, fused_bwd_limit, norm_family
from kernelwright.ops.add_rms_norm_bwd.reference import add_rms_norm_bwd
from kernelwright.registry import Rung

_T = "kernelwright.ops.add_rms_norm_bwd.triton"


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
    bwd_cluster_rung("add_rms_bwd", "add_rms 2.65 / 3.59 / 3.87 / 3.98 / 3.53 / 2.93"),
)

FAMILY = norm_family(
    "add_rms_bwd", "add_rms_norm_bwd",
    "add_rms_norm backward: dx (= dresidual) and dweight from h, weight, dy, dh and the saved rstd",
    add_rms_norm_bwd, RUNGS,
)
