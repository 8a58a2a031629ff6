"""attention backward: dq, dk, dv of every rung against float64 autograd of a materialised softmax attention written
here from the definition (test_ladders.py checks every rung against the family's reference on its fuzz list), at
Sq != Skv both ways, causal and not, GQA ratios 1, 4 and 8, lengths 1, 17 and 129, packed (varlen) batches, fully
masked rows (zero gradients, never NaN), the fa2 kernels' block geometry, determinism, the gradient through lse,
autograd end to end through ``kernelwright.ops.attention`` and ``attention_varlen``, torch.compile, opcheck of the
custom ops, and the cost model.

Shapes are small (the interpreter costs ~2 ms a program instance) and chosen for a reason written next to each;
large shapes run on the GPU (``-m gpu`` at the end)."""

import math

import pytest
import torch

from kernelwright import runtime
from kernelwright.harness.inputs import generator
from kernelwright.harness.verify import compare, error_scale
from kernelwright.ops.attention import triton_bwd as T
from kernelwright.registry import Case, get_family

FAM = get_family("attention_bwd")
RUNGS = [r.name for r in FAM.rungs]


def _forward_available() -> bool:
    try:
        from kernelwright.ops.attention.api import attention_forward  # noqa: F401
    except ImportError:
        return False
    return True


needs_forward = pytest.mark.skipif(not _forward_available(),
                                   reason="the attention forward (kernelwright.ops.attention.api) is not there yet")


@pytest.fixture(autouse=True)
def _tensors_on_the_test_device():
    torch.set_default_device(runtime.current_device())
    yield
    torch.set_default_device("cpu")


# --- an independent float64 reference: autograd through the materialised softmax ----------------------------------
def _attend64(q, k, v, causal, scale):
    """One sequence, [H, S, D] float64: o and lse by the definition (-inf / zero rows where nothing is seen)."""
    g = q.shape[0] // k.shape[0]
    k, v = k.repeat_interleave(g, 0), v.repeat_interleave(g, 0)
    s = scale * q @ k.transpose(-1, -2)
    sq, sk = q.shape[1], k.shape[1]
    if causal:
        i, j = torch.arange(sq)[:, None], torch.arange(sk)[None, :]
        s = s.masked_fill(j > i + sk - sq, -math.inf)
    lse = torch.logsumexp(s, -1) if sk else torch.full((q.shape[0], sq), -math.inf, dtype=q.dtype)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    return p @ v, lse


