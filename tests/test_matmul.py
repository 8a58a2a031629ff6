"""matmul beyond the ladder checks: the public op's errors, the TMA path under the interpreter, dispatch, and
the autotuner (cache reuse, stale and corrupt caches, pruning, choosing the fastest)."""

import json
import time
import warnings

import pytest
import torch

from kernelwright import ops, runtime, tune
from kernelwright.cli import main
from kernelwright.errors import Unavailable, UsageError
from kernelwright.ops.matmul import triton as T
from kernelwright.registry import get_family


@pytest.fixture(autouse=True)
def _own_tune_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KW_CACHE_DIR", str(tmp_path))
    tune.forget()
    yield
    tune.forget()


def _close(c, a, b):
    ref = a.double() @ b.double()
    bound = 2**-16 * (a.double().abs() @ b.double().abs()) + 2**-7 * ref.abs()
    assert bool(((c.double() - ref).abs() <= bound).all())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"])
def test_default_variant_any_shape_and_transposed_views(dtype, device):
    for m, n, k in [(1, 1, 1), (127, 131, 129), (8, 48, 1100)]:
        a = torch.randn(k, m, device=device).to(dtype).T  # column-major view
        b = torch.randn(n, k, device=device).to(dtype).T
        _close(ops.matmul(a, b), a, b)


def test_k_zero_and_empty(device):
    a, b = torch.randn(3, 0, device=device), torch.randn(0, 4, device=device)
    assert torch.equal(ops.matmul(a, b), torch.zeros(3, 4, device=device))
    assert ops.matmul(torch.randn(0, 5, device=device), torch.randn(5, 4, device=device)).shape == (0, 4)


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda: ops.matmul(torch.randn(3, 4), torch.randn(5, 2)), "b: expected 4 rows"),
        (lambda: ops.matmul(torch.randn(2, 3, 4), torch.randn(4, 2)), "a: expected a 2-D tensor"),
        (lambda: ops.matmul(torch.randn(3, 4), torch.randn(4)), "b: expected a 2-D tensor"),
        (lambda: ops.matmul(torch.randn(3, 4), torch.randn(4, 2).half()), "b: expected dtype float32 like a"),
        (lambda: ops.matmul(torch.ones(3, 4, dtype=torch.int32), torch.ones(4, 2, dtype=torch.int32)),
         "a: expected dtype"),
        (lambda: ops.matmul(torch.randn(3, 4), torch.randn(4, 2, device="meta")), "b: expected a CPU or CUDA"),
        (lambda: ops.matmul(torch.randn(3, 4), torch.randn(4, 2), variant="fastest"), "has no rung 'fastest'"),
        (lambda: ops.matmul(torch.randn(3, 4), torch.randn(4, 2), allow_tf32=1), "allow_tf32: expected a bool"),
        (lambda: ops.matmul(torch.randn(3, 4).half(), torch.randn(4, 2).half(), variant="cuda_naive"),
         "cuda_naive"),
    ],
)
def test_bad_input_names_the_argument(call, needle):
    with pytest.raises((UsageError, Unavailable)) as e:
        call()
    assert needle in str(e.value)


@pytest.mark.skipif(runtime.current_device() == "cuda", reason="CPU-only behaviour")
def test_cuda_rung_on_cpu_says_it_needs_a_gpu():
    with pytest.raises(Unavailable, match="needs a CUDA GPU"):
        ops.matmul(torch.randn(3, 4), torch.randn(4, 2), variant="cuda_warptile")


def test_dispatch_prefers_splitk_for_skinny_shapes():
    fam = get_family("matmul")
    assert fam.preferred((16, 8192, 8192), {})[0] == "triton_splitk"
    assert fam.preferred((4096, 4096, 4096), {})[0] == "triton_autotuned"


