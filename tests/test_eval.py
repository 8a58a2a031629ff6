"""kw eval: KernelBench-format candidates judged in isolated workers, on CPU through Triton's interpreter.

Every anti-cheat check has a planted cheat here (``tests/eval_fixtures/cheats``) that its verdict must catch
with the right category; honest candidates, including ones that round differently from eager PyTorch, must
pass; bad files, crashes, hangs and memory hogs must give a verdict and let the run go on. One module-wide
Evaluator caches each problem's reference results, as a search loop would.
"""

import json
import math
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernelwright import cli
from kernelwright.eval import (
    CATEGORIES,
    EvalConfig,
    Evaluator,
    evaluate,
    guards,
    judge,
    loader,
    problem,
    wire,
)
from kernelwright.eval.evalset import fast_p, geomean
from kernelwright.eval.verdict import Verdict

FIX = Path(__file__).parent / "eval_fixtures"


def prob(name: str) -> str:
    return str(FIX / f"{name}.py")


@pytest.fixture(scope="module")
def ev():
    return Evaluator(device="cpu", seed=20261202, timeout_s=60, memory_mb=2048)


# -- honest candidates pass -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("problem_name", "candidate"), [
    ("matmul_bias_relu", "candidates/matmul_bias_relu.py"),
    ("softmax", "candidates/softmax.py"),                    # Triton, through the interpreter
    ("elementwise", "candidates/elementwise.py"),            # Triton, through the interpreter
    ("softmax", "honest/softmax_logsumexp.py"),              # rounds differently from torch.softmax
    ("matmul_bias_relu", "honest/matmul_split_k.py"),        # another accumulation order, other parameter names
    ("matmul_bias_relu", "honest/matmul_float64.py"),        # more exact than eager
    ("elementwise", "honest/elementwise_inplace_out.py"),
])
def test_honest_candidate_passes(ev, problem_name, candidate):
    v = ev.evaluate(prob(problem_name), str(FIX / candidate))
    assert v.passed and v.correct and v.loaded and v.compiled, f"[{v.category}] {v.reason}"
    assert v.category is None and v.reason == ""
    assert v.speedup_eager is not None and v.speedup_eager > 0
    assert v.speedup_compile is None  # no torch.compile baseline on CPU by default
    assert v.times["candidate"]["n"] == 3 and v.times["eager"]["n"] == 3
    names = [c["name"] for c in v.checks]
    assert names[:4] == ["as_is#0", "as_is#1", "heavy", "large"] and names[-1] == "alt_size"
    assert {c["order"] for c in v.checks} == {"candidate_first", "reference_first"}
    assert v.details["timed_calls_checked"] == 3
    assert v.compile_s is not None and v.overhead_s is not None


def test_a_recompile_at_the_second_size_counts_as_compile_time_not_overhead(ev):
    """A candidate that compiles again at each new input shape (torch.compile's re-trace, an autotuner's re-tune):
    its first call at the second size is its own compile time, so compile_s holds both first calls and
    overhead_s (eval_s - compile_s) neither."""
    v = ev.evaluate(prob("elementwise"), str(FIX / "honest/elementwise_compiles_per_shape.py"))
    assert v.passed, f"[{v.category}] {v.reason}"
    assert v.details["alt_size"], "the problem must be run at a second size for this test to mean anything"
    assert v.details["first_call_s"] >= 0.6 and v.details["alt_first_call_s"] >= 0.6
    assert v.compile_s >= v.details["first_call_s"] + v.details["alt_first_call_s"]
    assert abs(v.overhead_s - (v.eval_s - v.compile_s)) < 1e-9


