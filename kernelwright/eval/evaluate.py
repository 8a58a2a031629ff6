"""``evaluate(reference, candidate) -> Verdict``: the stable Python API behind ``kw eval``.

Two worker processes per first evaluation of a problem, one per candidate after that:

1. a reference worker (no candidate code ever runs there) computes every input set's float64 and eager outputs,
   the sampled answers for the timing sets, eager (and torch.compile) timings; the parent caches the result per
   problem file content, device and seed, so a search loop that evaluates many candidates on one problem pays
   for it once;
2. a candidate worker (fresh for each candidate) runs the candidate and hands back raw outputs, samples and
   timings. The parent judges them here (:mod:`kernelwright.eval.judge`) and names the failure's category.

Seeds: ``seed=None`` draws one base seed per :class:`Evaluator` (per process through :func:`evaluate`), kept in
the verdict so a run can be repeated with ``seed=``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import time
from collections import OrderedDict
from dataclasses import dataclass, field

import torch

from kernelwright.eval import guards, judge
from kernelwright.eval.loader import materialize
from kernelwright.eval.verdict import CATEGORIES, Verdict
from kernelwright.eval.worker import Outcome, Worker


@dataclass(frozen=True)
class EvalConfig:
    """How to evaluate. ``None`` fields take a per-device default when resolved (:meth:`resolved`)."""

    device: str = "auto"
    timeout_s: float = 300.0
    """wall clock for one candidate worker, its compilation included"""
    reference_timeout_s: float = 900.0
    memory_mb: int | None = None
    """cap on the candidate worker's memory growth: address space (CPU) and resident set (both); default 8192
    on CPU, 32768 (host) on CUDA"""
    gpu_memory_fraction: float = 0.9
    """``torch.cuda.set_per_process_memory_fraction`` in the candidate worker"""
    seed: int | None = None
    timing_sets: int | None = None
    """distinct input sets timed, one call each (default 20 on CUDA, 3 on CPU), fewer when they would not fit
    ``timing_budget_mb``"""
    warmup: int | None = None
    compile_baseline: bool | None = None
    """also time torch.compile of the reference (default: on CUDA only; on CPU it costs ~15 s and says nothing
    about a GPU)"""
    distributions: tuple[str, ...] = ("as_is", "heavy", "large")
    alt_size: bool = True
    samples_per_output: int = 4096
    timing_budget_mb: int | None = None
    slow_inputs_s: float = 0.25
    """when one ``get_inputs()`` call takes longer, timing sets are perturbed copies of the first set and the
    drawn inputs travel to candidate workers instead of being drawn again"""
    copy_tbps: float | None = None
    """bandwidth for the roofline check (default: the measured ceiling, cached per device; CPU: only if cached)"""
    impossible_margin: float = 1.25
    load_state_dict: bool = True
    start_method: str | None = None

    def resolved(self) -> EvalConfig:
        from kernelwright import runtime

        dev = runtime.current_device() if self.device in ("auto", None) else self.device
        if dev not in ("cpu", "cuda"):
            from kernelwright.errors import UsageError

            raise UsageError(f"device: expected auto, cpu or cuda, got {dev!r}")
        cuda = dev == "cuda"
        pick = lambda v, gpu, cpu: v if v is not None else (gpu if cuda else cpu)
        return dataclasses.replace(
            self, device=dev, memory_mb=pick(self.memory_mb, 32768, 8192),
            timing_sets=pick(self.timing_sets, 20, 3), warmup=pick(self.warmup, 3, 2),
            compile_baseline=pick(self.compile_baseline, True, False),
            timing_budget_mb=pick(self.timing_budget_mb, 8192, 256),
            seed=self.seed if self.seed is not None else int.from_bytes(os.urandom(3), "little"))

    def worker_config(self) -> dict:
        return {k: getattr(self, k) for k in ("distributions", "alt_size", "timing_sets", "timing_budget_mb",
                                              "samples_per_output", "warmup", "compile_baseline", "copy_tbps",
                                              "load_state_dict", "slow_inputs_s")}

    def reference_key(self) -> tuple:
        """The fields the reference's results depend on."""
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in CANDIDATE_FIELDS)


CANDIDATE_FIELDS = frozenset({"timeout_s", "memory_mb", "gpu_memory_fraction", "copy_tbps", "impossible_margin",
                               "load_state_dict", "start_method"})
""":class:`EvalConfig` fields that :meth:`Evaluator.evaluate` takes per call (the cached reference does not
depend on them)"""