@pytest.mark.skipif(runtime.current_device() == "cuda", reason="the interpreter runs the TMA path on CPU")
def test_persistent_rung_runs_its_tma_path_when_strides_allow(monkeypatch):
    used = []
    real = T._descriptor
    monkeypatch.setattr(T, "_descriptor", lambda t, block: used.append(real(t, block)) or used[-1])
    a, b = torch.randn(40, 64).half(), torch.randn(72, 64).half().T  # K*2 bytes = 128: aligned; b transposed
    c = T.triton_persistent(a, b, out=torch.full((40, 72), float("nan")).half())
    _close(c, a, b)
    assert all(d is not None for d, _ in used) and used[1][1] is True  # B's descriptor is over its transpose
    used.clear()
    a, b = torch.randn(40, 65).half(), torch.randn(65, 72).half()  # 130-byte rows: TMA cannot address them
    _close(T.triton_persistent(a, b, out=torch.empty(40, 72).half()), a, b)
    assert used[0][0] is None


# --- the autotuner -------------------------------------------------------------------------------------------------
def _space(prune=None):
    return tune.Space(
        "test.space", T.MatmulConfig,
        lambda dtype: [T.MatmulConfig(64, 64, 32), T.MatmulConfig(128, 128, 64), T.MatmulConfig(256, 256, 128)],
        prune or (lambda cfg, size, dtype, limits: None),
        lambda size: f"m{tune.pow2_bucket(size[0])}",
        lambda size, dtype: T.MatmulConfig(32, 32, 32),
    )


def _sleepy(delays):
    calls = []

    def make(cfg):
        def run():
            calls.append(cfg)
            time.sleep(delays[cfg.BM])
        return run
    return make, calls


def test_tune_picks_the_fastest_checks_results_and_caches():
    space = _space()
    make, calls = _sleepy({64: 0.004, 128: 0.001, 256: 0.002})
    res = tune.tune(space, (100, 8, 8), torch.float16, make, timer=tune.TimerConfig(min_samples=3, max_samples=3))
    assert res.source == "tuned" and res.best.BM == 128
    assert tune.cache_path(space).exists()
    tune.forget()  # a new process: reads the file, times nothing
    calls.clear()
    assert tune.lookup(space, (120, 8, 8), torch.float16).BM == 128  # same bucket (128)
    assert tune.lookup(space, (300, 8, 8), torch.float16) is None  # another bucket
    assert tune.lookup(space, (120, 8, 8), torch.bfloat16) is None  # another dtype
    assert calls == []
    # a config whose output is wrong never wins, however fast
    make, _ = _sleepy({64: 0.004, 128: 0.001, 256: 0.002})

    def make_returning_bm(cfg):
        run = make(cfg)
        return lambda: (run(), cfg.BM)[1]

    res = tune.tune(space, (100, 8, 8), torch.float32, make_returning_bm,
                    check=lambda bm: bm != 128, timer=tune.TimerConfig(min_samples=3, max_samples=3))
    assert res.best.BM == 256 and any(t.note == "wrong result" for t in res.trials)


def test_pruned_configs_are_never_launched():
    limits = tune.Limits(smem_per_block=227 * 1024, regs_per_sm=65536, max_threads_per_block=1024, sms=132)
    keep, pruned = tune.candidates(tune.Space("x", T.MatmulConfig, T._tile_configs, T._prune, T._bucket,
                                              T._default), (4096, 4096, 4096), torch.float32, limits)
    assert pruned and all(t.note.startswith("pruned") for t in pruned)
    for cfg in keep:
        assert cfg.smem_bytes(4) <= limits.smem_per_block and cfg.acc_per_thread() <= 128
    # fp32's 4-byte tiles overflow shared memory where fp16's fit
    assert T.MatmulConfig(256, 128, 64, 8, 8, 4) not in keep
    make, calls = _sleepy({64: 0.0, 128: 0.0, 256: 0.0})
    space = _space(prune=lambda cfg, size, dtype, limits: "too big" if cfg.BM == 256 else None)
    res = tune.tune(space, (64, 8, 8), torch.float16, make, timer=tune.TimerConfig(min_samples=2, max_samples=2))
    assert all(c.BM != 256 for c in calls)
    assert any(t.note == "pruned: too big" for t in res.trials)


