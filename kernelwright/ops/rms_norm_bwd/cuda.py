"""The norm backward rung ``cluster`` in CUDA C for Hopper, shared by ``rms_norm_bwd``, ``layer_norm_bwd`` and
``add_rms_norm_bwd`` (kernel and its reasoning: ``cuda/cluster.cu``): a persistent grid of thread-block clusters
stepping over rows, each step's x and dy staged ``STAGES - 1`` steps ahead in shared memory by cp.async, the row's
two sums traded through distributed shared memory at one cluster barrier (wide rows) or a shuffle tree (narrow
rows, several a CTA), dweight / dbias kept in fp32 registers for the thread's columns and written as one partial
row a cluster, summed in a fixed order by the Triton rungs' ``_sum_partials``.

Launch shape (:func:`bwd_config`): CTAs of ``THREADS`` = 512 threads, each thread ``NV`` = 4 16-byte vectors of a
row (32 bf16 / fp16 or 16 fp32 columns; layer norm's 16-bit rows to 4096 columns 2, with 4 stages:
:data:`NARROW_CENTER`); rows narrower than a CTA holds share it (1024 bf16 columns: a warp a row, 16 rows a step),
wider ones take a cluster of as many CTAs as they need (bf16 16384 columns: 1; 65536: 4; 262144: 16, a
non-portable size; fp32 to 131072 columns). One CTA an SM (the ring: 128 KB at two stages), as many clusters
as the driver says the GPU holds at once (``cuOccupancyMaxActiveClusters``).

Where the kernel cannot take a case the rung runs a Triton rung's kernel instead (``fused`` up to 16384 columns,
else ``split``): rows that are not 16-byte aligned or whose width is not a multiple of the vector, fp32 rows past
131072 columns, a GPU that cannot hold the cluster size, strides past 32 bits (:func:`takes`;
:func:`norm_backward_cluster` returns which ran). ``variant=None`` does not pick the rung for unaligned rows.

H200 run 69 (bf16 TB/s, 16384 x 1024 / 4096 / 8192 / 16384, 4096 x 65536, 1024 x 262144): rms_norm 2.40 / 3.46 /
3.84 / 3.87 / 3.45 / 3.07, layer_norm 1.49 / 2.96 / 3.40 / 3.18 / 3.37 / 2.99 (1.88 / 3.18 at 1024 / 4096 with
:data:`NARROW_CENTER`, runs 71-72), add_rms_norm 2.65 / 3.59 / 3.87 / 3.98 / 3.53 / 2.93 (the Triton split rung:
1.14-3.75, 0.82-2.81, 1.39-3.80).
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from pathlib import Path

import torch

from kernelwright.backends import nvrtc
from kernelwright.ops._norm_common import FUSED_BWD_MAX_COLS, rows2d
from kernelwright.ops._validate import device_index

SOURCE = Path(__file__).parent / "cuda" / "cluster.cu"
THREADS = 512
NV = 4  # 16-byte vectors a thread holds of a row
STAGES = 2
"""Steps staged in the shared-memory ring (one being consumed, STAGES - 1 in flight): 64 KB a stage for x and dy of
a CTA at 16-bit (96 KB with add_rms_norm's dh), plus 32 KB for w. 3 stages: run 67 (w then read from L1) -2% to
-24% at 65536-262144 columns; run 68 (w in shared memory) -5% to +0.5% at 1024-262144 (bf16)."""
HINTS = False  # experiment switch: dx stored with .cs (streaming)
HOLD_W = False
"""Experiment switch: w held in registers for the whole loop, not in shared memory. sm_90, bf16, 512 threads at 128
registers: holding it spills 16-256 bytes a thread (layer norm at 1024 columns the most). Run 67 (bf16 TB/s, 4096 x
65536 / 1024 x 262144): held, rms 3.47 / 2.99 and layer norm 3.36 / 2.86, against 2.96 / 2.51 and 2.39 / 1.75 with w
read from L1 in each pass (that path, since replaced by the shared-memory copy: the staged x and dy leave L1 little
room, and each pass waited on L2 for w)."""
GLOBAL_FROM = 0
"""Experiment switch (0: off): rows that take at least this many CTAs trade their sums through global memory
instead of a cluster's DSMEM (``GROUP`` in ``cuda/cluster.cu``): clusters of one, any ``span`` CTAs of the grid
make a row, and the grid is a cooperative launch of as many whole groups as the GPU holds CTAs (262144 bf16
columns: 8 groups of 16 on an H200's 132 SMs, 128 busy, against 7 clusters of 16 on 112). Slower on the H200 (bf16
TB/s, rms / layer / add_rms at 1024 x 262144): clusters 3.04 / 3.00 / 2.93; the global exchange 2.43 / 2.08 / 2.55
(run 87, tagged packets), 2.18 / 1.98 / 2.38 with a release / acquire flag (run 86); at 4096 x 65536 in groups of 4,
2.64 / 2.24 / 2.75 against 3.47 / 3.38 / 3.55. A step's exchange through L2 costs ~1.5-2 us more than the cluster
barrier, more than the 14% more SMs give back. Off; kept as the measured alternative (journal "Session 21")."""
SPARE_WEIGHT = 0.35
"""Where the resident clusters leave a row's worth of SMs or more idle (262144 16-bit columns: 7 clusters of 16 CTAs on
an H100's or H200's 132 SMs, 20 idle; rows of 8-CTA clusters likewise where the residency leaves SMs over), a second
launch on a side stream runs, at the same time, groups that trade through global memory (``GROUP``) on those SMs,
over a share of the rows: a group takes ``SPARE_WEIGHT`` times a cluster's rows. The row split is fixed by the shapes
(the dweight partial rows are summed in one fixed order: two runs agree bit for bit; dx is bit for bit the
clusters-only result). 0: off. Measured on an H100 only (runs 91-93, 1024 x 262144 bf16, cluster rung, TB/s): off
2.46 / 2.33 / 2.50 (rms / layer / add_rms), 0.25 2.55 / 2.42 / 2.55, 0.35 2.58 / 2.47 / 2.58 (three runs), 0.5 2.60 /
2.49 / 2.61, 0.7 2.44 / 2.20 / 2.59, 1.0 2.08 / 1.85 / 2.20: past ~0.5 the groups finish last. 0.35 keeps clear of
that edge (the H200's, where a group ran ~1.4x a cluster's step in run 87, is not measured); at 2048 x 262144 and
1024 x 131072 in bf16 / fp16 / fp32 it gained 0-6% and lost nothing past noise (run 93)."""
MAX_CLUSTER = 16
MAX_COLS = 262144
_DTYPES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}


@dataclass(frozen=True)
class BwdConfig:
    cluster: int  # CTAs a row (1: the row within one CTA)
    threads: int  # threads a CTA
    tpr: int  # threads a row
    nv: int  # 16-byte vectors a thread a row
    stages: int
    group: int = 1  # CTAs a row trading through global memory (cluster 1 then; 1: none)

    @property
    def rows_a_step(self) -> int:
        return self.threads // self.tpr

    @property
    def span(self) -> int:
        """CTAs a row."""
        return self.cluster * self.group


SMEM_LIMIT = 227 * 1024  # dynamic shared memory a CTA may take on sm_90


NARROW_CENTER = (4096, 2, 4)
"""(widths up to, vectors a thread, stages) for layer norm's 16-bit rows: half the columns a thread, so its dweight
and dbias accumulators fit without spills (with 4 vectors it spilled 176 bytes a thread at 1024 columns), and twice
the stages, so as many bytes stay in flight. Runs 71-72 (bf16 TB/s, 16384 rows): 1024 columns 1.52 -> 1.88 / 1.86,
4096 2.99 -> 3.18; wider it lost (8192: 3.40 -> 2.56), as rms_norm and add_rms_norm did at 1024 (2.35 -> 2.28-2.34,
2.65 -> 2.48). None: off."""


def bwd_config(n_cols: int, elt: int, dh: bool = False, center: bool = False) -> BwdConfig | None:
    """The launch shape for rows of ``n_cols`` elements of ``elt`` bytes (16-byte path), or None where the kernel
    cannot hold the row (past ``MAX_CLUSTER`` CTAs: fp32 beyond 131072 columns). ``STAGES`` drops to what shared
    memory holds (with ``dh``, three arrays a stage); layer norm's (``center``) narrow 16-bit rows take
    :data:`NARROW_CENTER`."""
    nv, stages = NV, STAGES
    if center and elt == 2 and NARROW_CENTER and n_cols <= NARROW_CENTER[0]:
        nv, stages = NARROW_CENTER[1], NARROW_CENTER[2]
    per = nv * (16 // elt)
    need = -(-n_cols // per)  # threads for the whole row
    c = 1 if need <= THREADS else -(-need // THREADS)
    if c > MAX_CLUSTER:
        return None
    tpr = 1 << max(0, (need - 1).bit_length()) if c == 1 else THREADS
    while stages > 2 and smem_bytes(BwdConfig(c, THREADS, tpr, nv, stages), dh) > SMEM_LIMIT:
        stages -= 1
    if GLOBAL_FROM and c > 1 and c >= GLOBAL_FROM:
        return BwdConfig(1, THREADS, tpr, nv, stages, group=c)
    return BwdConfig(c, THREADS, tpr, nv, stages)


def smem_bytes(cfg: BwdConfig, dh: bool) -> int:
    """The ring of staged steps, then w's vectors (unless ``HOLD_W``)."""
    return (cfg.stages * (3 if dh else 2) + (0 if HOLD_W else 1)) * cfg.nv * cfg.threads * 16


