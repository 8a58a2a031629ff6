"""The norm backward cluster rung (CUDA C, Hopper; rms_norm_bwd, layer_norm_bwd, add_rms_norm_bwd): its launch
shapes, that every one compiles for sm_90 (CPU, NVRTC), which cases it hands to the split rung's kernel, and on an
H100/H200 that it matches float64 at widths from 1 to 262,144 columns and row counts around its steps and grid,
through the harness's checks (poisoned outputs, inputs unchanged, two runs bit for bit)."""

import pytest
import torch

from kernelwright.harness.verify import verify
from kernelwright.ops.rms_norm_bwd import cuda as bc
from kernelwright.registry import get_family

FAMILIES = ("rms_norm_bwd", "layer_norm_bwd", "add_rms_norm_bwd")
FLAGS = {"rms_norm_bwd": (False, False), "layer_norm_bwd": (True, False), "add_rms_norm_bwd": (False, True)}


def test_launch_shapes():
    bf16, fp32 = 2, 4
    assert bc.bwd_config(1024, bf16) == bc.BwdConfig(1, 512, 32, 4, bc.STAGES)  # a warp a row, 16 rows a step
    assert bc.bwd_config(1024, bf16).rows_a_step == 16
    assert bc.bwd_config(16384, bf16) == bc.BwdConfig(1, 512, 512, 4, bc.STAGES)
    assert bc.bwd_config(65536, bf16).cluster == 4 and bc.bwd_config(262144, bf16).cluster == 16
    assert bc.bwd_config(1, bf16).tpr == 1 and bc.bwd_config(1, bf16).rows_a_step == 512
    assert bc.bwd_config(131072, fp32).cluster == 16 and bc.bwd_config(131076, fp32) is None
    # layer norm's 16-bit rows to 4096 columns: 2 vectors a thread, 4 stages (runs 71-72)
    assert bc.bwd_config(1024, bf16, center=True) == bc.BwdConfig(1, 512, 64, 2, 4)
    assert bc.bwd_config(4096, bf16, center=True).nv == 2 and bc.bwd_config(8192, bf16, center=True).nv == 4
    assert bc.bwd_config(1024, fp32, center=True).nv == 4
    assert bc.smem_bytes(bc.bwd_config(4096, bf16), dh=False) == (2 * 2 + 1) * 4 * 512 * 16  # ring, then w
    assert bc.smem_bytes(bc.bwd_config(4096, bf16, dh=True), dh=True) == (2 * 3 + 1) * 4 * 512 * 16


def test_cases_the_kernel_does_not_take_go_to_split():
    x = torch.randn(4, 4096, dtype=torch.bfloat16)
    assert bc.takes(x, x)
    assert not bc.takes(x[:, 1:4089], x[:, 1:4089])  # a row start off 16 bytes
    y = torch.randn(4, 4100, dtype=torch.bfloat16)
    assert not bc.takes(y, y)  # not a whole number of vectors
    z = torch.randn(2, 131076, dtype=torch.float32)
    assert not bc.takes(z, z)  # fp32 past 16 CTAs


def test_rows_wider_than_the_rung_are_refused_by_name():
    for name in FAMILIES:
        rung = get_family(name).rung("cluster")
        assert rung.needs == "hopper" and rung.backend == "cuda"
        assert rung.refusal((2, 262144), {}) is None
        why = rung.refusal((2, 262145), {})
        assert why and "262145" in why and "cluster" in why


