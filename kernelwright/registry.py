"""Kernel families: what a family declares, and how the CLI and harness find them.

A family lives in one folder, ``kernelwright/ops/<name>/``, whose ``spec.py`` builds a :class:`Family` named
``FAMILY``. Adding a family means adding that folder and its name to :data:`FAMILY_MODULES`; verify, bench,
report and the CLI need no change. Rung implementations are imported only when called, so listing families
never compiles a kernel.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from kernelwright import runtime
from kernelwright.errors import Unavailable, UsageError

FAMILY_MODULES = (
    "vector_add", "softmax", "matmul", "swiglu", "swiglu_bwd", "rope", "rope_bwd", "rms_norm", "rms_norm_bwd",
    "layer_norm", "layer_norm_bwd", "add_rms_norm", "add_rms_norm_bwd", "cross_entropy", "softmax_bwd",
    "attention", "attention_bwd", "activation",
)
NEEDS = ("nothing", "cuda", "hopper")


@dataclass(frozen=True)
class Tolerance:
    """Pass when every element has ``|out - ref| <= atol + rtol * |ref| + acc * scale`` and
    ``||out - ref|| / ||ref|| <= norm``. ``scale`` is the family's per-element error scale (``|A| @ |B|`` for a
    matmul: an element near zero by cancellation carries the rounding error of its large terms), 0 without one."""

    atol: float
    rtol: float
    norm: float
    acc: float = 0.0


@dataclass(frozen=True)
class Rung:
    """One step of a family's ladder.

    ``target`` is ``"module:function"``; the function takes the family's inputs plus ``out=`` (a buffer to write)
    and returns ``out``. ``limit(size, kwargs)`` returns a reason when this rung cannot take a case (a row too
    wide for registers), else ``None``; ``dtypes`` lists the dtypes it takes when not all of the family's.
    ``tune`` (``"module:function"``, called as ``fn(case, dtype, force=False)``) searches the rung's config space
    for a case and caches the winner (see :mod:`kernelwright.tune`); ``artifacts`` (``"module:function"``, called
    as ``fn(size, dtype)``) compiles the rung's kernels for a case without running them and returns
    :class:`kernelwright.harness.inspect.Artifact` objects for ``kw inspect``.
    """

    name: str
    backend: str
    target: str
    journal: str
    needs: str = "nothing"
    limit: Callable[[tuple[int, ...], dict], str | None] | None = None
    dtypes: tuple[torch.dtype, ...] | None = None
    tune: str | None = None
    artifacts: str | None = None

    def refusal(self, size: tuple[int, ...], kwargs: dict, dtype: torch.dtype | None = None) -> str | None:
        """Why this rung cannot take a case of this size, arguments and dtype, else ``None``."""
        if dtype is not None and self.dtypes is not None and dtype not in self.dtypes:
            takes = ", ".join(str(d).removeprefix("torch.") for d in self.dtypes)
            return f"{self.name}: takes {takes} only, not {str(dtype).removeprefix('torch.')}"
        return self.limit(size, kwargs) if self.limit else None

    def unavailable_reason(self) -> str | None:
        from kernelwright.ops._validate import emulated

        dev = runtime.current_device()
        if emulated(self.backend, dev):
            return None  # CUDA C on the CPU, through the emulator
        if self.needs == "cuda" and dev != "cuda":
            return f"{self.name}: needs a CUDA GPU (running on {dev})"
        if self.needs == "hopper" and not runtime.is_hopper():
            return f"{self.name}: needs a Hopper GPU (sm_90)"
        return None

    def load(self) -> Callable[..., torch.Tensor]:
        reason = self.unavailable_reason()
        if reason:
            raise Unavailable(reason)
        return _resolve(self.target)

    def hook(self, which: str) -> Callable:
        """The rung's ``tune`` or ``artifacts`` function; :class:`UsageError` when it has none."""
        target = getattr(self, which)
        if target is None:
            raise UsageError(f"variant: rung {self.name!r} has no {which} hook")
        return _resolve(target)


def _resolve(target: str) -> Callable:
    module, fn = target.split(":")
    return getattr(importlib.import_module(module), fn)


