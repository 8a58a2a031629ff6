"""``kw optimize REFERENCE.py``: the command-line face of :func:`kernelwright.search.optimize.optimize`.

``add_optimize_parser(sub, common)`` adds the subcommand to ``kw``'s parser; ``run_optimize(args)`` runs it.
Standalone: ``python -m kernelwright.search.cli REFERENCE.py ...``.

Exit codes: 0 a verified candidate was found (and written), 1 none passed, 2 usage error (a bad reference file,
an unreachable LLM endpoint or Ray address: all checked before any work starts), 130 interrupted (the best so
far is written).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from kernelwright.errors import UsageError

EXIT_OK, EXIT_NONE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
PROPOSERS = ("builtin", "llm")


def add_optimize_parser(sub, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p = sub.add_parser("optimize", parents=[common], help="search for a faster ModelNew for a KernelBench problem",
                       description="Propose candidates (built-in rewrites with kernelwright ops and torch.compile, "
                                   "and/or an LLM), judge each with the evaluator, keep the fittest verified ones "
                                   "and mutate them; write the best ModelNew and its verdict.")
    p.add_argument("reference", metavar="REFERENCE.py", nargs="+",
                   help="the problem file (Model, get_inputs, get_init_inputs); several files or folders search "
                        "each problem in turn and report fast_p and the geometric-mean speedup (a set)")
    p.add_argument("--budget", type=int, default=32, help="attempts: candidates judged (default 32)")
    p.add_argument("-o", "--out", default=None,
                   help="where the best candidate goes (default ./<stem>_optimized.py; its verdict beside it, .json); "
                        "for a set, the output folder (default ./optimized)")
    p.add_argument("--archive", default=None, help="archive SQLite file (default $KW_ARCHIVE or "
                                                   "./kernelwright-archive.db); every evaluation is recorded")
    p.add_argument("--proposers", default=None,
                   help="comma list of builtin, llm (default: builtin, plus llm when an endpoint is given)")
    p.add_argument("--llm-url", default=None, help="OpenAI-compatible endpoint (default $KW_LLM_URL)")
    p.add_argument("--llm-model", default=None, help="model name (default $KW_LLM_MODEL, else the first served)")
    p.add_argument("--llm-key", default=None, help="API key (default $KW_LLM_KEY)")
    p.add_argument("--workers", type=int, default=None,
                   help="evaluation workers (default: one per GPU, or one per CPU core; with --ray the cluster's)")
    p.add_argument("--ray", metavar="ADDRESS", default=None,
                   help="run the workers as Ray actors on the cluster at ADDRESS (HOST:PORT, ray://HOST:PORT, auto; "
                        "'local' starts a private instance)")
    p.add_argument("--seed", type=int, default=None, help="evaluator seed for every candidate (default: drawn)")
    p.add_argument("--timeout", type=float, default=None, help="seconds per candidate (default the evaluator's)")
    p.add_argument("--compile-modes", default=None,
                   help="torch.compile modes the built-in proposer tries, comma list or 'none' (default: all three "
                        "on CUDA, none on CPU)")
    p.add_argument("--population", type=int, default=8, help="fittest candidates kept for mutation (default 8)")
    p.add_argument("--no-compile-baseline", action="store_true",
                   help="do not time torch.compile of the reference (saves its compile per problem; verdicts then "
                        "carry no speedup vs compile)")
    p.add_argument("--finalists", type=int, default=0,
                   help="at the end, judge again the best N candidates within --finalist-margin of the best and "
                        "rank them by the mean of their judgments (default 0: off; 3 settles near-ties)")
    p.add_argument("--finalist-margin", type=float, default=0.05,
                   help="a finalist is within this fraction of the best speedup (default 0.05)")
    p.add_argument("--problem-seconds", type=float, default=None,
                   help="a set: wall-clock seconds per problem's search (in-flight candidates finish)")
    p.add_argument("--deadline", type=float, default=None,
                   help="a set: wall-clock seconds for the whole set; problems not reached count as failed")
    p.add_argument("--resume", action="store_true",
                   help="a set: skip problems with a search record in the output folder already")
    return p


def _proposer_names(args, have_llm: bool) -> list[str]:
    if args.proposers is None:
        return ["builtin", "llm"] if have_llm else ["builtin"]
    names = [n.strip() for n in args.proposers.split(",") if n.strip()]
    bad = [n for n in names if n not in PROPOSERS]
    if bad or not names:
        raise UsageError(f"--proposers: expected a comma list of {', '.join(PROPOSERS)}, got {args.proposers!r}")
    return names


def _compile_modes(text: str | None):
    if text is None:
        return None
    if text.strip().lower() in ("none", ""):
        return ()
    return tuple(m.strip() for m in text.split(",") if m.strip())


def run_optimize(args: argparse.Namespace) -> int:
    """Run ``kw optimize``; returns the exit code."""
    from kernelwright import runtime
    from kernelwright.search.llm import LLMClient
    from kernelwright.search.optimize import check_reference, optimize

    out = sys.stderr if getattr(args, "json", False) else sys.stdout
    say = lambda line: print(line, file=out, flush=True)
    pool = archive = None
    try:
        device = runtime.current_device()
        if args.budget < 1:
            raise UsageError(f"--budget: expected at least 1, got {args.budget}")
        if args.finalists < 0:
            raise UsageError(f"--finalists: expected 0 or more, got {args.finalists}")
        if not 0 <= args.finalist_margin <= 1:
            raise UsageError(f"--finalist-margin: expected a fraction between 0 and 1, got {args.finalist_margin}")
        refs = list(args.reference)
        is_set = len(refs) > 1 or os.path.isdir(refs[0])
        if is_set:
            from kernelwright.search.optset import problem_files

            files = problem_files(refs)
            for f in files:
                check_reference(f)
        else:
            if args.problem_seconds or args.deadline or args.resume:
                raise UsageError("--problem-seconds, --deadline and --resume are for a set (several files or a "
                                 "folder)")
            args.reference = refs[0]
            check_reference(args.reference)
        for flag in ("problem_seconds", "deadline"):
            if getattr(args, flag) is not None and getattr(args, flag) <= 0:
                raise UsageError(f"--{flag.replace('_', '-')}: expected a positive number of seconds")
        client = LLMClient.from_env(args.llm_url, args.llm_model, args.llm_key)
        names = _proposer_names(args, client is not None)
        if is_set and names != ["builtin"]:
            raise UsageError("a set is searched with the built-in proposer only (--proposers builtin)")
        if "llm" in names:
            if client is None:
                raise UsageError("--proposers llm: give the endpoint with --llm-url or KW_LLM_URL")
            model = client.check()
            say(f"LLM: {client.base} (model {model})")
        if args.ray:
            from kernelwright.search.pool import RayPool

            pool = RayPool(args.ray, device=device, workers=args.workers)
        else:
            from kernelwright.search.pool import LocalPool

            pool = LocalPool(args.workers, device=device)
        from kernelwright.eval.archive import Archive

        archive = Archive(args.archive)
        proposers = []
        options = {"timeout_s": args.timeout} if args.timeout else {}
        if args.no_compile_baseline:
            options["compile_baseline"] = False
        options = options or None
        if is_set:
            from kernelwright.search.optset import format_summary, optimize_set

            say(f"a set of {len(files)} problems; evaluating on {pool.describe()}, budget {args.budget} each, "
                f"archive {archive.path}")
            s = optimize_set(refs, args.out or "optimized", budget=args.budget, pool=pool, archive=archive,
                             device=device, seed=args.seed, eval_options=options, population=args.population,
                             compile_modes=_compile_modes(args.compile_modes), problem_seconds=args.problem_seconds,
                             deadline_s=args.deadline, resume=args.resume, log=say, finalists=args.finalists,
                             finalist_margin=args.finalist_margin)
            say(format_summary(s))
            say(f"wrote {os.path.join(args.out or 'optimized', 'summary.json')}")
            if getattr(args, "json", False):
                print(json.dumps(s, indent=2, default=str))
            return EXIT_OK if s["n_passed"] else EXIT_NONE
        if "builtin" in names:
            from kernelwright.search.builtin import BuiltinProposer

            bp = BuiltinProposer(args.reference, device=device, compile_modes=_compile_modes(args.compile_modes),
                                 seed=args.seed or 0)
            a = bp.analysis
            sites = ", ".join(f"{s.kind}@{s.anchor}" for s in a.sites) or "none"
            say(f"built-in: sites {sites}" + (f"; {a.error}" if a.error else ""))
            proposers.append(bp)
        if "llm" in names:
            from kernelwright.search.llm import LLMProposer

            proposers.append(LLMProposer(client, args.reference, archive=archive))
        say(f"evaluating on {pool.describe()}, budget {args.budget}, archive {archive.path}")
        result = optimize(args.reference, budget=args.budget, proposers=proposers, pool=pool, archive=archive,
                          out_path=args.out, seed=args.seed, device=device, eval_options=options,
                          population=args.population, log=say, finalists=args.finalists,
                          finalist_margin=args.finalist_margin)
    except UsageError as e:
        print(f"kw: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        if pool is not None:
            pool.close()
        if archive is not None:
            archive.close()
    s = result.summary()
    passed = s["passed"]
    if result.best is not None:
        b = result.best
        say(f"best: {b.proposal.label} ({b.proposal.origin}): {b.fitness:.3g}x vs eager; {passed} of "
            f"{s['evaluated']} judged passed, {s['attempts']} attempts in {s['seconds']:.1f} s ({result.stopped})")
        say(f"wrote {result.out_path} and {result.verdict_path}")
    else:
        why = "no candidate stands (every finalist failed its re-judgment)" if result.finals else "no candidate passed"
        say(f"{why}: {s['evaluated']} judged, {s['attempts']} attempts in {s['seconds']:.1f} s ({result.stopped})")
    if getattr(args, "json", False):
        print(json.dumps(s, indent=2, default=str))
    if result.stopped == "interrupted":
        return EXIT_INTERRUPTED
    return EXIT_OK if result.found else EXIT_NONE


def main(argv: list[str] | None = None) -> int:
    """``python -m kernelwright.search.cli``: the same command without the rest of ``kw``."""
    from kernelwright import runtime

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--device", default=None, help="auto (default, or $KW_DEVICE), cpu or cuda")
    common.add_argument("--db", default=None, help=argparse.SUPPRESS)
    common.add_argument("--json", action="store_true", help="the summary as JSON on stdout")
    parser = argparse.ArgumentParser(prog="kw")
    sub = parser.add_subparsers(dest="cmd", metavar="COMMAND")
    add_optimize_parser(sub, common)
    args = parser.parse_args(["optimize", *(argv if argv is not None else sys.argv[1:])])
    try:
        runtime.select_device(args.device)
    except UsageError as e:
        print(f"kw: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return run_optimize(args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
