"""The archive: every evaluated candidate kernel in SQLite, to list the best verified kernel per problem and to
seed a search on a new problem with the kernels of the most similar solved ones.

One ``problems`` row per problem (keyed by :func:`problem_hash`, with its source and :func:`problem_signature`),
one ``candidates`` row per evaluation (code, verdict, speedups, device, versions, time). Each record is one
transaction in WAL mode, so a worker killed mid-write leaves every earlier record readable and no partial one.
The schema carries a version (``meta.schema_version``); a file written by a newer schema is refused.

Similarity compares the multisets of ops in the problems' graphs (``torch.fx`` trace of ``Model``; a scan of the
source's calls when tracing fails), normalised to names such as ``linear``, ``matmul``, ``softmax``,
``rms_norm``, ``silu``, ``mul``, ``scaled_dot_product_attention``, and ranks by a weighted Jaccard index (a
matmul weighs more than an add; ops of one kind, e.g. relu and gelu, earn partial credit).

The path comes from ``$KW_ARCHIVE``, else ``kernelwright-archive.db`` in the current folder.
"""

from __future__ import annotations

import argparse
import ast
import functools
import hashlib
import json
import math
import os
import re
import sqlite3
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kernelwright.errors import UsageError
from kernelwright.eval.problemset import load_problem, read_problem, size_constants

