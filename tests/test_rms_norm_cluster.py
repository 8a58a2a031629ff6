"""The rms_norm cluster rung (CUDA C, Hopper): every configuration the launcher can pick compiles for sm_90 without
spills (CPU, NVRTC), rows wider than it takes are refused by name, and on an H100/H200 it matches a float64
reference on aligned and unaligned widths up to 262,144 columns, with the Gemma offset, the saved rstd, rows of
zeros and extreme magnitudes, and in two runs bit for bit; with the FAST_STATS switch (one-pass statistics) the same,
plus bit for bit the default's output on rows inside its range. (The family fuzz, tests/test_ladders.py, covers it
too when run on a Hopper GPU.)"""

import pytest
import torch

from kernelwright.harness.verify import compare
from kernelwright.ops.rms_norm import cuda as rc
from kernelwright.ops.softmax import cuda as sc
from kernelwright.registry import get_family

FAM = get_family("rms_norm")

CONFIGS = [(n, dt, v) for dt in (torch.bfloat16, torch.float16, torch.float32) for v in (True, False)
           for n in (7, 4096, 32769, 65536, 262144) if not (v and n % (16 // dt.itemsize))]


@pytest.fixture(params=[False, True], ids=["scaled", "fast"])
def fast(request, monkeypatch):
    """The rung's statistics as by default (a pass for the largest magnitude, one for the scaled squares) and with
    FAST_STATS (one pass where the chunk's range allows, see cuda/cluster.cu block_stats)."""
    monkeypatch.setattr(rc, "FAST_STATS", request.param)
    return request.param


@pytest.mark.parametrize(("n", "dtype", "vector"), CONFIGS)
@pytest.mark.parametrize("flags", [(False, False), (True, True)], ids=["plain", "offset-stats"])
def test_every_config_compiles_for_sm90_without_spills(n, dtype, vector, flags, fast):
    pytest.importorskip("cuda.core", reason="cuda-core (NVRTC) not installed")
    from kernelwright.harness import inspect as ki

    art = rc.artifact(n, dtype, vector, offset=flags[0], save_stats=flags[1])
    rep = ki.analyze(ki.Artifact("rms_norm_cluster", art["cubin"], art["threads_per_block"]))
    assert rep.registers <= 64, rep.registers  # the launch bounds: 1024 threads an SM
    if vector and rc.w_early(art["config"], dtype):  # the store's first w vectors in flight through the statistics
        # (EARLY_W: 16-bit rows in clusters of 4+): 16 bytes of spills, 32 with the scaled statistics' second pass
        assert rep.stack_bytes <= (16 if fast else 32) and rep.mix.local_store_bytes <= 32, "spills"
    elif vector:  # w of 4 accesses in flight in the store (_cluster_norm.W_GROUP): 8 bytes spill at 65536 and past
        assert rep.stack_bytes <= 8 and rep.mix.local_store_bytes <= 8, "spills"
    else:  # one element an access (unaligned rows): a few column offsets of the 32 go to the stack
        assert rep.stack_bytes <= 80, rep.stack_bytes
    assert rep.mix.opcodes.get("UCGABAR_WAIT", 0) == (2 if art["config"].cluster > 1 else 0)
    assert not any(op.startswith("CALL") for op in rep.mix.opcodes), "a library call (division, sqrt, ldexp)"


def test_the_launch_shapes_are_the_softmax_rungs():
    assert rc.artifact(262144, torch.bfloat16, True)["config"] == sc.cluster_config(262144, 2, True)
    art = rc.artifact(65536, torch.bfloat16, True, rows=3)
    assert art["config"] == sc.ClusterConfig(1, 512, 8, True, 0, 8) and art["dynamic_smem"] == 8 * 512 * 16
    assert art["grid"] == (3, 1, 1)


def test_rows_wider_than_the_rung_are_refused_by_name():
    rung = FAM.rung("cluster")
    assert rung.needs == "hopper" and rung.backend == "cuda"
    assert rung.refusal((4, 262144), {}) is None
    why = rung.refusal((4, 262145), {})
    assert why and "262145" in why and "cluster" in why


def test_auto_takes_the_rung_where_it_led_on_the_h200():
    bf16, fp32 = torch.bfloat16, torch.float32
    for d in (8192, 16384, 65536):  # runs 60-61: 4.01-4.07 TB/s against split's 3.58-3.85 (bf16)
        assert FAM.preferred((4096, d), {}, bf16)[0] == "cluster", d
    assert FAM.preferred((8, 65536), {}, fp32)[0] == "split"  # fp32: 3.39 against 3.66
    # 262144: bf16 since FAST_STATS, cluster 3.48 / 3.45 against split 3.41 / 3.39 (run 87), and between 65536 and it
    # (neighbours); fp16 last measured before FAST_STATS, 3.40 against 3.45 (run 61): split
    for d in (131072, 200000, 262144):
        assert FAM.preferred((8, d), {}, bf16)[0] == "cluster", d
        assert FAM.preferred((8, d), {}, torch.float16)[0] == "split", d
    assert FAM.preferred((8, 65528), {}, bf16)[0] == "cluster" and FAM.preferred((8, 65532), {}, bf16)[0] == "split"
    assert FAM.preferred((8, 4096), {}, bf16)[0] == "fused"
    assert FAM.preferred((8, 32768), {})[0] == "split"  # no dtype: the choice for every dtype
    # rows not starting on 16 bytes would take the rung's one-element path, never timed: not chosen
    assert FAM.preferred((4096, 8192), {"aligned": False}, bf16)[0] == "fused"
    from kernelwright.ops._norm_common import rows_aligned

    x = torch.randn(4, 8200, dtype=bf16)
    assert rows_aligned(x) and rows_aligned(x[:, :8192]) and rows_aligned(x.t())  # (a strided last dim is copied)
    assert not rows_aligned(x[:, 1:]) and not rows_aligned(torch.randn(4, 8193, dtype=bf16)[:, :8192])


WIDTHS = [1, 7, 8, 1000, 4097, 8192, 32768, 32776, 65536, 131072, 262143, 262144]


def _check(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6, offset: bool = False):
    out = torch.full_like(x, float("nan"))  # poisoned: an element never written fails
    rows = x.numel() // x.shape[-1]
    rstd = torch.full((rows,), float("nan"), device=x.device)
    x_before = x.clone()
    rc.rms_norm_cluster(x, w, eps, offset, out=out, stats=(rstd,))
    x64 = x.double()
    ref = FAM.reference(x64, w.double(), eps, offset)
    cmp = compare(out, ref, FAM.tolerances[x.dtype])
    assert cmp.ok, f"{tuple(x.shape)} {x.dtype} offset={offset}: {cmp.reason}"
    ref_rstd = torch.rsqrt(x64.pow(2).mean(-1) + eps).reshape(-1)
    # fp32 sums of up to 262144 squares: a relative error of a few 1e-6 in rstd
    assert torch.allclose(rstd.double(), ref_rstd, rtol=2e-5, atol=0), "saved rstd"
    assert torch.equal(x, x_before), "the input changed"
    again = torch.full_like(x, float("nan"))
    rc.rms_norm_cluster(x, w, eps, offset, out=again)
    bits = torch.int16 if x.element_size() == 2 else torch.int32
    assert torch.equal(out.view(bits), again.view(bits)), "two runs differ: a race"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("n", WIDTHS)
def test_matches_float64_at_every_width(cuda_dev, n, dtype, fast):
    rows = max(1, min(37 if cuda_dev == "cuda" else 3, (1 << 22) // n))  # the emulator: a few rows
    x = torch.randn(rows, n, device=cuda_dev).mul_(3).to(dtype)
    w = torch.randn(n, device=cuda_dev).to(dtype)
    _check(x, w)
    _check(x, w, eps=1e-2, offset=True)
    if n >= 8:  # an unaligned row start: the one-element path
        xs = torch.randn(rows, n + 1, device=cuda_dev).to(dtype)[:, 1:]
        assert not sc.aligned(xs, xs)
        _check(xs, w)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_zero_rows_and_extreme_magnitudes(cuda_dev, dtype, fast):
    n = 262144 if dtype == torch.bfloat16 else 65536  # clusters of several CTAs
    x = torch.randn(6, n, device=cuda_dev).to(dtype)
    x[0] = 0                       # a row of zeros: y = 0, rstd = 1 / sqrt(eps)
    x[1, : n // 2] = 0             # a CTA of zeros among partners that are not
    x[2] *= 1e30                   # squares past fp32's range
    x[3] *= 1e-30                  # squares below it (eps dominates)
    x[4, 7] = 3e38                 # one huge value
    w = torch.randn(n, device=cuda_dev).to(dtype)
    _check(x, w)
    _check(x[1:5], w, eps=0.0)     # no eps: the scale must come from the values alone


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("n", [1000, 8192, 65536, 262144])
def test_fast_stats_are_the_scaled_bits_inside_their_range_and_fall_back_outside(cuda_dev, dtype, n, monkeypatch):
    # FAST_STATS sums the squares unscaled where a chunk's largest magnitude lies in [2^-40, 2^40], then scales by an
    # exact power of two: y and rstd bit for bit the default's (no square underflows in these rows); rows at and
    # past the range's ends (one chunk fast, a partner not) match float64
    rows = 8
    g = torch.Generator(device=cuda_dev).manual_seed(int(torch.randint(0, 2**31, ()).item()))
    x = (torch.randn(rows, n, device=cuda_dev, generator=g) * 4).to(dtype)
    w = torch.randn(n, device=cuda_dev, generator=g).to(dtype)
    if dtype != torch.float16:  # fp16's range ends at 65504: the scaled bounds are bf16 / fp32 rows
        x[2, 0] = 2.0**40          # at the top of the range: fast
        x[3, -1] = 2.0**41         # past it: the last chunk sums again in its own scale
        x[4] *= 2.0**-45           # below it: every chunk sums again
        x[5, : n // 2] *= 2.0**-60  # a small half (below the range where a chunk holds only it) and a normal half
    outs = []
    for on in (False, True):
        monkeypatch.setattr(rc, "FAST_STATS", on)
        out = torch.full_like(x, float("nan"))
        rstd = torch.full((rows,), float("nan"), device=cuda_dev)
        rc.rms_norm_cluster(x, w, 1e-6, False, out=out, stats=(rstd,))
        outs.append((out, rstd))
        _check(x, w)
    bits = torch.int16 if x.element_size() == 2 else torch.int32
    normal = [0, 1, 6, 7] + ([] if dtype != torch.float16 else [2, 3, 4, 5])
    for r in normal:
        assert torch.equal(outs[0][0][r].view(bits), outs[1][0][r].view(bits)), f"row {r}: y differs"
        assert torch.equal(outs[0][1][r], outs[1][1][r]), f"row {r}: rstd differs"


def test_many_rows_and_3d(cuda_dev, fast):
    w = torch.randn(4096, device=cuda_dev).to(torch.bfloat16)
    _check(torch.randn(20000 if cuda_dev == "cuda" else 300, 4096, device=cuda_dev).to(torch.bfloat16), w)
    w = torch.randn(65536, device=cuda_dev).to(torch.bfloat16)
    _check(torch.randn(2, 3, 65536, device=cuda_dev).to(torch.bfloat16), w)


def test_kw_inspect_gets_the_kernel_the_launcher_would_run():
    pytest.importorskip("cuda.core", reason="cuda-core (NVRTC) not installed")
    (art,) = rc.inspect_artifacts((1024, 262144), torch.bfloat16)
    assert (art.threads_per_block, art.grid, art.dynamic_smem) == (512, (4096, 1, 1), 8 * 512 * 16)
    assert "4 CTAs a row" in art.note and art.cubin[:4] == b"\x7fELF"


def test_early_w_only_where_it_was_measured_to_gain(monkeypatch):
    """EARLY_W (session 25): the first w vectors before the statistics for 16-bit rows in clusters of 4 CTAs (1024 x
    262144 bf16: +2% on the H200, +4% under the H200 stand-in), not at 65536 (one CTA a row: it lost), nor in clusters
    of 2 or 3, fp32 or the PAIR kernels (not measured); the shared switch, when set, decides for every kernel."""
    from kernelwright.ops import _cluster_norm as cn

    def early(n, dtype, pair=False):
        cfg = sc.cluster_config(n, dtype.itemsize, True)
        on = rc.w_early(cfg, dtype, pair)
        return on, "WEARLY=1" in cn.options(cfg, dtype, (), on).defines

    bf16, fp16, fp32 = torch.bfloat16, torch.float16, torch.float32
    assert early(262144, bf16) == (True, True) and early(262144, fp16) == (True, True)
    assert early(196616, bf16) == (True, True)  # clusters of 4 from 196609 columns
    for n, dtype in ((65536, bf16), (131072, bf16), (140000, bf16), (16384, bf16), (262144, fp32), (131072, fp32)):
        assert early(n, dtype) == (False, False), (n, dtype)
    assert early(262144, bf16, pair=True)[0] is False
    monkeypatch.setattr(rc, "EARLY_W", False)
    assert early(262144, bf16) == (False, False)
    monkeypatch.setattr(rc, "EARLY_W", True)
    monkeypatch.setattr(cn, "W_EARLY", False)  # the experiment switch overrides the family's choice both ways
    assert early(262144, bf16)[1] is False
    monkeypatch.setattr(cn, "W_EARLY", True)
    assert early(65536, bf16)[1] is True


# --- TC_STATS (session 25, not yet run on a GPU): FAST's sum of squares on the tensor cores ----------------------
def test_tc_stats_compile_to_tensor_core_instructions(monkeypatch):
    """Two mma.sync a held 16-byte vector in the 16-bit 16-byte-path kernels, at 64 registers: no spills to 65536
    columns; at 262144, beside the early w loads, 40-48 bytes (sm_90). fp32 and the one-element path keep their
    kernels."""
    pytest.importorskip("cuda.core", reason="cuda-core (NVRTC) not installed")
    from kernelwright.harness import inspect as ki

    for n, dtype in ((4096, torch.bfloat16), (16384, torch.float16), (65536, torch.bfloat16), (262144, torch.float16)):
        monkeypatch.setattr(rc, "TC_STATS", True)
        art = rc.artifact(n, dtype, True, offset=True, save_stats=True)
        rep = ki.analyze(ki.Artifact("rms_norm_cluster", art["cubin"], art["threads_per_block"]))
        cfg = art["config"]
        assert sum(v for k, v in rep.mix.opcodes.items() if k.startswith("HMMA")) == 2 * (cfg.nv + (cfg.snv > 0)), n
        assert rep.registers <= 64 and rep.stack_bytes <= (48 if cfg.cluster >= 4 else 0), (n, rep.stack_bytes)
    for n, dtype, vector in ((65536, torch.float32, True), (4097, torch.bfloat16, False)):
        monkeypatch.setattr(rc, "TC_STATS", False)
        plain = rc.artifact(n, dtype, vector)["cubin"]
        monkeypatch.setattr(rc, "TC_STATS", True)
        assert rc.artifact(n, dtype, vector)["cubin"] == plain, (n, dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_tc_stats_match_float64(cuda_dev, monkeypatch, dtype):
    """The output and saved rstd against float64 with TC_STATS (rows inside FAST's range, and rows that leave it:
    zeros, a CTA of zeros, past and below the range, one huge value); rstd within a few fp32 ulps of the fold's."""
    monkeypatch.setattr(rc, "FAST_STATS", True)
    monkeypatch.setattr(rc, "TC_STATS", True)
    for n in (4096, 65536):
        x = torch.randn(3, n, device=cuda_dev).mul_(3).to(dtype)
        w = torch.randn(n, device=cuda_dev).to(dtype)
        _check(x, w)
        _check(x, w, eps=1e-2, offset=True)
    n = 262144
    x = torch.randn(6, n, device=cuda_dev)
    x[0] = 0
    x[1, : n // 2] = 0
    x[2] *= 1e4 if dtype == torch.float16 else 1e30  # past the range (bf16): the scaled pass
    x[3] *= 1e-6 if dtype == torch.float16 else 1e-30
    x[4, 7] = 6e4 if dtype == torch.float16 else 3e38
    x = x.to(dtype)
    w = torch.randn(n, device=cuda_dev).to(dtype)
    _check(x, w)
    rstd = {}
    for tc in (False, True):
        monkeypatch.setattr(rc, "TC_STATS", tc)
        rstd[tc] = torch.full((6,), float("nan"), device=cuda_dev)
        rc.rms_norm_cluster(x, w, 1e-6, False, out=torch.empty_like(x), stats=(rstd[tc],))
    assert torch.allclose(rstd[False], rstd[True], rtol=1e-5, atol=0), (rstd[False], rstd[True])


@pytest.mark.parametrize("switch", [("W_GROUP_SMEM", 8), ("W_EARLY", True), ("W_PREFETCH", 2)])
def test_store_switches_compile_for_both_norm_rungs(monkeypatch, switch):
    # experiment switches of the shared store (_cluster_norm; session 15, not yet timed): they compile for sm_90 at
    # 64 registers with at most the spills their docstrings state, for both rungs
    pytest.importorskip("cuda.core", reason="cuda-core (NVRTC) not installed")
    from kernelwright.harness import inspect as ki
    from kernelwright.ops import _cluster_norm as cn
    from kernelwright.ops.layer_norm import cuda as lc

    monkeypatch.setattr(cn, switch[0], switch[1])
    for art in (rc.artifact(65536, torch.bfloat16, True), lc.artifact(262144, torch.bfloat16, True),
                lc.artifact(8192, torch.float16, True)):
        rep = ki.analyze(ki.Artifact(art["kernel"], art["cubin"], art["threads_per_block"]))
        assert rep.registers <= 64 and rep.stack_bytes <= 64, (art["kernel"], rep.stack_bytes)
        assert not any(op.startswith("CALL") for op in rep.mix.opcodes)


# --- W_PREFETCH (session 26, not yet run on a GPU): the store's w (and b) prefetched into L1 ahead of its loads ---
def test_w_prefetch_prefetches_every_vector_once_without_spills(monkeypatch):
    """With W_PREFETCH = 2, each of a thread's per-column vectors has one L1 prefetch (sm_90 CCTL.E.PF1): the first
    2 accesses' right after the chunk's loads, the register accesses' in the unrolled store loop, one group's in the
    shared-memory loop's body (its static count), none for a first group loaded early (rms_norm's EARLY_W at 262144);
    at 64 registers with no spills for either rung's wide 16-bit rows (rms_norm at 8192 columns spills 12 bytes).
    Off (the default), no define is added and no prefetch compiled."""
    pytest.importorskip("cuda.core", reason="cuda-core (NVRTC) not installed")
    from kernelwright.harness import inspect as ki
    from kernelwright.ops import _cluster_norm as cn
    from kernelwright.ops.layer_norm import cuda as lc

    def prefetches(art):
        rep = ki.analyze(ki.Artifact(art["kernel"], art["cubin"], art["threads_per_block"]))
        return rep, rep.mix.opcodes.get("CCTL.E.PF1", 0)

    cases = [(rc.artifact, 1, n, dt) for n, dt in ((8192, torch.bfloat16), (65536, torch.bfloat16),
                                                    (262144, torch.float16))]
    cases += [(lc.artifact, 2, n, dt) for n, dt in ((8192, torch.float16), (40000, torch.bfloat16),
                                                     (65536, torch.bfloat16), (262144, torch.bfloat16))]
    for artifact, n_per_col, n, dtype in cases:
        plain = artifact(n, dtype, True)
        assert prefetches(plain)[1] == 0
        assert not any(d.startswith("WPF=") for d in cn.options(plain["config"], dtype, ()).defines)
        monkeypatch.setattr(cn, "W_PREFETCH", 2)
        art = artifact(n, dtype, True)
        rep, count = prefetches(art)
        cfg = art["config"]
        assert "WPF=2" in cn.options(cfg, dtype, ()).defines
        group = max(cn.W_GROUP // n_per_col, 1)  # (also the shared-memory loop's body: one group, not unrolled)
        early = n_per_col == 1 and rc.w_early(cfg, dtype, False)  # rms_norm's first group is loaded early instead
        expect = n_per_col * ((2 + cfg.nv + group if cfg.snv else cfg.nv) - (group if early else 0))
        assert count == expect, (art["kernel"], n, count, expect)
        # (rms_norm: 16 bytes at 262144, EARLY_W's, as without; at 8192, 12 bytes of spills where there were none)
        assert rep.registers <= 64 and rep.stack_bytes <= (16 if n_per_col == 1 and n in (8192, 262144) else 0), (
            art["kernel"], n, rep.stack_bytes)
        monkeypatch.setattr(cn, "W_PREFETCH", 0)


@pytest.mark.parametrize("n", [40000, 65536, 262144])
def test_w_prefetch_leaves_both_rungs_outputs_unchanged(cuda_dev, monkeypatch, n):
    """A prefetch is a hint: with W_PREFETCH on, both rungs' outputs are bit for bit the default's (rms_norm's also
    against float64), at a width whose last CTA ends inside its chunk (40000) and at clusters of 1 and 4. Emulated,
    every prefetch must also be followed by its thread's load of that address (the emulator's check), so a prefetch
    of the wrong vector fails here."""
    from kernelwright.ops import _cluster_norm as cn
    from kernelwright.ops.layer_norm import cuda as lc

    x = torch.randn(2, n).mul_(2).add_(0.5).to(torch.bfloat16).to(cuda_dev)
    w, b = (torch.randn(n).to(torch.bfloat16).to(cuda_dev) for _ in range(2))
    outs = {}
    for pf in (0, 2):
        monkeypatch.setattr(cn, "W_PREFETCH", pf)
        if pf:
            _check(x, w)
        y_rms, y_ln = (torch.full_like(x, float("nan")) for _ in range(2))
        rc.rms_norm_cluster(x, w, 1e-6, False, out=y_rms)
        lc.layer_norm_cluster(x, w, b, 1e-5, out=y_ln)
        outs[pf] = (y_rms, y_ln)
    for a, c in zip(outs[0], outs[2], strict=True):
        assert not a.isnan().any() and torch.equal(a, c)


# --- HINT_LOADS / HINT_STORES (session 27): softmax's HINTS apart, for the norm cluster rungs -----------------------
@pytest.mark.parametrize("loads,stores", [(1, None), (2, None), (None, True)])
def test_hint_switches_change_only_their_own_accesses(monkeypatch, loads, stores):
    """HINT_LOADS turns exactly x's register loads (NV a thread: not the shared-memory copies, not w or b) into
    L1::no_allocate loads (sm_90 LDG.E.NA); HINT_STORES turns every store of y into a streaming one (STG.E.EF); at 64
    registers with no spills past the defaults'. Unset (the default), neither define is added."""
    pytest.importorskip("cuda.core", reason="cuda-core (NVRTC) not installed")
    from kernelwright.harness import inspect as ki
    from kernelwright.ops import _cluster_norm as cn
    from kernelwright.ops.layer_norm import cuda as lc

    def mix(art):
        rep = ki.analyze(ki.Artifact(art["kernel"], art["cubin"], art["threads_per_block"]))
        return rep, rep.mix.opcodes

    for artifact, n, dtype in ((rc.artifact, 65536, torch.bfloat16), (rc.artifact, 262144, torch.bfloat16),
                               (lc.artifact, 65536, torch.bfloat16), (lc.artifact, 262144, torch.float16)):
        plain = artifact(n, dtype, True)
        base, base_ops = mix(plain)
        assert not any(d.startswith("HINT_") for d in cn.options(plain["config"], dtype, ()).defines)
        monkeypatch.setattr(cn, "HINT_LOADS", loads)
        monkeypatch.setattr(cn, "HINT_STORES", stores)
        rep, ops = mix(artifact(n, dtype, True))
        stg = sum(v for k, v in base_ops.items() if k.startswith("STG"))
        if loads:
            nv = plain["config"].nv
            assert ops.get("LDG.E.NA.128.CONSTANT", 0) == nv, (plain["kernel"], n, ops)
            assert ops.get("LDG.E.128.CONSTANT", 0) == base_ops["LDG.E.128.CONSTANT"] - nv
        else:
            assert ops.get("STG.E.EF.128", 0) == stg and "STG.E.128" not in ops, (plain["kernel"], n, ops)
        assert rep.registers <= 64 and rep.stack_bytes <= base.stack_bytes, (plain["kernel"], n, rep.stack_bytes)
        monkeypatch.setattr(cn, "HINT_LOADS", None)
        monkeypatch.setattr(cn, "HINT_STORES", None)


@pytest.mark.parametrize("n", [40000, 262144])
def test_hint_switches_leave_both_rungs_outputs_unchanged(cuda_dev, monkeypatch, n):
    """Cache hints change no value: with HINT_LOADS 1 / 2 and HINT_STORES, both rungs' outputs are bit for bit the
    defaults' (rms_norm's also against float64)."""
    from kernelwright.ops import _cluster_norm as cn
    from kernelwright.ops.layer_norm import cuda as lc

    x = torch.randn(2, n).mul_(2).add_(0.5).to(torch.bfloat16).to(cuda_dev)
    w, b = (torch.randn(n).to(torch.bfloat16).to(cuda_dev) for _ in range(2))
    outs = []
    for loads, stores in ((None, None), (1, True), (2, None)):
        monkeypatch.setattr(cn, "HINT_LOADS", loads)
        monkeypatch.setattr(cn, "HINT_STORES", stores)
        if loads:
            _check(x, w)
        y_rms, y_ln = (torch.full_like(x, float("nan")) for _ in range(2))
        rc.rms_norm_cluster(x, w, 1e-6, False, out=y_rms)
        lc.layer_norm_cluster(x, w, b, 1e-5, out=y_ln)
        outs.append((y_rms, y_ln))
    for other in outs[1:]:
        for a, c in zip(outs[0], other, strict=True):
            assert not a.isnan().any() and torch.equal(a, c)


# --- the PAIR_ROWS switch (session 19, not yet run on a GPU): two rows a cluster, w read once for both ----------
@pytest.mark.parametrize("n", [40000, 65536, 131072, 262144])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_pair_compiles_for_sm90_without_spills(n, dtype):
    pytest.importorskip("cuda.core", reason="cuda-core (NVRTC) not installed")
    from kernelwright.harness import inspect as ki

    for offset, save in ((False, False), (True, True)):
        art = rc.pair_artifact(n, dtype, offset=offset, save_stats=save)
        cfg = art["config"]
        assert (cfg.nv, cfg.snv, cfg.threads) == (8, 8, 512) and cfg.cluster == {40000: 2, 65536: 2}.get(n, n // 32768)
        rep = ki.analyze(ki.Artifact(art["kernel"], art["cubin"], art["threads_per_block"]))
        assert rep.registers <= 64 and rep.stack_bytes == 0 and rep.mix.local_store_bytes == 0, rep.stack_bytes
        assert rep.mix.opcodes.get("UCGABAR_WAIT", 0) == 2
        assert not any(op.startswith("CALL") for op in rep.mix.opcodes), "a library call"
    assert rc.pair_artifact(32768, torch.bfloat16) is None and rc.pair_artifact(65536, torch.float32) is None


def test_pair_launch_plumbing(launch_recorder):
    """With the switch's ``pair``, rms_norm's launch takes the pair kernel over (rows + 1) // 2 clusters, the row
    count before the width (CPU: a stand-in kernel records the launch)."""
    from kernelwright.ops import _cluster_norm as cn

    x, w = torch.randn(3, 262144).to(torch.bfloat16), torch.randn(262144).to(torch.bfloat16)
    y = torch.empty_like(x)
    cn.launch(launch_recorder.kernel_for, x, y, (w,), (y,), 1e-6, pair=True)
    (c,) = launch_recorder.calls
    cfg = c["cfg"]
    assert c["pair"] and (cfg.cluster, cfg.threads) == (8, 512) and c["grid"] == (2 * 8,) and c["block"] == (512,)
    assert c["args"][4:] == (3, 262144, 262144, 262144, 1e-6, 1.0 / 262144)
    assert c["smem"] == 8 * 512 * 16 and c["cluster"] == 0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_pair_matches_float64(cuda_dev, monkeypatch, dtype):
    monkeypatch.setattr(rc, "PAIR_ROWS", True)
    for n in (32776, 40000, 65536, 131072, 262144):
        for rows in (1, 2, 5):  # a lone row, one pair, a pair short of its second row
            x = torch.randn(rows, n, device=cuda_dev).mul_(3).to(dtype)
            w = torch.randn(n, device=cuda_dev).to(dtype)
            _check(x, w)
            _check(x, w, eps=1e-2, offset=True)
    n = 262144
    x = torch.randn(8, n, device=cuda_dev)
    x[0] = 0                       # zeros (first of a pair) beside a normal row
    x[3, : n // 2] = 0             # a CTA of zeros among partners (second of a pair)
    if dtype == torch.bfloat16:  # outside FAST's range [2^-40, 2^40]: summed again in the chunk's own scale
        x[4] *= 1e30               # both rows of a pair outside it, one above and one below
        x[5] *= 1e-30
        x[6, 7] = 3e38             # one huge value: its chunk above the range, the others inside
        x[7, n // 2:] *= 2.0**-60  # half of a row below the range where a chunk holds only it
    else:  # fp16's largest and smallest values
        x[4] *= 1e4
        x[5] *= 1e-6
    x = x.to(dtype)
    w = torch.randn(n, device=cuda_dev).to(dtype)
    _check(x, w)
    _check(x[1:7], w, eps=0.0)     # no eps: the scale must come from the values alone
    _check(torch.randn(3, 2, 65536, device=cuda_dev).to(dtype), w[:65536])  # leading dims: 6 rows
    _check(torch.randn(4, 65536 + 8, device=cuda_dev).to(dtype)[:, :65536], w[:65536])  # a row stride past the width
