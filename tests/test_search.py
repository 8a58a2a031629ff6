"""``kw optimize``: the built-in proposer's rewrites, the search loop, the LLM proposer against a stub endpoint, and
the evaluation pools (local processes, a local Ray instance). CPU through Triton's interpreter, tiny shapes.

The in-process checks load problems at 1/64 of their sizes in float32 (``load_problem(..., scale=, dtype=)``)
and assert the kernels really ran (``kernels.FALLBACKS`` stays empty). The end-to-end checks go through the real
evaluator in worker processes on the fixtures in ``tests/search_fixtures/``.
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import socket
import sqlite3
import threading
import time
from pathlib import Path

import pytest
import torch

from kernelwright.errors import UsageError
from kernelwright.eval.archive import Archive
from kernelwright.eval.problemset import PROBLEMS_DIR, load_problem
from kernelwright.search import kernels
from kernelwright.search.builtin import VENDOR_KINDS, BuiltinProposer, analyze, candidate_source
from kernelwright.search.cli import main as optimize_main
from kernelwright.search.llm import LLMClient, LLMError, LLMProposer, extract_code
from kernelwright.search.optimize import optimize
from kernelwright.search.pool import LocalPool, RayPool, check_ray_address, default_workers
from kernelwright.search.rewrite import PlanError, build_forward
from kernelwright.search.state import Proposal

FIXTURES = Path(__file__).parent / "search_fixtures"
SOFTMAX = str(FIXTURES / "softmax_tiny.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _in_process(problem: str | Path, source: str, scale: float | None = 1 / 64) -> float:
    """Relative error of the candidate source's ModelNew against the reference Model (same weights, same inputs),
    both loaded in this process at ``scale``, float32."""
    ref = load_problem(problem, scale=scale, dtype=torch.float32)
    cand = load_problem(source, scale=scale, dtype=torch.float32, name="candidate")
    model, init = ref.model(0), ref.init_inputs(0)
    torch.manual_seed(0)
    new = cand.module.ModelNew(*init).to(torch.float32).eval()
    new.load_state_dict(model.state_dict())
    xs = ref.inputs(1)
    with torch.no_grad():
        want, got = model(*xs).double(), new(*xs).double()
    assert got.shape == want.shape
    return ((got - want).norm() / want.norm()).item()


# --- the built-in proposer ----------------------------------------------------------------------------------------
# (problem, the site kinds the analysis must find, the kinds the all-sites plan must use)
CASES = [
    ("level1/06_softmax_narrow_fp32.py", {"softmax"}, {"softmax"}),
    ("level1/08_log_softmax_fp32.py", {"log_softmax"}, {"log_softmax"}),
    ("level1/09_rms_norm_bf16.py", {"rms_norm"}, {"rms_norm"}),
    ("level2/01_matmul_bias_relu_bf16.py", {"linear", "linear_epilogue"}, {"linear_epilogue"}),
    ("level2/12_gpt_mlp_residual_fp32.py", {"layer_norm", "linear", "linear_epilogue"},
     {"layer_norm", "linear_epilogue"}),
    ("level2/13_out_proj_residual_bf16.py", {"linear", "linear_epilogue", "add"}, {"linear_epilogue"}),
    ("level2/05_add_rms_norm_bf16.py", {"add", "rms_norm", "add_rms_norm"}, {"add_rms_norm"}),
    ("level2/11_rope_gqa_attention_bf16.py", {"rope", "rope_pair", "attention"}, {"rope_pair", "attention"}),
]


@pytest.mark.parametrize("rel, found, used", CASES, ids=[c[0].split("/")[1][:-3] for c in CASES])
def test_builtin_rewrites_problems_and_matches_reference(rel, found, used):
    path = PROBLEMS_DIR / rel
    bp = BuiltinProposer(str(path), device="cpu")
    kinds = {s.kind for s in bp.analysis.sites}
    assert found <= kinds, (kinds, bp.analysis.dropped)
    assert bp.analysis.shapes_known
    for s in bp.analysis.sites:  # variants: the family's choice first, never a CUDA-only rung on CPU
        assert s.variants[0] is None and not any(v and v.startswith("cuda_") for v in s.variants)
    combo = bp.combo()
    assert {k for k, _ in combo.sites} == used
    kernels.FALLBACKS.clear()
    src = bp.proposal(combo).source
    assert path.read_text().rstrip("\n") in src and "class ModelNew(Model)" in src and "KW_PLAN" in src
    assert _in_process(path, src) < 1e-5
    assert not kernels.FALLBACKS, dict(kernels.FALLBACKS)


def test_add_rms_norm_stores_the_sum_only_when_something_else_reads_it():
    from kernelwright.search.builtin import _instance
    from kernelwright.search.rewrite import graph_source, rewrite

    def wrapper_call(rel):  # the kw_add_rms_norm line of the rewritten forward
        bp = BuiltinProposer(str(PROBLEMS_DIR / rel), device="cpu")
        site = next(s for s in bp.analysis.sites if s.kind == "add_rms_norm")
        model = _instance(bp.problem)[0]
        src = graph_source(rewrite(model, bp.problem.Model, {"sites": [[*site.key, None]]}))
        return next(line for line in src.splitlines() if "= kw_add_rms_norm(" in line)

    assert ", False, variant" in wrapper_call("level2/05_add_rms_norm_bf16.py")  # y alone: h never stored
    assert ", False, variant" not in wrapper_call("level3/01_llama_block_bf16.py")  # h is the next residual


def test_cublaslt_epilogue_is_offered_on_cuda_and_gives_way_elsewhere():
    # planned for a CUDA run (the analysis needs no GPU): bias + ReLU / tanh-GELU without a residual
    for rel, offered in [("level2/01_matmul_bias_relu_bf16.py", True), ("level2/02_matmul_bias_gelu_fp16.py", True),
                         ("level2/13_out_proj_residual_bf16.py", False)]:
        sites = {s.kind: s for s in analyze(str(PROBLEMS_DIR / rel), "cuda").sites}
        assert (kernels.CUBLASLT in sites["linear_epilogue"].variants) == offered, rel
    assert kernels.CUBLASLT not in analyze(str(PROBLEMS_DIR / "level2/01_matmul_bias_relu_bf16.py"),
                                           "cpu").sites[-1].variants
    bp = BuiltinProposer(str(PROBLEMS_DIR / "level2/01_matmul_bias_relu_bf16.py"), device="cuda",
                         compile_modes=("default",))
    labels = [bp.label(p) for p in bp.queue]  # one fused site: its variants before any compile, cuBLASLt's first
    assert labels[:2] == ["linear_epilogue@relu=cublaslt", "linear_epilogue@relu=auto"], labels
    assert labels.count("linear_epilogue@relu=cublaslt") == 1
    assert labels.index("compile=default") > labels.index("linear_epilogue@relu=triton_tiled")
    # on tensors it cannot take (here: CPU) the variant gives way to the family's choice, and says so
    x, w, b = torch.randn(5, 16), torch.randn(8, 16), torch.randn(8)
    kernels.FALLBACKS.clear()
    y = kernels.kw_linear_epilogue(x, w, b, "gelu_tanh", variant=kernels.CUBLASLT)
    want = torch.nn.functional.gelu(torch.nn.functional.linear(x.double(), w.double(), b.double()), approximate="tanh")
    torch.testing.assert_close(y.double(), want, rtol=1e-4, atol=1e-4)
    assert kernels.FALLBACKS[("kw_linear_epilogue", "auto")] == 1


@pytest.mark.gpu
@pytest.mark.parametrize("activation", ["relu", "gelu_tanh"])
def test_gpu_cublaslt_epilogue_matches_float64(activation):
    x, w, b = (torch.randn(*s, device="cuda", dtype=torch.float16) for s in ((3, 100, 256), (384, 256), (384,)))
    kernels.FALLBACKS.clear()
    y = kernels.kw_linear_epilogue(x, w, b, activation, variant=kernels.CUBLASLT)
    z = torch.nn.functional.linear(x.double(), w.double(), b.double())
    want = torch.relu(z) if activation == "relu" else torch.nn.functional.gelu(z, approximate="tanh")
    assert not kernels.FALLBACKS and y.shape == (3, 100, 384)
    torch.testing.assert_close(y.double(), want, rtol=2e-3, atol=2e-2)


def test_every_rung_of_a_single_op_problem_is_proposed_first():
    bp = BuiltinProposer(str(PROBLEMS_DIR / "level1/07_softmax_wide_bf16.py"), device="cpu")
    (site,) = bp.analysis.sites
    assert "fused" not in site.variants  # refuses 65536-wide rows: never proposed at this size
    # the rung the family's own choice runs here is judged once, as ``auto``, not again by name
    assert site.auto == "split" and site.variants[0] is None and "split" not in site.variants
    from kernelwright.search.state import SearchState

    state = SearchState("", "", "cpu")
    labels = [bp.propose(state).label for _ in range(len(site.variants))]
    assert labels == [site.label(v) for v in site.variants]


def test_compile_plans_move_forward_once_compile_beats_a_candidate():
    from kernelwright.search.state import Evaluated, SearchState

    bp = BuiltinProposer(str(PROBLEMS_DIR / "level2/06_residual_layer_norm_fp32.py"), device="cpu",
                         compile_modes=("default",))
    state = SearchState("", "", "cpu")
    first = bp.propose(state)
    assert first.plan["compile"] is None and "compile=default" in [bp.label(p) for p in bp.queue[1:]]
    # our first candidate: 1.2x eager but 0.57x torch.compile (run 26) -> compile next, then the rest in order
    bp.feedback(Evaluated(0, first, {"passed": True, "speedup_eager": 1.2, "speedup_compile": 0.57}, 1.2))
    assert bp.propose(state).label == "compile=default"
    # not when compile was no faster (a second proposer starts over)
    bp2 = BuiltinProposer(str(PROBLEMS_DIR / "level2/06_residual_layer_norm_fp32.py"), device="cpu",
                          compile_modes=("default",))
    first2 = bp2.propose(state)
    queued = [bp2.label(p) for p in bp2.queue]
    bp2.feedback(Evaluated(0, first2, {"passed": True, "speedup_eager": 1.2, "speedup_compile": 1.1}, 1.2))
    assert bp2.propose(state).label == queued[0] != "compile=default"


def test_multi_site_problems_leave_the_gemms_to_cublas_first():
    # l3/01 (runs 19-23): its 49 s box held one plan, every site including the seven GEMMs, at 0.87x eager
    bp = BuiltinProposer(str(PROBLEMS_DIR / "level3/01_llama_block_bf16.py"), device="cuda",
                         compile_modes=("default",))
    first, second = bp.queue[:2]
    assert first.sites and not any(k in VENDOR_KINDS for k, _ in first.sites)
    assert {k for k, _ in first.sites} >= {"rope_pair", "swiglu", "attention"}  # the row ops all stay
    assert second.sites == bp.combo().sites and any(k in VENDOR_KINDS for k, _ in second.sites)
    # one site (a GEMM with its epilogue) is a ladder question: its variants come first, as before
    bp1 = BuiltinProposer(str(PROBLEMS_DIR / "level2/13_out_proj_residual_bf16.py"), device="cpu")
    assert bp1.label(bp1.queue[0]) == "linear_epilogue@add=auto"


def test_best_option_per_site_combines_what_was_learned():
    from kernelwright.search.state import Evaluated, SearchState

    bp = BuiltinProposer(str(PROBLEMS_DIR / "level2/03_swiglu_mlp_bf16.py"), device="cpu")
    state = SearchState("", "", "cpu")
    # nothing judged yet: the GEMMs left to cuBLAS first, then every site
    assert [bp.propose(state).label for _ in range(2)] == ["swiglu@mul=auto", "all"]
    assert bp.coordinate_best() is None
    fits = {"all": 1.0, "all -linear@linear_2": 1.2, "all +swiglu@mul=fused": 1.1, "all -swiglu@mul": 0.0}
    for label, fit in fits.items():
        plan = next(p for p in [bp.combo(), *bp.queue] if bp.label(p) == label)
        prop = Proposal("x", label, "builtin", plan=plan.as_plan())
        bp.feedback(Evaluated(0, prop, {"passed": fit > 0, "speedup_eager": fit}, fit))
    best = bp.coordinate_best()
    assert bp.label(best) == "all -linear@linear_2 +swiglu@mul=fused"
    assert bp.propose(state).label == "all -linear@linear_2 +swiglu@mul=fused"  # proposed next


def test_hand_written_patterns_and_modules():
    """A hand-written RMSNorm, nn.Linear modules, silu written with sigmoid, a residual add and a softmax."""
    path = FIXTURES / "block_by_hand_tiny.py"
    a = analyze(str(path), "cpu")
    assert {(s.kind, s.anchor) for s in a.sites} >= {("rms_norm", "mul_1"), ("linear", "gate"), ("linear", "up"),
                                                       ("linear", "down"), ("swiglu", "mul_3"),
                                                       ("softmax", "softmax"), ("add", "add"),
                                                       ("linear_epilogue", "add_2")}  # h + down(m)
    plan = {"sites": [[s.kind, s.anchor, None] for s in a.sites if s.kind not in ("add", "linear_epilogue")],
            "compile": None}
    kernels.FALLBACKS.clear()
    src = candidate_source(path.read_text(), plan, label="all")
    assert _in_process(path, src, scale=None) < 1e-5
    assert not kernels.FALLBACKS, dict(kernels.FALLBACKS)


def test_explicit_rungs_and_mutations_stay_correct():
    path = PROBLEMS_DIR / "level2/03_swiglu_mlp_bf16.py"
    bp = BuiltinProposer(str(path), device="cpu", seed=5)
    from kernelwright.search.builtin import _Plan

    parent = bp.combo()
    for _ in range(3):  # a few random mutations, each still computes the reference's result
        child = bp.mutate(parent, _Plan({("swiglu", "mul"): "naive"}))
        if child is None or not child.sites:
            continue
        assert _in_process(path, bp.proposal(child).source) < 1e-5
    # a rung that refuses the shape gives way to the family's choice; an input the op cannot take runs torch
    kernels.FALLBACKS.clear()
    a, b3 = torch.randn(4, 8), torch.randn(2, 8, 5)
    assert torch.equal(kernels.kw_matmul(a, b3, variant="triton_tiled"), torch.matmul(a, b3))
    assert kernels.FALLBACKS[("kw_matmul", "torch")] == 1
    x = torch.randn(2, 40000)  # wider than the fused rung's registers
    assert torch.allclose(kernels.kw_softmax(x, -1, variant="fused"), torch.softmax(x, -1), atol=1e-6)
    assert kernels.FALLBACKS[("kw_softmax", "auto")] == 1 and ("kw_softmax", "torch") not in kernels.FALLBACKS


def test_attempt_falls_back_in_order():
    calls = []

    def call(v):
        calls.append(v)
        if v == "wide":
            raise UsageError("variant 'wide': refuses this width")
        return "ran " + str(v)

    assert kernels.attempt(call, "wide", lambda: "torch") == "ran None" and calls == ["wide", None]
    assert kernels.attempt(lambda v: (_ for _ in ()).throw(UsageError("x: bad dtype")), None, lambda: "torch") \
        == "torch"


def test_plan_naming_a_missing_site_is_an_error():
    prob = load_problem(SOFTMAX)
    model = prob.model()
    with pytest.raises(PlanError, match="no rms_norm site at node 'softmax'"):
        build_forward(model, prob.Model, {"sites": [["rms_norm", "softmax", None]]})
    with pytest.raises(PlanError, match="compile mode"):
        build_forward(model, prob.Model, {"sites": [], "compile": "fastest"})


# --- the search, end to end through the evaluator -----------------------------------------------------------------
def _rows(db: Path) -> list[sqlite3.Row]:
    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        return con.execute("SELECT * FROM candidates ORDER BY id").fetchall()
    finally:
        con.close()


def test_optimize_cli_end_to_end_with_two_local_workers(tmp_path, capsys):
    db, out = tmp_path / "archive.db", tmp_path / "best.py"
    rc = optimize_main([SOFTMAX, "--budget", "4", "--workers", "2", "--archive", str(db), "-o", str(out),
                        "--seed", "7", "--device", "cpu", "--json"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    summary = json.loads(captured.out)
    assert summary["evaluated"] == 4 and summary["attempts"] == 4 and summary["stopped"] == "budget"
    progress = [line for line in captured.err.splitlines() if line.startswith("[")]
    assert len(progress) == 4  # one line per evaluation
    assert "2 local worker(s)" in captured.err
    assert "class ModelNew(Model)" in out.read_text()
    doc = json.loads(out.with_suffix(".json").read_text())
    assert doc["verdict"]["passed"] and doc["verdict"]["seed"] == 7 and doc["origin"] == "builtin"
    rows = _rows(db)
    assert len(rows) == 4 and len({r["code_hash"] for r in rows}) == 4  # every evaluation recorded, once
    assert out.read_text() == next(r["code"] for r in rows if r["id"] == doc["archive_id"])


def test_optimize_a_set_resumes_and_reports_fast_p(tmp_path, capsys):
    """A folder is a set: one search per problem, a record each, the best candidates, fast_p and the geometric
    mean over every record; a second run with --resume skips what is done; a usage error for the set flags on a
    single file."""
    import shutil

    from kernelwright.search.optset import summarize

    sets = tmp_path / "set"
    sets.mkdir()
    shutil.copy(SOFTMAX, sets / "a_softmax.py")
    shutil.copy(FIXTURES / "linear_relu_tiny.py", sets / "b_linear.py")
    (sets / "_helper.py").write_text("X = 1\n")  # leading underscore: not a problem
    out, db = tmp_path / "out", tmp_path / "archive.db"
    args = [str(sets), "--budget", "2", "--workers", "1", "--archive", str(db), "-o", str(out), "--seed", "3",
            "--device", "cpu", "--problem-seconds", "120", "--json"]
    rc = optimize_main(args)
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    s = json.loads(captured.out)
    assert s["n_problems"] == s["n_set"] == 2 and s["n_passed"] == 2 and s["fast_0"] == 1.0
    assert s["fast_1"] == s["fast_1_clear"] == 0.0  # CPU: the interpreter never beats eager
    assert 0 < s["geomean_speedup"] < 1 and s["geomean_with_eager_fallback"] == 1.0
    recs = {r["problem"]: r for r in s["rows"]}
    assert set(recs) == {"a_softmax", "b_linear"}
    # the family's choice is named by the rung it ran (fused, at this fixture's narrow rows)
    assert recs["a_softmax"]["rungs_judged"] == "2/4" and recs["a_softmax"]["best_rung"] in ("auto (fused)", "split")
    rec = json.loads((out / "set" / "a_softmax.search.json").read_text())
    assert len(rec["attempts"]) == 2 and rec["rungs_total"] == 4
    assert "class ModelNew(Model)" in (out / "set" / "candidates" / "a_softmax.py").read_text()
    assert json.loads((out / "summary.json").read_text())["rows"] == s["rows"]
    assert len(_rows(db)) == 4

    rc = optimize_main([*args, "--resume"])
    captured = capsys.readouterr()
    assert rc == 0 and captured.err.count("done earlier") == 2 and len(_rows(db)) == 4
    # a record missing from the output folder counts as a failed problem of the set
    (out / "set" / "b_linear.search.json").unlink()
    part = summarize(out, n_set=2)
    assert part["n_problems"] == 1 and part["fast_0"] == 0.5

    assert optimize_main([SOFTMAX, "--deadline", "5", "--device", "cpu"]) == 2
    assert "for a set" in capsys.readouterr().err
    assert optimize_main([str(tmp_path / "nothing_here"), str(sets), "--device", "cpu"]) == 2
    assert "no file or folder" in capsys.readouterr().err


class _ListProposer:
    name = "list"

    def __init__(self, sources):
        self.sources, self.got = list(sources), []

    def propose(self, state):
        if not self.sources:
            return None
        return Proposal(self.sources.pop(0), f"item {len(self.got) + 1}", self.name)

    def feedback(self, evaluated):
        self.got.append(evaluated)


_GOOD = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)
"""
_SLEEPER = _GOOD.replace("    def forward", "    def __init__(self):\n        super().__init__()\n"
                                          "        import time\n        time.sleep(20)\n\n    def forward")


