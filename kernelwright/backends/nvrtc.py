"""CUDA C compiled at run time through NVRTC (via ``cuda-core``), with an on-disk cubin cache.

No host compiler is needed, and no GPU either: compiling is pure CPU work, so CI compile-checks every ``.cu``
source of the library. :class:`CudaKernel` loads a cubin with the driver API (``cuda.bindings.driver``) into
each device's primary context, the one PyTorch uses, and launches it on PyTorch's current stream; that part
needs a GPU.

Cache: ``$KW_CACHE_DIR/cubin/<sha256>.cubin`` (default ``~/.cache/kernelwright``), keyed by the source, the
kernel names, the target architecture, the options and the NVRTC and cuda-core versions, so a change to any of
them compiles again. A cache file that cannot be read is ignored and rewritten.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from kernelwright.errors import Unavailable


class CompileError(RuntimeError):
    """NVRTC rejected a source; ``log`` holds the compiler's messages."""

    def __init__(self, what: str, log: str):
        super().__init__(f"{what}: CUDA C compilation failed:\n{log}")
        self.log = log


@dataclass(frozen=True)
class CompileOptions:
    arch: str = "sm_90"
    std: str = "c++17"
    max_register_count: int | None = None
    defines: tuple[str, ...] = field(default_factory=tuple)
    """``NAME`` or ``NAME=VALUE`` macro definitions"""


def _toolchain() -> tuple[object, object, str]:
    try:
        import cuda.core as cc
        from cuda.core import Program, ProgramOptions
    except ImportError:
        raise Unavailable(
            "CUDA C rungs need NVRTC through cuda-core: pip install cuda-core 'cuda-bindings==13.*' nvidia-cuda-nvrtc"
        ) from None
    try:
        from cuda.bindings import nvrtc

        err, major, minor = nvrtc.nvrtcVersion()
        nvrtc_version = f"{major}.{minor}"
    except Exception:
        nvrtc_version = "unknown"
    return Program, ProgramOptions, f"cuda-core {cc.__version__}, nvrtc {nvrtc_version}"


