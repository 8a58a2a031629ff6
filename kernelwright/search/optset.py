"""``kw optimize DIR``: :func:`~kernelwright.search.optimize.optimize` over a problem set, with fast_p and the
geometric-mean speedup of what it found.

Every problem gets its own search (the same pool and archive for all), within ``budget`` attempts and
``problem_seconds`` of wall clock (and whatever is left of ``deadline_s`` for the whole set). Results land in
``out_dir`` mirroring the set's folders::

    OUT/level1/candidates/NAME.py      the best ModelNew found (only when one passed), its verdict beside it (.json)
    OUT/level1/NAME.search.json        the search's record: every attempt's label, plan, verdict and speedup
    OUT/summary.json                   the set's table, fast_p and geometric means (every record under OUT)

``resume=True`` skips a problem that already has its ``.search.json`` (an earlier, interrupted or time-boxed run
of the same set), so a set too long for one sitting is done in several; the summary always covers every record.

The numbers follow ``kw eval-set``: ``fast_p`` is the share of *all* problems of the set whose best candidate
passed and ran more than ``p`` times faster than eager PyTorch; the geometric mean is over the problems where a
candidate passed. ``geomean_with_eager_fallback`` also counts the others at 1.0x (a user keeps the reference where
nothing faster was found; any passed candidate slower than eager is counted at 1.0x likewise). ``fast_1_clear``
counts only speedups beyond the timing noise (``1 + noise``, the larger relative IQR of the eager and candidate
samples): a candidate that equals eager can time at 1.01x.

For a problem with one substitutable site (a single op), ``rungs`` lists the speedup of each of the site's
variants that was judged on its own (``auto`` is the family's own choice, the rung named in ``auto_rung``, which is
not judged again by name; a variant that went to the final round
shows the mean of its judgments, or nothing when it failed a re-judgment) and ``rungs_total`` how many there are,
so whether the search found the family's best rung for that problem can be read off.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path

from kernelwright.errors import UsageError

THRESHOLDS = (0.0, 1.0, 1.5, 2.0)


def problem_files(paths: list[str]) -> list[Path]:
    """The problem files named by ``paths``: files as given, folders searched recursively for ``*.py`` (files
    starting with ``_`` and anything under a ``candidates`` folder left out), sorted, without repeats."""
    found: list[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            found += sorted(f for f in path.rglob("*.py")
                            if not f.name.startswith("_") and "candidates" not in f.relative_to(path).parts)
        elif path.is_file():
            found.append(path)
        else:
            raise UsageError(f"REFERENCE: no file or folder {p!r}")
    out, seen = [], set()
    for f in found:
        r = f.resolve()
        if r not in seen:
            seen.add(r)
            out.append(f)
    if not out:
        raise UsageError(f"REFERENCE: no problem files (*.py) in {', '.join(paths)}")
    return out


def _group(path: Path) -> str:
    """The folder a problem's results go under: its parent's name (``level1``)."""
    return path.resolve().parent.name or "problems"


def record_path(out_dir: Path, problem: Path) -> Path:
    return out_dir / _group(problem) / f"{problem.stem}.search.json"


def candidate_path(out_dir: Path, problem: Path) -> Path:
    return out_dir / _group(problem) / "candidates" / f"{problem.stem}.py"


def _single_site(plan: dict | None) -> tuple[str, str] | None:
    """(site label, variant) when ``plan`` substitutes exactly one site and compiles nothing."""
    if not plan or plan.get("compile") or len(plan.get("sites") or []) != 1:
        return None
    kind, anchor, variant = plan["sites"][0]
    return f"{kind}@{anchor}", variant or "auto"


def noise(times: dict | None) -> float | None:
    """The relative timing noise of a verdict: the larger relative IQR of eager's and the candidate's samples."""
    if not times:
        return None
    rel = [t["iqr_ms"] / t["median_ms"] for t in (times.get("eager"), times.get("candidate"))
           if t and t.get("median_ms") and t.get("iqr_ms") is not None]
    return max(rel) if rel else None


def problem_record(result, problem: Path, sites: list, seconds_cap: float | None) -> dict:
    """What one problem's search did, as plain data (see the module docstring)."""
    best = result.best
    attempts = []
    for e in result.history:
        v = e.verdict
        attempts.append({"index": e.index, "label": e.proposal.label, "origin": e.proposal.origin,
                         "plan": e.proposal.plan, "passed": e.passed, "category": v.get("category"),
                         "reason": None if e.passed else (v.get("reason") or "")[:300],
                         "speedup_eager": v.get("speedup_eager"), "speedup_compile": v.get("speedup_compile"),
                         "wall_s": round(e.wall_s, 2), "overhead_s": v.get("overhead_s")})
    rec = {"problem": problem.stem, "group": _group(problem), "path": str(problem),
           "sites": [f"{s.kind}@{s.anchor}" for s in sites], "seconds_cap": seconds_cap,
           **{k: v for k, v in result.summary().items() if k not in ("best",)},
           "best": None, "attempts": attempts}
    if best is not None:
        v = best.verdict
        rec["best"] = {"label": best.proposal.label, "origin": best.proposal.origin, "plan": best.proposal.plan,
                       "speedup_eager": v.get("speedup_eager"), "speedup_compile": v.get("speedup_compile"),
                       "noise": noise(v.get("times")), "times": v.get("times")}
    if len(sites) == 1:
        site = sites[0]
        rungs: dict[str, float | None] = {}
        for a in attempts:
            one = _single_site(a["plan"])
            if one and one[0] == f"{site.kind}@{site.anchor}":
                rungs[one[1]] = a["speedup_eager"] if a["passed"] else None
        for f in result.finals:  # the final round's mean replaces a finalist's single judgment
            one = _single_site(next((a["plan"] for a in attempts if a["index"] == f["index"]), None))
            if one and one[0] == f"{site.kind}@{site.anchor}":
                rungs[one[1]] = f["mean"] or None
        rec["rungs"] = rungs
        rec["rungs_total"] = len(site.variants)
        rec["auto_rung"] = getattr(site, "auto", None)
    return rec


