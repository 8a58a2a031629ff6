"""attention forward: every rung's o AND lse against the float64 reference (test_ladders.py checks o on the family's
fuzz list), GQA ratios, Sq != Skv both ways, bottom-right causal masks, fully masked rows, varlen batches (empty
sequences included, and equal to running each sequence alone), FlashAttention-4's lazy rescale on inputs built
to trigger it, the public API and its errors, the cost model, the CPU-runnable peer and the tune hook.

Shapes are small (the interpreter costs ~2 ms a program) and chosen for a reason written next to each; large
shapes run on the GPU (``-m gpu`` at the end)."""

import math
import sys
import types

import pytest
import torch

from kernelwright import ops, runtime
from kernelwright.errors import UsageError
from kernelwright.harness.inputs import generator
from kernelwright.harness.verify import compare, error_scale, reference64
from kernelwright.ops.attention import spec
from kernelwright.ops.attention.api import attention_forward
from kernelwright.ops.attention.reference import attention_with_lse
from kernelwright.registry import get_family

FAM = get_family("attention")
# the Triton rungs (every layout, any head dim, the interpreter too); the Gluon rung (Hopper only, D 64 / 128, padded,
# 16-bit) has its own tests in tests/test_attention_gluon.py
RUNGS = [r.name for r in FAM.rungs if r.backend != "gluon"]
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def _device():
    return runtime.current_device()


def _case(size, dtype, dist="normal", layout="contiguous", **kw):
    gen, seed = generator("cpu")
    case = FAM.make_case(size, dtype, "cpu", gen, dist=dist, layout=layout, **kw)
    if _device() != "cpu":
        from kernelwright.harness.verify import _to_device

        case = _to_device(case, _device())
    return case, seed