def test_variant_none_takes_it_where_it_led_on_the_h200():
    bf16, fp32 = torch.bfloat16, torch.float32
    for name in FAMILIES:
        fam = get_family(name)
        for d in (4096, 8192, 16384, 65536, 262144):  # run 68: ahead of split and fused (bf16)
            assert fam.preferred((64, d), {}, bf16)[0] == "cluster", (name, d)
            assert fam.preferred((64, d), {}, torch.float16)[0] == "cluster", (name, d)
            assert fam.preferred((64, d), {}, fp32)[0] != "cluster"  # fp32: another launch shape, never timed
            assert fam.preferred((64, d), {})[0] != "cluster"  # no dtype: the choice for every dtype
            assert fam.preferred((64, d), {"aligned": False}, bf16)[0] != "cluster"
        assert fam.preferred((64, 4100), {}, bf16)[0] != "cluster"  # not a whole number of 16-byte vectors
    for name in FAMILIES:  # 1024 columns: rms 2.38 against fused's 2.08, add_rms 2.65 / 2.49, layer 1.88 / 1.59
        assert get_family(name).preferred((64, 1024), {}, bf16)[0] == "cluster"


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=["bf16", "fp16", "fp32"])
def test_every_launch_shape_compiles_for_sm90(name, dtype):
    pytest.importorskip("cuda.core", reason="cuda-core (NVRTC) not installed")
    from kernelwright.harness import inspect as ki

    center, dh = FLAGS[name]
    for n in (8, 1024, 4096, 16384, 65536, 131072, 262144):
        if bc.bwd_config(n, dtype.itemsize) is None:
            continue
        art = bc.artifact(n, dtype, center, dh, offset=not center)
        rep = ki.analyze(ki.Artifact(art["kernel"], art["cubin"], art["threads_per_block"]))
        assert rep.registers <= 128, rep.registers  # launch bounds: 512 threads, one CTA an SM
        # sm_90: no spills from 16384 columns; narrower 16-bit rows spill 8-40 bytes (layer norm's to 4096 columns
        # none: NARROW_CENTER; with 4 vectors a thread it spilled 176 bytes at 1024)
        assert rep.stack_bytes <= (40 if n < 16384 else 0), (n, rep.stack_bytes)
        assert not any(op.startswith("CALL") for op in rep.mix.opcodes), "a library call"
        assert rep.mix.opcodes.get("UCGABAR_WAIT", 0) == (2 if art["config"].cluster > 1 else 0), n
        assert any(op.startswith("LDGSTS") for op in rep.mix.opcodes), "x and dy staged by cp.async"


WIDTHS = [1, 8, 56, 1000, 1024, 4096, 8192, 16384, 32776, 65536, 131072, 262144]


def _rows(n: int, dev: str = "cuda") -> list[int]:
    # fewer rows than a step (narrow rows: 512 // threads a row), a step and a bit, more steps than the grid (the
    # emulator's grid is 2 clusters: 17 rows of 1024 columns are 2 steps a cluster)
    cap = max(1, (1 << 23) // n) if dev == "cuda" else max(1, (1 << 19) // n)
    return sorted({min(cap, r) for r in ((1, 3, 17, 300) if dev == "cuda" else (1, 3, 17))})


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=["bf16", "fp16", "fp32"])
def test_matches_float64(cuda_dev, name, dtype):
    fam = get_family(name)
    shapes = []
    for n in WIDTHS:
        for r in _rows(n, cuda_dev):
            shapes.append(((r, n), {}))
            if name != "layer_norm_bwd" and r == 3:
                shapes.append(((r, n), {"offset": True}))
    shapes.append(((2, 3, 4096), {}))
    results = verify(fam, [fam.rung("cluster")], [dtype], device=cuda_dev, shapes=shapes,
                     layouts=("contiguous",))
    assert len(results) == len(shapes)
    bad = [r for r in results if not r.ok]
    assert not bad, "\n".join(f"{r.shape} seed={r.seed}: {r.reason}" for r in bad[:10])


@pytest.mark.parametrize("name", FAMILIES)
def test_layouts_and_distributions_on_the_fuzz(cuda_dev, name):
    fam = get_family(name)
    results = verify(fam, [fam.rung("cluster")], [torch.bfloat16, torch.float32], device=cuda_dev)
    assert results and all(r.ok for r in results), [r for r in results if not r.ok][:5]
    assert {r.layout for r in results} == {"contiguous", "strided", "transposed"}


