"""Timing: device events with a flushed L2 on CUDA, a host clock on CPU, one result type for both.

The CUDA method follows nvbench's "cold" measurement and Triton's ``do_bench``:

1. warm up until the per-call time settles (two consecutive windows' medians within 5%), so compilation,
   autotuning and clock ramp-up stay out of the samples;
2. before every sample, overwrite a buffer of at least twice the L2 size (allocated once, outside the timed
   span), so each sample reads its inputs from device memory, as a real model's next layer would;
3. one CUDA event pair around each launch, queued behind nvbench's blocking kernel (:mod:`kernelwright.harness.
   gate`: a kernel the host releases once the start event, the call and the end event are all queued), so the
   host's launch code is not in the sample however long it takes; a callable that waits on the GPU itself
   cannot be gated and is queued behind a fixed ~100 us spin instead (then a host slower than the spin shows in
   its samples). Draw samples in batches until the relative IQR (IQR / median) falls under ``rel_spread`` or
   ``max_seconds`` pass;
4. keep median, IQR, min and every raw sample.

``graph`` mode captures ``reps`` back-to-back calls into a CUDA graph and times each replay, for kernels too
short (a few microseconds) for one event pair each: there the launch gap would be part of the number. No flush
fits between the calls of one replay, so the caller passes ``rotate``: the same call on several input sets
whose bytes together exceed the L2 (the benchmark makes them), cycled through in the graph, so each call reads
inputs the previous ones evicted. Without ``rotate`` graph samples are warm-L2, and the mode says so.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch

from kernelwright.harness import telemetry


@dataclass
class Timing:
    """One measured callable. Times are milliseconds per call."""

    median_ms: float
    iqr_ms: float
    min_ms: float
    samples_ms: list[float]
    mode: str
    """``cuda-events`` (L2 flushed per sample), ``cuda-graph`` (rotated input sets), ``cuda-graph-warm-l2``
    or ``cpu-interpreter`` (host clock)"""
    warmup_calls: int = 0
    settled: bool = True
    """False when the spread never fell under the threshold before the time cap"""
    telemetry: dict = field(default_factory=dict)
    hold: str = ""
    """What kept the host's launch time out of CUDA samples: ``gate`` (the host-released blocking kernel) or
    ``spin`` (a fixed spin: the callable waits on the GPU itself, or no gate could be built)"""
    host_us: float = 0.0
    """Median host time to queue one call (its launch cost), from the warm-up"""

    @property
    def rel_iqr(self) -> float:
        return self.iqr_ms / self.median_ms if self.median_ms > 0 else 0.0

    @property
    def throttled(self) -> bool:
        return bool(self.telemetry.get("throttled"))

    def to_dict(self) -> dict:
        d = asdict(self)
        d["rel_iqr"] = self.rel_iqr
        return d


def summarize(samples: list[float]) -> tuple[float, float, float]:
    """(median, IQR, min) of ``samples``."""
    s = sorted(samples)
    if len(s) < 4:
        return statistics.median(s), (s[-1] - s[0]) if len(s) > 1 else 0.0, s[0]
    q = statistics.quantiles(s, n=4, method="inclusive")
    return q[1], q[2] - q[0], s[0]


_flush_buffer: torch.Tensor | None = None


def _l2_flush_buffer() -> torch.Tensor:
    global _flush_buffer
    if _flush_buffer is None:
        from kernelwright.runtime import device_facts

        l2 = device_facts().get("l2_bytes") or 64 * 2**20
        # 2x the L2, at least 256 MiB: the writes evict every line an input could sit in.
        _flush_buffer = torch.empty(max(2 * l2, 256 * 2**20) // 4, dtype=torch.int32, device="cuda")
    return _flush_buffer


@dataclass
class TimerConfig:
    rel_spread: float = 0.02
    min_samples: int = 20
    max_samples: int = 2000
    max_seconds: float = 2.0
    warmup_max_seconds: float = 1.0
    flush_l2: bool = True
    graph: str = "auto"
    """``on``, ``off`` or ``auto``: graph mode when one event-timed call takes under ``graph_below_us``"""
    graph_below_us: float = 15.0
    graph_reps: int = 20
    gate: bool = True
    """queue each CUDA sample behind the host gate (:mod:`kernelwright.harness.gate`) where it can be used; False:
    behind the fixed spin, as before session 9"""


def rotation_sets(nbytes: float, cap: int = 256) -> int:
    """How many input sets of ``nbytes`` each a graph-mode timing must cycle through so that together they are 3x
    the device's L2 (each call then reads its operands from device memory, as after a flush); 1 when one set is
    already that large or the L2 size is unknown."""
    from kernelwright import runtime

    l2 = runtime.device_facts().get("l2_bytes") or 0
    if not l2 or nbytes >= 3 * l2:
        return 1
    return int(min(cap, -(-3 * l2 // int(max(nbytes, 1)))))


def time_fn(fn: Callable[[], object], config: TimerConfig | None = None, device: str | None = None,
            rotate: Callable[[], list[Callable[[], object]] | None] | None = None) -> Timing:
    """Time ``fn()`` (which launches work and returns) on ``device`` (``cuda`` or ``cpu``).

    ``rotate``: makes equivalent calls on other input sets, cycled through in graph mode (see the module
    docstring); called only when graph mode is used.
    """
    from kernelwright.runtime import current_device

    config = config or TimerConfig()
    device = device or current_device()
    if device == "cpu":
        return _time_cpu(fn, config)
    before = telemetry.read()
    hold = _Hold(fn, config.gate)
    warm = _warmup_cuda(fn, config, hold)
    t = None
    if config.graph == "on" or (config.graph == "auto" and warm.median_ms * 1e3 < config.graph_below_us):
        t = _time_cuda_graph((rotate() if rotate else None) or [fn], config)
    if t is None:
        t = _time_cuda_events(fn, config, hold)
    t.warmup_calls = warm.warmup_calls
    t.host_us = warm.host_us
    t.telemetry = telemetry.around(before, telemetry.read())
    return t


# The fallback hold: a spin of ~100 us at boost clock queued before the start event keeps the GPU busy while the
# host runs the launch code (a Python launcher can take 20-60 us). Without any hold a 6 us kernel launched from
# Python times as ~25 us; with this one, a call whose host code takes longer than the spin (several launches, as
# the norms' backward makes: H200 run 34) still gets host time in its samples, hence the gate.
_HOLD_CYCLES = 200_000


class _Hold:
    """What each sample of one callable is queued behind: the host gate when it can be used, else the spin."""

    def __init__(self, fn, use_gate: bool):
        from kernelwright.harness.gate import gate_for

        fn()  # first call: compile, autotune, allocate (before the gate's trial calls)
        torch.cuda.synchronize()
        self.calls = 1  # the first call and the gate's trial calls

        def trial():
            self.calls += 1
            return fn()

        self.gate = gate_for(trial) if use_gate else None
        self.kind = "gate" if self.gate is not None else "spin"

    def close(self) -> None:
        if self.gate is not None:
            self.gate.close()
        else:
            torch.cuda._sleep(_HOLD_CYCLES)

    def open(self) -> None:
        if self.gate is not None:
            self.gate.open()


def _event_sample(fn, flush: bool, hold: _Hold) -> tuple[torch.cuda.Event, torch.cuda.Event, float]:
    if flush:
        _l2_flush_buffer().zero_()
    hold.close()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    t0 = time.perf_counter()
    try:
        fn()
    finally:
        host = time.perf_counter() - t0
        end.record()
        hold.open()
    return start, end, host


def _batch(fn, n: int, flush: bool, hold: _Hold, host: list[float] | None = None) -> list[float]:
    """``n`` samples queued back to back, then one synchronize; ``host`` collects each call's host seconds."""
    samples = [_event_sample(fn, flush, hold) for _ in range(n)]
    torch.cuda.synchronize()
    if host is not None:
        host += [h for _, _, h in samples]
    return [s.elapsed_time(e) for s, e, _ in samples]


