"""The public ops: dispatch, properties of the results, layouts, empty inputs and every error path."""

import pytest
import torch

import kernelwright
from kernelwright import ops, runtime
from kernelwright.errors import Unavailable, UsageError


@pytest.fixture(autouse=True)
def _tensors_on_the_test_device():
    # CPU tensors in the interpreter run, CUDA tensors under KW_DEVICE=cuda
    torch.set_default_device(runtime.current_device())
    yield
    torch.set_default_device("cpu")


def test_vector_add_default_variant_matches_torch():
    x, y = torch.randn(1000), torch.randn(1000)
    torch.testing.assert_close(ops.vector_add(x, y), x + y, rtol=0, atol=0)


@pytest.mark.parametrize("variant", ["multipass", "fused", "online", "split", None])
def test_softmax_properties(variant):
    x = torch.randn(6, 513) * 5
    y = ops.softmax(x, variant=variant)
    torch.testing.assert_close(y.sum(-1), torch.ones(6), rtol=0, atol=1e-5)
    # shift invariance: softmax(x + c) == softmax(x)
    torch.testing.assert_close(ops.softmax(x + 100.0, variant=variant), y, rtol=1e-5, atol=1e-6)
    assert (y >= 0).all()


def test_softmax_extremes():
    x = torch.tensor([[1e4, 0.0, -1e4], [-3e38, -3e38, -3e38]], dtype=torch.float32)
    y = ops.softmax(x)
    torch.testing.assert_close(y, torch.softmax(x.double(), -1).float())


@pytest.mark.parametrize("dim", [0, 1, 2, -1, -2])
def test_softmax_any_dim_noncontiguous(dim):
    x = torch.randn(5, 7, 9).transpose(0, 2)  # non-contiguous
    torch.testing.assert_close(ops.softmax(x, dim=dim), torch.softmax(x.double(), dim).float())


@pytest.mark.parametrize("variant", ["fused", "online", "split", None])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_log_softmax_matches_float64(variant, dtype):
    """log_softmax on the softmax rungs: against float64 on fresh inputs (wide enough for two online chunks, an
    inner dim on a non-contiguous view), into a NaN-poisoned buffer, with extreme rows."""
    for shape, dim in (((6, 5000), -1), ((5, 7, 9), 1)):
        x = (torch.randn(shape) * 4).to(dtype)
        if dim != -1:
            x = x.transpose(0, 2)
        ref = torch.log_softmax(x.double(), dim)
        out = torch.full(x.shape, float("nan"), dtype=dtype)
        y = ops.log_softmax(x, dim, variant=variant, out=out)
        assert y is out
        tol = 2**-7 * ref.abs() + 1e-6 if dtype == torch.bfloat16 else 1e-6 * ref.abs() + 1e-6
        assert bool(((y.double() - ref).abs() <= tol).all()), (shape, dim, (y.double() - ref).abs().max())
    x = torch.tensor([[1e4, 0.0, -1e4], [-3e38, -3e38, -3e38]], dtype=torch.float32)
    torch.testing.assert_close(ops.log_softmax(x, variant=variant), torch.log_softmax(x.double(), -1).float())


def test_log_softmax_bad_input():
    with pytest.raises(UsageError, match="variant 'multipass': log_softmax runs on fused, online, split"):
        ops.log_softmax(torch.randn(2, 3), variant="multipass")
    with pytest.raises(UsageError, match="x: log_softmax has no backward"):
        ops.log_softmax(torch.randn(2, 3, requires_grad=True))
    with pytest.raises(UsageError, match="dim: expected a value in"):
        ops.log_softmax(torch.randn(2, 3), dim=2)
    with torch.no_grad():
        assert ops.log_softmax(torch.randn(2, 3, requires_grad=True)).shape == (2, 3)


