"""Compare two runs row by row with a noise-aware verdict.

For a matched row (same family, variant, size, dtype) with medians ``a`` (run A) and ``b`` (run B), the noise
level is the larger of the two rows' relative IQRs and a floor (1%: run-to-run drift on one GPU):

* ``same``      when ``|b/a - 1| <= noise``;
* ``faster`` / ``slower`` when the change exceeds ``2 * noise`` and the interquartile ranges do not overlap;
* ``ambiguous`` otherwise (a change larger than the noise but not clearly separated from it).

Rows from a CPU run and a GPU run are never compared.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from kernelwright.errors import UsageError
from kernelwright.store.db import Store

NOISE_FLOOR = 0.01


@dataclass
class Delta:
    family: str
    variant: str
    size: str
    dtype: str
    a_ms: float
    b_ms: float
    ratio: float
    """b / a: under 1 means run B is faster"""
    noise: float
    verdict: str

    def to_dict(self) -> dict:
        return asdict(self)


def verdict(a_med: float, a_iqr: float, b_med: float, b_iqr: float, floor: float = NOISE_FLOOR) -> tuple[str, float]:
    noise = max(a_iqr / a_med if a_med else 0.0, b_iqr / b_med if b_med else 0.0, floor)
    change = b_med / a_med - 1.0
    if abs(change) <= noise:
        return "same", noise
    a_lo, a_hi = a_med - a_iqr / 2, a_med + a_iqr / 2
    b_lo, b_hi = b_med - b_iqr / 2, b_med + b_iqr / 2
    separated = b_hi < a_lo or b_lo > a_hi
    if abs(change) > 2 * noise and separated:
        return ("faster" if change < 0 else "slower"), noise
    return "ambiguous", noise


def compare_runs(store: Store, run_a: int, run_b: int) -> list[Delta]:
    ra, rb = store.run(run_a), store.run(run_b)
    if ra["device_kind"] != rb["device_kind"]:
        raise UsageError(
            f"compare: run {run_a} is {ra['device_kind']} and run {run_b} is {rb['device_kind']}; "
            "CPU-interpreter and GPU timings are never compared"
        )
    key = lambda r: (r["family"], r["variant"], r["size"], r["dtype"])
    a_rows = {key(r): r for r in store.rows(run_a) if r["median_ms"]}
    out = []
    for r in store.rows(run_b):
        a = a_rows.get(key(r))
        if a is None or not r["median_ms"]:
            continue
        v, noise = verdict(a["median_ms"], a["iqr_ms"] or 0.0, r["median_ms"], r["iqr_ms"] or 0.0)
        out.append(Delta(*key(r), a["median_ms"], r["median_ms"], r["median_ms"] / a["median_ms"], noise, v))
    return out
