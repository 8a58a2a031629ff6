"""The fa3 attention rung (Gluon, FlashAttention-3 style, Hopper): on the CPU, that every kernel it launches
compiles for sm_90a without spills and with wgmma, TMA and mbarrier instructions, which cases it refuses, its
errors and its TMA addressing rules; on an H100/H200 (``-m gpu`` with KW_DEVICE=cuda), o and lse against float64
on MHA / GQA / MQA, ragged lengths, Sq != Skv causal both ways (rows with no key: o = 0, lse = -inf), D64 and D128,
bf16 and fp16, normal and large inputs, non-contiguous q, poisoned outputs and a bitwise-equal repeat."""

import math

import pytest
import torch

from kernelwright import runtime
from kernelwright.errors import UsageError
from kernelwright.ops.attention import gluon as G
from kernelwright.ops.attention import spec

S = spec._s
C, V, VC = spec.CAUSAL, spec.VARLEN, spec.VARLEN_CAUSAL


def _toolchain_reason() -> str | None:
    if not G.HAVE_GLUON:
        return "Triton without Gluon (needs triton >= 3.6)"
    if G._tool("ptxas") is None:
        return "Triton's bundled ptxas not found"
    return None


toolchain = pytest.mark.skipif(_toolchain_reason() is not None, reason=_toolchain_reason() or "")


# --- CPU: compiles ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def compiled():
    """compile_check over every kernel the rung launches (12 variants, ~2-4 s each), once for the module."""
    return G.compile_check()


@toolchain
def test_every_launched_kernel_compiles_without_spills(compiled):
    variants = G.default_variants()
    assert len(compiled) == len(variants) == 12
    assert {(r["variant"].dtype, r["variant"].d, r["variant"].causal, r["variant"].ragged) for r in compiled} == {
        (dt, d, c, rg) for dt in (torch.bfloat16, torch.float16) for d in (64, 128)
        for c, rg in ((False, False), (False, True), (True, False))}
    for r in compiled:
        assert "error" not in r, f"{r['label']}: {r.get('error')}"
        assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack"] == 0, r["label"]
        assert r["ptxas_rc"] == 0 and not r["ptxas_warnings"], (r["label"], r["ptxas_warnings"])
        assert r["shared"] <= G.SMEM_LIMIT, r["label"]
        assert r["total_warps"] == 12, r["label"]  # two consumer warpgroups and the producer's
        assert r["checks"]["wgmma"] and r["checks"]["tma_load"] and r["checks"]["tma_store"], r["label"]
        assert r["checks"]["mbarrier"] and r["checks"]["no_spills"], r["label"]
        assert r["ptx_counts"]["wgmma.mma_async"] > 0 and r["ptx_counts"]["mbarrier.try_wait"] > 0, r["label"]
        if r["have_sass"]:
            assert r["sass_counts"]["HGMMA"] > 0 and r["sass_counts"]["UTMALDG"] > 0, r["label"]
            assert r["sass_counts"]["SYNCS(mbarrier)"] > 0 and r["sass_counts"]["LDL/STL"] == 0, r["label"]
            # setmaxnreg gives the consumers 240: no partition may need more
            assert r["sass_max_reg_index"] < r["variant"].config.consumer_regs, r["label"]
        assert r["ok"], (r["label"], r["checks"])


@toolchain
def test_aligned_fast_path_did_not_grow(compiled):
    # the experiment's kernel (before GQA / ragged / Sq != Skv): bf16 D128 non-causal used up to R185, 164168 B of
    # shared memory (+16 B now: Triton's barrier padding), no spills
    row = next(r for r in compiled if r["variant"] == G.Variant(torch.bfloat16, 128, False, False,
                                                                G.default_config(128, False)))
    if row["have_sass"]:
        assert row["sass_max_reg_index"] <= 185, row["sass_max_reg_index"]
    assert row["shared"] <= 164168 + 64, row["shared"]
    assert row["ptx_counts"]["cp.async.bulk.tensor(g2s)"] > 0


