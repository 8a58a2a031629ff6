"""``optimize(reference) -> Result``: propose candidates, judge them with the evaluator, keep the fittest, mutate.

The loop keeps every worker of the pool busy: whenever one is free it asks the next proposer (round robin) for a
candidate, skips sources already judged, and submits it. Each result is recorded in the archive from here (one
transaction each) and handed back to its proposer. A candidate's fitness is its verified speedup over eager
PyTorch (``speedup_eager`` of a verdict that passed: correct and believably timed), 0 otherwise; the population
is the fittest few, and the built-in proposer mutates them. ``budget`` counts attempts: candidates judged, plus
proposer attempts that produced no candidate (an LLM reply without code), so a broken proposer cannot spin.

Every worker evaluates with the same seed, so all candidates meet the same input sets and timings compare.

Near-ties are settled by a final round (``finalists``): candidates judged once each are ranked by one timing each,
and on the H200 the same kernel judged in two fresh processes has come out 5-10% apart (run 15: l1/02's
``auto``, which runs ``triton_autotuned``, at 0.931x and ``triton_autotuned`` named outright at 0.880x). When the
search ends (budget spent or nothing new; not when interrupted), the best ``finalists`` candidates within
``finalist_margin`` of the best are judged again, the leader last, and ranked by the mean of all their
judgments; a finalist that fails a re-judgment is out (a flaky candidate is not a winner). The winner's latest
verdict is the one reported and written. Re-judgments are recorded in the archive like any evaluation but do not
count against ``budget``. The deadline holds for the round too: the search stops sending new candidates early
enough to leave the finalists' first judging times for it, and no re-judgment is sent after the deadline.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import json
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kernelwright.errors import UsageError
from kernelwright.search.pool import make_job
from kernelwright.search.state import Evaluated, Proposal, SearchState, fitness


@dataclass
class Result:
    reference: str
    device: str
    seed: int
    best: Evaluated | None
    history: list[Evaluated] = field(default_factory=list)
    """every judged candidate, in attempt order"""
    notes: list[tuple[Proposal, str]] = field(default_factory=list)
    attempts: int = 0
    stopped: str = "budget"
    """``budget`` (spent), ``exhausted`` (no proposer had anything new), ``deadline`` (out of time) or
    ``interrupted``"""
    finals: list[dict] = field(default_factory=list)
    """the final round: per finalist its label, attempt index, every judgment's speedup (0 for a failed one),
    mean and whether it won; empty when there was no near-tie to settle"""
    out_path: str | None = None
    verdict_path: str | None = None
    seconds: float = 0.0

    @property
    def found(self) -> bool:
        return self.best is not None

    def summary(self) -> dict:
        b = self.best
        return {"reference": self.reference, "device": self.device, "seed": self.seed, "attempts": self.attempts,
                "evaluated": len(self.history), "passed": sum(e.passed for e in self.history),
                "stopped": self.stopped, "seconds": round(self.seconds, 2), "out_path": self.out_path,
                "verdict_path": self.verdict_path, "finals": self.finals,
                "best": None if b is None else {"label": b.proposal.label, "origin": b.proposal.origin,
                                                "speedup_eager": b.verdict.get("speedup_eager"),
                                                "speedup_compile": b.verdict.get("speedup_compile"),
                                                "plan": b.proposal.plan}}


def default_out_path(reference: str | os.PathLike) -> str:
    """``<reference stem>_optimized.py`` in the current folder."""
    return f"{Path(reference).stem}_optimized.py"


def check_reference(reference: str | os.PathLike):
    """Load the problem file (a clear :class:`UsageError` when it is not a KernelBench problem)."""
    from kernelwright.eval.problemset import load_problem

    path = Path(reference)
    if not path.is_file():
        raise UsageError(f"REFERENCE: no file {str(reference)!r}")
    try:
        return load_problem(path)
    except UsageError:
        raise
    except Exception as e:
        raise UsageError(f"REFERENCE: {reference} does not load: {type(e).__name__}: {e}") from None


def eval_config(device: str, seed: int, options: dict | None) -> dict:
    """The :class:`~kernelwright.eval.EvalConfig` fields every worker evaluates with (scalars only)."""
    from kernelwright.eval import EvalConfig

    known = {f.name for f in dataclasses.fields(EvalConfig)}
    cfg = {"device": device, "seed": int(seed)}
    for k, v in (options or {}).items():
        if k not in known:
            raise UsageError(f"eval option {k!r}: not a field of EvalConfig ({', '.join(sorted(known))})")
        if not (v is None or isinstance(v, bool | int | float | str)):
            raise UsageError(f"eval option {k!r}: expected a number, string or bool, got {type(v).__name__}")
        cfg[k] = v
    return cfg


def _status(e: Evaluated) -> str:
    return f"PASS {e.fitness:8.3g}x" if e.passed else f"FAIL {e.verdict.get('category') or '?':<14s}"


def _line(e: Evaluated, budget: int, best: Evaluated | None) -> str:
    v = e.verdict
    status = _status(e)
    top = f"best {best.fitness:.3g}x" if best else "best -"
    label = e.proposal.label if len(e.proposal.label) < 90 else e.proposal.label[:87] + "..."
    why = "" if e.passed else f"  ({(v.get('reason') or '')[:100]})"
    return f"[{e.index:3d}/{budget}] {e.proposal.origin:<7s} {status}  {top:<11s} {e.wall_s:6.1f}s  {label}{why}"


def optimize(reference: str | os.PathLike, *, budget: int = 32, proposers: list | None = None, pool=None,
             archive=None, out_path: str | os.PathLike | None = None, seed: int | None = None,
             device: str | None = None, eval_options: dict | None = None, population: int = 8,
             log: Callable[[str], None] | None = None, write: bool = True,
             deadline_s: float | None = None, finalists: int = 0, finalist_margin: float = 0.05) -> Result:
    """Search for a faster ``ModelNew`` for a KernelBench problem file.

    Parameters
    ----------
    reference : the problem file (``Model``, ``get_inputs``, ``get_init_inputs``)
    budget : attempts (candidate evaluations, plus proposer attempts that produced no candidate)
    proposers : objects with ``name``, ``propose(state) -> Proposal | None`` and ``feedback(evaluated)``;
        default: the built-in proposer alone
    pool : a :class:`~kernelwright.search.pool.LocalPool` or :class:`~kernelwright.search.pool.RayPool`; default a
        LocalPool (one worker per GPU, or per CPU core), closed at the end
    archive : an :class:`~kernelwright.eval.archive.Archive` or a path (default ``$KW_ARCHIVE`` or
        ``kernelwright-archive.db``): every evaluation is recorded there
    out_path : where the best candidate goes (default ``<stem>_optimized.py``); its verdict goes next to it
        (``.json``). Nothing is written when no candidate passed.
    seed : the evaluator's seed for every candidate (default: drawn once)
    device : "cpu" or "cuda" (default: this process's device)
    eval_options : more :class:`~kernelwright.eval.EvalConfig` fields (``timeout_s``, ``timing_sets``, ...)
    population : how many of the fittest verified candidates the built-in proposer mutates
    log : called with one line per attempt
    deadline_s : wall-clock seconds after which no new candidate is sent (those in flight finish); the search
        then stops as ``deadline``
    finalists : at most this many of the best candidates go to the final round (see the module docstring); 0 or
        1: none
    finalist_margin : a candidate is a finalist when its speedup is within this fraction of the best's
    """
    from kernelwright import runtime
    from kernelwright.eval.archive import Archive

    t_start = time.perf_counter()
    if budget < 1:
        raise UsageError(f"budget: expected at least 1, got {budget}")
    if isinstance(finalists, bool) or not isinstance(finalists, int) or finalists < 0:
        raise UsageError(f"finalists: expected a whole number, 0 or more, got {finalists!r}")
    if isinstance(finalist_margin, bool) or not isinstance(finalist_margin, int | float) \
            or not 0 <= finalist_margin <= 1:
        raise UsageError(f"finalist_margin: expected a fraction between 0 and 1, got {finalist_margin!r}")
    problem = check_reference(reference)
    reference = str(Path(reference).resolve())
    device = device or runtime.current_device()
    seed = seed if seed is not None else random.randrange(2**24)
    config = eval_config(device, seed, eval_options)
    if proposers is None:
        from kernelwright.search.builtin import BuiltinProposer

        proposers = [BuiltinProposer(reference, device=device, seed=seed)]
    own_archive = not isinstance(archive, Archive)
    arch = Archive(archive) if own_archive else archive
    own_pool = pool is None
    if own_pool:
        from kernelwright.search.pool import LocalPool

        pool = LocalPool(device=device)
    say = log or (lambda _line: None)
    state = SearchState(reference, problem.source, device, population_size=population)
    result = Result(reference, device, seed, None)
    by_name = {p.name: p for p in proposers}
    seen: dict[str, int] = {}
    in_flight: dict[cf.Future, tuple[int, Proposal]] = {}
    active = list(proposers)
    turn = 0

    def next_proposal() -> Proposal | None:
        nonlocal turn
        while active:
            p = active[turn % len(active)]
            turn += 1
            try:
                prop = p.propose(state)
            except Exception as err:  # a proposer's bug ends that proposer, not the search
                say(f"the {p.name} proposer failed and is left out: {type(err).__name__}: {err}")
                prop = None
            if prop is None:
                active.remove(p)
                continue
            return prop
        return None

    def judged(index: int, prop: Proposal, res: dict) -> Evaluated:
        v = res["verdict"]
        e = Evaluated(index, prop, v, fitness(v), float(res.get("wall_s") or 0.0), res.get("worker", ""),
                      res.get("device_name", ""))
        try:
            e.archive_id = arch.record(reference, prop.source, v, device=e.device_name or device,
                                       name=problem.name)
        except Exception as err:  # the search goes on; the archive's own transaction kept it consistent
            say(f"archive: could not record attempt {index}: {type(err).__name__}: {err}")
        return e

    def finish(index: int, prop: Proposal, res: dict) -> None:
        e = judged(index, prop, res)
        state.history.append(e)
        result.history.append(e)
        by_name[prop.origin].feedback(e)
        say(_line(e, budget, state.best))

    def reserve() -> float:
        """Seconds of the deadline kept for the final round: what its finalists took to judge the first time."""
        close = _finalists(state, finalists, finalist_margin) if finalists > 1 else []
        return sum(e.wall_s for e in close)

    decided, winner = False, None
    try:
        while True:
            late = deadline_s is not None and time.perf_counter() - t_start > deadline_s - reserve()
            while not late and len(in_flight) < pool.n_workers and result.attempts < budget:
                prop = next_proposal()
                if prop is None:
                    break
                result.attempts += 1
                index = result.attempts
                if prop.source is None or prop.digest in seen:
                    note = prop.note or "no candidate"
                    if prop.source is not None:
                        note = f"the same source as attempt {seen[prop.digest]}; not judged again"
                        prop.note = note
                    state.notes.append((prop, note))
                    result.notes.append((prop, note))
                    noted = getattr(by_name[prop.origin], "noted", None)
                    if noted is not None:
                        noted(prop, note)
                    say(f"[{index:3d}/{budget}] {prop.origin:<7s} SKIP  {note[:150]}")
                    continue
                seen[prop.digest] = index
                job = make_job(reference, problem.source, prop.source, name=f"{problem.name}_{index}", config=config)
                in_flight[pool.submit(job)] = (index, prop)
            if not in_flight:
                result.stopped = ("deadline" if late else "budget" if result.attempts >= budget
                                  else "exhausted")
                break
            done, _ = cf.wait(list(in_flight), return_when=cf.FIRST_COMPLETED)
            for fut in sorted(done, key=lambda f: in_flight[f][0]):
                index, prop = in_flight.pop(fut)
                finish(index, prop, fut.result())
        if finalists > 1:
            decided, winner = _final_round(state, result, finalists, finalist_margin, pool, judged, say,
                                  lambda e: make_job(reference, problem.source, e.proposal.source,
                                                     name=f"{problem.name}_{e.index}_final", config=config),
                                  lambda: deadline_s is not None and time.perf_counter() - t_start > deadline_s)
    except KeyboardInterrupt:
        result.stopped = "interrupted"
        for fut in in_flight:
            fut.cancel()
    finally:
        if own_pool:
            pool.close()
    result.best = winner if decided else state.best
    result.history.sort(key=lambda e: e.index)
    result.seconds = time.perf_counter() - t_start
    if write and result.best is not None:
        _write(result, out_path or default_out_path(reference))
    if own_archive:
        arch.close()
    return result


def _finalists(state: SearchState, finalists: int, margin: float) -> list[Evaluated]:
    """The best ``finalists`` candidates within ``margin`` of the best; empty unless there are two or more."""
    top = state.population(finalists)
    close = [e for e in top if e.fitness >= top[0].fitness / (1 + margin)] if top else []
    return close if len(close) >= 2 else []


def _final_round(state: SearchState, result: Result, finalists: int, margin: float, pool, judged, say, job_of,
                 late) -> tuple[bool, Evaluated | None]:
    """Judge the near-tied best candidates again (see the module docstring). Returns (decided, winner): decided is
    False when there was no near-tie or nothing was re-judged before the deadline (the search's best stands);
    the winner is the winner's latest evaluation, or None when every finalist failed again and nothing else
    passed."""
    close = _finalists(state, finalists, margin)
    if not close:
        return False, None
    say(f"final round: {len(close)} candidates within {margin:.0%} of the best, judged again")
    rejudged: dict[int, list[Evaluated]] = {e.index: [] for e in close}
    order = list(reversed(close))  # the leader last: whatever drifts during the round favours it least
    in_flight: dict[cf.Future, Evaluated] = {}
    while order or in_flight:
        while order and len(in_flight) < pool.n_workers and not late():
            e = order.pop(0)
            in_flight[pool.submit(job_of(e))] = e
        if not in_flight:
            break  # the deadline came first
        done, _ = cf.wait(list(in_flight), return_when=cf.FIRST_COMPLETED)
        for fut in done:
            e = in_flight.pop(fut)
            again = judged(e.index, e.proposal, fut.result())
            rejudged[e.index].append(again)
            say(f"[final] {_status(again)}  was {e.fitness:.3g}x  {again.wall_s:6.1f}s  {e.proposal.label[:90]}")
    if not any(rejudged.values()):
        return False, None
    winner, best_mean = None, -1.0
    for e in close:
        again = rejudged[e.index]
        scores = [e.fitness, *(a.fitness for a in again)]
        ok = all(a.passed for a in again)
        mean = sum(scores) / len(scores) if ok else 0.0
        row = {"label": e.proposal.label, "index": e.index, "speedups": [round(x, 4) for x in scores],
               "mean": round(mean, 4), "rejudged": len(again), "won": False}
        result.finals.append(row)
        if ok and mean > best_mean:
            winner, best_mean, win_row = (again[-1] if again else e), mean, row
    if winner is None:  # every finalist failed its re-judgment: the best of the rest
        out = {e.index for e in close}
        rest = [e for e in state.population(len(state.history)) if e.index not in out]
        say("final round: every finalist failed a re-judgment" + ("" if rest else "; no candidate stands"))
        return True, rest[0] if rest else None
    win_row["won"] = True
    say(f"final round: {winner.proposal.label} wins at {best_mean:.3g}x (mean of {len(win_row['speedups'])})")
    return True, winner


def _write(result: Result, out_path: str | os.PathLike) -> None:
    best = result.best
    out = Path(out_path)
    out.write_text(best.proposal.source)
    verdict_path = out.with_suffix(".json")
    doc = {"problem": result.reference, "candidate": str(out), "label": best.proposal.label,
           "origin": best.proposal.origin, "plan": best.proposal.plan, "archive_id": best.archive_id,
           "device_name": best.device_name, "verdict": best.verdict, "search": result.summary()}
    doc["search"]["out_path"], doc["search"]["verdict_path"] = str(out), str(verdict_path)
    verdict_path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    result.out_path, result.verdict_path = str(out), str(verdict_path)
