"""The softmax cluster rung (CUDA C, Hopper): launch shapes cover every row, every configuration the launcher can
pick compiles for sm_90 without spills (CPU, NVRTC), and on an H100/H200 the rung matches a float64 reference on
aligned and unaligned widths up to 262,144 columns, with -inf inputs and in two runs bit for bit. Softmax only:
log_softmax is not built here.
(The family-wide fuzz of every rung, tests/test_ladders.py, covers it too when run on a Hopper GPU.)"""

import pytest
import torch

from kernelwright import runtime
from kernelwright.harness.verify import compare
from kernelwright.ops import _validate
from kernelwright.ops.softmax import cuda as sc
from kernelwright.ops.softmax import spec
from kernelwright.registry import get_family

FAM = get_family("softmax")
WIDTHS = [1, 7, 8, 31, 1000, 4097, 8192, 32768, 32769, 65536, 65537, 131072, 262143, 262144]


@pytest.mark.parametrize("persistent", [False, True], ids=["row-a-cluster", "persistent"])
@pytest.mark.parametrize("elt", [2, 4])
@pytest.mark.parametrize("vector", [True, False])
def test_every_width_gets_a_cluster_that_covers_the_row(elt, vector, persistent):
    for n in WIDTHS + list(range(1, 300, 7)):
        if vector and n % (16 // elt):
            continue
        cfg = sc.cluster_config(n, elt, vector, persistent=persistent)
        # the persistent form: 16-byte path only, and rows that 8 of its CTAs hold (fp32 to 131072 columns)
        assert cfg.persistent == (persistent and vector and n * elt <= 8 * 1024 * 64), (n, cfg)
        assert 1 <= cfg.cluster <= sc.MAX_CLUSTER_NONPORTABLE, (n, cfg)
        assert 32 <= cfg.threads <= sc.MAX_THREADS and cfg.threads & (cfg.threads - 1) == 0, (n, cfg)
        assert cfg.cluster * cfg.chunk(elt) >= n, (n, cfg)
        # no CTA is wholly past the row's end unless the row is narrower than one warp's share
        assert (cfg.cluster - 1) * cfg.chunk(elt) < n, (n, cfg)
    assert sc.cluster_config(8192, 2, True) == sc.ClusterConfig(1, 128, 8, True)  # registers only
    assert sc.cluster_config(32768, 2, True) == sc.ClusterConfig(1, 512, 8, True)
    assert sc.cluster_config(32776, 2, True) == sc.ClusterConfig(1, 512, 8, True, 0, 8)  # and shared memory
    assert sc.cluster_config(65536, 2, True) == sc.ClusterConfig(1, 512, 8, True, 0, 8)
    assert sc.cluster_config(262144, 2, True) == sc.ClusterConfig(4, 512, 8, True, 0, 8)
    assert sc.cluster_config(262144, 4, True) == sc.ClusterConfig(16, 512, 8, True)  # fp32: registers only
    assert sc.cluster_config(262144, 2, False) == sc.ClusterConfig(16, 512, 32, False)
    assert sc.cluster_config(262144, 2, False, nonportable=False) == sc.ClusterConfig(8, 1024, 32, False)
    assert sc.cluster_config(32769, 2, False) == sc.ClusterConfig(3, 512, 32, False)
    assert sc.cluster_config(65536, 2, True, persistent=True) == sc.ClusterConfig(2, 1024, 4, True, sc.STAGES)
    assert sc.cluster_config(262144, 2, True, persistent=True) == sc.ClusterConfig(8, 1024, 4, True, sc.STAGES)
    with pytest.raises(ValueError, match="n_cols"):
        sc.cluster_config(262145, 4, False, nonportable=False)  # 8 x 1024 threads x 32 fp32 values hold 262144


def test_a_forced_cluster_size_grows_when_the_row_needs_it(monkeypatch):
    assert sc.cluster_config(65536, 2, True, cluster=4) == sc.ClusterConfig(4, 128, 8, True, 0, 8)
    assert sc.cluster_config(262144, 2, True, cluster=1) == sc.ClusterConfig(2, 1024, 8, True, 0, 8)
    monkeypatch.setattr(sc, "SMEM_VECTORS", 0)
    assert sc.cluster_config(65536, 2, True, cluster=4) == sc.ClusterConfig(4, 256, 8, True)
    assert sc.cluster_config(262144, 2, True, cluster=2) == sc.ClusterConfig(4, 1024, 8, True)
    monkeypatch.setattr(sc, "CLUSTER_SIZE", 8)
    assert sc.cluster_config(65536, 2, True).cluster == 8


def test_rows_wider_than_the_rung_are_refused_by_name():
    rung = FAM.rung("cluster")
    assert rung.refusal((4, 262144), {"dim": -1}) is None
    why = rung.refusal((4, 262145), {"dim": -1})
    assert why and "262145" in why and "cluster" in why
    assert rung.refusal((262145, 4), {"dim": 0})


def test_auto_never_picks_the_hopper_rung_off_hopper(monkeypatch):
    assert spec.choose((4, 65536), {"dim": -1})[0] == "cluster"
    assert spec.choose((4, 65537), {"dim": -1})[0] == "split"  # not timed on the one-element path
    assert spec.choose((4, 4096), {"dim": -1})[0] == "fused"
    # fp32 past 131072 columns (clusters of 16): split led in run 58 (3.40 against 3.34); at 65536 cluster (4.05)
    assert spec.choose((4, 262144), {"dim": -1}, torch.float32)[0] == "split"
    assert spec.choose((4, 65536), {"dim": -1}, torch.float32)[0] == "cluster"
    assert spec.choose((4, 262144), {"dim": -1}, torch.bfloat16)[0] == "cluster"
    monkeypatch.setattr(spec, "CLUSTER_AUTO", False)
    assert spec.choose((4, 65536), {"dim": -1})[0] == "split"
    if not runtime.is_hopper():
        assert _validate.pick_rung(FAM, None, "cpu", (4, 65536), {"dim": -1}, torch.bfloat16).name == "split"


CONFIGS = [(n, dt, v) for dt in (torch.bfloat16, torch.float16, torch.float32) for v in (True, False)
           for n in (7, 4096, 32769, 65536, 262144) if not (v and n % (16 // dt.itemsize))]


@pytest.mark.parametrize(("n", "dtype", "vector"), CONFIGS)
def test_every_config_compiles_for_sm90_without_spills(n, dtype, vector):
    pytest.importorskip("cuda.core", reason="cuda-core (NVRTC) not installed")
    from kernelwright.harness import inspect as ki

    art = sc.artifact(n, dtype, vector)
    rep = ki.analyze(ki.Artifact("softmax_cluster", art["cubin"], art["threads_per_block"]))
    assert rep.registers <= 64, rep.registers  # the __launch_bounds__ budget: 1024 threads an SM
    assert rep.stack_bytes == 0 and rep.mix is not None and rep.mix.local_store_bytes == 0, "spills"
    assert rep.mix.opcodes.get("UCGABAR_WAIT", 0) == (2 if art["config"].cluster > 1 else 0)  # the two barriers


@pytest.mark.parametrize(("n", "dtype"), [(65536, torch.bfloat16), (262144, torch.bfloat16),
                                          (262144, torch.float16), (131072, torch.float32), (4096, torch.bfloat16)])
def test_the_persistent_form_compiles_for_sm90_without_spills(n, dtype):
    pytest.importorskip("cuda.core", reason="cuda-core (NVRTC) not installed")
    from kernelwright.harness import inspect as ki

    art = sc.artifact(n, dtype, True, rows=4096, persistent=True)
    assert art["config"].persistent and art["dynamic_smem"] == sc.stage_bytes(art["config"])
    rep = ki.analyze(ki.Artifact("softmax_cluster", art["cubin"], art["threads_per_block"],
                                 dynamic_smem=art["dynamic_smem"]))
    assert rep.stack_bytes == 0 and rep.mix.local_store_bytes == 0, "spills"
    assert rep.mix.opcodes.get("LDGSTS.E.BYPASS.128", 0) > 0  # the staging is cp.async, 16 bytes, L2 only
    # the row loop's trade fences only the CTA's own shared memory: the one GPU-level MEMBAR (which would wait for
    # the previous row's stores) is the final keep-alive barrier's
    fences = 1 if art["config"].cluster > 1 else 0  # a cluster of one CTA trades nothing
    assert rep.mix.opcodes.get("MEMBAR.ALL.GPU", 0) == fences and rep.mix.opcodes.get("MEMBAR.ALL.CTA", 0) == fences
    assert rep.occupancy.blocks_per_sm >= 1


def test_non_portable_clusters_take_16_ctas_set_at_launch(monkeypatch):
    pytest.importorskip("cuda.core", reason="cuda-core (NVRTC) not installed")
    from kernelwright.harness import inspect as ki

    monkeypatch.setattr(sc, "MAX_THREADS_SPLIT", 256)
    monkeypatch.setattr(sc, "SMEM_VECTORS", 0)
    monkeypatch.setattr(sc, "NONPORTABLE", False)
    assert sc.cluster_config(65536, 2, True) == sc.ClusterConfig(4, 256, 8, True)
    assert sc.cluster_config(262144, 2, True) == sc.ClusterConfig(8, 512, 8, True)  # portable: 8 CTAs at most
    monkeypatch.setattr(sc, "NONPORTABLE", True)
    cfg = sc.cluster_config(262144, 2, True)
    assert cfg == sc.ClusterConfig(16, 256, 8, True) and sc.launch_cluster(cfg) == 16
    assert sc.launch_cluster(sc.cluster_config(65536, 2, True)) == 0  # portable sizes stay in the kernel
    art = sc.artifact(262144, torch.bfloat16, True, rows=1024)
    assert art["grid"] == (16 * 1024, 1, 1)
    rep = ki.analyze(ki.Artifact("softmax_cluster", art["cubin"], art["threads_per_block"]))
    assert rep.registers <= 64 and rep.stack_bytes == 0 and rep.mix.local_store_bytes == 0
    assert rep.mix.opcodes.get("UCGABAR_WAIT", 0) == 2


@pytest.mark.parametrize("switches", [{"HINTS": True}, {"VECTORS_A_THREAD": 16, "SM_THREADS": 512, "HINTS": True}])
def test_the_switched_one_row_forms_compile_without_spills(monkeypatch, switches):
    pytest.importorskip("cuda.core", reason="cuda-core (NVRTC) not installed")
    from kernelwright.harness import inspect as ki

    monkeypatch.setattr(sc, "MAX_THREADS_SPLIT", 256)
    monkeypatch.setattr(sc, "SMEM_VECTORS", 0)
    monkeypatch.setattr(sc, "NONPORTABLE", True)
    for name, value in switches.items():
        monkeypatch.setattr(sc, name, value)
    art = sc.artifact(262144, torch.bfloat16, True, rows=8)
    rep = ki.analyze(ki.Artifact("softmax_cluster", art["cubin"], art["threads_per_block"]))
    assert rep.stack_bytes == 0 and rep.mix.local_store_bytes == 0
    assert rep.registers <= 65536 // sc.SM_THREADS
    assert rep.mix.opcodes.get("LDG.E.NA.128.CONSTANT", 0) == art["config"].nv  # L1 no-allocate loads
    assert rep.mix.opcodes.get("STG.E.EF.128", 0) == art["config"].nv  # streaming (evict-first) stores


def test_shared_memory_vectors_widen_a_cta_at_the_same_registers(monkeypatch):
    pytest.importorskip("cuda.core", reason="cuda-core (NVRTC) not installed")
    from kernelwright.harness import inspect as ki

    monkeypatch.setattr(sc, "MAX_THREADS_SPLIT", 256)
    assert sc.cluster_config(262144, 2, True) == sc.ClusterConfig(8, 256, 8, True, 0, 8)
    assert sc.cluster_config(262144, 2, False).snv == 0  # the one-element path keeps registers only
    assert sc.cluster_config(65536, 2, True, persistent=True).snv == 0
    art = sc.artifact(262144, torch.bfloat16, True, rows=4)
    assert art["dynamic_smem"] == 8 * 256 * 16 and art["grid"] == (32, 1, 1)
    rep = ki.analyze(ki.Artifact("softmax_cluster", art["cubin"], art["threads_per_block"]))
    assert rep.registers <= 64 and rep.stack_bytes == 0 and rep.mix.local_store_bytes == 0
    copies = sum(n for op, n in rep.mix.opcodes.items() if op.startswith("LDGSTS"))
    assert copies == 8 and rep.mix.opcodes.get("LDG.E.128.CONSTANT", 0) == 8  # 8 vectors each way


def test_resident_clusters_counts_what_an_sm_holds():
    cfg = sc.ClusterConfig(8, 1024, 4, True, 2)  # 128 KB of stage, 64 registers: one CTA an SM
    assert sc.resident_clusters(cfg, 64, 132) == 132 // 8
    cfg = sc.ClusterConfig(2, 256, 4, True, 2)  # 32 KB of stage: 6 by shared memory, 8 by threads, 4 by registers
    assert sc.resident_clusters(cfg, 64, 132) == 4 * 132 // 2
    assert sc.resident_clusters(cfg, 32, 132) == 6 * 132 // 2
    assert sc.resident_clusters(cfg, 255, 132) == 66  # registers: 65536 // (256 x 8 warps x 32) = 1 CTA an SM
    assert sc.resident_clusters(sc.ClusterConfig(8, 1024, 4, True, 2), 64, 4) == 1  # never 0


# --- on a Hopper GPU ----------------------------------------------------------------------------------------------


FORMS = {"row-a-cluster": {},  # the default: CTAs of 512, half of a wide row's vectors in shared memory
         "registers-cta256": {"SMEM_VECTORS": 0, "MAX_THREADS_SPLIT": 256},  # registers only, clusters to 16
         "portable": {"NONPORTABLE": False},  # the fallback: clusters of 8 at most
         "persistent": {"PERSISTENT": True},
         # the switches run 54 timed: 16 vectors a thread at 128 registers, streaming cache hints
         "v16-cta128-hints": {"VECTORS_A_THREAD": 16, "SM_THREADS": 512, "MAX_THREADS_SPLIT": 128, "HINTS": True,
                              "SMEM_VECTORS": 0}}


@pytest.fixture(params=list(FORMS))
def form(request, monkeypatch):
    for name, value in FORMS[request.param].items():
        monkeypatch.setattr(sc, name, value)
    return request.param


def _check(x: torch.Tensor, dim: int = -1):
    out = torch.full_like(x, float("nan"))  # poisoned: an element never written fails
    sc.softmax_cluster(x, dim, out=out)
    cmp = compare(out, torch.softmax(x.double(), dim), FAM.tolerances[x.dtype])
    assert cmp.ok, f"{tuple(x.shape)} {x.dtype} dim={dim}: {cmp.reason}"
    again = torch.full_like(x, float("nan"))
    sc.softmax_cluster(x, dim, out=again)
    bits = torch.int16 if x.element_size() == 2 else torch.int32
    assert torch.equal(out.view(bits), again.view(bits)), "two runs differ: a race"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("n", WIDTHS)
def test_matches_float64_at_every_width(cuda_dev, n, dtype, form):
    rows = max(1, min(37 if cuda_dev == "cuda" else 3, (1 << 22) // n))  # the emulator: a few rows
    x = torch.randn(rows, n, device=cuda_dev, dtype=torch.float32).mul_(3).to(dtype)
    _check(x)
    if n >= 8:  # an unaligned row start: the one-element path
        xs = torch.randn(rows, n + 1, device=cuda_dev).to(dtype)[:, 1:]
        assert not sc.aligned(xs.reshape(rows, n), xs.reshape(rows, n))
        _check(xs)


def test_minus_infinity_rows_and_chunks(cuda_dev, form):
    x = torch.randn(6, 65536, device=cuda_dev).to(torch.bfloat16)
    x[0, 32768:] = float("-inf")   # the second CTA's chunk all -inf: it contributes 0
    x[1, :32768] = float("-inf")   # the first CTA's
    x[2, ::3] = float("-inf")
    out = torch.full_like(x, float("nan"))
    sc.softmax_cluster(x, -1, out=out)
    ref = torch.softmax(x.double(), -1)
    cmp = compare(out[:3], ref[:3], FAM.tolerances[torch.bfloat16])
    assert cmp.ok, cmp.reason
    assert torch.isfinite(out[3:]).all()


def test_other_dims_and_many_rows(cuda_dev, form):
    x = torch.randn(3, 65536, 5, device=cuda_dev).to(torch.bfloat16)
    _check(x, dim=1)
    rows = 20000 if cuda_dev == "cuda" else 300  # clusters of one CTA
    x = torch.randn(rows, 4096, device=cuda_dev).to(torch.bfloat16)
    _check(x)


def test_kw_inspect_gets_the_kernel_the_launcher_would_run(monkeypatch):
    pytest.importorskip("cuda.core", reason="cuda-core (NVRTC) not installed")
    (art,) = sc.inspect_artifacts((4096, 65536), torch.bfloat16)
    assert (art.threads_per_block, art.grid, art.dynamic_smem) == (512, (4096, 1, 1), 8 * 512 * 16)
    assert "1 CTAs a row" in art.note and art.cubin[:4] == b"\x7fELF"
    monkeypatch.setattr(sc, "PERSISTENT", True)
    (art,) = sc.inspect_artifacts((4096, 65536), torch.bfloat16)
    assert art.dynamic_smem == 2 * 1024 * 4 * 16 and "persistent" in art.note