@toolchain
def test_artifacts_for_inspect(compiled):
    from kernelwright.harness.inspect import Artifact

    arts = G.artifacts_fa3(S(2, 8, 2, 1000, 1000, 128, C), torch.bfloat16)
    assert len(arts) == 1 and isinstance(arts[0], Artifact)
    art = arts[0]
    assert art.cubin[:4] == b"\x7fELF" and art.threads_per_block == 384
    assert art.grid == (8, 16) and 160 * 1024 <= art.dynamic_smem <= G.SMEM_LIMIT
    assert "_attn_fwd_kernel" in art.kernel and "warp_specialize" in art.source and "fa3" in art.note
    # causal Sq > Skv: the grid starts at the first row that sees a key
    assert G.artifacts_fa3(S(1, 4, 4, 700, 100, 64, C), torch.float16)[0].grid == (1, 4)
    with pytest.raises(UsageError, match="varlen"):
        G.artifacts_fa3(S(2, 4, 4, 64, 64, 128, V), torch.bfloat16)


# --- CPU: what the rung takes -----------------------------------------------------------------------------------
def test_limit_refuses_what_the_kernel_cannot_do():
    assert "varlen" in G.fa3_limit(S(2, 4, 4, 128, 128, 128, V), {})
    assert "varlen" in G.fa3_limit(S(2, 4, 2, 128, 128, 64, VC), {})
    assert G.fa3_limit(S(1, 4, 4, 128, 128, 96), {}) == "fa3: head dim 96 not in (64, 128)"
    assert "256" in G.fa3_limit(S(1, 4, 4, 128, 128, 256, C), {})
    assert "32" in G.fa3_limit(S(1, 4, 4, 128, 128, 32), {})


@pytest.mark.parametrize("size", [
    S(4, 32, 32, 4096, 4096, 128), S(4, 32, 8, 4096, 4096, 128, C), S(1, 8, 1, 33, 100, 64, C),
    S(2, 8, 2, 700, 100, 128, C), S(1, 4, 4, 1, 1, 64), S(2, 16, 2, 1000, 1777, 64, C), S(32, 32, 8, 1, 4096, 128),
])
def test_limit_takes_padded_gqa_causal_any_lengths(size):
    assert G.fa3_limit(size, {}) is None


def test_varlen_call_raises_usage_error():
    q = torch.randn(10, 4, 128, dtype=torch.bfloat16)
    k = torch.randn(12, 4, 128, dtype=torch.bfloat16)
    cu_q = torch.tensor([0, 4, 10], dtype=torch.int32)
    cu_k = torch.tensor([0, 5, 12], dtype=torch.int32)
    with pytest.raises(UsageError, match="varlen"):
        G.attention_fa3(q, k, k, cu_q, cu_k, causal=True, out=torch.empty_like(q))


def test_other_bad_calls_raise_usage_error():
    q = torch.randn(1, 4, 8, 96, dtype=torch.bfloat16)
    with pytest.raises(UsageError, match="head dim 96"):
        G.attention_fa3(q, q, q, out=torch.empty_like(q))
    q = torch.randn(1, 4, 8, 64)
    with pytest.raises(UsageError, match="float16 or bfloat16"):
        G.attention_fa3(q, q, q, out=torch.empty_like(q))
    q = torch.randn(1, 6, 8, 64, dtype=torch.float16)
    k = torch.randn(1, 4, 8, 64, dtype=torch.float16)
    with pytest.raises(UsageError, match="multiple"):
        G.attention_fa3(q, k, k, out=torch.empty_like(q))


def test_config_problems_are_named():
    assert G.default_config(128, False) == G.FA3Config(128, 2, True, 4)
    assert G.default_config(64, True).block_n == 128
    assert G.FA3Config(block_n=128, stages=2).problem(128) is None
    assert "shared memory" in G.FA3Config(block_n=128, stages=4).problem(128)
    assert "block_n" in G.FA3Config(block_n=96).problem(128)


