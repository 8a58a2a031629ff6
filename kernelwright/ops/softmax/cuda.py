"""softmax rung ``cluster`` in CUDA C for Hopper: a row split over a thread-block cluster, partials traded through
distributed shared memory (kernel and its reasoning: ``cuda/cluster.cu``).

Rows are [R, D] views with unit column stride (the Triton module's ``_launch_rows`` moves any dim there). The
kernel is compiled per configuration by NVRTC for sm_90 (cached on disk; see :mod:`kernelwright.backends.nvrtc`)
and launched on PyTorch's current stream.

Configuration (:func:`cluster_config`): every thread keeps ``VECTORS_A_THREAD`` 16-byte vectors of its row chunk in
registers (64 bf16/fp16 or 32 fp32 values; 32 single elements on the unaligned path) and, on the 16-byte path for
bf16/fp16 rows wider than one CTA of ``MAX_THREADS_SPLIT`` = 512 threads holds that way, ``SMEM_VECTORS`` more in
shared memory; a CTA of T threads holds T x that many columns. The cluster takes as many CTAs as the row needs at
512 threads each (1 to 16, any count; past 8 a non-portable size, set at launch), then each CTA the power of two of
threads its share needs (32 to 1024): bf16 8192 columns -> 1 CTA x 128 threads; 65536 -> 1 x 512 (half in shared
memory), 262144 -> 4 x 512; fp32 262144 -> 16 x 512; a 262144-column bf16 row on the one-element path -> 16 x 512.
Where the driver says the GPU cannot hold a cluster past 8 (``cuOccupancyMaxActiveClusters``), the launcher falls
back to 8 CTAs at most (that row -> 8 x 1024). Wider rows are refused (:func:`limit`). H200 runs 52-56 chose these
(journal softmax.md, sessions 13-14): at 4096x65536 / 1024x262144 bf16, CTAs of 512 holding registers only 3.70 /
3.34 TB/s; CTAs of 256 with clusters to 16, 3.81 / 3.52; CTAs of 512 with half in shared memory, 3.89 / 3.79.
Switches for ``benchmarks/experiments/switch_bench.py``: ``CLUSTER_SIZE`` forces the cluster size where the row
fits it; ``MAX_THREADS_SPLIT`` sets the CTA size while the cluster grows; ``NONPORTABLE`` allows clusters of 16
CTAs; ``SMEM_VECTORS`` the vectors in shared memory; ``SM_THREADS`` sets the register budget; ``HINTS`` adds
streaming cache hints; ``PERSISTENT`` selects the persistent form (``PERSISTENT_VECTORS`` vectors a thread,
``STAGES`` rows staged).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from kernelwright.backends import nvrtc
from kernelwright.errors import Unavailable
from kernelwright.ops._validate import device_index

SOURCE = Path(__file__).parent / "cuda" / "cluster.cu"
MAX_CLUSTER = 8  # portable cluster size on sm_90
MAX_CLUSTER_NONPORTABLE = 16  # what H100/H200 allow once the function opts in (set at launch, cuLaunchKernelEx)
MAX_THREADS = 1024
MAX_THREADS_SPLIT = 512
"""A CTA's size while the cluster can still grow (2 CTAs an SM at <= 64 registers). With registers only, run 53
had 256 ahead (4 CTAs an SM: 3.81 / 3.52 TB/s at 65536 / 262144 bf16 against 3.70 / 3.34); with half of a
thread's vectors in shared memory (``SMEM_VECTORS``) run 56 had 512 ahead (3.89 / 3.79 against 3.72 / 3.72)."""
SM_THREADS = 1024
"""Threads an SM holds of the one-row form (sets ``MIN_BLOCKS``, so registers <= 65536 / SM_THREADS); a switch:
512 gives a thread 128 registers, room for 16 vectors."""
SMEM_VECTORS = 8
"""16-byte vectors a thread holds in shared memory (filled by cp.async) past the ``VECTORS_A_THREAD`` in registers,
on the one-row form's 16-byte path for 16-bit rows wider than one CTA's registers hold: a CTA holds twice the row at the
same registers (CTAs of 512: 64 KB in registers, 64 KB in shared memory, 2 an SM; 1024 rows of 262144 bf16 columns
take clusters of 4). Run 56: 3.89 / 3.79 TB/s at 4096x65536 / 1024x262144 bf16, against 3.82 / 3.39 without in
the same run. 0: registers only."""
HINTS = False
"""Experiment switch: streaming cache hints on the one-row form's 16-byte path (loads L1::no_allocate and
L2 evict_first, stores .cs), as the Triton split rung takes past 131072 columns."""
NONPORTABLE = True
"""Clusters of up to ``MAX_CLUSTER_NONPORTABLE`` CTAs where the driver says the GPU holds one (with the defaults:
fp32 rows past 131072 columns and unaligned rows past 131072, e.g. 16 x 512 at 262144); off: 8 at most."""
VECTORS_A_THREAD = 8  # 16-byte vectors a thread holds (32 registers); 32 elements on the unaligned path
MAX_COLS = 262144  # 8 CTAs of 1024 threads x 32 elements (fp32, or the one-element path)
CLUSTER_SIZE: int | None = None
PERSISTENT = False
"""Experiment switch, off until timed: launch only the clusters the GPU holds at once, each looping over rows with
the next ``STAGES`` rows' chunks staged in shared memory by cp.async while this one is reduced, traded and written
(16-byte path only). Run 51 read the one-row-a-cluster form's loss as nothing in flight while a CTA reduces and
waits."""
PERSISTENT_VECTORS = 4  # 16-byte vectors a thread in the persistent form: 64 registers at 1024 threads, no spills
STAGES = 2  # rows staged ahead: 2 x 64 KB of shared memory a CTA at 262144 bf16 columns
_DTYPES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}


