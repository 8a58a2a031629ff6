"""Search for faster candidates of a KernelBench problem: ``kw optimize`` (see ``docs/optimize.md``).

>>> from kernelwright.search import optimize
>>> result = optimize("problems/level1/09_rms_norm_bf16.py", budget=16)
>>> result.best.proposal.label, result.best.fitness, result.out_path

Modules: :mod:`~kernelwright.search.optimize` (the loop), :mod:`~kernelwright.search.builtin` (the built-in
proposer), :mod:`~kernelwright.search.patterns` (sites), :mod:`~kernelwright.search.rewrite` (plans, and what a
built-in candidate runs), :mod:`~kernelwright.search.kernels` (the calls that replace sites),
:mod:`~kernelwright.search.llm` (the LLM proposer), :mod:`~kernelwright.search.pool` (local and Ray workers),
:mod:`~kernelwright.search.cli` (``kw optimize``). Other names load lazily: a candidate importing
:mod:`kernelwright.search.rewrite` pulls in only the standard library besides.
"""

from importlib import import_module

# imported here, not lazily: the function shares its module's name, and a lazy lookup would find the module
from kernelwright.search.optimize import Result, optimize  # noqa: F401  (exported)

_EXPORTS = {
    "BuiltinProposer": "builtin", "analyze": "builtin",
    "LLMClient": "llm", "LLMProposer": "llm", "LocalPool": "pool", "RayPool": "pool", "run_job": "pool",
    "planned_forward": "rewrite", "Proposal": "state", "Evaluated": "state",
}
__all__ = sorted([*_EXPORTS, "Result", "optimize"])


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(f"kernelwright.search.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'kernelwright.search' has no attribute {name!r}")
