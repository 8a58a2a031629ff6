"""The fa3 attention rung (Gluon, FlashAttention-3 style, Hopper): on the CPU, that every kernel it launches
compiles for sm_90a without spills and with wgmma, TMA and mbarrier instructions, which cases it refuses, its
errors and its TMA addressing rules; on an H100/H200 (``-m gpu`` with KW_DEVICE=cuda), o and lse against float64
on MHA / GQA / MQA, ragged lengths, Sq != Skv causal both ways (rows with no key: o = 0, lse = -inf), D64 and D128,
bf16 and fp16, normal and large inputs, non-contiguous q, poisoned outputs and a bitwise-equal repeat.

The packed (varlen) kernel sits behind ``gluon.FA3_VARLEN`` (on since its GPU tests passed in H200 run 79): on the
CPU, that it compiles like the padded ones and that the switch gates the rung; on the GPU (``-m gpu -k varlen``,
the switch forced on so that they test the kernel whatever its default), packed batches (empty sequences, Lq < Lk,
Lq = Lk, Lq > Lk) against float64 per sequence."""

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
    """compile_check over every kernel the rung launches (12 padded + 8 varlen variants, ~1-3 s each), once for the
    module."""
    return G.compile_check()


@toolchain
def test_every_launched_kernel_compiles_without_spills(compiled):
    variants = G.default_variants()
    assert len(compiled) == len(variants) == 20
    padded = [r for r in compiled if not r["variant"].varlen]
    assert {(r["variant"].dtype, r["variant"].d, r["variant"].causal, r["variant"].ragged) for r in padded} == {
        (dt, d, c, rg) for dt in (torch.bfloat16, torch.float16) for d in (64, 128)
        for c, rg in ((False, False), (False, True), (True, False))}
    assert {(r["variant"].dtype, r["variant"].d, r["variant"].causal) for r in compiled if r["variant"].varlen} == {
        (dt, d, c) for dt in (torch.bfloat16, torch.float16) for d in (64, 128) for c in (False, True)}
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


# The padded kernels as they compiled before the varlen kernel was added (Triton 3.6, sm_90a): highest register a
# partition touches and shared memory per (D, kind); the varlen work left them byte-identical in SASS.
PADDED_BEFORE_VARLEN = {(64, "full"): (155, 82264), (64, "ragged"): (171, 82264), (64, "causal"): (223, 82264),
                        (128, "full"): (183, 164184), (128, "ragged"): (204, 164184), (128, "causal"): (237, 164184)}


@toolchain
def test_padded_kernels_did_not_grow_with_varlen(compiled):
    for r in compiled:
        var = r["variant"]
        if var.varlen:
            continue
        regs, shared = PADDED_BEFORE_VARLEN[var.d, "causal" if var.causal else "ragged" if var.ragged else "full"]
        assert r["shared"] == shared, (r["label"], r["shared"])
        assert r["regs"] == 168 and r["spill_stores"] == r["spill_loads"] == r["stack"] == 0, r["label"]
        if r["have_sass"]:
            assert r["sass_max_reg_index"] <= regs, (r["label"], r["sass_max_reg_index"])


@toolchain
def test_varlen_kernels_compile_like_the_padded_ones(compiled):
    rows = {(r["variant"].dtype, r["variant"].d, r["variant"].causal): r for r in compiled if r["variant"].varlen}
    assert len(rows) == 8
    for (dt, d, causal), r in rows.items():
        assert r["ok"] and "varlen" in r["label"], (r["label"], r.get("checks"), r.get("error"))
        assert "_attn_fwd_varlen_kernel" in r["kernel"], r["kernel"]
        assert r["spill_stores"] == r["spill_loads"] == r["stack"] == 0, r["label"]
        assert r["regs"] == 168 and r["total_warps"] == 12, r["label"]
        assert set(r["setmaxnreg"]) >= {"inc240", "dec24"}, (r["label"], r["setmaxnreg"])
        # the same rings as the padded kernel (+16 B of barrier padding at most); non-causal: the ragged one (the
        # key tail mask is always compiled in)
        padded = next(x for x in compiled if not x["variant"].varlen and x["variant"].d == d
                      and x["variant"].dtype == dt and x["variant"].causal == causal
                      and x["variant"].ragged == (not causal))
        assert padded["shared"] <= r["shared"] <= padded["shared"] + 64, (r["label"], r["shared"])
        # the same wgmmas and TMA copies: the loop is the padded kernel's; o by TMA for full blocks
        assert r["ptx_counts"]["wgmma.mma_async"] == padded["ptx_counts"]["wgmma.mma_async"], r["label"]
        assert r["ptx_counts"]["cp.async.bulk.tensor(g2s)"] == 4 and r["ptx_counts"]["cp.async.bulk.tensor(s2g)"] > 0
        if r["have_sass"]:
            assert r["sass_max_reg_index"] < r["variant"].config.consumer_regs, r["label"]


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


