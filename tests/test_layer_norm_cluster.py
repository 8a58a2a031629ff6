"""The layer_norm cluster rung (CUDA C, Hopper): every configuration the launcher can pick compiles for sm_90
(no spills on the 16-byte path, no library calls), rows wider than it takes are refused by name, and on an
H100/H200 it matches a float64 reference on aligned and unaligned widths up to 262,144 columns, with the saved mean
and rstd, constant rows, a large offset against a small spread, extreme magnitudes, and in two runs bit for bit.
(The family fuzz, tests/test_ladders.py, covers it too when run on a Hopper GPU.)"""

import dataclasses

import pytest
import torch

from kernelwright.harness.verify import compare
from kernelwright.ops.layer_norm import cuda as lc
from kernelwright.ops.softmax import cuda as sc
from kernelwright.registry import get_family

FAM = get_family("layer_norm")

CONFIGS = [(n, dt, v) for dt in (torch.bfloat16, torch.float16, torch.float32) for v in (True, False)
           for n in (7, 4096, 32769, 65536, 262144) if not (v and n % (16 // dt.itemsize))]


@pytest.mark.parametrize(("n", "dtype", "vector"), CONFIGS)
@pytest.mark.parametrize("save", [False, True], ids=["plain", "stats"])
def test_every_config_compiles_for_sm90(n, dtype, vector, save):
    pytest.importorskip("cuda.core", reason="cuda-core (NVRTC) not installed")
    from kernelwright.harness import inspect as ki

    art = lc.artifact(n, dtype, vector, save_stats=save)
    rep = ki.analyze(ki.Artifact("layer_norm_cluster", art["cubin"], art["threads_per_block"]))
    assert rep.registers <= 64, rep.registers
    if vector:
        assert rep.stack_bytes == 0 and rep.mix.local_store_bytes == 0, "spills"
    else:  # one element an access (unaligned rows): 32 columns' addresses for x, w, b and y, some on the stack
        assert rep.stack_bytes <= 160, rep.stack_bytes
    assert rep.mix.opcodes.get("UCGABAR_WAIT", 0) == (2 if art["config"].cluster > 1 else 0)
    assert not any(op.startswith("CALL") for op in rep.mix.opcodes), "a library call"


def test_rows_wider_than_the_rung_are_refused_by_name():
    rung = FAM.rung("cluster")
    assert rung.needs == "hopper" and rung.backend == "cuda"
    assert rung.refusal((4, 262144), {}) is None
    why = rung.refusal((4, 262145), {})
    assert why and "262145" in why and "cluster" in why
    # variant=None: where it led on the H200 (runs 60-61), 8192 to 16384 columns in every dtype
    assert [FAM.preferred((64, d), {}, torch.float16)[0] for d in (4096, 8192, 16384, 16392, 65536, 262144)] == \
        ["fused", "cluster", "cluster", "split", "split", "split"]


def test_kw_inspect_gets_the_kernel_the_launcher_would_run():
    pytest.importorskip("cuda.core", reason="cuda-core (NVRTC) not installed")
    (art,) = lc.inspect_artifacts((1024, 262144), torch.bfloat16)
    assert (art.threads_per_block, art.grid, art.dynamic_smem) == (512, (4096, 1, 1), 8 * 512 * 16)


WIDTHS = [1, 7, 8, 1000, 4097, 8192, 32768, 32776, 65536, 131072, 262143, 262144]


def _check(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float = 1e-5, tol=None):
    out = torch.full_like(x, float("nan"))  # poisoned: an element never written fails
    rows = x.numel() // x.shape[-1]
    mean = torch.full((rows,), float("nan"), device=x.device)
    rstd = torch.full((rows,), float("nan"), device=x.device)
    x_before = x.clone()
    lc.layer_norm_cluster(x, w, b, eps, out=out, stats=(mean, rstd))
    x64 = x.double()
    ref = FAM.reference(x64, w.double(), b.double(), eps)
    cmp = compare(out, ref, tol or FAM.tolerances[x.dtype], FAM.error_scale(x64, w.double(), b.double(), eps=eps))
    assert cmp.ok, f"{tuple(x.shape)} {x.dtype}: {cmp.reason}"
    m64 = x64.mean(-1).reshape(-1)
    r64 = torch.rsqrt(x64.var(-1, unbiased=False) + eps).reshape(-1)
    spread = (x64 - x64.mean(-1, keepdim=True)).abs().amax(-1).reshape(-1)
    assert ((mean.double() - m64).abs() <= 1e-5 * (m64.abs() + spread) + 1e-30).all(), "saved mean"
    assert torch.allclose(rstd.double(), r64, rtol=5e-5, atol=0), "saved rstd"
    assert torch.equal(x, x_before), "the input changed"
    again = torch.full_like(x, float("nan"))
    lc.layer_norm_cluster(x, w, b, eps, out=again)
    bits = torch.int16 if x.element_size() == 2 else torch.int32
    assert torch.equal(out.view(bits), again.view(bits)), "two runs differ: a race"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("n", WIDTHS)
def test_matches_float64_at_every_width(cuda_dev, n, dtype):
    rows = max(1, min(37 if cuda_dev == "cuda" else 3, (1 << 22) // n))  # the emulator: a few rows
    x = torch.randn(rows, n, device=cuda_dev).mul_(3).add_(1).to(dtype)
    w, b = torch.randn(n, device=cuda_dev).to(dtype), torch.randn(n, device=cuda_dev).to(dtype)
    _check(x, w, b)
    if n >= 8:  # an unaligned row start: the one-element path
        xs = torch.randn(rows, n + 1, device=cuda_dev).to(dtype)[:, 1:]
        assert not sc.aligned(xs, xs)
        _check(xs, w, b)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_constant_rows_offsets_and_extreme_magnitudes(cuda_dev, dtype):
    n = 262144 if dtype == torch.bfloat16 else 65536  # clusters of several CTAs
    x = torch.randn(6, n, device=cuda_dev).to(dtype)
    x[0] = 0                       # zeros: y = b
    x[1] = 2.5                     # a constant row: variance 0, y = b
    x[2] = 1000 + torch.randn(n, device=cuda_dev)  # a large mean against a small spread (Chan's merge)
    x[3] *= 1e30                   # squares past fp32's range
    x[4] *= 1e-30                  # a variance below eps
    x[5, : n // 2] = 0             # a CTA of zeros among partners that are not
    w, b = torch.randn(n, device=cuda_dev).to(dtype), torch.randn(n, device=cuda_dev).to(dtype)
    _check(x[[0, 1, 3, 4, 5]], w, b)
    # the offset row on its own: its fp32 mean is rounded relative to 1000, so every x - mean carries up to half an
    # ulp of 1000 (3e-5, 3e-5 of the spread): the whole row's relative error is that, whatever the kernel (H200 run
    # 62: 1.4e-5 over these six rows against the family's 1e-5); elementwise the error scale already counts it
    tol = FAM.tolerances[dtype]
    _check(x[2:3], w, b, tol=dataclasses.replace(tol, norm=max(tol.norm, 4 * 1000 * 2.0**-24)))


def test_many_rows_and_3d(cuda_dev):
    def vec(n):
        return torch.randn(n, device=cuda_dev).to(torch.bfloat16)

    _check(torch.randn(20000 if cuda_dev == "cuda" else 300, 4096, device=cuda_dev).to(torch.bfloat16), vec(4096),
           vec(4096))
    _check(torch.randn(2, 3, 65536, device=cuda_dev).to(torch.bfloat16), vec(65536), vec(65536))


# --- the ONE_PASS_MEAN switch (session 15, not yet timed): largest magnitude and sum in one pass -----------------
def test_one_pass_mean_compiles_without_spills_where_it_applies(monkeypatch):
    pytest.importorskip("cuda.core", reason="cuda-core (NVRTC) not installed")
    from kernelwright.harness import inspect as ki

    monkeypatch.setattr(lc, "FAST_STATS", False)  # (FAST_STATS, the default since session 24, replaces it)
    for n, dtype in ((40000, torch.bfloat16), (65536, torch.float16), (262144, torch.bfloat16), (8192, torch.bfloat16)):
        monkeypatch.setattr(lc, "ONE_PASS_MEAN", False)
        before = lc.artifact(n, dtype, True, save_stats=True)
        monkeypatch.setattr(lc, "ONE_PASS_MEAN", True)
        art = lc.artifact(n, dtype, True, save_stats=True)
        assert (art["cubin"] != before["cubin"]) == (art["config"].snv > 0), n  # only with shared-memory vectors
        rep = ki.analyze(ki.Artifact("layer_norm_cluster", art["cubin"], art["threads_per_block"]))
        assert rep.registers <= 64 and rep.stack_bytes == 0 and rep.mix.local_store_bytes == 0, (n, rep.stack_bytes)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_one_pass_mean_matches_float64(cuda_dev, monkeypatch, dtype):
    monkeypatch.setattr(lc, "FAST_STATS", False)
    monkeypatch.setattr(lc, "ONE_PASS_MEAN", True)
    for n in (40000, 65536, 131072, 262144):
        x = torch.randn(5, n, device=cuda_dev).mul_(3).add_(1).to(dtype)
        w, b = torch.randn(n, device=cuda_dev).to(dtype), torch.randn(n, device=cuda_dev).to(dtype)
        _check(x, w, b)
    n = 262144
    x = torch.randn(6, n, device=cuda_dev)
    x[0] = 0
    x[1] = 2.5
    # bf16: sums past fp32's top unscaled (~256 x 1e37 a CTA), finite in the 2^-24 scale; fp16: its largest values
    x[2] *= 1.2e4 if dtype == torch.float16 else 1e37
    # bf16: a tiny chunk (below 2^-40), summed again in its own scale; fp16: its subnormals (never below 2^-24)
    x[3] *= 1e-6 if dtype == torch.float16 else 1e-30
    x[4] *= 1e-4 if dtype == torch.float16 else 1e-12  # just above the threshold (bf16); fp16's smallest normals
    x[5, : n // 2] = 0
    x = x.to(dtype)
    w, b = torch.randn(n, device=cuda_dev).to(dtype), torch.randn(n, device=cuda_dev).to(dtype)
    _check(x, w, b)
    _check(x[3:5], w, b, eps=0.0)  # no eps: the tiny rows' own spread sets rstd, so their mean must be right


# --- FAST_STATS and STORE_FMA (session 22, not yet run on a GPU): one pass for the statistics, two FMAs a store ---
def test_fast_stats_and_store_fma_compile_without_spills(monkeypatch):
    pytest.importorskip("cuda.core", reason="cuda-core (NVRTC) not installed")
    from kernelwright.harness import inspect as ki

    for n, dtype in ((40000, torch.bfloat16), (65536, torch.float16), (262144, torch.bfloat16), (8192, torch.bfloat16)):
        monkeypatch.setattr(lc, "FAST_STATS", False)
        monkeypatch.setattr(lc, "STORE_FMA", False)
        before = lc.artifact(n, dtype, True, save_stats=True)
        monkeypatch.setattr(lc, "FAST_STATS", True)
        fast = lc.artifact(n, dtype, True, save_stats=True)
        assert (fast["cubin"] != before["cubin"]) == (fast["config"].snv > 0), n  # only with shared-memory vectors
        monkeypatch.setattr(lc, "STORE_FMA", True)
        both = lc.artifact(n, dtype, True, save_stats=True)
        for art in (fast, both):
            rep = ki.analyze(ki.Artifact("layer_norm_cluster", art["cubin"], art["threads_per_block"]))
            assert rep.registers <= 64 and rep.stack_bytes == 0 and rep.mix.local_store_bytes == 0, (n, rep.stack_bytes)
            # the fast path: one barrier before the row's (e, mean, M2) is known; the slow paths' are behind a branch
            assert rep.mix.opcodes.get("BAR.SYNC.DEFER_BLOCKING", 0) + rep.mix.opcodes.get("BAR.SYNC", 0) >= 1


def _special_rows(n: int, dtype: torch.dtype, dev: str) -> torch.Tensor:
    x = torch.randn(9, n, device=dev)
    x[0] = 0
    x[1] = 2.5                                             # constant: M2 = Q - S mean cancels entirely
    x[2] *= 1.2e4 if dtype == torch.float16 else 1e37      # past 2^40 (bf16): the scaled passes
    x[3] *= 1e-6 if dtype == torch.float16 else 1e-30      # under 2^-40 (bf16): the scaled passes
    x[4] = x[4] + 1000                                     # a large mean: cancellation, the centred pass
    x[5] = x[5] * 2 + 7                                    # mean 3.5 sd: M2 / Q = 0.075, just over 1 / 16: fast
    x[6] = x[6] * 2 + 8.5                                  # mean 4.25 sd: 0.052, just under: the centred pass
    x[7, : n // 2] *= 1e-30 if dtype == torch.bfloat16 else 1e-6  # a row whose CTAs take different paths
    x[8] = x[8] * 3 + 1
    return x.to(dtype)


def _check_wide_rows(dev: str, dtype: torch.dtype, rows: int):
    """_check at 40000 / 65536 / 131072 columns (``rows`` random rows each) and on the special rows at 262144 columns,
    whose (x, w, b) it returns."""
    for n in (40000, 65536, 131072):
        x = torch.randn(rows, n, device=dev).mul_(3).add_(1).to(dtype)
        w, b = torch.randn(n, device=dev).to(dtype), torch.randn(n, device=dev).to(dtype)
        _check(x, w, b)
    n = 262144
    x = _special_rows(n, dtype, dev)
    w, b = torch.randn(n, device=dev).to(dtype), torch.randn(n, device=dev).to(dtype)
    _check(x, w, b)
    return x, w, b


@pytest.mark.parametrize("store_fma", [False, True], ids=["fast", "fast+fma"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_fast_stats_match_float64(cuda_dev, monkeypatch, dtype, store_fma):
    monkeypatch.setattr(lc, "FAST_STATS", True)
    monkeypatch.setattr(lc, "STORE_FMA", store_fma)
    x, w, b = _check_wide_rows(cuda_dev, dtype, 3)
    _check(x[3:4], w, b, eps=0.0)  # no eps: the tiny row's own spread sets rstd


def _saved_stats(monkeypatch, switch: str, x, w, b) -> dict:
    """The (mean, rstd) the rung saves for the rows of ``x`` with ``switch`` off and on: {False: ..., True: ...}."""
    stats = {}
    for on in (False, True):
        monkeypatch.setattr(lc, switch, on)
        mean, rstd = (torch.full((x.shape[0],), float("nan"), device=x.device) for _ in range(2))
        lc.layer_norm_cluster(x, w, b, 1e-5, out=torch.empty_like(x), stats=(mean, rstd))
        stats[on] = mean, rstd
    return stats


def test_fast_stats_take_the_fast_path_only_where_it_holds(cuda_dev, monkeypatch):
    """rstd with FAST_STATS against without: the same bits on the rows that fall back (zeros, constant, out of range,
    cancelled), other bits on some of the rows that take the one-pass M2 (the mean is the same value either way)."""
    n = 262144
    x = _special_rows(n, torch.bfloat16, cuda_dev)
    w, b = torch.randn(n, device=cuda_dev).bfloat16(), torch.randn(n, device=cuda_dev).bfloat16()
    stats = _saved_stats(monkeypatch, "FAST_STATS", x, w, b)
    assert torch.equal(stats[False][0], stats[True][0]), "the mean: S / n is the scaled sum's value"
    same = stats[False][1] == stats[True][1]
    assert same[[0, 1, 2, 3, 4, 6]].all(), same
    assert not same[[5, 8]].all(), "no row took the one-pass M2"


# --- TC_STATS (session 25, not yet run on a GPU): FAST_STATS' two sums on the tensor cores ---------------------
def test_tc_stats_compile_to_tensor_core_instructions_without_spills(monkeypatch):
    """Three mma.sync a held 16-byte vector (the sum against ones, the squares against the vector's own rows) in the
    16-bit kernels FAST_STATS applies to, at 64 registers without spills (sm_90); fp32 and the narrow shapes keep
    their kernels, and so does every kernel with the switch off."""
    pytest.importorskip("cuda.core", reason="cuda-core (NVRTC) not installed")
    from kernelwright.harness import inspect as ki

    def hmma(art):
        rep = ki.analyze(ki.Artifact("layer_norm_cluster", art["cubin"], art["threads_per_block"]))
        return rep, sum(v for k, v in rep.mix.opcodes.items() if k.startswith("HMMA"))

    for n, dtype in ((40000, torch.bfloat16), (65536, torch.float16), (131072, torch.bfloat16),
                     (262144, torch.bfloat16), (262144, torch.float16)):
        monkeypatch.setattr(lc, "TC_STATS", False)
        plain = lc.artifact(n, dtype, True, save_stats=True)
        assert hmma(plain)[1] == 0
        monkeypatch.setattr(lc, "TC_STATS", True)
        art = lc.artifact(n, dtype, True, save_stats=True)
        rep, count = hmma(art)
        cfg = art["config"]
        assert count == 3 * (cfg.nv + 1), (n, count)  # the register vectors unrolled, the shared-memory loop once
        assert rep.registers <= 64 and rep.stack_bytes == 0 and rep.mix.local_store_bytes == 0, (n, rep.stack_bytes)
    for n, dtype in ((8192, torch.bfloat16), (65536, torch.float32)):  # no FAST_STATS there: unchanged
        monkeypatch.setattr(lc, "TC_STATS", False)
        plain = lc.artifact(n, dtype, True)["cubin"]
        monkeypatch.setattr(lc, "TC_STATS", True)
        assert lc.artifact(n, dtype, True)["cubin"] == plain, (n, dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_tc_stats_match_float64(cuda_dev, monkeypatch, dtype):
    """The output against float64 with TC_STATS at 40000-262144 columns (the special rows at 262144: zeros,
    constant, out of FAST_STATS' range, a large mean, either side of the 1/16 cut, CTAs taking different paths); and
    the saved statistics against the fold's: the same bits where the sums are not used (zeros, constant, and for bf16
    the rows out of range: the scaled passes), within a few ulps of fp32 elsewhere (the tensor cores add in their own
    order)."""
    monkeypatch.setattr(lc, "FAST_STATS", True)
    monkeypatch.setattr(lc, "TC_STATS", True)
    x, w, b = _check_wide_rows(cuda_dev, dtype, 2)
    stats = _saved_stats(monkeypatch, "TC_STATS", x, w, b)
    k = 4 if dtype == torch.bfloat16 else 2  # (fp16's scaled rows 2 and 3 lie inside FAST's range: sums used)
    for a, c in zip(stats[False], stats[True], strict=True):
        assert torch.equal(a[:k], c[:k]), (a[:k], c[:k])
        assert torch.allclose(a, c, rtol=1e-5, atol=1e-6), (a, c)


# --- the PAIR_ROWS switch (session 19, not yet run on a GPU): two rows a cluster, w and b read once for both ----
PAIR_SHAPES = [(65536, torch.bfloat16, True, (2, 512)), (262144, torch.float16, True, (8, 512)),
               (40000, torch.bfloat16, True, (2, 512)), (131072, torch.bfloat16, True, (4, 512)),
               (32768, torch.bfloat16, True, None),  # one CTA holds the row in registers: no shared-memory half
               (65536, torch.float32, True, None), (65536, torch.bfloat16, False, None)]


@pytest.mark.parametrize(("n", "dtype", "vector", "shape"), PAIR_SHAPES)
def test_pair_shapes(n, dtype, vector, shape):
    from kernelwright.ops import _cluster_norm as cn

    cfg = cn.pair_config(sc.cluster_config(n, dtype.itemsize, vector), n, dtype.itemsize)
    assert (None if cfg is None else (cfg.cluster, cfg.threads)) == shape
    if cfg is not None:  # the same columns of two rows: NV vectors a thread in registers, as many in shared memory
        assert cfg.nv == cfg.snv and cfg.cluster * cfg.threads * cfg.nv * (16 // dtype.itemsize) >= n


@pytest.mark.parametrize("n", [40000, 65536, 131072, 262144])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_pair_compiles_for_sm90_without_spills(n, dtype):
    pytest.importorskip("cuda.core", reason="cuda-core (NVRTC) not installed")
    from kernelwright.harness import inspect as ki

    for save in (False, True):
        art = lc.pair_artifact(n, dtype, save_stats=save)
        rep = ki.analyze(ki.Artifact(art["kernel"], art["cubin"], art["threads_per_block"]))
        assert rep.registers <= 64 and rep.stack_bytes == 0 and rep.mix.local_store_bytes == 0, rep.stack_bytes
        assert rep.mix.opcodes.get("UCGABAR_WAIT", 0) == 2  # the exchange, and the wait before the CTA exits
        assert not any(op.startswith("CALL") for op in rep.mix.opcodes), "a library call"


@pytest.mark.parametrize(("rows", "n", "dtype", "pair"), [(5, 65536, torch.bfloat16, True),
                                                          (4, 262144, torch.float16, True),
                                                          (5, 16384, torch.bfloat16, False),
                                                          (3, 65536, torch.float32, False)])
def test_pair_launch_plumbing(launch_recorder, rows, n, dtype, pair):
    """With PAIR_ROWS on, the launcher sends the wide 16-bit rows to the pair kernel over (rows + 1) // 2 clusters,
    with the row count before the width; other rows keep the one-row kernel and its arguments (CPU, no launch)."""
    from kernelwright.ops import _cluster_norm as cn

    x = torch.randn(rows, n).to(dtype)
    w, b, y = torch.randn(n).to(dtype), torch.randn(n).to(dtype), torch.empty(rows, n, dtype=dtype)
    cn.launch(launch_recorder.kernel_for, x, y, (w, b), (y, y), 1e-5, pair=True)
    (c,) = launch_recorder.calls
    assert c["pair"] == pair
    cfg = c["cfg"]
    assert c["grid"] == (((rows + 1) // 2 if pair else rows) * cfg.cluster,) and c["block"] == (cfg.threads,)
    assert c["smem"] == cfg.snv * cfg.threads * 16
    lead = (rows,) if pair else ()
    assert c["args"][6:] == (*lead, n, n, n, 1e-5, 1.0 / n)  # after x, w, b, y, mean, rstd
    if pair:
        assert (cfg.cluster, cfg.nv, cfg.snv) == ((2 if n == 65536 else 8), 8, 8)


@pytest.mark.parametrize("n", [40000, 65536, 131072, 262144])
def test_pair_one_pass_compiles_for_sm90(monkeypatch, n):
    """PAIR_ONE_PASS: two barriers a CTA instead of three; 8 bytes of spills in some shapes (one register pair
    stored once a thread, sm_90), no library calls; the default pair kernel is another binary."""
    pytest.importorskip("cuda.core", reason="cuda-core (NVRTC) not installed")
    from kernelwright.harness import inspect as ki

    for dtype in (torch.bfloat16, torch.float16):
        before = lc.pair_artifact(n, dtype)["cubin"]
        monkeypatch.setattr(lc, "PAIR_ONE_PASS", True)
        art = lc.pair_artifact(n, dtype)
        monkeypatch.setattr(lc, "PAIR_ONE_PASS", False)
        assert art["cubin"] != before
        rep = ki.analyze(ki.Artifact(art["kernel"], art["cubin"], art["threads_per_block"]))
        assert rep.registers <= 64 and rep.stack_bytes <= 8 and rep.mix.local_store_bytes <= 8, rep.stack_bytes
        assert not any(op.startswith("CALL") for op in rep.mix.opcodes), "a library call"


@pytest.mark.parametrize("one_pass", [False, True], ids=["three-pass", "one-pass"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_pair_matches_float64(cuda_dev, monkeypatch, dtype, one_pass):
    monkeypatch.setattr(lc, "PAIR_ROWS", True)
    monkeypatch.setattr(lc, "PAIR_ONE_PASS", one_pass)
    for n in (32776, 40000, 65536, 131072, 262144):
        for rows in (1, 2, 5):  # a lone row, one pair, and a pair short of its second row
            x = torch.randn(rows, n, device=cuda_dev).mul_(3).add_(1).to(dtype)
            w, b = torch.randn(n, device=cuda_dev).to(dtype), torch.randn(n, device=cuda_dev).to(dtype)
            _check(x, w, b)
    n = 262144
    x = torch.randn(7, n, device=cuda_dev)
    x[0] = 0                       # zeros: y = b (first of a pair)
    x[1] = 2.5                     # a constant row (second of a pair)
    x[2] *= 1e30 if dtype == torch.bfloat16 else 1e4   # squares past fp32's range / fp16's largest values
    x[3] *= 1e-30 if dtype == torch.bfloat16 else 1e-6  # a variance below eps / fp16's subnormals (one pass: the
    #                                                     bf16 row below 2^-40 sums again in its own scale)
    x[4, : n // 2] = 0             # CTAs of zeros among partners that are not, in both positions of a pair
    x[5, n // 2:] = 0
    x = x.to(dtype)
    w, b = torch.randn(n, device=cuda_dev).to(dtype), torch.randn(n, device=cuda_dev).to(dtype)
    _check(x, w, b)
    _check(torch.randn(3, 2, 65536, device=cuda_dev).to(dtype), w[:65536], b[:65536])  # leading dims: 6 rows
    xs = torch.randn(4, 65536 + 8, device=cuda_dev).to(dtype)[:, :65536]  # rows with a stride past their width
    _check(xs, w[:65536], b[:65536])
    tol = FAM.tolerances[dtype]  # the offset row on its own, as in test_constant_rows_offsets_and_extreme_magnitudes
    off = (1000 + torch.randn(2, n, device=cuda_dev)).to(dtype)
    _check(off, w, b, tol=dataclasses.replace(tol, norm=max(tol.norm, 4 * 1000 * 2.0**-24)))


@pytest.mark.parametrize("family", ["layer_norm", "rms_norm"])
def test_timeline_instrument_compiles_for_sm90_and_is_absent_by_default(family, monkeypatch):
    """TIMELINE (rows.cuh; benchmarks/experiments/norm_timeline.py's instrument) compiles into both forward cluster
    kernels with one more argument (clock reads, no spills past 32 bytes); the library's kernels are compiled without
    it (fewer instructions; their cubins were byte-identical before and after it was added, session 22)."""
    pytest.importorskip("cuda.core", reason="cuda-core (NVRTC) not installed")
    from kernelwright.harness import inspect as ki
    from kernelwright.ops import _cluster_norm as cn
    from kernelwright.ops.rms_norm import cuda as rc
    from kernelwright.ops.softmax import cuda as sc

    monkeypatch.setattr(lc, "FAST_STATS", False)  # the library's kernel compiled with the options named here
    mod, extra = (lc, ("SAVE_STATS=0", "ONE_PASS_MEAN=0", "PAIR=0")) if family == "layer_norm" else \
        (rc, ("OFFSET=0", "SAVE_STATS=0", "FAST=1"))
    for n in (16384, 65536, 262144):
        cfg = sc.cluster_config(n, 2, True)
        k = cn.compiled(mod.SOURCE, f"{family}_cluster", cn.options(cfg, torch.bfloat16, (*extra, "TIMELINE=1")))
        rep = ki.analyze(ki.Artifact(f"{family}_cluster", k.cubin, cfg.threads))
        assert rep.mix.opcodes.get("CS2R", 0) + rep.mix.opcodes.get("S2UR", 0) + rep.mix.opcodes.get("S2R", 0) > 0
        assert rep.registers <= 64 and rep.mix.local_store_bytes <= 32, (n, rep.registers, rep.mix.local_store_bytes)
        plain = ki.analyze(ki.Artifact(f"{family}_cluster", mod.artifact(n, torch.bfloat16)["cubin"], cfg.threads))
        assert sum(rep.mix.opcodes.values()) > sum(plain.mix.opcodes.values())  # the records are extra code
