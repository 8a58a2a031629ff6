"""CUDA C compiled at run time through NVRTC (via ``cuda-core``), with an on-disk cubin cache.

No host compiler is needed, and no GPU either: compiling is pure CPU work, so CI compile-checks every ``.cu``
source of the library. Loading and launching a cubin needs a driver and is the GPU side's business.

Cache: ``$KW_CACHE_DIR/cubin/<sha256>.cubin`` (default ``~/.cache/kernelwright``), keyed by the source, the
kernel names, the target architecture, the options and the NVRTC and cuda-core versions, so a change to any of
them compiles again. A cache file that cannot be read is ignored and rewritten.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
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


def compile_file(path: str | Path, options: CompileOptions | None = None) -> bytes:
    p = Path(path)
    return compile_cubin(p.read_text(), options, what=str(p))