def test_which_kernel_ran_and_many_rows(cuda_dev):
    gen = torch.Generator(cuda_dev).manual_seed(3)

    def run(x, dy, w):
        rstd = torch.rsqrt(x.float().pow(2).mean(-1) + 1e-6)
        dx, dw = torch.full_like(x, float("nan")), torch.full_like(w, float("nan"))
        return bc.norm_backward_cluster(x, w, dy, rstd, dx=dx, dw=dw), dx, dw, rstd

    shapes = ((20000, 1024), (4096, 65536), (64, 262144)) if cuda_dev == "cuda" else ((300, 1024), (6, 65536),
                                                                                      (2, 262144))
    for shape in shapes:
        x = torch.randn(shape, device=cuda_dev, generator=gen).bfloat16()
        dy = torch.randn(shape, device=cuda_dev, generator=gen).bfloat16()
        w = torch.randn(shape[-1], device=cuda_dev, generator=gen).bfloat16()
        ran, dx, dw, rstd = run(x, dy, w)
        assert ran == "cluster", shape
        fam = get_family("rms_norm_bwd")
        ref_dx, ref_dw = fam.reference(x.double(), w.double(), dy.double(), rstd.double())
        assert torch.allclose(dx.double(), ref_dx, rtol=2e-2, atol=2e-2 * ref_dx.abs().max().item())
        assert torch.allclose(dw.double(), ref_dw, rtol=2e-2, atol=2e-2 * ref_dw.abs().max().item())
    x = torch.randn(8, 4097, device=cuda_dev).bfloat16()[:, 1:]  # unaligned rows: a Triton rung's kernel
    assert run(x, x.clone(), torch.randn(4096, device=cuda_dev).bfloat16())[0] == "fused"
    x = torch.randn(2, 65537, device=cuda_dev).bfloat16()[:, 1:]
    assert run(x, x.clone(), torch.randn(65536, device=cuda_dev).bfloat16())[0] == "split"


# --- GLOBAL_FROM: the row's sums traded through global memory (GROUP in cuda/cluster.cu), an experiment switch ---
def test_global_exchange_launch_shapes(monkeypatch):
    bf16, fp32 = 2, 4
    monkeypatch.setattr(bc, "GLOBAL_FROM", 16)
    cfg = bc.bwd_config(262144, bf16)
    assert (cfg.cluster, cfg.group, cfg.span, cfg.tpr) == (1, 16, 16, 512)
    assert bc.bwd_config(65536, bf16).cluster == 4 and bc.bwd_config(65536, bf16).group == 1  # below the switch
    assert bc.bwd_config(131072, fp32).group == 16
    monkeypatch.setattr(bc, "GLOBAL_FROM", 2)
    assert bc.bwd_config(32776, bf16).group == 3  # any number of CTAs, not only a cluster size
    assert bc.bwd_config(16384, bf16).group == 1  # one CTA a row: nothing to trade
    assert bc.launch_cluster(bc.bwd_config(65536, bf16)) == 1  # clusters of one (the driver's count is CTAs)
    assert "GROUP=4" in bc.options(bc.bwd_config(65536, bf16), torch.bfloat16, False, False, False).defines
    monkeypatch.setattr(bc, "GLOBAL_FROM", 0)
    assert not any(d.startswith("GROUP") for d in bc.options(bc.bwd_config(65536, bf16), torch.bfloat16, False,
                                                             False, False).defines)


@pytest.mark.parametrize("name", FAMILIES)
def test_global_exchange_compiles_for_sm90(monkeypatch, name):
    pytest.importorskip("cuda.core", reason="cuda-core (NVRTC) not installed")
    from kernelwright.harness import inspect as ki

    monkeypatch.setattr(bc, "GLOBAL_FROM", 2)
    center, dh = FLAGS[name]
    for n, dtype in ((65536, torch.bfloat16), (262144, torch.bfloat16), (131072, torch.float32)):
        art = bc.artifact(n, dtype, center, dh)
        assert art["config"].group > 1
        rep = ki.analyze(ki.Artifact(art["kernel"], art["cubin"], art["threads_per_block"]))
        assert rep.registers <= 128 and rep.stack_bytes == 0, (n, rep.registers, rep.stack_bytes)
        assert rep.mix.opcodes.get("UCGABAR_WAIT", 0) == 0, "no cluster barrier"
        # no GPU-scope fence on a step's path (a release store's MEMBAR.ALL.GPU: run 86), the last CTA's one only
        assert rep.mix.opcodes.get("MEMBAR.ALL.GPU", 0) == 0 and rep.mix.opcodes.get("MEMBAR.SC.GPU", 0) == 1
        assert not any(op.startswith("CALL") for op in rep.mix.opcodes), "a library call"