def _lse_close(lse: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    """Same -inf positions; elsewhere within fp32 score error (|scale q.k| stays under ~100 on these inputs)."""
    assert lse.dtype == torch.float32, what
    assert not torch.isnan(lse).any(), f"{what}: NaN in lse"
    assert torch.equal(torch.isinf(lse), torch.isinf(ref)), f"{what}: -inf rows differ"
    fin = torch.isfinite(ref)
    err = (lse.double()[fin] - ref[fin]).abs()
    allowed = 1e-5 + 2e-6 * ref[fin].abs()
    assert bool((err <= allowed).all()), f"{what}: lse off by {float(err.max()):.3g}"


def _check(rung, size, dtype, dist="normal", layout="contiguous", **kw):
    """o and lse of ``rung`` on a fresh case against float64; returns (o, lse, ref_o, ref_lse)."""
    case, seed = _case(size, dtype, dist, layout, **kw)
    q, k, v, *cu = case.args
    cu_q, cu_k = cu or (None, None)
    o, lse = attention_forward(q, k, v, causal=case.kwargs["causal"], scale=case.kwargs["scale"], cu_seqlens_q=cu_q,
                               cu_seqlens_k=cu_k, max_seqlen_q=case.kwargs.get("max_seqlen_q"),
                               max_seqlen_k=case.kwargs.get("max_seqlen_k"), variant=rung)
    ref_o, ref_lse = attention_with_lse(*[a.double() if a.is_floating_point() else a for a in case.args],
                                        **case.kwargs)
    what = f"{rung} {case.label} {dtype} {dist} {layout} seed={seed}"
    assert o.dtype == dtype and o.is_contiguous() and o.shape == q.shape, what
    cmp = compare(o, ref_o, FAM.tolerances[dtype], error_scale(FAM, case))
    assert cmp.ok, f"{what}: {cmp.reason}"
    _lse_close(lse, ref_lse, what)
    return o, lse, ref_o, ref_lse


# --- every rung, o and lse -----------------------------------------------------------------------------------------
S = spec._s
C, V, VC = spec.CAUSAL, spec.VARLEN, spec.VARLEN_CAUSAL
SHAPES = [  # (size, kwargs, dtype, dist, layout): each rung sees every one
    (S(2, 4, 4, 17, 17, 32, C), {}, "bf16", "normal", "contiguous"),       # MHA (ratio 1), causal, 17 rows
    (S(1, 8, 2, 129, 129, 16, C), {}, "fp16", "large", "strided"),         # GQA 4, one row past 128, large logits
    (S(1, 8, 1, 1, 77, 64), {}, "bf16", "heavy", "transposed"),            # MQA 8, decoding: one query row
    (S(1, 4, 4, 23, 71, 32, C), {}, "fp32", "uniform", "contiguous"),      # Sq < Skv causal: a chunk on a cache
    (S(1, 4, 2, 90, 30, 32, C), {}, "fp16", "normal", "contiguous"),       # Sq > Skv causal: 60 rows see nothing
    (S(2, 2, 2, 100, 13, 24), {"scale": 0.7}, "bf16", "normal", "strided"),  # Sq > Skv, D 24 padded, given scale
    (S(3, 4, 2, 50, 50, 32, VC), {"lens": ((0, 0), (50, 50), (17, 9))}, "bf16", "uniform", "contiguous"),
]


@pytest.mark.parametrize("rung", RUNGS)
@pytest.mark.parametrize(("size", "kw", "dt", "dist", "layout"), SHAPES,
                         ids=[f"{spec.format_size(s[0])}-{s[2]}" for s in SHAPES])
def test_rung_o_and_lse_match_float64(rung, size, kw, dt, dist, layout):
    _check(rung, size, DTYPES[dt], dist, layout, **kw)


@pytest.mark.parametrize("rung", RUNGS)
def test_fully_masked_rows_are_zero_with_minus_inf_lse(rung):
    # causal, Sq = 40 > Skv = 25: query rows i < 15 attend to no key (i + Skv - Sq < 0)
    o, lse, _, _ = _check(rung, S(1, 2, 1, 40, 25, 32, C), torch.bfloat16)
    assert torch.equal(o[:, :, :15], torch.zeros_like(o[:, :, :15]))
    assert bool((lse[:, :, :15] == float("-inf")).all())
    assert bool(torch.isfinite(lse[:, :, 15:]).all())
    # no keys at all (Skv = 0): every row
    o, lse, _, _ = _check(rung, S(1, 2, 2, 3, 0, 16), torch.float16)
    assert not o.any() and bool((lse == float("-inf")).all())


@pytest.mark.parametrize("ratio", [1, 4, 8])
def test_gqa_ratios(ratio):
    # query head h reads kv head h // ratio: compare with the same heads repeated (MHA) through the public op
    case, _ = _case(S(1, 8, 8 // ratio, 33, 40, 32, C), torch.float16)
    q, k, v = case.args
    got = ops.attention(q, k, v, causal=True)
    rep = ops.attention(q, k.repeat_interleave(ratio, 1), v.repeat_interleave(ratio, 1), causal=True)
    torch.testing.assert_close(got, rep, rtol=0, atol=0)
    _check(None, S(1, 8, 8 // ratio, 33, 40, 32, C), torch.float16)


@pytest.mark.parametrize("sq", [1, 17, 129])
@pytest.mark.parametrize("causal", [False, True])
def test_lengths_and_alignment(sq, causal):
    # lengths 1, 17, 129 against keys shorter, equal and longer (70 keys: not a multiple of 16, 32 or 64)
    for skv in (sq, 70):
        _check("exp2_lazy", S(1, 2, 1, sq, skv, 16, C if causal else spec.FULL), torch.bfloat16)


def test_causal_is_bottom_right_aligned():
    # a 3-query chunk after a 5-key cache: query i sees keys 0..i+2, i.e. row 0 sees 3 keys, row 2 all 5
    case, _ = _case(S(1, 1, 1, 3, 5, 16, C), torch.float32)
    q, k, v = case.args
    o = ops.attention(q, k, v, causal=True)
    for i in range(3):
        n = i + 3
        w = torch.softmax((q[0, 0, i].double() @ k[0, 0, :n].double().T) / 4.0, -1)
        torch.testing.assert_close(o[0, 0, i].double(), w @ v[0, 0, :n].double(), rtol=1e-5, atol=1e-6)


# --- FlashAttention-4's lazy rescale ---------------------------------------------------------------------------------
@pytest.mark.parametrize("pattern", ["rising", "falling", "jump"])
@pytest.mark.parametrize("rung", ["exp2_lazy", "pipelined", "tuned"])
def test_lazy_rescale_stays_exact(rung, pattern):
    # scores built to move the row max across key tiles: rising by ~3 per 64-key tile (a rescale every third tile),
    # falling (the first tile's max is never exceeded: no rescale after it), one jump of +40 in the last tile
    d, skv = 32, 300
    q = torch.zeros(1, 2, 20, d)
    q[..., 0] = 1.0
    k = torch.randn(1, 2, skv, d) * 0.1
    pos = torch.arange(skv, dtype=torch.float32)
    col = {"rising": pos / 64 * 3 * math.sqrt(d), "falling": -pos / 64 * 3 * math.sqrt(d),
           "jump": torch.where(pos >= 256, 40.0 * math.sqrt(d), 0.0)}[pattern]
    k[..., 0] = col
    v = torch.randn(1, 2, skv, d)
    dev = _device()
    q, k, v = (t.to(torch.bfloat16).to(dev) for t in (q, k, v))
    o, lse = attention_forward(q, k, v, causal=False, scale=None, variant=rung)
    ref_o, ref_lse = attention_with_lse(q.double(), k.double(), v.double())
    from kernelwright.ops.attention.reference import error_scale as es

    cmp = compare(o, ref_o, FAM.tolerances[torch.bfloat16], es(q.double(), k.double(), v.double()))
    assert cmp.ok, cmp.reason
    _lse_close(lse, ref_lse, f"{rung} {pattern}")


@pytest.mark.parametrize("rung", ["exp2", "tuned-every-tile", "tuned-pipelined-every-tile"])
def test_rescale_every_tile_stays_exact(rung):
    # the rescale every tile (exp2, and tuned configs with lazy=False): the lazy patterns above, fully masked rows
    # (causal, Sq > Skv), varlen and GQA, against float64
    from kernelwright.ops.attention import triton as T

    config = {"exp2": None, "tuned-every-tile": T.AttentionConfig(64, 32, 4, 2, lazy=False),
              "tuned-pipelined-every-tile": T.AttentionConfig(64, 32, 4, 2, pipeline=True, lazy=False)}[rung]
    if config is None:
        test_lazy_rescale_stays_exact(rung, "rising")
        test_lazy_rescale_stays_exact(rung, "jump")
    for size in (S(1, 4, 1, 130, 70, 64, C), S(2, 4, 2, 77, 200, 32, spec.FULL), S(3, 4, 2, 90, 90, 64, VC)):
        if config is None:
            _check(rung, size, torch.bfloat16)
            continue
        case, _ = _case(size, torch.bfloat16)
        out = torch.full(case.args[0].shape, float("nan"), dtype=torch.bfloat16, device=case.args[0].device)
        T.attention_tuned(*case.args, out=out, config=config, **case.kwargs)
        cmp = compare(out, reference64(FAM, case), FAM.tolerances[torch.bfloat16], error_scale(FAM, case))
        assert cmp.ok, f"{rung} {case.label}: {cmp.reason}"


def test_rescale_every_tile_drops_the_block_barriers_of_the_lazy_decision():
    # sm_90 SASS (D128, 128 x 64 tiles, 8 warps): the lazy rescale's block-wide tl.max costs block barriers in
    # every key tile (5 BAR.SYNC a tile in exp2_lazy when written; 2 in exp2); both loops (unmasked, masked)
    from kernelwright.harness import inspect as ki
    from kernelwright.ops.attention import hooks

    def barriers(rung):
        report = ki.analyze(hooks.flash_artifact(rung, S(4, 32, 32, 4096, 4096, 128), torch.bfloat16))
        if report.mix is None:
            pytest.skip("no cuobjdump/nvdisasm to read the SASS")
        assert len(report.loops) == 2 and all(lp.mix.classes["tensor-core MMA"] == 12 for lp in report.loops)
        return [sum(n for op, n in lp.mix.opcodes.items() if op.startswith("BAR.SYNC")) for lp in report.loops]

    lazy, every = barriers("exp2_lazy"), barriers("exp2")
    assert all(e <= lz - 2 for e, lz in zip(every, lazy, strict=True)), (lazy, every)


@pytest.mark.parametrize("rung", ["flash", "causal_skip", "exp2", "exp2_lazy", "pipelined", "tuned", "split_kv"])
def test_huge_scores_stay_finite(rung):
    # scores of ~1e12 (inputs magnified 1e3, as the evaluator's "large" set does): on the GPU the FFMA that
    # subtracts the row max used the unrounded product while the max was of rounded ones, so exp2 saw ~1e5 and
    # gave inf, then inf / inf = NaN. The output must stay finite and as close as eager bf16 gets.
    g, _ = generator("cpu", 7)
    dev = _device()
    q, k, v = (torch.randn(1, 2, 130, 64, generator=g) * 1.6e3 for _ in range(3))
    q, k, v = (t.to(torch.bfloat16).to(dev) for t in (q, k, v))
    o, _ = attention_forward(q, k, v, causal=True, scale=None, variant=rung)
    assert torch.isfinite(o).all(), f"{rung}: {int((~torch.isfinite(o)).sum())} non-finite outputs"
    ref_o, _ = attention_with_lse(q.double(), k.double(), v.double(), causal=True)
    eager = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    err, eager_err = (o.double() - ref_o).abs().max(), (eager.double() - ref_o).abs().max()
    # one bf16 ulp at the output's largest magnitude: the H200 (run 19) gave 32 at |o| up to 5792 (1 ulp there),
    # where eager SDPA happened to be exact (0); 1e-3 of the magnitude, asked before, is under half an ulp
    assert err <= 4 * eager_err + 2**-7 * ref_o.abs().max(), (float(err), float(eager_err))


# --- split_kv (flash-decoding) --------------------------------------------------------------------------------------
SPLIT_SHAPES = [  # (size, kwargs, dtype): decoding with GQA; a few rows, causal; a varlen batch with an empty cache
    (S(2, 8, 2, 1, 300, 64), {}, "bf16"),               # 4 heads a kv head, one row each: a 16-row tile, 5 key tiles
    (S(1, 8, 1, 3, 130, 32, C), {}, "fp16"),            # MQA: 24 rows; causal: the last range is masked for row 0
    (S(3, 4, 2, 20, 60, 32, VC), {"lens": ((20, 60), (3, 0), (5, 33))}, "bf16"),  # a sequence with no keys
]


@pytest.mark.parametrize("splits", [1, 2, 3, 7])
@pytest.mark.parametrize(("size", "kw", "dt"), SPLIT_SHAPES, ids=[spec.format_size(s[0]) for s in SPLIT_SHAPES])
def test_split_kv_any_number_of_key_ranges_matches_float64(size, kw, dt, splits):
    # every split count merges to the same answer: ranges past the keys, ranges a row sees none of (lse -inf in
    # the partial) and a range per key tile included (7 ranges over 5 tiles: the launcher drops the empty ones)
    from kernelwright.ops.attention import decode

    case, seed = _case(size, DTYPES[dt], **kw)
    q = case.args[0]
    out = torch.full(q.shape, float("nan"), dtype=q.dtype, device=q.device)
    lse_shape = (q.shape[1], q.shape[0]) if len(case.args) > 3 else q.shape[:3]
    lse = torch.full(lse_shape, float("nan"), dtype=torch.float32, device=q.device)
    decode.attention_split_kv(*case.args, out=out, lse=lse, splits=splits, **case.kwargs)
    ref_o, ref_lse = attention_with_lse(*[a.double() if a.is_floating_point() else a for a in case.args],
                                        **case.kwargs)
    what = f"split_kv splits={splits} {case.label} seed={seed}"
    cmp = compare(out, ref_o, FAM.tolerances[DTYPES[dt]], error_scale(FAM, case))
    assert cmp.ok, f"{what}: {cmp.reason}"
    _lse_close(lse, ref_lse, what)


def test_split_kv_auto_takes_decode_shapes_only(monkeypatch):
    # SPLIT_KV_AUTO (on since run 44): auto picks split_kv for decode steps (GQA rows of a kv head in one tile,
    # >= 512 keys), tuned for everything else, and tuned for all while the switch is off
    monkeypatch.setattr(spec, "FA3_AUTO", False)  # (the D128 sizes below would take fa3 first: its own test)
    decode_sizes = [S(32, 32, 8, 1, 4096, 128), S(8, 32, 8, 4, 8192, 128, C), S(64, 32, 4, 1, 1024, 64)]
    other = [S(4, 32, 32, 4096, 4096, 128), S(32, 32, 8, 1, 256, 128), S(1, 64, 1, 2, 4096, 128)]
    assert [spec.decode_shaped(x) for x in decode_sizes + other] == [True] * 3 + [False] * 3
    assert [spec.choose(x, {})[0] for x in decode_sizes + other] == ["split_kv"] * 3 + ["tuned"] * 3
    monkeypatch.setattr(spec, "SPLIT_KV_AUTO", False)
    assert all(spec.choose(x, {})[0] == "tuned" for x in decode_sizes + other)
    monkeypatch.setattr(spec, "SPLIT_KV_AUTO", True)
    from kernelwright.ops import _validate

    size = S(1, 8, 2, 1, 600, 32)
    assert _validate.pick_rung(FAM, None, "cpu", size, {}, torch.bfloat16).name == "split_kv"
    case, _ = _case(size, torch.bfloat16)
    o = ops.attention(*case.args, causal=False)  # the public op through auto, against float64
    cmp = compare(o, reference64(FAM, case), FAM.tolerances[torch.bfloat16], error_scale(FAM, case))
    assert cmp.ok, cmp.reason


def test_fa3_auto_takes_where_it_led(monkeypatch):
    # FA3_AUTO (run 77): fa3 first at D128 everywhere and at D64 from 4096 keys; tuned first at D64 below; decode
    # steps still split_kv; off, tuned. fa3 cannot run here (CPU) nor take fp32 anywhere (nor varlen with
    # gluon.FA3_VARLEN off): auto falls through to tuned for those
    led = [S(16, 32, 32, 1024, 1024, 128), S(4, 32, 8, 4096, 4096, 128, C), S(4, 32, 32, 4096, 4096, 64),
           S(1, 32, 32, 16384, 16384, 64, C), S(8, 32, 8, 4096, 4096, 128, VC)]
    not_led = [S(8, 32, 32, 2048, 2048, 64), S(16, 32, 32, 1024, 1024, 64, C), S(2, 4, 4, 300, 300, 256)]
    assert [spec.choose(x, {})[0] for x in led] == ["fa3"] * 5
    assert [spec.choose(x, {})[0] for x in not_led] == ["tuned"] * 3
    assert spec.choose(S(32, 32, 8, 1, 4096, 128), {})[0] == "split_kv"
    fa3 = FAM.rung("fa3")
    assert fa3.refusal(led[-1], {}) is None and fa3.refusal(led[0], {}) is None
    assert "float32" in fa3.refusal(led[0], {}, torch.float32)
    from kernelwright.ops import _validate
    from kernelwright.ops.attention import gluon

    monkeypatch.setattr(gluon, "FA3_VARLEN", False)
    assert "varlen" in fa3.refusal(led[-1], {})

    assert _validate.pick_rung(FAM, None, "cpu", led[0], {}, torch.bfloat16).name == "tuned"
    monkeypatch.setattr(spec, "FA3_AUTO", False)
    assert all(spec.choose(x, {})[0] == "tuned" for x in led)


def test_split_kv_rejects_a_split_count_under_one():
    from kernelwright.ops.attention import decode

    case, _ = _case(S(1, 2, 1, 1, 40, 16), torch.float32)
    out = torch.empty_like(case.args[0])
    with pytest.raises(ValueError, match="splits"):
        decode.attention_split_kv(*case.args, out=out, splits=-1, **case.kwargs)


def test_split_kv_split_count_from_the_environment(monkeypatch):
    # KW_SPLIT_KV_SPLITS (benchmarks/h200/attention.sh decode sweeps it): taken when set, a clear error when not a
    # count; an explicit splits= argument still wins
    from kernelwright.ops.attention import decode

    monkeypatch.setenv("KW_SPLIT_KV_SPLITS", "3")
    assert decode._forced_splits() == 3
    _check("split_kv", S(1, 4, 2, 1, 200, 16), torch.float32)
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("KW_SPLIT_KV_SPLITS", bad)
        with pytest.raises(ValueError, match="KW_SPLIT_KV_SPLITS"):
            decode._forced_splits()
    case, _ = _case(S(1, 2, 1, 1, 40, 16), torch.float32)
    out = torch.empty_like(case.args[0])
    decode.attention_split_kv(*case.args, out=out, splits=2, **case.kwargs)  # the argument: no error
    monkeypatch.delenv("KW_SPLIT_KV_SPLITS")
    assert decode._forced_splits() is None


def test_split_kv_split_count_fills_the_gpu_and_keeps_ranges_long(monkeypatch):
    # on an H200 (132 SMs): l1/20's decode (B32 x 8 kv heads, one 16-row tile, 4096 keys) gets 3 ranges (768
    # programs, ~4 an SM); one sequence of 1M keys gets 528 ranges of ~2k keys; a short cache is never cut under
    # MIN_KEYS_PER_SPLIT keys a range
    import triton

    from kernelwright.ops.attention import decode

    assert decode.split_count(256, 1, 4096, 64, sms=132) == 3
    assert decode.split_count(1, 1, 2**20, 64, sms=132) == 528
    assert decode.split_count(1, 1, 1000, 64, sms=132) == triton.cdiv(1000, decode.MIN_KEYS_PER_SPLIT)
    assert decode.split_count(4096, 4, 4096, 64, sms=132) == 1
    assert decode.key_ranges(4096, 3, 64) == (1408, 3) and decode.key_ranges(300, 7, 64) == (64, 5)
    # on a GPU the SM count is the device's own
    monkeypatch.setattr(decode.runtime, "interpreting", lambda: False)
    monkeypatch.setattr(decode.torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(decode.torch.cuda, "get_device_properties",
                        lambda i: types.SimpleNamespace(multi_processor_count=132))
    assert decode.split_count(256, 1, 4096, 64) == 3


def test_split_kv_compiles_for_hopper_without_spills():
    # the two kernels as an H200 would launch them (l1/20's fp16 decode; a varlen bf16 batch), compiled for sm_90
    from kernelwright.harness import inspect as ki
    from kernelwright.ops.attention import hooks

    cases = [(S(32, 32, 8, 1, 4096, 128), dt) for dt in (torch.float16, torch.float32)]
    cases += [(S(8, 32, 8, 4, 2048, 64, VC), torch.bfloat16)]
    # and the GPU tests' shapes (every head dim, fp32's FMA path)
    cases += [(size, dt) for size in GPU_SIZES[1:3] for dt in (torch.float32, torch.bfloat16)]
    for size, dtype in cases:
        partial, merge = hooks.split_kv_artifacts(size, dtype)
        for report in (ki.analyze(partial), ki.analyze(merge)):
            assert report.arch == "sm_90" and report.stack_bytes == 0, report
            if report.mix is not None:
                assert report.mix.classes.get("local memory (LDL/STL)", 0) == 0, ki.format_report(report)
        report = ki.analyze(partial)
        if report.mix is not None and dtype != torch.float32:
            assert report.mix.classes["tensor-core MMA"] > 0, ki.format_report(report)


@pytest.mark.gpu
@pytest.mark.parametrize("dt", ["fp16", "bf16"])
def test_gpu_split_kv_at_decode_sizes(dt):
    # l1/20's shape (B32, 32 heads over 8, one query row, 4096 keys, D128), a 4-row speculative step, a varlen batch
    for size in (S(32, 32, 8, 1, 4096, 128), S(8, 32, 8, 4, 8192, 128, C), S(16, 32, 8, 1, 4096, 64, V)):
        for dist in ("normal", "large"):
            _check("split_kv", size, DTYPES[dt], dist)


# --- varlen --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("causal", [False, True])
def test_varlen_equals_each_sequence_alone(causal):
    lens = ((5, 9), (0, 3), (33, 33), (1, 0), (20, 70))
    case, _ = _case(S(5, 4, 2, 33, 70, 32, VC if causal else V), torch.float16, lens=lens)
    q, k, v, cu_q, cu_k = case.args
    o, lse = ops.attention_varlen(q, k, v, cu_q, cu_k, causal=causal, return_lse=True)
    assert o.shape == q.shape and lse.shape == (4, q.shape[0])
    # the sequence alone launches another tile shape (5 x 9: 16 x 16 against the packed batch's 64 x 64), whose fp32
    # sums round differently: o may differ by the family's accumulated-rounding bound on the scale P @ |V| (both
    # sides), 14 fp16 ulps of a cancelling element in ~0.4% of seeds, never more than that scale allows
    acc = FAM.tolerances[torch.float16].acc
    pv = error_scale(FAM, case).double()  # P @ |V|, [total_q, Hq, D] like o
    cq, ck = cu_q.tolist(), cu_k.tolist()
    for b in range(len(lens)):
        qs, ks = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        one, one_lse = ops.attention(q[qs].transpose(0, 1)[None], k[ks].transpose(0, 1)[None],
                                     v[ks].transpose(0, 1)[None], causal=causal, return_lse=True)
        one = one[0].transpose(0, 1)
        allowed = 2**-10 * one.double().abs() + 2 * acc * pv[qs] + 1e-6
        assert bool(((o[qs].double() - one.double()).abs() <= allowed).all()), f"sequence {b}"
        torch.testing.assert_close(lse[:, qs], one_lse[0], rtol=1e-6, atol=1e-6)


def test_varlen_every_rung_with_empty_sequences():
    lens = ((0, 0), (7, 0), (0, 5), (40, 40), (3, 12))
    for rung in RUNGS:
        _check(rung, S(5, 2, 1, 40, 40, 16, VC), torch.bfloat16, lens=lens)


# --- public API ----------------------------------------------------------------------------------------------------
def test_public_api_defaults_and_lse():
    case, _ = _case(S(2, 4, 2, 10, 12, 32), torch.bfloat16)
    q, k, v = case.args
    o = ops.attention(q, k, v)
    o2, lse = ops.attention(q, k, v, return_lse=True)
    assert o.shape == q.shape and o.dtype == q.dtype and lse.shape == (2, 4, 10) and lse.dtype == torch.float32
    torch.testing.assert_close(o, o2, rtol=0, atol=0)
    o3 = ops.attention(q, k, v, scale=1 / math.sqrt(32))  # the default scale, spelled out
    torch.testing.assert_close(o, o3, rtol=0, atol=0)
    for variant in RUNGS:
        ops.attention(q, k, v, variant=variant)
    with pytest.raises(UsageError, match="variant"):
        ops.attention(q, k, v, variant="nope")
    # empty batch and no queries: empty results, no launch
    assert ops.attention(q[:0], k[:0], v[:0]).shape == (0, 4, 10, 32)
    e, e_lse = ops.attention(q[:, :, :0], k, v, return_lse=True)
    assert e.shape == (2, 4, 0, 32) and e_lse.shape == (2, 4, 0)


def _bad_inputs():
    t = torch.randn(1, 4, 8, 16)
    kv = torch.randn(1, 2, 8, 16)
    p = torch.randn(10, 4, 16)
    pk = torch.randn(12, 2, 16)
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    cuk = torch.tensor([0, 6, 12], dtype=torch.int32)
    a, av = ops.attention, ops.attention_varlen
    return [
        ("k: expected a number of heads", lambda: a(t, torch.randn(1, 3, 8, 16), torch.randn(1, 3, 8, 16))),
        ("k: expected head dim D = 16", lambda: a(t, torch.randn(1, 2, 8, 32), torch.randn(1, 2, 8, 32))),
        ("v: expected head dim D = 16", lambda: a(t, kv, torch.randn(1, 2, 8, 8))),
        ("v: expected shape", lambda: a(t, kv, torch.randn(1, 2, 9, 16))),
        ("q: head dim D = 512", lambda: a(torch.randn(1, 1, 2, 512), torch.randn(1, 1, 2, 512),
                                          torch.randn(1, 1, 2, 512))),
        ("q: expected dtype", lambda: a(t.double(), kv.double(), kv.double())),
        ("k: expected dtype float32 like q", lambda: a(t, kv.half(), kv)),
        ("q: expected a 4-D tensor", lambda: a(p, kv, kv)),
        ("k: expected a 4-D tensor", lambda: a(t, pk, kv)),
        ("k: expected batch size 1", lambda: a(t, torch.randn(2, 2, 8, 16), torch.randn(2, 2, 8, 16))),
        ("q: expected a torch.Tensor", lambda: a([1.0], kv, kv)),
        ("q: expected a CPU or CUDA tensor", lambda: a(t.to("meta"), kv, kv)),
        ("causal: expected a bool", lambda: a(t, kv, kv, causal=1)),
        ("scale: expected a positive finite number", lambda: a(t, kv, kv, scale=-1.0)),
        ("scale: expected a positive finite number", lambda: a(t, kv, kv, scale=float("nan"))),
        ("return_lse: expected a bool", lambda: a(t, kv, kv, return_lse="yes")),
        ("q: expected a 3-D tensor", lambda: av(t, pk, pk, cu, cuk)),
        ("cu_seqlens_q: expected non-decreasing offsets starting at 0",
         lambda: av(p, pk, pk, torch.tensor([0, 6, 4, 10], dtype=torch.int32), torch.tensor([0, 2, 4, 12]))),
        ("cu_seqlens_q: expected non-decreasing offsets starting at 0",
         lambda: av(p, pk, pk, torch.tensor([1, 10], dtype=torch.int32), torch.tensor([0, 12]))),
        ("cu_seqlens_q: expected the last offset to equal the packed length 10",
         lambda: av(p, pk, pk, torch.tensor([0, 4, 9], dtype=torch.int32), cuk)),
        ("cu_seqlens_k: expected the last offset to equal the packed length 12",
         lambda: av(p, pk, pk, cu, torch.tensor([0, 6, 13], dtype=torch.int32))),
        ("cu_seqlens_q: expected dtype int32", lambda: av(p, pk, pk, cu.float(), cuk)),
        ("cu_seqlens_q: expected a 1-D tensor", lambda: av(p, pk, pk, cu[None], cuk)),
        ("cu_seqlens_k: expected 3 offsets like cu_seqlens_q",
         lambda: av(p, pk, pk, cu, torch.tensor([0, 2, 4, 12], dtype=torch.int32))),
        ("max_seqlen_q: expected an int >= the longest sequence (6)", lambda: av(p, pk, pk, cu, cuk, 5)),
        ("k: expected a number of heads that divides q's 4",
         lambda: av(p, torch.randn(12, 3, 16), torch.randn(12, 3, 16), cu, cuk)),
    ]


@pytest.mark.parametrize("n", range(len(_bad_inputs())))
def test_bad_input_names_the_argument(n):
    expected, call = _bad_inputs()[n]
    with pytest.raises(UsageError) as err:
        call()
    assert str(err.value).startswith(expected.split(":")[0] + ":"), str(err.value)
    assert expected in str(err.value), str(err.value)


@pytest.mark.gpu
def test_different_devices_are_an_error():
    q = torch.randn(1, 2, 4, 16, device="cuda")
    with pytest.raises(UsageError, match="k: expected device cuda"):
        ops.attention(q, q.cpu(), q)
    with pytest.raises(UsageError, match="cu_seqlens_q: expected device"):
        p = torch.randn(4, 2, 16, device="cuda")
        ops.attention_varlen(p, p, p, torch.tensor([0, 4], dtype=torch.int32), torch.tensor([0, 4], device="cuda"))


# --- autograd routing (the backward lives in kernelwright.ops.attention.autograd) ---------------------------------
def test_requires_grad_routes_to_attention_autograd(monkeypatch):
    calls = []

    def fake(q, k, v, **kw):
        calls.append(kw)
        return "routed"

    monkeypatch.setitem(sys.modules, "kernelwright.ops.attention.autograd",
                        types.SimpleNamespace(attention_autograd=fake))
    q = torch.randn(1, 2, 4, 16, device=_device(), requires_grad=True)
    k = torch.randn(1, 1, 4, 16, device=_device())
    assert ops.attention(q, k, k, causal=True, return_lse=True) == "routed"
    assert calls[-1] == {"causal": True, "scale": 0.25, "cu_seqlens_q": None, "cu_seqlens_k": None,
                         "max_seqlen_q": None, "max_seqlen_k": None, "return_lse": True}
    p = torch.randn(4, 2, 16, device=_device(), requires_grad=True)
    cu = torch.tensor([0, 1, 4], dtype=torch.int32, device=_device())
    assert ops.attention_varlen(p, p, p, cu, cu) == "routed"
    assert calls[-1]["max_seqlen_q"] == 3 and calls[-1]["cu_seqlens_k"] is not None
    with torch.no_grad():  # no graph wanted: the forward kernels directly
        assert ops.attention(q, k, k).shape == q.shape
    assert ops.attention(q.detach(), k, k).grad_fn is None


def test_missing_backward_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "kernelwright.ops.attention.autograd", None)  # import fails
    q = torch.randn(1, 2, 4, 16, requires_grad=True)
    with pytest.raises(NotImplementedError, match="backward"):
        ops.attention(q, q, q)


# --- sizes, cost, peers, tune ---------------------------------------------------------------------------------------
def test_size_parse_and_format():
    assert spec.parse_size("4x32x4096x128") == spec.encode(4, 32, 32, 4096, 4096, 128)
    assert spec.parse_size("4x32x8x4k x128".replace(" ", "")) == spec.encode(4, 32, 8, 4096, 4096, 128)
    assert spec.parse_size("2x16x16x100x300x64:causal") == spec.encode(2, 16, 16, 100, 300, 64, causal=True)
    assert spec.parse_size("4096") == spec.encode(4, 32, 32, 4096, 4096, 128)
    for text in ("4x32x8x4096x4096x128:causal", "8x32x8x4096x4096x128:varlen:causal", "1x2x2x3x5x16"):
        assert spec.format_size(spec.parse_size(text)) == text
    for bad in ("4x32x4096", "4x32x5x4096x128", "4x32x4096x128:sliding"):
        with pytest.raises(UsageError, match="sizes"):
            spec.parse_size(bad)


@pytest.mark.parametrize(("lq", "lk"), [(1, 1), (5, 9), (9, 5), (17, 17), (0, 4), (4, 0), (64, 200)])
def test_causal_pair_count_is_exact(lq, lk):
    i = torch.arange(lq)[:, None]
    j = torch.arange(lk)[None, :]
    assert spec.pairs(lq, lk, True) == int((j <= i + lk - lq).sum())
    assert spec.pairs(lq, lk, False) == lq * lk


def test_cost_counts_real_tokens_and_unmasked_pairs():
    flops, nbytes = spec.cost(spec.encode(4, 32, 8, 4096, 4096, 128), torch.bfloat16)
    assert flops == 4 * 32 * 128 * 4 * 4096 * 4096
    assert nbytes == (2 * 4 * 4096 * 32 + 2 * 4 * 4096 * 8) * 128 * 2 + 4 * 4 * 32 * 4096
    causal, _ = spec.cost(spec.encode(4, 32, 8, 4096, 4096, 128, causal=True), torch.bfloat16)
    assert causal == 4 * 32 * 128 * 4 * 4096 * 4097 // 2
    size = spec.encode(8, 32, 8, 4096, 4096, 128, varlen=True, causal=True)
    lq, lk = spec.seqlens(size)
    assert lq == lk and lq[0] == 4096 and all(256 <= x <= 4096 for x in lq) and lq == spec.seqlens(size)[0]
    assert spec.cost(size, torch.bfloat16)[0] == sum(4 * 32 * 128 * x * (x + 1) // 2 for x in lq)
    gen, _ = generator("cpu")
    case = FAM.make_case(spec.encode(3, 2, 2, 40, 40, 16, varlen=True), torch.float16, "cpu", gen)
    assert case.args[0].shape[0] == sum(spec.seqlens(case.size)[0])


def test_torch_peer_matches_the_reference_on_cpu():
    # the math-backend peer (the baseline) through our wrapper: GQA, bottom-right causal with Sq != Skv, varlen
    peer = next(p for p in FAM.peers if p.name == "torch").make()
    for size, kw in [(S(1, 4, 2, 9, 20, 32, C), {}), (S(1, 4, 1, 16, 16, 16, C), {}),
                     (S(3, 2, 1, 20, 20, 16, VC), {"lens": ((20, 20), (3, 12), (7, 7))})]:
        case, _ = _case(size, torch.float32, **kw)
        cmp = compare(peer(*case.args, **case.kwargs), reference64(FAM, case), FAM.tolerances[torch.float32],
                      error_scale(FAM, case))
        assert cmp.ok, f"{case.label}: {cmp.reason}"


def test_tune_hook_searches_and_caches(monkeypatch, tmp_path):
    from kernelwright import tune
    from kernelwright.ops.attention import hooks
    from kernelwright.ops.attention import triton as T

    monkeypatch.setenv("KW_CACHE_DIR", str(tmp_path))
    small = tune.Space("attention.tuned.test", T.AttentionConfig,
                       lambda dtype: [T.AttentionConfig(16, 16, 4, 2), T.AttentionConfig(32, 16, 4, 2)],
                       T._prune, T._bucket, T._default)
    monkeypatch.setitem(T.SPACES, "tuned", small)
    tune.forget()
    case, _ = _case(S(1, 2, 1, 40, 40, 16, C), torch.float16)
    res = hooks.tune_tuned(case, torch.float16, force=True)
    assert res.source == "tuned" and len([t for t in res.trials if t.median_ms is not None]) == 2
    assert hooks.tune_tuned(case, torch.float16).source == "cache"
    tune.forget()


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
@pytest.mark.parametrize("cfg", [(64, 32, 4, 2, False, True), (32, 16, 4, 2, True, True),
                                 (32, 16, 4, 2, False, True, True)], ids=["tma", "tma-ws", "tma-pipelined"])
def test_tuned_rung_tma_and_warp_specialized_configs(cfg, layout):
    # configs the tuner may pick on Hopper: k/v by TMA descriptors (emulated by the interpreter) and the warp-
    # specialized key loop; a transposed layout has no unit last stride, so the same config takes the pointer path
    from kernelwright.ops.attention import triton as T

    config = T.AttentionConfig(*cfg)
    cases = [(S(2, 4, 2, 70, 45, 24, C), {}), (S(3, 2, 1, 40, 60, 32, VC), {"lens": ((0, 5), (40, 60), (9, 9))})]
    for size, kw in cases:
        case, seed = _case(size, torch.bfloat16, "large", layout, **kw)
        q, k, v, *cu = case.args
        p = T._problem(q, k, v, *(cu or (None, None)), case.kwargs.get("max_seqlen_q"),
                       case.kwargs.get("max_seqlen_k"), q, T._scratch_lse(q, bool(cu), None))
        uses_tma = T._kv_descriptors(k, v, p, config)[0] is not None
        if not cu:  # (a varlen k with one head is unit-strided in both layouts)
            assert uses_tma == (layout == "contiguous")
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        T.attention_tuned(*case.args, out=out, config=config, **case.kwargs)
        cmp = compare(out, reference64(FAM, case), FAM.tolerances[torch.bfloat16], error_scale(FAM, case))
        assert cmp.ok, f"{case.label} seed={seed}: {cmp.reason}"


@pytest.mark.parametrize("rung", ["flash", "causal_skip", "exp2", "exp2_lazy", "pipelined", "tuned"])
def test_flash_rungs_compile_for_hopper_without_spills(rung):
    # what the H200 will run, compiled here for sm_90 (Triton bundles ptxas): wgmma tensor-core code, no local
    # memory; for the tuned rung also its TMA candidates (descriptors of 4-D padded and 3-D packed k and v)
    from kernelwright.harness import inspect as ki
    from kernelwright.ops.attention import hooks
    from kernelwright.ops.attention import triton as T

    configs = [None] + ([T.AttentionConfig(128, 64, 8, 3, tma=True)] if rung == "tuned" else [])
    for size in (S(4, 32, 8, 4096, 4096, 128, C), S(8, 32, 8, 2048, 2048, 64, VC)):
        for cfg in configs:
            report = ki.analyze(hooks.flash_artifact(rung, size, torch.bfloat16, cfg))
            assert report.arch == "sm_90" and report.stack_bytes == 0, report
            if report.mix is not None:
                assert report.mix.classes["tensor-core MMA"] > 0
                assert report.mix.classes.get("local memory (LDL/STL)", 0) == 0, ki.format_report(report)


def test_pipelined_rung_issues_the_next_scores_amid_the_softmax():
    # sm_90 SASS (D128, 128 x 64 tiles, 8 warps, non-causal): exp2_lazy waits for every wgmma before its
    # exponentials (none interleaved); the pipelined rung's next-tile HGMMAs sit among them (6 seen when written)
    from kernelwright.harness import inspect as ki
    from kernelwright.ops.attention import hooks

    counts = {}
    for rung in ("exp2_lazy", "pipelined"):
        report = ki.analyze(hooks.flash_artifact(rung, S(4, 32, 32, 4096, 4096, 128), torch.bfloat16))
        if report.mix is None:
            pytest.skip("no cuobjdump/nvdisasm to read the SASS")
        counts[rung] = report.mix.mma_amid_mufu
    assert counts["exp2_lazy"] == 0 and counts["pipelined"] >= 2, counts
    assert "overlap    " in ki.format_report(report)


def test_naive_refuses_only_past_its_memory_cap():
    for size in FAM.sweep("cpu") + FAM.sweep("cuda")[:6]:
        assert spec.naive_limit(size, {}) is None, spec.format_size(size)
    assert "GiB" in spec.naive_limit(spec.encode(1, 32, 32, 16384, 16384, 128), {})


# --- GPU: real sizes (the interpreter cannot afford them) ---------------------------------------------------------
# (non-causal D128 at 4k is checked by kw bench before it is timed)
GPU_SIZES = [S(1, 8, 8, 1024, 1024, 128, C), S(2, 8, 2, 777, 1500, 64, C), S(1, 4, 4, 300, 300, 256, C),
             S(8, 8, 2, 2048, 2048, 128, VC)]


@pytest.mark.gpu
@pytest.mark.parametrize("size", GPU_SIZES, ids=[spec.format_size(s) for s in GPU_SIZES])
@pytest.mark.parametrize("rung", RUNGS)
def test_gpu_rungs_on_real_sizes_bf16(rung, size):
    for dist in ("normal", "large"):
        _check(rung, size, torch.bfloat16, dist)


@pytest.mark.gpu
@pytest.mark.parametrize("dt", ["fp16", "fp32"])
@pytest.mark.parametrize("rung", RUNGS)
def test_gpu_rungs_fp16_fp32(rung, dt):
    _check(rung, S(2, 8, 2, 777, 1500, 64, C), DTYPES[dt], "large")


@pytest.mark.gpu
def test_gpu_longest_sequence():
    _check("tuned", S(1, 4, 1, 16384, 16384, 128, C), torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.parametrize("size", [GPU_SIZES[0], GPU_SIZES[3]], ids=["padded", "varlen"])
def test_gpu_tma_config(size):
    # the tuner's TMA candidates, forced: the descriptors' zero fill and packed-sequence rows on real hardware
    from kernelwright.ops.attention import triton as T

    case, seed = _case(size, torch.bfloat16, "large")
    q, k, v, *_ = case.args
    for cfg in (T.AttentionConfig(128, 64, 8, 3, tma=True), T.AttentionConfig(128, 128, 8, 2, tma=True)):
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        T.attention_tuned(*case.args, out=out, config=cfg, **case.kwargs)
        cmp = compare(out, reference64(FAM, case), FAM.tolerances[torch.bfloat16], error_scale(FAM, case))
        assert cmp.ok, f"{cfg} {case.label} seed={seed}: {cmp.reason}"


@pytest.mark.parametrize("varlen", [False, True], ids=["padded", "varlen"])
def test_no_grad_call_under_torch_compile_is_the_opaque_custom_op(varlen):
    # run 30 (kw optimize, l3/01 and l3/02 "all compile=default"): traced into, the no-grad forward's Triton launch
    # was recompiled by Inductor with the scale typed fp64 and failed to compile. The graph must hold our custom op
    # (with the variant) and no Triton kernel of ours; its result equals the eager call's.
    seen = []

    def backend(gm, example_inputs):
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm

    g = torch.Generator().manual_seed(7)
    if varlen:
        cu = torch.tensor([0, 5, 17], dtype=torch.int32)
        q, k, v = (torch.randn(17, h, 64, generator=g) for h in (2, 1, 1))

        def fn(q, k, v):
            return ops.attention_varlen(q, k, v, cu, cu, 12, 12, causal=True, variant="exp2_lazy")
    else:
        q, k, v = (torch.randn(1, h, 17, 64, generator=g) for h in (2, 1, 1))

        def fn(q, k, v):
            return ops.attention(q, k, v, causal=True, variant="exp2_lazy")

    torch._dynamo.reset()
    with torch.no_grad():
        # (varlen reads its offsets on the host to check them: a graph break there, not one graph)
        got = torch.compile(fn, backend=backend, fullgraph=not varlen)(q, k, v)
        want = fn(q, k, v)
    assert "kernelwright.attention_fwd" in seen and not any("triton_kernel" in s for s in seen), seen
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_lazy_rescale_is_a_tuned_dimension_and_old_cached_configs_stay_lazy():
    # the tune cache stores configs as dicts; those written before the field existed were all measured lazy
    from kernelwright.ops.attention import triton as T

    assert T.AttentionConfig(**{"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3}).lazy
    assert not T.TUNED.default(S(4, 32, 32, 4096, 4096, 128), torch.bfloat16).lazy
    lazies = {c.lazy for c in T._configs(torch.bfloat16)}
    assert lazies == {False, True}
