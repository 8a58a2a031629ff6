"""The Python entry points behind `kw check` and `kw bench`, for notebooks and scripts."""

from __future__ import annotations

import torch

from kernelwright.harness.inputs import parse_dtype


def _family(family):
    from kernelwright.registry import Family, get_family

    return family if isinstance(family, Family) else get_family(family)


def _dtypes(dtypes, fam) -> list[torch.dtype]:
    if dtypes is None:
        return list(fam.dtypes)
    return [parse_dtype(d) if isinstance(d, str) else d for d in dtypes]


def verify(family, variants: list[str] | None = None, dtypes=None, *, seed: int | None = None):
    """Check a family's rungs against the float64 reference on its fuzz shapes (see ``kw check``).

    Parameters
    ----------
    family : str or Family
        e.g. ``"softmax"``.
    variants : list of str, optional
        Rung names; default every rung that runs here.
    dtypes : list of torch.dtype or str, optional
        Default: every dtype the family supports.

    Returns
    -------
    list of CheckResult
        One per trial; ``all(r.ok for r in results)`` means the family passed.
    """
    from kernelwright import runtime
    from kernelwright.harness.verify import verify as _verify

    fam = _family(family)
    rungs = [fam.rung(v) for v in variants] if variants else None
    return _verify(fam, rungs, _dtypes(dtypes, fam), device=runtime.current_device(), seed=seed)


def bench(family, sizes: list[tuple[int, ...]] | None = None, dtypes=None, variants: list[str] | None = None, *,
          peers: bool = True, db: str | None = None, timer=None) -> list[dict]:
    """Time a family's rungs and peers side by side on the same inputs (see ``kw bench``).

    Parameters
    ----------
    family : str or Family
    sizes : list of tuples, optional
        e.g. ``[(32768, 4096)]``; default the family's sweep for this device.
    dtypes, variants : optional
        As for :func:`verify`; torch eager always runs as the baseline.
    peers : bool
        Include torch.compile and optional libraries.
    db : str, optional
        Store the rows as a new run in this SQLite file.
    timer : TimerConfig, optional

    Returns
    -------
    list of dict
        One row per (size, dtype, variant): median/IQR/min ms, TB/s, TFLOP/s, % of roofline, speedups, notes.
    """
    from kernelwright import runtime
    from kernelwright.errors import UsageError
    from kernelwright.harness.bench import bench_family
    from kernelwright.harness.provenance import provenance
    from kernelwright.harness.roofline import get_ceilings

    fam = _family(family)
    for size in sizes or []:
        if not size or 0 in size:
            raise UsageError(f"sizes: {size!r} has no elements: nothing to time")
    ceilings = get_ceilings()
    store = run_id = None
    if db is not None:
        from kernelwright.store.db import Store

        store = Store(db)
        prov = provenance()
        prov["ceilings"] = ceilings.to_dict()
        run_id = store.start_run(prov, f"kernelwright.bench({fam.name!r})")
    on_row = (lambda row: store.add_row(run_id, row)) if store else None
    status = "interrupted"
    try:
        rows = bench_family(fam, sizes or fam.sweep(runtime.current_device()), _dtypes(dtypes, fam), ceilings,
                            variants=variants, peers=peers, timer=timer, on_row=on_row)
        status = "finished"
    finally:
        if store:
            store.finish_run(run_id, status)
    return rows