def test_a_killed_worker_never_corrupts_the_archive(tmp_path):
    db = tmp_path / "archive.db"
    proposer = _ListProposer([_SLEEPER, _GOOD])
    pool = LocalPool(1, device="cpu", retries=0)

    def kill_when_busy():
        while pool.worker_pids()[0] is None:
            time.sleep(0.05)
        time.sleep(2.0)  # mid-evaluation of the sleeper
        os.kill(pool.worker_pids()[0], signal.SIGKILL)

    killer = threading.Thread(target=kill_when_busy)
    killer.start()
    try:
        res = optimize(SOFTMAX, budget=2, proposers=[proposer], pool=pool, archive=str(db), seed=1, device="cpu",
                       write=False)
    finally:
        killer.join()
        pool.close()
    first, second = res.history
    assert first.verdict["category"] == "crash" and first.verdict["details"]["infrastructure"]
    assert "exited with code -9" in first.verdict["reason"]
    assert second.passed  # the pool restarted its worker and went on
    rows = _rows(db)
    assert [bool(r["correct"]) for r in rows] == [False, True]
    assert Archive(db).best(SOFTMAX).code == _GOOD


class _ScriptedPool:
    """A pool whose verdicts are scripted per candidate source: each judgment of a source takes the next speedup
    of its list (``None``: a failed verdict), so the final round's arithmetic can be checked exactly."""

    n_workers = 2

    def __init__(self, script, wall_s=0.01):
        self.script = {k: list(v) for k, v in script.items()}
        self.jobs, self.wall_s = [], wall_s

    def submit(self, job):
        import concurrent.futures as cf

        self.jobs.append(job["name"])
        x = self.script[job["candidate"]].pop(0)
        verdict = ({"passed": True, "correct": True, "speedup_eager": x} if x is not None else
                   {"passed": False, "correct": False, "category": "nondeterministic", "reason": "runs disagree"})
        fut = cf.Future()
        fut.set_result({"verdict": verdict, "wall_s": self.wall_s, "worker": "w0"})
        return fut

    def close(self):
        pass


