"""Results store (append-only, concurrent writers, interrupted runs), the compare rule, the timer, roofline."""

import multiprocessing as mp
import sqlite3

import pytest

from kernelwright.errors import UsageError
from kernelwright.harness.roofline import Ceilings
from kernelwright.harness.timing import TimerConfig, summarize, time_fn
from kernelwright.store.compare import compare_runs, verdict
from kernelwright.store.db import Store


def _row(variant="triton", ms=1.0, iqr=0.01, size="4096"):
    return {"family": "vector_add", "variant": variant, "role": "rung", "size": size, "dtype": "fp32",
            "median_ms": ms, "iqr_ms": iqr, "samples": [ms] * 3}


def test_runs_append_and_rows_roundtrip(db_path):
    s = Store(db_path)
    a = s.start_run({"device": "d", "device_kind": "cpu-interpreter"}, "first")
    s.add_row(a, _row())
    s.finish_run(a)
    b = Store(db_path).start_run({"device": "d", "device_kind": "cpu-interpreter"}, "second")
    assert b > a
    rows = Store(db_path).rows(a)
    assert len(rows) == 1 and rows[0]["samples"] == [1.0, 1.0, 1.0]
    assert [r["id"] for r in s.runs()] == [b, a]


def _writer(path, run_id, n):
    s = Store(path)
    for i in range(n):
        s.add_row(run_id, _row(size=str(i)))


def test_concurrent_writers(db_path):
    run_id = Store(db_path).start_run({"device_kind": "cpu-interpreter"})
    procs = [mp.get_context("spawn").Process(target=_writer, args=(db_path, run_id, 25)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert len(Store(db_path).rows(run_id)) == 100


def test_unwritable_path_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        Store(str(tmp_path / "missing" / "x.db"))
    with pytest.raises(UsageError, match="not a writable file"):
        Store(str(tmp_path))


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ((1.0, 0.01), (1.005, 0.01), "same"),
        ((1.0, 0.01), (0.80, 0.01), "faster"),
        ((1.0, 0.01), (1.30, 0.01), "slower"),
        ((1.0, 0.01), (1.015, 0.01), "ambiguous"),  # beyond the noise, not twice beyond it
        ((1.0, 0.30), (1.40, 0.30), "ambiguous"),   # a big change inside overlapping noisy spreads
    ],
)
def test_verdict(a, b, expected):
    assert verdict(a[0], a[1], b[0], b[1])[0] == expected


def test_compare_runs_matches_rows_and_refuses_cpu_vs_gpu(db_path):
    s = Store(db_path)
    a = s.start_run({"device_kind": "cuda"})
    b = s.start_run({"device_kind": "cuda"})
    c = s.start_run({"device_kind": "cpu-interpreter"})
    s.add_row(a, _row(ms=1.0))
    s.add_row(b, _row(ms=0.5))
    s.add_row(b, _row(variant="torch", ms=0.5))  # unmatched in run a: left out
    deltas = compare_runs(s, a, b)
    assert [(d.variant, d.verdict) for d in deltas] == [("triton", "faster")]
    with pytest.raises(UsageError, match="never compared"):
        compare_runs(s, a, c)
    with pytest.raises(UsageError, match="no run with id 999"):
        compare_runs(s, a, 999)


def test_summarize():
    med, iqr, mn = summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (med, iqr, mn) == (3.0, 2.0, 1.0)


def test_cpu_timer_is_labelled_and_counts():
    calls = []
    t = time_fn(lambda: calls.append(1), TimerConfig(max_seconds=0.2), "cpu")
    assert t.mode == "cpu-interpreter" and t.median_ms >= 0 and len(t.samples_ms) == len(calls) - 1
    assert t.min_ms <= t.median_ms


def test_roofline_bound():
    c = Ceilings("d", "drv", "cuda", copy_tbps=4.0, matmul_tflops={"fp32": 50.0, "bf16": 800.0}, measured_at="",
                 method="")
    t, kind = c.bound_seconds(flops=1e9, nbytes=4e9, unit="vector", dtype_name="bf16")
    assert kind == "memory" and t == pytest.approx(1e-3)
    t, kind = c.bound_seconds(flops=8e12, nbytes=1e6, unit="tensor", dtype_name="bf16")
    assert kind == "compute" and t == pytest.approx(1e-2)


def test_sqlite_file_is_wal(db_path):
    Store(db_path)
    assert sqlite3.connect(db_path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_inexact_peer_is_timed_and_flagged_wrong_rung_is_not():
    import dataclasses

    import torch

    from kernelwright.harness.bench import bench_family
    from kernelwright.harness.roofline import Ceilings
    from kernelwright.harness.timing import TimerConfig
    from kernelwright.registry import Peer, Rung, get_family

    fam = get_family("vector_add")
    sloppy = Peer("sloppy", lambda: (lambda x, y: x + y + 1e-3), "adds an error")
    broken = Rung("broken", "torch", "tests.test_store_timing:_broken_add", "writes x only")
    fam = dataclasses.replace(fam, peers=(sloppy,), rungs=(fam.rungs[0], broken))
    ceil = Ceilings("cpu", "-", "cpu", 1.0, {"fp32": 1.0}, "now", "test")
    rows = bench_family(fam, [(1000,)], [torch.float32], ceil, timer=TimerConfig(max_seconds=0.05, min_samples=3))
    by = {r["variant"]: r for r in rows}
    assert by["sloppy"]["correct"] is False and by["sloppy"]["median_ms"] and "inexact" in by["sloppy"]["note"]
    assert by["broken"]["correct"] is False and not by["broken"].get("median_ms")
    assert "incorrect, not timed" in by["broken"]["note"]


def _broken_add(x, y, *, out):
    return out.copy_(x)
