"""KW_GPU_SKIP (tests/conftest.py): a GPU run cut short by a time limit resumes after the tests it finished."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _collect(skip: str | None, marker: str | None = None) -> subprocess.CompletedProcess:
    """Collect tests/test_gpu.py (with `-m <marker>` when one is given) in a fresh pytest, KW_GPU_SKIP=skip."""
    env = {k: v for k, v in os.environ.items() if k != "KW_GPU_SKIP"}
    if skip is not None:
        env["KW_GPU_SKIP"] = skip
    select = ["-m", marker] if marker else []
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *select,
                           "tests/test_gpu.py", "--collect-only"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def _collected(skip: str | None) -> tuple[int, list[str]]:
    p = _collect(skip, "gpu")
    return p.returncode, [line for line in p.stdout.splitlines() if "::" in line]


def test_kw_gpu_skip_leaves_out_the_first_selected_tests_in_order():
    rc, everything = _collected(None)
    assert rc == 0 and len(everything) >= 4, everything
    rc, rest = _collected("3")
    assert rc == 0
    assert rest == everything[3:]
    rc, none = _collected(str(len(everything) + 5))
    assert none == []


def test_kw_gpu_skip_that_is_not_a_count_is_refused_by_name():
    p = _collect("three")
    assert p.returncode != 0
    assert "KW_GPU_SKIP" in p.stdout + p.stderr and "'three'" in p.stdout + p.stderr