class ReferenceFailure(Exception):
    def __init__(self, message: str, details: dict | None = None):
        super().__init__(message)
        self.message, self.details = message, details or {}


@dataclass
class Reference:
    """A problem's reference results (from its worker), cached by the :class:`Evaluator`."""

    path: str
    digest: str
    data: dict
    seconds: float
    unfit: bool = False
    sample_seed: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def sets(self) -> list[dict]:
        return self.data["sets"]


def _digest(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()[:16]


def _stage_text(stage: str) -> str:
    return {"start": "before the candidate was imported (building inputs)",
            "ready": "while importing and constructing the candidate",
            "loaded": "during the first call (compiling or running)",
            "compiled": "while checking outputs", "timing": "while timing"}.get(stage, f"at stage {stage}")


class Evaluator:
    """Evaluates candidates against references, caching each reference's results. Cheap to call repeatedly:
    a candidate costs one forked worker (~0.1 s to start on Linux) plus its own work.

    Parameters
    ----------
    config : EvalConfig, optional
    max_references : int
        problems whose reference results stay cached (the least recently used go first: each holds every input
        set's float64 and eager outputs)
    **overrides
        fields of :class:`EvalConfig` (``device=``, ``timeout_s=``, ...)
    """

    def __init__(self, config: EvalConfig | None = None, max_references: int = 4, **overrides):
        self.config = dataclasses.replace(config or EvalConfig(), **overrides).resolved()
        self.max_references = max(1, int(max_references))
        self._refs: OrderedDict[tuple, Reference | ReferenceFailure] = OrderedDict()

    @property
    def seed(self) -> int:
        return int(self.config.seed)

    def reference(self, path: str | os.PathLike) -> Reference:
        """The reference results for a problem file, computed in a worker on first use; raises
        :class:`ReferenceFailure` when the problem cannot be used."""
        path = os.path.abspath(os.fspath(path))
        if not os.path.isfile(path):
            raise ReferenceFailure(f"reference file {path} does not exist")
        key = (path, _digest(path))
        hit = self._refs.get(key)
        if hit is not None:
            self._refs.move_to_end(key)
        if isinstance(hit, ReferenceFailure):
            raise hit
        if hit is not None:
            return hit
        cfg = self.config
        sample_seed = int.from_bytes(os.urandom(4), "little")
        job = {"kind": "reference", "device": cfg.device, "reference": path, "seed": cfg.seed,
               "sample_seed": sample_seed, "config": cfg.worker_config()}
        out = Worker(cfg.start_method).run(job, cfg.reference_timeout_s)
        if out.result is None:
            if out.exit:
                msg = f"the reference worker: {out.exit_detail}"
            else:
                msg = out.error[1]
            fail = ReferenceFailure(msg, {"traceback": (out.error[2] or {}).get("traceback") if out.error else None})
            self._refs[key] = fail
            raise fail
        ref = Reference(path, key[1], out.result, out.elapsed_s, sample_seed=sample_seed,
                        notes=list(out.result["notes"]))
        ref.unfit = _zero_passes(ref, cfg.device)
        _release(cfg.device)
        self._refs[key] = ref
        held = [k for k, r in self._refs.items() if isinstance(r, Reference)]
        for k in held[:-self.max_references]:
            del self._refs[k]
        return ref

    def evaluate(self, reference: str | os.PathLike, candidate: str | os.PathLike, *,
                 name: str | None = None, **overrides) -> Verdict:
        """Judge ``candidate`` (a file path, or Python source text: any string with a newline) against the
        problem file ``reference``. Never raises for a bad file: the verdict says what went wrong.
        ``overrides``: :class:`EvalConfig` fields that concern only the candidate (:data:`CANDIDATE_FIELDS`:
        ``timeout_s``, ``memory_mb``, ...), for this call."""
        t0 = time.perf_counter()
        bad = set(overrides) - CANDIDATE_FIELDS
        if bad:
            raise TypeError(f"per-call options {sorted(bad)} change the reference's results; give them to the "
                            f"Evaluator (per-call: {sorted(CANDIDATE_FIELDS)})")
        cfg = dataclasses.replace(self.config, **overrides)
        is_source = isinstance(candidate, str) and "\n" in candidate
        label = name or ("<source>" if is_source else os.fspath(candidate))
        v = Verdict(problem=os.fspath(reference), candidate=label, device=cfg.device, seed=cfg.seed)
        tmp = None
        try:
            try:
                ref_started = time.perf_counter()
                cached = self._is_cached(reference)
                ref = self.reference(reference)
                v.details["reference_s"] = 0.0 if cached else time.perf_counter() - ref_started
            except ReferenceFailure as f:
                v.category, v.reason = "reference", f.message
                if f.details.get("traceback"):
                    v.details["traceback"] = f.details["traceback"]
                return v
            if is_source:
                tmp = materialize(candidate, name or "candidate")
                cand_path = tmp
            else:
                cand_path = os.path.abspath(os.fspath(candidate))
            evaluate_in_worker(Worker(cfg.start_method), ref, cand_path, cfg, v)
            return v
        finally:
            if tmp:
                shutil.rmtree(os.path.dirname(tmp), ignore_errors=True)
            v.eval_s = time.perf_counter() - t0
            v.overhead_s = v.eval_s - v.compile_s if v.compile_s is not None else None

    def _is_cached(self, path) -> bool:
        p = os.path.abspath(os.fspath(path))
        try:
            return (p, _digest(p)) in self._refs
        except OSError:
            return False


def candidate_job(ref: Reference, candidate_path: str, cfg: EvalConfig) -> dict:
    d = ref.data
    return {"kind": "candidate", "device": cfg.device, "reference": ref.path, "candidate": candidate_path,
            "seed": cfg.seed, "config": cfg.worker_config(), "memory_mb": cfg.memory_mb,
            "gpu_memory_fraction": cfg.gpu_memory_fraction,
            "sets": [s["spec"] for s in d["sets"]], "fingerprints": [s["fingerprint"] for s in d["sets"]],
            "timing_specs": d["timing_specs"], "timing_fingerprints": d["timing_fingerprints"],
            "sample_idx": d["sample_idx"], "output_specs": d["output_specs"],
            "alt_output_specs": d["alt_output_specs"], "alt_overrides": (d["alt"] or {}).get("overrides"),
            "poison_sizes": d["poison_sizes"], "bases": d["bases"]}


def evaluate_in_worker(worker: Worker, ref: Reference, candidate_path: str, cfg: EvalConfig,
                       verdict: Verdict | None = None) -> Verdict:
    """Run one candidate in an already started ``worker`` (a pool can start them ahead of time) and judge it.
    ``cfg`` must be resolved; fills and returns ``verdict`` (a new one when ``None``)."""
    v = verdict or Verdict(problem=ref.path, candidate=candidate_path, device=cfg.device, seed=cfg.seed)
    out = worker.run(candidate_job(ref, candidate_path, cfg), cfg.timeout_s, cfg.memory_mb)
    v.details["candidate_worker_s"] = out.elapsed_s
    v.details["stages"] = [[s[0], round(s[2], 3)] for s in out.stages]
    _fill(v, ref, out, cfg)
    return v


def _fill(v: Verdict, ref: Reference, out: Outcome, cfg: EvalConfig) -> None:
    d = ref.data
    v.details["notes"] = list(ref.notes)
    v.details["timing_mode"] = d["timing_mode"]
    v.details["size_constants"] = d["size_constants"]
    v.details["alt_size"] = (d["alt"] or {}).get("overrides")
    if ref.unfit:
        v.flags.append("unfit_problem")
        v.details["notes"].append("unfit problem: an all-zero output passes its checks")
    if d["alt"] is None:
        v.flags.append("single_size")
    loaded, compiled = out.stage_info("loaded"), out.stage_info("compiled")
    v.loaded, v.compiled = loaded is not None, compiled is not None
    if compiled:
        v.compile_s = compiled.get("compile_s")
    v.times = {"eager": _brief(d["eager_time"]), "compile": _brief(d["compile_time"]) if d["compile_time"] else None}
    if d.get("compile_note"):
        v.details["notes"].append(d["compile_note"])
    if out.exit:
        v.category = out.exit
        v.reason = f"{out.exit_detail} {_stage_text(out.last_stage)}"
        return
    if out.error:
        cat, msg, info = out.error
        v.category = cat if cat in CATEGORIES else "runtime"
        v.reason = msg
        if info.get("traceback"):
            v.details["traceback"] = info["traceback"]
        return
    res = out.result
    v.details["state_loaded"] = res["state_loaded"]
    v.details["native_threads"] = res["native_threads"]
    v.details["first_call_s"] = res["first_call_s"]
    v.details["alt_first_call_s"] = res.get("alt_first_call_s")
    if res.get("compile_s") is not None:  # the stage message's, plus the first call at the second size
        v.compile_s = res["compile_s"]
    t_judge = time.perf_counter()
    try:
        category, reason = _judge_outputs(v, ref, res)
    finally:
        _release(cfg.device)
    v.details["judge_s"] = time.perf_counter() - t_judge
    cand = res["timing"]
    v.times["candidate"] = _brief(cand)
    if category is None and cfg.device == "cuda" and cand["excess_ms"] > max(0.02, 0.2 * cand["median_ms"]):
        category = "side_stream"
        reason = (f"{cand['excess_ms'] * 1e3:.1f} us per call ran after the caller's stream was done (device time "
                  f"{cand['device_median_ms']:.4f} ms vs stream time {cand['stream_median_ms']:.4f} ms): work on a "
                  "side stream the current stream does not wait for")
    if category is not None:
        v.category, v.reason = category, reason
        return
    v.correct = True
    ms = cand["median_ms"]
    if ms > 0:
        v.speedup_eager = d["eager_time"]["median_ms"] / ms
        if d["compile_time"]:
            v.speedup_compile = d["compile_time"]["median_ms"] / ms
    copy_tbps = cfg.copy_tbps or d.get("copy_tbps")
    if copy_tbps:
        bound_ms = d["min_bytes"] / (copy_tbps * 1e12) * 1e3
        v.details["roofline"] = {"bound_ms": bound_ms, "copy_tbps": copy_tbps, "min_bytes": d["min_bytes"],
                                 "max_speedup_eager": d["eager_time"]["median_ms"] / bound_ms if bound_ms else None}
        if ms * cfg.impossible_margin < bound_ms:
            v.flags.append("impossible_speedup")
            v.category = "impossible_speedup"
            v.reason = (f"{ms * 1e3:.2f} us per call is below the roofline bound {bound_ms * 1e3:.2f} us "
                        f"({d['min_bytes']} input and output bytes at {copy_tbps:.3g} TB/s): the timing cannot be "
                        "believed")
            return
    v.passed = True


def _release(device: str) -> None:
    """Give the judging memory back to the device before the next worker needs it."""
    if device == "cuda":
        torch.cuda.empty_cache()


def _brief(t: dict | None) -> dict | None:
    if not t:
        return None
    return {k: t[k] for k in ("median_ms", "iqr_ms", "min_ms", "n", "mode", "stream_median_ms", "device_median_ms",
                              "host_median_ms", "excess_ms", "gate", "gate_timeouts") if k in t}


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))