@pytest.fixture
def global_exchange(cuda_dev, monkeypatch):
    """GLOBAL_FROM on for rows of 2 CTAs or more; emulated, a "GPU" that holds 32 CTAs (two groups of 16)."""
    monkeypatch.setattr(bc, "GLOBAL_FROM", 2)
    if cuda_dev == "cpu":
        from kernelwright.backends import emulate

        with emulate.cuda_on_cpu(resident=32):
            yield cuda_dev
    else:
        yield cuda_dev


@pytest.mark.parametrize("name", FAMILIES)
def test_global_exchange_matches_float64(global_exchange, name):
    dev = global_exchange
    fam = get_family(name)
    shapes = [((r, n), {}) for n in (32776, 65536, 262144) for r in _rows(n, dev)]
    shapes.append(((3, 65536), {"offset": True}) if name != "layer_norm_bwd" else ((2, 3, 65536), {}))
    results = verify(fam, [fam.rung("cluster")], [torch.bfloat16, torch.float32], device=dev, shapes=shapes,
                     layouts=("contiguous",))
    assert len(results) == 2 * len(shapes)
    bad = [r for r in results if not r.ok]
    assert not bad, "\n".join(f"{r.shape} {r.dtype} seed={r.seed}: {r.reason}" for r in bad[:10])


def test_global_exchange_runs_cooperative_and_leaves_its_slots_zeroed(global_exchange):
    dev = global_exchange
    gen = torch.Generator(dev).manual_seed(5)
    rows = 300 if dev == "cuda" else 9  # emulated: 8 groups of 4 CTAs, two turns of the loop for some
    x = torch.randn(rows, 65536, device=dev, generator=gen).bfloat16()
    dy = torch.randn(rows, 65536, device=dev, generator=gen).bfloat16()
    w = torch.randn(65536, device=dev, generator=gen).bfloat16()
    rstd = torch.rsqrt(x.float().pow(2).mean(-1) + 1e-6)
    outs = []
    for _ in range(3):  # the slots zeroed by each launch are what the next one starts from
        dx, dw = torch.full_like(x, float("nan")), torch.full_like(w, float("nan"))
        assert bc.norm_backward_cluster(x, w, dy, rstd, dx=dx, dw=dw) == "cluster"
        outs.append((dx, dw))
    ref_dx, ref_dw = get_family("rms_norm_bwd").reference(x.double(), w.double(), dy.double(), rstd.double())
    assert torch.allclose(outs[0][0].double(), ref_dx, rtol=2e-2, atol=2e-2 * ref_dx.abs().max().item())
    assert torch.allclose(outs[0][1].double(), ref_dw, rtol=2e-2, atol=2e-2 * ref_dw.abs().max().item())
    for dx, dw in outs[1:]:
        assert torch.equal(dx, outs[0][0]) and torch.equal(dw, outs[0][1])  # a fixed order: the same bits
    slots = [t for (d, _), t in bc._slots.items() if d == str(x.device)]
    # the counter and every tag back to 0 (the sums stay: a tag of 0 matches no step)
    assert slots and all(int(t[0]) == 0 and int(t[4:].view(-1, 4)[:, 1::2].count_nonzero()) == 0 for t in slots)
    assert any(int(t[4:].count_nonzero()) > 0 for t in slots)  # the launches did write them
    if dev == "cpu":
        from kernelwright.backends import emulate

        name, grid, _, cluster = emulate.launched[-1]
        assert grid[0] == 32 and cluster == 0  # 8 groups of 4 on the "GPU"'s 32 CTAs


def test_global_exchange_without_room_for_a_group_goes_to_split(cuda_dev, monkeypatch):
    if cuda_dev != "cpu":
        pytest.skip("the emulator's small GPU: 2 CTAs at once, less than a group of 16")
    monkeypatch.setattr(bc, "GLOBAL_FROM", 2)
    x = torch.randn(2, 262144).bfloat16()
    dx, dw = torch.empty_like(x), torch.empty(262144, dtype=torch.bfloat16)
    rstd = torch.rsqrt(x.float().pow(2).mean(-1) + 1e-6)
    assert bc.norm_backward_cluster(x, x[0].clone(), x.clone(), rstd, dx=dx, dw=dw) == "split"


