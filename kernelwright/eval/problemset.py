"""Problem files in KernelBench format: load one, rescale its sizes, make its model and inputs, judge its fitness.

A problem is one ``.py`` file defining ``class Model(nn.Module)``, ``get_inputs()`` (CPU tensors) and
``get_init_inputs()`` (the constructor's arguments). Its **size constants** are the top-level names in
UPPER_CASE assigned an int literal (``BATCH = 16``, ``HIDDEN = 4096``); ``get_inputs``/``get_init_inputs`` read
them when called, so a problem is resized by rewriting those assignments before the file runs (values derived
from them, in functions or at the top level, follow). ``DTYPE = torch.bfloat16`` at the top level names the
floating dtype of its inputs and parameters and may be overridden the same way.

The scaling rule (:func:`scale_value`) keeps the divisibility a kernel may rely on: a value stays a multiple of
``gcd(value, 8)`` (even head dims stay even, multiples of 8 stay multiples of 8), and never drops below
``min(value, floor)``; 0, 1 and negative values are left alone. A problem whose constants must stay in a ratio
(heads and KV heads) spells the ratio as its own constant (``GQA_GROUP = 4``), so every rescaling is valid.

>>> p = load_problem("problems/level1/01_matmul_square_fp32.py", scale=1 / 64)
>>> p.constants
{'M': 64, 'K': 64, 'N': 64}
>>> out = p.model()(*p.inputs())
"""

from __future__ import annotations

import ast
import hashlib
import math
import re
import sys
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch

from kernelwright.errors import UsageError

PROBLEMS_DIR = Path(__file__).resolve().parents[2] / "problems"
"""The repository's own problem set (``problems/level{1,2,3}/NN_name.py``)."""

_CONSTANT = re.compile(r"^[A-Z][A-Z0-9_]*$")
DEFAULT_FLOOR = 8
_DTYPES = {"fp32": torch.float32, "float32": torch.float32, "fp16": torch.float16, "float16": torch.float16,
           "half": torch.float16, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp64": torch.float64,
           "float64": torch.float64}


# --- size constants ---------------------------------------------------------------------------------------------
def _constant_assignments(tree: ast.Module) -> dict[str, ast.stmt]:
    """Top-level ``NAME = <int literal>`` statements (bools are not sizes)."""
    out = {}
    for stmt in tree.body:
        target, value = None, None
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            target, value = stmt.targets[0].id, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            target, value = stmt.target.id, stmt.value
        if (target and _CONSTANT.match(target) and isinstance(value, ast.Constant)
                and type(value.value) is int):
            out[target] = stmt
    return out


def size_constants(source: str) -> dict[str, int]:
    """The problem's size constants, in file order: ``{"BATCH": 16, "DIM": 4096}``."""
    return {k: s.value.value for k, s in _constant_assignments(_parse(source)).items()}


def scale_value(value: int, factor: float, floor: int = DEFAULT_FLOOR) -> int:
    """``value * factor`` rounded to a multiple of ``gcd(value, 8)``, at least ``min(value, floor)``.

    >>> scale_value(4096, 1 / 64), scale_value(128, 1 / 64), scale_value(4, 1 / 64), scale_value(14336, 1 / 64)
    (64, 8, 4, 224)
    """
    if factor <= 0:
        raise UsageError(f"scale: the factor must be positive, got {factor}")
    if value <= 1:
        return value
    q = math.gcd(value, 8)
    return max(round(value * factor / q) * q, min(value, floor))


def scaled_constants(problem: str | types.ModuleType | Problem, factor: float,
                     floor: int = DEFAULT_FLOOR) -> dict[str, int]:
    """Every size constant of a problem (source text, loaded module or :class:`Problem`) scaled by ``factor``
    with :func:`scale_value`; feed the result to ``load_problem(..., constants=...)``."""
    if isinstance(problem, Problem):
        base = problem.base_constants
    elif isinstance(problem, types.ModuleType):
        base = size_constants(getattr(problem, "__kw_source__", None) or Path(problem.__file__).read_text())
    else:
        base = size_constants(problem)
    return {k: scale_value(v, factor, floor) for k, v in base.items()}