def _sources(n):
    return [_GOOD.replace("dim=-1)", f"dim=-1)  # candidate {i}") for i in range(n)]


def test_final_round_settles_near_ties_by_the_mean_of_judgments(tmp_path):
    a, b, c = _sources(3)
    # a leads by a hair, b within 5%, c far behind; judged again, b comes out ahead on the mean
    pool = _ScriptedPool({a: [1.00, 0.90], b: [0.98, 0.99], c: [0.80]})
    res = optimize(SOFTMAX, budget=3, proposers=[_ListProposer([a, b, c])], pool=pool,
                   archive=str(tmp_path / "a.db"), seed=1, device="cpu", write=False, finalists=3)
    assert res.attempts == 3 and len(res.history) == 3  # re-judgments do not count against the budget
    assert [j for j in pool.jobs if j.endswith("_final")] == ["softmax_tiny_2_final", "softmax_tiny_1_final"]
    finals = {f["index"]: f for f in res.finals}
    assert set(finals) == {1, 2}  # c is not within 5% of the best
    assert finals[1]["speedups"] == [1.0, 0.9] and finals[1]["mean"] == 0.95 and not finals[1]["won"]
    assert finals[2]["mean"] == pytest.approx(0.985) and finals[2]["won"]
    assert res.best.proposal.source == b and res.best.fitness == 0.99  # the winner's latest verdict
    assert res.summary()["best"]["speedup_eager"] == 0.99 and res.summary()["finals"] == res.finals
    assert len(_rows(tmp_path / "a.db")) == 5  # every judgment archived