def test_tma_addressing_rules():
    x = torch.empty(2, 3, 50, 128, dtype=torch.bfloat16)
    assert G._tma_ok(x)
    assert G._tma_ok(torch.empty(2, 50, 3, 128, dtype=torch.bfloat16).transpose(1, 2))  # [B, S, H, D] view
    assert not G._tma_ok(x.mT.contiguous().mT)  # last dim not unit-stride: copied
    assert not G._tma_ok(torch.empty(2, 3, 50, 256, dtype=torch.bfloat16)[..., ::2])
    assert not G._tma_ok(torch.empty(2 * 3 * 50 * 128 + 1, dtype=torch.bfloat16)[1:].view(2, 3, 50, 128))
    assert not G._tma_ok(torch.empty(1, 1, 50, 128, dtype=torch.bfloat16).expand(2, 3, 50, 128))  # broadcast
    y = torch.empty(1, 1, 1, 64, dtype=torch.float16).as_strided((1, 1, 1, 64), (7, 3, 5, 1))
    assert G._tma_ok(y)  # size-1 dims: strides never stepped, replaced in the descriptor
    assert all(s * 2 % 16 == 0 for s in G._strides(y)[:-1])
    assert G._strides(x) == list(x.stride())


# --- GPU ---------------------------------------------------------------------------------------------------------
hopper = pytest.mark.skipif(not runtime.is_hopper(),
                            reason="needs a Hopper GPU (run with KW_DEVICE=cuda on an H100/H200)")
DT = {"bf16": torch.bfloat16, "fp16": torch.float16}
# (size, dtype, dist, q layout): q layouts "contiguous", "bshd" (a [B, S, H, D] tensor's transpose: TMA reads it
# as it is), "transposed" / "strided" (the harness's: not TMA-addressable, copied first)
GPU_CASES = [
    (S(1, 2, 2, 1, 1, 128), "bf16", "normal", "contiguous"),            # one query, one key: o = v
    (S(2, 4, 4, 17, 17, 64, C), "fp16", "normal", "contiguous"),        # 17 rows: one partial block, one tile
    (S(1, 4, 4, 128, 128, 128, C), "bf16", "large", "contiguous"),      # exactly one block and tile
    (S(1, 8, 2, 129, 129, 128, C), "bf16", "normal", "bshd"),           # GQA 4, one row past a block
    (S(1, 8, 2, 129, 129, 64), "fp16", "large", "contiguous"),          # ragged key tile, non-causal
    (S(2, 8, 1, 1000, 1000, 128), "bf16", "normal", "contiguous"),      # MQA 8, ragged, many tiles
    (S(2, 8, 1, 1000, 1000, 64, C), "fp16", "large", "bshd"),           # MQA causal, ragged diagonal
    (S(1, 16, 2, 2048, 2048, 128, C), "bf16", "normal", "contiguous"),  # GQA 8, the aligned fast path
    (S(1, 16, 2, 2048, 2048, 64), "fp16", "normal", "transposed"),      # GQA 8, q copied (not TMA-addressable)
    (S(1, 4, 4, 100, 1000, 128, C), "bf16", "normal", "contiguous"),    # Sq < Skv: a chunk on a cache
    (S(1, 4, 2, 17, 129, 64, C), "fp16", "large", "strided"),           # Sq < Skv, q copied
    (S(1, 4, 2, 1000, 129, 128, C), "bf16", "large", "contiguous"),     # Sq > Skv: rows 0..870 see no key
    (S(2, 4, 4, 129, 17, 64, C), "fp16", "normal", "bshd"),             # Sq > Skv: 112 rows, a partial block
    (S(1, 2, 1, 300, 1, 128, C), "bf16", "normal", "contiguous"),       # one key: rows < 299 see nothing
    (S(1, 4, 2, 1000, 129, 128), "fp16", "normal", "contiguous"),       # Sq > Skv non-causal
    (S(1, 4, 4, 1, 2048, 64), "bf16", "large", "contiguous"),           # decode-shaped
]


def _case(size, dtype, dist, layout):
    from kernelwright.harness.inputs import generator
    from kernelwright.registry import get_family

    fam = get_family("attention")
    gen, seed = generator("cuda")
    case = fam.make_case(size, dtype, "cuda", gen, dist=dist)
    q, k, v = case.args
    if layout == "bshd":
        q = q.transpose(1, 2).contiguous().transpose(1, 2)
        assert not q.is_contiguous() and G._tma_ok(q)
    elif layout in ("transposed", "strided"):
        from kernelwright.harness.inputs import with_layout

        q = with_layout(q, layout)
        assert not G._tma_ok(q)
    return fam, case, (q, k, v), seed