def test_slow_inputs_travel_and_timing_sets_are_perturbed():
    """When get_inputs() is slow the drawn inputs go to the candidate worker through shared memory and the timing
    sets are perturbed copies; honest candidates still pass and batch-and-skip is still caught."""
    ev = Evaluator(device="cpu", seed=77, slow_inputs_s=0.0)
    v = ev.evaluate(prob("matmul_bias_relu"), str(FIX / "candidates/matmul_bias_relu.py"))
    assert v.passed, v.reason
    assert v.details["timing_mode"] == "perturb" and ev.reference(prob("matmul_bias_relu")).data["bases"]
    assert ev.evaluate(prob("matmul_bias_relu"), str(FIX / "cheats/batch_and_skip.py")).category == \
        "timed_call_mismatch"


def test_verdict_json_and_fields(ev):
    v = ev.evaluate(prob("elementwise"), str(FIX / "candidates/elementwise.py"))
    d = json.loads(v.to_json())
    for key in ("problem", "candidate", "loaded", "compiled", "correct", "passed", "speedup_eager", "speedup_compile",
                "times", "device", "reason", "category", "flags", "checks", "seed", "compile_s", "eval_s"):
        assert key in d
    assert d["device"] == "cpu" and d["seed"] == 20261202
    assert d["details"]["alt_size"] == {"rows": 48, "cols": 48}  # 3/4, kept a multiple of 8


def test_candidate_as_source_string(ev):
    src = (FIX / "candidates/matmul_bias_relu.py").read_text()
    v = ev.evaluate(prob("matmul_bias_relu"), src, name="from_string")
    assert v.passed and v.candidate == "from_string"


# -- planted cheats are caught ---------------------------------------------------------------------------------
CHEATS = [
    # (cheat file, problem, category, a phrase of the reason)
    ("stale_output", "elementwise", "stale_output", "never written"),
    ("caching", "matmul_bias_relu", "caching", "answer for input set as_is#0"),
    ("batch_and_skip", "matmul_bias_relu", "timed_call_mismatch", "timed call"),
    ("input_mutation", "elementwise", "input_mutation", "changed its input"),
    ("background_thread", "elementwise", "background_threads", "thread(s) still running"),
    ("lazy_output", "softmax", "lazy_output", "subclass"),
    ("lucky_garbage", "elementwise", "nondeterministic", "two runs"),
    ("bf16_compute", "matmul_bias_relu", "precision", "bf16, fp16 or TF32"),
    ("tf32_switch", "matmul_bias_relu", "precision", "allow_tf32 False -> True"),
    ("no_max_subtraction", "softmax", "distribution", "right on inputs as get_inputs() draws them"),
    ("shape_specialised", "softmax", "shape_specialisation", "another problem size"),
    ("shape_specialised_silent", "softmax", "shape_specialisation", "wrong at"),
    ("timer_patch", "elementwise", "timer_tampering", "time.perf_counter"),
    ("event_patch", "elementwise", "timer_tampering", "Event.elapsed_time"),
]


@pytest.mark.parametrize(("cheat", "problem_name", "category", "needle"), CHEATS, ids=[c[0] for c in CHEATS])
def test_planted_cheat_is_caught(ev, cheat, problem_name, category, needle):
    path = FIX / "cheats" / f"{cheat}.py"
    assert f"caught as: {category}" in path.read_text().splitlines()[0]
    v = ev.evaluate(prob(problem_name), str(path))
    assert not v.passed and not v.correct
    assert v.category == category, f"[{v.category}] {v.reason}"
    assert needle in v.reason, v.reason
    assert v.category in CATEGORIES


def test_stale_output_caught_in_both_orders(ev):
    """The stale-read cheat fails whether or not the eager reference ran (and was freed) just before it."""
    v = ev.evaluate(prob("elementwise"), str(FIX / "cheats/stale_output.py"))
    bad = {c["order"] for c in v.checks if c["unwritten"]}
    assert bad == {"candidate_first", "reference_first"}