def test_final_round_drops_a_finalist_that_fails_again_and_skips_clear_wins(tmp_path):
    a, b, c = _sources(3)
    pool = _ScriptedPool({a: [1.00, None], b: [0.97, 0.96], c: [0.5]})
    res = optimize(SOFTMAX, budget=3, proposers=[_ListProposer([a, b, c])], pool=pool,
                   archive=str(tmp_path / "a.db"), seed=1, device="cpu", write=False, finalists=2)
    assert res.best.proposal.source == b  # a passed once and failed its re-judgment: out
    assert [f["mean"] for f in res.finals] == [0.0, pytest.approx(0.965)]

    pool = _ScriptedPool({a: [1.00, None], b: [0.99, None]})  # both flaky, nothing else passed: no best at all
    res = optimize(SOFTMAX, budget=2, proposers=[_ListProposer([a, b])], pool=pool,
                   archive=str(tmp_path / "e.db"), seed=1, device="cpu", write=False, finalists=2)
    assert res.best is None and not res.found and [f["mean"] for f in res.finals] == [0.0, 0.0]

    pool = _ScriptedPool({a: [1.00], b: [0.80]})  # no near-tie: no final round, no extra evaluation
    res = optimize(SOFTMAX, budget=2, proposers=[_ListProposer([a, b])], pool=pool,
                   archive=str(tmp_path / "b.db"), seed=1, device="cpu", write=False, finalists=3)
    assert res.finals == [] and len(pool.jobs) == 2 and res.best.proposal.source == a
    pool = _ScriptedPool({a: [1.00], b: [0.99]})  # the default: no final round
    res = optimize(SOFTMAX, budget=2, proposers=[_ListProposer([a, b])], pool=pool,
                   archive=str(tmp_path / "c.db"), seed=1, device="cpu", write=False)
    assert res.finals == [] and len(pool.jobs) == 2
    # a time box keeps room for the round: two close candidates that took 20 s each (as reported) leave a 30 s box
    # no time for a third, and the round still runs
    a, b, c = _sources(3)
    pool = _ScriptedPool({a: [1.00, 0.99], b: [0.99, 1.02], c: [2.0]}, wall_s=20.0)
    res = optimize(SOFTMAX, budget=3, proposers=[_ListProposer([a, b, c])], pool=pool,
                   archive=str(tmp_path / "d.db"), seed=1, device="cpu", write=False, finalists=3, deadline_s=30)
    assert res.stopped == "deadline" and len(res.history) == 2 and len(res.finals) == 2
    assert res.best.proposal.source == b and len(pool.jobs) == 4
    with pytest.raises(UsageError, match="finalists"):
        optimize(SOFTMAX, budget=2, proposers=[], pool=pool, device="cpu", write=False, finalists=-1)
    with pytest.raises(UsageError, match="finalist_margin"):
        optimize(SOFTMAX, budget=2, proposers=[], pool=pool, device="cpu", write=False, finalist_margin=2.0)
    for bad in ({"finalists": 2.5}, {"finalists": "3"}, {"finalists": True}, {"finalist_margin": "0.1"}):
        with pytest.raises(UsageError, match=next(iter(bad))):
            optimize(SOFTMAX, budget=2, proposers=[], pool=pool, device="cpu", write=False, **bad)