def exact_grads(q, k, v, do, causal, scale=None, cu_q=None, cu_k=None, dlse=None):
    """(dq, dk, dv) of sum(o * do) (+ sum(lse * dlse)) in float64 autograd, padded or packed."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    q64, k64, v64 = leaves
    if cu_q is None:
        outs = [_attend64(q64[b], k64[b], v64[b], causal, scale) for b in range(q.shape[0])]
        o = torch.stack([x[0] for x in outs])
        lse = torch.stack([x[1] for x in outs])
    else:
        cq, ck = cu_q.tolist(), cu_k.tolist()
        os_, ls_ = [], []
        for b in range(len(cq) - 1):
            qs, ks = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
            ob, lb = _attend64(q64[qs].transpose(0, 1), k64[ks].transpose(0, 1), v64[ks].transpose(0, 1), causal,
                               scale)
            os_.append(ob.transpose(0, 1))
            ls_.append(lb)
        o, lse = torch.cat(os_), torch.cat(ls_, 1)
    loss = (o * do.double()).sum()
    if dlse is not None:
        loss = loss + (lse.nan_to_num(0.0, neginf=0.0) * dlse.double()).sum()
    return torch.autograd.grad(loss, leaves, allow_unused=True, materialize_grads=True)


def _case(size, dtype, dist="normal", layout="contiguous", **kw):
    gen, _ = generator("cpu")
    case = FAM.make_case(size, dtype, "cpu", gen, dist=dist, layout=layout, **kw)
    if runtime.current_device() != "cpu":
        from kernelwright.harness.verify import _to_device

        case = _to_device(case, runtime.current_device())
    return case


def _run(rung: str, case, config=None):
    q, k, v = case.args[:3]
    out = tuple(torch.full_like(t, float("nan")) for t in (q, k, v))
    if config is None:
        FAM.rung(rung).load()(*case.args, out=out, **case.kwargs)
    else:
        pb = T.make_problem(*case.args, **case.kwargs)
        T.fa2_backward(pb, out, config)
    return out


def _check_against_exact(got, case, dtype):
    """Each gradient within the family's tolerance of exact float64 autograd (the error scale includes the
    rounding of the saved o, which the exact gradient does not see)."""
    q, k, v, o, lse, do = case.args
    kw = case.kwargs
    want = exact_grads(q, k, v, do, kw["causal"], kw["scale"], kw.get("cu_seqlens_q"), kw.get("cu_seqlens_k"))
    scales = error_scale(FAM, case)
    for name, g, w, s in zip(("dq", "dk", "dv"), got, want, scales, strict=True):
        assert torch.isfinite(g).all(), f"{name}: non-finite values"
        c = compare(g, w, FAM.tolerances[dtype], s)
        assert c.ok, f"{name}: {c.reason}"


def _S(b, hq, hkv, sq, sk, d, causal=False, varlen=False):
    from kernelwright.ops.attention.spec import encode

    return encode(b, hq, hkv, sq, sk, d, causal=causal, varlen=varlen)


# --- every rung, the geometry, fp32 (exact enough to see any indexing slip) --------------------------------
GEOMETRY = [
    pytest.param(_S(1, 2, 2, 17, 17, 32, True), id="causal-17"),            # under one block; the diagonal
    pytest.param(_S(1, 4, 1, 129, 40, 16, True), id="gqa4-sq>skv-causal"),  # 89 fully masked rows; 129 = 128 + 1
    pytest.param(_S(1, 8, 1, 20, 129, 32, True), id="gqa8-sq<skv-causal"),  # rows see 109 keys past the diagonal
    pytest.param(_S(2, 2, 2, 1, 17, 64), id="one-query"),                   # decode-shaped
    pytest.param(_S(1, 4, 2, 129, 17, 16), id="gqa2-sq>skv-full"),          # no mask, a ragged key block
]


@pytest.mark.parametrize("rung", RUNGS)
@pytest.mark.parametrize("size", GEOMETRY)
def test_every_rung_matches_float64_autograd(rung, size):
    case = _case(size, torch.float32)
    _check_against_exact(_run(rung, case), case, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_low_precision_against_float64_autograd(dtype, causal):
    # 70 rows x 50 keys, GQA 2: both kernels' loops cross several blocks; bf16 dots upcast under the interpreter
    case = _case(_S(1, 4, 2, 70, 50, 64, causal), dtype)
    _check_against_exact(_run("fa2", case), case, dtype)


# --- the fa2 kernels' block geometry: masked/unmasked loop bounds for several tile shapes ---------------------------
CONFIGS = [
    pytest.param(T.BwdConfig(T.KernelConfig(16, 16, 4, 2), T.KernelConfig(16, 16, 4, 2)), id="16x16"),
    pytest.param(T.BwdConfig(T.KernelConfig(16, 64, 4, 2), T.KernelConfig(64, 16, 4, 2)), id="tall"),
    pytest.param(T.BwdConfig(T.KernelConfig(32, 16, 4, 2), T.KernelConfig(16, 32, 4, 2)), id="wide"),
]


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("size", [
    pytest.param(_S(1, 2, 1, 75, 37, 16, True), id="sq>skv"),     # off = -38: the diagonal starts mid-block
    pytest.param(_S(1, 2, 1, 37, 75, 16, True), id="sq<skv"),     # off = +38
    pytest.param(_S(1, 2, 2, 50, 50, 16, True), id="square"),     # off = 0, 50 not a multiple of any block
])
def test_fa2_block_geometry(config, size):
    case = _case(size, torch.float32)
    _check_against_exact(_run("fa2", case, config), case, torch.float32)


# --- packed sequences ------------------------------------------------------------------------------------------------
def test_varlen_equals_each_sequence_alone():
    # lengths 1, 17, 129 with different key counts, a sequence with no queries and one with no keys, causal, GQA 4
    lens = ((1, 5), (17, 17), (0, 3), (129, 60), (6, 0))
    size = _S(len(lens), 4, 1, 129, 60, 32, True, varlen=True)
    case = _case(size, torch.float32, lens=lens)
    small = T.BwdConfig(T.KernelConfig(16, 16, 4, 2), T.KernelConfig(16, 16, 4, 2))  # never shrunk to fit
    got = _run("fa2", case, small)
    _check_against_exact(got, case, torch.float32)
    q, k, v, o, lse, do = case.args
    cq, ck = case.kwargs["cu_seqlens_q"].tolist(), case.kwargs["cu_seqlens_k"].tolist()
    for b in range(len(lens)):
        qs, ks = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        if not lens[b][0] or not lens[b][1]:
            assert torch.equal(got[0][qs], torch.zeros_like(got[0][qs]))   # no keys or no rows: nothing flows
            assert torch.equal(got[1][ks], torch.zeros_like(got[1][ks]))
            continue
        one = [t.transpose(0, 1)[None] for t in (q[qs], k[ks], v[ks], o[qs], do[qs])]
        alone = _run("fa2", Case(size, (*one[:4], lse[None, :, qs], one[4]), {"causal": True, "scale": None}), small)
        # the same blocks from the sequence's first token: the same sums in the same order
        for g, a, index in zip(got, alone, (qs, ks, ks), strict=True):
            assert torch.equal(g[index], a[0].transpose(0, 1))


# --- fully masked rows, degenerate sizes ---------------------------------------------------------------------------
@pytest.mark.parametrize("rung", RUNGS)
def test_fully_masked_rows_have_zero_gradients(rung):
    # Sq = 40 > Skv = 10, causal: rows 0..29 see no key (o = 0, lse = -inf), with a nonzero dO on them
    case = _case(_S(1, 2, 2, 40, 10, 16, True), torch.bfloat16)
    assert torch.isinf(case.args[4][..., :30]).all()
    dq, dk, dv = _run(rung, case)
    assert all(torch.isfinite(t).all() for t in (dq, dk, dv))
    assert torch.equal(dq[:, :, :30], torch.zeros_like(dq[:, :, :30]))
    assert dq[:, :, 30:].abs().sum() > 0


def test_one_key_and_one_query():
    # One key: P = 1 on every row, so dS = dP - delta = 0 exactly and dq = dk = 0; the kernel's dP (a dot) and
    # delta (a row sum of dO * o, o = v) are the same sum in two orders: zero up to fp32 rounding of |dO||v|.
    case = _case(_S(1, 2, 1, 100, 1, 32), torch.float32)
    q, k, v, o, lse, do = case.args
    dq, dk, dv = _run("fa2", case)
    bound = 1e-5 * float(do.abs().sum(-1).max() * v.abs().max())
    assert dq.abs().max() <= bound * q.shape[-1] ** -0.5 * float(k.abs().max())
    assert dk.abs().max() <= bound * q.shape[-1] ** -0.5 * float(q.abs().sum((1, 2)).max())
    torch.testing.assert_close(dv[0, 0, 0], do[0].double().sum((0, 1)).float(), rtol=1e-5, atol=1e-5)
    # one query, one key: the same
    case = _case(_S(1, 1, 1, 1, 1, 16), torch.float32)
    dq, dk, dv = _run("fa2", case)
    assert dq.abs().max() <= 1e-5 and dk.abs().max() <= 1e-5
    torch.testing.assert_close(dv, case.args[5])


def test_empty_problems_write_zeros():
    for size in (_S(1, 2, 2, 5, 0, 16), _S(1, 2, 2, 0, 5, 16), _S(0, 2, 2, 5, 5, 16)):
        case = _case(size, torch.float32)
        for t in _run("fa2", case):
            assert torch.equal(t, torch.zeros_like(t))


# --- determinism ---------------------------------------------------------------------------------------------------
@needs_forward
def test_deterministic_gives_identical_bits():
    _assert_same_bits_twice(torch.randn(1, 4, 70, 32), torch.randn(1, 2, 90, 32), torch.randn(1, 2, 90, 32))


def _assert_same_bits_twice(q, k, v):
    from kernelwright.ops.attention.autograd import attention_autograd

    do = torch.randn_like(q)
    grads = []
    for _ in range(2):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        attention_autograd(*leaves, causal=True, deterministic=True).backward(do)
        grads.append([t.grad for t in leaves])
    for a, b in zip(*grads, strict=True):
        assert torch.equal(a, b)


# --- autograd end to end ---------------------------------------------------------------------------------------------
@needs_forward
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_ops_attention_is_differentiable(dtype):
    from kernelwright import ops

    # Sq 33 > Skv 20, causal, GQA 4: 13 fully masked rows; lse returned and used in the loss
    q, k, v = (torch.randn(2, 8, 33, 32).to(dtype), torch.randn(2, 2, 20, 32).to(dtype),
               torch.randn(2, 2, 20, 32).to(dtype))
    do, dlse = torch.randn(2, 8, 33, 32).to(dtype), torch.randn(2, 8, 33)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    o, lse = ops.attention(*leaves, causal=True, return_lse=True)
    torch.autograd.backward((o, lse.nan_to_num(0.0, neginf=0.0)), (do, dlse))
    want = exact_grads(q, k, v, do, True, dlse=dlse)
    tol = {torch.float32: (2e-5, 2e-5), torch.bfloat16: (2**-6, 2e-2)}[dtype]
    for g, w in zip((t.grad for t in leaves), want, strict=True):
        assert g.dtype == dtype and torch.isfinite(g).all()
        torch.testing.assert_close(g.double(), w, rtol=tol[0], atol=tol[1] * float(w.abs().max()))


@needs_forward
def test_ops_attention_varlen_is_differentiable():
    from kernelwright import ops

    cu_q = torch.tensor([0, 1, 18, 18, 50], dtype=torch.int32)   # lengths 1, 17, 0, 32
    cu_k = torch.tensor([0, 9, 26, 30, 50], dtype=torch.int32)   # 9, 17, 4, 20
    q, k, v = torch.randn(50, 4, 16), torch.randn(50, 2, 16), torch.randn(50, 2, 16)
    do = torch.randn(50, 4, 16)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    ops.attention_varlen(*leaves, cu_q, cu_k, causal=True).backward(do)
    want = exact_grads(q, k, v, do, True, cu_q=cu_q, cu_k=cu_k)
    for g, w in zip((t.grad for t in leaves), want, strict=True):
        torch.testing.assert_close(g.double(), w, rtol=2e-5, atol=2e-5)


@needs_forward
def test_attention_function_matches_the_custom_op():
    from kernelwright.ops.attention.autograd import AttentionFunction, attention_autograd

    q, k, v = torch.randn(1, 2, 24, 16), torch.randn(1, 2, 30, 16), torch.randn(1, 2, 30, 16)
    a = [t.clone().requires_grad_() for t in (q, k, v)]
    c = [t.clone().requires_grad_() for t in (q, k, v)]
    o, lse = AttentionFunction.apply(*a, True, None)
    (o.square().sum() + lse.sum()).backward()
    o, lse = attention_autograd(*c, causal=True, return_lse=True)
    (o.square().sum() + lse.sum()).backward()
    for x, y in zip(a, c, strict=True):
        assert torch.equal(x.grad, y.grad)


@needs_forward
def test_torch_compile_graph_with_attention_and_its_backward():
    from kernelwright import ops

    def f(q, k, v):
        return (ops.attention(q * 2, k, v, causal=True) ** 2).sum()

    inputs = [torch.randn(1, 4, 20, 16), torch.randn(1, 2, 28, 16), torch.randn(1, 2, 28, 16)]
    eager = [t.clone().requires_grad_() for t in inputs]
    f(*eager).backward()
    compiled = [t.clone().requires_grad_() for t in inputs]
    torch.compile(f, backend="aot_eager", fullgraph=True)(*compiled).backward()
    for a, c in zip(eager, compiled, strict=True):
        torch.testing.assert_close(c.grad, a.grad)


@needs_forward
def test_custom_ops_pass_opcheck():
    import kernelwright.ops.attention.autograd  # noqa: F401  (registers the ops)

    q, k, v = torch.randn(1, 2, 9, 16), torch.randn(1, 2, 7, 16), torch.randn(1, 2, 7, 16)
    utils = ("test_schema", "test_faketensor", "test_autograd_registration")
    torch.library.opcheck(torch.ops.kernelwright.attention_fwd.default,
                          (q.requires_grad_(), k, v, True, 0.25, None, None, None, None, False), test_utils=utils)
    o, lse = torch.ops.kernelwright.attention_fwd(q.detach(), k, v, True, 0.25, None, None, None, None, False)
    torch.library.opcheck(torch.ops.kernelwright.attention_bwd.default,
                          (torch.randn_like(o), q.detach(), k, v, o, lse, None, True, 0.25, None, None, None, None,
                           True), test_utils=("test_schema", "test_faketensor"))
    cu = torch.tensor([0, 4, 9], dtype=torch.int32), torch.tensor([0, 3, 7], dtype=torch.int32)
    qp, kp, vp = torch.randn(9, 2, 16), torch.randn(7, 1, 16), torch.randn(7, 1, 16)
    torch.library.opcheck(torch.ops.kernelwright.attention_fwd.default,
                          (qp.requires_grad_(), kp, vp, False, 0.25, *cu, 5, 4, False), test_utils=utils)


def test_backward_rejects_what_the_forward_did_not_save():
    from kernelwright.errors import UsageError
    from kernelwright.ops.attention.autograd import attention_backward

    q, k, v = torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16)
    o, do, lse = torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8)
    bad = [({"lse": lse.double()}, "lse: expected dtype float32"), ({"lse": lse[..., :4]}, "lse: expected float32"),
           ({"do": do.half()}, "do: expected float32"), ({"o": o[:, :, :4]}, "o: expected"),
           ({"dlse": lse[0]}, "dlse: expected float32")]
    for change, message in bad:
        kw = {"do": do, "q": q, "k": k, "v": v, "o": o, "lse": lse, "causal": False, **change}
        with pytest.raises(UsageError, match=message):
            attention_backward(**kw)


# --- the cost model -------------------------------------------------------------------------------------------------
def test_cost_counts_attended_pairs_exactly():
    for sq, sk in ((1, 1), (17, 17), (70, 20), (20, 70), (129, 1)):
        for causal in (False, True):
            pairs = sum(min(max(i + sk - sq + 1, 0), sk) for i in range(sq)) if causal else sq * sk
            flops, nbytes = FAM.cost(_S(2, 8, 2, sq, sk, 64, causal), torch.bfloat16)
            assert flops == 10 * 64 * 2 * 8 * pairs  # 5 matmuls of 2 D flops a pair, every query head
            # q, o, dO, dq (Hq rows) and k, v, dk, dv (Hkv rows) in bf16, plus the fp32 lse
            assert nbytes == 2 * 64 * (4 * 2 * 8 * sq + 4 * 2 * 2 * sk) + 4 * 2 * 8 * sq


def test_default_rung_and_deterministic_choice():
    from kernelwright.ops import _validate

    size = _S(1, 2, 2, 64, 64, 64, True)
    assert _validate.pick_rung(FAM, None, runtime.current_device(), size, {}, torch.bfloat16).name == "tuned"
    assert FAM.baseline == "sdpa_flash"
    # naive refuses what its two fp32 score buffers cannot hold
    assert FAM.rung("naive").refusal(_S(4, 32, 32, 16384, 16384, 128), {})
    assert FAM.rung("naive").refusal(_S(4, 32, 32, 4096, 4096, 128), {}) is None


# --- GPU: the shapes and dtypes ------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("rung", RUNGS)
@pytest.mark.parametrize("size", [
    pytest.param(_S(2, 8, 8, 1024, 1024, 128), id="d128"),
    pytest.param(_S(2, 8, 2, 1000, 1500, 64, True), id="d64-gqa4-causal-ragged"),
    pytest.param(_S(1, 4, 4, 700, 300, 256, True), id="d256-sq>skv"),
])
def test_gpu_rungs_against_reference(rung, size):
    from kernelwright.harness.verify import check_case

    for dtype in (torch.bfloat16, torch.float16):
        case = _case(size, dtype)
        cmp = check_case(FAM, FAM.rung(rung).load(), case, dtype)
        assert cmp.ok, cmp.reason


@pytest.mark.gpu
def test_gpu_deterministic_bitwise():
    # GQA 4 at 2k tokens: on the GPU thousands of programs run at once, in no fixed order
    bf16 = dict(dtype=torch.bfloat16)
    _assert_same_bits_twice(torch.randn(2, 16, 2048, 128, **bf16), torch.randn(2, 4, 2048, 128, **bf16),
                            torch.randn(2, 4, 2048, 128, **bf16))


@pytest.mark.gpu
def test_gpu_varlen_autograd_through_auto_matches_float64():
    # ops.attention_varlen at D128: auto's forward is fa3 on Hopper (packed kernel, on since H200 run 79), tuned
    # elsewhere; its o and packed lse [Hq, total_q] feed the Triton varlen backward. Empty sequences, Lq > Lk (rows
    # with no key) and Lq < Lk, GQA 4, causal; gradients against float64 autograd per sequence.
    from kernelwright import ops

    lens_q, lens_k = (1000, 0, 17, 129, 300, 1, 640), (1000, 0, 129, 17, 300, 1, 2048)
    cu_q, cu_k = (torch.tensor([0, *torch.tensor(n).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
                  for n in (lens_q, lens_k))
    g = torch.Generator(device="cuda").manual_seed(int(torch.randint(0, 2**31, ()).item()))
    bf16 = dict(device="cuda", generator=g, dtype=torch.bfloat16)
    q, k, v = (torch.randn(sum(lens_q), 8, 128, **bf16), torch.randn(sum(lens_k), 2, 128, **bf16),
               torch.randn(sum(lens_k), 2, 128, **bf16))
    do = torch.randn(sum(lens_q), 8, 128, **bf16)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    o = ops.attention_varlen(*leaves, cu_q, cu_k, causal=True)
    o.backward(do)
    want = exact_grads(q, k, v, do, True, cu_q=cu_q, cu_k=cu_k)
    for got, w in zip((t.grad for t in leaves), want, strict=True):
        assert got.dtype == torch.bfloat16 and torch.isfinite(got).all()
        torch.testing.assert_close(got.double(), w, rtol=2**-6, atol=2e-2 * float(w.abs().max()))
