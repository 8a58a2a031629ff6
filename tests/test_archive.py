"""The archive of evaluated candidates: records, best per problem, similarity lookup, crash safety, schema."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kernelwright.errors import UsageError
from kernelwright.eval.archive import (
    SCHEMA_VERSION,
    Archive,
    ArchiveError,
    archive_cli,
    problem_hash,
    problem_signature,
    similarity,
)
from kernelwright.eval.problemset import PROBLEMS_DIR

RELU = PROBLEMS_DIR / "level2" / "01_matmul_bias_relu_bf16.py"
GELU = PROBLEMS_DIR / "level2" / "02_matmul_bias_gelu_fp16.py"
SOFTMAX = PROBLEMS_DIR / "level1" / "06_softmax_narrow_fp32.py"
RMS = PROBLEMS_DIR / "level1" / "09_rms_norm_bf16.py"
VERSIONS = {"torch": "test", "triton": None}


def verdict(correct, eager=None, compile_=None, reason=None, **extra):
    return {"correct": correct, "speedup_eager": eager, "speedup_compile": compile_, "reason": reason, **extra}


@pytest.fixture
def archive(tmp_path):
    with Archive(tmp_path / "archive.db") as a:
        yield a


def test_record_round_trip(archive):
    i = archive.record(RELU, "class ModelNew: pass\n", verdict(True, 1.7, 0.9, max_abs_err=0.003),
                       device="NVIDIA H200", versions=VERSIONS)
    j = archive.record(str(RELU), Path(__file__), verdict(False, reason="wrong values"), device="cpu",
                       versions=VERSIONS)
    assert (i, j) == (1, 2) and len(archive) == 2
    a, b = archive.candidates(RELU)
    assert a.correct and a.speedup_eager == 1.7 and a.speedup_compile == 0.9 and a.reason is None
    assert a.verdict["max_abs_err"] == 0.003 and a.device == "NVIDIA H200" and a.versions == VERSIONS
    assert a.problem_name == "01_matmul_bias_relu_bf16" and a.problem_hash == problem_hash(RELU)
    assert a.code == "class ModelNew: pass\n" and len(a.code_hash) == 64 and a.created_at.endswith("Z")
    assert not b.correct and b.reason == "wrong values" and b.code == Path(__file__).read_text()
    (p,) = archive.problems()
    assert (p["n_candidates"], p["n_correct"]) == (2, 1)
    assert p["signature"]["ops"] == {"linear": 1, "relu": 1}
    assert p["signature"]["inputs"] == [{"shape": [8192, 4096], "dtype": "bfloat16"}]
    assert archive.candidates(correct=False) == [b]
    with pytest.raises(UsageError, match="correct"):
        archive.record(RELU, "x", {"speedup_eager": 2.0})


def test_default_versions_are_recorded(archive):
    archive.record(SOFTMAX, "code", verdict(True, 1.0))
    v = archive.candidates()[0].versions
    assert v["torch"] and "git_commit" in v and "python" in v


def test_best_per_problem_picks_the_fastest_correct(archive):
    archive.record(RELU, "wrong but fast", verdict(False, 50.0, 50.0, "mismatch"), "gpu", VERSIONS)
    archive.record(RELU, "ok", verdict(True, 1.5, 2.5), "gpu", VERSIONS)
    archive.record(RELU, "best", verdict(True, 2.0, 1.0), "gpu", VERSIONS)
    archive.record(RELU, "untimed", verdict(True), "gpu", VERSIONS)
    archive.record(RELU, "nan", verdict(True, float("nan")), "gpu", VERSIONS)
    archive.record(SOFTMAX, "untimed only", verdict(True), "gpu", VERSIONS)
    archive.record(GELU, "never right", verdict(False, 9.0, 9.0, "crash"), "gpu", VERSIONS)
    best = {c.problem_name: c for c in archive.best_per_problem()}
    assert set(best) == {"01_matmul_bias_relu_bf16", "06_softmax_narrow_fp32"}  # gelu has no correct one
    assert best["01_matmul_bias_relu_bf16"].code == "best"
    assert best["06_softmax_narrow_fp32"].code == "untimed only"
    assert archive.best(RELU, metric="speedup_compile").code == "ok"
    assert archive.best(GELU) is None
    assert all(c.correct for c in archive.best_per_problem("speedup_compile"))
    assert archive.candidates(RELU)[-1].speedup_eager is None  # NaN stored as unknown
    with pytest.raises(UsageError, match="metric"):
        archive.best_per_problem("median_ms")


def test_similar_ranks_by_ops(archive):
    archive.record(GELU, "gelu kernel", verdict(True, 1.3), "gpu", VERSIONS)
    archive.record(SOFTMAX, "softmax kernel", verdict(True, 4.0), "gpu", VERSIONS)
    archive.record(RMS, "rms kernel (wrong)", verdict(False, 9.0), "gpu", VERSIONS)  # unsolved: never offered
    matches = archive.similar(RELU, k=5, min_score=-1)  # keep even what shares nothing, to see the order
    assert [m.problem_name for m in matches] == ["02_matmul_bias_gelu_fp16", "06_softmax_narrow_fp32"]
    assert matches[0].score > matches[1].score == 0.0 and matches[0].best.code == "gelu kernel"
    assert [m.problem_name for m in archive.similar(RELU)] == ["02_matmul_bias_gelu_fp16"]  # by default
    relu, gelu, softmax = (problem_signature(p)["ops"] for p in (RELU, GELU, SOFTMAX))
    assert similarity(relu, gelu) > similarity(relu, softmax)
    # a problem already solved finds itself first; a source string works as well as a file
    archive.record(RELU, "relu kernel", verdict(True, 1.1), "gpu", VERSIONS)
    top = archive.similar(RELU.read_text(), k=2)
    assert top[0].problem_name == "01_matmul_bias_relu_bf16" and top[0].score == 1.0


def test_similarity_weights():
    relu, gelu = {"linear": 1, "relu": 1}, {"linear": 1, "gelu": 1}
    assert similarity(relu, relu) == 1.0 and similarity(relu, {}) == 0.0
    assert similarity(relu, gelu) > similarity(relu, {"softmax": 1}) == 0.0
    assert similarity(relu, {"matmul": 1, "add": 1, "relu": 1}) > 0.3  # matmul + add is a linear by hand
    assert similarity({"matmul": 1}, {"matmul": 1, "add": 1}) > similarity({"add": 1}, {"matmul": 1, "add": 1})


MANUAL = '''
import torch
import torch.nn as nn

ROWS = 64
DIM = 128


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        {branch}
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight
        g = self.proj(h)
        return g * torch.sigmoid(g)


def get_inputs():
    return [torch.randn(ROWS, DIM)]


def get_init_inputs():
    return [DIM]
'''


def test_signature_normalises_and_falls_back():
    sig = problem_signature(MANUAL.format(branch="pass"))
    assert sig["traced"] == "fx"
    assert sig["ops"] == {"linear": 1, "rms_norm": 1, "silu": 1}  # peepholes for hand-written ops
    assert sig["constants"] == {"ROWS": 64, "DIM": 128}
    assert sig["inputs"] == [{"shape": [64, 128], "dtype": "float32"}]
    # data-dependent control flow defeats symbolic tracing: the source scan still names the ops
    sig = problem_signature(MANUAL.format(branch="if x.sum() > 0:\n            x = x + 1"))
    assert sig["traced"] == "ast" and "fx" in sig["error"]
    assert {"linear", "rsqrt", "mean", "sigmoid"} <= set(sig["ops"])
    broken = problem_signature("import torch\n\nclass Model:\n    def forward(self, x):\n        return x.relu()\n")
    assert broken["traced"] == "ast" and broken["ops"] == {"relu": 1} and "load" in broken["error"]


def test_problem_hash_ignores_comments_not_sizes():
    src = RELU.read_text()
    assert problem_hash(src) == problem_hash(RELU)
    assert problem_hash(src.replace('"""Linear + bias', '"""A different docstring. Linear + bias') + "# hi\n") \
        == problem_hash(src)
    assert problem_hash(src.replace("TOKENS = 8192", "TOKENS = 8000")) != problem_hash(src)


WRITER = textwrap.dedent('''
    import sys
    from kernelwright.eval.archive import Archive

    a = Archive(sys.argv[1])
    i = 0
    while True:
        a.record(sys.argv[2], f"# candidate {i}\\n" + "x = 1\\n" * 40000,
                 {"correct": i % 2 == 0, "speedup_eager": 1 + i / 100, "speedup_compile": None, "reason": None},
                 device="cpu", versions={"torch": "test"})
        i += 1
        print(i, flush=True)
''')


def test_killed_writer_leaves_a_readable_archive(tmp_path):
    path = tmp_path / "archive.db"
    env = dict(os.environ, KW_DEVICE="cpu")
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(SOFTMAX)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
    try:
        n, deadline = 0, time.time() + 120
        while n < 30 and time.time() < deadline:
            line = child.stdout.readline()
            if not line:
                break
            n = int(line)
        assert n >= 30, child.stderr.read()
        with Archive(path) as other:  # a second writer meanwhile: the busy timeout serialises them
            other.record(RELU, "from the parent", verdict(True, 3.0), "cpu", VERSIONS)
    finally:
        os.kill(child.pid, signal.SIGKILL)  # mid-record, most likely: a record is mostly its write
        child.wait()
    assert child.returncode == -signal.SIGKILL
    with Archive(path) as a:
        assert a.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        cands = a.candidates(SOFTMAX)
        assert len(cands) >= n
        for c in cands:  # every record whole: no truncated code, verdicts parse
            assert c.code.count("x = 1\n") == 40000 and c.verdict["correct"] == c.correct
        assert [c.code.split("\n")[0] for c in cands] == [f"# candidate {i}" for i in range(len(cands))]
        assert a.best(SOFTMAX).correct and a.best(RELU).code == "from the parent"
        a.record(SOFTMAX, "after the crash", verdict(True, 99.0), "cpu", VERSIONS)
        assert a.best(SOFTMAX).code == "after the crash"


def test_schema_version_is_checked(tmp_path):
    path = tmp_path / "archive.db"
    with Archive(path) as a:
        assert a.schema_version == SCHEMA_VERSION
        a.record(SOFTMAX, "code", verdict(True, 1.0), "cpu", VERSIONS)
    with Archive(path) as a:  # reopening keeps what was there
        assert len(a) == 1
    con = sqlite3.connect(path)
    con.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    con.commit()
    con.close()
    with pytest.raises(ArchiveError, match="schema version 99"):
        Archive(path)
    other = tmp_path / "results.db"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE runs (id INTEGER)")
    con.commit()
    con.close()
    with pytest.raises(ArchiveError, match="not a kernelwright archive"):
        Archive(other)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(ArchiveError, match="not an SQLite file"):
        Archive(junk)
    with pytest.raises(ArchiveError, match="no archive"):
        Archive(tmp_path / "missing.db", create=False)
    assert not (tmp_path / "missing.db").exists()


def test_default_path_from_env(tmp_path, monkeypatch):
    monkeypatch.setenv("KW_ARCHIVE", str(tmp_path / "env.db"))
    with Archive() as a:
        assert a.path == str(tmp_path / "env.db")


def test_archive_cli(tmp_path, capsys):
    path = str(tmp_path / "archive.db")
    assert archive_cli(["--archive", path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert not Path(path).exists()  # listing never creates the file
    with Archive(path) as a:
        a.record(GELU, "gelu kernel", verdict(True, 1.3, 0.8), "NVIDIA H200", VERSIONS)
        a.record(SOFTMAX, "softmax kernel", verdict(True, 4.0), "NVIDIA H200", VERSIONS)
        a.record(SOFTMAX, "wrong", verdict(False, 40.0), "NVIDIA H200", VERSIONS)
    assert archive_cli(["--archive", path, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["problem_name"], r["speedup_eager"]) for r in rows] == [
        ("02_matmul_bias_gelu_fp16", 1.3), ("06_softmax_narrow_fp32", 4.0)]
    assert "code" not in rows[0]
    assert archive_cli(["--archive", path, "--json", "--similar", str(RELU), "-k", "1", "--code"]) == 0
    (m,) = json.loads(capsys.readouterr().out)
    assert m["problem_name"] == "02_matmul_bias_gelu_fp16" and m["best"]["code"] == "gelu kernel"
    assert archive_cli(["--archive", path]) == 0
    out = capsys.readouterr().out
    assert "02_matmul_bias_gelu_fp16" in out and "4.00x" in out and "40.00x" not in out
    assert archive_cli(["--archive", path, "--similar", str(RELU)]) == 0
    assert "score" in capsys.readouterr().out
    with pytest.raises(UsageError, match="--similar"):
        archive_cli(["--archive", path, "--similar", str(tmp_path / "nope.py")])


def test_every_problem_in_the_set_traces():
    from kernelwright.eval.problemset import discover

    for p in discover():
        sig = problem_signature(p)
        assert sig["traced"] == "fx" and sig["ops"] and "error" not in sig, (p.name, sig.get("error"))
        assert sig["inputs"] and all("dtype" in x for x in sig["inputs"])
