"""Rewrite a reference Model's forward by a *plan*: which sites run which kernelwright rung, and a compile mode.

Why a plan and not generated code: the evaluator imports a candidate from its source text in a fresh process,
and the archive keeps that text, so a candidate must be self-contained source. A built-in candidate is the
reference file's source, unchanged, followed by::

    from kernelwright.search.rewrite import planned_forward as _kw_planned_forward

    KW_PLAN = {"sites": [["add_rms_norm", "rms_norm", "fused"], ["linear", "linear", None]], "compile": None}

    class ModelNew(Model):
        def forward(self, *args, **kwargs):
            return _kw_planned_forward(self, Model, KW_PLAN, args, kwargs)

``ModelNew`` inherits ``Model``'s constructor, so it takes the same arguments and its parameters have the same
``state_dict`` names (the evaluator loads the reference's weights into it). On its first call
:func:`planned_forward` traces ``Model.forward`` *on this instance* with ``torch.fx`` (so values the forward reads
from ``self``, a head count or a scale, are this instance's: the evaluator builds a second instance at another
problem size), finds each planned site by kind and anchor node name (:mod:`kernelwright.search.patterns`),
replaces it by a call of its wrapper (:mod:`kernelwright.search.kernels`) with the planned ``variant=``, turns the
graph back into Python (parameters read as ``self.<name>`` at every call, so weights loaded after construction
are used) and keeps that function on the instance. ``compile`` wraps it in ``torch.compile`` with that mode.

A plan names sites the way fx names nodes, from the code's structure, so a plan made from the reference's trace
names the same nodes in the candidate's trace; a site that is not found is an error (:class:`PlanError`), never
silently skipped.
"""

from __future__ import annotations

import json
import linecache
import re
import types

import torch
import torch.fx as fx

from kernelwright.search import patterns

COMPILE_MODES = ("default", "max-autotune-no-cudagraphs", "reduce-overhead")
_REF = "_kw_reference_forward"


class PlanError(RuntimeError):
    """A plan that does not fit the model: a site not found, an unknown compile mode."""


def normalize_plan(plan: dict | None) -> dict:
    """``{"sites": [[kind, anchor, variant], ...] sorted, "compile": mode or None}``; checks the fields."""
    plan = plan or {}
    sites = []
    for entry in plan.get("sites", []):
        kind, anchor, variant = entry
        if kind not in patterns.FAMILY:
            raise PlanError(f"plan: unknown site kind {kind!r}; kinds: {', '.join(patterns.FAMILY)}")
        if not isinstance(anchor, str) or not (variant is None or isinstance(variant, str)):
            raise PlanError(f"plan: a site is [kind, anchor node name, variant or None], got {entry!r}")
        sites.append([kind, anchor, variant])
    mode = plan.get("compile")
    if mode is not None and mode not in COMPILE_MODES:
        raise PlanError(f"plan: compile mode {mode!r} is not one of {', '.join(COMPILE_MODES)}")
    return {"sites": sorted(sites, key=lambda s: (s[1], s[0])), "compile": mode}


def plan_key(plan: dict) -> str:
    return json.dumps(normalize_plan(plan), sort_keys=True)


class _Tracer(fx.Tracer):
    traced_func_name = _REF


def trace(module: torch.nn.Module, base: type | None = None) -> fx.Graph:
    """The fx graph of ``base.forward`` (default: the module's own class) called on ``module``. Standard
    ``torch.nn`` layers stay ``call_module`` nodes; the reference's own submodules are traced through."""
    base = base or type(module)
    cls = type(module)
    if cls.__dict__.get(_REF) is not base.forward:
        setattr(cls, _REF, base.forward)
    return _Tracer().trace(module)


def rewrite(module: torch.nn.Module, base: type, plan: dict) -> fx.Graph:
    """The traced graph of ``base.forward`` with the plan's sites replaced."""
    plan = normalize_plan(plan)
    graph = trace(module, base)
    for kind, anchor, variant in plan["sites"]:
        found = {s.key: s for s in patterns.find_sites(module, graph)}
        site = found.get((kind, anchor))
        if site is None:
            have = ", ".join(f"{k}@{a}" for k, a in found) or "none"
            raise PlanError(f"plan: no {kind} site at node {anchor!r} in {base.__name__}.forward (sites: {have})")
        site.apply(graph, variant)
    patterns.cleanup(graph)
    graph.lint()
    return graph


def graph_source(graph: fx.Graph) -> str:
    """The graph as Python (``def forward(self, ...)``), wrapper calls spelled ``kw_<kind>``."""
    src = graph.python_code(root_module="self").src
    src = re.sub(r" : _\w+_| -> _\w+_", "", src)  # fx's annotation placeholders
    return src.replace("kernelwright_search_kernels_", "").strip("\n")


_counter = [0]


def compile_graph(graph: fx.Graph, module: torch.nn.Module):
    """The graph as a function bound to ``module`` (its source registered with linecache, so tracebacks show
    the rewritten forward's lines)."""
    code = graph.python_code(root_module="self")
    _counter[0] += 1
    filename = f"<kernelwright rewrite {_counter[0]} of {type(module).__name__}.forward>"
    linecache.cache[filename] = (len(code.src), None, code.src.splitlines(True), filename)
    namespace = dict(code.globals)
    exec(compile(code.src, filename, "exec"), namespace)
    return types.MethodType(namespace["forward"], module)


def _compiled(fn, mode: str):
    compiled = torch.compile(fn, mode=mode)
    if mode != "reduce-overhead":
        return compiled

    def replayed(*args, **kwargs):
        # CUDA graph replays reuse their output memory: hand out copies the next replay cannot overwrite
        torch.compiler.cudagraph_mark_step_begin()
        out = compiled(*args, **kwargs)
        return torch.utils._pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, out)

    return replayed


def build_forward(module: torch.nn.Module, base: type, plan: dict):
    """``module``'s forward under ``plan``: the rewritten graph (or ``base.forward`` when no site is planned),
    compiled when the plan names a mode."""
    plan = normalize_plan(plan)
    if plan["sites"]:
        fn = compile_graph(rewrite(module, base, plan), module)
    else:
        fn = types.MethodType(base.forward, module)
    return _compiled(fn, plan["compile"]) if plan["compile"] else fn


def planned_forward(module: torch.nn.Module, base: type, plan: dict, args: tuple, kwargs: dict):
    """What a built-in candidate's ``ModelNew.forward`` does: build (first call) and run the planned forward."""
    fn = module.__dict__.get("_kw_planned_forward")
    if fn is None:
        fn = module.__dict__["_kw_planned_forward"] = build_forward(module, base, plan)
    return fn(*args, **kwargs)