SCHEMA_VERSION = 1
KIND = "kernelwright-archive"
METRICS = ("speedup_eager", "speedup_compile")

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS problems (
    hash TEXT PRIMARY KEY,
    name TEXT, path TEXT,
    source TEXT NOT NULL,
    signature TEXT NOT NULL,
    ops TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS candidates (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    problem_hash TEXT NOT NULL REFERENCES problems(hash),
    created_at TEXT NOT NULL, created_unix REAL NOT NULL,
    code TEXT NOT NULL, code_hash TEXT NOT NULL,
    correct INTEGER NOT NULL,
    speedup_eager REAL, speedup_compile REAL,
    reason TEXT,
    verdict TEXT NOT NULL,
    device TEXT,
    versions TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS candidates_problem ON candidates(problem_hash, correct);
"""

# migrations[v] upgrades a file at schema v to v + 1 (none yet)
MIGRATIONS: dict[int, str] = {}


class ArchiveError(UsageError):
    """The archive file cannot be used: not SQLite, not an archive, or a schema this version cannot read."""


def default_path() -> str:
    return os.environ.get("KW_ARCHIVE") or "kernelwright-archive.db"


# --- problem identity ---------------------------------------------------------------------------------------------
def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return tree


def normalise_source(source: str) -> str:
    """The source with comments, docstrings and formatting removed (``ast.unparse``); whitespace-collapsed text
    when it does not parse."""
    try:
        return ast.unparse(_strip_docstrings(ast.parse(source)))
    except SyntaxError:
        return "\n".join(" ".join(line.split()) for line in source.splitlines() if line.strip())


def problem_hash(source: str | Path) -> str:
    """sha256 of the normalised problem source: a comment or docstring edit keeps the hash, a size change
    does not."""
    src, _ = read_problem(source)
    return hashlib.sha256(normalise_source(src).encode()).hexdigest()


# --- op signature -------------------------------------------------------------------------------------------------
ALIASES = {
    "cross_entropy_loss": "cross_entropy", "addmm": "linear", "mm": "matmul", "bmm": "matmul", "baddbmm": "matmul",
    "einsum": "matmul", "matmul": "matmul", "truediv": "div", "true_divide": "div", "divide": "div",
    "floordiv": "div", "multiply": "mul", "iadd": "add", "imul": "mul", "isub": "sub", "itruediv": "div",
    "subtract": "sub", "square": "pow", "relu_": "relu", "silu_": "silu", "gelu_": "gelu", "sigmoid_": "sigmoid",
    "multi_head_attention_forward": "scaled_dot_product_attention", "multiheadattention":
    "scaled_dot_product_attention", "rmsnorm": "rms_norm", "layernorm": "layer_norm", "groupnorm": "group_norm",
    "batchnorm1d": "batch_norm", "batchnorm2d": "batch_norm", "logsoftmax": "log_softmax", "crossentropyloss":
    "cross_entropy", "conv1d": "conv", "conv2d": "conv", "conv3d": "conv", "max": "amax", "swish": "silu",
    "nll_loss_nd": "nll_loss", "masked_fill_": "masked_fill",
}
# shape, dtype and constant-building ops: kept in the signature's layout_ops, left out of similarity
LAYOUT = frozenset({
    "getattr", "getitem", "size", "view", "reshape", "transpose", "permute", "contiguous", "unsqueeze", "squeeze",
    "expand", "expand_as", "flatten", "unflatten", "chunk", "split", "unbind", "cat", "stack", "to", "float",
    "half", "bfloat16", "double", "type", "type_as", "clone", "repeat", "repeat_interleave", "narrow", "t", "dim",
    "numel", "detach", "ones", "zeros", "full", "empty", "arange", "ones_like", "zeros_like", "full_like",
    "empty_like", "triu", "tril", "dropout", "identity", "view_as", "movedim", "split_with_sizes", "flip",
    "contiguous_", "new_zeros", "new_ones", "new_full", "new_empty", "tensor", "as_strided", "select", "slice",
})
CATEGORIES = {
    "gemm": {"linear", "matmul", "conv"},
    "attention": {"scaled_dot_product_attention"},
    "norm": {"rms_norm", "layer_norm", "group_norm", "batch_norm"},
    "softmax": {"softmax", "log_softmax", "logsumexp"},
    "loss": {"cross_entropy", "nll_loss", "mse_loss"},
    "activation": {"relu", "gelu", "silu", "sigmoid", "tanh", "softplus", "leaky_relu", "elu", "mish",
                   "hardswish", "hardtanh", "relu6", "glu", "selu"},
    "gather": {"embedding", "gather", "index_select", "scatter", "scatter_add", "take_along_dim"},
    "reduction": {"sum", "mean", "amax", "amin", "min", "argmax", "argmin", "var", "std", "cumsum", "topk",
                  "norm", "prod", "var_mean"},
}
CATEGORY_WEIGHT = {"gemm": 4.0, "attention": 4.0, "norm": 3.0, "softmax": 3.0, "loss": 3.0, "activation": 2.0,
                   "gather": 2.0, "reduction": 1.5, "elementwise": 1.0}
_CATEGORY_OF = {op: cat for cat, ops in CATEGORIES.items() for op in ops}


def canonical_op(name: str) -> str:
    """``torch._C._nn.linear`` / ``F.linear`` / ``nn.Linear`` / ``x.relu_`` -> ``linear`` / ``relu``."""
    n = name.rsplit(".", 1)[-1].strip("_").lower() if name.strip("_") else name
    return ALIASES.get(n, n)


def op_category(op: str) -> str:
    return _CATEGORY_OF.get(op, "elementwise")


def _node_name(node, modules: Mapping) -> str | None:
    if node.op == "call_function":
        t = node.target
        return canonical_op(getattr(t, "__name__", None) or str(t))
    if node.op == "call_method":
        return canonical_op(str(node.target))
    if node.op == "call_module":
        mod = modules.get(node.target)
        return canonical_op(type(mod).__name__ if mod is not None else str(node.target))
    return None


def _fuse_patterns(graph, names: dict) -> None:
    """Peepholes for hand-written ops: ``x * rsqrt(mean(x^2) + eps) [* w]`` -> rms_norm, ``x * sigmoid(x)`` ->
    silu. Fused nodes are renamed in ``names`` (the head gets the op, the rest None)."""
    for node in graph.nodes:
        if names.get(node) == "rsqrt" and node.args:
            add = node.args[0]
            if names.get(add) != "add":
                continue
            mean = next((a for a in add.args if names.get(a) == "mean"), None)
            sq = mean.args[0] if mean is not None and mean.args else None
            if names.get(sq) not in ("pow", "mul"):
                continue
            fused = [sq, mean, add]
            scale = next((u for u in node.users if names.get(u) == "mul"), None)
            if scale is not None:
                fused.append(scale)
                nxt = list(scale.users)  # and ``* weight`` when a parameter follows
                if len(nxt) == 1 and names.get(nxt[0]) == "mul" \
                        and any(a.op == "get_attr" for a in nxt[0].all_input_nodes):
                    fused.append(nxt[0])
            for n in fused:
                names[n] = None
            names[node] = "rms_norm"
        elif names.get(node) == "mul" and len(node.args) == 2:
            a, b = node.args
            for x, s in ((a, b), (b, a)):
                if names.get(s) == "sigmoid" and s.args and s.args[0] is x:
                    names[s], names[node] = None, "silu"
                    break


def _fx_ops(module) -> tuple[Counter, Counter]:
    import torch
    import torch.fx

    with torch.device("meta"):
        torch.manual_seed(0)
        model = module.Model(*module.get_init_inputs())
    gm = torch.fx.symbolic_trace(model)
    modules = dict(gm.named_modules())
    names = {n: _node_name(n, modules) for n in gm.graph.nodes}
    shape_math = set()  # x.shape, x.size() and arithmetic on them (``h * d`` in a reshape) are not ops
    for n in gm.graph.nodes:
        args = n.all_input_nodes
        if (names[n] == "getattr" and len(n.args) > 1 and n.args[1] == "shape") \
                or (n.op == "call_method" and n.target in ("size", "dim")) \
                or (args and n.op in ("call_function", "call_method") and all(a in shape_math for a in args)):
            shape_math.add(n)
            names[n] = "size"
    _fuse_patterns(gm.graph, names)
    ops, layout = Counter(), Counter()
    for n in gm.graph.nodes:
        name = names.get(n)
        if name:
            (layout if name in LAYOUT else ops)[name] += 1
    return ops, layout


def _code_nodes(b: ast.stmt):
    """Nodes of a helper function, or of a class's methods other than ``__init__``."""
    if isinstance(b, ast.ClassDef):
        for item in b.body:
            if not (isinstance(item, ast.FunctionDef) and item.name == "__init__"):
                yield from ast.walk(item)
    else:
        yield from ast.walk(b)


_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.MatMult: "matmul", ast.Pow: "pow",
           ast.FloorDiv: "div"}


def _ast_ops(source: str) -> tuple[Counter, Counter]:
    """Calls and operators in the file's classes (but their ``__init__``) and the helper functions they call:
    ``torch.X``, ``F.X``, ``x.X()``, ``self.attr()`` (resolved through
    ``self.attr = nn.X(...)``), ``+ - * / @ **``. Each call site counts once (a helper called twice too)."""
    tree = ast.parse(source)
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    bodies = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    todo, seen = list(bodies), set()
    while todo:  # helper functions the classes' methods (but __init__) call, transitively
        for node in _code_nodes(todo.pop()):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in functions \
                    and node.func.id not in seen:
                seen.add(node.func.id)
                todo.append(functions[node.func.id])
    bodies += [functions[n] for n in sorted(seen)]
    submodules = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            f = node.value.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "nn":
                for t in node.targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                        submodules[t.attr] = canonical_op(f.attr)
    ops, layout = Counter(), Counter()
    for b in bodies:
        for node in _code_nodes(b):
            name = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                f = node.func
                if isinstance(f.value, ast.Name) and f.value.id == "self":
                    name = submodules.get(f.attr)
                elif not (isinstance(f.value, ast.Name) and f.value.id == "nn"):  # nn.X(...) builds a module
                    name = canonical_op(f.attr)
            elif isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
                name = _BINOPS[type(node.op)]
            elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) \
                    and not isinstance(node.operand, ast.Constant):
                name = "neg"
            if name:
                (layout if name in LAYOUT else ops)[name] += 1
    return ops, layout


