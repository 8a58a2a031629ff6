"""rms_norm rung ``cluster`` in CUDA C for Hopper: a row split over a thread-block cluster, each CTA holding its
chunk as raw words in registers (and, for wide 16-bit rows, shared memory), the partial sums of squares traded
through distributed shared memory (kernel and its reasoning: ``cuda/cluster.cu``).

The launch shapes are the softmax cluster rung's (:func:`kernelwright.ops.softmax.cuda.cluster_config`, one row a
cluster, and the same switches): the two kernels hold a row the same way and differ in the statistic and the
output. bf16 65536 columns -> one CTA of 512 threads (half the row in shared memory), 262144 -> 4 x 512; fp32 16 x
512 at 262144; rows of up to 262144 columns (:func:`limit`).
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import torch

from kernelwright.backends import nvrtc
from kernelwright.ops._norm_common import rows2d
from kernelwright.ops.softmax import cuda as sc

SOURCE = Path(__file__).parent / "cuda" / "cluster.cu"
MAX_COLS = sc.MAX_COLS
W_GROUP = 1
"""Experiment switch: weight vectors a thread loads together before their stores (1: each store waits for its own
L2 round trip, 3.65 / 3.19 TB/s at 4096x65536 / 1024x262144 bf16 in run 59, whose kernel also had a compiler
barrier after each store, since removed: the SASS keeps the same load-store order). 2 and 4 spill 8-16 bytes at
262144 (sm_90); not timed yet."""


def limit(size: tuple[int, ...], kwargs: dict) -> str | None:
    d = size[-1] if size else 1
    if d > MAX_COLS:
        return f"cluster: a row of {d} columns exceeds {MAX_COLS} (the CTAs of a cluster hold it on chip)"
    return None


def options(cfg: sc.ClusterConfig, dtype: torch.dtype, offset: bool, save_stats: bool) -> nvrtc.CompileOptions:
    # the softmax rung's defines for the shape (register budget, shared-memory vectors, hints), less its own
    base = sc.options(cfg, dtype)
    keep = [d for d in base.defines if d.split("=")[0] in ("DTYPE", "VECTOR", "NV", "THREADS", "CLUSTER",
                                                           "MIN_BLOCKS", "HINTS", "SNV")]
    return nvrtc.CompileOptions(defines=(*keep, f"OFFSET={int(offset)}", f"SAVE_STATS={int(save_stats)}",
                                         f"WG={W_GROUP}"))


@functools.cache
def _compiled(opts: nvrtc.CompileOptions) -> nvrtc.CudaKernel:
    return nvrtc.CudaKernel(nvrtc.read_source(SOURCE), "rms_norm_cluster", opts, what=str(SOURCE))


def _kernel(cfg: sc.ClusterConfig, dtype: torch.dtype, offset: bool, save_stats: bool) -> nvrtc.CudaKernel:
    return _compiled(options(cfg, dtype, offset, save_stats))


def plan(x2: torch.Tensor, w: torch.Tensor, y2: torch.Tensor, offset: bool, save_stats: bool) -> sc.ClusterConfig:
    vector = sc.aligned(x2, y2) and w.data_ptr() % 16 == 0
    args = (x2.shape[1], x2.element_size(), vector)
    cfg = sc.cluster_config(*args)
    if sc.launch_cluster(cfg) and not sc.holds(_kernel(cfg, x2.dtype, offset, save_stats), x2.device, cfg):
        cfg = sc.cluster_config(*args, nonportable=False)
    return cfg


def launch(x2: torch.Tensor, w: torch.Tensor, y2: torch.Tensor, rstd: torch.Tensor | None, eps: float,
           offset: bool) -> None:
    """rms_norm of the rows of ``x2`` [R, D] (unit column stride) into ``y2``; ``rstd`` (fp32 [R]) saved if given;
    ``w`` contiguous [D]."""
    R, D = x2.shape
    if R == 0 or D == 0:
        return
    if D > MAX_COLS:
        raise ValueError(f"x: rows of {D} columns exceed the cluster rung's {MAX_COLS}")
    save = rstd is not None
    cfg = plan(x2, w, y2, offset, save)
    grid = R * cfg.cluster
    if grid >= 2**31:
        raise ValueError(f"x: {R} rows x {cfg.cluster} CTAs exceed the grid's 2^31 - 1 blocks")
    args = (x2, w, y2, rstd if save else y2, D, x2.stride(0), y2.stride(0), float(eps), 1.0 / D)
    _kernel(cfg, x2.dtype, offset, save).launch((grid,), (cfg.threads,), args, shared_mem=sc.smem_bytes(cfg),
                                                cluster=sc.launch_cluster(cfg))


def rms_norm_cluster(x, weight, eps=1e-6, offset=False, *, out, stats=None):
    """rms_norm, rung ``cluster``: ``out`` = x / sqrt(mean(x^2) + eps) * w (w + 1 with ``offset``); ``stats``:
    ``(rstd,)``, fp32 per row, filled for the backward."""
    n = x.shape[-1]
    if out.numel():
        launch(rows2d(x), weight.contiguous(), out.view(-1, n), stats[0] if stats is not None else None, eps,
               bool(offset))
    return out


def artifact(n_cols: int, dtype: torch.dtype, vector: bool = True, rows: int = 1, offset: bool = False,
             save_stats: bool = False) -> dict:
    """What :func:`launch` would run for rows of ``n_cols`` (compiled for sm_90, no GPU needed)."""
    cfg = sc.cluster_config(n_cols, torch.finfo(dtype).bits // 8, vector)
    return {"kernel": "rms_norm_cluster", "cubin": _kernel(cfg, dtype, offset, save_stats).cubin,
            "threads_per_block": cfg.threads, "dynamic_smem": sc.smem_bytes(cfg), "grid": (rows * cfg.cluster, 1, 1),
            "config": cfg}


def inspect_artifacts(size: tuple[int, ...], dtype: torch.dtype) -> list:
    """``kw inspect rms_norm --variant cluster``: the kernel the launcher would run for ``size``."""
    from kernelwright.harness.inspect import Artifact

    n, rows = size[-1], max(1, math.prod(size[:-1]))
    vector = n % (16 // (torch.finfo(dtype).bits // 8)) == 0
    art = artifact(n, dtype, vector, rows=rows)
    cfg = art["config"]
    return [Artifact(kernel=art["kernel"], cubin=art["cubin"], threads_per_block=art["threads_per_block"],
                     dynamic_smem=art["dynamic_smem"], grid=art["grid"], source=str(SOURCE),
                     note=f"{cfg.cluster} CTAs a row, {cfg.threads} threads, {cfg.nv} + {cfg.snv} accesses a thread")]
