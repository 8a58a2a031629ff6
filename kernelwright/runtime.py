"""Where kernels run: the device choice, and Triton's interpreter for CPU.

Triton reads ``TRITON_INTERPRET`` when a ``@triton.jit`` function is *defined*, so the choice between compiled
GPU kernels and the CPU interpreter is made once per process, before any kernel module is imported. Kernel
modules are imported lazily (see :mod:`kernelwright.registry`), and :func:`select_device` must run first;
importing :mod:`kernelwright` calls it with the default (``KW_DEVICE`` or auto).
"""

from __future__ import annotations

import os
from functools import cache

from kernelwright.errors import UsageError

DEVICES = ("auto", "cpu", "cuda")
_selected: str | None = None


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a hard dependency
        return False
    return torch.cuda.is_available()


def select_device(device: str | None = None) -> str:
    """Settle this process's device: ``"cuda"`` or ``"cpu"`` (Triton interpreter).

    Parameters
    ----------
    device : {"auto", "cpu", "cuda"} or None
        ``None`` reads ``KW_DEVICE`` (default ``auto``). ``auto`` picks CUDA when a GPU is visible.

    Returns the device name. Calling it again with another answer after kernels were imported is an error,
    because compiled and interpreted Triton kernels cannot live in one process.
    """
    global _selected
    want = (device or os.environ.get("KW_DEVICE") or "auto").lower()
    if want not in DEVICES:
        raise UsageError(f"device: expected one of {', '.join(DEVICES)}, got {want!r}")
    if want == "auto":
        want = "cuda" if (_selected == "cuda" or (_selected is None and cuda_available())) else "cpu"
    if want == "cuda" and not cuda_available():
        raise UsageError("device: 'cuda' was asked for but no CUDA GPU is visible to torch")
    if _selected is not None and _selected != want and _kernels_imported():
        raise UsageError(
            f"device: this process already runs kernels on {_selected!r}; start a new process for {want!r}"
        )
    if want == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
        _check_triton_not_compiled_mode()
        _scope_interpreter_device_calls()
    elif os.environ.get("TRITON_INTERPRET") == "1":
        raise UsageError("device: TRITON_INTERPRET=1 is set in the environment, which forces CPU; unset it")
    _selected = want
    return want


def _check_triton_not_compiled_mode() -> None:
    """Triton's own library functions (tl.max, ...) are decorated when triton is imported: imported before
    TRITON_INTERPRET=1 was set, they cannot run in the interpreter, and every kernel would fail."""
    import sys

    if "triton.language" not in sys.modules:
        return
    import triton.language as tl

    if type(tl.max).__name__ == "JITFunction":
        raise UsageError(
            "device: triton was imported before the CPU interpreter was selected; import kernelwright before "
            "triton, or set TRITON_INTERPRET=1 (or KW_DEVICE=cpu) in the environment before starting Python"
        )


def _scope_interpreter_device_calls() -> None:
    """Make Triton's interpreter undo a device-function call's patches when the call returns.

    The interpreter swaps the builtins of the Triton language modules in a ``@jit`` function's globals for
    interpreter versions while it runs. A kernel's swaps are undone when the kernel returns, but Triton 3.6's
    device-function call (a kernel calling ``tl.max``, whose globals hold ``triton.language.core``, or a ``@jit``
    helper) swaps again and never undoes it: after the first such kernel about 55 builtins of
    ``triton.language.core`` stay interpreter wrappers, and whatever compiles for a GPU later in the process
    (``kw inspect``'s Triton compiles, the Gluon attention rung's compile check) builds wrong IR ("'ir.value'
    object has no attribute 'dtype'"), or binds the wrappers for good when it is first imported then. Here each
    device call restores what it swapped on the way out, as a kernel does: the scopes nest, so the caller's own
    swaps are what comes back. Left alone where Triton is absent or its call already restores (a later Triton).
    """
    try:
        import inspect

        from triton.runtime import interpreter as ti
    except ImportError:
        return
    cls, patch, error = (getattr(ti, n, None) for n in ("InterpretedFunction", "_patch_lang", "InterpreterError"))
    call = vars(cls).get("__call__") if isinstance(cls, type) else None
    if None in (patch, error, call) or getattr(call, "kw_scoped", False):
        return
    try:
        src = inspect.getsource(call)
    except (OSError, TypeError):
        return
    if "_patch_lang(self.fn)" not in src or "restore" in src:  # not the leaking call this replaces
        return

    def scoped_call(self, *args, **kwargs):  # Triton 3.6's body, with the scope restored
        scope = ti._patch_lang(self.fn)
        try:
            return self.rewrite()(*args, **kwargs)
        except Exception as e:
            raise ti.InterpreterError(repr(e)) from e
        finally:
            scope.restore()

    scoped_call.kw_scoped = True
    cls.__call__ = scoped_call


def current_device() -> str:
    return _selected or select_device()


def interpreting() -> bool:
    """True when Triton kernels run through the CPU interpreter in this process."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def _kernels_imported() -> bool:
    import sys

    return any(name.startswith("kernelwright.ops.") and name.endswith(".triton") for name in sys.modules)


@cache
def device_facts() -> dict:
    """Name, driver and limits of the current device (CPU facts when on CPU)."""
    import platform

    import torch

    if current_device() == "cuda":
        p = torch.cuda.get_device_properties(0)
        facts = {
            "device": p.name,
            "kind": "cuda",
            "capability": f"{p.major}.{p.minor}",
            "sms": p.multi_processor_count,
            "l2_bytes": int(getattr(p, "L2_cache_size", 0) or 0),
            "memory_bytes": int(p.total_memory),
            "driver": _nvml_driver() or "unknown",
            "cuda": torch.version.cuda,
        }
    else:
        facts = {
            "device": f"CPU {platform.processor() or platform.machine()} x{os.cpu_count()}",
            "kind": "cpu-interpreter",
            "capability": None,
            "sms": None,
            "l2_bytes": 0,
            "memory_bytes": None,
            "driver": platform.release(),
            "cuda": None,
        }
    return facts


def _nvml_driver() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else v
    except Exception:
        return None


def is_hopper() -> bool:
    return current_device() == "cuda" and device_facts()["capability"] == "9.0"
