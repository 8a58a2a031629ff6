"""Input checks shared by every public op: each error names the argument and what was expected."""

from __future__ import annotations

import torch

from kernelwright import runtime
from kernelwright.errors import Unavailable, UsageError

FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def tensor(name: str, t, dtypes=FLOATS) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise UsageError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        allowed = ", ".join(str(d).removeprefix("torch.") for d in dtypes)
        raise UsageError(f"{name}: expected dtype {allowed}, got {str(t.dtype).removeprefix('torch.')}")
    if t.device.type not in ("cpu", "cuda"):
        raise UsageError(f"{name}: expected a CPU or CUDA tensor, got device {t.device}")
    return t


def same(names: tuple[str, str], a: torch.Tensor, b: torch.Tensor) -> None:
    if a.device != b.device:
        raise UsageError(f"{names[1]}: expected device {a.device} like {names[0]}, got {b.device}")
    if a.dtype != b.dtype:
        raise UsageError(
            f"{names[1]}: expected dtype {str(a.dtype).removeprefix('torch.')} like {names[0]}, "
            f"got {str(b.dtype).removeprefix('torch.')}"
        )
    if a.shape != b.shape:
        raise UsageError(f"{names[1]}: expected shape {tuple(a.shape)} like {names[0]}, got {tuple(b.shape)}")


def out_buffer(out, like_shape, dtype, device) -> torch.Tensor:
    """An ``out=`` buffer the caller gave (checked) or a fresh one."""
    if out is None:
        return torch.empty(like_shape, dtype=dtype, device=device)
    tensor("out", out)
    if tuple(out.shape) != tuple(like_shape) or out.dtype != dtype or out.device != torch.device(device):
        raise UsageError(
            f"out: expected a {str(dtype).removeprefix('torch.')} tensor of shape {tuple(like_shape)} on {device}, "
            f"got {str(out.dtype).removeprefix('torch.')} {tuple(out.shape)} on {out.device}"
        )
    if not out.is_contiguous():
        raise UsageError("out: expected a contiguous tensor")
    return out


def runs_on(backend: str, device_type: str) -> str | None:
    """Why a rung of ``backend`` cannot take tensors on ``device_type`` in this process, else None."""
    if backend == "torch":
        return None
    if backend == "triton":
        if device_type == "cpu" and not runtime.interpreting():
            return "Triton rungs take CPU tensors only through the interpreter: set KW_DEVICE=cpu (or "
            "TRITON_INTERPRET=1) before importing kernelwright"
        if device_type == "cuda" and runtime.interpreting():
            return "this process runs Triton through the CPU interpreter; CUDA tensors need a process without " \
                   "TRITON_INTERPRET=1"
        return None
    if emulated(backend, device_type):
        return None  # CUDA C on the CPU emulator
    if backend in ("cuda", "gluon") and device_type != "cuda":  # gluon: Triton's dialect with no interpreter
        return "needs a CUDA GPU (inputs are on the CPU)"
    return None


def emulated(backend: str, device_type: str) -> bool:
    """Whether a rung of ``backend`` runs on ``device_type`` through the CPU emulator (CUDA C with CPU tensors
    inside :func:`kernelwright.backends.emulate.cuda_on_cpu`)."""
    if backend != "cuda" or device_type != "cpu":
        return False
    from kernelwright.backends import emulate

    return emulate.active()


def _cannot_run(rung, device_type: str) -> str | None:
    """Why ``rung`` cannot take tensors on ``device_type`` here (its backend, or a Hopper-only rung elsewhere)."""
    why = runs_on(rung.backend, device_type)
    if why is None and rung.needs == "hopper" and not emulated(rung.backend, device_type) and not runtime.is_hopper():
        why = "needs a Hopper GPU (sm_90)"
    return why


def pick_rung(family, variant: str | None, device_type: str, size, kwargs, dtype=None):
    """The rung asked for (checked it can run here) or the family's choice for this case."""
    if variant is not None:
        if not isinstance(variant, str):
            raise UsageError(f"variant: expected a rung name (str) or None, got {type(variant).__name__}")
        rung = family.rung(variant)
        why = _cannot_run(rung, device_type)
        if why:
            raise Unavailable(f"variant {variant!r}: {why}")
        limit = rung.refusal(size, kwargs, dtype)
        if limit:
            raise UsageError(f"variant {variant!r}: {limit}")
        return rung
    names = family.preferred(size, kwargs, dtype)
    for name in names:
        rung = family.rung(name)
        if _cannot_run(rung, device_type) is None and not rung.refusal(size, kwargs, dtype):
            return rung
    raise Unavailable(f"{family.name}: no rung can take this input here")


def device_index(device: torch.device) -> int:
    """A CUDA device's index (the current device where it has none); -1 for a CPU device (tensors that CUDA
    kernels take only under the emulator, :mod:`kernelwright.backends.emulate`)."""
    if device.type != "cuda":
        return -1
    return device.index if device.index is not None else torch.cuda.current_device()
