"""Experiment: run a ``kw`` command with library switches flipped (module-level constants such as a kernel's
register cap), in one process, so the rows are the library's own code path with one thing changed.

    python benchmarks/experiments/switch_bench.py kernelwright.ops.softmax.triton.SPLIT_MAXNREG=96 -- \\
        bench softmax --variant split --sizes 1024x262144

Each assignment is ``module.NAME=VALUE`` (VALUE a Python literal; wrapped in ``tl.constexpr`` where NAME is one,
as kernel globals are); the module must already define NAME. The stored run's command line is this script's
arguments, so it names the switches.
"""

from __future__ import annotations

import ast
import importlib
import sys


def apply(assignment: str) -> None:
    target, sep, value = assignment.partition("=")
    module_name, _, name = target.rpartition(".")
    if not sep or not module_name:
        raise SystemExit(f"switch {assignment!r}: expected module.NAME=VALUE")
    module = importlib.import_module(module_name)
    if not hasattr(module, name):
        raise SystemExit(f"switch {assignment!r}: {module_name} has no {name}")
    new = ast.literal_eval(value)
    old = getattr(module, name)
    if type(old).__name__ == "constexpr":  # a kernel global (tl.constexpr): Triton reads only those inside @jit
        new = type(old)(new)
    setattr(module, name, new)
    print(f"switch: {module_name}.{name} = {getattr(module, name)!r}", flush=True)


def main() -> int:
    argv = sys.argv[1:]
    if "--" not in argv:
        raise SystemExit(__doc__)
    cut = argv.index("--")
    for assignment in argv[:cut]:
        apply(assignment)
    from kernelwright.cli import main as kw

    return kw(argv[cut + 1:])


if __name__ == "__main__":
    sys.exit(main())