def test_unfit_problem_flagged(ev):
    v = ev.evaluate(prob("unfit_zero"), str(FIX / "candidates/unfit_zero.py"))
    assert "unfit_problem" in v.flags and v.passed
    assert any("all-zero" in n for n in v.details["notes"])
    ok = ev.evaluate(prob("softmax"), str(FIX / "honest/softmax_logsumexp.py"))
    assert "unfit_problem" not in ok.flags


def test_impossible_speedup_flagged(ev):
    """A measured time under the roofline bound (here: a copy bandwidth of 1 byte/s) is not believed."""
    v = ev.evaluate(prob("elementwise"), str(FIX / "honest/elementwise_inplace_out.py"), copy_tbps=1e-12)
    assert v.correct and not v.passed
    assert v.category == "impossible_speedup" and "impossible_speedup" in v.flags
    assert "roofline bound" in v.reason and v.details["roofline"]["bound_ms"] > 1e3


# -- bad files give clear verdicts ----------------------------------------------------------------------------
@pytest.mark.parametrize(("candidate", "problem_name", "category", "needle", "loaded", "compiled"), [
    ("missing_import", "elementwise", "load", "No module named 'a_module_that_does_not_exist'", False, False),
    ("exits_on_import", "elementwise", "load", "SystemExit: refusing to run", False, False),
    ("no_modelnew", "elementwise", "api", "defines no ModelNew (it defines Model)", False, False),
    ("wrong_ctor", "matmul_bias_relu", "api", "constructor arguments differ", False, False),
    ("ctor_raises", "elementwise", "api", "nvcc not found", False, False),
    ("raises_in_forward", "elementwise", "compile", "shared memory exceeded", True, False),
])
def test_bad_candidate_files(ev, candidate, problem_name, category, needle, loaded, compiled):
    v = ev.evaluate(prob(problem_name), str(FIX / "bad" / f"{candidate}.py"))
    assert (v.category, v.loaded, v.compiled, v.passed) == (category, loaded, compiled, False), v.reason
    assert needle in v.reason and "Traceback" not in v.reason


def test_syntax_error_names_the_line(ev):
    src = "import torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x, y)\n        return x\n"
    v = ev.evaluate(prob("elementwise"), src, name="broken.py")
    assert v.category == "load" and "SyntaxError" in v.reason and "line 5" in v.reason


@pytest.mark.parametrize(("reference", "needle"), [
    ("ref_no_get_inputs", "lacks get_inputs"),
    ("ref_broken_import", "does not import: ImportError"),
    ("ref_random", "different outputs on the same inputs"),
    ("does_not_exist", "does not exist"),
])
def test_bad_reference_files(ev, reference, needle):
    v = ev.evaluate(str(FIX / "bad" / f"{reference}.py"), str(FIX / "candidates/elementwise.py"))
    assert v.category == "reference" and needle in v.reason and not v.passed


def test_crash_hang_and_memory_hog_fail_and_the_run_goes_on(ev):
    crash = ev.evaluate(prob("elementwise"), str(FIX / "bad/crash_exit.py"))
    assert crash.category == "crash" and "exited with code 3" in crash.reason
    segv = ev.evaluate(prob("elementwise"), str(FIX / "bad/segfault.py"))
    assert segv.category == "crash" and "SIGSEGV" in segv.reason
    hang = ev.evaluate(prob("elementwise"), str(FIX / "bad/hang.py"), timeout_s=4)
    assert hang.category == "timeout" and "during the first call" in hang.reason and hang.eval_s < 15
    hog = ev.evaluate(prob("elementwise"), str(FIX / "bad/memory_hog.py"), memory_mb=512)
    assert hog.category == "memory", hog.reason
    after = ev.evaluate(prob("elementwise"), str(FIX / "candidates/elementwise.py"))
    assert after.passed


# -- the API and the CLI ---------------------------------------------------------------------------------------
def test_module_level_evaluate_caches_the_reference():
    a = evaluate(prob("softmax"), str(FIX / "honest/softmax_logsumexp.py"), device="cpu", timeout_s=60)
    b = evaluate(prob("softmax"), str(FIX / "cheats/lazy_output.py"), device="cpu", timeout_s=30)
    assert a.passed and b.category == "lazy_output"
    assert a.seed == b.seed and b.details["reference_s"] == 0.0  # the second reused the first's reference