def launch_cluster(cfg: BwdConfig) -> int:
    """The cluster size set at launch: 1 (so the driver's cluster occupancy query counts the CTAs an SM holds) or
    past 8 (non-portable); the kernel carries 2..8 in ``__cluster_dims__``."""
    return cfg.cluster if cfg.cluster > 8 or cfg.cluster == 1 else 0


def options(cfg: BwdConfig, dtype: torch.dtype, center: bool, dh: bool, offset: bool) -> nvrtc.CompileOptions:
    defines = {"DTYPE": _DTYPES[dtype], "THREADS": cfg.threads, "TPR": cfg.tpr, "CLUSTER": cfg.cluster,
               "NV": cfg.nv, "STAGES": cfg.stages, "CENTER": int(center), "DH": int(dh), "OFFSET": int(offset),
               "HINTS": int(HINTS), "HOLD_W": int(HOLD_W)}
    if cfg.group > 1:
        defines["GROUP"] = cfg.group
    return nvrtc.CompileOptions(defines=tuple(f"{k}={v}" for k, v in defines.items()))


@functools.cache
def _compiled(opts: nvrtc.CompileOptions) -> nvrtc.CudaKernel:
    return nvrtc.CudaKernel(nvrtc.read_source(SOURCE), "norm_bwd_cluster", opts, what=str(SOURCE))


