"""Import a KernelBench-format file as a module of its own, and check that it offers what it must.

A *reference* (problem) file defines ``Model`` (an ``nn.Module``), ``get_inputs()`` (the forward's arguments) and
``get_init_inputs()`` (the constructor's); a *candidate* defines ``ModelNew`` taking the same constructor
arguments. Every failure is a :class:`LoadError` with a category and one readable sentence, never a traceback:
the verdict shows it as is.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import os
import sys
import tempfile
import traceback
import types
from pathlib import Path

import torch


class LoadError(Exception):
    """A file that cannot be used: ``category`` is ``reference`` (the problem file), ``load`` (the candidate does
    not import) or ``api`` (the candidate lacks ``ModelNew`` or its constructor differs)."""

    def __init__(self, category: str, message: str):
        super().__init__(message)
        self.category = category
        self.message = message


def source_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def materialize(source: str, name: str = "candidate") -> str:
    """Write candidate source text to a private file and return its path (Triton's ``@jit`` and tracebacks need
    the source on disk)."""
    folder = tempfile.mkdtemp(prefix="kw-eval-")
    stem = "".join(c if c.isalnum() or c == "_" else "_" for c in Path(name).stem) or "candidate"
    path = os.path.join(folder, f"{stem}.py")
    with open(path, "w") as fh:
        fh.write(source)
    return path


def _where(exc: BaseException, path: str) -> str:
    """' (file.py, line N)' for the deepest frame of ``exc`` inside ``path``, else ''."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if os.path.abspath(f.filename) == path]
    if isinstance(exc, SyntaxError) and exc.lineno:
        return f" ({os.path.basename(path)}, line {exc.lineno})"
    return f" ({os.path.basename(path)}, line {frames[-1].lineno})" if frames else ""


def import_file(path: str, role: str, category: str, overrides: dict[str, int] | None = None) -> types.ModuleType:
    """Import ``path`` under a unique module name; any exception (``SystemExit`` included) becomes a
    :class:`LoadError` of ``category``. ``overrides`` rewrites top-level ``NAME = <int>`` assignments before the
    file runs (a second problem size), so values derived from them at the top level follow."""
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise LoadError(category, f"{role} file {path} does not exist")
    tag = source_digest(f"{path}{sorted((overrides or {}).items())}")
    name = f"_kw_eval_{role}_{tag}_{os.getpid()}"
    try:
        with open(path) as fh:
            source = fh.read()
        tree = ast.parse(source, filename=path)
    except SyntaxError as e:
        raise LoadError(category, f"{role} file does not import: SyntaxError: {e.msg}{_where(e, path)}") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise LoadError(category, f"{role} file cannot be read: {e}") from None
    if overrides:
        _rewrite_constants(tree, overrides)
    module = types.ModuleType(name)
    module.__file__ = path
    sys.modules[name] = module
    try:
        exec(compile(tree, path, "exec"), module.__dict__)
    except BaseException as e:  # whatever the file raises, SystemExit included, is its verdict
        if isinstance(e, KeyboardInterrupt):
            raise
        sys.modules.pop(name, None)
        text = f"{type(e).__name__}: {e}"
        if len(text) > 1500:  # a compiler's log: its end says what failed
            text = text[:300] + " [...] " + text[-1200:]
        raise LoadError(category, f"{role} file does not import: {text}{_where(e, path)}") from None
    return module


def _int_assignments(tree: ast.Module) -> dict[str, ast.Constant]:
    """Top-level ``NAME = <int literal>`` assignments: name -> the literal node."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0].id, node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            target, value = node.target.id, node.value
        else:
            continue
        if isinstance(value, ast.Constant) and type(value.value) is int:
            found[target] = value
    return found


def _rewrite_constants(tree: ast.Module, overrides: dict[str, int]) -> None:
    nodes = _int_assignments(tree)
    for k, v in overrides.items():
        if k in nodes:
            nodes[k].value = int(v)


def check_reference(mod: types.ModuleType) -> None:
    """``Model`` (an ``nn.Module`` subclass), ``get_inputs`` and ``get_init_inputs`` (callables)."""
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if not hasattr(mod, n)]
    if missing:
        raise LoadError("reference", f"reference file lacks {', '.join(missing)} (KernelBench format: Model, "
                                     "get_inputs(), get_init_inputs())")
    if not (isinstance(mod.Model, type) and issubclass(mod.Model, torch.nn.Module)):
        raise LoadError("reference", "reference Model is not an nn.Module subclass")
    for n in ("get_inputs", "get_init_inputs"):
        if not callable(getattr(mod, n)):
            raise LoadError("reference", f"reference {n} is not callable")


def _init_params(cls: type) -> list[inspect.Parameter]:
    try:
        sig = inspect.signature(cls.__init__)
    except (TypeError, ValueError):
        return []
    return [p for p in list(sig.parameters.values())[1:]]


def _describe(params: list[inspect.Parameter]) -> str:
    return "(" + ", ".join(str(p) for p in params) + ")"


def check_candidate(mod: types.ModuleType, reference: types.ModuleType, init_inputs: list) -> type:
    """``ModelNew``: an ``nn.Module`` subclass whose constructor takes the reference's arguments (the same
    positional names, and ``get_init_inputs()`` binds). Returns the class."""
    cls = getattr(mod, "ModelNew", None)
    if cls is None:
        defined = sorted(n for n, v in vars(mod).items() if isinstance(v, type) and issubclass(v, torch.nn.Module)
                         and v.__module__ == mod.__name__)
        raise LoadError("api", "candidate defines no ModelNew" + (f" (it defines {', '.join(defined)})" if defined
                                                                  else ""))
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        raise LoadError("api", "candidate ModelNew is not an nn.Module subclass")
    want, got = _init_params(reference.Model), _init_params(cls)
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    want_names = [p.name for p in want if p.kind in positional]
    got_names = [p.name for p in got if p.kind in positional]
    takes_varargs = any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in got)
    if not takes_varargs and got_names[:len(want_names)] != want_names:
        raise LoadError("api", f"constructor arguments differ: ModelNew{_describe(got)} but Model{_describe(want)}")
    try:
        inspect.signature(cls).bind(*init_inputs)
    except (TypeError, ValueError) as e:
        raise LoadError("api", f"ModelNew{_describe(got)} cannot take get_init_inputs() = "
                               f"{_short(init_inputs)}: {e}") from None
    return cls


def _short(values: list) -> str:
    text = repr([v if not isinstance(v, torch.Tensor) else f"tensor{tuple(v.shape)}" for v in values])
    return text if len(text) < 120 else text[:117] + "..."


def size_constants(path: str) -> dict[str, int]:
    """The problem's size knobs: top-level ``NAME = <int literal>`` assignments of at least 2 (``batch_size = 16``,
    ``HIDDEN = 4096``), in file order; :mod:`kernelwright.eval.problem` rescales them for a second size."""
    with open(path) as fh:
        tree = ast.parse(fh.read(), filename=path)
    return {k: n.value for k, n in _int_assignments(tree).items() if n.value >= 2}