# --- loading ----------------------------------------------------------------------------------------------------
@dataclass
class Problem:
    """A loaded problem file: its module (with the constants it was loaded with) and how to build it."""

    name: str
    source: str
    module: types.ModuleType
    path: Path | None = None
    base_constants: dict[str, int] = field(default_factory=dict)
    constants: dict[str, int] = field(default_factory=dict)
    dtype: torch.dtype | None = None

    @property
    def Model(self) -> type[torch.nn.Module]:  # noqa: N802  (the KernelBench name)
        return self.module.Model

    def init_inputs(self, seed: int | None = 0) -> list:
        if seed is not None:
            torch.manual_seed(seed)
        return list(self.module.get_init_inputs())

    def inputs(self, seed: int | None = 0) -> list:
        """``get_inputs()`` after ``torch.manual_seed(seed)``; floating tensors cast to ``dtype`` if one was
        asked for (a problem without a ``DTYPE`` constant still honours it)."""
        if seed is not None:
            torch.manual_seed(seed)
        xs = list(self.module.get_inputs())
        if self.dtype is not None:
            xs = [x.to(self.dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in xs]
        return xs

    def model(self, seed: int | None = 0) -> torch.nn.Module:
        """``Model(*get_init_inputs())`` after ``torch.manual_seed(seed)``, in eval mode."""
        if seed is not None:
            torch.manual_seed(seed)
        m = self.module.Model(*self.module.get_init_inputs())
        if self.dtype is not None:
            m = m.to(self.dtype)
        return m.eval()

    def run(self, seed: int = 0):
        """The reference output on CPU (model seeded with ``seed``, inputs with ``seed + 1``)."""
        model = self.model(seed)
        with torch.no_grad():
            return model(*self.inputs(seed + 1))


def _parse(source: str, filename: str = "<problem>") -> ast.Module:
    try:
        return ast.parse(source, filename)
    except SyntaxError as e:
        raise UsageError(f"problem {filename}: not valid Python ({e.msg}, line {e.lineno})") from e


def _dtype(d: torch.dtype | str | None) -> torch.dtype | None:
    if d is None or isinstance(d, torch.dtype):
        return d
    if d not in _DTYPES:
        raise UsageError(f"dtype: expected one of {', '.join(_DTYPES)}, got {d!r}")
    return _DTYPES[d]


def read_problem(path_or_source: str | Path) -> tuple[str, Path | None]:
    """(source, path): a ``Path``, or a string naming an existing ``.py`` file, is read; any other string is
    taken as the source itself."""
    if isinstance(path_or_source, Path) or (
            isinstance(path_or_source, str) and "\n" not in path_or_source and path_or_source.endswith(".py")):
        p = Path(path_or_source)
        if not p.is_file():
            raise UsageError(f"problem: no file {str(p)!r}")
        return p.read_text(), p
    return str(path_or_source), None


def load_problem(path_or_source: str | Path, scale: float | None = None, *,
                 constants: Mapping[str, int] | None = None, dtype: torch.dtype | str | None = None,
                 floor: int = DEFAULT_FLOOR, name: str | None = None) -> Problem:
    """Load a problem file (or its source text) as a fresh module.

    Parameters
    ----------
    path_or_source : a problem file, or its source text.
    scale : multiply every size constant by this (see :func:`scale_value`); None keeps the file's sizes.
    constants : explicit values for size constants, applied after ``scale`` (an unknown name is an error).
    dtype : replaces the file's ``DTYPE`` and casts floating inputs and the model's parameters (e.g. float32 to
        run a bf16 problem on CPU).
    """
    source, path = read_problem(path_or_source)
    filename = str(path) if path else "<problem>"
    tree = _parse(source, filename)
    assigns = _constant_assignments(tree)
    base = {k: s.value.value for k, s in assigns.items()}
    values = dict(base)
    if scale is not None:
        values = {k: scale_value(v, scale, floor) for k, v in base.items()}
    for k, v in (constants or {}).items():
        if k not in base:
            raise UsageError(f"problem {filename}: no size constant {k!r} (it has {', '.join(base) or 'none'})")
        values[k] = int(v)
    for k, stmt in assigns.items():
        stmt.value = ast.copy_location(ast.Constant(values[k]), stmt.value)
    dt = _dtype(dtype)
    if dt is not None:
        for stmt in tree.body:
            if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                    and stmt.targets[0].id == "DTYPE"):
                stmt.value = ast.copy_location(ast.parse(f"torch.{str(dt).split('.')[-1]}", mode="eval").body,
                                               stmt.value)
    ast.fix_missing_locations(tree)
    stem = name or (path.stem if path else "problem")
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    mod_name = f"kw_problem_{re.sub(r'[^0-9a-zA-Z_]', '_', stem)}_{digest}_{len(sys.modules)}"
    module = types.ModuleType(mod_name)
    module.__file__ = filename
    module.__kw_source__ = source
    sys.modules[mod_name] = module  # classes and dataclasses defined in the file look their module up
    try:
        exec(compile(tree, filename, "exec"), module.__dict__)
    except Exception:
        sys.modules.pop(mod_name, None)
        raise
    for attr in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(module, attr):
            raise UsageError(f"problem {filename}: defines no {attr} (KernelBench format needs Model, get_inputs, "
                             "get_init_inputs)")
    return Problem(name=stem, source=source, module=module, path=path, base_constants=base, constants=values,
                   dtype=dt)


