"""The worker process: one job each, a reference's or a candidate's, run apart from the parent.

Child side (:func:`worker_main`): a **reference job** imports the problem, builds its input sets, runs the Model
in its dtype (eager) and in float64, finds a second problem size, times eager PyTorch (and torch.compile) and
sends all of it back; no candidate ever runs in that process, so nothing a candidate does can touch the
reference's answers. A **candidate job** rebuilds the same input sets, and only then imports the candidate,
builds ``ModelNew``, runs it on every set twice into differently poisoned memory (in both orders relative to the
eager reference), times it on input sets it has never seen, and sends back its outputs, sampled values of every
timed output and its timings. The parent judges.

Parent side (:class:`Worker`): starts the process (``forkserver`` with torch preloaded on Linux, so a fresh
worker costs ~0.1 s instead of a torch import; ``spawn`` elsewhere), sends the job, and enforces the wall-clock
timeout and the resident-memory cap by killing the worker's process group. A crash, a hang, a CUDA fault or an
infinite loop becomes an :class:`Outcome` with ``exit`` set; the caller turns it into a failed verdict.

Memory caps: on CPU the worker also sets ``RLIMIT_AS`` (address space) to its size at start plus
``memory_mb``, so an oversized allocation fails inside the candidate with a clear error. On CUDA that limit
cannot be used (the driver reserves a huge virtual address range), so device memory is capped with
``torch.cuda.set_per_process_memory_fraction`` (allocations through PyTorch only) and host memory by the
parent's resident-set watchdog, which applies on both devices.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import shutil
import signal
import statistics
import sys
import time
import traceback
import types
from dataclasses import dataclass, field

import torch

from kernelwright.eval import guards, judge, loader, problem, wire
from kernelwright.eval.problem import InputSpec


class Failure(Exception):
    """A verdict-worthy failure inside the worker: ``category`` and one sentence."""

    def __init__(self, category: str, message: str, info: dict | None = None):
        super().__init__(message)
        self.category, self.message, self.info = category, message, info or {}


def classify(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}"
    if isinstance(e, MemoryError) or "out of memory" in text.lower() or "can't allocate memory" in text.lower() \
            or isinstance(e, getattr(torch, "OutOfMemoryError", MemoryError)):
        return "memory"
    if "CUDA error" in text or "illegal memory access" in text or "device-side assert" in text:
        return "cuda_fault"
    return "runtime"


def _tail(e: BaseException, limit: int = 6) -> str:
    return "".join(traceback.format_exception(type(e), e, e.__traceback__)[-limit:])[-2000:]


# -- child side ---------------------------------------------------------------------------------------------------
def worker_main(conn) -> None:
    """Entry point of the worker process: read one job, run it, send messages, exit without cleanup (a
    candidate's leftover threads or atexit hooks must not keep the process alive)."""
    try:
        os.setsid()  # its own process group: the parent can kill whatever it starts (compilers, ...)
    except OSError:
        pass

    try:
        spill = wire.loads(conn.recv_bytes())["spill"]  # first the job's folder, then the job (its large tensors
        job = wire.loads(conn.recv_bytes(), spill)       # travel as files there)
    except (EOFError, OSError):
        os._exit(0)

    def send(*msg) -> None:
        conn.send_bytes(wire.dumps(list(msg), job.get("spill")))
    try:
        _setup(job)
        if job["kind"] == "reference":
            send("result", run_reference(job, send))
        else:
            send("result", run_candidate(job, send))
    except Failure as f:
        _send_quietly(send, "error", f.category, f.message, f.info)
    except loader.LoadError as e:
        _send_quietly(send, "error", e.category, e.message, {})
    except BaseException as e:  # the candidate's own exceptions, SystemExit included
        _send_quietly(send, "error", classify(e), f"{type(e).__name__}: {e}"[:1000], {"traceback": _tail(e)})
    finally:
        try:
            conn.close()
        finally:
            os._exit(0)


def _send_quietly(send, *msg) -> None:
    try:
        send(*msg)
    except Exception:
        pass


def _vm_size() -> int:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _setup(job: dict) -> None:
    device = job["device"]
    os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"  # torch.compile in-process: no compile-worker threads
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    else:
        os.environ.pop("TRITON_INTERPRET", None)
    from kernelwright import runtime

    runtime.select_device(device)
    try:  # tqdm's monitor thread would look like a candidate's background thread
        import tqdm

        tqdm.tqdm.monitor_interval = 0
    except ImportError:
        pass
    mb = job.get("memory_mb")
    if device == "cpu" and mb and job["kind"] == "candidate":
        import resource

        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = _vm_size() + int(mb) * 2**20
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    if device == "cuda":
        torch.cuda.init()
        frac = job.get("gpu_memory_fraction")
        if frac and job["kind"] == "candidate":
            torch.cuda.set_per_process_memory_fraction(float(frac))
    else:
        torch.set_num_threads(1)  # host-clock timings on a shared CPU: no thread-pool wake-ups in the samples
    guards.strict_precision()
    torch.set_grad_enabled(False)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _hold_cycles() -> int:
    """GPU cycles of the fixed spin queued before each timed call when the host gate cannot be used
    (``KW_EVAL_HOLD_CYCLES`` overrides)."""
    from kernelwright.harness import timing

    return int(os.environ.get("KW_EVAL_HOLD_CYCLES") or timing._HOLD_CYCLES)


def _gate_for(fn, warmup_args: list | None):
    """A :class:`~kernelwright.harness.gate.HostGate` for timing ``fn``, or None when ``fn`` waits on the GPU
    itself (a gated trial call ran out of spins) or ``KW_EVAL_GATE=0``."""
    if os.environ.get("KW_EVAL_GATE", "1") == "0" or warmup_args is None:
        return None
    from kernelwright.harness.gate import gate_for

    return gate_for(lambda: fn(*warmup_args))


def time_calls(fn, arg_sets: list[list], device: str, *, warmup_args: list | None = None, warmup: int = 0,
               after=None) -> dict:
    """Time ``fn(*args)`` once per argument set (each set is used once: a result cached by content never
    hits). ``after(i, out)`` runs outside the timed span (checks).

    CUDA: the L2 is flushed and a blocking kernel queued before each call, then events ``start -> fn -> mid`` on
    the current stream; the host then releases the blocking kernel (:mod:`kernelwright.harness.gate`), so the GPU
    runs the call's work back to back however long the host took to queue it; ``torch.cuda.synchronize()``
    (every stream of the device), then ``end``. ``device_ms = end - start`` includes work left on other streams;
    ``stream_ms = mid - start`` does not. The host's wake-up gap between ``synchronize`` and ``end`` is measured
    on an empty call and taken off: a sample is ``max(stream_ms, device_ms - gap)``. ``excess_ms`` (median of
    ``device - stream - gap``) is the work that finished after the current stream did: side-stream work nobody
    waited for. A callable that waits on the GPU itself (the gate would time out) is timed behind a fixed spin
    instead (``gate: "spin"``), and then its host time can be in the sample. ``host_median_ms`` is the host's
    time to make the call (launch cost). CPU: a host clock.
    """
    from kernelwright.harness import timing

    for _ in range(warmup):
        fn(*warmup_args)
        _sync(device)
    stream_ms, device_ms, host_ms = [], [], []
    gap, gate, timeouts = 0.0, None, 0
    if device == "cuda":
        flush = timing._l2_flush_buffer()
        gaps = []
        for _ in range(5):
            s, m, e = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            s.record()
            m.record()
            torch.cuda.synchronize()
            e.record()
            e.synchronize()
            gaps.append(m.elapsed_time(e))
        gap = statistics.median(gaps)
        gate = _gate_for(fn, warmup_args)
    for i, args in enumerate(arg_sets):
        if device == "cuda":
            flush.zero_()
            if gate is not None:
                gate.close()
            else:
                torch.cuda._sleep(_hold_cycles())
            s, m, e = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            s.record()
            t0 = time.perf_counter()
            try:
                out = fn(*args)
            except BaseException:
                if gate is not None:
                    gate.open()
                raise
            host_ms.append((time.perf_counter() - t0) * 1e3)
            m.record()
            if gate is not None:
                gate.open()
            torch.cuda.synchronize()
            e.record()
            e.synchronize()
            if gate is not None and gate.timed_out():
                timeouts += 1
            stream_ms.append(s.elapsed_time(m))
            device_ms.append(s.elapsed_time(e))
        else:
            t0 = time.perf_counter()
            out = fn(*args)
            t1 = time.perf_counter()
            stream_ms.append((t1 - t0) * 1e3)
            device_ms.append((t1 - t0) * 1e3)
            host_ms.append((t1 - t0) * 1e3)
        if after is not None:
            after(i, out)
        del out
    samples = [max(st, dv - gap) for st, dv in zip(stream_ms, device_ms, strict=True)]
    med, iqr, mn = timing.summarize(samples)
    excess = statistics.median([dv - st - gap for st, dv in zip(stream_ms, device_ms, strict=True)])
    out = {"median_ms": med, "iqr_ms": iqr, "min_ms": mn, "n": len(samples), "samples_ms": samples,
           "stream_median_ms": statistics.median(stream_ms), "device_median_ms": statistics.median(device_ms),
           "host_median_ms": statistics.median(host_ms),
           "sync_gap_ms": gap, "excess_ms": max(0.0, excess) if device == "cuda" else 0.0,
           "mode": "cuda-events+device-sync" if device == "cuda" else "host-clock"}
    if device == "cuda":
        out["gate"] = "host" if gate is not None else "spin"
        out["gate_timeouts"] = timeouts
    return out


def _run(model, args: list) -> list[torch.Tensor]:
    outs = problem.outputs_list(model(*args))
    for i, o in enumerate(outs):
        if not isinstance(o, torch.Tensor):
            raise Failure("reference", f"reference output {i} is a {type(o).__name__}; only tensors are supported")
    return outs


class _Float64:
    """The reference Model in float64 (same seed, so the same weights), on the device, or on the CPU where an
    op has no float64 kernel on the device. :meth:`perturbed` runs a second copy whose parameters, like the
    inputs, are perturbed by their own dtype's epsilon (see :class:`kernelwright.eval.judge.Conditioning`)."""

    def __init__(self, cls, init: list, seed: int, device: str, native: torch.nn.Module):
        self.cls, self.init, self.seed, self.device = cls, init, seed, device
        self.model = problem.build_model(cls, init, seed, device).double()
        self.param_eps = [torch.finfo(p.dtype).eps if p.is_floating_point() else 0.0 for p in native.parameters()]
        self.shadow = None

    def _on_device(self, args: list) -> list:
        return [a.to(self.device) if isinstance(a, torch.Tensor) else a for a in args]

    def __call__(self, args: list) -> list[torch.Tensor]:
        up = problem.to_float64(args)
        try:
            outs = _run(self.model, self._on_device(up))
        except Failure:
            raise
        except Exception:
            if self.device == "cpu":
                raise
            self.device = "cpu"
            self.model = self.model.cpu()
            outs = _run(self.model, self._on_device(up))
        return [o.double() if o.is_floating_point() else o for o in outs]

    def perturbed(self, args: list, seed: int) -> list[torch.Tensor]:
        gen = torch.Generator(device=self.device)
        gen.manual_seed(seed)

        def jitter(t: torch.Tensor, eps: float) -> torch.Tensor:
            r = torch.rand(t.shape, generator=gen, device=self.device, dtype=torch.float64) * 2 - 1
            return t.to(self.device, torch.float64) * (1 + r * eps)

        if self.shadow is None:
            self.shadow = problem.build_model(self.cls, self.init, self.seed, self.device).double()
        with torch.no_grad():
            for p, p0, eps in zip(self.shadow.parameters(), self.model.parameters(), self.param_eps, strict=False):
                if p.is_floating_point():
                    p.copy_(jitter(p0, eps))
        up = [jitter(a, torch.finfo(a.dtype).eps) if isinstance(a, torch.Tensor) and not problem.is_structural(a)
              else (a.to(self.device, torch.float64 if a.is_floating_point() else a.dtype)
                    if isinstance(a, torch.Tensor) else a) for a in args]
        return [o.double() if o.is_floating_point() else o for o in _run(self.shadow, up)]


def _run_to_run_drift(first: list[torch.Tensor], second: list[torch.Tensor]) -> str | None:
    """None when two eager runs on the same inputs agree within a tenth of their dtype's tolerance (rounding that
    varies with the order of a reduction), else what differs."""
    for i, (a, b) in enumerate(zip(first, second, strict=True)):
        if not a.is_floating_point():
            if not torch.equal(a, b):
                return f"output {i} ({a.dtype}) differs"
            continue
        if not torch.equal(a.isnan(), b.isnan()):
            return f"output {i} has NaN in different places"
        tol = judge.tolerance_for(a.dtype)
        x, y = a.double().nan_to_num(), b.double().nan_to_num()
        bound = 0.1 * (tol.atol + tol.rtol * x.abs())
        if bool(((x - y).abs() > bound).any()):
            return f"output {i} differs by up to {float((x - y).abs().max()):.3g}"
    return None


def _rms(args: list) -> float:
    """RMS over every element of the floating tensor arguments."""
    total, n = 0.0, 0
    for a in args:
        if isinstance(a, torch.Tensor) and a.is_floating_point() and a.numel():
            total += float(a.double().square().sum())
            n += a.numel()
    return (total / n) ** 0.5 if n else 0.0


def _conditioning(model64: _Float64, args: list, refs: list[torch.Tensor], seed: int) -> list[dict]:
    """Per output, how much a relative-epsilon perturbation of inputs and parameters moves the float64 answer."""
    moved = model64.perturbed(args, seed)
    out = []
    for r, m in zip(refs, moved, strict=True):
        c = judge.conditioning(r, m.to(r.device)) if r.is_floating_point() else judge.Conditioning()
        out.append({"max_abs": c.max_abs, "rel": c.rel})
    return out


def _finite_consistent(refs: list, eagers: list) -> bool:
    """Rounded reference and eager both finite wherever the rounded reference is."""
    for r, e in zip(refs, eagers, strict=True):
        if r.is_floating_point() and e.is_floating_point():
            x = r.to(e.dtype)
            if not torch.equal(torch.isfinite(x), torch.isfinite(e.to(x.device))):
                return False
    return True


def _all_finite(refs: list, eagers: list) -> bool:
    return all(bool(torch.isfinite(r.to(e.dtype)).all()) for r, e in zip(refs, eagers, strict=True)
               if r.is_floating_point() and e.is_floating_point())


def _compact(refs: list[torch.Tensor], eagers: list[torch.Tensor]) -> list[torch.Tensor]:
    """float64 references of fp16/bf16 outputs travel as float32: 16 more bits than the dtype, half the bytes."""
    return [r.float() if e.dtype in (torch.float16, torch.bfloat16) and r.dtype == torch.float64 else r
            for r, e in zip(refs, eagers, strict=True)]


def _specs(outs: list[torch.Tensor]) -> list[dict]:
    return [{"shape": list(o.shape), "dtype": str(o.dtype)} for o in outs]


# -- the reference job --------------------------------------------------------------------------------------------
def run_reference(job: dict, send) -> dict:
    device, cfg, seed = job["device"], job["config"], int(job["seed"])
    t_job = time.perf_counter()
    mod = loader.import_file(job["reference"], "reference", "reference")
    loader.check_reference(mod)
    init = problem.init_inputs(mod)
    model = problem.build_model(mod.Model, init, seed, device)
    model64 = _Float64(mod.Model, init, seed, device, model)
    dists = tuple(getattr(mod, "KW_DISTRIBUTIONS", cfg["distributions"]))
    specs = [InputSpec("as_is#0", seed + 1), InputSpec("as_is#1", seed + 2)]
    specs += [InputSpec(d, seed + 1, d, seed + 101 + i) for i, d in enumerate(dists) if d != "as_is"]
    sets, notes, drawn = [], [], {}
    t0 = time.perf_counter()
    for k, spec in enumerate(specs):
        args = problem.build_inputs(mod, spec, device, drawn)
        if k == 0:
            gen_s = time.perf_counter() - t0
            main_args = args
        eager = _run(model, problem.clone_args(args))
        if k == 0:
            again = _run(model, problem.clone_args(args))
            if not all(torch.equal(a.nan_to_num(), b.nan_to_num()) for a, b in zip(eager, again, strict=True)):
                # a reduction whose order changes between runs (split-KV attention, atomics) moves the last bits;
                # randomness in forward (dropout) moves the values: only the latter makes the problem uncheckable
                drift = _run_to_run_drift(eager, again)
                if drift is not None:
                    raise Failure("reference", "the reference Model gives different outputs on the same inputs "
                                               f"({drift}; dropout or randomness in forward?): it cannot be checked "
                                               "against")
                notes.append("the reference's outputs differ in their last bits from run to run on the same inputs "
                             "(a reduction in varying order); checked within the dtype's tolerance")
            out_specs = _specs(eager)
        ref = model64(args)
        if spec.dist != "as_is" and not _all_finite(ref, eager) and _all_finite(sets[0]["ref"], sets[0]["eager"]):
            notes.append(f"input set {spec.name} dropped: the reference's output is not finite there (outside the "
                         "problem's domain)")
            continue
        if spec.dist != "as_is" and not _finite_consistent(ref, eager):
            notes.append(f"input set {spec.name} dropped: eager PyTorch overflows where float64 does not")
            continue
        sets.append({"spec": spec.to_dict(), "fingerprint": problem.fingerprint(args),
                     "ref": _compact(ref, eager), "eager": eager,
                     "cond": _conditioning(model64, args, ref, seed + 301 + k),
                     "magnification": 1.0 if spec.dist == "as_is" else max(1.0, _rms(args) / max(_rms(main_args),
                                                                                                  1e-300)),
                     "input_bytes": [a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor)]})
    min_bytes = problem.tensor_bytes(main_args) + problem.tensor_bytes(sets[0]["eager"])
    send("stage", "reference outputs", {"sets": len(sets)})

    alt, alt_specs = None, None
    constants = loader.size_constants(job["reference"])
    if cfg["alt_size"]:
        for ov in problem.alt_size_attempts(constants):
            try:
                mod_a = loader.import_file(job["reference"], "reference", "reference", overrides=ov)
                init_a = problem.init_inputs(mod_a)
                spec = InputSpec("alt_size", seed + 3, overrides=ov)
                args = problem.build_inputs(mod_a, spec, device, drawn)
                model_a = problem.build_model(mod_a.Model, init_a, seed, device)
                eager = _run(model_a, problem.clone_args(args))
                model64_a = _Float64(mod_a.Model, init_a, seed, device, model_a)
                ref = model64_a(args)
            except Failure:
                raise
            except Exception:  # this size breaks the problem (a constraint between constants): try the next
                continue
            if [list(e.shape) for e in eager] == [s["shape"] for s in out_specs] or not _finite_consistent(ref, eager):
                continue
            alt = {"overrides": ov, "init": repr(init_a)[:200]}
            alt_specs = _specs(eager)
            sets.append({"spec": spec.to_dict(), "fingerprint": problem.fingerprint(args),
                         "ref": _compact(ref, eager), "eager": eager,
                         "cond": _conditioning(model64_a, args, ref, seed + 399), "magnification": 1.0,
                         "input_bytes": [a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor)]})
            del model_a, model64_a
            break
        if alt is None:
            notes.append("no second problem size: " + ("no top-level integer size constant (NAME = <int>, at least "
                                                       "8) in the problem file" if not any(v >= 8 for v in
                                                                                           constants.values())
                                                       else f"rescaling {', '.join(constants)} broke the reference"))

    # timing sets: never seen by the candidate before its timed calls; as many as fit the budget
    set_bytes = max(1, problem.tensor_bytes(main_args))
    n_timing = max(2, min(int(cfg["timing_sets"]), int(cfg["timing_budget_mb"]) * 2**20 // set_bytes))
    timing_mode = "as_is" if gen_s < float(cfg["slow_inputs_s"]) else "perturb"
    if timing_mode == "as_is":
        tspecs = [InputSpec(f"time#{i}", seed + 1000 + i) for i in range(n_timing)]
    else:  # fresh values without drawing again: as_is#0's, each element times a factor in [0.5, 1.5]
        tspecs = [InputSpec(f"time#{i}", seed + 1, "perturb", seed + 2000 + i) for i in range(n_timing)]
    tsets = [problem.build_inputs(mod, s, device, drawn) for s in tspecs]
    # get_inputs() is slow here: the candidate worker gets the drawn values instead of drawing them again
    bases = _shippable(drawn) if timing_mode == "perturb" else []
    gen = torch.Generator(device="cpu")
    gen.manual_seed(int(job["sample_seed"]))
    idx = []  # secret sample positions per output, drawn in the parent's seed
    for s in out_specs:
        n = _numel(s["shape"])
        k = min(int(cfg["samples_per_output"]), n)
        idx.append(torch.randint(0, n, (k,), generator=gen) if k else torch.zeros(0, dtype=torch.int64))
    tsamples = []
    for i, args in enumerate(tsets):
        eager = _run(model, problem.clone_args(args))
        ref = model64(args)
        conds = _conditioning(model64, args, ref, seed + 3001 + i)
        tsamples.append([_sample_reference(r.to(e.device), e, ix.to(e.device), judge.Conditioning(**c))
                         for r, e, ix, c in zip(ref, eager, idx, conds, strict=True)])
    send("stage", "timing eager")
    warm = problem.clone_args(main_args)
    fingerprints = [problem.fingerprint(a) for a in tsets]
    dev_idx = [ix.to(device) for ix in idx]

    def checks():  # the candidate's checks between calls, on eager's outputs too (see _timed_call_checks)
        return _timed_call_checks(out_specs, dev_idx, tsets, fingerprints, _Guard(), device, [])

    eager_time = time_calls(model, tsets, device, warmup_args=warm, warmup=int(cfg["warmup"]), after=checks())
    compile_time, compile_note, compile_s = None, None, None
    if cfg["compile_baseline"]:
        send("stage", "timing torch.compile")
        try:
            compiled = torch.compile(model)
            t0 = time.perf_counter()
            _run(compiled, problem.clone_args(main_args))
            _sync(device)
            compile_s = time.perf_counter() - t0
            compile_time = time_calls(compiled, tsets, device, warmup_args=warm, warmup=int(cfg["warmup"]),
                                      after=checks())
        except Exception as e:  # a reference torch.compile cannot take: no compile baseline, said so
            compile_note = f"torch.compile of the reference failed: {type(e).__name__}: {str(e)[:200]}"
    copy_tbps = cfg.get("copy_tbps")
    if copy_tbps is None:
        from kernelwright.harness import roofline

        c = roofline.get_ceilings() if device == "cuda" else roofline.load_cached()
        copy_tbps = c.copy_tbps if c is not None else None
    counts: dict[int, int] = {}  # tensor sizes one call allocates (inputs and outputs), most of each over the sets
    for s in sets:
        per = {}
        for b in s["input_bytes"] + [o.numel() * o.element_size() for o in s["eager"]]:
            per[b] = per.get(b, 0) + 1
        for b, n in per.items():
            counts[b] = max(counts.get(b, 0), n)
    poison_sizes = sorted(counts.items())
    return {"sets": sets, "notes": notes, "alt": alt, "output_specs": out_specs, "alt_output_specs": alt_specs,
            "size_constants": constants, "timing_specs": [s.to_dict() for s in tspecs], "timing_mode": timing_mode,
            "timing_fingerprints": fingerprints, "sample_idx": idx,
            "timing_samples": tsamples, "eager_time": eager_time, "compile_time": compile_time,
            "compile_note": compile_note, "compile_s": compile_s, "copy_tbps": copy_tbps, "min_bytes": min_bytes,
            "poison_sizes": poison_sizes, "init": repr(init)[:200], "bases": bases,
            "seconds": time.perf_counter() - t_job}


def _shippable(drawn: dict) -> list[dict]:
    """``get_inputs()`` results by seed and overrides, when they are tensors and plain values only."""
    out = []
    for (seed, overrides), args in drawn.items():
        if all(isinstance(a, (torch.Tensor, bool, int, float, str)) or a is None for a in args):
            out.append({"seed": seed, "overrides": dict(overrides), "args": list(args)})
    return out


def _numel(shape: list[int]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _sample_reference(ref: torch.Tensor, eager: torch.Tensor, idx: torch.Tensor, cond: judge.Conditioning) -> dict:
    """What :func:`kernelwright.eval.judge.judge_samples` needs to check a timed output of this input set."""
    if not eager.is_floating_point():
        vals = eager.reshape(-1)[idx].double()
        n = int(eager.numel())
        ones = torch.ones_like(vals, dtype=torch.bool).cpu()
        return {"values": vals.cpu(), "allowed": torch.zeros_like(vals).cpu(), "finite": ones, "care": ones,
                "nonfinite": [0], "sum": float(eager.double().sum()), "sum_allowed": 0.0,
                "sum_abs": float(eager.double().abs().sum()), "numel": n}
    r = ref.double()
    x = r.to(eager.dtype).double()
    bound = judge.allowed(r, eager, judge.tolerance_for(eager.dtype), cond)
    fin_x, fin_e = torch.isfinite(x), torch.isfinite(eager)
    fin = fin_x & torch.isfinite(r)
    agree = torch.equal(fin_x, fin_e)  # else a candidate may follow either pattern: finiteness is not sampled
    at = lambda t: t.reshape(-1)[idx].cpu()
    return {"values": at(r), "allowed": at(torch.where(fin, bound, torch.full_like(bound, float("inf")))),
            "finite": at(fin_x), "care": at(fin_x == fin_e),
            "nonfinite": [int((~fin_x).sum())] + ([] if agree else [int((~fin_e).sum())]),
            "sum": float(torch.where(fin, r, 0).sum()) if agree else None,
            "sum_allowed": float(torch.where(fin, bound, 0).sum()),
            "sum_abs": float(torch.where(fin, r.abs(), 0).sum()), "numel": int(eager.numel())}


# -- the candidate job --------------------------------------------------------------------------------------------
class _Guard:
    def __init__(self) -> None:
        self.integrity = guards.Integrity()
        self.threads = guards.thread_idents()
        self.precision = guards.precision_state()
        self.native = guards.native_threads()

    def check(self, where: str) -> None:
        changed = self.integrity.changed()
        if changed:
            raise Failure("timer_tampering", f"the candidate replaced {', '.join(changed[:5])}"
                                             f"{' and more' if len(changed) > 5 else ''} ({where}): the timer and the "
                                             "checks must run unmodified")
        threads = guards.new_threads(self.threads)
        if threads:
            raise Failure("background_threads", f"{len(threads)} thread(s) still running {where} "
                                                f"({', '.join(threads[:3])}): work may go on after the call returns")
        now = guards.precision_state()
        if now != self.precision:
            diff = ", ".join(f"{k} {self.precision[k]} -> {now[k]}" for k in now if now[k] != self.precision[k])
            raise Failure("precision", f"the candidate changed precision settings ({diff}) {where}")


def _call(model, args: list, stage: str, prefix: str = ""):
    """``model(*args)``; an exception becomes a :class:`Failure` of ``stage``'s category (``compile`` on the first
    call, ``shape_specialisation`` at the second size, else ``runtime``) unless it is a memory or CUDA fault."""
    try:
        return model(*args)
    except Failure:
        raise
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        cat = classify(e)
        raise Failure(cat if cat != "runtime" else stage, f"{prefix}{type(e).__name__}: {str(e)[:600]}",
                      {"traceback": _tail(e)}) from None


def _same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.is_floating_point() or a.is_complex():
        na, nb = torch.isnan(a), torch.isnan(b)
        return torch.equal(na, nb) and torch.equal(torch.where(na, 0, a), torch.where(nb, 0, b))
    return torch.equal(a, b)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))


def _changed_inputs(after: list, before: list) -> list[int]:
    return [i for i, (a, b) in enumerate(zip(after, before, strict=True))
            if isinstance(a, torch.Tensor) and not _same_tensor(a, b)]


def _timed_call_checks(out_specs: list[dict], idx: list, tsets: list, fingerprints: list, guard: _Guard,
                       device: str, samples: list):
    """The checks after each timed call (outside the timed span): plain outputs of the right specs, the values at
    the secret sample positions (appended to ``samples``), inputs unchanged, the guard. The reference worker runs
    the very same checks between its eager calls: their traffic (device-to-host copies, small kernels, Python)
    leaves the host's caches in the same state before the next call on both sides, so a call is not timed
    colder on one side than on the other."""

    def after(i: int, out) -> None:
        try:
            outs = guards.flatten_outputs(out)
            guards.check_plain(outs, out_specs, device)
        except guards.OutputProblem as p:
            raise Failure(p.category, f"{p.message} (timed call {i})") from None
        call = []
        for o, ix in zip(outs, idx, strict=True):
            fin = torch.isfinite(o)
            call.append({"values": o.reshape(-1)[ix].double().cpu(), "nonfinite": int((~fin).sum()),
                         "sum": float(torch.where(fin, o, torch.zeros((), dtype=o.dtype, device=o.device)).sum(
                             dtype=torch.float64))})
        samples.append(call)
        if not problem.same_fingerprint(problem.fingerprint(tsets[i]), fingerprints[i]):
            raise Failure("input_mutation", f"the candidate changed its inputs in place (timed call {i})")
        guard.check(f"after timed call {i}")

    return after


def run_candidate(job: dict, send) -> dict:
    device, cfg, seed = job["device"], job["config"], int(job["seed"])
    ref_mod = loader.import_file(job["reference"], "reference", "reference")
    loader.check_reference(ref_mod)
    init = problem.init_inputs(ref_mod)
    specs = [problem.spec_from_dict(d) for d in job["sets"]]
    alt_ov = job.get("alt_overrides") or {}
    alt_mod = loader.import_file(job["reference"], "reference", "reference", overrides=alt_ov) if alt_ov else None
    drawn: dict = {(int(b["seed"]), tuple(sorted(b["overrides"].items()))):
                   [a.to(device) if isinstance(a, torch.Tensor) else a for a in b["args"]] for b in job["bases"]}
    sets = [problem.build_inputs(alt_mod if s.overrides else ref_mod, s, device, drawn) for s in specs]
    tspecs = [problem.spec_from_dict(d) for d in job["timing_specs"]]
    tsets = [problem.build_inputs(ref_mod, s, device, drawn) for s in tspecs]
    del drawn
    for name, got, want in [(s.name, problem.fingerprint(a), fp) for s, a, fp in zip(specs, sets, job["fingerprints"],
                                                                                  strict=True)] + \
            [(s.name, problem.fingerprint(a), fp) for s, a, fp in zip(tspecs, tsets, job["timing_fingerprints"],
                                                                      strict=True)]:
        if not problem.same_fingerprint(got, want):
            raise Failure("reference", f"input set {name} differs between the reference and candidate workers: the "
                                       "problem's get_inputs() is not reproducible under a seed")
    ref_model = problem.build_model(ref_mod.Model, init, seed, device)
    state = ref_model.state_dict()
    ref_alt = None
    if alt_mod is not None:
        init_alt = problem.init_inputs(alt_mod)
        ref_alt = problem.build_model(alt_mod.Model, init_alt, seed, device)
    idx = [ix.to(device) for ix in job["sample_idx"]]
    poison_sizes = [(int(b), int(n)) for b, n in job["poison_sizes"]]
    if device == "cuda":
        import kernelwright.harness.gate  # noqa: F401  (loaded before the candidate, to be held by the guard)
    guard = _Guard()
    send("stage", "ready", {"integrity_objects": len(guard.integrity)})

    t_start = time.perf_counter()
    cand = loader.import_file(job["candidate"], "candidate", "load")
    guard.check("after import")
    cls = loader.check_candidate(cand, ref_mod, init)
    model, loaded_state = _construct(cls, init, seed, device, state, cfg)
    guard.check("after the constructor")
    send("stage", "loaded", {"state_loaded": loaded_state})

    models = {False: model, True: None}
    compile_s = first_call_s = alt_first_call_s = None
    report, keep, alt_failure = [], [], None
    for k, (spec, args) in enumerate(zip(specs, sets, strict=True)):
        is_alt = bool(spec.overrides)
        try:
            if is_alt and models[True] is None:
                models[True], _ = _construct(cls, init_alt, seed, device, ref_alt.state_dict(), cfg)
                guard.check("after the constructor (second size)")
            m = models[is_alt]
            out_specs = job["alt_output_specs"] if is_alt else job["output_specs"]
            order = "reference_first" if k % 2 else "candidate_first"
            if order == "reference_first":  # the eager answer now sits in freed memory: poison must hide it
                r = (ref_alt if is_alt else ref_model)(*problem.clone_args(args))
                _sync(device)
                del r
            runs = []
            for pattern in (guards.POISON_NAN, guards.POISON_HUGE):
                keep = keep[-1:]  # free what is to be freed before poisoning; the previous call's inputs stay alive,
                guards.poison_free_memory(device, poison_sizes, pattern)
                a = problem.clone_args(args)  # so these land at new addresses
                keep.append(a)
                first = compile_s is None
                # the first call at the second size compiles again too (torch.compile re-traces, an autotuner
                # re-tunes): the candidate's own compile time, added to compile_s, not evaluation overhead
                alt_first = is_alt and alt_first_call_s is None and not first
                t0 = time.perf_counter()
                out = _call(m, a, "compile" if first else ("shape_specialisation" if is_alt else "runtime"),
                            f"at another problem size {spec.overrides}: " if is_alt else "")
                if first:
                    _sync(device)
                    first_call_s = time.perf_counter() - t0
                    compile_s = time.perf_counter() - t_start
                    send("stage", "compiled", {"compile_s": compile_s})
                elif alt_first:
                    _sync(device)
                    alt_first_call_s = time.perf_counter() - t0
                    compile_s += alt_first_call_s
                try:
                    outs = guards.flatten_outputs(out)
                    guards.check_plain(outs, out_specs, device)
                except guards.OutputProblem as p:
                    if is_alt and p.category == "output_spec":  # right at the problem's size, not at this one
                        raise Failure("shape_specialisation", f"at another problem size {spec.overrides}: "
                                                              f"{p.message}") from None
                    raise Failure(p.category, f"{p.message} (input set {spec.name})") from None
                snap = [o.detach().clone() for o in outs]  # on the caller's stream, as a consumer would read them
                if device == "cuda":
                    torch.cuda.synchronize()  # every stream: did anything still change the outputs?
                    if not all(_same_bits(x, o) for x, o in zip(snap, outs, strict=True)):
                        raise Failure("side_stream", f"the outputs changed after the call returned (input set "
                                                     f"{spec.name}): work on a side stream the caller's stream does "
                                                     "not wait for")
                bad = _changed_inputs(a, args)
                if bad:
                    raise Failure("input_mutation", f"the candidate changed its input(s) {bad} in place "
                                                    f"(input set {spec.name})")
                guard.check(f"after a call on input set {spec.name}")
                runs.append(snap)  # sent at the end, straight from the device into shared memory
                del out, outs
            report.append({"name": spec.name, "order": order, "runs": runs})
        except Failure as f:  # wrong only at the second size: judge the problem's size first
            if not (is_alt and f.category in ("shape_specialisation", "api")):
                raise
            alt_failure = ["shape_specialisation", f.message if f.category != "api" else
                           f"at another problem size {spec.overrides}: {f.message}"]

    send("stage", "timing")
    samples: list = []
    after = _timed_call_checks(job["output_specs"], idx, tsets, job["timing_fingerprints"], guard, device, samples)

    try:  # the module itself is timed, called exactly as eager is: no wrapper on either side
        timing = time_calls(model, tsets, device, warmup_args=problem.clone_args(sets[0]), warmup=int(cfg["warmup"]),
                            after=after)
    except Failure:
        raise
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        raise Failure(classify(e), f"{type(e).__name__}: {str(e)[:600]} (while timing)",
                      {"traceback": _tail(e)}) from None
    guard.check("after timing")
    return {"compile_s": compile_s, "first_call_s": first_call_s, "alt_first_call_s": alt_first_call_s,
            "correctness": report, "timing": timing, "alt_failure": alt_failure,
            "samples": samples, "state_loaded": loaded_state,
            "native_threads": {"before": guard.native, "after": guards.native_threads()},
            "integrity_objects": len(guard.integrity)}


def _construct(cls, init: list, seed: int, device: str, state: dict, cfg: dict):
    try:
        model = problem.build_model(cls, init, seed, device)
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        cat = classify(e)
        raise Failure("api" if cat == "runtime" else cat, f"ModelNew(*get_init_inputs()) raised "
                                                          f"{type(e).__name__}: {str(e)[:400]}",
                      {"traceback": _tail(e)}) from None
    loaded = problem.load_matching_state(model, state) if cfg.get("load_state_dict", True) else []
    return model, loaded


# -- parent side --------------------------------------------------------------------------------------------------
def context(start_method: str | None = None):
    """The multiprocessing context workers start from: ``forkserver`` with torch preloaded on Linux (the server
    imports torch once and never touches CUDA; each worker is a fork of it), else ``spawn``."""
    method = start_method or ("forkserver" if sys.platform.startswith("linux") else "spawn")
    ctx = mp.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(["torch"])
    return ctx


@dataclass
class Outcome:
    """What came back from one job."""

    result: dict | None = None
    error: list | None = None
    """``[category, message, info]`` from the worker"""
    exit: str | None = None
    """``timeout``, ``crash`` or ``memory`` when the parent had to end or bury the worker"""
    exit_detail: str = ""
    stages: list = field(default_factory=list)
    """``[name, info, seconds since the job was sent]`` in order"""
    elapsed_s: float = 0.0

    @property
    def last_stage(self) -> str:
        return self.stages[-1][0] if self.stages else "start"

    def stage_info(self, name: str) -> dict | None:
        for s in self.stages:
            if s[0] == name:
                return s[1] or {}
        return None


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@contextlib.contextmanager
def _caller_main_hidden():
    """Start workers without re-importing the caller's ``__main__`` in them (spawn and forkserver do so, and a
    script that calls :func:`~kernelwright.eval.evaluate` without an ``if __name__ == "__main__"`` guard would
    then evaluate again inside its worker). The worker's entry point lives in this package; it needs nothing of
    the caller's script."""
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main


class Worker:
    """A started worker process that takes one job. Start it ahead of time to hide its start-up; never give it a
    second candidate (the first may have changed anything in it)."""

    def __init__(self, start_method: str | None = None):
        ctx = context(start_method)
        self.conn, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=worker_main, args=(child,), daemon=True, name="kw-eval-worker")
        with _caller_main_hidden():
            self.proc.start()
        child.close()
        self.used = False
        self.spill: str | None = None

    def run(self, job: dict, timeout_s: float, memory_mb: int | None = None, on_stage=None) -> Outcome:
        if self.used:
            raise RuntimeError("a worker takes one job; start another")
        self.used = True
        out = Outcome()
        t0 = time.perf_counter()
        self.spill = wire.spill_dir()
        job = {**job, "spill": self.spill}
        try:
            self.conn.send_bytes(wire.dumps({"spill": self.spill}))
            self.conn.send_bytes(wire.dumps(job, self.spill))
        except (BrokenPipeError, OSError):
            return self._buried(out, t0)
        base_rss = None
        try:
            while True:
                elapsed = time.perf_counter() - t0
                if elapsed > timeout_s:
                    self.kill()
                    out.exit, out.exit_detail = "timeout", f"no verdict after {timeout_s:g} s"
                    break
                if self.conn.poll(0.05):
                    try:
                        msg = wire.loads(self.conn.recv_bytes(), self.spill)
                    except (EOFError, OSError):
                        return self._buried(out, t0)
                    except Exception as e:  # not data-only: treat as a crash of the worker
                        self.kill()
                        out.exit, out.exit_detail = "crash", f"the worker sent something unreadable ({e})"
                        break
                    kind = msg[0]
                    if kind == "stage":
                        out.stages.append([msg[1], msg[2] if len(msg) > 2 else None, time.perf_counter() - t0])
                        if on_stage:
                            on_stage(msg[1])
                    elif kind == "result":
                        out.result = msg[1]
                        break
                    elif kind == "error":
                        out.error = [msg[1], msg[2], msg[3] if len(msg) > 3 else {}]
                        break
                    continue
                if not self.proc.is_alive():
                    return self._buried(out, t0)
                if memory_mb:
                    rss = _rss(self.proc.pid)
                    base_rss = rss if base_rss is None else base_rss
                    if rss - base_rss > memory_mb * 2**20 * 1.05 + 64 * 2**20:
                        self.kill()
                        out.exit = "memory"
                        out.exit_detail = (f"resident memory grew by {(rss - base_rss) / 2**20:.0f} MiB, over the "
                                           f"{memory_mb} MiB cap")
                        break
        finally:
            out.elapsed_s = time.perf_counter() - t0
            self.close()
        return out

    def _buried(self, out: Outcome, t0: float) -> Outcome:
        self.proc.join(5)
        code = self.proc.exitcode
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            out.exit_detail = f"the worker was killed by {name}" + (
                " (a segmentation fault: an invalid memory access)" if name == "SIGSEGV" else "") + (
                " (out of memory, or killed from outside)" if name == "SIGKILL" else "")
        else:
            out.exit_detail = f"the worker exited with code {code} before sending a verdict (os._exit or sys.exit " \
                              "in the candidate?)"
        out.exit = "crash"
        out.elapsed_s = time.perf_counter() - t0
        self.close()
        return out

    def kill(self) -> None:
        if self.proc.is_alive():
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError, OSError):
                self.proc.kill()
        self.proc.join(5)

    def close(self) -> None:
        self.proc.join(2)
        if self.proc.is_alive():
            self.kill()
        try:
            self.conn.close()
        except OSError:
            pass
        if self.spill:
            shutil.rmtree(self.spill, ignore_errors=True)
            self.spill = None