def _zero_passes(ref: Reference, dev: str) -> bool:
    main = [s for s in ref.sets if not s["spec"]["overrides"]]
    for s in main:
        eagers = _on(dev, s["eager"])
        if not judge.judge_all([torch.zeros_like(e) for e in eagers], _on(dev, s["ref"]), eagers, _conds(s),
                               s["magnification"]).ok:
            return False
    return True


_DIST_TEXT = {"as_is": "as get_inputs() draws them", "heavy": "heavy-tailed (Student-t(2) magnitudes)",
              "large": "magnified 1e3x", "perturb": "perturbed"}


def _judge_outputs(v: Verdict, ref: Reference, res: dict) -> tuple[str | None, str]:
    """Judge every correctness run and every timed call; record the checks in ``v``; return the failure's
    (category, reason), or (None, "")."""
    checks = []
    dev = v.device
    by_name = {s["spec"]["name"]: s for s in ref.sets}
    for rep in res["correctness"]:
        s = by_name[rep["name"]]
        spec = s["spec"]
        runs = [_on(dev, run) for run in rep["runs"]]
        refs, eagers, conds = _on(dev, s["ref"]), _on(dev, s["eager"]), _conds(s)
        mag = float(s.get("magnification", 1.0))
        js = [judge.judge_all(run, refs, eagers, conds, mag) for run in runs]
        unwritten = sum(judge.unwritten_elements(a, b, r, guards.poison_value(a.dtype, guards.POISON_HUGE))
                        for a, b, r in zip(runs[0], runs[1], refs, strict=True) if a.is_floating_point())
        bitwise = all(_same_bits(a, b) for a, b in zip(runs[0], runs[1], strict=True))
        bad = next((j for j in js if not j.ok), None)
        checks.append({"name": spec["name"], "dist": spec["dist"], "alt": bool(spec["overrides"]),
                       "order": rep["order"], "ok": bad is None and unwritten == 0,
                       "runs_ok": [j.ok for j in js], "rel_err": max(j.rel_err for j in js),
                       "eager_rel_err": max(j.eager_rel_err for j in js), "max_abs": max(j.max_abs for j in js),
                       "kind": bad.kind if bad else ("unwritten" if unwritten else "ok"),
                       "reason": bad.reason if bad else (f"{unwritten} unwritten element(s)" if unwritten else ""),
                       "unwritten": unwritten, "bitwise_equal_runs": bitwise})
        del runs, refs, eagers
    v.checks = checks
    if all(c["ok"] for c in checks) and not all(c["bitwise_equal_runs"] for c in checks):
        v.flags.append("nondeterministic_bits")
    failure = _categorize(checks, ref, res, dev)
    if failure:
        return failure
    if res.get("alt_failure"):
        return res["alt_failure"][0], res["alt_failure"][1]
    return _judge_timed_calls(v, ref, res)