def test_out_buffer_is_used():
    x = torch.randn(4, 33)
    out = torch.full_like(x, float("nan"))
    assert ops.softmax(x, out=out) is out
    torch.testing.assert_close(out, torch.softmax(x, -1))


def test_empty_inputs_return_empty():
    assert ops.vector_add(torch.empty(0), torch.empty(0)).shape == (0,)
    assert ops.softmax(torch.empty(0, 5)).shape == (0, 5)
    assert ops.softmax(torch.empty(3, 0), dim=0).shape == (3, 0)


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda: ops.vector_add(torch.randn(3), torch.randn(4)), "y: expected shape (3,)"),
        (lambda: ops.vector_add(torch.randn(3), torch.randn(3, dtype=torch.float16)), "y: expected dtype float32"),
        (lambda: ops.vector_add(torch.arange(3), torch.arange(3)), "x: expected dtype"),
        (lambda: ops.vector_add([1.0], torch.randn(1)), "x: expected a torch.Tensor"),
        (lambda: ops.softmax(torch.randn(3), dim=1), "dim: expected a value in [-1, 0]"),
        (lambda: ops.softmax(torch.randn(3), dim=1.0), "dim: expected an int"),
        (lambda: ops.softmax(torch.tensor(1.0)), "x: expected a tensor with at least one dimension"),
        (lambda: ops.softmax(torch.randn(3, 4), variant="bogus"), "variant: family 'softmax' has no rung 'bogus'"),
        (lambda: ops.softmax(torch.randn(3, 40000), variant="fused"), "exceeds 32768"),
        (lambda: ops.softmax(torch.randn(3, 4), out=torch.empty(4, 3)), "out: expected a float32 tensor"),
        (lambda: ops.softmax(torch.randn(3, 4, dtype=torch.float64)), "x: expected dtype float32, float16"),
    ],
)
def test_bad_input_names_the_argument(call, needle):
    with pytest.raises(UsageError) as e:
        call()
    assert needle in str(e.value)


def test_usage_errors_are_value_errors():
    # callers that catch ValueError for bad arguments keep working
    with pytest.raises(ValueError):
        ops.vector_add(torch.randn(2), torch.randn(3))


@pytest.mark.skipif(runtime.current_device() == "cuda", reason="a GPU is present")
def test_cuda_only_rung_on_cpu_says_so():
    from kernelwright.registry import Rung

    rung = Rung("cuda_rung", "cuda", "nowhere:fn", "test", needs="cuda")
    assert "needs a CUDA GPU" in rung.unavailable_reason()
    with pytest.raises(Unavailable, match="needs a CUDA GPU"):
        rung.load()


def test_device_selection_errors():
    from kernelwright import runtime

    with pytest.raises(UsageError, match="device: expected one of auto, cpu, cuda"):
        runtime.select_device("tpu")
    if not runtime.cuda_available():
        with pytest.raises(UsageError, match="no CUDA GPU"):
            runtime.select_device("cuda")
    assert kernelwright.runtime.current_device() in ("cpu", "cuda")


def test_triton_imported_before_the_interpreter_is_a_clear_error():
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["KW_DEVICE"] = "cpu"
    code = "import triton.language; import kernelwright"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode != 0 and "import kernelwright before triton" in r.stderr


def test_python_verify_and_bench(tmp_path):
    results = kernelwright.verify("vector_add", variants=["triton"], dtypes=["bf16"])
    assert results and all(r.ok for r in results)
    from kernelwright.harness.timing import TimerConfig

    db = str(tmp_path / "r.db")
    rows = kernelwright.bench("softmax", sizes=[(8, 100)], dtypes=[torch.float32], variants=["fused"], db=db,
                              timer=TimerConfig(max_seconds=0.05))
    assert {r["variant"] for r in rows} >= {"torch", "fused"}
    from kernelwright.store.db import Store

    s = Store(db)
    assert s.runs()[0]["status"] == "finished" and len(s.rows(s.runs()[0]["id"])) == len(rows)
