"""matmul in CUDA C: the classic fp32 SGEMM ladder, seven rungs from one thread per output to warp tiling.

C = A @ B with A [M, K], B [K, N], C [M, N], all float32, computed on CUDA cores (no tensor cores, no TF32).
Minimum traffic: read M*K + K*N, write M*N floats; 2*M*N*K FLOPs. Each rung is one ``.cu`` file in ``cuda/``
(``SOURCES``), compiled at run time by NVRTC for sm_90 (cached on disk, see :mod:`kernelwright.backends.nvrtc`)
and launched on PyTorch's current stream, so it orders with PyTorch's work and can be captured in a CUDA graph.

Layout: the kernels read row-major contiguous A and B. Inputs with other strides (a transposed view, a
strided slice) are packed with ``.contiguous()`` first: one extra copy, outside the kernel. ``out`` must be a
contiguous [M, N] float32 tensor. Any M, N, K works (K = 0 writes zeros; empty outputs launch nothing).

The two float4 rungs (``cuda_vectorized``, ``cuda_warptile``) have two entry points each: ``*_vec4`` (128-bit
global accesses) when K % 4 == N % 4 == 0 and A, B and C are 16-byte aligned, else ``*_scalar`` (the same
kernel, predicated scalar global accesses). Both zero-fill tile borders, so ragged shapes are exact.

Tile parameters (configs are data: ``CONFIGS``, ``WARPTILE_SMALL``; :func:`config` picks per shape):

* naive / coalesced: 32 x 32 threads, one output each.
* smem: TILE x TILE threads and tiles, TILE = 32 by default (8 and 16 for the tile-size experiment).
* blocktile1d: 64 x 64 outputs per block, BK = 8, 8 outputs per thread, so 512 threads that each copy exactly
  one element of each tile.
* blocktile2d, vectorized: 128 x 128 outputs per block, BK = 8, 8 x 8 outputs per thread, 256 threads.
* warptile, chosen for Hopper (132 SMs; per SM 64K registers, 228 KB shared memory and 4 schedulers that
  issue one warp instruction per clock, so the FMA pipes stay full only if nearly every instruction issued is
  an FFMA): 128 x 256 outputs per block, BK = 8, 256 threads = 8 warps as 2 x 4 warp tiles of 64 x 64, each
  done as 4 x 2 sub-tiles of 16 x 32 in which the lanes (4 x 8) own 4 x 4 blocks: 128 accumulators per
  thread. Per k step a thread issues 6 float4 shared loads for 128 FMAs (0.05 per FMA; cuda_vectorized's 8 x 8
  thread tile: 0.06), and each of a warp's shared loads reads one contiguous 64- or 128-byte span. Registers
  decide occupancy: ~225 per thread (128 accumulators, 24 operands, addresses) allows one block of 8 warps per
  SM; the 128 independent accumulators give each warp the instruction-level parallelism a second block would,
  and cp.async keeps 3 tiles in flight without holding registers: 4 stages x 8 x (132 + 256) floats = 49.7 KB
  of shared memory (above 48 KB: the launcher raises the function's dynamic limit). At 4096^3: 512 blocks, 3.9
  waves. Measured while choosing (H200, 4096^3, TF32 off, cuBLAS 50 TFLOP/s): this config 42.5 TFLOP/s (0.84x);
  BK = 16 with 3 stages 40.3; 128 x 128 tiles with 2 blocks per SM 36-39; 64 x 64 tiles 32; register-staged
  double buffering instead of cp.async 36-38; everything else tried 33-38.
  Below 3/4 of a wave of large tiles, :func:`config` takes ``WARPTILE_SMALL``: 64 x 64 outputs per block,
  BK = 16, 3 stages, 128 threads as 2 x 2 warp tiles of 32 x 32 (64 accumulators, ~120 registers), so 4 blocks
  share an SM and a 1024^2 output still makes 256 blocks (22.6 TFLOP/s at 1024^3 against 9.6 for the large
  tiles, which leave 100 of the 132 SMs idle).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from kernelwright.backends import nvrtc
from kernelwright.errors import UsageError

_DIR = Path(__file__).parent / "cuda"
RUNGS = ("cuda_naive", "cuda_coalesced", "cuda_smem", "cuda_blocktile1d", "cuda_blocktile2d", "cuda_vectorized",
         "cuda_warptile")
SOURCES: dict[str, Path] = {rung: _DIR / f"{rung.removeprefix('cuda_')}.cu" for rung in RUNGS}
SMEM_TILES = (8, 16, 32)
_MAX_GRID_Y = 65535


@dataclass(frozen=True)
class LaunchConfig:
    """How one rung is compiled and launched.

    ``threads`` is the block shape (x, y); ``tile`` the rows x columns of C one block computes; ``defines`` the
    ``-D`` macros of the source; ``m_on_x`` puts M on grid x (cuda_naive only); ``vec4`` says the source has
    ``_vec4`` and ``_scalar`` entry points; ``smem`` is the dynamic shared memory in bytes.
    """

    rung: str
    threads: tuple[int, int]
    tile: tuple[int, int]
    defines: tuple[tuple[str, int], ...] = ()
    m_on_x: bool = False
    vec4: bool = False
    smem: int = 0

    @property
    def options(self) -> nvrtc.CompileOptions:
        return nvrtc.CompileOptions(defines=tuple(f"{k}={v}" for k, v in self.defines))


def smem_config(tile: int = 32) -> LaunchConfig:
    """The ``cuda_smem`` config for a TILE x TILE block (8, 16 or 32)."""
    if tile not in SMEM_TILES:
        raise UsageError(f"tile: expected one of {', '.join(map(str, SMEM_TILES))}, got {tile!r}")
    return LaunchConfig("cuda_smem", (tile, tile), (tile, tile), (("TILE", tile),))


def warptile_config(nt=256, bm=128, bn=256, bk=8, wm=64, wn=64, wniter=2, tm=4, tn=4, stages=4,
                    minblocks=1) -> LaunchConfig:
    """A ``cuda_warptile`` config; the defaults are the large-shape Hopper choice of the module docstring.

    ``nt`` threads; ``bm`` x ``bn`` outputs per block, ``bk`` k per stage, ``stages`` shared-memory stages;
    ``wm`` x ``wn`` outputs per warp in ``wniter`` column steps; ``tm`` x ``tn`` outputs per lane and sub-tile;
    ``minblocks`` resident blocks per SM promised to the register allocator. The kernel's static_asserts reject
    inconsistent combinations.
    """
    defines = (("NT", nt), ("BM", bm), ("BN", bn), ("BK", bk), ("WM", wm), ("WN", wn), ("WNITER", wniter),
               ("TM", tm), ("TN", tn), ("STAGES", stages), ("MINBLOCKS", minblocks))
    return LaunchConfig("cuda_warptile", (nt, 1), (bm, bn), defines, vec4=True,
                        smem=stages * bk * (bm + 4 + bn) * 4)


_TILE2D = (("BM", 128), ("BN", 128), ("BK", 8), ("TM", 8), ("TN", 8))
CONFIGS: dict[str, LaunchConfig] = {
    "cuda_naive": LaunchConfig("cuda_naive", (32, 32), (32, 32), m_on_x=True),
    "cuda_coalesced": LaunchConfig("cuda_coalesced", (32, 32), (32, 32)),
    "cuda_smem": smem_config(32),
    "cuda_blocktile1d": LaunchConfig("cuda_blocktile1d", (512, 1), (64, 64),
                                     (("BM", 64), ("BN", 64), ("BK", 8), ("TM", 8))),
    "cuda_blocktile2d": LaunchConfig("cuda_blocktile2d", (256, 1), (128, 128), _TILE2D),
    "cuda_vectorized": LaunchConfig("cuda_vectorized", (256, 1), (128, 128), _TILE2D, vec4=True),
    "cuda_warptile": warptile_config(),
}

# cuda_warptile when the large tiles would leave SMs idle: 8x the blocks, 4 per SM
WARPTILE_SMALL = warptile_config(nt=128, bm=64, bn=64, bk=16, wm=32, wn=32, stages=3, minblocks=4)
_SMS = 132  # H200 / H100 SXM multiprocessors: the wave the warptile choice was tuned for

NOTES: dict[str, str] = {
    "cuda_naive": (
        "One thread per output, threadIdx.x walking M: a warp reads 32 rows of A K floats apart and writes 32 "
        "rows of C, so global accesses are uncoalesced (L1 absorbs part of it: the block's 32 warps share those "
        "rows). The baseline. Predicted: ~0.5 TFLOP/s at 1024^3 and 4096^3 (about 1% of the ~60 TFLOP/s FP32 "
        "peak), bound by load transactions."
    ),
    "cuda_coalesced": (
        "Same work, threadIdx.x now walks N: a warp's loads of B and stores of C are contiguous 128-byte "
        "accesses and its A value is a broadcast. Removes the uncoalesced traffic; what is left is two cache "
        "loads per FMA. Predicted: ~6x over naive at both 1024^3 and 4096^3 (32 transactions become 1-2, less "
        "what L1 was already saving naive)."
    ),
    "cuda_smem": (
        "32 x 32 tiles of A and B staged in shared memory (zero-padded at the borders), so each global element "
        "is read once per block instead of 32 times; the loop still does 2 shared loads per FMA, now the "
        "bottleneck. Predicted: ~1.3x over coalesced at 1024^3 and 4096^3 (Hopper's L1 already served "
        "coalesced well, and L1 and shared memory share one bandwidth); TILE = 8 is slower than 16 and 32 "
        "(more blocks, 8x less reuse)."
    ),
    "cuda_blocktile1d": (
        "Each thread computes 8 outputs of one column (64 x 64 block tile, BK = 8, 512 threads): one B value in "
        "a register feeds 8 FMAs, so shared loads per FMA fall from 2 to ~1.1 and global traffic halves again. "
        "Removes most of the shared-memory bottleneck. Predicted: ~2.5x over smem at 4096^3 and ~2.3x at "
        "1024^3 (256 blocks still fill the 132 SMs)."
    ),
    "cuda_blocktile2d": (
        "Each thread computes an 8 x 8 outer product per k step (128 x 128 block tile, 256 threads): 16 shared "
        "loads for 64 FMAs (0.25 per FMA instead of ~1.1). Predicted: ~1.8x over blocktile1d at 4096^3, but "
        "only ~1.0x at 1024^3, where 64 blocks of 128 x 128 leave half of the 132 SMs idle."
    ),
    "cuda_vectorized": (
        "Same tiling with float4 global loads and stores and the A tile stored transposed in shared memory, so "
        "the inner loop reads A and B with float4 too: 4 shared-load instructions per 64 FMAs instead of 16, "
        "fewer issue slots lost to loads. Predicted: ~1.2x over blocktile2d at 4096^3 and ~1.1x at 1024^3 "
        "(still half the SMs idle there)."
    ),
    "cuda_warptile": (
        "Adds a warp tile between the block and thread tiles (a warp owns 64 x 64 outputs, its lanes adjacent "
        "4 x 4 blocks, so every float4 shared load is one conflict-free contiguous span), grows the block tile "
        "to 128 x 256 with 128 accumulators per thread, and feeds it through a 4-stage cp.async pipeline, so "
        "global loads no longer cost registers, instructions or exposed latency between tiles. Predicted: "
        "~1.25x over vectorized at 4096^3 (~42 TFLOP/s, ~0.84x cuBLAS) and ~1.7x at 1024^3, where its 64 x 64 "
        "small config fills every SM (vectorized's 128 x 128 tiles fill 64); unlike the other rungs' "
        "predictions, these come after the H200 tuning runs that chose the tiles."
    ),
}


@functools.cache
def _kernel(config: LaunchConfig, name: str) -> nvrtc.CudaKernel:
    path = SOURCES[config.rung]
    return nvrtc.CudaKernel(nvrtc.read_source(path), name, config.options, what=str(path))


def _entry(config: LaunchConfig, vec4: bool) -> str:
    return config.rung if not config.vec4 else f"{config.rung}_{'vec4' if vec4 else 'scalar'}"


def _grid(config: LaunchConfig, m: int, n: int) -> tuple[int, int, int]:
    gm, gn = math.ceil(m / config.tile[0]), math.ceil(n / config.tile[1])
    grid = (gm, gn, 1) if config.m_on_x else (gn, gm, 1)
    if grid[1] > _MAX_GRID_Y:
        raise UsageError(f"{config.rung}: {m}x{n} needs {grid[1]} blocks along grid y, more than {_MAX_GRID_Y}")
    return grid


def config(rung: str, m: int, n: int, tile: int = 32) -> LaunchConfig:
    """The launch config ``rung`` uses for an ``m x n`` output (``tile``: the ``cuda_smem`` tile edge).

    Every rung has one config (``CONFIGS``) except ``cuda_warptile``, which takes ``WARPTILE_SMALL`` when its
    large 128 x 256 tiles would fill less than 3/4 of one wave of 132 SMs (below about 1800^2 outputs):
    measured on an H200, large tiles on 32 SMs (1024^3) ran at 9.6 TFLOP/s and small ones at 22.6, while at
    2048^3 (128 large blocks) large ran at 40.4 and small at 29.7.
    """
    if rung == "cuda_smem":
        return smem_config(tile)
    if rung not in CONFIGS:
        raise UsageError(f"rung: expected one of {', '.join(RUNGS)}, got {rung!r}")
    large = CONFIGS[rung]
    if rung == "cuda_warptile" and 4 * math.ceil(m / large.tile[0]) * math.ceil(n / large.tile[1]) < 3 * _SMS:
        return WARPTILE_SMALL
    return large


def artifact(rung: str, M: int, N: int, K: int, tile: int = 32) -> dict:
    """What the launcher would run for an ``M x N x K`` product, without a GPU.

    Parameters
    ----------
    rung : str
        One of ``RUNGS``.
    M, N, K : int
        Problem size (each >= 1).
    tile : int
        ``cuda_smem`` only: 8, 16 or 32.

    Returns
    -------
    dict
        ``kernel`` (entry point name), ``cubin`` (bytes, sm_90), ``threads_per_block``, ``dynamic_smem``
        (bytes) and ``grid`` (x, y, z). For the float4 rungs the ``_vec4`` entry is assumed when K and N are
        multiples of 4, as for freshly allocated (16-byte aligned) tensors; a misaligned view gets ``_scalar``.
    """
    if min(M, N, K) < 1:
        raise UsageError(f"size: expected M, N, K >= 1, got {M}x{N}x{K}")
    cfg = config(rung, M, N, tile)
    name = _entry(cfg, K % 4 == 0 and N % 4 == 0)
    return {"kernel": name, "cubin": _kernel(cfg, name).cubin, "threads_per_block": math.prod(cfg.threads),
            "dynamic_smem": cfg.smem, "grid": _grid(cfg, M, N)}


def compile_all(arch: str = "sm_90") -> dict[str, bytes]:
    """Compile every rung and every config variant for ``arch``; no GPU needed.

    Returns ``{rung: cubin}`` plus ``"cuda_smem[tile=8]"``, ``"cuda_smem[tile=16]"`` (``"cuda_smem"`` is tile
    32) and ``"cuda_warptile[small]"``. Raises :class:`~kernelwright.backends.nvrtc.CompileError` with NVRTC's
    log on a bad source.
    """
    configs = dict(CONFIGS)
    configs.update({f"cuda_smem[tile={t}]": smem_config(t) for t in SMEM_TILES if t != 32})
    configs["cuda_warptile[small]"] = WARPTILE_SMALL
    out = {}
    for key, cfg in configs.items():
        options = nvrtc.CompileOptions(arch=arch, defines=cfg.options.defines)
        out[key] = nvrtc.compile_cubin(nvrtc.read_source(SOURCES[cfg.rung]), options, what=str(SOURCES[cfg.rung]))
    return out


def launch(cfg: LaunchConfig, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Run the kernel of ``cfg`` on ``a`` [M, K] and ``b`` [K, N] into ``out`` [M, N] (all float32, CUDA).

    The rung functions pick their config with :func:`config`; this entry takes any config, for experiments
    (``warptile_config(...)``). Returns ``out``.
    """
    return _launch(cfg, a, b, out, *_checked(a, b, out))