def test_a_set_record_shows_the_final_round_mean_per_rung(tmp_path):
    from types import SimpleNamespace

    from kernelwright.search.optset import problem_record

    a, b = _sources(2)
    plans = iter([{"sites": [["softmax", "softmax", None]]}, {"sites": [["softmax", "softmax", "split"]]}])

    class Planned(_ListProposer):
        def propose(self, state):
            prop = super().propose(state)
            if prop is not None:
                prop.plan = next(plans)
            return prop

    pool = _ScriptedPool({a: [1.00, 0.90], b: [0.98, 1.00]})
    res = optimize(SOFTMAX, budget=2, proposers=[Planned([a, b])], pool=pool, archive=str(tmp_path / "a.db"),
                   seed=1, device="cpu", write=False, finalists=2)
    site = SimpleNamespace(kind="softmax", anchor="softmax", variants=(None, "split", "fused"), auto="fused")
    rec = problem_record(res, Path(SOFTMAX), [site], None)
    assert rec["rungs"] == {"auto": 0.95, "split": pytest.approx(0.99)} and rec["rungs_total"] == 3
    assert rec["best"]["speedup_eager"] == 1.0 and rec["best"]["plan"]["sites"][0][2] == "split"


# --- the LLM proposer against a stub endpoint ---------------------------------------------------------------------
_WRONG = _GOOD.replace("dim=-1", "dim=0")
REPLIES = [f"Here it is:\n```python\n{_WRONG}```\n", "I am sorry, I cannot write kernels today.",
           f"<think>dim -1, not 0</think>\nFixed:\n```python\n{_GOOD}```"]