def _conds(s: dict) -> list[judge.Conditioning]:
    return [judge.Conditioning(**c) for c in s["cond"]]


def _on(device: str, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """The parent judges on the evaluation's device (a GPU judges 100M-element outputs in milliseconds)."""
    return [t.to(device) for t in tensors]


def _categorize(checks: list[dict], ref: Reference, res: dict, dev: str) -> tuple[str, str] | None:
    failing = [c for c in checks if not c["ok"]]
    if not failing:
        return None
    first = failing[0]
    where = f"input set {first['name']} ({_DIST_TEXT.get(first['dist'], first['dist'])}"
    where += f", size {ref.data['alt']['overrides']})" if first["alt"] and ref.data["alt"] else ")"
    stale = next((c for c in failing if c["unwritten"]), None)
    if stale:
        return "stale_output", (f"{stale['unwritten']} output element(s) on input set {stale['name']} were never "
                                f"written and read back poisoned freed memory ({stale['order'].replace('_', ' ')}): "
                                "a result that holds uninitialised memory passes only where the allocator hands back "
                                "a previous answer")
    spec = next((c for c in failing if c["kind"] == "spec"), None)
    if spec:
        want = ref.data["output_specs"][0]["dtype"]
        lower = ("float16" in spec["reason"] or "bfloat16" in spec["reason"]) and want in ("torch.float32",
                                                                                           "torch.float64")
        return ("precision" if lower else "output_spec"), f"{spec['reason']} on input set {spec['name']}"
    flaky = next((c for c in failing if any(c["runs_ok"]) and not all(c["runs_ok"])), None)
    if flaky:
        return "nondeterministic", (f"two runs on input set {flaky['name']} into differently poisoned memory "
                                    f"disagree: one passes, one fails ({flaky['reason']})")
    cached = _matches_other_set(first, checks, ref, res, dev)
    if cached:
        return "caching", (f"the output for {where} is the answer for input set {cached}: a result cached from an "
                           "earlier call")
    main = [c for c in checks if not c["alt"]]
    if all(c["ok"] for c in main) and any(not c["ok"] for c in checks if c["alt"]):
        return "shape_specialisation", (f"right at the problem's size, wrong at {ref.data['alt']['overrides']}: "
                                        f"{first['reason']}")
    if all(c["ok"] for c in main if c["dist"] == "as_is") and any(not c["ok"] for c in main if c["dist"] != "as_is"):
        return "distribution", f"right on inputs as get_inputs() draws them, wrong on {where}: {first['reason']}"
    if first["kind"] in ("norm", "elementwise") and first["rel_err"] <= 0.05:
        return "precision", (f"{where}: {first['reason']}; an error of this size is what bf16, fp16 or TF32 "
                             "arithmetic gives")
    return "wrong_output", f"{where}: {first['reason']}"


def _matches_other_set(check: dict, checks: list[dict], ref: Reference, res: dict, dev: str) -> str | None:
    i = next(k for k, c in enumerate(checks) if c is check)
    out = _on(dev, res["correctness"][i]["runs"][0])
    for s in ref.sets:
        if s["spec"]["name"] == check["name"] or [list(o.shape) for o in out] != [list(e.shape) for e in s["eager"]]:
            continue
        if judge.judge_all(out, _on(dev, s["ref"]), _on(dev, s["eager"]), _conds(s), s["magnification"]).ok:
            return s["spec"]["name"]
    return None


def _judge_timed_calls(v: Verdict, ref: Reference, res: dict) -> tuple[str | None, str]:
    expected = ref.data["timing_samples"]
    for i, call in enumerate(res["samples"]):
        for k, s in enumerate(call):
            why = judge.judge_samples(s["values"], s, expected[i][k])
            if why is None:
                continue
            other = next((j for j in range(len(expected)) if j != i
                          and judge.judge_samples(s["values"], s, expected[j][k]) is None), None)
            what = (f"it is the answer for timing input set {other}: cached across calls" if other is not None
                    else why)
            return "timed_call_mismatch", (f"timed call {i} of {len(res['samples'])} (fresh inputs at fresh "
                                           f"addresses) returned a wrong output: {what}; right while checked, wrong "
                                           "while timed (work skipped or batched)")
    v.details["timed_calls_checked"] = len(res["samples"])
    return None, ""


_EVALUATORS: dict[EvalConfig, Evaluator] = {}


def evaluate(reference: str | os.PathLike, candidate: str | os.PathLike, *, device: str = "auto",
             timeout_s: float | None = None, memory_mb: int | None = None, seed: int | None = None,
             config: EvalConfig | None = None, name: str | None = None, **options) -> Verdict:
    """Evaluate a KernelBench-format candidate against its reference.

    Parameters
    ----------
    reference : path
        problem file defining ``Model``, ``get_inputs()``, ``get_init_inputs()``
    candidate : path or str
        candidate file defining ``ModelNew``, or its source text (any string containing a newline)
    device : {"auto", "cpu", "cuda"}
    timeout_s, memory_mb, seed, **options
        :class:`EvalConfig` fields; ``config`` gives them all at once
    name : str, optional
        label for a candidate given as source

    Returns
    -------
    Verdict
        never raises for a bad reference or candidate file. Reference results are cached per process and
        configuration, so calling this many times on one problem costs one worker per candidate.
    """
    base = config or EvalConfig()
    fields = dict(options)
    if config is None or device != "auto":  # an explicit device wins over the config's
        fields["device"] = device
    if timeout_s is not None:
        fields["timeout_s"] = timeout_s
    if memory_mb is not None:
        fields["memory_mb"] = memory_mb
    if seed is not None:
        fields["seed"] = seed
    unresolved = dataclasses.replace(base, **fields)
    # one Evaluator (one reference cache) per reference-relevant configuration; the rest goes per call
    defaults = EvalConfig()
    key = dataclasses.replace(unresolved, **{k: getattr(defaults, k) for k in CANDIDATE_FIELDS})
    per_call = {k: v for k in CANDIDATE_FIELDS if (v := getattr(unresolved, k)) is not None}
    ev = _EVALUATORS.get(key)
    if ev is None:
        ev = _EVALUATORS[key] = Evaluator(key)
    return ev.evaluate(reference, candidate, name=name, **per_call)


def describe(v: Verdict) -> str:
    """A few lines for people (``kw eval``'s output)."""
    lines = [f"{v.status}  {v.candidate} vs {v.problem} ({v.device})"]
    yn = lambda b: "yes" if b else "no"
    comp = f" ({v.compile_s:.2f} s)" if v.compile_s is not None else ""
    n_sets = len(v.checks)
    timed = v.details.get("timed_calls_checked")
    lines.append(f"  loaded {yn(v.loaded)}  compiled {yn(v.compiled)}{comp}  correct {yn(v.correct)}"
                 + (f" ({n_sets} input sets x 2 runs" + (f", {timed} timed calls" if timed else "") + ")"
                    if n_sets else ""))
    t = v.times or {}

    def ms(x):
        return "-" if not x else (f"{x['median_ms'] * 1e3:.1f} us" if x["median_ms"] < 1 else
                                  f"{x['median_ms']:.3f} ms") + f" (IQR {x['iqr_ms'] / max(x['median_ms'], 1e-12):.0%})"
    if t.get("candidate"):
        sp = lambda s: "-" if s is None else f"{s:.3g}x"
        lines.append(f"  candidate {ms(t.get('candidate'))}  eager {ms(t.get('eager'))}  torch.compile "
                     f"{ms(t.get('compile'))}")
        lines.append(f"  speedup {sp(v.speedup_eager)} vs eager, {sp(v.speedup_compile)} vs torch.compile")
    if v.reason:
        lines.append(f"  reason [{v.category}]: {v.reason}")
    if v.flags:
        lines.append(f"  flags: {', '.join(v.flags)}")
    for note in v.details.get("notes", []):
        lines.append(f"  note: {note}")
    over = f", overhead {v.overhead_s:.1f} s" if v.overhead_s is not None else ""
    lines.append(f"  seed {v.seed}, {v.eval_s:.1f} s{over}")
    return "\n".join(lines)
