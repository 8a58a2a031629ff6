"""``kw``: the command line, a thin layer over the Python API.

Exit codes: 0 success; 1 a check failed or a benchmarked kernel was wrong; 2 a usage error (the message names
the argument); 3 nothing could run here (e.g. a CUDA-only request on CPU); 130 interrupted (finished rows kept).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time

from kernelwright.errors import Unavailable, UsageError

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def _parser() -> argparse.ArgumentParser:
    def common_options(suppress: bool) -> argparse.ArgumentParser:
        # accepted before and after the command; the command's copy must not reset what came before it
        # (`kw --db X bench`), so its defaults are SUPPRESS and the top-level parser's set the real defaults
        c = argparse.ArgumentParser(add_help=False)
        d = (lambda v: argparse.SUPPRESS) if suppress else (lambda v: v)
        c.add_argument("--device", default=d(None), help="auto (default, or $KW_DEVICE), cpu or cuda")
        c.add_argument("--db", default=d(None), help="results SQLite file (default $KW_DB or ./kernelwright.db)")
        c.add_argument("--json", action="store_true", default=d(False), help="machine-readable output on stdout")
        return c

    common = common_options(suppress=True)
    p = argparse.ArgumentParser(prog="kw", description="kernelwright: verify, time and compare GPU kernels.",
                                parents=[common_options(suppress=False)])
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")

    sub.add_parser("list", parents=[common], help="families, their rungs and peers, and what runs here")

    c = sub.add_parser("check", parents=[common], help="verify rungs against the float64 reference")
    c.add_argument("families", nargs="*", default=["all"], metavar="FAMILY")
    c.add_argument("--variant", action="append", help="only this rung (repeatable)")
    c.add_argument("--dtypes", default=None, help="comma list: fp32,fp16,bf16 (default: all the family has)")
    c.add_argument("--seed", type=int, default=None, help="base seed (default: fresh random every trial)")

    b = sub.add_parser("bench", parents=[common], help="time rungs and peers side by side and store the rows")
    _bench_args(b)

    r = sub.add_parser("roofline", parents=[common], help="measure (or show cached) device ceilings")
    r.add_argument("--remeasure", action="store_true", help="measure again even if cached")

    res = sub.add_parser("results", parents=[common], help="list stored runs, or the rows of one run")
    res.add_argument("run", type=int, nargs="?", default=None, help="show this run's rows")

    cmp_ = sub.add_parser("compare", parents=[common], help="compare two runs: faster, slower, same, ambiguous")
    cmp_.add_argument("run_a", type=int)
    cmp_.add_argument("run_b", type=int)

    rep = sub.add_parser("report", parents=[common], help="write a self-contained HTML report of a run")
    rep.add_argument("--run", type=int, default=None, help="run id (default: the latest run with rows)")
    rep.add_argument("-o", "--output", default="report.html")

    t = sub.add_parser("tune", parents=[common],
                       help="autotune rungs that have a config space; winners cached on disk (CUDA only)")
    t.add_argument("family", metavar="FAMILY")
    t.add_argument("--variant", action="append", help="only this rung (repeatable; default: every tunable rung)")
    t.add_argument("--shapes", "--sizes", dest="sizes", default=None,
                   help="comma list of sizes or a power-of-two range (default: the family's sweep)")
    t.add_argument("--dtypes", default=None, help="comma list: fp32,fp16,bf16 (default: all the family has)")
    t.add_argument("--force", action="store_true", help="search again even where a cached winner exists")

    ins = sub.add_parser("inspect", parents=[common],
                         help="registers, spills, shared memory, occupancy and SASS mix of a rung's compiled "
                              "kernels (no GPU needed)")
    ins.add_argument("family", metavar="FAMILY")
    ins.add_argument("--variant", required=True, help="the rung to inspect")
    ins.add_argument("--shape", "--size", dest="size", default=None,
                     help="problem size (default: the family's first GPU sweep size)")
    ins.add_argument("--dtype", default=None, help="fp32, fp16 or bf16 (default: the first the rung takes)")
    ins.add_argument("--sass", action="store_true", help="also print the full SASS listing")

    ev = sub.add_parser("eval", parents=[common],
                        help="judge a KernelBench-format candidate (ModelNew) against its reference (Model): "
                             "correctness, speedup, cheats")
    ev.add_argument("reference", help="problem file: Model, get_inputs(), get_init_inputs()")
    ev.add_argument("candidate", help="candidate file: ModelNew with Model's constructor arguments")
    _eval_args(ev)
    es = sub.add_parser("eval-set", parents=[common],
                        help="evaluate every problem DIR/NAME.py against DIR/candidates/NAME.py: fast_p, geomean")
    es.add_argument("directory", metavar="DIR")
    es.add_argument("--candidates", default=None, help="folder of candidates NAME.py (default DIR/candidates)")
    _eval_args(es)

    arc = sub.add_parser("archive", parents=[common],
                         help="the best verified kernel per problem in the archive, or the kernels of the problems "
                              "most similar to one (to seed a search)")
    from kernelwright.eval.archive import add_archive_arguments
    from kernelwright.search.cli import add_optimize_parser

    add_archive_arguments(arc)
    add_optimize_parser(sub, common)

    main_job = sub.add_parser("run", parents=[common],
                              help="the main job: roofline, bench every family's default sweep, store, report")
    _bench_args(main_job, families=False)
    main_job.add_argument("-o", "--output", default="report.html")
    return p


def _eval_args(e: argparse.ArgumentParser) -> None:
    e.add_argument("--timeout", type=float, default=None, help="seconds per candidate, compilation included (300)")
    e.add_argument("--memory-mb", type=int, default=None,
                   help="memory cap of the candidate's process (default 8192 on CPU, 32768 host on CUDA)")
    e.add_argument("--seed", type=int, default=None, help="base seed of the input sets (default: fresh)")
    e.add_argument("--timing-sets", type=int, default=None,
                   help="distinct input sets timed, one call each (default 20 on CUDA, 3 on CPU)")
    e.add_argument("--compile-baseline", choices=("auto", "on", "off"), default="auto",
                   help="also time torch.compile of the reference (auto: on CUDA only)")
    e.add_argument("--no-alt-size", action="store_true", help="skip the second problem size")
    e.add_argument("--archive", default=None, metavar="PATH",
                   help="record every verdict in this archive (default $KW_ARCHIVE or ./kernelwright-archive.db)")
    e.add_argument("--no-archive", action="store_true", help="do not record the verdicts")


def _bench_args(b: argparse.ArgumentParser, families: bool = True) -> None:
    if families:
        b.add_argument("families", nargs="*", default=["all"], metavar="FAMILY")
    b.add_argument("--sizes", default=None,
                   help="comma list of sizes (e.g. 32768x4096,2^28) or a power-of-two range 2^20..2^28")
    b.add_argument("--dtypes", default=None, help="comma list: fp32,fp16,bf16 (default: all the family has)")
    b.add_argument("--variant", action="append", help="only this rung or peer (repeatable; torch always runs)")
    b.add_argument("--no-peers", action="store_true", help="rungs only")
    b.add_argument("--graph", choices=("auto", "on", "off"), default="auto",
                   help="CUDA-graph timing: auto uses it for kernels under 15 us")
    b.add_argument("--max-seconds", type=float, default=2.0, help="time cap per measurement")
    b.add_argument("--rel-spread", type=float, default=0.02, help="stop sampling when IQR/median falls under this")


# --- helpers ------------------------------------------------------------------------------------------------------
def _console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=False, width=max(100, _term_width()))


def _term_width() -> int:
    try:
        return os.get_terminal_size().columns
    except OSError:
        return 160


def _dtypes(text: str | None, family) -> list:
    from kernelwright.harness.inputs import parse_dtype

    if text is None:
        return list(family.dtypes)
    dtypes = [parse_dtype(t.strip()) for t in text.split(",") if t.strip()]
    if not dtypes:
        raise UsageError("dtypes: expected a comma list such as fp32,bf16, got nothing")
    return dtypes


def _sizes(text: str | None, family, device: str) -> list[tuple[int, ...]]:
    from kernelwright.harness.sizes import parse_int

    if not text:
        return family.sweep(device)
    out = []
    for item in text.replace(" ", ",").split(","):
        if not item:
            continue
        if ".." in item:
            lo, hi = (parse_int(v, "sizes") for v in item.split(".."))
            if lo <= 0 or hi < lo:
                raise UsageError(f"sizes: range {item!r} must go from a positive count up")
            v = lo
            while v <= hi:
                out.append(family.parse_size(str(v)))
                v *= 2
        else:
            out.append(family.parse_size(item))
    for size in out:
        if 0 in size:
            raise UsageError(f"sizes: {family.format_size(size)} has no elements: nothing to time")
    if not out:
        raise UsageError("sizes: expected at least one size")
    return out


def _store(args):
    from kernelwright.store.db import Store, default_path

    return Store(args.db or default_path())


def _emit_json(obj) -> None:
    json.dump(obj, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


# --- commands -----------------------------------------------------------------------------------------------------
def cmd_list(args) -> int:
    from kernelwright.registry import all_families

    data = []
    for fam in all_families():
        rungs = [{"name": r.name, "backend": r.backend, "needs": r.needs,
                  "available": r.unavailable_reason() is None, "reason": r.unavailable_reason(),
                  "journal": r.journal} for r in fam.rungs]
        peers = []
        for p in fam.peers:
            try:
                p.make()
                peers.append({"name": p.name, "available": True, "reason": None})
            except Unavailable as e:
                peers.append({"name": p.name, "available": False, "reason": str(e)})
        data.append({"family": fam.name, "summary": fam.summary, "rungs": rungs, "peers": peers})
    if args.json:
        _emit_json(data)
        return EXIT_OK
    con = _console()
    for f in data:
        con.print(f"[bold]{f['family']}[/bold]: {f['summary']}")
        for r in f["rungs"]:
            state = "ok" if r["available"] else f"unavailable: {r['reason']}"
            con.print(f"  rung  {r['name']:<18} {r['backend']:<7} needs {r['needs']:<8} {state}")
        for p in f["peers"]:
            con.print(f"  peer  {p['name']:<18} {'ok' if p['available'] else 'unavailable: ' + p['reason']}")
    return EXIT_OK


def cmd_check(args) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from kernelwright.harness.verify import verify
    from kernelwright.registry import resolve_families
    from kernelwright.runtime import current_device

    fams = resolve_families(args.families)
    device = current_device()
    results, skipped = [], []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=_console(stderr=True), transient=True, disable=args.json) as prog:
        for fam in fams:
            rungs = [fam.rung(v) for v in args.variant if v in {r.name for r in fam.rungs}] if args.variant \
                else list(fam.rungs)
            if args.variant and not rungs:
                raise UsageError(f"variant: none of {args.variant} is a rung of {fam.name!r}; "
                                 f"rungs: {', '.join(r.name for r in fam.rungs)}")
            for r in rungs:
                if r.unavailable_reason():
                    skipped.append({"family": fam.name, "rung": r.name, "reason": r.unavailable_reason()})
            dtypes = _dtypes(args.dtypes, fam)
            total = sum(1 for r in rungs if not r.unavailable_reason()) * len(dtypes) * len(fam.fuzz())
            task = prog.add_task(f"check {fam.name}", total=total)
            results += verify(fam, rungs, dtypes, device=device, seed=args.seed,
                              on_result=lambda _res, t=task: prog.advance(t))
    failed = [r for r in results if not r.ok]
    if args.json:
        _emit_json({"device": device, "results": [r.to_dict() for r in results], "skipped": skipped,
                    "passed": len(results) - len(failed), "failed": len(failed)})
    else:
        con = _console()
        summary: dict[tuple, list] = {}
        for r in results:
            summary.setdefault((r.family, r.rung, r.dtype), []).append(r)
        for (fam, rung, dt), rs in summary.items():
            bad = [r for r in rs if not r.ok]
            worst = max((r.rel_norm for r in rs if r.ok), default=0.0)
            mark = "[green]PASS[/green]" if not bad else f"[red]FAIL {len(bad)}/{len(rs)}[/red]"
            con.print(f"{mark} {fam:<11} {rung:<18} {dt:<5} {len(rs)} trials, worst rel err {worst:.2e}")
            for r in bad:
                con.print(f"     {r.shape} {r.layout} {r.dist} seed={r.seed}: {r.reason}")
        for s in skipped:
            con.print(f"[yellow]SKIP[/yellow] {s['family']:<11} {s['rung']:<18} {s['reason']}")
        con.print(f"{len(results) - len(failed)} passed, {len(failed)} failed ({device})")
    return EXIT_FAIL if failed else EXIT_OK


def _bench(args, families: list[str], store, command: str) -> tuple[int, list[dict]]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from kernelwright.harness.bench import bench_family, contenders
    from kernelwright.harness.provenance import provenance
    from kernelwright.harness.roofline import get_ceilings
    from kernelwright.harness.timing import TimerConfig
    from kernelwright.registry import resolve_families
    from kernelwright.runtime import current_device

    device = current_device()
    fams = resolve_families(families)
    if args.variant:
        known = {n for f in fams for n in [r.name for r in f.rungs] + [p.name for p in f.peers]}
        unknown = [v for v in args.variant if v not in known]
        if unknown:
            raise UsageError(f"variant: {', '.join(unknown)} is not a rung or peer of "
                             f"{', '.join(f.name for f in fams)}; known: {', '.join(sorted(known))}")
    plan = [(f, _sizes(args.sizes, f, device), _dtypes(args.dtypes, f)) for f in fams]
    ceilings = get_ceilings()
    prov = provenance()
    prov["ceilings"] = ceilings.to_dict()
    run_id = store.start_run(prov, command)
    timer = TimerConfig(rel_spread=args.rel_spread, max_seconds=args.max_seconds, graph=args.graph)
    rows: list[dict] = []
    status = "finished"
    total = sum(len(s) * sum(1 for c in contenders(f, args.variant, not args.no_peers) for dt in d
                             if c.role != "rung" or f.rung(c.name).dtypes in (None, ()) or dt in f.rung(c.name).dtypes)
                for f, s, d in plan)
    try:
        with Progress(TextColumn("{task.description:<48}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=_console(stderr=True), transient=True, disable=args.json) as prog:
            task = prog.add_task(f"run {run_id}", total=total)

            def on_row(row):
                store.add_row(run_id, row)
                rows.append(row)
                prog.advance(task)

            for fam, sizes, dtypes in plan:
                bench_family(fam, sizes, dtypes, ceilings, variants=args.variant, peers=not args.no_peers,
                             timer=timer, on_row=on_row,
                             on_step=lambda s: prog.update(task, description=s[:48]))
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        store.finish_run(run_id, status)
    return run_id, rows


def _print_rows(rows: list[dict], run_id: int, device_kind: str) -> None:
    from rich.table import Table

    t = Table(title=f"run {run_id} ({device_kind})", show_lines=False)
    for col in ("family", "variant", "size", "dtype", "median", "TB/s", "TFLOP/s", "% roof", "vs below",
                "vs torch", "note"):
        t.add_column(col, justify="left" if col in ("family", "variant", "size", "note") else "right")
    for r in rows:
        m = r.get("median_ms")

        def f(k, fmt, r=r):
            return "" if r.get(k) is None else fmt.format(r[k])
        t.add_row(r["family"], r["variant"], r["size"], r["dtype"],
                  "" if m is None else (f"{m * 1e3:.1f} us" if m < 1 else f"{m:.3f} ms"),
                  f("tbps", "{:.3f}"), f("tflops", "{:.3g}"), f("pct_roofline", "{:.1f}%"),
                  f("speedup_vs_below", "{:.2f}x"), f("speedup_vs_baseline", "{:.2f}x"),
                  (r.get("note") or "")[:60] + (" THROTTLED" if r.get("throttled") else ""))
    _console().print(t)


def _wrong_rungs(rows: list[dict]) -> bool:
    """Exit code 1 is for our kernels giving wrong results; a peer less exact than the tolerance is only noted."""
    return any(r.get("correct") is False and r.get("role") == "rung" for r in rows)


def cmd_bench(args) -> int:
    store = _store(args)
    run_id, rows = _bench(args, args.families, store, " ".join(sys.argv[1:]))
    from kernelwright.runtime import device_facts

    if args.json:
        _emit_json({"run_id": run_id, "db": store.path, "rows": rows})
    else:
        _print_rows(rows, run_id, device_facts()["kind"])
        _console().print(f"stored as run {run_id} in {store.path}")
    return EXIT_FAIL if _wrong_rungs(rows) else EXIT_OK


def cmd_roofline(args) -> int:
    from kernelwright.harness.roofline import cache_path, get_ceilings

    c = get_ceilings(remeasure=args.remeasure)
    if args.json:
        _emit_json(c.to_dict())
    else:
        con = _console()
        con.print(f"{c.device} ({c.kind}), driver {c.driver}, measured {c.measured_at}")
        con.print(f"  copy bandwidth (read+write): {c.copy_tbps:.3f} TB/s")
        for k, v in c.matmul_tflops.items():
            con.print(f"  matmul {k:<5}: {v:.1f} TFLOP/s")
        con.print(f"  cached in {cache_path()}")
    return EXIT_OK


def cmd_results(args) -> int:
    store = _store(args)
    if args.run is not None:
        run, rows = store.run(args.run), store.rows(args.run)
        if args.json:
            _emit_json({"run": run, "rows": rows})
        else:
            _print_rows(rows, args.run, run["device_kind"])
        return EXIT_OK
    runs = store.runs()
    if args.json:
        _emit_json(runs)
        return EXIT_OK
    con = _console()
    for r in runs:
        con.print(f"run {r['id']:>4}  {r['started_at']}  {r['status']:<11} {r['n_rows']:>4} rows  "
                  f"{r['device']} [{r['device_kind']}]  torch {r['torch']} triton {r['triton']}  "
                  f"commit {(r['git_commit'] or '?')[:10]}  {r['command'] or ''}")
    if not runs:
        con.print(f"no runs in {store.path}")
    return EXIT_OK


def cmd_compare(args) -> int:
    from kernelwright.store.compare import compare_runs

    deltas = compare_runs(_store(args), args.run_a, args.run_b)
    if args.json:
        _emit_json([d.to_dict() for d in deltas])
        return EXIT_OK
    con = _console()
    if not deltas:
        con.print("no rows in common (same family, variant, size and dtype)")
    color = {"faster": "green", "slower": "red", "same": "white", "ambiguous": "yellow"}
    for d in deltas:
        con.print(f"{d.family:<11} {d.variant:<14} {d.size:<14} {d.dtype:<5} {d.a_ms * 1e3:>10.1f} us -> "
                  f"{d.b_ms * 1e3:>10.1f} us  x{d.ratio:.3f} (noise {100 * d.noise:.1f}%)  "
                  f"[{color[d.verdict]}]{d.verdict}[/{color[d.verdict]}]")
    return EXIT_OK


def _write_report(store, run_id: int | None, output: str) -> str:
    from kernelwright.report.html import render

    if run_id is None:
        run_id = store.latest_run_id()
        if run_id is None:
            raise UsageError(f"run: no run with rows in {store.path}; run `kw bench` first")
    html = render(store.run(run_id), store.rows(run_id))
    with open(output, "w") as fh:
        fh.write(html)
    return output


def _check_output(path: str) -> None:
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK):
        raise UsageError(f"output: folder {parent!r} does not exist or is not writable")


def cmd_report(args) -> int:
    _check_output(args.output)
    path = _write_report(_store(args), args.run, args.output)
    if args.json:
        _emit_json({"report": os.path.abspath(path)})
    else:
        _console().print(f"wrote {path}")
    return EXIT_OK


def cmd_tune(args) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from kernelwright.harness.inputs import dtype_name, generator
    from kernelwright.registry import get_family
    from kernelwright.runtime import current_device

    fam = get_family(args.family)
    tunable = [r for r in fam.rungs if r.tune]
    if args.variant:
        rungs = [fam.rung(v) for v in args.variant]
        for r in rungs:
            if not r.tune:
                raise UsageError(f"variant: rung {r.name!r} has no config space to tune; tunable rungs of "
                                 f"{fam.name}: {', '.join(t.name for t in tunable) or 'none'}")
    else:
        rungs = tunable
    if not rungs:
        raise UsageError(f"family: {fam.name!r} has no tunable rungs")
    if current_device() != "cuda":
        raise Unavailable("tuning times kernels on a CUDA GPU; under the CPU interpreter the timings say nothing "
                          "about a GPU (rungs use their default configs there)")
    sizes = _sizes(args.sizes, fam, "cuda")
    dtypes = _dtypes(args.dtypes, fam)
    plan = [(r, size, dt) for r in rungs for dt in dtypes for size in sizes if not r.refusal(size, {}, dt)]
    results = []
    with Progress(TextColumn("{task.description:<48}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=_console(stderr=True), transient=True, disable=args.json) as prog:
        task = prog.add_task("tune", total=len(plan))
        for r, size, dt in plan:
            gen, _ = generator("cuda")
            case = fam.make_case(size, dt, "cuda", gen)
            res = r.hook("tune")(case, dt, force=args.force,
                                 on_step=lambda s: prog.update(task, description=s[:48]))
            results.append({"rung": r.name, "size": fam.format_size(size), "dtype": dtype_name(dt), **res.to_dict()})
            prog.advance(task)
    if args.json:
        _emit_json(results)
        return EXIT_OK
    con = _console()
    for res in results:
        best = ", ".join(f"{k}={v}" for k, v in res["best"].items())
        timed = sum(t["median_ms"] is not None for t in res["trials"])
        pruned = sum(t["note"].startswith("pruned") for t in res["trials"])
        failed = len(res["trials"]) - timed - pruned
        ms = "" if res["median_ms"] is None else f" {res['median_ms'] * 1e3:.1f} us"
        con.print(f"{res['rung']:<18} {res['size']:<16} {res['dtype']:<5} {res['source']:<7}{ms}  {best}"
                  + (f"  ({timed} timed, {pruned} pruned, {failed} failed)" if res["source"] == "tuned" else ""))
    return EXIT_OK


def cmd_inspect(args) -> int:
    from kernelwright.harness import inspect as kin
    from kernelwright.harness.inputs import dtype_name, parse_dtype
    from kernelwright.registry import get_family

    fam = get_family(args.family)
    rung = fam.rung(args.variant)
    if not rung.artifacts:
        raise UsageError(f"variant: rung {rung.name!r} has no compiled artifacts to inspect (backend "
                         f"{rung.backend}); rungs with them: "
                         f"{', '.join(r.name for r in fam.rungs if r.artifacts) or 'none'}")
    size = fam.parse_size(args.size) if args.size else fam.sweep("cuda")[0]
    dtype = parse_dtype(args.dtype) if args.dtype else (rung.dtypes or fam.dtypes)[0]
    why = rung.refusal(size, {}, dtype)
    if why:
        raise UsageError(f"variant {rung.name!r}: {why}")
    reports = [kin.analyze(a) for a in rung.hook("artifacts")(size, dtype)]
    if args.json:
        _emit_json({"family": fam.name, "variant": rung.name, "size": fam.format_size(size),
                    "dtype": dtype_name(dtype), "kernels": [r.to_dict() for r in reports]})
        return EXIT_OK
    print(f"{fam.name} {rung.name} {fam.format_size(size)} {dtype_name(dtype)}")
    for r in reports:
        print(kin.format_report(r))
        if args.sass and getattr(r, "sass", None):
            print(r.sass)
    return EXIT_OK


def cmd_run(args) -> int:
    _check_output(args.output)
    store = _store(args)
    t0 = time.time()
    run_id, rows = _bench(args, ["all"], store, " ".join(sys.argv[1:]))
    path = _write_report(store, run_id, args.output)
    from kernelwright.runtime import device_facts

    if args.json:
        _emit_json({"run_id": run_id, "db": store.path, "report": os.path.abspath(path), "rows": rows})
    else:
        _print_rows(rows, run_id, device_facts()["kind"])
        _console().print(f"run {run_id}: {len(rows)} rows in {time.time() - t0:.0f} s, stored in {store.path}; "
                         f"report: {path}")
    return EXIT_FAIL if _wrong_rungs(rows) else EXIT_OK


def _eval_config(args):
    from kernelwright.eval import EvalConfig

    for name, value in (("timeout", args.timeout), ("memory-mb", args.memory_mb), ("timing-sets", args.timing_sets)):
        if value is not None and value <= 0:
            raise UsageError(f"{name}: expected a positive number, got {value}")
    fields = {"device": args.device or "auto", "compile_baseline": {"auto": None, "on": True, "off": False}[
        args.compile_baseline], "alt_size": not args.no_alt_size}
    for key, value in (("timeout_s", args.timeout), ("memory_mb", args.memory_mb), ("seed", args.seed),
                       ("timing_sets", args.timing_sets)):
        if value is not None:
            fields[key] = value
    return EvalConfig(**fields)


def cmd_eval(args) -> int:
    from kernelwright.eval import Evaluator, describe

    for role, path in (("reference", args.reference), ("candidate", args.candidate)):
        if not os.path.isfile(path):
            raise UsageError(f"{role}: no file {path!r}")
    ev = Evaluator(_eval_config(args))
    with _console(stderr=True).status("evaluating", spinner="dots") if not args.json else contextlib.nullcontext():
        v = ev.evaluate(args.reference, args.candidate)
    _archive(args, [(args.reference, args.candidate, v)])
    if args.json:
        _emit_json(v.to_dict())
    else:
        print(describe(v))
    return EXIT_OK if v.passed else EXIT_FAIL


def cmd_eval_set(args) -> int:
    from kernelwright.eval import Evaluator, evaluate_set

    ev = Evaluator(_eval_config(args))
    con = _console()

    def show(name, v):
        if not args.json:
            from rich.markup import escape

            sp = f"{v.speedup_eager:.3g}x" if v.speedup_eager else "-"
            mark = "[green]PASS[/green]" if v.passed else "[red]FAIL[/red]"
            why = "" if v.passed else escape(f"[{v.category}] {v.reason[:90]}")
            con.print(f"{mark} {escape(name):<28} {sp:>8}  {why}")

    judged = []

    def show_and_keep(name, v):
        judged.append(v)
        show(name, v)

    report = evaluate_set(args.directory, args.candidates, evaluator=ev, on_verdict=show_and_keep)
    _archive(args, [(v.problem, v.candidate, v) for v in judged if v.problem and v.candidate])
    if args.json:
        _emit_json(report.to_dict())
    else:
        fast = "  ".join(f"{k} {v:.2f}" for k, v in report.fast_p.items())
        gm = f"{report.geomean_speedup:.3g}x" if report.geomean_speedup else "-"
        con.print(f"{report.n_passed}/{report.n_problems} passed ({report.n_correct} correct); {fast}; geomean "
                  f"speedup vs eager {gm} (over those that passed)")
        if report.unfit:
            con.print(f"unfit problems (an all-zero output passes): {', '.join(report.unfit)}")
    return EXIT_OK if report.n_passed == report.n_problems else EXIT_FAIL


def _archive(args, judged) -> None:
    """Record verdicts of (problem file, candidate file, verdict) in the archive, unless ``--no-archive``; a
    candidate file that cannot be read (it failed to load) is recorded with an empty source."""
    if args.no_archive or not judged:
        return
    from kernelwright.eval.archive import Archive

    with Archive(args.archive) as arc:
        for problem, candidate, v in judged:
            if not os.path.isfile(str(problem)):
                continue
            try:
                with open(candidate) as fh:
                    source = fh.read()
            except OSError:
                source = ""
            arc.record(problem, source, v.to_dict(), device=v.device)


def cmd_archive(args) -> int:
    from kernelwright.eval.archive import archive_cli

    return archive_cli(args)


def cmd_optimize(args) -> int:
    from kernelwright.search.cli import run_optimize

    return run_optimize(args)


COMMANDS = {"list": cmd_list, "check": cmd_check, "bench": cmd_bench, "roofline": cmd_roofline,
            "results": cmd_results, "compare": cmd_compare, "report": cmd_report, "tune": cmd_tune,
            "inspect": cmd_inspect, "run": cmd_run, "eval": cmd_eval, "eval-set": cmd_eval_set,
            "archive": cmd_archive, "optimize": cmd_optimize}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not args.cmd:
        _parser().print_help()
        return EXIT_USAGE
    try:
        from kernelwright import runtime
        from kernelwright.store.db import check_writable, default_path

        if args.cmd in ("bench", "run", "results", "compare", "report"):
            check_writable(args.db or default_path())  # before any work
        runtime.select_device(args.device)
        return COMMANDS[args.cmd](args)
    except UsageError as e:
        print(f"kw: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except Unavailable as e:
        print(f"kw: unavailable: {e}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except KeyboardInterrupt:
        print("kw: interrupted; finished rows are stored", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
