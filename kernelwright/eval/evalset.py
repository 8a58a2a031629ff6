"""``kw eval-set DIR``: every problem of a set against its candidate; fast_p and the geometric-mean speedup.

Layout::

    DIR/NAME.py                 problems (KernelBench format; files starting with "_" are skipped)
    DIR/candidates/NAME.py      the candidate for problem NAME (another folder with ``candidates=``)

A problem without a candidate counts as failed (category ``missing``). ``fast_p`` is KernelBench's: the share
of *all* problems whose candidate passed (correct, timing believable) and ran more than ``p`` times faster than
eager PyTorch; ``fast_0`` is the share that passed. The geometric mean is over the problems that passed.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kernelwright.errors import UsageError
from kernelwright.eval.evaluate import EvalConfig, Evaluator
from kernelwright.eval.verdict import Verdict

THRESHOLDS = (0.0, 1.0, 1.5, 2.0)


@dataclass
class SetReport:
    directory: str
    candidates: str
    verdicts: list[Verdict]
    fast_p: dict[str, float]
    geomean_speedup: float | None
    """geometric mean speedup vs eager over the problems that passed"""
    geomean_speedup_compile: float | None
    n_problems: int
    n_correct: int
    n_passed: int
    unfit: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["verdicts"] = [v.to_dict() for v in self.verdicts]
        return d


def discover(directory: str | os.PathLike, candidates: str | os.PathLike | None = None) -> list[tuple[str, str,
                                                                                                       str | None]]:
    """(name, problem path, candidate path or None) for every problem in ``directory``, sorted by name."""
    root = Path(directory)
    if not root.is_dir():
        raise UsageError(f"DIR: {directory} is not a folder")
    cand_dir = Path(candidates) if candidates else root / "candidates"
    out = []
    for p in sorted(root.glob("*.py")):
        if p.name.startswith("_"):
            continue
        c = cand_dir / p.name
        out.append((p.stem, str(p), str(c) if c.is_file() else None))
    if not out:
        raise UsageError(f"DIR: no problem files (*.py) in {directory}")
    return out


def fast_p(verdicts: list[Verdict], thresholds=THRESHOLDS) -> dict[str, float]:
    n = len(verdicts)
    return {f"fast_{p:g}": (sum(1 for v in verdicts if v.passed and (v.speedup_eager or 0) > p) / n if n else 0.0)
            for p in thresholds}


def geomean(values: list[float]) -> float | None:
    vals = [x for x in values if x and x > 0]
    return math.exp(sum(math.log(x) for x in vals) / len(vals)) if vals else None


def evaluate_set(directory: str | os.PathLike, candidates: str | os.PathLike | None = None,
                 config: EvalConfig | None = None, on_verdict: Callable[[str, Verdict], None] | None = None,
                 evaluator: Evaluator | None = None) -> SetReport:
    """Evaluate every problem of ``directory`` against its candidate, one after the other (one GPU)."""
    plan = discover(directory, candidates)
    ev = evaluator or Evaluator(config)
    cand_dir = Path(candidates) if candidates else Path(directory) / "candidates"
    verdicts = []
    for name, problem, cand in plan:
        if cand is None:
            v = Verdict(problem=problem, candidate="", device=ev.config.device, seed=ev.seed, category="missing",
                        reason=f"no candidate {name}.py in {cand_dir}")
        else:
            v = ev.evaluate(problem, cand)
        verdicts.append(v)
        if on_verdict:
            on_verdict(name, v)
    passed = [v for v in verdicts if v.passed]
    return SetReport(
        directory=str(directory), candidates=str(cand_dir), verdicts=verdicts,
        fast_p=fast_p(verdicts), geomean_speedup=geomean([v.speedup_eager for v in passed]),
        geomean_speedup_compile=geomean([v.speedup_compile for v in passed if v.speedup_compile]),
        n_problems=len(verdicts), n_correct=sum(v.correct for v in verdicts), n_passed=len(passed),
        unfit=[Path(v.problem).stem for v in verdicts if "unfit_problem" in v.flags])