def test_stale_cache_is_ignored_and_corrupt_cache_warns_then_rebuilds():
    space = _space()
    make, _ = _sleepy({64: 0.002, 128: 0.001, 256: 0.003})
    tune.tune(space, (100, 8, 8), torch.float16, make, timer=tune.TimerConfig(min_samples=2, max_samples=2))
    path = tune.cache_path(space)
    data = json.loads(path.read_text())
    data["env"]["device"] = "some other GPU"
    path.write_text(json.dumps(data))
    tune.forget()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # stale is not an error: silently ignored
        assert tune.lookup(space, (100, 8, 8), torch.float16) is None
    path.write_text("{ not json")
    tune.forget()
    with pytest.warns(UserWarning, match="unreadable or from another kernelwright version"):
        assert tune.lookup(space, (100, 8, 8), torch.float16) is None
    tune.tune(space, (100, 8, 8), torch.float16, make, timer=tune.TimerConfig(min_samples=2, max_samples=2))
    assert json.loads(path.read_text())["env"] == tune.environment()  # rebuilt
    data = json.loads(path.read_text())
    data["env"]["format"] = 999  # written by another kernelwright version
    path.write_text(json.dumps(data))
    tune.forget()
    with pytest.warns(UserWarning, match="another kernelwright version"):
        assert tune.lookup(space, (100, 8, 8), torch.float16) is None


@pytest.mark.skipif(runtime.current_device() == "cuda", reason="CPU-only behaviour")
def test_best_uses_the_default_on_cpu_without_timing():
    make, calls = _sleepy({64: 0.0, 128: 0.0, 256: 0.0})
    assert tune.best(_space(), (100, 8, 8), torch.float16, make) == T.MatmulConfig(32, 32, 32)
    assert calls == []


@pytest.mark.skipif(runtime.current_device() == "cuda", reason="CPU-only behaviour")
def test_kw_tune_needs_a_gpu_and_names_tunable_rungs(capsys):
    assert main(["tune", "matmul"]) == 3
    assert "CUDA GPU" in capsys.readouterr().err
    assert main(["tune", "matmul", "--variant", "triton_tiled"]) == 2
    assert "triton_autotuned" in capsys.readouterr().err


# --- kw inspect: compiled artifacts, no GPU -----------------------------------------------------------------------
def test_kw_inspect_shows_tensor_cores_for_triton_and_ffma_for_cuda_c(capsys):
    pytest.importorskip("cuda.core", reason="CUDA C rungs compile through cuda-core's NVRTC")
    assert main(["inspect", "matmul", "--variant", "triton_autotuned", "--shape", "512", "--dtype", "fp16",
                 "--json"]) == 0
    (kern,) = json.loads(capsys.readouterr().out)["kernels"]
    assert kern["registers"] > 0 and kern["dynamic_smem"] > 0
    if kern["mix"] is not None:  # the disassembler is in the test extra; without it the report says so
        assert kern["mix"]["classes"]["tensor-core MMA"] > 0
    assert main(["inspect", "matmul", "--variant", "cuda_vectorized", "--shape", "4096"]) == 0
    text = capsys.readouterr().out
    assert "cuda_vectorized" in text and "occupancy" in text and "registers" in text


def test_kw_inspect_bad_requests(capsys):
    assert main(["inspect", "matmul", "--variant", "cuda_naive", "--dtype", "fp16"]) == 2
    assert "takes float32 only" in capsys.readouterr().err
    assert main(["inspect", "softmax", "--variant", "fused"]) == 2
    assert "no compiled artifacts" in capsys.readouterr().err
    assert main(["inspect", "matmul", "--variant", "nope"]) == 2


