"""Evaluate KernelBench-format candidates: isolated, verified against float64, timed, and checked for cheats.

>>> from kernelwright.eval import evaluate
>>> v = evaluate("problems/softmax.py", "candidates/softmax.py", device="cpu")
>>> v.correct, v.speedup_eager, v.reason

See ``docs/eval.md`` for the checks and the verdict's fields.
"""

from kernelwright.eval.evalset import SetReport, evaluate_set
from kernelwright.eval.evaluate import EvalConfig, Evaluator, describe, evaluate, evaluate_in_worker
from kernelwright.eval.verdict import CATEGORIES, Verdict

__all__ = ["CATEGORIES", "EvalConfig", "Evaluator", "SetReport", "Verdict", "describe", "evaluate",
           "evaluate_in_worker", "evaluate_set"]