def test_evaluator_rejects_reference_options_per_call(ev):
    with pytest.raises(TypeError, match="per-call options"):
        ev.evaluate(prob("softmax"), str(FIX / "candidates/softmax.py"), timing_sets=5)


def test_cli_eval_exit_codes_and_json(capsys):
    code = cli.main(["eval", prob("matmul_bias_relu"), str(FIX / "candidates/matmul_bias_relu.py"), "--device", "cpu",
                     "--json", "--seed", "7"])
    out = capsys.readouterr().out
    assert code == 0 and json.loads(out)["passed"] is True and json.loads(out)["seed"] == 7
    code = cli.main(["eval", prob("matmul_bias_relu"), str(FIX / "cheats/caching.py"), "--device", "cpu"])
    out = capsys.readouterr().out
    assert code == 1 and out.startswith("FAIL") and "[caching]" in out
    code = cli.main(["eval", prob("matmul_bias_relu"), "no/such/candidate.py", "--device", "cpu"])
    assert code == 2 and "candidate: no file" in capsys.readouterr().err
    assert cli.main(["eval", prob("softmax"), str(FIX / "candidates/softmax.py"), "--timeout", "0"]) == 2


def test_eval_set_fast_p_and_geomean(tmp_path, capsys):
    d = tmp_path / "set"
    shutil.copytree(FIX, d, ignore=shutil.ignore_patterns("cheats", "bad", "honest", "__pycache__"))
    shutil.copy(FIX / "bad" / "ref_random.py", d / "zz_no_candidate.py")
    code = cli.main(["eval-set", str(d), "--device", "cpu", "--json", "--seed", "3"])
    rep = json.loads(capsys.readouterr().out)
    assert code == 1 and rep["n_problems"] == 5 and rep["n_passed"] == 4
    by = {Path(v["problem"]).stem: v for v in rep["verdicts"]}
    assert by["zz_no_candidate"]["category"] == "missing"
    assert rep["unfit"] == ["unfit_zero"]
    assert rep["fast_p"]["fast_0"] == pytest.approx(4 / 5)
    speedups = [v["speedup_eager"] for v in rep["verdicts"] if v["passed"]]
    assert rep["geomean_speedup"] == pytest.approx(math.exp(sum(map(math.log, speedups)) / 4))


def test_fast_p_counts_all_problems():
    def verdict(passed, speedup):
        return Verdict("p", "c", "cpu", passed=passed, correct=passed, speedup_eager=speedup)

    vs = [verdict(True, 0.5), verdict(True, 1.2), verdict(True, 1.6), verdict(True, 3.0), verdict(False, None)]
    assert fast_p(vs) == {"fast_0": 0.8, "fast_1": 0.6, "fast_1.5": 0.4, "fast_2": 0.2}
    assert geomean([0.5, 2.0]) == pytest.approx(1.0) and geomean([]) is None


# -- the pieces, without workers --------------------------------------------------------------------------------
def test_judge_allows_reordering_rejects_low_precision():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 512, generator=g), torch.randn(512, 48, generator=g)
    ref = a.double() @ b.double()
    eager = a @ b
    split = a[:, :256] @ b[:256] + a[:, 256:] @ b[256:]
    assert judge.judge(split, ref, eager).ok
    bf16 = (a.bfloat16() @ b.bfloat16()).float()
    j = judge.judge(bf16, ref, eager)
    assert not j.ok and j.rel_err > 100 * j.eager_rel_err
    assert judge.judge(eager.half(), ref, eager).kind == "spec"
    assert judge.judge(torch.zeros_like(eager), ref, eager).kind == "elementwise"


