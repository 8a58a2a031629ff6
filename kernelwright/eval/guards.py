"""What the worker checks around a candidate: its own tools untouched, no new threads, no precision switches,
plain materialised outputs, and freed memory poisoned so a stale read shows.

These run inside the candidate's process, so a determined adversary could defeat them (the parent's own checks
are on data: outputs, fingerprints, sampled values). They catch the known ways a generated kernel games a
benchmark: patching the timer, finishing work on a thread or side stream after returning, turning TF32 on,
returning a lazy tensor subclass, and reading the memory a previous output was freed from.
"""

from __future__ import annotations

import builtins
import multiprocessing.connection
import os
import pickle
import statistics
import sys
import threading
import time

import torch

# -- identity of the timing and reporting code --------------------------------------------------------------------
_MODULE_ATTRS = {
    time: ("perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic", "monotonic_ns", "process_time",
           "sleep"),
    statistics: ("median", "quantiles", "mean", "stdev"),
    threading: ("enumerate", "active_count", "Thread"),
    os: ("listdir", "_exit", "getpid"),
    pickle: ("dumps", "loads"),
    builtins: ("isinstance", "type", "len", "sorted", "min", "max", "float", "int", "bool", "sum", "abs"),
}
_TORCH_ATTRS = ("isfinite", "isnan", "where", "equal", "empty", "empty_like", "zeros", "full_like", "randint")
_CUDA_ATTRS = ("synchronize", "Event", "Stream", "current_stream", "_sleep", "set_per_process_memory_fraction",
               "memory_snapshot", "is_available")
_OWN_MODULES = ("kernelwright.harness.timing", "kernelwright.harness.gate", "kernelwright.eval.worker",
                "kernelwright.eval.guards",
                "kernelwright.eval.problem", "kernelwright.eval.wire", "kernelwright.eval.judge")


def _callables(ns) -> dict[str, object]:
    return {k: v for k, v in vars(ns).items() if callable(v) or isinstance(v, (staticmethod, classmethod, property))}


_CLASSES = (torch.Tensor, torch.cuda.Event, torch.cuda.Stream, multiprocessing.connection.Connection)


_MRO_DICTS = {cls: [vars(k) for k in cls.__mro__] for cls in _CLASSES}


def _classes() -> tuple[type, ...]:
    """The held classes, with the timer's host gate once it is loaded (CUDA only)."""
    gate = sys.modules.get("kernelwright.harness.gate")
    if gate is None:
        return _CLASSES
    _MRO_DICTS.setdefault(gate.HostGate, [vars(k) for k in gate.HostGate.__mro__])
    return (*_CLASSES, gate.HostGate)


