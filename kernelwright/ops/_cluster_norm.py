"""What the normalisation families' CUDA ``cluster`` rungs (rms_norm, layer_norm; Hopper) share: launch shapes
(the softmax cluster rung's :func:`kernelwright.ops.softmax.cuda.cluster_config` and its switches, since the kernels
hold a row the same way), compile options, the driver's check for clusters past 8, the launch and ``kw inspect``'s
artifacts. Each family's ``cuda.py`` names its source, kernel and extra defines."""

from __future__ import annotations

import functools
import math
from pathlib import Path

import torch

from kernelwright.backends import nvrtc
from kernelwright.ops.softmax import cuda as sc

MAX_COLS = sc.MAX_COLS
_SHAPE_DEFINES = ("DTYPE", "VECTOR", "NV", "THREADS", "CLUSTER", "MIN_BLOCKS", "HINTS", "SNV")

W_GROUP = 4
"""Per-column 16-byte vectors (w; w and b) a thread loads together before their stores (rows.cuh's
``store_chunk``: 4 for rms_norm's w of 4 accesses, 2 accesses' w and b for layer_norm, which spilled ~100 bytes
with 4 accesses'). Run 60, rms_norm bf16 TB/s at 4096x65536 / 1024x262144: 1 (each store waiting for its own L2
round trip) 3.66 / 3.16, 2: 3.82 / 3.38, 4: 3.89 / 3.40."""
W_EARLY: bool | None = None
"""The store's first group of per-column vectors loaded right after the chunk, their L2 round trip behind the
statistics and the cluster's exchange (rows.cuh ``first_group``). None: where each family takes it (rms_norm: its
16-bit rows held by clusters of 4 CTAs, :func:`kernelwright.ops.rms_norm.cuda.w_early`; layer_norm: nowhere);
True / False: every kernel (experiments). Spills 16 bytes (rms) and 16-64 (layer norm) at 65536 / 262144 columns in
16-bit types, 32 in fp32 at 131072-262144, none at 8192 / 16384 (sm_90). Measured, bf16 TB/s, 65536 / 262144
columns: H200 run 65 (before FAST_STATS) rms 3.91 -> 3.79 / 3.41 -> 3.48, layer norm 3.09 -> 3.09 / 2.65 -> 2.51;
under sm_proxy.py's H200 stand-in (H100 run 100, 48 SMs held, alternating, twice) rms 4.45 / 4.45 -> 4.38 / 4.38 at
65536, 3.76 / 3.76 -> 3.91 / 3.91 at 262144, layer norm 3.74 / 3.72 -> 3.84 / 3.86 and 3.17 / 3.16 -> 2.98 / 3.03."""
W_GROUP_SMEM = None
"""Experiment switch: the same for the accesses whose x is held in shared memory (stored after those in
registers, whose registers are free by then); None: :data:`W_GROUP`. For layer_norm at 65536 and 262144 columns
(sm_90), 8 (w and b of 4 accesses: 6 round trips a store phase instead of 8) compiles without spills, 16 spills 136
bytes; rms_norm spills 48 bytes at 8 or 16 (it has 8 bytes at the default). Not timed yet (`ops.sh lnwide`)."""