def kernel(cfg: BwdConfig, dtype: torch.dtype, center: bool = False, dh: bool = False,
           offset: bool = False) -> nvrtc.CudaKernel:
    return _compiled(options(cfg, dtype, center, dh, offset))


_resident: dict[tuple, int] = {}  # (kernel, device, config, dh) -> clusters the GPU holds at once


def resident(k: nvrtc.CudaKernel, device: int, cfg: BwdConfig, dh: bool) -> int:
    """Clusters of ``cfg`` the GPU holds at once, by the driver (0: none, e.g. a cluster size it refuses); for a
    global-exchange config (``cfg.group`` > 1) the CTAs it holds (clusters of one)."""
    key = (id(k), device, cfg, dh)
    if device < 0:  # the CPU emulator: its answer changes with cuda_on_cpu(resident=), and costs nothing
        return k.max_active_clusters(device, cfg.threads, cfg.cluster, smem_bytes(cfg, dh))
    if key not in _resident:
        try:
            _resident[key] = k.max_active_clusters(device, cfg.threads, cfg.cluster, smem_bytes(cfg, dh),
                                                   launch_cluster=bool(launch_cluster(cfg)))
        except nvrtc.CompileError:
            raise
        except RuntimeError:  # the driver refused the configuration
            _resident[key] = 0
    return _resident[key]