def summarize(out_dir: str | os.PathLike, n_set: int | None = None) -> dict:
    """The set's summary from every ``*.search.json`` under ``out_dir``."""
    out = Path(out_dir)
    recs = [json.loads(p.read_text()) for p in sorted(out.rglob("*.search.json"))]
    recs.sort(key=lambda r: (r["group"], r["problem"]))
    n = max(len(recs), n_set or 0)  # problems of the set not searched count as failed
    best = [(r["best"] or {}).get("speedup_eager") if r.get("best") else None for r in recs]
    fast = {f"fast_{p:g}": (sum(1 for b in best if b is not None and b > p) / n if n else 0.0) for p in THRESHOLDS}
    # faster than eager by more than the timing noise (a candidate equal to eager can come out at 1.01x)
    clear = [r["best"]["speedup_eager"] > 1 + (r["best"].get("noise") or 0.0) for r in recs if r.get("best")]
    fast["fast_1_clear"] = sum(clear) / n if n else 0.0
    passed = [b for b in best if b is not None and b > 0]
    fallback = [max(b or 1.0, 1.0) for b in best] + [1.0] * (n - len(best))
    gm = lambda xs: math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None
    rows = []
    for r in recs:
        b = r.get("best") or {}
        row = {"group": r["group"], "problem": r["problem"], "best": b.get("label"),
               "speedup_eager": b.get("speedup_eager"), "speedup_compile": b.get("speedup_compile"),
               "passed": r.get("passed"), "evaluated": r.get("evaluated"), "seconds": r.get("seconds"),
               "stopped": r.get("stopped")}
        if "rungs" in r:
            judged = {k: v for k, v in r["rungs"].items() if v is not None}
            row["rungs_judged"] = f"{len(r['rungs'])}/{r['rungs_total']}"
            top = max(judged, key=judged.get) if judged else None
            auto = r.get("auto_rung")  # "auto" is the family's choice: name the rung it ran
            row["best_rung"] = f"auto ({auto})" if top == "auto" and auto else top
        rows.append(row)
    return {"out_dir": str(out), "n_problems": len(recs), "n_set": n,
            "n_passed": len(passed), **fast, "geomean_speedup": gm(passed),
            "geomean_with_eager_fallback": gm(fallback), "rows": rows}


