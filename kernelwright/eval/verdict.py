"""The verdict on one candidate: what happened, how fast, and why it failed if it did."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

CATEGORIES = {
    # the files
    "reference": "the problem file is unusable (does not import, lacks Model/get_inputs/get_init_inputs, or its "
                 "Model cannot be checked)",
    "missing": "no candidate file for the problem",
    "load": "the candidate file does not import",
    "api": "no ModelNew, or its constructor differs from Model's or raises",
    # running
    "compile": "the first call raised (compilation or launch failed)",
    "runtime": "a later call raised",
    "cuda_fault": "a CUDA error (illegal address, device-side assert)",
    "timeout": "no verdict within the wall-clock limit (a hang or an infinite loop)",
    "crash": "the worker process died (segfault, os._exit, ...)",
    "memory": "over the memory cap",
    # wrong answers
    "output_spec": "outputs of the wrong number, shape, dtype or device",
    "wrong_output": "outputs differ from the float64 reference beyond the tolerance",
    "precision": "error typical of lower precision (bf16/fp16/TF32), or precision switches turned on",
    "distribution": "right on as-is inputs, wrong on heavy-tailed or magnified ones",
    "shape_specialisation": "right at the problem's size, wrong at another",
    "stale_output": "elements left unwritten: they read poisoned freed memory",
    "nondeterministic": "two runs on the same inputs into differently poisoned memory disagree",
    "caching": "an output that belongs to other inputs (cached across calls)",
    "timed_call_mismatch": "a timed call's output was wrong (work skipped or batched while timed)",
    "input_mutation": "the candidate changed its inputs",
    "lazy_output": "an output that is not a plain materialised tensor (subclass, lazy bit, sparse, meta)",
    # gaming the timer
    "background_threads": "threads still running after a call returned",
    "side_stream": "work left running on a stream the caller's stream does not wait for",
    "timer_tampering": "the candidate replaced timing or reporting functions",
    "impossible_speedup": "faster than the roofline allows (input and output bytes at the measured copy bandwidth)",
}
"""failure categories and what each means; ``Verdict.category`` is one of these or ``None``"""


@dataclass
class Verdict:
    problem: str
    candidate: str
    device: str
    loaded: bool = False
    """the candidate file imported, and ModelNew exists, takes Model's arguments and was constructed"""
    compiled: bool = False
    """the first call returned (its kernels compiled and launched)"""
    correct: bool = False
    """every output right and every integrity check passed"""
    passed: bool = False
    """correct, and its timing believable (not beyond the roofline): what fast_p counts"""
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    times: dict = field(default_factory=dict)
    """``candidate``, ``eager``, ``compile``: each ``median_ms``, ``iqr_ms``, ``min_ms``, ``n``, ``mode``, ..."""
    reason: str = ""
    category: str | None = None
    flags: list[str] = field(default_factory=list)
    """``unfit_problem`` (an all-zero output would pass), ``impossible_speedup``, ``single_size`` (no second size
    could be made), ``nondeterministic_bits`` (runs agree within tolerance but not bit for bit), ..."""
    checks: list[dict] = field(default_factory=list)
    """one per input set: name, distribution, order, ok, errors, reason"""
    seed: int | None = None
    compile_s: float | None = None
    """candidate import + construction + first call, + its first call at the second size (a re-compile there)"""
    eval_s: float = 0.0
    overhead_s: float | None = None
    """``eval_s - compile_s``: what evaluating cost beyond the candidate's own compilation"""
    details: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), default=str, **kw)

    @property
    def status(self) -> str:
        return "PASS" if self.passed else "FAIL"
