"""Benchmark a family: every rung and peer on the same inputs, in one process, checked before timed.

For each (dtype, size): build one input case, compute the float64 reference once, then for the baseline
(torch eager) first, the rungs in ladder order, and the peers: run once into a poisoned buffer and compare with
the reference (a wrong rung is reported, never timed; a peer less exact than the tolerance, such as eager code
rounding its intermediates, is timed and flagged "inexact"), time it, place it on the roofline, and hand the
row to ``on_row`` (the store commits it at once, so Ctrl-C loses only the row in flight).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from kernelwright import runtime
from kernelwright.errors import Unavailable
from kernelwright.harness.inputs import dtype_name, generator
from kernelwright.harness.roofline import Ceilings
from kernelwright.harness.timing import TimerConfig, rotation_sets, time_fn
from kernelwright.harness.verify import compare_outputs, error_scale, new_outputs, reference64
from kernelwright.registry import Case, Family


@dataclass
class Contender:
    name: str
    role: str  # "rung" or "peer"
    backend: str
    fn: Callable | None
    takes_out: bool
    unavailable: str | None = None


def contenders(family: Family, variants: list[str] | None, with_peers: bool) -> list[Contender]:
    """Baseline first, then rungs in ladder order, then peers. Unavailable ones carry their reason."""
    out: list[Contender] = []
    for r in family.rungs:
        if variants and r.name not in variants and r.name != family.baseline:
            continue
        reason = r.unavailable_reason()
        out.append(Contender(r.name, "rung", r.backend, None if reason else r.load(), True, reason))
    if with_peers or family.baseline in (variants or []):
        for p in family.peers:
            if variants and p.name not in variants and p.name != family.baseline:
                continue
            try:
                fn, reason = p.make(), None
            except Unavailable as e:
                fn, reason = None, str(e)
            out.append(Contender(p.name, "peer", "peer", fn, False, reason))
    out.sort(key=lambda c: c.name != family.baseline)
    return out


def bench_family(
    family: Family,
    sizes: list[tuple[int, ...]],
    dtypes: list[torch.dtype],
    ceilings: Ceilings,
    *,
    variants: list[str] | None = None,
    peers: bool = True,
    timer: TimerConfig | None = None,
    on_row: Callable[[dict], None] | None = None,
    on_step: Callable[[str], None] | None = None,
) -> list[dict]:
    device = runtime.current_device()
    timer = timer or TimerConfig()
    people = contenders(family, variants, peers)
    rows: list[dict] = []
    for dtype in dtypes:
        for size in sizes:
            gen, seed = generator(device)
            case = family.make_case(size, dtype, device, gen)
            ref = reference64(family, case)
            scale = error_scale(family, case)
            flops, nbytes = family.cost(size, dtype)
            bound_s, bound = ceilings.bound_seconds(flops, nbytes, family.flop_unit, dtype_name(dtype))
            base_ms = below_ms = None
            for c in people:
                rung = family.rung(c.name) if c.role == "rung" else None
                if rung and rung.dtypes is not None and dtype not in rung.dtypes:
                    continue  # not a limit of this case: the rung is not for this dtype at all (no row)
                if on_step:
                    on_step(f"{family.name} {c.name} {family.format_size(size)} {dtype_name(dtype)}")
                row = _row(family, c, case, dtype, flops, nbytes, bound, seed)
                reason = c.unavailable or (rung.refusal(size, case.kwargs, dtype) if rung else None)
                if reason:
                    row["note"] = reason
                else:
                    _measure(row, c, family, case, dtype, ref, scale, timer)
                if row.get("median_ms"):
                    row["tflops"] = flops / (row["median_ms"] * 1e-3) / 1e12
                    row["tbps"] = nbytes / (row["median_ms"] * 1e-3) / 1e12
                    row["pct_roofline"] = 100.0 * bound_s / (row["median_ms"] * 1e-3)
                    if c.name == family.baseline:
                        base_ms = row["median_ms"]
                    row["speedup_vs_baseline"] = base_ms / row["median_ms"] if base_ms else None
                    if c.role == "rung":
                        row["speedup_vs_below"] = below_ms / row["median_ms"] if below_ms else None
                        below_ms = row["median_ms"]
                rows.append(row)
                if on_row:
                    on_row(row)
            del case, ref, scale
            if device == "cuda":
                torch.cuda.empty_cache()
    return rows


def _row(family: Family, c: Contender, case: Case, dtype, flops, nbytes, bound, seed) -> dict:
    return {
        "family": family.name, "variant": c.name, "role": c.role, "backend": c.backend,
        "size": family.format_size(case.size), "dtype": dtype_name(dtype), "numel": math.prod(case.size),
        "flops": flops, "bytes": nbytes, "bound": bound, "telemetry": {"seed": seed},
    }


def _measure(row: dict, c: Contender, family: Family, case: Case, dtype, ref, scale, timer: TimerConfig) -> None:
    device = runtime.current_device()
    try:
        call = _caller(c, family, case, dtype, device)
        cmp = compare_outputs(family, call(), ref, scale, dtype)
    except Exception as e:  # report, don't crash the sweep
        row["note"] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        # a rung of ours that raises is a bug (exit code 1); a peer that rejects a shape is its limit
        row["correct"] = False if c.role == "rung" else None
        return
    row.update(correct=cmp.ok, max_abs=cmp.max_abs, rel_norm=cmp.rel_norm)
    if not cmp.ok:
        if c.role == "rung":  # a wrong kernel of ours is a bug: never timed
            row["note"] = f"incorrect, not timed: {cmp.reason}"
            return
        # a peer (torch eager rounding intermediates to bf16, say) less exact than the family's tolerance is
        # still the speed users compare against: timed, and flagged
        row["note"] = f"inexact (beyond the tolerance; timed anyway): {cmp.reason}"
    rotate = (lambda: _rotation(c, family, case, dtype, device, row["bytes"])) if device == "cuda" else None
    t = time_fn(call, timer, device, rotate=rotate)
    row.update(
        median_ms=t.median_ms, iqr_ms=t.iqr_ms, min_ms=t.min_ms, n_samples=len(t.samples_ms),
        samples=[round(s, 6) for s in t.samples_ms], mode=t.mode, settled=t.settled,
        throttled=t.throttled, telemetry={**row["telemetry"], **t.telemetry, "warmup_calls": t.warmup_calls,
                                          "hold": t.hold, "host_us": round(t.host_us, 1)},
    )


def _caller(c: Contender, family: Family, case: Case, dtype, device) -> Callable[[], torch.Tensor]:
    """A no-argument call of ``c`` on ``case`` returning its output (rungs write a poisoned buffer)."""
    if c.takes_out:
        out = new_outputs(family, case, dtype, device)
        return lambda: c.fn(*case.args, out=out, **case.kwargs)
    return lambda: c.fn(*case.args, **case.kwargs)


def _rotation(c: Contender, family: Family, case: Case, dtype, device, nbytes: float) -> list | None:
    """For small problems, calls on fresh input sets whose bytes together are 3x the L2, so graph-mode timing
    (no flush between calls) still reads from device memory."""
    n_sets = rotation_sets(nbytes)
    if n_sets == 1:
        return None
    calls = []
    for _ in range(n_sets):
        gen, _seed = generator(device)
        other = family.make_case(case.size, dtype, device, gen, **case.kwargs)
        calls.append(_caller(c, family, other, dtype, device))
    return calls
