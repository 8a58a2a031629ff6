"""The CUDA C matmul ladder: every source compiles on CPU (NVRTC, sm_90), launch geometry covers the output, and
on a GPU every rung matches a float64 reference on ragged shapes, layouts and inside CUDA-graph capture.

Tolerance (fp32 accumulation, inputs exact in fp32): each output is a length-K dot product summed in fp32, in an
order that differs per rung. The worst-case bound, K * u * (|A| @ |B|) with u = 2^-24, grows with K and would
hide a dropped term at large K; rounding errors of random data add like a random walk instead, and Higham and
Mary's probabilistic bound ("A new approach to probabilistic rounding error analysis", SISC 2019) says
|error| <= lam * sqrt(K) * u * (|A| @ |B|) holds per element with probability >= 1 - 2 exp(-lam^2 / 2). With
lam = 8 a false failure is ~1e-14 per element, while a missing or doubled term (~ (|A| @ |B|) / K) or a wrong
element is orders of magnitude above the bound at every K tested here.
"""

import math

import pytest
import torch

from kernelwright.backends import nvrtc
from kernelwright.ops.matmul import cuda as mm

pytest.importorskip("cuda.core", reason="cuda-core (NVRTC) not installed")

U = 2.0**-24  # unit roundoff of float32
LAM = 8.0
# 1x1x1: a single product; 127x131x129: primes, ragged in every tile and every float4; 64x64x64: exactly one
# tile of the 64 configs, float4 path; 1000^3: many tiles, K and N multiples of 4 but not of any tile (float4
# path with ragged borders); 257x33x1031: one row past 2 x 128, N narrower than a tile, K odd (scalar path)
SHAPES = [(1, 1, 1), (127, 131, 129), (64, 64, 64), (1000, 1000, 1000), (257, 33, 1031)]
RUNG_CALLS = [(rung, {}) for rung in mm.RUNGS] + [("cuda_smem", {"tile": t}) for t in (8, 16)]
RUNG_IDS = [rung + "".join(f"-{k}{v}" for k, v in kw.items()) for rung, kw in RUNG_CALLS]