def _warmup_cuda(fn, config: TimerConfig, hold: _Hold) -> Timing:
    t0, calls, last, host = time.perf_counter(), hold.calls, None, []
    while True:
        window = _batch(fn, 5, config.flush_l2, hold, host)
        calls += 5
        med = statistics.median(window)
        if last is not None and abs(med - last) <= 0.05 * max(last, 1e-6):
            break
        if time.perf_counter() - t0 > config.warmup_max_seconds:
            break
        last = med
    return Timing(med, 0.0, min(window), window, "warmup", warmup_calls=calls, hold=hold.kind,
                  host_us=statistics.median(host) * 1e6)


def _time_cuda_events(fn, config: TimerConfig, hold: _Hold) -> Timing:
    samples: list[float] = []
    t0 = time.perf_counter()
    batch = 10
    settled = False
    while len(samples) < config.max_samples:
        samples += _batch(fn, batch, config.flush_l2, hold)
        if len(samples) >= config.min_samples:
            med, iqr, _ = summarize(samples)
            if iqr / med <= config.rel_spread:
                settled = True
                break
        if time.perf_counter() - t0 > config.max_seconds:
            break
        batch = min(batch * 2, 200)
    med, iqr, mn = summarize(samples)
    return Timing(med, iqr, mn, samples, "cuda-events", settled=settled, hold=hold.kind)


def _time_cuda_graph(fns: list, config: TimerConfig) -> Timing | None:
    reps = len(fns) * -(-config.graph_reps // len(fns))  # whole cycles through the input sets
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    try:
        with torch.cuda.stream(stream):
            for f in fns:
                f()  # warm the side stream (allocator, lazy init) before capture
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=stream):
                for i in range(reps):
                    fns[i % len(fns)]()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
    except Exception:  # not capturable (host sync inside fn, ...): fall back to per-launch events
        torch.cuda.synchronize()
        return None
    one = lambda: g.replay()
    timing = _time_cuda_events(one, TimerConfig(**{**asdict(config), "flush_l2": False}), _Hold(one, config.gate))
    scale = 1.0 / reps
    samples = [s * scale for s in timing.samples_ms]
    med, iqr, mn = summarize(samples)
    mode = "cuda-graph" if len(fns) > 1 else "cuda-graph-warm-l2"
    return Timing(med, iqr, mn, samples, mode, settled=timing.settled, hold=timing.hold)


def _time_cpu(fn, config: TimerConfig) -> Timing:
    t0 = time.perf_counter()
    fn()  # warm-up: the interpreter parses the kernel on first call
    first = time.perf_counter() - t0
    samples: list[float] = []
    budget = max(config.max_seconds, first * 3)
    t0 = time.perf_counter()
    settled = False
    while len(samples) < config.max_samples:
        s = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - s) * 1e3)
        if len(samples) >= 3:
            med, iqr, _ = summarize(samples)
            if iqr / med <= config.rel_spread * 5:  # host timing on a shared CPU is noisier: 5x the threshold
                settled = True
                if len(samples) >= min(config.min_samples, 5):
                    break
        if time.perf_counter() - t0 > budget:
            break
    med, iqr, mn = summarize(samples)
    return Timing(med, iqr, mn, samples, "cpu-interpreter", warmup_calls=1, settled=settled)
