"""The CLI end to end on CPU: list, check, bench, results, compare, report; exit codes; errors without tracebacks."""

import json
import shutil
import subprocess

import pytest

from kernelwright import cli
from kernelwright.harness import timing


def run(capsys, *argv):
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_list_json(capsys):
    code, out, _ = run(capsys, "list", "--json")
    data = json.loads(out)
    assert code == 0
    fams = {f["family"]: f for f in data}
    assert {"vector_add", "softmax"} <= set(fams)
    assert [r["name"] for r in fams["softmax"]["rungs"]] == ["multipass", "fused", "online", "split", "cluster"]


def test_check_json(capsys):
    code, out, _ = run(capsys, "check", "vector_add", "--dtypes", "fp16", "--json")
    data = json.loads(out)
    assert code == 0 and data["failed"] == 0 and data["passed"] == 2 * 9


def test_unknown_family_lists_known(capsys):
    code, _, err = run(capsys, "check", "matmull")
    assert code == 2 and "known families: vector_add, softmax" in err


def test_bad_dtype_and_size(capsys):
    assert run(capsys, "check", "vector_add", "--dtypes", "int8")[0] == 2
    code, _, err = run(capsys, "bench", "softmax", "--sizes", "12xq", "--db", "/tmp/kw-unused.db")
    assert code == 2 and "sizes" in err


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (("--sizes", "0x5"), "has no elements"),
        (("--dtypes", ","), "dtypes: expected a comma list"),
        (("--variant", "warp_specialized"), "variant: warp_specialized is not a rung or peer"),
        (("--sizes", "4..2"), "must go from a positive count up"),
    ],
)
def test_bench_rejects_bad_arguments(capsys, db_path, extra, needle):
    code, _, err = run(capsys, "bench", "softmax", "--db", db_path, *extra)
    assert code == 2 and needle in err


def test_unwritable_db_fails_before_work(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(cli, "_bench", lambda *a, **k: pytest.fail("work started"))
    code, _, err = run(capsys, "bench", "vector_add", "--db", str(tmp_path / "nope" / "r.db"))
    assert code == 2 and "db:" in err


def test_cuda_on_cpu_machine_is_clear(capsys):
    from kernelwright import runtime

    if runtime.cuda_available():
        pytest.skip("a GPU is present")
    code, _, err = run(capsys, "list", "--device", "cuda")
    assert code == 2 and "no CUDA GPU" in err


def test_bench_results_compare_report(capsys, db_path, tmp_path):
    args = ("bench", "vector_add", "--sizes", "4096,2^13", "--dtypes", "fp32", "--max-seconds", "0.05",
            "--db", db_path, "--json")
    code, out, _ = run(capsys, *args)
    first = json.loads(out)
    assert code == 0
    rows = first["rows"]
    assert {r["variant"] for r in rows} == {"torch", "triton", "torch.compile"}
    timed = [r for r in rows if r.get("median_ms")]
    assert timed and all(r["mode"] == "cpu-interpreter" and r["correct"] for r in timed)
    tri = next(r for r in timed if r["variant"] == "triton")
    assert tri["speedup_vs_baseline"] > 0 and tri["pct_roofline"] > 0 and tri["tbps"] > 0
    second = json.loads(run(capsys, *args)[1])
    assert second["run_id"] == first["run_id"] + 1  # appended, not overwritten

    code, out, _ = run(capsys, "results", "--db", db_path, "--json")
    assert code == 0 and [r["id"] for r in json.loads(out)][:2] == [second["run_id"], first["run_id"]]

    code, out, _ = run(capsys, "results", str(first["run_id"]), "--db", db_path, "--json")
    assert code == 0 and len(json.loads(out)["rows"]) == len(rows)
    assert run(capsys, "results", "999", "--db", db_path)[0] == 2

    code, out, _ = run(capsys, "compare", str(first["run_id"]), str(second["run_id"]), "--db", db_path, "--json")
    assert code == 0
    verdicts = json.loads(out)
    assert len(verdicts) == 4 and {v["verdict"] for v in verdicts} <= {"faster", "slower", "same", "ambiguous"}

    report = tmp_path / "r.html"
    code, _, _ = run(capsys, "report", "--db", db_path, "-o", str(report))
    html = report.read_text()
    assert code == 0 and "<svg" in html and "vector_add" in html and "triton" in html
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "") and "https://" not in html
    assert "<script" not in html