def _reference(q, k, v, causal, scale):
    from kernelwright.ops.attention.reference import attention_with_lse

    return attention_with_lse(q.double(), k.double(), v.double(), causal=causal, scale=scale)


def _check(fam, case, o, lse, ref_o, ref_lse, what):
    from kernelwright.harness.verify import compare, error_scale

    dtype = case.args[0].dtype
    assert o.dtype == dtype and o.is_contiguous(), what
    assert not torch.isnan(o).any(), f"{what}: NaN in o"
    cmp = compare(o, ref_o, fam.tolerances[dtype], error_scale(fam, case))
    assert cmp.ok, f"{what}: {cmp.reason}"
    assert lse.dtype == torch.float32 and not torch.isnan(lse).any(), f"{what}: NaN in lse"
    empty = torch.isinf(ref_lse)
    assert torch.equal(torch.isinf(lse), empty), f"{what}: -inf rows differ"
    assert bool((lse[empty] == float("-inf")).all()), what
    assert not o[empty.unsqueeze(-1).expand_as(o)].any(), f"{what}: rows with no key not zero"
    fin = ~empty
    err = (lse.double()[fin] - ref_lse[fin]).abs()
    allowed = 1e-5 + 2e-6 * ref_lse[fin].abs()
    assert bool((err <= allowed).all()), f"{what}: lse off by {float(err.max()):.3g}"


def _run(q, k, v, causal, scale, config=None):
    b, hq, sq, d = q.shape
    o = torch.full((b, hq, sq, d), float("nan"), dtype=q.dtype, device=q.device)
    lse = torch.full((b, hq, sq), float("nan"), dtype=torch.float32, device=q.device)
    assert G.attention_fa3(q, k, v, causal=causal, scale=scale, out=o, lse=lse, config=config) is o
    return o, lse


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize(("size", "dt", "dist", "layout"), GPU_CASES,
                         ids=[f"{spec.format_size(c[0])}-{c[1]}-{c[2]}-{c[3]}" for c in GPU_CASES])
def test_matches_float64(size, dt, dist, layout):
    fam, case, (q, k, v), seed = _case(size, DT[dt], dist, layout)
    causal, scale = case.kwargs["causal"], case.kwargs["scale"]
    ref_o, ref_lse = _reference(q, k, v, causal, scale)
    what = f"fa3 {case.label} {dt} {dist} {layout} seed={seed}"
    o, lse = _run(q, k, v, causal, scale)
    _check(fam, case, o, lse, ref_o, ref_lse, what)
    o2, lse2 = _run(q, k, v, causal, scale)
    assert torch.equal(o, o2) and torch.equal(lse, lse2), f"{what}: a repeat differs"


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("config", [G.FA3Config(128, 2, False, 4), G.FA3Config(128, 3, True, 4),
                                    G.FA3Config(64, 3, True, 4), G.FA3Config(64, 4, False, 4),
                                    G.FA3Config(128, 2, True, 1)], ids=lambda c: c.label().replace(" ", "-"))
def test_other_configs_match_float64(config):
    for size, dt in ((S(1, 8, 2, 1000, 1000, 128, C), "bf16"), (S(1, 4, 2, 700, 190, 128, C), "fp16"),
                     (S(1, 4, 2, 333, 1000, 64), "bf16")):
        fam, case, (q, k, v), seed = _case(size, DT[dt], "normal", "contiguous")
        ref_o, ref_lse = _reference(q, k, v, case.kwargs["causal"], None)
        o, lse = _run(q, k, v, case.kwargs["causal"], None, config=config)
        _check(fam, case, o, lse, ref_o, ref_lse, f"fa3 {config} {case.label} seed={seed}")