# --- SPARE_WEIGHT: the SMs the clusters leave idle run global-exchange groups beside them (on by default) -----
def test_spare_split_shares_rows_by_weight(monkeypatch):
    x = torch.empty(0, 262144, dtype=torch.bfloat16)
    cfg = bc.bwd_config(262144, 2)
    gcfg = bc.BwdConfig(1, 512, 512, cfg.nv, cfg.stages, group=16)
    assert bc.spare_ctas(-1, cfg, 7, None, gcfg, False) == 0  # the emulator has no SMs to spare
    monkeypatch.setattr(bc, "spare_ctas", lambda *a: 20)  # an H200: 132 SMs, 7 clusters of 16 on 112
    assert bc.SPARE_WEIGHT == 0.35  # the default (runs 91-93)
    assert bc.spare_split(x, cfg, False, False, False, 7, 1024) == (gcfg, 1, int(1024 * 0.35 / 7.35))  # 48 rows
    monkeypatch.setattr(bc, "SPARE_WEIGHT", 0.0)
    assert bc.spare_split(x, cfg, False, False, False, 7, 1024) is None  # off
    monkeypatch.setattr(bc, "SPARE_WEIGHT", 0.7)
    assert bc.spare_split(x, cfg, False, False, False, 7, 1024) == (gcfg, 1, int(1024 * 0.7 / 7.7))  # 93 rows
    assert bc.spare_split(x, cfg, False, False, False, 7, 6) is None  # fewer rows than clusters
    assert bc.spare_split(x, cfg, False, False, False, 7, 10) is None  # a share under one row
    assert bc.spare_split(x, cfg, False, False, False, 7, 12) == (gcfg, 1, 1)
    monkeypatch.setattr(bc, "spare_ctas", lambda *a: 15)  # less than a group
    assert bc.spare_split(x, cfg, False, False, False, 7, 1024) is None
    monkeypatch.setattr(bc, "spare_ctas", lambda *a: 40)  # two groups
    assert bc.spare_split(x, cfg, False, False, False, 7, 1024) == (gcfg, 2, int(1024 * 1.4 / 8.4))
    assert bc.spare_split(x, bc.bwd_config(16384, 2), False, False, False, 7, 1024) is None  # one CTA a row