@dataclass(frozen=True)
class Peer:
    """Something to compare against (torch.compile, another library). ``make()`` returns a callable taking the
    family's inputs (no ``out=``) or raises :class:`Unavailable` saying why."""

    name: str
    make: Callable[[], Callable[..., torch.Tensor]]
    note: str = ""


@dataclass
class Case:
    """One concrete problem: the size spec it came from, the positional tensors and the keyword arguments."""

    size: tuple[int, ...]
    args: tuple
    kwargs: dict = field(default_factory=dict)
    label: str = ""


@dataclass(frozen=True)
class Family:
    name: str
    summary: str
    reference: Callable[..., torch.Tensor]
    rungs: tuple[Rung, ...]
    peers: tuple[Peer, ...]
    make_case: Callable[..., Case]
    """``make_case(size, dtype, device, gen, dist="normal", layout="contiguous", **kwargs) -> Case``"""
    out_shape: Callable[[Case], tuple[int, ...]]
    cost: Callable[[tuple[int, ...], torch.dtype], tuple[float, float]]
    """``cost(size, dtype) -> (flops, minimum bytes)``: each input read once, each output written once."""
    tolerances: dict[torch.dtype, Tolerance]
    sweep: Callable[[str], list[tuple[int, ...]]]
    """default sizes for a device kind (``"cuda"`` or ``"cpu"``)"""
    fuzz: Callable[[], list[tuple[tuple[int, ...], dict]]]
    """shapes and keyword arguments for ``kw check``, each chosen for a reason"""
    parse_size: Callable[[str], tuple[int, ...]]
    format_size: Callable[[tuple[int, ...]], str]
    dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.float16, torch.bfloat16)
    flop_unit: str = "vector"
    """which compute ceiling applies: ``vector`` (CUDA-core fp32) or ``tensor`` (the dtype's matmul rate)"""
    baseline: str = "torch"
    """the rung or peer that speedups are measured against (torch eager)"""
    choose: Callable[[tuple[int, ...], dict, torch.dtype | None], list[str]] | None = None
    """rung names best-first for a case; default: the ladder from the top"""
    scale_axis: tuple[str, Callable[[tuple[int, ...]], float]] | None = None
    """(label, size -> x) for the report's scaling chart; default: minimum bytes moved"""
    multi_output: bool = False
    """``True``: ``out_shape`` returns a list of shapes, rungs take and return a tuple of ``out`` buffers and the
    reference returns a tuple (a backward pass: dx, dweight)"""
    out_dtype: Callable[[Case, torch.dtype], torch.dtype | list[torch.dtype]] | None = None
    """the output dtype(s) for inputs of a dtype (default: the same; a loss may be float32 whatever the input)"""
    error_scale: Callable[..., torch.Tensor] | None = None
    """``error_scale(*args, **kwargs)`` on float64 inputs: the per-element magnitude that accumulation errors
    scale with (see :class:`Tolerance`); ``None``: errors scale with the result itself"""

    def rung(self, name: str) -> Rung:
        for r in self.rungs:
            if r.name == name:
                return r
        raise UsageError(
            f"variant: family {self.name!r} has no rung {name!r}; rungs: {', '.join(r.name for r in self.rungs)}"
        )

    def preferred(self, size: tuple[int, ...], kwargs: dict, dtype: torch.dtype | None = None) -> list[str]:
        """Rung names to try for a case, best first (``variant=None`` in the ops takes the first that runs); the
        choice may depend on ``dtype`` where given."""
        if self.choose is not None:
            return self.choose(size, kwargs, dtype)
        return [r.name for r in reversed(self.rungs)]


_families: dict[str, Family] = {}


def get_family(name: str) -> Family:
    if name not in FAMILY_MODULES:
        raise UsageError(f"family: unknown family {name!r}; known families: {', '.join(FAMILY_MODULES)}")
    if name not in _families:
        _families[name] = importlib.import_module(f"kernelwright.ops.{name}.spec").FAMILY
    return _families[name]


def all_families() -> list[Family]:
    return [get_family(n) for n in FAMILY_MODULES]


def resolve_families(names: list[str] | None) -> list[Family]:
    if not names or names == ["all"]:
        return all_families()
    return [get_family(n) for n in names]