def _class_label(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


class Integrity:
    """Holds the objects the worker times and reports with, to compare by identity later: ``time``'s clocks,
    ``statistics``, CUDA events, streams and ``synchronize``, every ``torch.Tensor`` method (as looked up through
    the class, so a method added to the subclass to shadow a C one counts), the pipe's send functions, builtins
    the checks use, and every function of the timer and of this package's eval modules."""

    def __init__(self) -> None:
        self._held: dict[tuple, object] = {}
        for mod, names in _MODULE_ATTRS.items():
            for n in names:
                self._held[("mod", mod.__name__, n)] = getattr(mod, n)
        for n in _TORCH_ATTRS:
            self._held[("mod", "torch", n)] = getattr(torch, n)
        for n in _CUDA_ATTRS:
            if hasattr(torch.cuda, n):
                self._held[("mod", "torch.cuda", n)] = getattr(torch.cuda, n)
        for cls in _classes():
            for n in dir(cls):
                v = self._current(("cls", cls, n))
                if callable(v) or isinstance(v, (staticmethod, classmethod, property)) or hasattr(v, "__get__"):
                    self._held[("cls", cls, n)] = v
        for name in _OWN_MODULES:
            mod = sys.modules.get(name)
            if mod is not None:
                for k, v in _callables(mod).items():
                    if getattr(v, "__module__", None) == name:  # functions, classes and Triton kernels
                        self._held[("mod", name, k)] = v

    @staticmethod
    def _current(key: tuple) -> object:
        kind, owner, attr = key
        if kind == "cls":
            for d in _MRO_DICTS[owner]:  # live views: an attribute set later on any class of the MRO shows
                if attr in d:
                    return d[attr]
            return None
        mod = sys.modules.get(owner)
        return getattr(mod, attr, None) if mod is not None else None

    def changed(self) -> list[str]:
        """Names of held objects that are no longer the same object."""
        return [f"{_class_label(k[1]) if k[0] == 'cls' else k[1]}.{k[2]}"
                for k, obj in self._held.items() if self._current(k) is not obj]

    def __len__(self) -> int:
        return len(self._held)


# -- precision switches -------------------------------------------------------------------------------------------
def strict_precision() -> None:
    """TF32 off for matmuls and convolutions, fp32 matmuls at full precision: the same on both sides."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def precision_state() -> dict:
    return {"cuda.matmul.allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
            "cudnn.allow_tf32": bool(torch.backends.cudnn.allow_tf32),
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "default_dtype": str(torch.get_default_dtype())}


# -- threads ------------------------------------------------------------------------------------------------------
def thread_idents() -> set[int | None]:
    return {t.ident for t in threading.enumerate()}


def new_threads(baseline: set[int | None]) -> list[str]:
    """Names of live Python threads that were not there at ``baseline``."""
    return [t.name for t in threading.enumerate() if t.ident not in baseline and t.is_alive()]


def native_threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


# -- poisoning freed memory ---------------------------------------------------------------------------------------
POISON_NAN = 0xFF
"""every byte 0xFF: NaN in fp64, fp32, fp16 and bf16"""
POISON_HUGE = 0x7B
"""every byte 0x7B: 1.3e36 in fp32 and bf16, 61280 in fp16, 6.5e286 in fp64: a second poison, finite in every
float type, so an unwritten element is told apart from a NaN the kernel computed"""


def poison_value(dtype: torch.dtype, pattern: int) -> torch.Tensor:
    """The element value (0-d tensor of ``dtype``) that memory filled with ``pattern`` bytes reads as."""
    size = torch.empty((), dtype=dtype).element_size()
    return torch.full((size,), pattern, dtype=torch.uint8).view(dtype)[0]


def poison_free_memory(device: str, sizes: list[tuple[int, int]], pattern: int) -> int:
    """Fill memory that the allocator holds free with ``pattern`` bytes, so that a tensor allocated next without
    being written holds poison, not a previous output. Returns the bytes poisoned.

    CUDA: every inactive block of PyTorch's caching allocator, requested at its size, filled and freed (memory
    the allocator has not obtained yet comes fresh from the driver, not from this process's earlier outputs).
    CPU (glibc): for each ``(bytes, count)`` in ``sizes`` (the tensors one call allocates), at least
    ``2 count + 2`` blocks of that size, up to the heap's free bytes (``mallinfo2``, at most 64 blocks and 64 MiB
    in all): glibc serves a request from an exactly fitting free chunk first (a freed output of that size), then
    the best larger fit, so the chunks a stale read would find are the first ones poisoned."""
    hold = []
    if device == "cuda":
        for _ in range(4):  # a request may land elsewhere than the block it was sized for: look again
            pieces = _inactive_cuda_pieces()
            if not pieces:
                break
            try:
                for size in sorted(pieces, reverse=True):
                    hold.append(torch.empty(size, dtype=torch.uint8, device="cuda").fill_(pattern))
            except torch.OutOfMemoryError:
                break
    else:
        free = min(_heap_free_bytes(), 64 * 2**20)
        for size, count in sorted(sizes, reverse=True):
            if size <= 0:
                continue
            n = max(2 * count + 2, min(free // size + 1, 64))
            for _ in range(n):
                hold.append(torch.empty(size, dtype=torch.uint8).fill_(pattern))
    total = sum(t.numel() for t in hold)
    while hold:
        hold.pop()
    return total


_SMALL_REQUEST = 1 << 20  # PyTorch's caching allocator serves requests up to 1 MiB from its small pool


def _inactive_cuda_pieces() -> list[int]:
    """Request sizes that take every free block of the caching allocator that a later request could be served
    from: small-pool blocks in pieces of at most 1 MiB, large-pool blocks over 1 MiB whole (a smaller leftover in
    the large pool can serve no request)."""
    dev = torch.cuda.current_device()
    pieces = []
    for seg in torch.cuda.memory_snapshot():
        if seg.get("device", dev) != dev:
            continue
        small = seg.get("segment_type") == "small"
        for b in seg.get("blocks", ()):
            if b.get("state") != "inactive":
                continue
            size = int(b["size"])
            if small:
                pieces += [_SMALL_REQUEST] * (size // _SMALL_REQUEST) + ([size % _SMALL_REQUEST] if size %
                                                                          _SMALL_REQUEST else [])
            elif size > _SMALL_REQUEST:
                pieces.append(size)
    return pieces


_MALLINFO = None


def _heap_free_bytes() -> int:
    """Free bytes in glibc's main heap (0 where ``mallinfo2`` is missing)."""
    global _MALLINFO
    if _MALLINFO is None:
        import ctypes

        class MallInfo2(ctypes.Structure):
            _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                       "fsmblks", "uordblks", "fordblks", "keepcost")]

        try:
            fn = ctypes.CDLL(None).mallinfo2
            fn.restype = MallInfo2
            _MALLINFO = fn
        except (OSError, AttributeError):
            _MALLINFO = False
    return int(_MALLINFO().fordblks) if _MALLINFO else 0