def test_varlen_artifacts_refused_with_the_switch_off(monkeypatch):
    monkeypatch.setattr(G, "FA3_VARLEN", False)
    with pytest.raises(UsageError, match="varlen"):
        G.artifacts_fa3(S(2, 4, 4, 64, 64, 128, V), torch.bfloat16)


@toolchain
def test_varlen_artifacts_with_the_switch_on(compiled, monkeypatch):
    monkeypatch.setattr(G, "FA3_VARLEN", True)
    art = G.artifacts_fa3(S(3, 8, 2, 1000, 1200, 64, VC), torch.float16)[0]
    assert "_attn_fwd_varlen_kernel" in art.kernel and art.grid == (8, 24) and "varlen" in art.note
    assert art.threads_per_block == 384 and art.cubin[:4] == b"\x7fELF"


# --- CPU: what the rung takes -----------------------------------------------------------------------------------
def test_limit_refuses_what_the_kernel_cannot_do():
    assert G.FA3_VARLEN  # on since tests/test_attention_gluon.py -m gpu -k varlen passed on the H200 (run 79)
    assert G.fa3_limit(S(1, 4, 4, 128, 128, 96), {}) == "fa3: head dim 96 not in (64, 128)"
    assert "256" in G.fa3_limit(S(1, 4, 4, 128, 128, 256, C), {})
    assert "32" in G.fa3_limit(S(1, 4, 4, 128, 128, 32), {})


@pytest.mark.parametrize("size", [
    S(4, 32, 32, 4096, 4096, 128), S(4, 32, 8, 4096, 4096, 128, C), S(1, 8, 1, 33, 100, 64, C),
    S(2, 8, 2, 700, 100, 128, C), S(1, 4, 4, 1, 1, 64), S(2, 16, 2, 1000, 1777, 64, C), S(32, 32, 8, 1, 4096, 128),
])
def test_limit_takes_padded_gqa_causal_any_lengths(size):
    assert G.fa3_limit(size, {}) is None


@pytest.mark.parametrize("size", [S(2, 4, 4, 128, 128, 128, V), S(2, 4, 2, 128, 128, 64, VC),
                                  S(8, 32, 8, 4096, 4096, 128, VC), S(3, 8, 1, 1000, 17, 64, VC)])
def test_limit_takes_varlen_only_with_the_switch_on(size, monkeypatch):
    monkeypatch.setattr(G, "FA3_VARLEN", False)
    assert "switched off" in G.fa3_limit(size, {})
    monkeypatch.setattr(G, "FA3_VARLEN", True)
    assert G.fa3_limit(size, {}) is None
    # the family's rung reads the same switch; its other limits still hold
    from kernelwright.registry import get_family

    assert get_family("attention").rung("fa3").refusal(size, {}) is None
    assert "float32" in get_family("attention").rung("fa3").refusal(size, {}, torch.float32)
    assert "head dim 96" in G.fa3_limit(S(2, 4, 4, 128, 128, 96, V), {})


def test_varlen_bad_calls_raise_usage_error_with_the_switch_on(monkeypatch):
    monkeypatch.setattr(G, "FA3_VARLEN", True)
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    q = torch.randn(10, 4, 96, dtype=torch.bfloat16)
    with pytest.raises(UsageError, match="head dim 96"):
        G.attention_fa3(q, q, q, cu, cu, out=torch.empty_like(q))
    q = torch.randn(10, 6, 64, dtype=torch.float16)
    k = torch.randn(10, 4, 64, dtype=torch.float16)
    with pytest.raises(UsageError, match="multiple"):
        G.attention_fa3(q, k, k, cu, cu, out=torch.empty_like(q))
    with pytest.raises(UsageError, match="varlen layout"):
        G.attention_fa3(q[None], k[None], k[None], cu, cu, out=torch.empty_like(q[None]))
    with pytest.raises(UsageError, match="cu_seqlens"):
        G.attention_fa3(q, q, q, cu, cu[:2], out=torch.empty_like(q))
    with pytest.raises(UsageError, match="CUDA device"):  # everything right but the device
        G.attention_fa3(q, q, q, cu, cu, out=torch.empty_like(q))