def _spec(x) -> dict:
    import torch

    if isinstance(x, torch.Tensor):
        return {"shape": list(x.shape), "dtype": str(x.dtype).removeprefix("torch.")}
    if isinstance(x, torch.dtype):
        return {"dtype": str(x).removeprefix("torch.")}
    if isinstance(x, bool | int | float | str) or x is None:
        return {"value": x}
    return {"type": type(x).__name__}


def problem_signature(source: str | Path) -> dict:
    """What a problem computes, to compare problems: its op multiset, input shapes and dtypes.

    Returns ``{"ops": {op: count}, "layout_ops": {...}, "inputs": [{"shape", "dtype"}, ...], "init_inputs":
    [...], "constants": {NAME: int}, "traced": "fx" | "ast", "error": str (only when something failed)}``.
    Inputs and the model are built on the meta device, so a problem of any size costs no memory.
    """
    import torch

    src, path = read_problem(source)
    sig: dict = {"ops": {}, "layout_ops": {}, "inputs": [], "init_inputs": [], "constants": {}, "traced": None}
    errors = []
    try:
        sig["constants"] = size_constants(src)
    except UsageError as e:
        errors.append(str(e))
    module = None
    try:
        module = load_problem(src, name=path.stem if path else None).module
        with torch.device("meta"):
            torch.manual_seed(0)
            sig["inputs"] = [_spec(x) for x in module.get_inputs()]
            sig["init_inputs"] = [_spec(x) for x in module.get_init_inputs()]
    except Exception as e:  # a broken problem still gets an AST signature
        errors.append(f"load: {type(e).__name__}: {e}")
    ops = layout = None
    if module is not None:
        try:
            ops, layout = _fx_ops(module)
            sig["traced"] = "fx"
        except Exception as e:
            errors.append(f"fx: {type(e).__name__}: {e}")
    if ops is None:
        try:
            ops, layout = _ast_ops(src)
            sig["traced"] = "ast"
        except SyntaxError as e:
            errors.append(f"ast: {e}")
            ops, layout = Counter(), Counter()
    sig["ops"], sig["layout_ops"] = dict(sorted(ops.items())), dict(sorted(layout.items()))
    if errors:
        sig["error"] = "; ".join(e[:300] for e in errors)
    return sig