class _Stub(http.server.BaseHTTPRequestHandler):
    replies: list[str] = []
    requests: list[dict] = []
    auth: list[str | None] = []

    def log_message(self, *args):
        pass

    def _send(self, obj, code=200):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802
        if self.path == "/v1/models":
            self._send({"object": "list", "data": [{"id": "stub-model", "object": "model"}]})
        else:
            self._send({"error": "not found"}, 404)

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        type(self).auth.append(self.headers.get("Authorization"))
        text = type(self).replies.pop(0) if type(self).replies else "no more"
        self._send({"id": "x", "object": "chat.completion", "model": body["model"],
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                 "finish_reason": "stop"}]})


@pytest.fixture
def stub_llm():
    _Stub.replies, _Stub.requests, _Stub.auth = list(REPLIES), [], []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_extract_code():
    assert extract_code(REPLIES[0]) == _WRONG
    assert extract_code(REPLIES[1]) is None
    assert extract_code(REPLIES[2]) == _GOOD
    assert extract_code(_GOOD) == _GOOD  # bare Python


def test_llm_proposer_against_a_stub_endpoint(stub_llm, tmp_path):
    db = tmp_path / "archive.db"
    with Archive(db) as arch:  # a verified kernel of a similar problem, for the prompt
        arch.record(PROBLEMS_DIR / "level1/06_softmax_narrow_fp32.py", "# ARCHIVED SOFTMAX KERNEL\n" + _GOOD,
                    {"correct": True, "passed": True, "speedup_eager": 2.5})
    client = LLMClient(stub_llm + "/v1", key="sekrit")
    assert client.check() == "stub-model"
    llm = LLMProposer(client, SOFTMAX, archive=Archive(db))
    with LocalPool(1, device="cpu") as pool:
        res = optimize(SOFTMAX, budget=3, proposers=[llm], pool=pool, archive=str(db), seed=2, device="cpu",
                       out_path=tmp_path / "best.py")
    assert res.attempts == 3 and len(res.history) == 2 and len(res.notes) == 1
    wrong, good = res.history
    assert not wrong.passed and wrong.verdict["category"] in ("wrong_output", "precision", "distribution")
    assert good.passed and res.best is good and (tmp_path / "best.py").read_text() == _GOOD
    reqs = _Stub.requests
    assert len(reqs) == 3 and all(r["model"] == "stub-model" for r in reqs) and _Stub.auth[0] == "Bearer sekrit"
    prompts = ["\n".join(m["content"] for m in r["messages"]) for r in reqs]
    reference = Path(SOFTMAX).read_text().strip()
    assert all(reference in p for p in prompts)
    assert "ARCHIVED SOFTMAX KERNEL" in prompts[0] and "previous attempts" not in prompts[0]
    assert "### attempt 1" in prompts[1] and "FAILED" in prompts[1] and wrong.verdict["reason"][:60] in prompts[1]
    assert "no ```python code block" in prompts[2] and "### attempt 2" in prompts[2]
    assert len(_rows(db)) == 3  # the archived kernel plus the two judged attempts; the garbage reply is not judged