def _emulate_varlen(q, k, v, cu_q, cu_k, max_q, causal, scale, block_n=128):
    """The varlen kernel's schedule in float64 on the CPU, step for step in its index arithmetic (not its code): CTA
    (pid_m, b, h) zero-fills its rows below q_start, computes rows m0 = q_start + 128 pid_m .. if m0 < Lq, each
    64-row consumer over its n_tiles key tiles read from the packed tensors (the next sequence's rows, zeros past the
    end), tiles below n_full unmasked, the others masked as the kernel masks them; stores: the whole slice when its
    64 rows are the sequence's (TMA), else the rows < Lq. Outputs start as NaN: a row never written stays NaN."""
    wg, bm = G.WG_M, G.BLOCK_M
    hq, hkv = q.shape[1], k.shape[1]
    o = torch.full(q.shape, float("nan"), dtype=torch.float64)
    lse = torch.full((hq, q.shape[0]), float("nan"), dtype=torch.float64)

    def rows(t, start, n, head):  # a TMA box of the [1, H, total, D] view: zeros past total
        out = torch.zeros(n, t.shape[2], dtype=torch.float64)
        got = t[start:start + n, head]
        out[:got.shape[0]] = got
        return out

    for b in range(cu_q.shape[0] - 1):
        q0, lq = int(cu_q[b]), int(cu_q[b + 1] - cu_q[b])
        k0, lk = int(cu_k[b]), int(cu_k[b + 1] - cu_k[b])
        q_start = max(lq - lk, 0) if causal else 0
        if lk == 0:
            q_start = lq
        for h in range(hq):
            for pid_m in range(-(-max_q // bm)):
                for r in range(pid_m * bm, min(pid_m * bm + bm, q_start)):
                    o[q0 + r, h], lse[h, q0 + r] = 0.0, float("-inf")
                m0 = q_start + pid_m * bm
                if m0 >= lq:
                    continue
                n_cta = -(-(min(m0 + bm + lk - lq, lk) if causal else lk) // block_n)
                for w in range(2):
                    r0 = m0 + w * wg
                    if causal:
                        d0 = r0 + lk - lq
                        n_tiles, n_full = -(-min(d0 + wg, lk) // block_n), d0 // block_n
                    else:
                        d0, n_tiles, n_full = r0, n_cta, lk // block_n
                    assert 1 <= n_tiles <= n_cta
                    n_lo = min(max(n_full, 1), n_tiles)
                    qq = rows(q, q0 + r0, wg, h)
                    tiles = []
                    for j in range(n_tiles):
                        sc = qq @ rows(k, k0 + j * block_n, block_n, h // (hq // hkv)).T
                        if j == 0 or j >= n_lo:  # the prologue's tile and the tail / diagonal tiles: masked
                            cols = j * block_n + torch.arange(block_n)
                            keep = (cols[None, :] <= d0 + torch.arange(wg)[:, None]) if causal else (cols < lk)[None]
                            sc = sc.masked_fill(~keep, float("-inf"))
                        tiles.append(sc * scale)
                    sc = torch.cat(tiles, 1)
                    vv = torch.cat([rows(v, k0 + j * block_n, block_n, h // (hq // hkv)) for j in range(n_tiles)])
                    m = sc.max(1).values
                    p = torch.exp(sc - m[:, None])
                    out, row_lse = (p @ vv) / p.sum(1)[:, None], m + p.sum(1).log()
                    last = wg if r0 + wg <= lq else max(0, min(wg, lq - r0))  # TMA: all 64; else rows < Lq
                    o[q0 + r0:q0 + r0 + last, h] = out[:last]
                    lse[h, q0 + r0:q0 + r0 + last] = row_lse[:last]
    return o, lse


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_varlen_schedule_emulated_matches_float64(causal):
    # the index arithmetic of the varlen kernel (see _emulate_varlen) on sequences across tile and block edges
    from kernelwright.ops.attention.reference import attention_with_lse

    lens = [(17, 17), (0, 0), (1, 1), (129, 129), (300, 300), (256, 256), (100, 300), (300, 129), (0, 5), (7, 0),
            (129, 17), (1, 300), (200, 1), (64, 64), (65, 65), (127, 200), (128, 128), (256, 129)]
    g = torch.Generator().manual_seed(7)
    hq, hkv, d = 4, 2, 8
    tq, tk = sum(a for a, _ in lens), sum(b for _, b in lens)
    q, k, v = (torch.randn(n, hh, d, generator=g, dtype=torch.float64) for n, hh in ((tq, hq), (tk, hkv), (tk, hkv)))
    cu_q, cu_k = (torch.tensor([0, *torch.tensor(x).cumsum(0).tolist()]) for x in zip(*lens, strict=True))
    scale = 1 / math.sqrt(d)
    o, lse = _emulate_varlen(q, k, v, cu_q, cu_k, max(a for a, _ in lens) + 100, causal, scale)
    ref_o, ref_lse = attention_with_lse(q, k, v, cu_q, cu_k, causal=causal, scale=scale)
    assert not torch.isnan(o).any() and not torch.isnan(lse).any()  # every row written
    assert torch.equal(torch.isinf(lse), torch.isinf(ref_lse))
    torch.testing.assert_close(o, ref_o, rtol=1e-10, atol=1e-10)
    fin = torch.isfinite(ref_lse)
    torch.testing.assert_close(lse[fin], ref_lse[fin], rtol=1e-10, atol=1e-10)


def test_varlen_call_raises_usage_error_with_the_switch_off(monkeypatch):
    monkeypatch.setattr(G, "FA3_VARLEN", False)
    q = torch.randn(10, 4, 128, dtype=torch.bfloat16)
    k = torch.randn(12, 4, 128, dtype=torch.bfloat16)
    cu_q = torch.tensor([0, 4, 10], dtype=torch.int32)
    cu_k = torch.tensor([0, 5, 12], dtype=torch.int32)
    with pytest.raises(UsageError, match="varlen.*switched off"):
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
    q = torch.randn(1, 4, 8, 64, dtype=torch.float16)  # everything right but the device
    with pytest.raises(UsageError, match="CUDA device"):
        G.attention_fa3(q, q, q, out=torch.empty_like(q))


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


# --- GPU: the packed (varlen) kernel, with FA3_VARLEN forced on ----------------------------------------------------
# (lens ((Lq, Lk), ...), Hq, Hkv, D, dtype, causal, dist, q layout): layouts "contiguous" or "qkv" (q, k, v slices
# of one packed [total, Hq + 2 Hkv, D] tensor: row strides past H * D, TMA reads them as they are)
VARLEN_CASES = [
    # Lq = Lk: empty, one row, partial block, one row past a block, many blocks, aligned
    (((17, 17), (0, 0), (1, 1), (129, 129), (1000, 1000), (2048, 2048)), 8, 2, 128, "bf16", True, "normal",
     "contiguous"),
    (((17, 17), (0, 0), (1, 1), (129, 129), (1000, 1000), (2048, 2048)), 8, 2, 64, "fp16", False, "normal", "qkv"),
    (((2048, 2048), (129, 129), (0, 0), (17, 17), (1, 1), (1000, 1000)), 8, 2, 64, "bf16", True, "large", "qkv"),
    (((1000, 1000), (1, 1), (2048, 2048), (17, 17), (0, 0), (129, 129)), 8, 2, 128, "fp16", False, "large",
     "contiguous"),
    # Lq < Lk (a chunk on a cache), Lq > Lk (rows with no key), Lk = 0 (every row: no key), Lq = 0
    (((100, 1000), (1000, 129), (0, 5), (7, 0), (129, 17), (1, 2048), (300, 1), (17, 129)), 8, 2, 64, "bf16", True,
     "normal", "contiguous"),
    (((100, 1000), (1000, 129), (0, 5), (7, 0), (129, 17), (1, 2048), (300, 1), (17, 129)), 8, 2, 128, "fp16", True,
     "large", "qkv"),
    (((1000, 129), (5, 0), (0, 7), (129, 1000), (2048, 17), (1, 1)), 8, 2, 128, "bf16", False, "normal", "contiguous"),
    (((1000, 129), (5, 0), (0, 7), (129, 1000), (2048, 17), (1, 1)), 4, 4, 64, "fp16", False, "normal", "qkv"),
    # MQA, one sequence, aligned; and a batch whose every sequence is shorter than a block
    (((2048, 2048), ), 8, 1, 128, "bf16", True, "normal", "contiguous"),
    (((3, 3), (64, 64), (65, 65), (127, 200), (128, 128)), 4, 2, 128, "bf16", True, "normal", "contiguous"),
]


def _varlen_case(lens, hq, hkv, d, dtype, causal, dist, layout):
    from kernelwright.harness.inputs import generator
    from kernelwright.registry import get_family

    fam = get_family("attention")
    gen, seed = generator("cuda")
    size = S(len(lens), hq, hkv, max(a for a, _ in lens), max(b for _, b in lens), d, VC if causal else V)
    case = fam.make_case(size, dtype, "cuda", gen, dist=dist, lens=lens)
    q, k, v, cu_q, cu_k = case.args
    if layout == "qkv":
        tq, tk = q.shape[0], k.shape[0]
        qkv = torch.full((max(tq, tk), hq + 2 * hkv, d), float("nan"), dtype=dtype, device="cuda")
        qkv[:tq, :hq], qkv[:tk, hq:hq + hkv], qkv[:tk, hq + hkv:] = q, k, v
        q, k, v = qkv[:tq, :hq], qkv[:tk, hq:hq + hkv], qkv[:tk, hq + hkv:]
        assert not q.is_contiguous() and G._tma_ok(G._packed(q)) and G._tma_ok(G._packed(k))
    return fam, case, (q, k, v, cu_q, cu_k), seed


def _check_varlen(fam, case, o, lse, ref_o, ref_lse, what):
    from kernelwright.harness.verify import compare, error_scale

    dtype = case.args[0].dtype
    assert o.dtype == dtype and o.shape == case.args[0].shape, what
    assert not torch.isnan(o).any(), f"{what}: NaN in o"
    cmp = compare(o, ref_o, fam.tolerances[dtype], error_scale(fam, case))
    assert cmp.ok, f"{what}: {cmp.reason}"
    assert lse.dtype == torch.float32 and lse.shape == ref_lse.shape, what  # [Hq, total_q]
    assert not torch.isnan(lse).any(), f"{what}: NaN in lse"
    empty = torch.isinf(ref_lse)
    assert torch.equal(torch.isinf(lse), empty), f"{what}: -inf rows differ"
    assert bool((lse[empty] == float("-inf")).all()), what
    assert not o[empty.T.unsqueeze(-1).expand_as(o)].any(), f"{what}: rows with no key not zero"
    fin = ~empty
    err = (lse.double()[fin] - ref_lse[fin]).abs()
    allowed = 1e-5 + 2e-6 * ref_lse[fin].abs()
    assert bool((err <= allowed).all()), f"{what}: lse off by {float(err.max()):.3g}"


def _run_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal, scale, config=None):
    o = torch.full(q.shape, float("nan"), dtype=q.dtype, device=q.device)
    lse = torch.full((q.shape[1], q.shape[0]), float("nan"), dtype=torch.float32, device=q.device)
    assert G.attention_fa3(q, k, v, cu_q, cu_k, causal=causal, scale=scale, max_seqlen_q=max_q, max_seqlen_k=max_k,
                           out=o, lse=lse, config=config) is o
    return o, lse


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize(("lens", "hq", "hkv", "d", "dt", "causal", "dist", "layout"), VARLEN_CASES,
                         ids=[f"varlen-{len(c[0])}seq-{c[1]}x{c[2]}-D{c[3]}-{c[4]}-{'causal' if c[5] else 'full'}-"
                              f"{c[6]}-{c[7]}-{i}" for i, c in enumerate(VARLEN_CASES)])
def test_varlen_matches_float64(lens, hq, hkv, d, dt, causal, dist, layout, monkeypatch):
    from kernelwright.ops.attention.reference import attention_with_lse

    monkeypatch.setattr(G, "FA3_VARLEN", True)
    fam, case, (q, k, v, cu_q, cu_k), seed = _varlen_case(lens, hq, hkv, d, DT[dt], causal, dist, layout)
    max_q, max_k = case.kwargs["max_seqlen_q"], case.kwargs["max_seqlen_k"]
    ref_o, ref_lse = attention_with_lse(q.double(), k.double(), v.double(), cu_q, cu_k, causal=causal)
    what = f"fa3 varlen {case.label} {dt} {dist} {layout} seed={seed}"
    o, lse = _run_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal, None)
    _check_varlen(fam, case, o, lse, ref_o, ref_lse, what)
    o2, lse2 = _run_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal, None)
    assert torch.equal(o, o2) and torch.equal(lse, lse2), f"{what}: a repeat differs"
    # a larger max_seqlen_q than the longest sequence (allowed): more CTAs, all past their sequences
    o3, lse3 = _run_varlen(q, k, v, cu_q, cu_k, max_q + 300, max_k + 5, causal, None)
    assert torch.equal(o, o3) and torch.equal(lse, lse3), f"{what}: max_seqlen larger changed the result"


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("config", [G.FA3Config(128, 2, False, 4), G.FA3Config(64, 3, True, 4),
                                    G.FA3Config(128, 2, True, 1)],
                         ids=lambda c: "varlen-" + c.label().replace(" ", "-"))
def test_varlen_other_configs_and_scales(config, monkeypatch):
    from kernelwright.ops.attention.reference import attention_with_lse

    monkeypatch.setattr(G, "FA3_VARLEN", True)
    lens = ((100, 1000), (1000, 129), (0, 5), (7, 0), (129, 129), (300, 1))
    for causal, scale in ((True, None), (False, 0.3), (True, -0.2)):
        fam, case, (q, k, v, cu_q, cu_k), seed = _varlen_case(lens, 8, 2, 128, torch.bfloat16, causal, "normal",
                                                              "contiguous")
        ref_o, ref_lse = attention_with_lse(q.double(), k.double(), v.double(), cu_q, cu_k, causal=causal,
                                            scale=scale)
        o, lse = _run_varlen(q, k, v, cu_q, cu_k, None, None, causal, scale, config=config)
        _check_varlen(fam, case, o, lse, ref_o, ref_lse, f"fa3 varlen {config} scale={scale} seed={seed}")


@pytest.mark.gpu
@hopper
def test_varlen_no_keys_anywhere_and_no_lse(monkeypatch):
    monkeypatch.setattr(G, "FA3_VARLEN", True)
    q = torch.randn(10, 4, 64, dtype=torch.bfloat16, device="cuda")
    k = torch.empty(0, 2, 64, dtype=torch.bfloat16, device="cuda")
    cu_q = torch.tensor([0, 4, 10], dtype=torch.int32, device="cuda")
    cu_k = torch.zeros(3, dtype=torch.int32, device="cuda")
    o, lse = _run_varlen(q, k, k, cu_q, cu_k, 6, 5, True, None)  # max_seqlen_k given > 0 with no keys
    assert not o.any() and bool((lse == float("-inf")).all())
    out = torch.full_like(q, float("nan"))
    cu_k = torch.tensor([0, 3, 9], dtype=torch.int32, device="cuda")
    k = torch.randn(9, 2, 64, dtype=torch.bfloat16, device="cuda")
    G.attention_fa3(q, k, k, cu_q, cu_k, causal=True, out=out)  # lse not wanted: a scratch one
    assert not torch.isnan(out).any()


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("d", [64, 128])
def test_varlen_through_the_family(d, monkeypatch):
    # attention_forward(cu_seqlens..., variant="fa3") with the switch on; auto takes fa3 for it at D128 (FA3_AUTO)
    from kernelwright import ops
    from kernelwright.ops import _validate
    from kernelwright.ops.attention.api import attention_forward
    from kernelwright.ops.attention.reference import attention_with_lse
    from kernelwright.registry import get_family

    monkeypatch.setattr(G, "FA3_VARLEN", True)
    fam = get_family("attention")
    lens = ((1000, 1000), (0, 0), (17, 129), (129, 17), (2048, 2048), (1, 1))
    for dt in (torch.bfloat16, torch.float16):
        fam, case, (q, k, v, cu_q, cu_k), seed = _varlen_case(lens, 8, 2, d, dt, True, "normal", "contiguous")
        o, lse = attention_forward(q, k, v, causal=True, scale=None, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                                   max_seqlen_q=case.kwargs["max_seqlen_q"], max_seqlen_k=case.kwargs["max_seqlen_k"],
                                   variant="fa3")
        ref_o, ref_lse = attention_with_lse(q.double(), k.double(), v.double(), cu_q, cu_k, causal=True)
        _check_varlen(fam, case, o, lse, ref_o, ref_lse, f"attention_forward fa3 varlen {case.label} {dt} seed={seed}")
    if d == 128:
        assert _validate.pick_rung(fam, None, "cuda", case.size, {}, torch.bfloat16).name == "fa3"
        o = ops.attention_varlen(q, k, v, cu_q, cu_k, causal=True)  # auto: fa3
        assert torch.equal(o, attention_forward(q, k, v, causal=True, scale=None, cu_seqlens_q=cu_q,
                                                cu_seqlens_k=cu_k, variant="fa3")[0])
