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


def _kernel(cfg: sc.ClusterConfig, dtype: torch.dtype, save_stats: bool):
    extra = (f"SAVE_STATS={int(save_stats)}", f"ONE_PASS_MEAN={int(ONE_PASS_MEAN and cfg.snv > 0)}")
    return cn.compiled(SOURCE, "layer_norm_cluster", cn.options(cfg, dtype, extra))


def layer_norm_cluster(x, weight, bias, eps=1e-5, *, out, stats=None):
    """layer_norm, rung ``cluster``: ``out`` = (x - mean) / sqrt(var + eps) * w + b over the last dim; ``stats``:
    ``(mean, rstd)``, fp32 per row, filled for the backward."""
    n = x.shape[-1]
    if out.numel():
        x2, y2 = rows2d(x), out.view(-1, n)
        save = stats is not None
        cn.launch(lambda cfg: _kernel(cfg, x.dtype, save), x2, y2, (weight.contiguous(), bias.contiguous()),
                  tuple(stats) if save else (y2, y2), eps)
    return out


def artifact(n_cols: int, dtype: torch.dtype, vector: bool = True, rows: int = 1, save_stats: bool = False) -> dict:
    """What the launcher would run for rows of ``n_cols`` (compiled for sm_90, no GPU needed)."""
    return cn.artifact(lambda cfg: _kernel(cfg, dtype, save_stats), "layer_norm_cluster", n_cols, dtype, vector, rows)


def inspect_artifacts(size: tuple[int, ...], dtype: torch.dtype) -> list:
    """``kw inspect layer_norm --variant cluster``."""
    return cn.inspect_artifacts(artifact, SOURCE, size, dtype)