def check(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    ref = a.double() @ b.double()
    bound = LAM * math.sqrt(a.shape[1]) * U * (a.double().abs() @ b.double().abs())
    err = (out.double() - ref).abs()
    bad = ~(err <= bound)  # NaN (an output never written) counts as bad
    assert not bad.any(), (
        f"{int(bad.sum())} of {out.numel()} outputs off, first at {tuple(bad.nonzero()[0].tolist())}; "
        f"max err/bound {float((err / bound).nan_to_num(float('inf')).max()):.3g}"
    )


def nan_out(m: int, n: int, device: str = "cuda") -> torch.Tensor:
    return torch.full((m, n), float("nan"), device=device)


def emulator_sized(dev: str, m: int, n: int, k: int) -> None:
    """The emulator (CPU, ~1 us a thread at each barrier) takes the shapes up to ~300^3; the larger are the GPU's."""
    if dev == "cpu" and m * n * k > 3e7:
        pytest.skip("a GPU-sized shape: the emulated run takes the smaller ones")


# --- CPU: compiles, geometry ------------------------------------------------------------------------------------
def test_every_rung_and_tile_compiles_to_an_sm90_cubin():
    cubins = mm.compile_all()
    assert set(cubins) == set(mm.RUNGS) | {"cuda_smem[tile=8]", "cuda_smem[tile=16]", "cuda_warptile[small]"}
    for key, cubin in cubins.items():
        assert cubin[:4] == b"\x7fELF", key
        rung = key.split("[")[0]
        names = [f"{rung}_vec4", f"{rung}_scalar"] if mm.CONFIGS[rung].vec4 else [rung]
        for name in names:
            assert name.encode() in cubin, f"{key}: no symbol {name}"


def test_sources_are_one_file_per_rung():
    assert list(mm.SOURCES) == list(mm.RUNGS) == list(mm.NOTES)
    assert all(p.is_file() for p in mm.SOURCES.values())


@pytest.mark.parametrize("rung, kw", RUNG_CALLS, ids=RUNG_IDS)
@pytest.mark.parametrize("size", [(1, 1, 1), (127, 131, 129), (4097, 4095, 4093), (4096, 4096, 4096)])
def test_artifact_geometry_covers_the_output(rung, kw, size):
    m, n, k = size
    art = mm.artifact(rung, m, n, k, **kw)
    config = mm.config(rung, m, n, **kw)
    assert art["cubin"][:4] == b"\x7fELF" and art["kernel"].encode() in art["cubin"]
    assert 32 <= art["threads_per_block"] <= 1024 and art["threads_per_block"] == math.prod(config.threads)
    assert 0 <= art["dynamic_smem"] <= 227 * 1024
    gx, gy, gz = art["grid"]
    rows, cols = (gx, gy) if config.m_on_x else (gy, gx)
    tm, tn = config.tile
    assert gz == 1 and rows * tm >= m > (rows - 1) * tm and cols * tn >= n > (cols - 1) * tn  # covers, no spare
    if config.vec4:
        assert art["kernel"].endswith("_vec4" if k % 4 == 0 and n % 4 == 0 else "_scalar")


def test_warptile_takes_small_tiles_below_most_of_a_wave():
    assert mm.config("cuda_warptile", 1024, 1024) == mm.WARPTILE_SMALL
    assert mm.config("cuda_warptile", 2048, 2048) == mm.config("cuda_warptile", 4096, 4096) == mm.CONFIGS[
        "cuda_warptile"]
    small = mm.artifact("cuda_warptile", 1024, 1024, 1024)
    assert small["grid"][:2] == (1024 // mm.WARPTILE_SMALL.tile[1], 1024 // mm.WARPTILE_SMALL.tile[0])
    assert small["threads_per_block"] == mm.WARPTILE_SMALL.threads[0]
    assert mm.artifact("cuda_warptile", 4096, 4096, 4096)["dynamic_smem"] > 48 * 1024  # the raised-limit path


def test_bad_rung_and_tile_are_usage_errors():
    from kernelwright.errors import UsageError

    with pytest.raises(UsageError, match="rung"):
        mm.artifact("cuda_magic", 8, 8, 8)
    with pytest.raises(UsageError, match="tile"):
        mm.artifact("cuda_smem", 8, 8, 8, tile=64)
    with pytest.raises(UsageError, match="size"):
        mm.artifact("cuda_naive", 0, 8, 8)


def test_a_syntax_error_raises_compile_error_with_the_log():
    kernel = nvrtc.CudaKernel('extern "C" __global__ void k(float* x) { x[0] = 1.0f }\n', "k", what="bad.cu")
    with pytest.raises(nvrtc.CompileError) as e:
        kernel.cubin  # noqa: B018 (the property compiles)
    assert "expected" in e.value.log and "bad.cu" in str(e.value)


# --- GPU: correctness -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rung, kw", RUNG_CALLS, ids=RUNG_IDS)
@pytest.mark.parametrize("size", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_rung_matches_float64_reference(cuda_dev, rung, kw, size):
    m, n, k = size
    emulator_sized(cuda_dev, m, n, k)
    a, b = torch.randn(m, k, device=cuda_dev), torch.randn(k, n, device=cuda_dev)
    out = nan_out(m, n, cuda_dev)
    assert getattr(mm, rung)(a, b, out=out, **kw) is out
    check(out, a, b)


@pytest.mark.parametrize("which", ["large", "small"])
@pytest.mark.parametrize("size", SHAPES + [(2049, 2052, 516), (2047, 2049, 515)], ids=lambda s: "x".join(map(str, s)))
def test_both_warptile_configs(cuda_dev, which, size):
    # the rung picks its config by shape (the large one from ~1800^2 outputs); force each on every shape
    cfg = mm.CONFIGS["cuda_warptile"] if which == "large" else mm.WARPTILE_SMALL
    m, n, k = size
    emulator_sized(cuda_dev, m, n, k)
    a, b = torch.randn(m, k, device=cuda_dev), torch.randn(k, n, device=cuda_dev)
    check(mm.launch(cfg, a, b, nan_out(m, n, cuda_dev)), a, b)


@pytest.mark.parametrize("rung", mm.RUNGS)
def test_transposed_and_misaligned_views(cuda_dev, rung):
    # a^T and b^T views are packed by .contiguous(); a view starting one float into its storage is contiguous
    # but not 16-byte aligned, so the float4 rungs must take their scalar entry point
    m, n, k = 200, 96, 132
    at = torch.randn(k, m, device=cuda_dev).t()
    bt = torch.randn(n, k, device=cuda_dev).t()
    out = nan_out(m, n, cuda_dev)
    check(getattr(mm, rung)(at, bt, out=out), at, bt)
    a = torch.randn(m * k + 1, device=cuda_dev)[1:].view(m, k)
    b = torch.randn(k * n + 1, device=cuda_dev)[1:].view(k, n)
    out = nan_out(m, n, cuda_dev)
    check(getattr(mm, rung)(a, b, out=out), a, b)


@pytest.mark.gpu
def test_empty_and_zero_k():
    out = nan_out(4, 4)
    mm.cuda_warptile(torch.randn(4, 0, device="cuda"), torch.randn(0, 4, device="cuda"), out=out)
    assert (out == 0).all()
    empty = torch.empty(0, 8, device="cuda")
    assert mm.cuda_naive(torch.randn(0, 8, device="cuda"), torch.randn(8, 8, device="cuda"), out=empty) is empty


@pytest.mark.gpu
@pytest.mark.parametrize("rung", mm.RUNGS)
def test_launch_inside_cuda_graph_capture_replays(rung):
    m, n, k = 300, 260, 200
    fn = getattr(mm, rung)
    a, b = torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")
    out = nan_out(m, n)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up (compile, load) off the capture
        fn(a, b, out=out)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(a, b, out=out)
    a.copy_(torch.randn(m, k, device="cuda"))
    b.copy_(torch.randn(k, n, device="cuda"))
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    check(out, a, b)


@pytest.mark.gpu
def test_launches_on_the_current_stream():
    a, b = torch.randn(512, 512, device="cuda"), torch.randn(512, 512, device="cuda")
    out = nan_out(512, 512)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        mm.cuda_warptile(a, b, out=out)
        result = out.clone()  # ordered after the kernel only if it ran on `side`
    torch.cuda.current_stream().wait_stream(side)
    check(result, a, b)