@pytest.mark.parametrize("name", FAMILIES)
def test_spare_groups_match_float64_and_the_clusters(cuda_dev, monkeypatch, name):
    """The rows split between the clusters and the spare SMs' groups: float64 on every row, dx bit for bit the
    clusters-only result (each row's sums in rank order either way), two runs the same bits."""
    dev = cuda_dev
    fam = get_family(name)
    center, dh = FLAGS[name]
    n, rows = (65536, 9) if dev == "cpu" else (262144, 300)
    gen = torch.Generator(dev).manual_seed(11)
    x = torch.randn(rows, n, device=dev, generator=gen).bfloat16()
    dy = torch.randn(rows, n, device=dev, generator=gen).bfloat16()
    w = torch.randn(n, device=dev, generator=gen).bfloat16()
    xf = x.float()
    mean = xf.mean(-1) if center else None
    rstd = torch.rsqrt((xf - mean[:, None]).pow(2).mean(-1) + 1e-5) if center else torch.rsqrt(xf.pow(2).mean(-1)
                                                                                               + 1e-6)
    dhv = torch.randn(rows, n, device=dev, generator=gen).bfloat16() if dh else None

    def run():
        dx = torch.full_like(x, float("nan"))
        dw = torch.full_like(w, float("nan"))
        db = torch.full_like(w, float("nan")) if center else None
        which = bc.norm_backward_cluster(x, w, dy, rstd, dx=dx, dw=dw, mean=mean, db=db, dh=dhv)
        assert which == "cluster"
        return dx, dw, db

    def emulated(fn):
        if dev != "cpu":
            return fn()
        from kernelwright.backends import emulate

        with emulate.cuda_on_cpu(resident=2):  # 2 clusters of 4; the spare SMs: two groups of 4
            return fn()

    monkeypatch.setattr(bc, "SPARE_WEIGHT", 0.0)  # the clusters alone
    plain = emulated(run)
    monkeypatch.setattr(bc, "SPARE_WEIGHT", 0.7)
    if dev == "cpu":
        from kernelwright.backends import emulate

        monkeypatch.setattr(bc, "spare_ctas", lambda *a: 8)
        emulate.launched.clear()  # (a log of the last 1000 launches: cleared, it holds this test's alone)
    split = [emulated(run), emulated(run)]
    if dev == "cpu":
        kinds = [(grid[0], cluster) for _, grid, _, cluster in emulate.launched]
        assert kinds == [(8, 0), (8, 0)] * 2  # each run: 2 clusters of 4 (set in the kernel), then 2 groups of 4
        cfg = bc.bwd_config(n, 2, dh, center)
        assert bc.spare_split(x, cfg, center, dh, False, 2, rows)[1:] == (2, 3)  # 9 x 1.4 / 3.4: 3 rows
    else:
        cfg = bc.bwd_config(n, 2, dh, center)
        held = bc.resident(bc.kernel(cfg, x.dtype, center, dh), torch.cuda.current_device(), cfg, dh)
        assert bc.spare_split(x, cfg, center, dh, False, held, rows), "no spare SMs on this GPU"
    args = (x.double(), w.double(), dy.double()) + (() if not center else (mean.double(),)) + (rstd.double(),)
    if dh:
        args = (x.double(), w.double(), dy.double(), dhv.double(), rstd.double())
    ref = fam.reference(*args)
    for got, want in zip([t for t in split[0] if t is not None], ref, strict=True):
        assert torch.allclose(got.double(), want, rtol=2e-2, atol=2e-2 * want.abs().max().item())
    assert torch.equal(split[0][0], plain[0])  # dx: every row's sums in rank order, cluster or group
    for a, b in zip(split[0], split[1], strict=True):
        assert a is None or torch.equal(a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("name", FAMILIES)
def test_spare_groups_replay_in_a_cuda_graph(name):
    """SPARE_WEIGHT's default (0.35) runs the groups on a side stream beside the clusters: captured in a CUDA graph
    and replayed, the backward gives the eager run's bits (the fork and join captured, the slots zeroed in the graph),
    and again after the inputs change in place."""
    from kernelwright import runtime

    if not runtime.is_hopper():
        pytest.skip("needs a Hopper GPU (run with KW_DEVICE=cuda on an H100/H200)")
    center, dh = FLAGS[name]
    rows, n = 300, 262144
    gen = torch.Generator("cuda").manual_seed(23)
    x, dy = (torch.randn(rows, n, device="cuda", generator=gen).bfloat16() for _ in range(2))
    w = torch.randn(n, device="cuda", generator=gen).bfloat16()
    dhv = torch.randn(rows, n, device="cuda", generator=gen).bfloat16() if dh else None
    mean = torch.empty(rows, device="cuda") if center else None
    rstd = torch.empty(rows, device="cuda")

    def stats():
        xf = x.float()
        if center:
            mean.copy_(xf.mean(-1))
        rstd.copy_(torch.rsqrt((xf - (mean[:, None] if center else 0)).pow(2).mean(-1) + 1e-5))

    stats()
    cfg = bc.bwd_config(n, 2, dh, center)
    held = bc.resident(bc.kernel(cfg, x.dtype, center, dh), torch.cuda.current_device(), cfg, dh)
    assert bc.SPARE_WEIGHT > 0 and bc.spare_split(x, cfg, center, dh, False, held, rows), "no spare SMs in use"
    dx, dw, db = torch.empty_like(x), torch.empty_like(w), torch.empty_like(w) if center else None
    outs = [t for t in (dx, dw, db) if t is not None]

    def backward():
        for t in outs:  # poisoned: what a run leaves unwritten stays NaN
            t.fill_(float("nan"))
        return bc.norm_backward_cluster(x, w, dy, rstd, dx=dx, dw=dw, mean=mean, db=db, dh=dhv)

    side = torch.cuda.Stream()  # warm up (compile, residency queries) off the capture, as torch.cuda.graphs asks
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        assert backward() == "cluster"
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    for step in range(2):  # then new inputs in place: the replay follows them
        if step:
            x.mul_(1.5).add_(0.25)
            stats()
            assert backward() == "cluster"
        eager = [t.clone() for t in outs]
        if not step:
            with torch.cuda.graph(graph):  # the poisoning fill is captured too
                backward()
        graph.replay()
        torch.cuda.synchronize()
        for got, want in zip(outs, eager, strict=True):
            assert torch.equal(got, want) and not want.isnan().any()