W_PREFETCH = 0
"""Experiment switch (session 26): the store's per-column vectors
(w; w and b) prefetched into L1 this many accesses ahead of their loads (rows.cuh ``prefetch_accesses``; the first
ones right after the chunk's loads), where today each group of W_GROUP vectors waits for its own L2 round trip:
layer norm's store takes 8 such waits a CTA at 65536 columns, rms_norm's 4, and under sm_proxy.py's H200 stand-in
layer norm's store phase ran 1.5 us longer than rms_norm's (H100 run 99). No registers held (against W_EARLY's
spills); L1 is what is left beside the shared-memory vectors (~124 KB an SM at 65536 columns, two CTAs), so a
distance of one group or two (layer norm: 2 accesses, 32 KB a CTA, no spills at 65536 / 262144; rms_norm's group
is 4, which spills 36 bytes at 65536, where 2 has none). 0: off (no define). Under the stand-in (H100 run 101, x132,
twice): layer norm 3.63 / 3.74 -> 3.85 / 3.86 at 4096 x 65536 (2), nothing at 262144; rms_norm 4.45 -> 4.31 at 65536."""
HINT_LOADS: int | None = None
"""Experiment switch (session 27): x's register loads in the norm cluster rungs apart from
:data:`kernelwright.ops.softmax.cuda.HINTS` (which sets both this and :data:`HINT_STORES`): 0 ``__ldg``; 1 not kept
in L1 and first out of L2 (HINTS' loads); 2 not kept in L1 only. None: as HINTS. Why: under sm_proxy.py's H200
stand-in (H100 run 101, 48 SMs held) HINTS gave layer norm's cluster rung +6% at 4096 x 65536 (3.63 / 3.74 ->
3.96 / 3.94 x132) and +3% at 1024 x 262144, and rms_norm -3% / -4%; the softmax rung lost 7% with HINTS on an
H200 (run 54). Which half does what is the question. Since H100 runs 108-109 the stand-in's word on hints is not
taken: with run 54's own softmax kernel it read HINTS -1.6% / -0.3% where the H200 lost 7% / 7.6%."""
HINT_STORES: bool | None = None
"""Experiment switch (session 27): y's stores streaming (``st.global.cs``) apart from HINTS; None: as HINTS."""


def limit(size: tuple[int, ...], kwargs: dict) -> str | None:
    d = size[-1] if size else 1
    if d > MAX_COLS:
        return f"cluster: a row of {d} columns exceeds {MAX_COLS} (the CTAs of a cluster hold it on chip)"
    return None


def options(cfg: sc.ClusterConfig, dtype: torch.dtype, extra: tuple[str, ...],
            early: bool = False) -> nvrtc.CompileOptions:
    """The softmax rung's defines for the shape (register budget, shared-memory vectors, hints), less its own, and
    the family's ``extra`` (``NAME=VALUE``); ``early``: the family's choice of :data:`W_EARLY` for this kernel (the
    switch, when set, decides instead)."""
    keep = [d for d in sc.options(cfg, dtype).defines if d.split("=")[0] in _SHAPE_DEFINES]
    wgs = W_GROUP if W_GROUP_SMEM is None else W_GROUP_SMEM
    store = (f"WG={W_GROUP}", f"WGS={wgs}", f"WEARLY={int(early if W_EARLY is None else W_EARLY)}")
    if W_PREFETCH:  # (defined only when on: the default kernels keep their options)
        store += (f"WPF={int(W_PREFETCH)}",)
    if HINT_LOADS is not None:
        store += (f"HINT_LOADS={int(HINT_LOADS)}",)
    if HINT_STORES is not None:
        store += (f"HINT_STORES={int(HINT_STORES)}",)
    return nvrtc.CompileOptions(defines=(*keep, *store, *extra))


@functools.cache
def compiled(source: Path, name: str, opts: nvrtc.CompileOptions) -> nvrtc.CudaKernel:
    return nvrtc.CudaKernel(nvrtc.read_source(source), name, opts, what=str(source))


def plan(kernel_for, x2: torch.Tensor, y2: torch.Tensor, vectors: tuple[torch.Tensor, ...]) -> sc.ClusterConfig:
    """The launch shape for rows ``x2`` into ``y2`` with per-column ``vectors`` (weight, bias: 16-byte aligned for
    the 16-byte path); ``kernel_for(cfg)`` the kernel of a shape, for the driver's check past 8 CTAs."""
    vector = sc.aligned(x2, y2) and all(v.data_ptr() % 16 == 0 for v in vectors)
    args = (x2.shape[1], x2.element_size(), vector)
    cfg = sc.cluster_config(*args)
    if sc.launch_cluster(cfg) and not sc.holds(kernel_for(cfg), x2.device, cfg):
        cfg = sc.cluster_config(*args, nonportable=False)
    return cfg


def pair_config(cfg: sc.ClusterConfig, n_cols: int, elt: int) -> sc.ClusterConfig | None:
    """The two-rows-a-cluster shape (a family's ``PAIR`` kernel) for rows whose one-row shape ``cfg`` holds
    shared-memory vectors (the wide 16-bit rows), else None: each CTA holds the same columns of two rows, the first
    in registers and the second in shared memory, so the cluster is the one-row shape's for rows of twice the
    columns (65536 bf16 columns -> 2 CTAs of 512, 262144 -> 8 x 512)."""
    if not (cfg.vector and cfg.snv and elt == 2):
        return None
    pair = sc.cluster_config(2 * n_cols, elt, True, nonportable=False)
    return pair if pair.snv == pair.nv else None


