"""layer_norm_bwd: the family's registration (rungs; inputs, cost, tolerances, sweep and peers from
_norm_common)."""

from __future__ import annotations

from kernelwright.ops._norm_common import FUSED_BWD_MAX_COLS, bwd_cluster_rung, fused_bwd_limit, norm_family
from kernelwright.ops.layer_norm_bwd.reference import layer_norm_bwd
from kernelwright.registry import Rung

_T = "kernelwright.ops.layer_norm_bwd.triton"


RUNGS = (
    Rung(
        "naive", "triton", f"{_T}:layer_norm_bwd_naive",
        "As unfused eager autograd: fp32 xhat and w * dy tensors, row sums, a dx kernel, two-stage column sums "
        "for dweight and dbias. Predicted: ~1/5 of fused.",
    ),
    Rung(
        "fused", "triton", f"{_T}:layer_norm_bwd_fused",
        "The rms_norm_bwd fused rung with the mean term: persistent programs over tiles of rows in registers, "
        "dweight and dbias partials per program, summed in a fixed order. Predicted: >= 3.0 TB/s for 1k-16k "
        f"columns. Rows wider than {FUSED_BWD_MAX_COLS} do not fit.",
        limit=fused_bwd_limit,
    ),
    Rung(
        "split", "triton", f"{_T}:layer_norm_bwd_split",
        "Wide rows over cooperating programs exchanging (sum(w * dy), sum(xhat * w * dy)) packed in one 64-bit "
        "word per chunk. Predicted: >= 3.0 TB/s at 64k and 256k columns.",
    ),
    bwd_cluster_rung("layer_bwd", "layer norm 1.49 / 2.96 / 3.40 / 3.18 / 3.37 / 2.99 (1.88 / 3.18 at 1024 / 4096 "
                                  "with 2 vectors a thread, runs 71-72)"),
)

FAMILY = norm_family(
    "layer_bwd", "layer_norm_bwd",
    "LayerNorm backward: dx, dweight and dbias from x, weight, dy and the saved mean and rstd",
    layer_norm_bwd, RUNGS,
)