def _weighted_jaccard(a: Mapping[str, float], b: Mapping[str, float], weight) -> float:
    keys = set(a) | set(b)
    den = sum(weight(k) * max(a.get(k, 0), b.get(k, 0)) for k in keys)
    if den == 0:
        return 0.0
    return sum(weight(k) * min(a.get(k, 0), b.get(k, 0)) for k in keys) / den


def similarity(ops_a: Mapping[str, int], ops_b: Mapping[str, int]) -> float:
    """0..1: 0.75 x the weighted Jaccard index of the op multisets (weights by op kind: gemm and attention 4,
    norms, softmax and losses 3, activations 2, reductions 1.5, elementwise 1) + 0.25 x the same over op kinds
    (so relu vs gelu, or linear vs matmul, earn partial credit)."""
    w = lambda op: CATEGORY_WEIGHT[op_category(op)]
    by_op = _weighted_jaccard(ops_a, ops_b, w)
    cat_a, cat_b = Counter(), Counter()
    for ops, cats in ((ops_a, cat_a), (ops_b, cat_b)):
        for op, n in ops.items():
            cats[op_category(op)] += n
    by_cat = _weighted_jaccard(cat_a, cat_b, lambda c: CATEGORY_WEIGHT[c])
    return 0.75 * by_op + 0.25 * by_cat


# --- records ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Candidate:
    """One evaluated candidate kernel."""

    id: int
    problem_hash: str
    problem_name: str | None
    problem_path: str | None
    created_at: str
    code: str
    code_hash: str
    correct: bool
    speedup_eager: float | None
    speedup_compile: float | None
    reason: str | None
    verdict: dict = field(default_factory=dict)
    device: str | None = None
    versions: dict = field(default_factory=dict)

    def as_dict(self, code: bool = True) -> dict:
        d = asdict(self)
        if not code:
            d.pop("code")
        return d


@dataclass(frozen=True)
class Match:
    """A solved problem similar to the one asked about, with its best verified kernel."""

    score: float
    problem_hash: str
    problem_name: str | None
    ops: dict
    best: Candidate

    def as_dict(self, code: bool = True) -> dict:
        return {"score": self.score, "problem_hash": self.problem_hash, "problem_name": self.problem_name,
                "ops": self.ops, "best": self.best.as_dict(code)}