# -- outputs ------------------------------------------------------------------------------------------------------
class OutputProblem(Exception):
    def __init__(self, category: str, message: str):
        super().__init__(message)
        self.category = category
        self.message = message


def flatten_outputs(out) -> list[torch.Tensor]:
    """The forward's result as a list of tensors; raises :class:`OutputProblem` for anything else."""
    items = list(out) if isinstance(out, (tuple, list)) else [out]
    for i, t in enumerate(items):
        if not isinstance(t, torch.Tensor):
            raise OutputProblem("output_spec", f"output {i} is a {type(t).__name__}, not a tensor")
    return items


def check_plain(outs: list[torch.Tensor], specs: list[dict], device: str) -> None:
    """Each output a plain, materialised ``torch.Tensor`` on ``device`` with the reference's shape and dtype:
    not a subclass (lazy or fake tensors compute on access), not sparse or nested, not meta, no lazy conjugate or
    negative bit, not a functorch wrapper."""
    if len(outs) != len(specs):
        raise OutputProblem("output_spec", f"{len(outs)} output(s), expected {len(specs)}")
    for i, (t, spec) in enumerate(zip(outs, specs, strict=True)):
        if type(t) is not torch.Tensor:
            raise OutputProblem("lazy_output", f"output {i} is a {type(t).__qualname__} (a torch.Tensor subclass); "
                                               "outputs must be plain, materialised tensors")
        functorch = getattr(torch._C._functorch, "is_functorch_wrapped_tensor", None)
        if t.layout != torch.strided or t.is_meta or t.is_conj() or t.is_neg() or (functorch and functorch(t)):
            raise OutputProblem("lazy_output", f"output {i} is not a materialised dense tensor (layout {t.layout}, "
                                               f"meta={t.is_meta}, conj={t.is_conj()}, neg={t.is_neg()})")
        if t.device.type != device:
            raise OutputProblem("output_spec", f"output {i} is on {t.device}, expected {device}")
        if list(t.shape) != spec["shape"] or str(t.dtype) != spec["dtype"]:
            raise OutputProblem("output_spec", f"output {i} is {str(t.dtype).removeprefix('torch.')}"
                                               f"{list(t.shape)}, expected {spec['dtype'].removeprefix('torch.')}"
                                               f"{spec['shape']}")