def test_verification_never_tunes(monkeypatch):
    monkeypatch.setattr(tune.runtime, "current_device", lambda: "cuda")
    monkeypatch.delenv("KW_AUTOTUNE", raising=False)
    assert tune.autotune_enabled()
    with tune.suspended():
        assert not tune.autotune_enabled()  # kw check on dozens of fuzz shapes uses cached or default configs
    assert tune.autotune_enabled()


def test_unaligned_shapes_get_their_own_tuning_bucket():
    assert T._bucket((1000, 1000, 1000)) != T._bucket((1024, 1024, 1024))
    assert T._bucket((1008, 1008, 1008)) == T._bucket((1024, 1024, 1024))


def test_dispatch_prefers_tma_for_rows_only_16_byte_aligned():
    assert get_family("matmul").preferred((1000, 1000, 1000), {})[0] == "triton_persistent"
    assert get_family("matmul").preferred((127, 131, 129), {})[0] == "triton_autotuned"


_ACTS = {None: lambda r: r, "relu": torch.relu, "gelu": torch.nn.functional.gelu,
         "gelu_tanh": lambda r: torch.nn.functional.gelu(r, approximate="tanh"), "silu": torch.nn.functional.silu}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_fused_epilogue_every_triton_rung_and_activation(dtype, device):
    """act(a @ b + bias) + residual on the fp32 accumulator, rounded once: every Triton rung (split-K applies it
    in its reduction), every activation, odd sizes, a transposed weight and a strided residual; large values
    reach the activations' tails (exp overflow in SiLU and tanh-GELU must give x or 0, never NaN)."""
    torch.manual_seed(1)
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    for m, n, k in [(37, 45, 29), (64, 128, 96)]:
        a = (torch.randn(m, k, device=device) * 4).to(dtype)
        b = torch.randn(n, k, device=device).to(dtype).T
        bias = torch.randn(n, device=device).to(dtype)
        res = torch.randn(n, m, device=device).to(dtype).T  # a column-major residual
        base = a.double() @ b.double() + bias.double()
        for act, f in _ACTS.items():
            ref = f(base) + res.double()
            for v in ("triton_tiled", "triton_grouped", "triton_autotuned", "triton_persistent", "triton_splitk"):
                out = torch.full((m, n), float("nan"), device=device, dtype=dtype)
                y = ops.matmul(a, b, variant=v, bias=bias, activation=act, residual=res, out=out)
                err = ((y.double() - ref).abs().max() / ref.abs().max()).item()
                assert err < tol, (m, n, k, act, v, err)
    # bias alone, activation alone, residual alone: each as F.linear-style references
    y = ops.matmul(a, b, variant="triton_autotuned", activation="relu")
    assert torch.allclose(y.double(), torch.relu(a.double() @ b.double()), rtol=tol, atol=tol * 10)


def test_fused_epilogue_bad_input():
    a, b = torch.randn(4, 8), torch.randn(8, 6)
    with pytest.raises(UsageError, match="activation: expected one of"):
        ops.matmul(a, b, activation="tanh")
    with pytest.raises(UsageError, match=r"bias: expected shape \[6\]"):
        ops.matmul(a, b, bias=torch.randn(4))
    with pytest.raises(UsageError, match=r"residual: expected shape \[4, 6\], dtype float32"):
        ops.matmul(a, b, residual=torch.randn(4, 6, dtype=torch.float16))
    with pytest.raises(UsageError, match="residual: must not be the out buffer"):
        out = torch.empty(4, 6)
        ops.matmul(a, b, residual=out, out=out)
    # K = 0: the product is zeros, the epilogue still applies
    z = ops.matmul(torch.randn(4, 0), torch.randn(0, 6), bias=torch.full((6,), 2.0), activation="relu")
    assert torch.equal(z, torch.full((4, 6), 2.0))