def _now() -> tuple[str, float]:
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)), t


def _num(v) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


@functools.cache
def _versions() -> tuple:
    import platform

    import torch

    from kernelwright.harness.provenance import git_state

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    commit, dirty = git_state()
    return (("torch", torch.__version__), ("cuda", torch.version.cuda), ("triton", triton_version),
            ("python", platform.python_version()), ("kernelwright", _kw_version()), ("git_commit", commit),
            ("git_dirty", dirty))


def default_versions() -> dict:
    """torch, CUDA, triton, python, kernelwright and the git commit (read once per process): what a record's
    numbers depend on."""
    return dict(_versions())


def _kw_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("kernelwright")
    except Exception:
        return None


def _read_code(code: str | Path) -> str:
    if isinstance(code, Path):
        return code.read_text()
    return code


class Archive:
    """The archive of evaluated candidates in one SQLite file (WAL; safe for several writers and for a writer
    killed mid-record).

    >>> a = Archive("archive.db")
    >>> a.record("problems/level1/09_rms_norm_bf16.py", code, {"correct": True, "speedup_eager": 1.8,
    ...          "speedup_compile": 1.1, "reason": None}, device="NVIDIA H200")
    >>> a.best_per_problem()[0].speedup_eager
    1.8
    """

    def __init__(self, path: str | os.PathLike | None = None, *, create: bool = True):
        self.path = str(path if path is not None else default_path())
        p = Path(self.path)
        if p.is_dir():
            raise ArchiveError(f"archive: {self.path!r} is a folder, not a file")
        if not p.exists():
            if not create:
                raise ArchiveError(f"archive: no archive at {self.path!r}")
            if not p.parent.is_dir():
                raise ArchiveError(f"archive: folder {str(p.parent)!r} does not exist")
        try:
            self.conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
            self.conn.row_factory = sqlite3.Row
            self.conn.execute("PRAGMA busy_timeout=30000")
            self.conn.execute("PRAGMA journal_mode=WAL")
        except sqlite3.DatabaseError as e:
            raise ArchiveError(f"archive: {self.path!r} is not an SQLite file ({e})") from e
        try:
            self._ensure_schema()
        except BaseException:
            self.conn.close()
            raise

    # --- schema ------------------------------------------------------------------------------------------------
    def _tables(self) -> set[str]:
        return {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}

    def _meta(self) -> dict[str, str]:
        return {r[0]: r[1] for r in self.conn.execute("SELECT key, value FROM meta")}

    def _ensure_schema(self) -> None:
        if "meta" not in self._tables():
            with self._transaction():
                tables = self._tables() - {"sqlite_sequence"}
                if "meta" not in tables:  # another process may have created it while we waited for the lock
                    if tables:
                        raise ArchiveError(f"archive: {self.path!r} is an SQLite file but not a kernelwright archive "
                                           f"(tables: {', '.join(sorted(tables))})")
                    for stmt in SCHEMA.strip().split(";"):
                        if stmt.strip():
                            self.conn.execute(stmt)
                    self.conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                                          [("kind", KIND), ("schema_version", str(SCHEMA_VERSION)),
                                           ("created_at", _now()[0])])
        meta = self._meta()
        if meta.get("kind") != KIND:
            raise ArchiveError(f"archive: {self.path!r} is not a kernelwright archive (kind {meta.get('kind')!r})")
        try:
            version = int(meta.get("schema_version", ""))
        except ValueError as e:
            raise ArchiveError(f"archive: {self.path!r} has no valid schema_version") from e
        if version > SCHEMA_VERSION:
            raise ArchiveError(f"archive: {self.path!r} has schema version {version}; this kernelwright reads up "
                               f"to {SCHEMA_VERSION} (upgrade kernelwright, or use another --archive)")
        while version < SCHEMA_VERSION:
            if version not in MIGRATIONS:
                raise ArchiveError(f"archive: no migration from schema version {version}")
            with self._transaction():
                self.conn.executescript(MIGRATIONS[version])
                version += 1
                self.conn.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(version),))

    @property
    def schema_version(self) -> int:
        return int(self._meta()["schema_version"])

    def _transaction(self):
        return _Transaction(self.conn)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- writing -----------------------------------------------------------------------------------------------
    def record(self, problem: str | Path, candidate_source: str | Path, verdict: Mapping, device: str | None = None,
               versions: Mapping | None = None, *, name: str | None = None) -> int:
        """Store one evaluated candidate; returns its id.

        Parameters
        ----------
        problem : the problem file, or its source text.
        candidate_source : the candidate's code (a ``Path`` is read).
        verdict : at least ``correct`` (bool); ``speedup_eager``, ``speedup_compile`` (float or None) and
            ``reason`` (str or None) get their own columns; the whole dict is kept as JSON.
        device : e.g. ``"NVIDIA H200"``.
        versions : library versions (default :func:`default_versions`).
        name : the problem's name (default: the file's stem).
        """
        if not isinstance(verdict, Mapping) or "correct" not in verdict:
            raise UsageError("archive: the verdict must be a dict with at least a 'correct' key")
        src, path = read_problem(problem)
        code = _read_code(candidate_source)
        phash = problem_hash(src)
        pname = name or (path.stem if path else None)
        known = self.conn.execute("SELECT 1 FROM problems WHERE hash=?", (phash,)).fetchone()
        sig = None if known else problem_signature(src)  # outside the transaction: it may take a moment
        vers = dict(versions) if versions is not None else default_versions()
        at, unix = _now()
        with self._transaction():
            if sig is not None:
                self.conn.execute(
                    "INSERT OR IGNORE INTO problems (hash, name, path, source, signature, ops, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (phash, pname, str(path) if path else None, src, json.dumps(sig), json.dumps(sig["ops"]), at))
            elif pname:
                self.conn.execute("UPDATE problems SET name=? WHERE hash=? AND name IS NULL", (pname, phash))
            cur = self.conn.execute(
                "INSERT INTO candidates (problem_hash, created_at, created_unix, code, code_hash, correct, "
                "speedup_eager, speedup_compile, reason, verdict, device, versions) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (phash, at, unix, code, hashlib.sha256(code.encode()).hexdigest(), int(_verified(verdict)),
                 _num(verdict.get("speedup_eager")), _num(verdict.get("speedup_compile")),
                 None if verdict.get("reason") is None else str(verdict.get("reason")),
                 json.dumps(dict(verdict), default=str), device, json.dumps(vers, default=str)))
        return int(cur.lastrowid)

    # --- reading -----------------------------------------------------------------------------------------------
    _SELECT = ("SELECT c.*, p.name AS problem_name, p.path AS problem_path FROM candidates c "
               "JOIN problems p ON p.hash = c.problem_hash")

    def __len__(self) -> int:
        return int(self.conn.execute("SELECT COUNT(*) FROM candidates").fetchone()[0])

    def candidates(self, problem: str | Path | None = None, *, correct: bool | None = None) -> list[Candidate]:
        """Every record, oldest first; only one problem's (a file, source or hash) and/or only (in)correct ones."""
        q, args = self._SELECT + " WHERE 1=1", []
        if problem is not None:
            q += " AND c.problem_hash=?"
            args.append(self._hash_of(problem))
        if correct is not None:
            q += " AND c.correct=?"
            args.append(int(correct))
        return [_candidate(r) for r in self.conn.execute(q + " ORDER BY c.id", args)]

    def problems(self) -> list[dict]:
        """Every problem seen: hash, name, path, signature, and how many candidates (and correct ones) it has."""
        q = """SELECT p.hash, p.name, p.path, p.signature, p.created_at,
                      COUNT(c.id) AS n_candidates, COALESCE(SUM(c.correct), 0) AS n_correct
               FROM problems p LEFT JOIN candidates c ON c.problem_hash = p.hash GROUP BY p.hash ORDER BY p.name"""
        out = []
        for r in self.conn.execute(q):
            d = dict(r)
            d["signature"] = json.loads(d["signature"])
            out.append(d)
        return out

    def best(self, problem: str | Path, metric: str = "speedup_eager") -> Candidate | None:
        """The best verified candidate of one problem (a file, source or hash), or None."""
        h = self._hash_of(problem)
        return next((c for c in self.best_per_problem(metric) if c.problem_hash == h), None)

    def best_per_problem(self, metric: str = "speedup_eager") -> list[Candidate]:
        """Per problem, its fastest CORRECT candidate by ``metric`` (speedup_eager or speedup_compile; untimed
        correct candidates rank below timed ones, ties go to the earliest). Incorrect ones never win; a problem
        with no correct candidate is left out."""
        if metric not in METRICS:
            raise UsageError(f"archive: metric must be one of {', '.join(METRICS)}, got {metric!r}")
        q = f"""SELECT * FROM (
                  SELECT c.*, p.name AS problem_name, p.path AS problem_path,
                         ROW_NUMBER() OVER (PARTITION BY c.problem_hash
                                            ORDER BY (c.{metric} IS NULL), c.{metric} DESC, c.id) AS rank
                  FROM candidates c JOIN problems p ON p.hash = c.problem_hash WHERE c.correct = 1)
                WHERE rank = 1 ORDER BY problem_name, problem_hash"""
        return [_candidate(r) for r in self.conn.execute(q)]

    def similar(self, problem: str | Path, k: int = 5, metric: str = "speedup_eager",
                min_score: float = 0.0) -> list[Match]:
        """The ``k`` solved problems most similar to ``problem`` (a file or its source) by :func:`similarity` of
        their op multisets, each with its best verified kernel: seeds for a search on a new problem. A problem
        already in the archive finds itself first (score 1); problems scoring ``min_score`` or less (nothing in
        common, by default) are left out."""
        src, _ = read_problem(problem)
        h = problem_hash(src)
        row = self.conn.execute("SELECT ops FROM problems WHERE hash=?", (h,)).fetchone()
        ops = json.loads(row[0]) if row else problem_signature(src)["ops"]
        stored = {r[0]: json.loads(r[1]) for r in self.conn.execute("SELECT hash, ops FROM problems")}
        matches = []
        for best in self.best_per_problem(metric):
            other = stored[best.problem_hash]
            score = 1.0 if best.problem_hash == h else similarity(ops, other)
            if score <= min_score:
                continue
            matches.append(Match(round(score, 6), best.problem_hash, best.problem_name, other, best))
        speed = lambda m: getattr(m.best, metric) or 0.0
        matches.sort(key=lambda m: (-m.score, -speed(m), m.best.id))
        return matches[:k]

    def _hash_of(self, problem: str | Path) -> str:
        if isinstance(problem, str) and re.fullmatch(r"[0-9a-f]{64}", problem):
            return problem
        return problem_hash(problem)


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error): one record is all there or not at all."""

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn

    def __enter__(self):
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.conn.execute("COMMIT")
        else:
            self.conn.execute("ROLLBACK")
        return False


def _candidate(r: sqlite3.Row) -> Candidate:
    d = dict(r)
    return Candidate(
        id=d["id"], problem_hash=d["problem_hash"], problem_name=d.get("problem_name"),
        problem_path=d.get("problem_path"), created_at=d["created_at"], code=d["code"], code_hash=d["code_hash"],
        correct=bool(d["correct"]), speedup_eager=d["speedup_eager"], speedup_compile=d["speedup_compile"],
        reason=d["reason"], verdict=json.loads(d["verdict"]), device=d["device"], versions=json.loads(d["versions"]))


# --- command line (wired as `kw archive` by cli.py) ---------------------------------------------------------------
def _verified(verdict: Mapping) -> bool:
    """What the archive ranks on: the evaluator's ``passed`` (correct, and a believable time: not faster than the
    roofline allows) where the verdict has it, else ``correct``."""
    return bool(verdict["passed"] if "passed" in verdict else verdict["correct"])


def add_archive_arguments(p: argparse.ArgumentParser, json_flag: bool = False) -> None:
    """The options of ``kw archive`` (``--json`` only when the parser has no common one)."""
    p.add_argument("--archive", default=None, metavar="PATH",
                   help="archive SQLite file (default $KW_ARCHIVE or ./kernelwright-archive.db)")
    p.add_argument("--similar", default=None, metavar="PROBLEM.py",
                   help="instead of the best per problem: the verified kernels of the problems most similar to this "
                        "one (by the ops in its graph), to seed a search")
    p.add_argument("-k", type=int, default=5, help="how many similar problems (default 5)")
    p.add_argument("--metric", choices=METRICS, default="speedup_eager", help="what 'best' means")
    p.add_argument("--code", action="store_true", help="print the kernels' code too")
    if json_flag:
        p.add_argument("--json", action="store_true", help="machine-readable output on stdout")


def archive_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kw archive", description="the best verified kernel per problem, or the "
                                                               "kernels of the problems most similar to one")
    add_archive_arguments(p, json_flag=True)
    return p


def archive_cli(args: argparse.Namespace | Sequence[str] | None = None) -> int:
    """``kw archive``: list the best verified kernel per problem (a table, or ``--json``), or with ``--similar
    PROBLEM.py`` the ``-k`` most similar solved problems and their best kernels. Returns the exit code."""
    if args is None or not isinstance(args, argparse.Namespace):
        args = archive_parser().parse_args(list(args or []))
    as_json = bool(getattr(args, "json", False))
    path = getattr(args, "archive", None) or default_path()
    metric = getattr(args, "metric", None) or "speedup_eager"
    show_code = bool(getattr(args, "code", False))
    k = getattr(args, "k", 5)
    if k is None or k < 1:
        raise UsageError(f"-k: expected a positive count, got {k}")
    similar_to = getattr(args, "similar", None)
    if similar_to is not None and not Path(similar_to).is_file():
        raise UsageError(f"--similar: no file {similar_to!r}")
    if not Path(path).exists():
        if as_json:
            print("[]")
        else:
            print(f"no archive at {path} yet (kw eval records every candidate it evaluates there)")
        return 0
    with Archive(path, create=False) as a:
        if similar_to is not None:
            matches = a.similar(Path(similar_to), k=k, metric=metric)
            if as_json:
                print(json.dumps([m.as_dict(show_code) for m in matches], indent=2, default=str))
            else:
                _print_table(matches, metric, show_code, similar=True)
            return 0
        best = a.best_per_problem(metric)
        if as_json:
            print(json.dumps([c.as_dict(show_code) for c in best], indent=2, default=str))
        else:
            _print_table(best, metric, show_code, similar=False)
    return 0


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _print_table(items: list, metric: str, show_code: bool, similar: bool) -> None:
    from rich.console import Console
    from rich.syntax import Syntax
    from rich.table import Table

    try:
        width = os.get_terminal_size().columns
    except OSError:
        width = 160
    con = Console(highlight=False, soft_wrap=False, width=max(120, width))
    if not items:
        con.print("no verified kernel in the archive yet" if not similar else "no solved problem to compare with")
        return
    t = Table(title=("most similar solved problems" if similar else "best verified kernel per problem")
              + f" (by {metric})")
    if similar:
        t.add_column("score", justify="right")
    for col in ("problem", "candidate", "vs eager", "vs compile", "device", "when"):
        t.add_column(col, justify="right" if col.startswith("vs") or col == "candidate" else "left")
    if similar:
        t.add_column("ops")
    for it in items:
        c = it.best if similar else it
        row = [c.problem_name or c.problem_hash[:12], f"#{c.id}", _fmt(c.speedup_eager), _fmt(c.speedup_compile),
               c.device or "-", c.created_at]
        if similar:
            row = [f"{it.score:.2f}", *row, ", ".join(f"{op} x{n}" if n > 1 else op for op, n in it.ops.items())]
        t.add_row(*row)
    con.print(t)
    if show_code:
        for it in items:
            c = it.best if similar else it
            con.rule(f"{c.problem_name or c.problem_hash[:12]}: candidate #{c.id}")
            con.print(Syntax(c.code, "python", line_numbers=False))