def test_interrupted_bench_keeps_finished_rows(capsys, db_path, monkeypatch):
    real = timing.time_fn
    calls = {"n": 0}

    def flaky(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr("kernelwright.harness.bench.time_fn", flaky)
    code, _, err = run(capsys, "bench", "vector_add", "--sizes", "4096,8192", "--dtypes", "fp32",
                       "--max-seconds", "0.05", "--db", db_path)
    assert code == 130 and "interrupted" in err
    from kernelwright.store.db import Store

    s = Store(db_path)
    run_ = s.runs()[0]
    assert run_["status"] == "interrupted"
    assert len([r for r in s.rows(run_["id"]) if r["median_ms"]]) == 2


@pytest.mark.browser
@pytest.mark.skipif(shutil.which("chromium") is None, reason="no headless Chromium here")
def test_report_renders_in_headless_chromium(capsys, db_path, tmp_path):
    run(capsys, "bench", "softmax", "--sizes", "4x1000", "--dtypes", "fp32", "--max-seconds", "0.05",
        "--db", db_path)
    report = tmp_path / "r.html"
    assert run(capsys, "report", "--db", db_path, "-o", str(report))[0] == 0
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'chrome'}"]
    dom = subprocess.run(["chromium", *flags, "--dump-dom", report.as_uri()], capture_output=True, text=True,
                         timeout=120).stdout
    assert "<svg" in dom and "softmax: roofline" in dom and "<circle" in dom
    shot = tmp_path / "shot.png"
    subprocess.run(["chromium", *flags, f"--screenshot={shot}", "--window-size=1200,1600", report.as_uri()],
                   capture_output=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 10_000


def test_common_options_work_before_and_after_the_command(tmp_path, capsys):
    from kernelwright.cli import _parser

    before = _parser().parse_args(["--db", "x.db", "--json", "results"])
    after = _parser().parse_args(["results", "--db", "x.db", "--json"])
    plain = _parser().parse_args(["results"])
    assert (before.db, before.json) == (after.db, after.json) == ("x.db", True)
    assert (plain.db, plain.json, plain.device) == (None, False, None)


def test_eval_records_in_the_archive_and_kw_archive_lists_it(tmp_path, capsys):
    # the fixture problem and an honest candidate (tests/eval_fixtures): kw eval passes it, records the verdict,
    # and kw archive --json returns it as the problem's best verified kernel; --no-archive records nothing
    arc = tmp_path / "a.db"
    ref, cand = "tests/eval_fixtures/elementwise.py", "tests/eval_fixtures/honest/elementwise_inplace_out.py"
    assert cli.main(["eval", ref, cand, "--device", "cpu", "--archive", str(arc), "--json"]) == 0
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["passed"] is True
    assert cli.main(["archive", "--archive", str(arc), "--json"]) == 0
    best = json.loads(capsys.readouterr().out)
    rows = best if isinstance(best, list) else best.get("best", best.get("rows"))
    assert len(rows) == 1 and "elementwise" in json.dumps(rows[0])
    other = tmp_path / "b.db"
    assert cli.main(["eval", ref, cand, "--device", "cpu", "--archive", str(other), "--no-archive", "--json"]) == 0
    assert not other.exists()


def test_optimize_is_wired_and_rejects_a_missing_reference(capsys):
    assert cli.main(["optimize", "no/such/problem.py", "--device", "cpu"]) == 2
    assert "problem.py" in capsys.readouterr().err


def test_report_reads_every_family_size_syntax(tmp_path, capsys):
    # the report's scaling chart parses stored sizes with the family's own parser: attention's sizes carry a mask
    # suffix ("...x64:causal"), which the generic dims parser rejects (the CPU main job ended in exit 2 on it)
    db = tmp_path / "r.db"
    assert cli.main(["bench", "attention", "--db", str(db), "--device", "cpu", "--sizes",
                     "1x2x2x16x16x16:causal", "--dtypes", "fp32", "--variant", "flash", "--no-peers",
                     "--max-seconds", "0.05"]) == 0
    capsys.readouterr()
    out = tmp_path / "r.html"
    assert cli.main(["report", "--db", str(db), "-o", str(out)]) == 0
    assert "attention: size scaling" in out.read_text()