def cache_dir() -> Path:
    base = os.environ.get("KW_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "kernelwright")
    return Path(base) / "cubin"


def cache_key(source: str, options: CompileOptions, toolchain: str) -> str:
    h = hashlib.sha256()
    for part in (source, repr(options), toolchain):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def compile_cubin(source: str, options: CompileOptions | None = None, *, what: str = "<source>") -> bytes:
    """Compile CUDA C ``source`` to a cubin for ``options.arch``, from the cache when it is there.

    Raises :class:`CompileError` with NVRTC's log when the source does not compile, and
    :class:`~kernelwright.errors.Unavailable` when cuda-core / NVRTC are not installed.
    """
    options = options or CompileOptions()
    Program, ProgramOptions, toolchain = _toolchain()
    path = cache_dir() / f"{cache_key(source, options, toolchain)}.cubin"
    try:
        data = path.read_bytes()
        if data[:4] == b"\x7fELF":  # a cubin is an ELF image; anything else is a torn or foreign file
            return data
    except OSError:
        pass
    opts = ProgramOptions(arch=options.arch, std=options.std, max_register_count=options.max_register_count,
                          define_macro=list(options.defines) or None)
    try:
        code = Program(source, code_type="c++", options=opts).compile("cubin")
    except Exception as e:  # NVRTCError carries the log in its message
        raise CompileError(what, str(e)) from None
    data = bytes(code.code)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as tmp:  # atomic: no reader sees half a file
        tmp.write(data)
    os.replace(tmp.name, path)
    return data


def read_source(path: str | Path) -> str:
    """The text of a ``.cu`` file with each ``#include "x.cuh"`` line replaced by that file's text (a path relative
    to the including file; nested includes too), so the compile cache's key covers the headers as well."""
    path = Path(path)
    lines = []
    for line in path.read_text().splitlines(keepends=True):
        if line.startswith('#include "'):
            lines.append(read_source(path.parent / line.split('"')[1]))
        else:
            lines.append(line)
    return "".join(lines)


def compile_file(path: str | Path, options: CompileOptions | None = None) -> bytes:
    p = Path(path)
    return compile_cubin(read_source(p), options, what=str(p))


# --- loading and launching (needs a GPU) ------------------------------------------------------------------------
_STATIC_SMEM_LIMIT = 48 * 1024  # a launch may ask for more dynamic shared memory only after the attribute is raised
_drv = None


def _driver():
    """``cuda.bindings.driver``, imported on first use (CPU-only installs never need it)."""
    global _drv
    if _drv is None:
        try:
            from cuda.bindings import driver
        except ImportError:
            raise Unavailable("launching CUDA C kernels needs the driver bindings: pip install 'cuda-bindings==13.*'") \
                from None
        _drv = driver
    return _drv


def _check(call: str, result: tuple):
    """Unpack a ``cuda.bindings`` result ``(CUresult, *values)``; a non-success code raises naming ``call``."""
    err = result[0]
    if err != 0:
        _, name = _driver().cuGetErrorName(err)
        _, text = _driver().cuGetErrorString(err)
        raise RuntimeError(f"{call} failed: {name.decode() if name else int(err)}: {text.decode() if text else ''}")
    return result[1] if len(result) == 2 else result[1:] or None


class CudaKernel:
    """One ``extern "C"`` kernel of a CUDA C source, compiled on first use and launched on PyTorch's stream.

    The source is compiled through :func:`compile_cubin` (so through the on-disk cache) the first time the cubin
    is needed; the cubin is loaded once per CUDA device into that device's primary context, the one PyTorch uses,
    and launches go to ``torch.cuda.current_stream(device)``, so they order with PyTorch's work and can be
    captured in a CUDA graph.

    Parameters
    ----------
    source : str
        CUDA C source holding ``name`` as an ``extern "C" __global__`` function (unmangled).
    name : str
        The kernel's symbol name.
    options : CompileOptions, optional
        Target architecture, defines, register cap; default ``CompileOptions()`` (sm_90).
    what : str
        How compile errors name the source (a file path, say).
    """

    def __init__(self, source: str, name: str, options: CompileOptions | None = None, what: str = "<source>"):
        self.source = source
        self.name = name
        self.options = options or CompileOptions()
        self.what = what
        self._cubin: bytes | None = None
        self._loaded: dict[int, tuple[object, int, object]] = {}  # device -> (primary context, its handle, CUfunction)
        self._smem_limit: dict[int, int] = {}  # device index -> dynamic shared memory the function may use
        self._nonportable: set[int] = set()  # devices where the function may take clusters past 8 CTAs
        self._lock = threading.Lock()
        self._launch_call = f"cuLaunchKernel({name})"

    @property
    def cubin(self) -> bytes:
        """The compiled ELF image (compiles on first access; no GPU needed)."""
        if self._cubin is None:
            self._cubin = compile_cubin(self.source, self.options, what=self.what)
        return self._cubin

    def _load(self, device: int) -> tuple[object, int, object]:
        with self._lock:
            if device in self._loaded:
                return self._loaded[device]
            drv = _driver()
            cubin = self.cubin
            try:
                init = drv.cuInit(0)
            except Exception as e:  # the bindings raise when libcuda itself cannot be found
                raise Unavailable(f"no CUDA driver to load {self.what}: {e}") from None
            _check("cuInit", init)
            dev = _check("cuDeviceGet", drv.cuDeviceGet(device))
            ctx = _check("cuDevicePrimaryCtxRetain", drv.cuDevicePrimaryCtxRetain(dev))
            _check("cuCtxPushCurrent", drv.cuCtxPushCurrent(ctx))
            try:
                module = _check("cuModuleLoadData", drv.cuModuleLoadData(cubin))
                func = _check(f"cuModuleGetFunction({self.name!r})",
                              drv.cuModuleGetFunction(module, self.name.encode()))
            finally:
                _check("cuCtxPopCurrent", drv.cuCtxPopCurrent())
            self._smem_limit[device] = _STATIC_SMEM_LIMIT
            self._loaded[device] = (ctx, int(ctx), func)
            return self._loaded[device]

    def num_regs(self, device: int) -> int:
        """Registers a thread of the loaded function on CUDA device ``device`` (for occupancy arithmetic)."""
        _, _, func = self._loaded.get(device) or self._load(device)
        attr = _driver().CUfunction_attribute.CU_FUNC_ATTRIBUTE_NUM_REGS
        return int(_check(f"cuFuncGetAttribute({self.name}, NUM_REGS)", _driver().cuFuncGetAttribute(attr, func)))

    def _allow(self, device: int, func: object, shared_mem: int = 0, cluster: int = 0) -> None:
        """Raise the function's dynamic shared memory limit to ``shared_mem`` and, for a cluster size past the
        portable 8, allow non-portable sizes (once per device each; the primary context must be current)."""
        drv = _drv
        if shared_mem > self._smem_limit[device]:
            attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            _check(f"cuFuncSetAttribute({self.name}, MAX_DYNAMIC_SHARED_SIZE_BYTES={shared_mem})",
                   drv.cuFuncSetAttribute(func, attr, shared_mem))
            self._smem_limit[device] = shared_mem
        if cluster > 8 and device not in self._nonportable:
            attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
            _check(f"cuFuncSetAttribute({self.name}, NON_PORTABLE_CLUSTER_SIZE_ALLOWED=1)",
                   drv.cuFuncSetAttribute(func, attr, 1))
            self._nonportable.add(device)

    def _config(self, grid: tuple[int, ...], block: tuple[int, ...], shared_mem: int, stream: int,
                cluster: int, cooperative: bool = False) -> object:
        """A ``CUlaunchConfig`` (for ``cuLaunchKernelEx`` and the cluster occupancy query); ``cluster`` > 0 sets
        the cluster size at launch (kernels compiled without ``__cluster_dims__``); ``cooperative``: the grid's
        CTAs are co-resident or the launch fails (``CU_LAUNCH_ATTRIBUTE_COOPERATIVE``)."""
        drv = _drv
        cfg = drv.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = (*grid, 1, 1)[:3]
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = (*block, 1, 1)[:3]
        cfg.sharedMemBytes = shared_mem
        cfg.hStream = drv.CUstream(stream)
        attrs = []
        if cluster:
            attr = drv.CUlaunchAttribute()
            attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster, 1, 1
            attrs.append(attr)
        if cooperative:
            attr = drv.CUlaunchAttribute()
            attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE
            attr.value.cooperative = 1
            attrs.append(attr)
        if attrs:
            cfg.attrs = attrs
            cfg.numAttrs = len(attrs)
        return cfg

    def max_active_clusters(self, device: int, block: int, cluster: int, shared_mem: int = 0,
                            launch_cluster: bool = False) -> int:
        """Clusters of ``cluster`` CTAs of ``block`` threads (``shared_mem`` dynamic bytes each) that CUDA device
        ``device`` holds at once (``cuOccupancyMaxActiveClusters``: registers, shared memory and how the GPCs
        split the SMs). ``launch_cluster``: the kernel takes its cluster size at launch (no
        ``__cluster_dims__``). ``device`` -1 (CPU tensors) under the emulator: its
        :func:`~kernelwright.backends.emulate.resident_clusters`."""
        if device < 0:
            from kernelwright.backends import emulate

            if emulate.active():
                return emulate.resident_clusters()
        ctx, _, func = self._loaded.get(device) or self._load(device)
        drv = _driver()
        _check("cuCtxPushCurrent", drv.cuCtxPushCurrent(ctx))
        try:
            self._allow(device, func, shared_mem, cluster if launch_cluster else 0)
            cfg = self._config((cluster,), (block,), shared_mem, 0, cluster if launch_cluster else 0)
            return int(_check(f"cuOccupancyMaxActiveClusters({self.name})",
                              drv.cuOccupancyMaxActiveClusters(func, cfg)))
        finally:
            _check("cuCtxPopCurrent", drv.cuCtxPopCurrent())

    def launch(self, grid: tuple[int, ...], block: tuple[int, ...], args: tuple, shared_mem: int = 0,
               cluster: int = 0, cooperative: bool = False) -> None:
        """Launch on the current PyTorch stream of the device of the first tensor in ``args``.

        Parameters
        ----------
        grid, block : tuple of int
            Up to three dimensions each (missing ones are 1).
        args : tuple
            The kernel's parameters in order: CUDA tensors (passed as their ``data_ptr()``), Python ints (as
            32-bit ``int``) and Python floats (as 32-bit ``float``).
        shared_mem : int
            Dynamic shared memory in bytes; above 48 KiB the function's limit is raised once per device.
        cluster : int
            The thread-block cluster size to launch with (``cuLaunchKernelEx``), for kernels compiled without
            ``__cluster_dims__``; sizes past the portable 8 are allowed on the function first. 0: none set here.
        cooperative : bool
            The grid's CTAs must all be resident at once (a cooperative launch, which fails rather than starts when
            the GPU cannot hold them): for kernels whose CTAs wait on each other (``wait_until_equal_gpu``). Not
            yet run on a GPU (session 20); the emulator's cooperative mode is tested.
        """
        import torch

        if any(isinstance(a, torch.Tensor) and a.device.type == "cpu" for a in args):
            from kernelwright.backends import emulate

            if emulate.active():
                return emulate.launch(self, grid, block, args, shared_mem, cluster, cooperative)
        values, types = [], []
        device = None
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor):
                if not a.is_cuda:
                    raise ValueError(f"{self.name}: argument {i} is a {a.device} tensor; kernels take CUDA tensors "
                                     "(CPU tensors: inside kernelwright.backends.emulate.cuda_on_cpu())")
                device = a.get_device() if device is None else device
                values.append(a.data_ptr())
                types.append(ctypes.c_void_p)
            elif isinstance(a, float):
                values.append(a)
                types.append(ctypes.c_float)
            elif isinstance(a, int):
                if not -(2**31) <= a < 2**31:
                    raise ValueError(f"{self.name}: argument {i} = {a} does not fit a 32-bit int")
                values.append(a)
                types.append(ctypes.c_int)
            else:
                raise TypeError(f"{self.name}: argument {i} has type {type(a).__name__}; expected tensor, int, float")
        if device is None:
            device = torch.cuda.current_device()
        ctx, ctx_handle, func = self._loaded.get(device) or self._load(device)
        drv = _drv
        gx, gy, gz = (*grid, 1, 1)[:3]
        bx, by, bz = (*block, 1, 1)[:3]
        stream = torch.cuda.current_stream(device).cuda_stream
        # The function belongs to the device's primary context: make it current for the launch, and restore the
        # caller's context afterwards (with the runtime API, the current context *is* PyTorch's current device).
        switch = int(_check("cuCtxGetCurrent", drv.cuCtxGetCurrent())) != ctx_handle
        if switch:
            _check("cuCtxPushCurrent", drv.cuCtxPushCurrent(ctx))
        try:
            self._allow(device, func, shared_mem, cluster)
            params = (tuple(values), tuple(types))
            if cluster or cooperative:
                cfg = self._config((gx, gy, gz), (bx, by, bz), shared_mem, stream, cluster, cooperative)
                _check(self._launch_call, drv.cuLaunchKernelEx(cfg, func, params, 0))
            else:
                _check(self._launch_call,
                       drv.cuLaunchKernel(func, gx, gy, gz, bx, by, bz, shared_mem, stream, params, 0))
        finally:
            if switch:
                _check("cuCtxPopCurrent", drv.cuCtxPopCurrent())