def takes(x2: torch.Tensor, *others: torch.Tensor) -> bool:
    """Whether the CUDA kernel takes rows ``x2`` [R, D] (with the other row tensors and the weight) rather than a
    Triton rung's kernel: a launch shape for the width, 16-byte accesses (the cluster rungs' test,
    ``softmax.cuda.aligned``, on each row tensor; a 16-byte start for the weight), strides in 32 bits."""
    from kernelwright.ops.softmax.cuda import aligned

    rows = [t for t in others if t.dim() == 2]
    return (bwd_config(x2.shape[1], x2.element_size()) is not None
            and all(aligned(x2, t) for t in (x2, *rows))
            and all(t.data_ptr() % 16 == 0 for t in others if t.dim() < 2)
            and all(t.stride(0) < 2**31 for t in (x2, *rows)))


def norm_backward_cluster(x: torch.Tensor, weight: torch.Tensor, dy: torch.Tensor, rstd: torch.Tensor, *,
                          dx: torch.Tensor, dw: torch.Tensor, mean: torch.Tensor | None = None,
                          db: torch.Tensor | None = None, dh: torch.Tensor | None = None,
                          offset: bool = False) -> str:
    """``dx``, ``dw`` (and ``db`` with ``mean``) as :func:`kernelwright.ops.rms_norm_bwd.triton.norm_backward`
    takes them; returns which kernel ran: ``"cluster"``, or where the CUDA kernel cannot take the case (see the
    module docstring) the Triton rung that ran instead, ``"fused"`` (rows it holds) or ``"split"``."""
    from kernelwright.ops.rms_norm_bwd import triton as tb

    n_cols = x.shape[-1]
    n_rows = x.numel() // n_cols if n_cols else 0
    center = mean is not None
    x2, dy2 = rows2d(x), rows2d(dy)
    dh2 = rows2d(dh) if dh is not None else None
    w = weight.contiguous()
    dx2 = dx.view(-1, n_cols) if n_cols else dx
    rows = [t for t in (dy2, dh2, dx2) if t is not None]
    fallback = "fused" if n_cols <= FUSED_BWD_MAX_COLS else "split"

    def run_fallback() -> str:
        tb.norm_backward(fallback, x, weight, dy, rstd, dx=dx, dw=dw, mean=mean, db=db, dh=dh, offset=offset)
        return fallback

    if n_cols == 0 or n_rows == 0 or not takes(x2, *rows, w):
        return run_fallback()
    cfg = bwd_config(n_cols, x.element_size(), dh is not None, center)
    k = kernel(cfg, x.dtype, center, dh is not None, bool(offset))
    held = resident(k, device_index(x.device), cfg, dh is not None)
    steps = -(-n_rows // cfg.rows_a_step)
    clusters = min(steps, held // cfg.group)  # row groups: clusters, or groups of CTAs trading through memory
    if clusters <= 0:  # (the GPU holds none of this shape)
        return run_fallback()
    spare = spare_split(x, cfg, center, dh is not None, bool(offset), held, n_rows)
    rows_a = n_rows - (spare[2] if spare else 0)  # the clusters' rows; the spare groups take the rest
    clusters = min(clusters, -(-rows_a // cfg.rows_a_step))
    pw = torch.empty((clusters + (spare[1] if spare else 0), n_cols), dtype=torch.float32, device=x.device)
    pb = torch.empty_like(pw) if center else pw
    rstd = rstd.reshape(-1).contiguous()
    mean = mean.reshape(-1).contiguous() if center else rstd
    h2 = dh2 if dh2 is not None else dy2
    smem = smem_bytes(cfg, dh is not None)

    def args(r0: int, r1: int, p0: int, p1: int) -> tuple:  # rows r0:r1 (views), partial rows p0:p1
        return (x2[r0:r1], w, dy2[r0:r1], h2[r0:r1], mean[r0:r1], rstd[r0:r1], dx2[r0:r1], pw[p0:p1], pb[p0:p1],
                r1 - r0, n_cols, x2.stride(0), dy2.stride(0), h2.stride(0), dx2.stride(0), 1.0 / n_cols)

    def launch_groups(kg: nvrtc.CudaKernel, gcfg: BwdConfig, groups: int, a: tuple) -> None:
        ctas = groups * gcfg.group
        kg.launch((ctas,), (gcfg.threads,), a + (exchange_slots(x.device, ctas),), shared_mem=smem, cooperative=True)

    if cfg.group > 1:
        launch_groups(k, cfg, clusters, args(0, n_rows, 0, clusters))
    elif spare is None:
        k.launch((clusters * cfg.cluster,), (cfg.threads,), args(0, n_rows, 0, clusters), shared_mem=smem,
                 cluster=launch_cluster(cfg))
    else:  # the clusters on the main stream, the spare SMs' groups at the same time on a side stream
        gcfg, groups, _ = spare
        kg = kernel(gcfg, x.dtype, center, dh is not None, bool(offset))
        with side_stream(x.device) as side:
            k.launch((clusters * cfg.cluster,), (cfg.threads,), args(0, rows_a, 0, clusters), shared_mem=smem,
                     cluster=launch_cluster(cfg))  # first, so that its clusters get whole GPCs
            with side:
                launch_groups(kg, gcfg, groups, args(rows_a, n_rows, clusters, clusters + groups))
    tb._sum_partials(pw, dw)
    if center:
        tb._sum_partials(pb, db)
    return "cluster"


def spare_ctas(device: int, cfg: BwdConfig, held: int, gk: nvrtc.CudaKernel, gcfg: BwdConfig, dh: bool) -> int:
    """CTAs of the global-exchange config ``gcfg`` (kernel ``gk``) that the SMs left idle by ``held`` clusters of
    ``cfg`` hold: SMs less the clusters' CTAs, where the group kernel fits exactly one CTA an SM (the clusters' CTAs,
    with the same shared memory, then take an SM each); else 0. 0 for the emulator (device -1), which has no SMs."""
    if device < 0:
        return 0
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    if resident(gk, device, gcfg, dh) != sms:
        return 0
    return max(0, sms - held * cfg.cluster)


def spare_split(x: torch.Tensor, cfg: BwdConfig, center: bool, dh: bool, offset: bool, held: int,
                n_rows: int) -> tuple[BwdConfig, int, int] | None:
    """With :data:`SPARE_WEIGHT` on, (the groups' config, how many, their rows: the last rows) for the SMs that
    ``held`` clusters of ``cfg`` leave idle; None where there are none, or too few rows to give them any."""
    if not SPARE_WEIGHT > 0 or cfg.cluster == 1 or cfg.group > 1 or n_rows < held:
        return None
    gcfg = BwdConfig(1, cfg.threads, cfg.tpr, cfg.nv, cfg.stages, group=cfg.cluster)
    gk = kernel(gcfg, x.dtype, center, dh, offset)
    groups = spare_ctas(device_index(x.device), cfg, held, gk, gcfg, dh) // gcfg.group
    share = groups * SPARE_WEIGHT / (held + groups * SPARE_WEIGHT)
    rows = min(int(n_rows * share), n_rows - held)  # the clusters keep a row each at least
    groups = min(groups, rows)
    return (gcfg, groups, rows) if groups > 0 else None


_side_streams: dict[int, torch.cuda.Stream] = {}


@contextlib.contextmanager
def side_stream(device: torch.device):
    """A stream for work that runs beside the current stream's next launches: on entry it waits for the current
    stream's work so far, on exit the current stream waits for it (so CUDA graph capture follows both). Yields the
    context that makes it current (a null context off CUDA, where the emulator runs launches one after another)."""
    if device.type != "cuda":
        yield contextlib.nullcontext()
        return
    main = torch.cuda.current_stream(device)
    side = _side_streams.get(main.device_index)
    if side is None:
        side = _side_streams[main.device_index] = torch.cuda.Stream(device)
    side.wait_stream(main)
    try:
        yield torch.cuda.stream(side)
    finally:
        main.wait_stream(side)


_slots: dict[tuple, torch.Tensor] = {}  # (device, stream) -> the global-exchange kernels' slots


def exchange_slots(device: torch.device, ctas: int) -> torch.Tensor:
    """Zeroed slots for a global-exchange launch of ``ctas`` CTAs (``GROUP`` in ``cuda/cluster.cu``): word 0 a
    counter, then 4 words a CTA and parity. The kernel leaves them zeroed, so one buffer serves every launch on a
    stream (launches on it run in order); each (device, stream) has its own, and a CUDA graph being captured gets a
    new one (its zero fill captured with it)."""
    words = 4 + ctas * 2 * 4
    capturing = device.type == "cuda" and torch.cuda.is_current_stream_capturing()
    if capturing:
        return torch.zeros(words, dtype=torch.int32, device=device)
    key = (str(device), torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0)
    have = _slots.get(key)
    if have is None or have.numel() < words:
        have = _slots[key] = torch.zeros(words, dtype=torch.int32, device=device)
    return have


# --- the three families' rungs ---------------------------------------------------------------------------------------
def rms_norm_bwd_cluster(x, weight, dy, rstd, eps=1e-6, offset=False, *, out):
    """rms_norm backward, rung ``cluster``: ``out`` = (dx, dweight)."""
    dx, dw = out
    norm_backward_cluster(x, weight, dy, rstd, dx=dx, dw=dw, offset=offset)
    return out


def layer_norm_bwd_cluster(x, weight, dy, mean, rstd, eps=1e-5, *, out):
    """layer_norm backward, rung ``cluster``: ``out`` = (dx, dweight, dbias)."""
    dx, dw, db = out
    norm_backward_cluster(x, weight, dy, rstd, dx=dx, dw=dw, mean=mean, db=db)
    return out


def add_rms_norm_bwd_cluster(h, weight, dy, dh, rstd, eps=1e-6, offset=False, *, out):
    """add_rms_norm backward, rung ``cluster``: ``out`` = (dx (= dresidual), dweight)."""
    dx, dw = out
    norm_backward_cluster(h, weight, dy, rstd, dx=dx, dw=dw, dh=dh, offset=offset)
    return out


def limit(size: tuple[int, ...], kwargs: dict) -> str | None:
    d = size[-1] if size else 1
    if d > MAX_COLS:
        return f"cluster: a row of {d} columns exceeds {MAX_COLS} (16 CTAs of 512 threads holding it)"
    return None


def artifact(n_cols: int, dtype: torch.dtype, center: bool = False, dh: bool = False, offset: bool = False,
             rows: int = 1) -> dict:
    """What the launcher would run for rows of ``n_cols`` (compiled for sm_90, no GPU needed; the grid: one
    cluster a step up to the H200's 132 SMs' worth, an upper bound on what the driver grants)."""
    cfg = bwd_config(n_cols, torch.finfo(dtype).bits // 8, dh, center)
    if cfg is None:
        raise ValueError(f"n_cols: {n_cols} {dtype} columns exceed the cluster backward's {MAX_CLUSTER} CTAs")
    steps = -(-rows // cfg.rows_a_step)
    return {"kernel": "norm_bwd_cluster", "cubin": kernel(cfg, dtype, center, dh, offset).cubin,
            "threads_per_block": cfg.threads, "dynamic_smem": smem_bytes(cfg, dh),
            "grid": (min(steps, 132 // cfg.span) * cfg.span, 1, 1), "config": cfg}


def inspect_artifacts_for(center: bool, dh: bool):
    def inspect_artifacts(size: tuple[int, ...], dtype: torch.dtype) -> list:
        import math

        from kernelwright.harness.inspect import Artifact

        art = artifact(size[-1], dtype, center, dh, rows=max(1, math.prod(size[:-1])))
        cfg = art["config"]
        return [Artifact(kernel=art["kernel"], cubin=art["cubin"], threads_per_block=art["threads_per_block"],
                         dynamic_smem=art["dynamic_smem"], grid=art["grid"], source=str(SOURCE),
                         note=f"NVRTC, sm_90; {cfg.span} CTAs a row"
                              f"{' (a global exchange)' if cfg.group > 1 else ''}, {cfg.rows_a_step} rows a CTA "
                              f"a step, {cfg.stages} stages")]
    return inspect_artifacts


rms_inspect_artifacts = inspect_artifacts_for(False, False)
layer_inspect_artifacts = inspect_artifacts_for(True, False)
add_rms_inspect_artifacts = inspect_artifacts_for(False, True)