def test_unreachable_llm_endpoint_is_a_clear_error_before_any_work(tmp_path, capsys):
    url = f"http://127.0.0.1:{_free_port()}"
    with pytest.raises(LLMError, match=f"LLM endpoint {url}/v1 is unreachable"):
        LLMClient(url).check(timeout_s=2)
    t0 = time.perf_counter()
    rc = optimize_main([SOFTMAX, "--llm-url", url, "--archive", str(tmp_path / "a.db"), "--device", "cpu"])
    assert rc == 2 and time.perf_counter() - t0 < 15
    assert f"{url}/v1 is unreachable" in capsys.readouterr().err
    assert not (tmp_path / "a.db").exists()  # nothing started


# --- pools --------------------------------------------------------------------------------------------------------
def test_default_workers_and_bad_addresses():
    assert default_workers("cpu") == os.cpu_count()
    with pytest.raises(UsageError, match="workers"):
        LocalPool(0)
    port = _free_port()
    t0 = time.perf_counter()
    with pytest.raises(UsageError, match=f"--ray 127.0.0.1:{port}: no Ray cluster answers"):
        check_ray_address(f"127.0.0.1:{port}", timeout_s=2)
    with pytest.raises(UsageError, match="expected HOST:PORT"):
        check_ray_address("nowhere")
    assert time.perf_counter() - t0 < 5


def test_unreachable_ray_address_exits_2_before_any_work(tmp_path, capsys):
    pytest.importorskip("ray")
    port = _free_port()
    rc = optimize_main([SOFTMAX, "--ray", f"127.0.0.1:{port}", "--archive", str(tmp_path / "a.db"),
                        "--device", "cpu"])
    assert rc == 2 and f"127.0.0.1:{port}: no Ray cluster answers" in capsys.readouterr().err
    assert not (tmp_path / "a.db").exists()


def test_ray_pool_on_a_local_instance(tmp_path):
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        pool = RayPool(None, device="cpu")
        assert pool.n_workers == 2
        proposer = _ListProposer([_GOOD, _WRONG])
        try:
            res = optimize(SOFTMAX, budget=2, proposers=[proposer], pool=pool, archive=str(tmp_path / "a.db"),
                           seed=3, device="cpu", write=False)
        finally:
            pool.close()
        assert [e.passed for e in res.history] == [True, False]
        assert len({e.worker for e in res.history}) == 2  # one candidate on each actor
        assert len(_rows(tmp_path / "a.db")) == 2
    finally:
        ray.shutdown()
