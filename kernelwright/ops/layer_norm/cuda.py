"""layer_norm rung ``cluster`` in CUDA C for Hopper: the rms_norm cluster rung with LayerNorm's statistics, each
CTA's (exponent, mean, M2, count) merged across the cluster by Chan's formula (kernel and its reasoning:
``cuda/cluster.cu``; launch shapes: :mod:`kernelwright.ops._cluster_norm`). Rows of up to 262144 columns."""

from __future__ import annotations

from pathlib import Path

import torch

from kernelwright.ops import _cluster_norm as cn
from kernelwright.ops._norm_common import rows2d
from kernelwright.ops.softmax import cuda as sc

SOURCE = Path(__file__).parent / "cuda" / "cluster.cu"
MAX_COLS = cn.MAX_COLS
limit = cn.limit
ONE_PASS_MEAN = False
"""Experiment switch: the chunk's largest magnitude and its sum in one pass over the held chunk and one block
reduction (the sum in the fixed scale 2^-24; chunks whose largest magnitude is below 2^-40 sum again in their own
scale), so two passes and two barriers a CTA as rms_norm's rung, not three. Applied to launch shapes holding
shared-memory vectors only (the wide 16-bit rows, where it saves a pass over shared memory; the others spill with
it: 176 bytes at 4096 / 8192 columns). Not yet run on a GPU (session 15; `ops.sh lnwide`)."""

FAST_STATS = True
"""Switch (on since session 24): the chunk's largest magnitude, sum and sum of squares in one pass over the held
chunk and one block reduction, M2 = Q - S mean where at most 4 bits cancel (else the centred pass; ``cuda/cluster.cu``
block_stats): one pass and one barrier a CTA where the default took three, as rms_norm's FAST. The reading behind it
(session 22, sm_90 SASS): the layer norm rung ran ~15 instructions an element against rms_norm's ~7 (each pass
unpacks the 16-bit words again and scales them), so its CTAs spent longer between loads. Applied where ONE_PASS_MEAN
would be (launch shapes with shared-memory vectors: the wide 16-bit rows, from ~40000 columns); the registers-only
shapes spill 330-350 bytes a thread with it (16-bit, sm_90). Measured with STORE_FMA on an H100 only (run 91, bf16,
twice): 4096 x 65536 2.70 -> 2.81 TB/s, 1024 x 262144 2.40 -> 2.66; not yet on an H200. False: the three passes."""
STORE_FMA: bool | None = None
"""Switch: the store's y = (x - mean) rstd w + b as (x rstd + c) w + b, c = -mean rstd: two FMAs an element instead
of an add, a multiply and an FMA. None (default): on where FAST_STATS is (the pair measured in run 91), so the
narrower shapes' kernels are as before; True / False force it at every shape."""


TC_STATS = False
"""Experiment switch (session 25): FAST_STATS' sum and sum of squares
by the tensor cores, mma.sync m16n8k16 with each 16-byte vector of the held chunk as an A fragment (against ones for
the sum; against its own rows for the squares, read off the diagonal), three instructions a vector where the fold
issues 24 (``cuda/cluster.cu`` tc_fold). The reading behind it (H100 run 99, norm_timeline.py beside sm_proxy.py's
occupier, 48 SMs held): with an SM's share of the H200's bandwidth the rung's statistics take 4.7 us a CTA, as long
as its loads, against rms_norm's 2.9; they compete for issue with the SM's other CTA's store. Applied where
FAST_STATS is (16-bit rows with shared-memory vectors). Measured under the stand-in (H100 run 101, x132, twice):
4096 x 65536 3.63 / 3.74 -> 3.76 / 3.74, 1024 x 262144 3.16 / 3.14 -> 3.08 / 3.10: within the noise, not a lever."""