def _checked(a, b, out) -> tuple[int, int, int]:
    from kernelwright.backends import emulate

    where = ("cuda", "cpu") if emulate.active() else ("cuda",)  # CPU tensors: the emulator's
    for name, t in (("a", a), ("b", b), ("out", out)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float32 or t.dim() != 2 or t.device.type not in where:
            raise UsageError(f"{name}: expected a 2-D float32 CUDA tensor, got {_describe(t)}")
    (m, k), (k2, n) = a.shape, b.shape
    if k2 != k:
        raise UsageError(f"b: expected {k} rows to match a's {k} columns, got shape {tuple(b.shape)}")
    if tuple(out.shape) != (m, n) or not out.is_contiguous() or out.device != a.device or b.device != a.device:
        raise UsageError(f"out: expected a contiguous [{m}, {n}] tensor on {a.device}, got {_describe(out)}")
    return m, n, k


def _launch(cfg: LaunchConfig, a, b, out, m: int, n: int, k: int) -> torch.Tensor:
    if m == 0 or n == 0:
        return out
    if k == 0:
        return out.zero_()  # an empty sum
    a, b = a.contiguous(), b.contiguous()  # no-ops for row-major inputs
    vec4 = cfg.vec4 and k % 4 == 0 and n % 4 == 0 and not (a.data_ptr() | b.data_ptr() | out.data_ptr()) % 16
    _kernel(cfg, _entry(cfg, vec4)).launch(_grid(cfg, m, n), cfg.threads, (a, b, out, m, n, k), cfg.smem)
    return out


def _matmul(rung: str, a, b, out, tile: int = 32) -> torch.Tensor:
    m, n, k = _checked(a, b, out)
    return _launch(config(rung, m, n, tile), a, b, out, m, n, k)


def _describe(t) -> str:
    if not isinstance(t, torch.Tensor):
        return type(t).__name__
    return f"{str(t.dtype).removeprefix('torch.')} {tuple(t.shape)} on {t.device}" + \
        ("" if t.is_contiguous() else " (not contiguous)")


def cuda_naive(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    """C = A @ B, one thread per output with threadIdx.x walking M (uncoalesced): the ladder's first rung.

    Parameters
    ----------
    a : torch.Tensor
        [M, K] float32 on a CUDA device; any strides (non-row-major inputs are packed with ``.contiguous()``).
    b : torch.Tensor
        [K, N] float32 on the same device; any strides (packed likewise).
    out : torch.Tensor
        [M, N] contiguous float32 on the same device; overwritten.

    Returns
    -------
    torch.Tensor
        ``out``.
    """
    return _matmul("cuda_naive", a, b, out)


def cuda_coalesced(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    """C = A @ B, one thread per output with threadIdx.x walking N (coalesced). Arguments as :func:`cuda_naive`."""
    return _matmul("cuda_coalesced", a, b, out)


def cuda_smem(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor, tile: int = 32) -> torch.Tensor:
    """C = A @ B through TILE x TILE shared-memory tiles, one thread per output.

    Arguments as :func:`cuda_naive`, plus ``tile`` : int, the tile edge (8, 16 or 32).
    """
    return _matmul("cuda_smem", a, b, out, tile)


def cuda_blocktile1d(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    """C = A @ B, 64 x 64 block tiles, 8 outputs of a column per thread. Arguments as :func:`cuda_naive`."""
    return _matmul("cuda_blocktile1d", a, b, out)


def cuda_blocktile2d(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    """C = A @ B, 128 x 128 block tiles, an 8 x 8 block of outputs per thread. Arguments as :func:`cuda_naive`."""
    return _matmul("cuda_blocktile2d", a, b, out)


def cuda_vectorized(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    """C = A @ B, 2-D register blocking with float4 global and shared loads. Arguments as :func:`cuda_naive`."""
    return _matmul("cuda_vectorized", a, b, out)


def cuda_warptile(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    """C = A @ B, block / warp / thread tiling with two shared-memory stages. Arguments as :func:`cuda_naive`."""
    return _matmul("cuda_warptile", a, b, out)