def test_judge_magnified_inputs_loosen_floors_not_shortcuts():
    """On logits of size 1e3, exp(x - logsumexp(x)) loses eps |x| where softmax loses nothing: honest, and passed
    on a magnified set; skipping the max subtraction overflows there and still fails."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(64, 96, generator=g) * 1e3
    ref, eager = torch.softmax(x.double(), -1), torch.softmax(x, -1)
    lse = torch.exp(x - torch.logsumexp(x, -1, keepdim=True))
    assert not judge.judge(lse, ref, eager).ok
    assert judge.judge(lse, ref, eager, magnification=1e3).ok
    naive = torch.exp(x) / torch.exp(x).sum(-1, keepdim=True)
    assert judge.judge(naive, ref, eager, magnification=1e3).kind == "nonfinite"
    assert judge.tolerance_for(torch.float32, 1e6).rtol == judge.MAGNIFIED_CAP


def test_judge_samples_never_rejects_what_passes_in_full():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(300, 70, generator=g)
    ref, eager = torch.softmax(x.double(), -1), torch.softmax(x, -1)
    other = torch.exp(x - torch.logsumexp(x, -1, keepdim=True))
    assert judge.judge(other, ref, eager).ok
    idx = torch.randint(0, x.numel(), (500,), generator=g)
    bound = judge.allowed(ref, eager, judge.tolerance_for(torch.float32))
    sample_ref = {"values": ref.reshape(-1)[idx], "allowed": bound.reshape(-1)[idx],
                  "finite": torch.ones(500, dtype=torch.bool), "care": torch.ones(500, dtype=torch.bool),
                  "nonfinite": [0], "sum": float(ref.sum()), "sum_allowed": float(bound.sum()),
                  "sum_abs": float(ref.abs().sum())}

    def stats(o):
        return {"nonfinite": 0, "sum": float(o.double().sum())}

    assert judge.judge_samples(other.reshape(-1)[idx].double(), stats(other), sample_ref) is None
    stale = torch.softmax(torch.randn(300, 70, generator=g), -1)
    assert judge.judge_samples(stale.reshape(-1)[idx].double(), stats(stale), sample_ref) is not None


def test_poison_reaches_the_next_allocation_on_cpu():
    """In a fresh process (as a worker is): a freed 16 KiB answer is poisoned before the next allocation."""
    code = ("import torch\n"
            "from kernelwright.eval import guards\n"
            "torch.set_num_threads(1)\n"
            "junk = [torch.randn(4096) for _ in range(50)]\n"
            "answer = torch.arange(4096, dtype=torch.float32)\n"
            "del junk, answer\n"
            "guards.poison_free_memory('cpu', [(4096 * 4, 1)], guards.POISON_NAN)\n"
            "print(int(torch.isnan(torch.empty(4096)).sum()))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "KW_DEVICE": "cpu"})
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split()[-1]) > 4000


def test_integrity_sees_a_patched_timer(monkeypatch):
    snap = guards.Integrity()
    assert snap.changed() == []
    monkeypatch.setattr(torch.cuda.Event, "elapsed_time", lambda self, end: 0.0)
    monkeypatch.setattr(torch.Tensor, "clone", lambda self: self)  # a subclass attribute shadowing a C method
    assert set(snap.changed()) == {"torch.cuda.streams.Event.elapsed_time", "torch.Tensor.clone"}


def test_wire_carries_tensors_and_refuses_code():
    data = {"a": torch.arange(6, dtype=torch.bfloat16).reshape(2, 3), "b": [1, 2.5, "x", None, torch.empty(0, 3)]}
    back = wire.loads(wire.dumps(data))
    assert torch.equal(back["a"], data["a"]) and back["b"][:4] == [1, 2.5, "x", None] and back["b"][4].shape == (0, 3)
    evil = pickle.dumps(print)  # a reference to a callable: refused
    with pytest.raises(pickle.UnpicklingError, match="only data"):
        wire.loads(evil)


def test_size_constants_and_alt_size_attempts(tmp_path):
    consts = loader.size_constants(prob("matmul_bias_relu"))
    assert consts == {"batch_size": 24, "in_features": 48, "out_features": 40}
    first = problem.alt_size_attempts(consts)[0]
    assert first == {"batch_size": 16, "in_features": 32, "out_features": 32}
    assert [problem.scale_size(v, 0.75) for v in (4096, 96, 128, 14336, 13)] == [3072, 72, 96, 10752, 10]
    # derived top-level values follow the rewritten constants
    f = tmp_path / "p.py"
    f.write_text("HEADS = 32\nHEAD_DIM = 128\nHIDDEN = HEADS * HEAD_DIM\n")
    mod = loader.import_file(str(f), "reference", "reference", overrides={"HEADS": 24})
    assert (mod.HEADS, mod.HIDDEN) == (24, 24 * 128)


def test_loader_checks_the_constructor():
    ref = loader.import_file(prob("matmul_bias_relu"), "reference", "reference")
    bad = loader.import_file(str(FIX / "bad/wrong_ctor.py"), "candidate", "load")
    with pytest.raises(loader.LoadError, match="ModelNew\\(out_features, in_features\\) but Model\\(in_features"):
        loader.check_candidate(bad, ref, [48, 40])


def test_config_defaults_per_device():
    c = EvalConfig(device="cpu").resolved()
    assert (c.timing_sets, c.compile_baseline, c.memory_mb) == (3, False, 8192)


# -- on a GPU -------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gpu_ev():
    return Evaluator(device="cuda", seed=5, timeout_s=300)


@pytest.mark.gpu
def test_gpu_honest_triton_under_ten_seconds_of_overhead(gpu_ev):
    v = gpu_ev.evaluate(prob("softmax"), str(FIX / "candidates/softmax.py"))
    assert v.passed, v.reason
    assert v.speedup_compile is not None and v.times["candidate"]["mode"] == "cuda-events+device-sync"
    again = gpu_ev.evaluate(prob("softmax"), str(FIX / "candidates/softmax.py"))  # reference cached
    assert again.passed and again.overhead_s < 10.0, again.details


@pytest.mark.gpu
def test_gpu_identical_candidate_times_like_eager(gpu_ev):
    """The reference itself as the candidate: timed by the same method on the same sets, about 1x."""
    src = Path(prob("matmul_bias_relu")).read_text().replace("class Model(", "class ModelNew(")
    v = gpu_ev.evaluate(prob("matmul_bias_relu"), src, name="same_as_reference")
    assert v.passed, v.reason
    assert 0.67 < v.speedup_eager < 1.5, v.times


@pytest.mark.gpu
def test_gpu_side_stream_caught(gpu_ev):
    v = gpu_ev.evaluate(prob("elementwise"), str(FIX / "cheats/side_stream.py"))
    assert v.category == "side_stream", v.reason


@pytest.mark.gpu
def test_gpu_event_patch_and_stale_output_caught(gpu_ev):
    assert gpu_ev.evaluate(prob("elementwise"), str(FIX / "cheats/event_patch.py")).category == "timer_tampering"
    v = gpu_ev.evaluate(prob("elementwise"), str(FIX / "cheats/stale_output.py"))
    assert v.category == "stale_output", v.reason


def test_reference_with_run_to_run_rounding_is_checked_not_refused(ev, tmp_path):
    """A reduction whose order varies between runs moves only the last bits: an honest candidate still passes."""
    cand = tmp_path / "sum_rows.py"
    cand.write_text("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
                    "    def forward(self, x):\n        return x.sum(-1)\n")
    v = ev.evaluate(str(FIX / "refs" / "reduction_order.py"), str(cand))
    assert v.passed, v.reason
    assert any("last bits" in n for n in v.details.get("notes", [])), v.details.get("notes")
