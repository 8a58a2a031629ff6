"""rms_norm rung ``cluster`` in CUDA C for Hopper: a row split over a thread-block cluster, each CTA holding its
chunk as raw words in registers (and, for wide 16-bit rows, shared memory), the partial sums of squares traded
through distributed shared memory (kernel and its reasoning: ``cuda/cluster.cu``; launch shapes, shared with the
softmax and layer_norm cluster rungs: :mod:`kernelwright.ops._cluster_norm`).

bf16 65536 columns -> one CTA of 512 threads (half the row in shared memory), 262144 -> 4 x 512; fp32 16 x 512 at
262144; rows of up to 262144 columns (:func:`limit`).
"""

from __future__ import annotations

from pathlib import Path

import torch

from kernelwright.ops import _cluster_norm as cn
from kernelwright.ops._norm_common import rows2d
from kernelwright.ops.softmax import cuda as sc

SOURCE = Path(__file__).parent / "cuda" / "cluster.cu"
MAX_COLS = cn.MAX_COLS
limit = cn.limit
FAST_STATS = True
"""The chunk's largest magnitude and its unscaled sum of squares in one pass and one block reduction, where the
magnitude lies in [2^-40, 2^40] (other chunks sum again in their own scale, from x read again in L2): one read of
the held chunk and one barrier fewer. The rows' statistics are bit for bit the scaled pass's unless a square
underflows (``cuda/cluster.cu`` block_stats). H200 run 85 (``benchmarks/h200/ops.sh rmsfast``, bf16 TB/s, off / on
twice, each in its own process): 16384 x 8192 4.01 / 4.01 -> 4.02 / 4.02, 16384 x 16384 4.07 both ways, 4096 x
65536 3.91 / 3.90 -> 3.99 / 3.99, 1024 x 262144 3.39 / 3.40 -> 3.47 / 3.47; the rung's GPU tests with both settings:
90 passed. On since then; False restores the scaled pass."""


PAIR_ROWS = False
"""Experiment switch: two rows a cluster for the wide 16-bit rows (past 32768 columns), w read from L2 once for
both (``cuda/cluster.cu`` PAIR; the layer_norm rung's :data:`kernelwright.ops.layer_norm.cuda.PAIR_ROWS`, with w
alone; its statistics are always FAST's one pass with the range's fallback). H200 run 87 (bf16 TB/s, off / on,
twice, one process each): 4096 x 65536 4.00 / 4.00 -> 3.56 / 3.57 (slower), 1024 x 262144 3.48 / 3.45 -> 3.47 /
3.47. Its GPU tests passed. Off."""
PAIR_GROUP = 2
"""PAIR_ROWS's accesses whose w vectors are loaded before their stores (each feeding two rows' stores); 4 spills
16-24 bytes a thread at 64 registers (sm_90)."""


EARLY_W = True
"""The store's first w vectors loaded before the statistics (``_cluster_norm.W_EARLY``) in the kernels
:func:`w_early` names: the 16-bit rows held by clusters of 4 CTAs (196609-262144 columns), where the row's
CTAs wait for each other at the cluster barrier and the early loads run behind that wait. 1024 x 262144 bf16 TB/s:
H200 run 65 3.41 -> 3.48 (before FAST_STATS), H100 under sm_proxy.py's H200 stand-in (run 100, 48 SMs held,
alternating, twice) 3.76 / 3.76 -> 3.91 / 3.91; at 65536 (one CTA a row) it lost (3.91 -> 3.79 on the H200; 4.45 ->
4.38 under the stand-in), and clusters of 2 or 3 (65537-196608 columns) and fp32 rows were not measured, so they keep
the plain store. False: the plain store everywhere."""


TC_STATS = False
"""Experiment switch (session 25): FAST_STATS' sum of squares by
the tensor cores (``_cuda/rows.cuh`` chunk_amax_sums_tc: mma.sync with each 16-byte vector of the held chunk as an
A fragment against its own rows, the squares read off the diagonal), two instructions a vector where the fold issues
16; the layer_norm rung's :data:`kernelwright.ops.layer_norm.cuda.TC_STATS` has the reading behind it. 16-bit rows
on the 16-byte path, one row a cluster. Under the stand-in (H100 run 101, x132, twice) 4.45 -> 4.40 at 4096 x 65536
and 3.93 -> 3.50 / 3.54 at 1024 x 262144 (beside EARLY_W: 40-48 bytes of spills)."""


def tc_stats(cfg: sc.ClusterConfig, dtype: torch.dtype, pair: bool = False) -> bool:
    """Whether the kernel for ``cfg`` takes :data:`TC_STATS`."""
    return TC_STATS and FAST_STATS and not pair and cfg.vector and dtype.itemsize == 2


def w_early(cfg: sc.ClusterConfig, dtype: torch.dtype, pair: bool = False) -> bool:
    """Whether the kernel for ``cfg`` takes :data:`EARLY_W` (see there); the PAIR kernels store by their own code."""
    return EARLY_W and not pair and cfg.cluster >= 4 and dtype.itemsize == 2 and cfg.snv > 0


def _kernel(cfg: sc.ClusterConfig, dtype: torch.dtype, offset: bool, save_stats: bool, pair: bool = False):
    extra = (f"OFFSET={int(offset)}", f"SAVE_STATS={int(save_stats)}", f"FAST={int(FAST_STATS)}")
    if pair:
        extra += ("PAIR=1", f"PG={PAIR_GROUP}")
    if tc_stats(cfg, dtype, pair):  # (defined only when on: the other kernels keep their options)
        extra += ("TC_STATS=1",)
    opts = cn.options(cfg, dtype, extra, early=w_early(cfg, dtype, pair))
    return cn.compiled(SOURCE, "rms_norm_cluster_pair" if pair else "rms_norm_cluster", opts)


def rms_norm_cluster(x, weight, eps=1e-6, offset=False, *, out, stats=None):
    """rms_norm, rung ``cluster``: ``out`` = x / sqrt(mean(x^2) + eps) * w (w + 1 with ``offset``); ``stats``:
    ``(rstd,)``, fp32 per row, filled for the backward."""
    n = x.shape[-1]
    if out.numel():
        x2, y2, w = rows2d(x), out.view(-1, n), weight.contiguous()
        save = stats is not None
        cn.launch(lambda cfg, pair=False: _kernel(cfg, x.dtype, bool(offset), save, pair), x2, y2, (w,),
                  (stats[0] if save else y2,), eps, pair=PAIR_ROWS)
    return out


def pair_artifact(n_cols: int, dtype: torch.dtype, rows: int = 2, offset: bool = False,
                  save_stats: bool = False) -> dict | None:
    """The PAIR_ROWS kernel for rows of ``n_cols`` (16-byte path; None where it does not apply)."""
    return cn.pair_artifact(lambda cfg: _kernel(cfg, dtype, offset, save_stats, True), "rms_norm_cluster_pair",
                            n_cols, dtype, rows)


def artifact(n_cols: int, dtype: torch.dtype, vector: bool = True, rows: int = 1, offset: bool = False,
             save_stats: bool = False) -> dict:
    """What the launcher would run for rows of ``n_cols`` (compiled for sm_90, no GPU needed)."""
    return cn.artifact(lambda cfg: _kernel(cfg, dtype, offset, save_stats), "rms_norm_cluster", n_cols, dtype,
                       vector, rows)


def inspect_artifacts(size: tuple[int, ...], dtype: torch.dtype) -> list:
    """``kw inspect rms_norm --variant cluster``."""
    return cn.inspect_artifacts(artifact, SOURCE, size, dtype)