PAIR_ROWS = False
"""Experiment switch: two rows a cluster for the wide 16-bit rows (those whose one-row shape holds shared-memory
vectors, past 32768 columns): each CTA holds the same columns of both rows, the first in registers and the second
in shared memory, so w and b are read from L2 once for two rows (``cuda/cluster.cu`` PAIR; shapes:
:func:`kernelwright.ops._cluster_norm.pair_config`). Reading behind it (session 19, not measured): at 65536 columns
the one-row kernel reads 256 KB of w and b from L2 for every 128 KB of x, and L2's bandwidth, not HBM's, may be what
holds it at 3.1 TB/s where rms_norm (w only) runs 3.99. H200 run 87 (bf16 TB/s, off / on, twice, one process each):
4096 x 65536 3.09 / 3.08 -> 3.07 / 3.08, 1024 x 262144 2.64 / 2.65 -> 2.84 / 2.84, both behind the split rung the
library takes there (3.34, 2.95 in the same processes); Nsight Compute at 65536: DRAM 62% -> 63% of peak, L2 73% ->
75%, so L2 was not the wall. Its GPU tests passed. Off."""


PAIR_GROUP = 1
"""PAIR_ROWS's accesses whose w and b vectors are loaded before their stores (each feeding two rows' stores); 2
spills 16-36 bytes a thread at 64 registers (sm_90, bf16), 1 none."""


PAIR_ONE_PASS = False
"""Experiment switch: PAIR_ROWS's statistics with ONE_PASS_MEAN's first step (both rows' largest magnitudes and
sums in one pass and one barrier: two barriers a CTA, not three). The one-row kernel's ONE_PASS_MEAN gained 2-4% at
65536 / 262144 (run 65). Run 87: 3.08 / 3.08 at 65536, 2.79 / 2.80 at 262144 (PAIR_ROWS alone: 3.07-3.08,
2.84). Off."""


def _kernel(cfg: sc.ClusterConfig, dtype: torch.dtype, save_stats: bool, pair: bool = False):
    fast = FAST_STATS and not pair and cfg.snv > 0
    one_pass = (PAIR_ONE_PASS if pair else ONE_PASS_MEAN) and cfg.snv > 0 and not fast
    extra = (f"SAVE_STATS={int(save_stats)}", f"ONE_PASS_MEAN={int(one_pass)}", f"PAIR={int(pair)}")
    fma = (fast if STORE_FMA is None else STORE_FMA) and not pair
    if fast or fma:  # (defined only when on: the kernels without either keep their options as they were)
        extra += (f"FAST_STATS={int(fast)}", f"STORE_FMA={int(fma)}")
    if fast and TC_STATS and dtype in (torch.float16, torch.bfloat16):
        extra += ("TC_STATS=1",)
    if pair:
        extra += (f"PG={PAIR_GROUP}",)
    name = "layer_norm_cluster_pair" if pair else "layer_norm_cluster"
    return cn.compiled(SOURCE, name, cn.options(cfg, dtype, extra))


def layer_norm_cluster(x, weight, bias, eps=1e-5, *, out, stats=None):
    """layer_norm, rung ``cluster``: ``out`` = (x - mean) / sqrt(var + eps) * w + b over the last dim; ``stats``:
    ``(mean, rstd)``, fp32 per row, filled for the backward."""
    n = x.shape[-1]
    if out.numel():
        x2, y2 = rows2d(x), out.view(-1, n)
        save = stats is not None
        cn.launch(lambda cfg, pair=False: _kernel(cfg, x.dtype, save, pair), x2, y2,
                  (weight.contiguous(), bias.contiguous()), tuple(stats) if save else (y2, y2), eps, pair=PAIR_ROWS)
    return out


def artifact(n_cols: int, dtype: torch.dtype, vector: bool = True, rows: int = 1, save_stats: bool = False) -> dict:
    """What the launcher would run for rows of ``n_cols`` (compiled for sm_90, no GPU needed)."""
    return cn.artifact(lambda cfg: _kernel(cfg, dtype, save_stats), "layer_norm_cluster", n_cols, dtype, vector, rows)


def pair_artifact(n_cols: int, dtype: torch.dtype, rows: int = 2, save_stats: bool = False) -> dict | None:
    """The PAIR_ROWS kernel for rows of ``n_cols`` (16-byte path; None where it does not apply)."""
    return cn.pair_artifact(lambda cfg: _kernel(cfg, dtype, save_stats, True), "layer_norm_cluster_pair", n_cols,
                            dtype, rows)


def inspect_artifacts(size: tuple[int, ...], dtype: torch.dtype) -> list:
    """``kw inspect layer_norm --variant cluster``."""
    return cn.inspect_artifacts(artifact, SOURCE, size, dtype)
