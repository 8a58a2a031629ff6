"""layer_norm_bwd: the family's registration (rungs; inputs, cost, tolerances, sweep and peers from
_norm_common)."""

from __future__ import annotations

from kernelwright.ops._norm_common import FUSED_BWD_MAX_COLS, fused_bwd_limit, norm_family
from kernelwright.ops.layer_norm_bwd.reference import layer_norm_bwd
from kernelwright.registry import Rung

_T = "kernelwright.ops.layer_norm_bwd.triton"


def _cuda_limit(size: tuple[int, ...], kwargs: dict) -> str | None:
    from kernelwright.ops.rms_norm_bwd import cuda

    return cuda.limit(size, kwargs)


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
    Rung(
        "cluster", "cuda", "kernelwright.ops.rms_norm_bwd.cuda:layer_norm_bwd_cluster",
        "CUDA C for Hopper: a persistent grid of thread-block clusters stepping over rows; each step's x and dy "
        "staged one step ahead in shared memory by cp.async, the row's sums traded through distributed shared "
        "memory at one cluster barrier (wide rows: 4 CTAs at 65536 bf16 columns, 16 at 262144) or by shuffles "
        "(narrow rows, several a CTA), dweight partials in fp32 registers, one partial row a cluster. Unaligned "
        "rows and fp32 past 131072 columns run split's kernel. Predicted: >= 3.0 TB/s at every width from 4096 "
        "(split's global-memory exchange and one-row prefetch held it to 2.3-3.1 at 65536 and 1.9-2.6 at "
        "262144). H200 run 69 (bf16 TB/s at 1024 / 4096 / 8192 / 16384 / 65536 / 262144 columns): "
        "layer norm 1.49 / 2.96 / 3.40 / 3.18 / 3.37 / 2.99; "
        "w first read from L1 each pass (run 67) was 14-39% slower at the wide rows.",
        needs="hopper", limit=_cuda_limit,
        artifacts="kernelwright.ops.rms_norm_bwd.cuda:layer_inspect_artifacts",
    ),
)

FAMILY = norm_family(
    "layer_bwd", "layer_norm_bwd",
    "LayerNorm backward: dx, dweight and dbias from x, weight, dy and the saved mean and rstd",
    layer_norm_bwd, RUNGS,
)