def discover(root: str | Path | None = None) -> list[Path]:
    """Problem files under ``root`` (default: the repository's ``problems/``), sorted; files starting with ``_``
    are skipped."""
    root = Path(root) if root is not None else PROBLEMS_DIR
    return sorted(p for p in root.rglob("*.py") if not p.name.startswith("_"))


# --- fitness ----------------------------------------------------------------------------------------------------
def zero_caught(output: torch.Tensor, atol: float = 1e-2, rtol: float = 1e-2) -> float:
    """Fraction of output rows (last dim; a 0-D or 1-D output is rows of one) on which an all-zero output would
    FAIL ``allclose(zero, output, atol, rtol)``. A problem where this is low is unfit: a kernel that writes
    nothing would pass it."""
    t = output.detach().float()
    rows = t.reshape(-1, 1) if t.dim() <= 1 else t.reshape(-1, t.shape[-1])
    if rows.numel() == 0:
        return 0.0
    caught = (rows.abs() * (1 - rtol) > atol).any(-1)
    return caught.float().mean().item()


def unfit_reason(output, atol: float = 1e-2, rtol: float = 1e-2, min_caught: float = 0.5) -> str | None:
    """Why a reference output makes a problem unfit, or None: not a tensor, non-finite values, an all-zero
    output that would pass on most rows, or a constant output (its mean) that would pass everywhere."""
    if not isinstance(output, torch.Tensor):
        return f"output is a {type(output).__name__}, not one tensor"
    if not output.is_floating_point():
        return f"output has dtype {output.dtype}: not a floating tensor"
    t = output.detach().float()
    if t.numel() == 0:
        return "output is empty"
    if not torch.isfinite(t).all():
        return "output has non-finite values"
    caught = zero_caught(t, atol, rtol)
    if caught < min_caught:
        return f"an all-zero output passes atol={atol}, rtol={rtol} on {1 - caught:.0%} of rows"
    if t.numel() > 1 and not ((t - t.mean()).abs() > atol + rtol * t.abs()).any():
        return "a constant output (the mean) passes everywhere"
    return None