@dataclass(frozen=True)
class ClusterConfig:
    cluster: int  # CTAs a row
    threads: int  # threads a CTA
    nv: int  # accesses a thread (16-byte vectors, or single elements when not vector)
    vector: bool
    stages: int = 0  # the persistent form's rows staged ahead in shared memory; 0: one row a cluster
    snv: int = 0  # the one-row form's vectors a thread in shared memory, after the nv in registers

    @property
    def persistent(self) -> bool:
        return self.stages > 0

    def per_thread(self, elt: int) -> int:
        return (self.nv + self.snv) * (16 // elt if self.vector else 1)

    def chunk(self, elt: int) -> int:
        """Columns one CTA holds."""
        return self.threads * self.per_thread(elt)


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def cluster_config(n_cols: int, elt: int, vector: bool, cluster: int | None = None,
                   persistent: bool = False, nonportable: bool | None = None) -> ClusterConfig:
    """The launch shape for rows of ``n_cols`` elements of ``elt`` bytes (see the module docstring); with
    ``persistent`` (16-byte path only) the persistent form's: ``PERSISTENT_VECTORS`` vectors a thread and CTAs of
    up to 1024 threads before the cluster grows (its staged rows need the registers a second CTA would take); rows
    it cannot hold in 8 such CTAs (fp32 past 131072 columns) get the one-row-a-cluster form. ``nonportable``
    (default ``NONPORTABLE``): clusters past 8 CTAs."""
    persistent = persistent and vector
    nv = (PERSISTENT_VECTORS if persistent else VECTORS_A_THREAD) if vector else 4 * VECTORS_A_THREAD
    vec = 16 // elt if vector else 1
    # shared-memory vectors for 16-bit rows wider than one CTA's registers hold (narrower rows keep their threads;
    # fp32 spills 8-40 bytes with them, sm_90 SASS)
    snv = SMEM_VECTORS if vector and elt == 2 and not persistent and n_cols > MAX_THREADS_SPLIT * nv * vec else 0
    per = (nv + snv) * vec
    need = -(-n_cols // per)  # threads for the whole row
    if persistent and need > MAX_CLUSTER * MAX_THREADS:  # (fp32 past 131072 columns) one row a cluster
        return cluster_config(n_cols, elt, vector, cluster, nonportable=nonportable)
    c = cluster or CLUSTER_SIZE or -(-need // (MAX_THREADS if persistent else MAX_THREADS_SPLIT))
    cap = MAX_CLUSTER_NONPORTABLE if (NONPORTABLE if nonportable is None else nonportable) else MAX_CLUSTER
    c = max(1, min(cap, int(c)))
    threads = min(MAX_THREADS, max(32, _pow2_at_least(-(-need // c))))
    c = max(c, -(-need // threads))  # a forced size too small for the row grows
    if c > cap:
        raise ValueError(f"n_cols: rows of {n_cols} columns need {c} CTAs of {threads} threads; the cluster rung "
                         f"takes at most {cap}")
    return ClusterConfig(c, threads, nv, vector, STAGES if persistent else 0, snv)


def limit(size: tuple[int, ...], kwargs: dict) -> str | None:
    d = size[kwargs.get("dim", -1)] if size else 1
    if d > MAX_COLS:
        return f"cluster: a row of {d} columns exceeds {MAX_COLS} (8 CTAs holding it in registers)"
    return None


def options(cfg: ClusterConfig, dtype: torch.dtype) -> nvrtc.CompileOptions:
    defines = {"DTYPE": _DTYPES[dtype], "VECTOR": int(cfg.vector), "NV": cfg.nv, "THREADS": cfg.threads,
               # one-row-a-cluster: 64 registers whatever the CTA's size (2 CTAs of 512 an SM); the persistent
               # form, whose shared memory bounds its CTAs an SM anyway, gets what it needs (64 at 1024 threads)
               "CLUSTER": cfg.cluster, "MIN_BLOCKS": 1 if cfg.persistent else max(1, SM_THREADS // cfg.threads),
               "PERSISTENT": int(cfg.persistent), "STAGES": max(1, cfg.stages), "HINTS": int(HINTS),
               "SNV": cfg.snv}
    return nvrtc.CompileOptions(defines=tuple(f"{k}={v}" for k, v in defines.items()))


def _kernel(cfg: ClusterConfig, dtype: torch.dtype) -> nvrtc.CudaKernel:
    return _compiled(options(cfg, dtype))  # keyed by every define, so a switch flipped mid-process takes effect


@functools.cache
def _compiled(opts: nvrtc.CompileOptions) -> nvrtc.CudaKernel:
    return nvrtc.CudaKernel(nvrtc.read_source(SOURCE), "softmax_cluster", opts, what=str(SOURCE))


def smem_bytes(cfg: ClusterConfig) -> int:
    """Dynamic shared memory a CTA: the persistent form's stage, or the one-row form's shared-memory vectors."""
    return stage_bytes(cfg) if cfg.persistent else cfg.snv * cfg.threads * 16


def stage_bytes(cfg: ClusterConfig) -> int:
    """The persistent form's dynamic shared memory: ``stages`` slots of 16 bytes per vector a CTA holds."""
    return cfg.stages * cfg.threads * cfg.nv * 16


def launch_cluster(cfg: ClusterConfig) -> int:
    """The cluster size to set at launch: a non-portable one (past 8; the kernel is compiled without
    ``__cluster_dims__`` then), else 0 (the kernel carries it)."""
    return cfg.cluster if cfg.cluster > MAX_CLUSTER else 0


def resident_clusters(cfg: ClusterConfig, regs: int, sms: int, static_smem: int = 1024) -> int:
    """Clusters of ``cfg``'s persistent form that the GPU holds at once (at least 1) by CUDA's occupancy arithmetic
    (:func:`kernelwright.harness.inspect.occupancy`: registers, threads, the stage plus ``static_smem``, a bound on
    the kernel's ~300 static bytes) times ``sms``, over the cluster size: an upper bound, since a cluster's CTAs
    share one GPC and GPCs fragment (:func:`launch` asks the driver instead; this is for ``kw inspect`` off the
    GPU)."""
    from kernelwright.harness.inspect import occupancy

    per_sm = occupancy(cfg.threads, regs, stage_bytes(cfg) + static_smem).blocks_per_sm
    return max(1, per_sm * sms // cfg.cluster)


def aligned(x2: torch.Tensor, y2: torch.Tensor) -> bool:
    """16-byte accesses need whole vectors in every row and 16-byte-aligned row starts (also the norm cluster
    rungs' test)."""
    elt = x2.element_size()
    vec = 16 // elt
    return (x2.shape[1] % vec == 0 and all(t.data_ptr() % 16 == 0 and (t.stride(0) * elt) % 16 == 0
                                           for t in (x2, y2)))


def plan(x2: torch.Tensor, y2: torch.Tensor) -> ClusterConfig:
    args = (x2.shape[1], x2.element_size(), aligned(x2, y2))
    cfg = cluster_config(*args, persistent=PERSISTENT)
    if launch_cluster(cfg) and not holds(_kernel(cfg, x2.dtype), x2.device, cfg):
        cfg = cluster_config(*args, persistent=PERSISTENT, nonportable=False)
    return cfg


_holds_cache: dict[tuple, bool] = {}  # (kernel, device, config) -> whether the GPU holds one cluster of it


def holds(kernel: nvrtc.CudaKernel, device: torch.device, cfg: ClusterConfig) -> bool:
    """Whether CUDA device ``device`` can run ``kernel`` in a cluster of ``cfg`` set at launch (past 8 CTAs, sizes
    are the GPU's choice: the driver counts how many it holds at once; an error or 0 means no). Also for the
    norm cluster rungs (:mod:`kernelwright.ops._cluster_norm`), which launch the same shapes."""
    index = device_index(device)
    key = (id(kernel), index, cfg)
    if key not in _holds_cache:
        try:
            n = kernel.max_active_clusters(index, cfg.threads, cfg.cluster, smem_bytes(cfg), launch_cluster=True)
        except (nvrtc.CompileError, Unavailable):
            raise
        except RuntimeError:  # a driver call refused (the cluster size, on this GPU)
            n = 0
        _holds_cache[key] = n > 0
    return _holds_cache[key]


_resident: dict[tuple, int] = {}  # (device, config, dtype) -> clusters of the persistent form resident at once


def launch(x2: torch.Tensor, y2: torch.Tensor) -> None:
    """softmax of the rows of ``x2`` [R, D] into ``y2`` (unit column strides)."""
    R, D = x2.shape
    if R == 0 or D == 0:
        return
    if D > MAX_COLS:
        raise ValueError(f"x: rows of {D} columns exceed the cluster rung's {MAX_COLS}")
    cfg = plan(x2, y2)
    args = (x2, y2, D, x2.stride(0), y2.stride(0), R)
    if cfg.persistent:
        kernel = _kernel(cfg, x2.dtype)
        device = device_index(x2.device)
        key = (device, cfg, x2.dtype)
        if key not in _resident or device < 0:  # (the CPU emulator's answer follows cuda_on_cpu(resident=))
            # the driver's count knows how the GPCs split the SMs (run 52: the arithmetic's 16 clusters of 8 at
            # 262144 bf16 columns ran as two waves, 1.6 TB/s)
            _resident[key] = max(1, kernel.max_active_clusters(device, cfg.threads, cfg.cluster, stage_bytes(cfg),
                                                               launch_cluster=bool(launch_cluster(cfg))))
        clusters = min(R, _resident[key])
        kernel.launch((clusters * cfg.cluster,), (cfg.threads,), args, shared_mem=stage_bytes(cfg),
                      cluster=launch_cluster(cfg))
        return
    grid = R * cfg.cluster
    if grid >= 2**31:
        raise ValueError(f"x: {R} rows x {cfg.cluster} CTAs exceed the grid's 2^31 - 1 blocks")
    _kernel(cfg, x2.dtype).launch((grid,), (cfg.threads,), args, shared_mem=smem_bytes(cfg),
                                  cluster=launch_cluster(cfg))



def artifact(n_cols: int, dtype: torch.dtype, vector: bool = True, rows: int = 1, persistent: bool = False) -> dict:
    """What :func:`launch` would run for rows of ``n_cols`` (compiled for sm_90, no GPU needed; the persistent
    form's grid is the H200's resident clusters at 64 registers)."""
    cfg = cluster_config(n_cols, torch.finfo(dtype).bits // 8, vector, persistent=persistent)
    grid = min(rows, resident_clusters(cfg, 64, 132)) * cfg.cluster if cfg.persistent else rows * cfg.cluster
    return {"kernel": "softmax_cluster", "cubin": _kernel(cfg, dtype).cubin, "threads_per_block": cfg.threads,
            "dynamic_smem": smem_bytes(cfg), "grid": (grid, 1, 1), "config": cfg}


def softmax_cluster(x: torch.Tensor, dim: int = -1, *, out: torch.Tensor) -> torch.Tensor:
    from kernelwright.ops.softmax.triton import _launch_rows

    return _launch_rows(x, dim, out, launch)


def inspect_artifacts(size: tuple[int, ...], dtype: torch.dtype) -> list:
    """``kw inspect softmax --variant cluster``: the kernel the launcher would run for ``size`` (softmax over the
    last dim, 16-byte path when the width allows it), in the form ``PERSISTENT`` selects."""
    from kernelwright.harness.inspect import Artifact

    n, rows = size[-1], max(1, math.prod(size[:-1]))
    vector = n % (16 // (torch.finfo(dtype).bits // 8)) == 0
    art = artifact(n, dtype, vector, rows=rows, persistent=PERSISTENT)
    cfg = art["config"]
    form = f"persistent, {cfg.stages} rows staged" if cfg.persistent else "one row a cluster"
    return [Artifact(kernel=art["kernel"], cubin=art["cubin"], threads_per_block=art["threads_per_block"],
                     dynamic_smem=art["dynamic_smem"], grid=art["grid"], source=str(SOURCE),
                     note=f"NVRTC, sm_90; {cfg.cluster} CTAs a row x {cfg.threads} threads, {form}")]