def format_summary(s: dict) -> str:
    lines = [f"{'problem':<38s} {'best':<44s} {'x eager':>8s} {'x compile':>9s} {'passed':>7s} {'rungs':>6s} "
             f"{'secs':>6s}"]
    for r in s["rows"]:
        name = f"{r['group']}/{r['problem']}"
        x = f"{r['speedup_eager']:.3g}" if r["speedup_eager"] else "-"
        xc = f"{r['speedup_compile']:.3g}" if r["speedup_compile"] else "-"
        label = (r["best"] or "(none passed)")[:44]
        lines.append(f"{name[:38]:<38s} {label:<44s} {x:>8s} {xc:>9s} {r['passed']!s:>3}/{r['evaluated']!s:<3} "
                     f"{r.get('rungs_judged', ''):>6s} {r['seconds'] or 0:6.0f}")
    gm = s["geomean_speedup"]
    lines.append(f"{s['n_problems']} of {s['n_set']} problems searched; " + ", ".join(
        f"{k} {s[k]:.2f}" for k in (*(f"fast_{p:g}" for p in THRESHOLDS), "fast_1_clear")) + "; geomean speedup "
        + (f"{gm:.3f}x" if gm else "-") + f" over {s['n_passed']} with a passed candidate, "
        f"{s['geomean_with_eager_fallback'] or 0:.3f}x with eager kept where nothing faster was found")
    return "\n".join(lines)


def optimize_set(paths: list[str], out_dir: str | os.PathLike, *, budget: int, pool, archive,
                 device: str, seed: int | None = None, eval_options: dict | None = None, population: int = 8,
                 compile_modes=None, problem_seconds: float | None = None, deadline_s: float | None = None,
                 resume: bool = False, log: Callable[[str], None] | None = None, finalists: int = 0,
                 finalist_margin: float = 0.05) -> dict:
    """Search every problem of ``paths`` in turn (see the module docstring); returns :func:`summarize`'s dict."""
    from kernelwright.search.builtin import BuiltinProposer
    from kernelwright.search.optimize import optimize

    say = log or (lambda _line: None)
    files = problem_files(paths)
    out = Path(out_dir)
    t0 = time.perf_counter()
    for i, f in enumerate(files, 1):
        rec_path = record_path(out, f)
        if resume and rec_path.is_file():
            say(f"== [{i}/{len(files)}] {_group(f)}/{f.stem}: done earlier ({rec_path}), skipped")
            continue
        left = None if deadline_s is None else deadline_s - (time.perf_counter() - t0)
        if left is not None and left < 20:
            say(f"== [{i}/{len(files)}] {_group(f)}/{f.stem}: not started, the set's deadline is reached")
            continue
        cap = min(x for x in (problem_seconds, left) if x is not None) if (problem_seconds or left) else None
        say(f"== [{i}/{len(files)}] {_group(f)}/{f.stem}" + (f" (at most {cap:.0f} s)" if cap else ""))
        try:
            bp = BuiltinProposer(str(f), device=device, compile_modes=compile_modes, seed=seed or 0)
        except UsageError as e:
            say(f"   skipped: {e}")
            continue
        cand = candidate_path(out, f)
        cand.parent.mkdir(parents=True, exist_ok=True)
        result = optimize(str(f), budget=budget, proposers=[bp], pool=pool, archive=archive, out_path=cand,
                          seed=seed, device=device, eval_options=eval_options, population=population,
                          log=lambda line: say("   " + line), deadline_s=cap, finalists=finalists,
                          finalist_margin=finalist_margin)
        rec = problem_record(result, f, bp.analysis.sites, cap)
        rec_path.write_text(json.dumps(rec, indent=1, default=str) + "\n")
        b = result.best
        say(f"   best: {b.proposal.label} {b.fitness:.3g}x" if b else "   no candidate passed")
        if result.stopped == "interrupted":
            raise KeyboardInterrupt
    s = summarize(out, n_set=len(files))
    (out / "summary.json").write_text(json.dumps(s, indent=1, default=str) + "\n")
    return s
