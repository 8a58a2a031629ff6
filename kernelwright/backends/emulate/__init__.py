"""The library's CUDA C kernels run on the CPU, for tests and for learning: no GPU, same sources.

Inside :func:`cuda_on_cpu` (or with ``KW_EMULATE_CUDA=1`` in the environment), a :class:`~kernelwright.backends.
nvrtc.CudaKernel` launched with CPU tensors runs in the emulator instead of on a GPU: the kernel's source is
compiled as C++ by the host compiler (``g++``) after ``cuda_emu.h``, which supplies the CUDA C dialect the kernels
use, and every CUDA thread runs as a fiber. Block, warp and cluster barriers, distributed shared memory and
``cp.async`` keep their meaning, shared memory starts as NaN bytes, and a deadlock or a read of an exited partner
CTA's shared memory is an :class:`EmulatorError` naming the block and thread (``cuda_emu.h`` lists what is and is
not modelled). The launchers are unchanged: the same Python code that picks a cluster shape and launches on a GPU
runs the kernel here when handed CPU tensors::

    import torch
    from kernelwright.backends.emulate import cuda_on_cpu
    from kernelwright.ops.rms_norm import cuda as rms

    x, w = torch.randn(3, 70000, dtype=torch.bfloat16), torch.randn(70000, dtype=torch.bfloat16)
    with cuda_on_cpu():
        y = rms.rms_norm_cluster(x, w, out=torch.empty_like(x))   # the sm_90 cluster kernel, on the CPU

Inside the block the public ops take the CUDA rungs too (``variant="cluster"``), and ``variant=None`` may pick
them where it would on an H200, since they now take CPU tensors.

Results agree with the GPU's within fp32 rounding, not bit for bit (the GPU's approximate MUFU functions are exact
here, and the host compiler contracts no multiply-adds). Speed: about a microsecond a thread per synchronisation
point, so a test's rows, not a benchmark's. Compiled libraries are cached under ``$KW_CACHE_DIR/emu``.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from kernelwright.errors import Unavailable

HEADER = Path(__file__).with_name("cuda_emu.h")
SMEM_LIMIT = 227 * 1024  # dynamic shared memory a CTA may ask for on sm_90
FLAGS = ("-std=c++17", "-O1", "-shared", "-fPIC", "-fvisibility=hidden", "-fno-strict-aliasing",
         "-ffp-contract=off", "-w")

_active = 0
_resident = 2
_lock = threading.Lock()
_libs: dict[str, ctypes.CDLL] = {}
_built: dict[tuple, ctypes.CDLL] = {}  # build()'s arguments -> its library (the header's hash is not redone)
launched: list[tuple[str, tuple[int, int, int], tuple[int, int, int], int]] = []
"""The emulator's launches, oldest first (kernel name, grid, block, cluster as passed; the last 1000): which
kernel a launcher chose, for tests."""


class EmulatorError(RuntimeError):
    """A kernel did something the emulator stops at (deadlock, bad remote address, ...) or failed to compile."""


def active() -> bool:
    """Whether CUDA kernels launched with CPU tensors run in the emulator."""
    return _active > 0 or os.environ.get("KW_EMULATE_CUDA", "") == "1"


def resident_clusters() -> int:
    """What the emulator answers for "clusters a GPU holds at once" (persistent kernels size their grids by it)."""
    return _resident


@contextlib.contextmanager
def cuda_on_cpu(resident: int = 2):
    """Within the block, CUDA kernels launched with CPU tensors run in the emulator. ``resident``: the clusters a
    "GPU" holds at once, as persistent launchers ask for it (small, so that their loops take several turns)."""
    global _active, _resident
    if not isinstance(resident, int) or resident < 1:
        raise ValueError(f"resident: expected a positive int, got {resident!r}")
    with _lock:
        _active += 1
        before, _resident = _resident, resident
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            _resident = before


def compiler() -> str:
    """The host C++ compiler (``$CXX``, else ``g++``); :class:`Unavailable` if there is none."""
    cxx = os.environ.get("CXX", "g++")
    if shutil.which(cxx) is None:
        raise Unavailable(f"the CUDA emulator compiles kernels with a host C++ compiler; {cxx!r} was not found "
                          "(install g++ or set CXX)")
    return cxx


@functools.cache
def _version(cxx: str) -> str:
    try:
        return subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60).stdout.split("\n")[0]
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _header(cxx: str) -> Path:
    """``cuda_emu.h`` precompiled (``.gch`` beside a copy of it in the cache; g++ takes it in place of the text when
    the flags match): about half of a kernel's compile time is the header's. The plain header where that fails."""
    from kernelwright.backends.nvrtc import cache_dir

    text = HEADER.read_text()
    key = hashlib.sha256("\0".join((text, *FLAGS, _version(cxx))).encode()).hexdigest()[:24]
    where = cache_dir().parent / "emu" / f"pch-{key}"
    header, pch = where / HEADER.name, where / (HEADER.name + ".gch")
    if pch.exists():
        return header
    where.mkdir(parents=True, exist_ok=True)
    header.write_text(text)
    tmp = where / f"{HEADER.name}.{os.getpid()}.gch"
    flags = [f for f in FLAGS if f != "-shared"]
    done = subprocess.run([cxx, *flags, "-DKW_EMULATE=1", "-x", "c++-header", str(header), "-o", str(tmp)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        tmp.unlink(missing_ok=True)
        return HEADER
    os.replace(tmp, pch)
    return header


def build(source: str, name: str, defines: tuple[str, ...] = (), what: str = "<source>") -> ctypes.CDLL:
    """The shared library of ``source`` compiled for the emulator with kernel ``name`` exported (cached on disk)."""
    from kernelwright.backends.nvrtc import cache_dir

    if not name.isidentifier():
        raise ValueError(f"name: expected a C identifier, got {name!r}")
    memo = (source, name, defines, what, os.environ.get("CXX", "g++"), os.environ.get("KW_CACHE_DIR"))
    if memo in _built:  # (a launch's path: no header hashing, no compiler query)
        return _built[memo]
    cxx = compiler()
    header = HEADER.read_text()
    text = f'#line 1 "{what}"\n{source}\n#line 1 "<kernelwright emulator export>"\nKW_EMU_EXPORT({name})\n'
    key = hashlib.sha256("\0".join((header, text, *defines, *FLAGS, _version(cxx))).encode()).hexdigest()
    out = cache_dir().parent / "emu" / f"{key[:40]}.so"
    with _lock:
        if str(out) in _libs:
            _built[memo] = _libs[str(out)]
            return _libs[str(out)]
        if not out.exists():
            out.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory() as tmp:
                src = Path(tmp) / "kernel.cpp"
                src.write_text(text)
                lib = Path(tmp) / "kernel.so"
                cmd = [cxx, *FLAGS, "-DKW_EMULATE=1", *(f"-D{d}" for d in defines), "-include",
                       str(_header(cxx)), str(src), "-o", str(lib)]
                done = subprocess.run(cmd, capture_output=True, text=True)
                if done.returncode != 0:
                    raise EmulatorError(f"{what}: compiling {name} for the emulator failed:\n{done.stderr[-6000:]}")
                shutil.copyfile(lib, out.with_suffix(".tmp"))
                os.replace(out.with_suffix(".tmp"), out)
        _libs[str(out)] = _built[memo] = ctypes.CDLL(str(out), mode=ctypes.RTLD_LOCAL)
        return _libs[str(out)]


def launch(kernel, grid: tuple[int, ...], block: tuple[int, ...], args: tuple, shared_mem: int = 0,
           cluster: int = 0, cooperative: bool = False) -> None:
    """Run :class:`~kernelwright.backends.nvrtc.CudaKernel` ``kernel`` in the emulator; ``args`` as for its
    ``launch``, with CPU tensors (passed as their ``data_ptr()``). ``cooperative``: every CTA of the grid is
    scheduled together (otherwise one cluster at a time), so CTAs may wait on each other's flags."""
    import torch

    if shared_mem > SMEM_LIMIT:
        raise ValueError(f"{kernel.name}: shared_mem = {shared_mem} bytes exceeds sm_90's {SMEM_LIMIT}")
    values, kinds = [], []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            if a.device.type != "cpu":
                raise ValueError(f"{kernel.name}: argument {i} is a {a.device} tensor; the emulator takes CPU tensors")
            values.append(ctypes.c_void_p(a.data_ptr()))
            kinds.append("p")
        elif isinstance(a, float):
            values.append(ctypes.c_float(a))
            kinds.append("f")
        elif isinstance(a, int) and not isinstance(a, bool):
            if not -(2**31) <= a < 2**31:
                raise ValueError(f"{kernel.name}: argument {i} = {a} does not fit a 32-bit int")
            values.append(ctypes.c_int(a))
            kinds.append("i")
        else:
            raise TypeError(f"{kernel.name}: argument {i} has type {type(a).__name__}; expected tensor, int, float")
    g3, b3 = (*grid, 1, 1)[:3], (*block, 1, 1)[:3]
    if min(g3) < 1 or min(b3) < 1:
        raise ValueError(f"{kernel.name}: grid {tuple(grid)} and block {tuple(block)} need positive sizes")
    lib = build(kernel.source, kernel.name, kernel.options.defines, kernel.what)
    launched.append((kernel.name, g3, b3, cluster))
    del launched[:-1000]
    fn = getattr(lib, f"kw_launch_{kernel.name}")
    fn.restype = ctypes.c_int
    argv = (ctypes.c_void_p * max(1, len(values)))(*[ctypes.addressof(v) for v in values])
    err = ctypes.c_char_p()
    with _lock:  # the emulator's state is one per library and not reentrant
        rc = fn(("".join(kinds)).encode(), (ctypes.c_uint * 3)(*g3), (ctypes.c_uint * 3)(*b3),
                ctypes.c_uint(cluster), ctypes.c_uint(shared_mem), ctypes.c_uint(int(bool(cooperative))), argv,
                ctypes.byref(err))
    if rc != 0:
        raise EmulatorError(f"{kernel.name} ({kernel.what}): {err.value.decode() if err.value else 'failed'}")