@pytest.mark.gpu
@hopper
def test_given_scale_and_no_lse():
    fam, case, (q, k, v), _ = _case(S(1, 4, 2, 200, 300, 64, C), torch.bfloat16, "normal", "contiguous")
    for scale in (0.3, -0.2, 0.0):
        ref_o, ref_lse = _reference(q, k, v, True, scale)
        o, lse = _run(q, k, v, True, scale)
        _check(fam, case, o, lse, ref_o, ref_lse, f"scale={scale}")
    out = torch.full_like(q, float("nan"))
    G.attention_fa3(q, k, v, causal=True, out=out)  # lse not wanted: a scratch one
    ref_o, _ = _reference(q, k, v, True, 1 / math.sqrt(64))
    assert (out.double() - ref_o).abs().max() < 2e-2


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("size", [S(2, 8, 2, 129, 1000, 128, C), S(1, 4, 4, 1000, 17, 64, C),
                                  S(1, 16, 2, 1024, 1024, 64)], ids=spec.format_size)
def test_through_the_family(size):
    # attention_forward(variant="fa3") once the rung is registered (the direct calls above do not need it)
    from kernelwright.ops.attention.api import attention_forward
    from kernelwright.registry import get_family

    fam = get_family("attention")
    if "fa3" not in [r.name for r in fam.rungs]:
        pytest.skip("fa3 not registered in the attention family")
    for dt in (torch.bfloat16, torch.float16):
        fam, case, (q, k, v), seed = _case(size, dt, "normal", "contiguous")
        o, lse = attention_forward(q, k, v, causal=case.kwargs["causal"], scale=None, variant="fa3")
        ref_o, ref_lse = _reference(q, k, v, case.kwargs["causal"], None)
        _check(fam, case, o, lse, ref_o, ref_lse, f"attention_forward fa3 {case.label} {dt} seed={seed}")


@pytest.mark.gpu
@hopper
def test_auto_takes_fa3_and_autograd_matches_float64():
    # variant=None takes fa3 at D128 (spec.FA3_AUTO); its o and lse feed the Triton backward through autograd:
    # gradients of o and lse against float64 autograd through the materialised softmax (GQA 4, causal, Sq > Skv
    # with fully masked rows)
    from kernelwright import ops
    from kernelwright.ops import _validate
    from kernelwright.registry import get_family

    size = S(2, 8, 2, 300, 257, 128, C)
    fam = get_family("attention")
    assert _validate.pick_rung(fam, None, "cuda", size, {}, torch.bfloat16).name == "fa3"
    g = torch.Generator(device="cuda").manual_seed(int(torch.randint(0, 2**31, ()).item()))
    q, k, v = (torch.randn(2, h, s, 128, device="cuda", generator=g, dtype=torch.bfloat16)
               for h, s in ((8, 300), (2, 257), (2, 257)))
    do = torch.randn(2, 8, 300, 128, device="cuda", generator=g, dtype=torch.bfloat16)
    dlse = torch.randn(2, 8, 300, device="cuda", generator=g)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    o, lse = ops.attention(*leaves, causal=True, return_lse=True)
    torch.autograd.backward((o, lse.nan_to_num(0.0, neginf=0.0)), (do, dlse))
    scale = 1 / math.sqrt(128)
    ref = [t.detach().double().requires_grad_() for t in (q, k, v)]
    kk, vv = (t.repeat_interleave(4, 1) for t in ref[1:])
    s = scale * ref[0] @ kk.transpose(-1, -2)
    i, j = torch.arange(300, device="cuda")[:, None], torch.arange(257, device="cuda")[None, :]
    s = s.masked_fill(j > i + 257 - 300, -math.inf)
    ref_lse = torch.logsumexp(s, -1)
    ref_o = torch.exp(s - ref_lse[..., None]).nan_to_num(0.0) @ vv
    torch.autograd.backward((ref_o, ref_lse.nan_to_num(0.0, neginf=0.0)), (do.double(), dlse.double()))
    assert (o.double() - ref_o).abs().max() < 2e-2 and torch.equal(lse == -math.inf, ref_lse == -math.inf)
    for got, want in zip((t.grad for t in leaves), (t.grad for t in ref), strict=True):
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got.double(), want, rtol=2**-6, atol=2e-2 * float(want.abs().max()))
