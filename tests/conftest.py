"""Tests run on CPU through Triton's interpreter unless KW_DEVICE=cuda (then `-m gpu` tests run too).

The device must be settled before any Triton kernel is defined, so it is set here, before kernelwright loads.
"""

import os

os.environ.setdefault("KW_DEVICE", "cpu")
os.environ.setdefault("KW_CACHE_DIR", os.path.join(os.path.dirname(__file__), "..", ".kwcache"))
# evaluations record themselves in an archive (default ./kernelwright-archive.db): tests keep theirs out of the repo
if "KW_ARCHIVE" not in os.environ:
    import tempfile

    os.environ["KW_ARCHIVE"] = os.path.join(tempfile.mkdtemp(prefix="kw-test-archive-"), "archive.db")

import pytest  # noqa: E402

import kernelwright  # noqa: E402, F401  (settles the device)
from kernelwright import runtime  # noqa: E402


@pytest.hookimpl(trylast=True)  # after `-m` and `-k` have deselected theirs
def pytest_collection_modifyitems(config, items):
    # KW_GPU_SKIP=N: leave out the first N selected tests, so a GPU run cut short by a time limit resumes where it
    # stopped (benchmarks/h200/ops.sh gpusuite sets it for the file it resumes in)
    skip_first = os.environ.get("KW_GPU_SKIP", "")
    if skip_first:
        if not skip_first.isdigit():
            raise pytest.UsageError(f"KW_GPU_SKIP: expected a count of tests (0 or more), got {skip_first!r}")
        n = min(int(skip_first), len(items))
        config.hook.pytest_deselected(items=items[:n])
        del items[:n]
    if runtime.current_device() != "cuda":
        skip = pytest.mark.skip(reason="needs a CUDA GPU (run with KW_DEVICE=cuda on a GPU machine)")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


@pytest.fixture
def device():
    return runtime.current_device()


@pytest.fixture
def db_path(tmp_path):
    return str(tmp_path / "results.db")


class LaunchRecorder:
    """A stand-in for a compiled CUDA kernel: ``kernel_for(cfg, pair=False)`` returns one that records each launch
    (the config, whether the pair kernel was asked for, grid, block, arguments, shared memory, cluster) in
    ``calls``, so a launcher's plumbing is tested on the CPU."""

    def __init__(self):
        self.calls = []

    def kernel_for(self, cfg, pair=False):
        calls = self.calls

        class _Kernel:
            def launch(self, grid, block, args, shared_mem, cluster):
                calls.append({"cfg": cfg, "pair": pair, "grid": grid, "block": block, "args": args,
                              "smem": shared_mem, "cluster": cluster})

        return _Kernel()


@pytest.fixture
def launch_recorder():
    return LaunchRecorder()



@pytest.fixture(params=[pytest.param("cuda", marks=pytest.mark.gpu, id="gpu"), pytest.param("cpu", id="emulated")])
def cuda_dev(request):
    """Where a CUDA C rung's test runs: ``"cuda"`` on a Hopper GPU (``-m gpu`` with KW_DEVICE=cuda), or ``"cpu"``
    through the CUDA emulator (:mod:`kernelwright.backends.emulate`) in CPU runs. Tests size their work by it (the
    emulator runs a test's rows, not a benchmark's)."""
    if request.param == "cuda":
        if not runtime.is_hopper():
            pytest.skip("needs a Hopper GPU (run with KW_DEVICE=cuda on an H100/H200)")
        yield "cuda"
        return
    if runtime.current_device() == "cuda":
        pytest.skip("emulated in CPU runs (KW_DEVICE=cpu), where the Triton fallbacks run through the interpreter")
    from kernelwright.backends import emulate
    from kernelwright.errors import Unavailable

    try:
        emulate.compiler()
    except Unavailable as e:
        pytest.skip(str(e))
    with emulate.cuda_on_cpu():
        yield "cpu"