def launch(kernel_for, x2: torch.Tensor, y2: torch.Tensor, vectors: tuple[torch.Tensor, ...],
           stats: tuple[torch.Tensor, ...], eps: float, pair: bool = False) -> None:
    """Run ``kernel_for(cfg)`` over the rows of ``x2`` [R, D] (unit column stride) into ``y2``: arguments x, the
    ``vectors``, y, the ``stats`` buffers (fp32 [R] each, or stand-ins when not saved), D, the row strides, eps
    and 1 / D. ``pair``: where :func:`pair_config` has a shape, ``kernel_for(cfg, True)`` over pairs of rows
    (its arguments take R before D)."""
    R, D = x2.shape
    if R == 0 or D == 0:
        return
    if D > MAX_COLS:
        raise ValueError(f"x: rows of {D} columns exceed the cluster rung's {MAX_COLS}")
    cfg = plan(kernel_for, x2, y2, vectors)
    two = pair_config(cfg, D, x2.element_size()) if pair else None
    if two is not None:
        cfg, rows, lead = two, (R + 1) // 2, (R,)
    else:
        rows, lead = R, ()
    grid = rows * cfg.cluster
    if grid >= 2**31:
        raise ValueError(f"x: {R} rows x {cfg.cluster} CTAs exceed the grid's 2^31 - 1 blocks")
    args = (x2, *vectors, y2, *stats, *lead, D, x2.stride(0), y2.stride(0), float(eps), 1.0 / D)
    kernel = kernel_for(cfg, True) if two is not None else kernel_for(cfg)
    kernel.launch((grid,), (cfg.threads,), args, shared_mem=sc.smem_bytes(cfg), cluster=sc.launch_cluster(cfg))


def _artifact(kernel_for, name: str, cfg: sc.ClusterConfig, clusters: int) -> dict:
    return {"kernel": name, "cubin": kernel_for(cfg).cubin, "threads_per_block": cfg.threads,
            "dynamic_smem": sc.smem_bytes(cfg), "grid": (clusters * cfg.cluster, 1, 1), "config": cfg}


def artifact(kernel_for, name: str, n_cols: int, dtype: torch.dtype, vector: bool = True, rows: int = 1) -> dict:
    """What :func:`launch` would run for rows of ``n_cols`` (compiled for sm_90, no GPU needed)."""
    return _artifact(kernel_for, name, sc.cluster_config(n_cols, torch.finfo(dtype).bits // 8, vector), rows)


def pair_artifact(kernel_for, name: str, n_cols: int, dtype: torch.dtype, rows: int = 2) -> dict | None:
    """What :func:`launch` with ``pair`` would run for 16-byte-aligned rows of ``n_cols`` (compiled for sm_90; None
    where :func:`pair_config` has no shape)."""
    elt = dtype.itemsize
    cfg = pair_config(sc.cluster_config(n_cols, elt, True), n_cols, elt)
    return None if cfg is None else _artifact(kernel_for, name, cfg, (rows + 1) // 2)


def inspect_artifacts(artifact_fn, source: Path, size: tuple[int, ...], dtype: torch.dtype) -> list:
    """``kw inspect FAMILY --variant cluster``: the kernel the launcher would run for ``size``."""
    from kernelwright.harness.inspect import Artifact

    n, rows = size[-1], max(1, math.prod(size[:-1]))
    vector = n % (16 // (torch.finfo(dtype).bits // 8)) == 0
    art = artifact_fn(n, dtype, vector, rows=rows)
    cfg = art["config"]
    return [Artifact(kernel=art["kernel"], cubin=art["cubin"], threads_per_block=art["threads_per_block"],
                     dynamic_smem=art["dynamic_smem"], grid=art["grid"], source=str(source),
                     note=f"{cfg.cluster} CTAs a row, {cfg.threads} threads, {cfg.nv} + {cfg.snv} accesses a thread")]
