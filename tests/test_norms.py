"""rms_norm, layer_norm and add_rms_norm: the public ops (every rung, layouts, leading dims, extremes, empties),
gradients through autograd against float64 torch, torch.compile, the split rungs' multi-chunk exchange under the
interpreter, the nn modules, the backward peers, and every error path. The families' rungs are checked against
float64 at their fuzz shapes (1 to 262,144 columns) in tests/test_ladders.py."""

import pytest
import torch
import torch.nn.functional as F

import kernelwright.nn as knn
from kernelwright import ops, runtime
from kernelwright.errors import UsageError
from kernelwright.ops import _norm_common as nc
from kernelwright.ops.add_rms_norm.api import AddRMSNormFunction
from kernelwright.ops.layer_norm.api import LayerNormFunction
from kernelwright.ops.layer_norm_bwd.api import layer_norm_backward
from kernelwright.ops.rms_norm.api import RMSNormFunction
from kernelwright.ops.rms_norm_bwd.api import rms_norm_backward


@pytest.fixture(autouse=True)
def _tensors_on_the_test_device():
    torch.set_default_device(runtime.current_device())
    yield
    torch.set_default_device("cpu")


# --- float64 references (independent of the family references: written from the definitions) -----------------------
def ref_rms(x, w, eps=1e-6, offset=False):
    x = x.double()
    w = w.double() + (1 if offset else 0)
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def ref_layer(x, w, b, eps=1e-5):
    return F.layer_norm(x.double(), (x.shape[-1],), w.double(), b.double(), eps)


def close(got, want, dtype=None):
    dtype = dtype or got.dtype
    tol = {torch.float32: (2e-5, 1e-5), torch.float16: (2**-10, 1e-4), torch.bfloat16: (2**-7, 1e-3)}[dtype]
    torch.testing.assert_close(got.double(), want.double(), rtol=tol[0], atol=tol[1])


# --- forward: every rung through the public op -----------------------------------------------------------------------
@pytest.mark.parametrize("variant", ["naive", "fused", "chunked", "split", None])
def test_rms_norm_every_rung_any_layout(variant):
    x = torch.randn(5, 3, 300).transpose(0, 1)  # non-contiguous, 3-D
    w = torch.randn(300)
    close(ops.rms_norm(x, w, variant=variant), ref_rms(x, w))
    close(ops.rms_norm(x, w, 1e-2, True, variant=variant), ref_rms(x, w, 1e-2, True))


@pytest.mark.parametrize("variant", ["naive", "fused", "chunked", "split", None])
def test_layer_norm_every_rung_any_layout(variant):
    x = torch.randn(4, 2, 260)[..., ::2] + 3.0  # strided columns, a mean far from zero
    w, b = torch.randn(130), torch.randn(130)
    close(ops.layer_norm(x, w, b, variant=variant), ref_layer(x, w, b))


@pytest.mark.parametrize("variant", ["naive", "fused", "split", None])
def test_add_rms_norm_every_rung(variant):
    x = torch.randn(3, 7, 96, dtype=torch.bfloat16)
    r = torch.randn(7, 3, 96, dtype=torch.bfloat16).transpose(0, 1)
    w = torch.randn(96, dtype=torch.bfloat16)
    y, h = ops.add_rms_norm(x, r, w, offset=True, variant=variant)
    h64 = x.double() + r.double()
    close(h, h64)
    close(y, ref_rms(h64, w, offset=True))


@pytest.mark.parametrize("variant", ["naive", "fused", "split", None])
def test_add_rms_norm_without_h(variant):
    # keep_h=False: the same y, h never stored (the kernels' STORE_H off), and a clear error when a gradient is asked
    x = torch.randn(4, 2, 300, dtype=torch.bfloat16)[:, 1]
    r = torch.randn(4, 300, dtype=torch.bfloat16)
    w = torch.randn(300, dtype=torch.bfloat16)
    y, h = ops.add_rms_norm(x, r, w, variant=variant, keep_h=False)
    assert h is None
    y_kept, _ = ops.add_rms_norm(x, r, w, variant=variant)
    assert torch.equal(y, y_kept)
    close(y, ref_rms(x.double() + r.double(), w))
    with pytest.raises(UsageError, match="keep_h=False"):
        ops.add_rms_norm(x, r, w.clone().requires_grad_(), keep_h=False)
    with pytest.raises(UsageError, match="keep_h"):
        ops.add_rms_norm(x, r, w, keep_h="no")


def test_default_variant_by_width():
    # the widths where the H200 sweeps changed the winner (runs 7/8; split ahead of chunked on wide rows since
    # session 7, runs 59-62); see nc.FUSED_PREFERRED_COLS. Off Hopper (here) the cluster rung is never picked
    def pick(family, cols):
        return nc.pick(family, None, torch.empty(2, cols), {}).name

    assert [pick("rms_norm", d) for d in (4096, 8192, 16384, 20000)] == ["fused", "fused", "split", "split"]
    assert [pick("layer_norm", d) for d in (1024, 12288, 65536)] == ["fused", "split", "split"]
    assert [pick("add_rms_norm", d) for d in (16384, 40000)] == ["fused", "split"]  # it has no chunked rung
    assert [pick("rms_norm_bwd", d) for d in (1024, 4096, 20000)] == ["fused", "split", "split"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("scale", [1e30, 1e-30])
def test_extreme_magnitudes_do_not_overflow(dtype, scale):
    # squares of 1e30 overflow fp32 and of 1e-30 underflow it: the kernels scale rows by a power of two first
    x = (torch.randn(3, 4100) * scale).to(dtype)
    w, b = torch.randn(4100, dtype=dtype), torch.randn(4100, dtype=dtype)
    eps = 0.0 if scale < 1 else 1e-6
    for variant in ("naive", "fused", "chunked", "split"):
        close(ops.rms_norm(x, w, eps, variant=variant), ref_rms(x, w, eps))
        close(ops.layer_norm(x, w, b, eps, variant=variant), ref_layer(x, w, b, eps))


def test_fp16_and_bf16_at_1e4_magnitudes():
    for dtype in (torch.float16, torch.bfloat16):
        x = (torch.randn(4, 1000) * 1e4).clamp(-6e4, 6e4).to(dtype)
        r = (torch.randn(4, 1000) * 1e4).clamp(-3e4, 3e4).to(dtype)
        w = torch.randn(1000, dtype=dtype)
        close(ops.rms_norm(x, w), ref_rms(x, w))
        y, _ = ops.add_rms_norm(x, r, w)
        close(y, ref_rms(x.double() + r.double(), w))


def test_empty_inputs():
    w = torch.randn(8)
    assert ops.rms_norm(torch.empty(0, 8), w).shape == (0, 8)
    assert ops.layer_norm(torch.empty(2, 0, 8), w, w).shape == (2, 0, 8)
    y, h = ops.add_rms_norm(torch.empty(0, 8), torch.empty(0, 8), w)
    assert y.shape == h.shape == (0, 8)
    assert ops.rms_norm(torch.empty(3, 0), torch.empty(0)).shape == (3, 0)
    x = torch.empty(0, 8, requires_grad=True)
    wr = w.clone().requires_grad_()
    ops.rms_norm(x, wr).sum().backward()
    assert torch.equal(wr.grad, torch.zeros(8))


# --- gradients ----------------------------------------------------------------------------------------------------
def _grads64(fn, *tensors, dys):
    leaves = [t.detach().double().requires_grad_() for t in tensors]
    outs = fn(*leaves)
    outs = outs if isinstance(outs, tuple) else (outs,)
    return torch.autograd.grad(outs, leaves, [d.double() for d in dys])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("cols", [77, 20000])  # the fused and the split backward
def test_rms_norm_gradients(dtype, cols):
    x = torch.randn(3, 2, cols, dtype=dtype).transpose(0, 1)
    w = torch.randn(cols, dtype=dtype)
    dy = torch.randn(2, 3, cols, dtype=dtype)
    for offset in (False, True):
        xr, wr = x.detach().requires_grad_(), w.detach().requires_grad_()
        torch.autograd.backward(ops.rms_norm(xr, wr, offset=offset), dy)
        want = _grads64(lambda a, b, o=offset: ref_rms(a, b, offset=o), x, w, dys=[dy])
        close(xr.grad, want[0])
        torch.testing.assert_close(wr.grad.double(), want[1], rtol=2**-7 if dtype == torch.bfloat16 else 1e-5,
                                   atol=1e-3 if dtype == torch.bfloat16 else 1e-5)


@pytest.mark.parametrize("cols", [50, 17000])
def test_layer_norm_gradients(cols):
    x = torch.randn(2, 3, cols) * 2 + 1
    w, b = torch.randn(cols), torch.randn(cols)
    dy = torch.randn(2, 3, cols)
    xr, wr, br = (t.detach().requires_grad_() for t in (x, w, b))
    torch.autograd.backward(ops.layer_norm(xr, wr, br), dy)
    want = _grads64(ref_layer, x, w, b, dys=[dy])
    for got, exp in zip((xr.grad, wr.grad, br.grad), want, strict=True):
        torch.testing.assert_close(got.double(), exp, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("cols", [64, 17000])
def test_add_rms_norm_gradients_reach_x_residual_and_weight(cols):
    x, r, w = torch.randn(3, cols), torch.randn(3, cols), torch.randn(cols)
    dy, dh = torch.randn(3, cols), torch.randn(3, cols)
    xr, rr, wr = (t.detach().requires_grad_() for t in (x, r, w))
    y, h = ops.add_rms_norm(xr, rr, wr)
    torch.autograd.backward((y, h), (dy, dh))
    want = _grads64(lambda a, c, d: (ref_rms(a + c, d), a + c), x, r, w, dys=[dy, dh])
    for got, exp in zip((xr.grad, rr.grad, wr.grad), want, strict=True):
        torch.testing.assert_close(got.double(), exp, rtol=2e-5, atol=2e-5)
    # h unused: its gradient is absent, and dx is the norm's alone
    xr.grad = None
    ops.add_rms_norm(xr, rr, wr)[0].mul(dy).sum().backward()
    want = _grads64(lambda a, c, d: ref_rms(a + c, d), x, r, w, dys=[dy])
    torch.testing.assert_close(xr.grad.double(), want[0], rtol=2e-5, atol=2e-5)


def test_autograd_functions_match_the_ops():
    x, r, w, b = torch.randn(4, 40), torch.randn(4, 40), torch.randn(40), torch.randn(40)
    cases = [
        (lambda *t: RMSNormFunction.apply(*t, 1e-6, True), lambda *t: ops.rms_norm(*t, offset=True), (x, w)),
        (lambda *t: LayerNormFunction.apply(*t), lambda *t: ops.layer_norm(*t), (x, w, b)),
        (lambda *t: sum(AddRMSNormFunction.apply(*t)), lambda *t: sum(ops.add_rms_norm(*t)), (x, r, w)),
    ]
    for via_function, via_op, inputs in cases:
        a = [t.clone().requires_grad_() for t in inputs]
        c = [t.clone().requires_grad_() for t in inputs]
        via_function(*a).pow(2).sum().backward()
        via_op(*c).pow(2).sum().backward()
        for ga, gc in zip(a, c, strict=True):
            assert torch.equal(ga.grad, gc.grad)


@pytest.mark.parametrize("variant", ["naive", "fused", "split"])
def test_backward_functions_every_rung(variant):
    x = torch.randn(5, 130)
    w = torch.randn(130)
    dy = torch.randn(5, 130)
    _, rstd = torch.ops.kernelwright.rms_norm(x, w, 1e-6, False, None)
    dx, dw = rms_norm_backward(dy, x, w, rstd, variant=variant)
    want = _grads64(ref_rms, x, w, dys=[dy])
    torch.testing.assert_close(dx.double(), want[0], rtol=2e-5, atol=2e-5)
    torch.testing.assert_close(dw.double(), want[1], rtol=2e-5, atol=2e-5)
    b = torch.randn(130)
    _, mean, rstd = torch.ops.kernelwright.layer_norm(x, w, b, 1e-5, None)
    got = layer_norm_backward(dy, x, w, mean, rstd, variant=variant)
    for g, e in zip(got, _grads64(ref_layer, x, w, b, dys=[dy]), strict=True):
        torch.testing.assert_close(g.double(), e, rtol=2e-5, atol=2e-5)


def test_torch_compile_graph_with_the_ops_and_their_backward():
    def f(x, r, w, b):
        y, h = ops.add_rms_norm(x, r, w)
        return (ops.rms_norm(y, w, offset=True) + ops.layer_norm(h, w, b)).square().sum()

    inputs = [torch.randn(3, 32), torch.randn(3, 32), torch.randn(32), torch.randn(32)]
    eager = [t.clone().requires_grad_() for t in inputs]
    f(*eager).backward()
    compiled = [t.clone().requires_grad_() for t in inputs]
    torch.compile(f, fullgraph=True)(*compiled).backward()
    for a, c in zip(eager, compiled, strict=True):
        torch.testing.assert_close(c.grad, a.grad)


def test_custom_ops_pass_opcheck():
    x, w, b = torch.randn(3, 16), torch.randn(16), torch.randn(16)
    torch.library.opcheck(torch.ops.kernelwright.rms_norm.default, (x, w, 1e-6, True, None),
                          test_utils=("test_schema", "test_faketensor", "test_autograd_registration"))
    torch.library.opcheck(torch.ops.kernelwright.layer_norm.default, (x, w, b, 1e-5, None),
                          test_utils=("test_schema", "test_faketensor", "test_autograd_registration"))
    torch.library.opcheck(torch.ops.kernelwright.add_rms_norm.default, (x, x.flip(0), w, 1e-6, False, None),
                          test_utils=("test_schema", "test_faketensor", "test_autograd_registration"))


# --- the split rungs' exchange with several chunks a row (the interpreter cannot run partners concurrently) -------
def _exponent(amax: torch.Tensor) -> torch.Tensor:
    return (torch.frexp(amax)[1] - 1).clamp(-63, 126)


def _bits(v: torch.Tensor) -> torch.Tensor:
    return v.float().contiguous().view(torch.int32).long() & 0xFFFFFFFF


def _forward_words(v: torch.Tensor, chunk: int, center: bool) -> torch.Tensor:
    """What each chunk of each row publishes: [R, N_CHUNKS, words]."""
    rows, cols = v.shape
    n = -(-cols // chunk)
    words = torch.empty(rows, n, dtype=torch.int64)
    for c in range(n):
        seg = v[:, c * chunk:(c + 1) * chunk].float()
        k = _exponent(seg.abs().amax(-1))
        s = seg * torch.pow(2.0, -k.float())[:, None]
        if center:  # the chunk's mean and std / 4, unscaled
            mean = s.mean(-1)
            std = ((s - mean[:, None]) ** 2).mean(-1).sqrt()
            words[:, c] = (_bits(mean * torch.pow(2.0, k.float())) << 32) | _bits(std * torch.pow(2.0, k.float() - 2))
        else:
            words[:, c] = ((k.long() + 256) << 32) | _bits((s * s).sum(-1))
    return words


@pytest.mark.skipif(not runtime.interpreting(), reason="CPU interpreter test")
@pytest.mark.parametrize("early", [False, True])
def test_fused_forward_bias_early_or_late(early, monkeypatch):
    # FUSED_BIAS_EARLY (an experiment switch, session 15): the bias loaded with the weight or after the statistics;
    # either way layer norm's output and statistics match float64, unaligned widths and several rows a tile included
    from kernelwright.ops.rms_norm import triton as fwd
    from kernelwright.ops.rms_norm.triton import norm_forward

    monkeypatch.setattr(fwd, "FUSED_BIAS_EARLY", early)
    for rows, cols in ((5, 300), (3, 1024), (2, 4099)):
        x = torch.randn(rows, cols) * 3 + 1
        w, b = torch.randn(cols), torch.randn(cols)
        y = torch.full_like(x, float("nan"))
        stats = (torch.empty(rows), torch.empty(rows))
        norm_forward("fused", x, w, 1e-5, y=y, bias=b, stats=stats)
        close(y, ref_layer(x, w, b))
        torch.testing.assert_close(stats[0].double(), x.double().mean(-1), rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not runtime.interpreting(), reason="CPU interpreter test")
@pytest.mark.parametrize("groups,hold", [(1, False), (2, False), (3, False), (2, True)])
@pytest.mark.parametrize("kind", ["rms", "layer", "add_rms"])
def test_split_forward_exchange_with_several_chunks(kind, groups, hold, monkeypatch):
    from kernelwright.ops.rms_norm import triton as fwd
    from kernelwright.ops.rms_norm.triton import norm_forward

    monkeypatch.setattr(fwd, "WEIGHT_HOLD", hold)  # the weight (and bias) held across rows, or reloaded every row

    rows, cols, chunk = 3, 300, 64
    x, w, b = torch.randn(rows, cols) * 3, torch.randn(cols), torch.randn(cols)
    r = torch.randn(rows, cols) if kind == "add_rms" else None
    v = x + r if r is not None else x
    slots = _forward_words(v, chunk, kind == "layer")
    y = torch.full_like(x, float("nan"))
    h = torch.full_like(x, float("nan")) if r is not None else None
    stats = (torch.empty(rows), torch.empty(rows)) if kind == "layer" else (torch.empty(rows),)
    norm_forward("split", x, w, 1e-5, y=y, bias=b if kind == "layer" else None, residual=r, h=h, stats=stats,
                 split_chunk=chunk, slots=slots, groups=groups)
    if kind == "layer":
        close(y, ref_layer(x, w, b))
        torch.testing.assert_close(stats[0].double(), x.double().mean(-1), rtol=1e-5, atol=1e-6)
    else:
        close(y, ref_rms(v, w, 1e-5))
    torch.testing.assert_close(stats[-1].double(), 1 / torch.sqrt(
        (v.double() - (v.double().mean(-1, keepdim=True) if kind == "layer" else 0)).pow(2).mean(-1) + 1e-5),
        rtol=1e-5, atol=0)
    if h is not None:
        assert torch.equal(h, v)


@pytest.mark.skipif(not runtime.interpreting(), reason="CPU interpreter test")
@pytest.mark.parametrize("cols", [250, 1000])  # 8 rows a program (in and out of range mixed), or 2
@pytest.mark.parametrize("kind", ["rms", "layer", "add_rms"])
def test_fused_fast_statistics_match_the_scaled_ones(kind, cols, monkeypatch):
    """FUSED_FAST (an experiment switch): the fused forward's rows inside the fast range give the scaled result up
    to the order of the sums, rows outside it (tiny, huge, zero, Inf) exactly the scaled path's bits, programs that
    hold both kinds included; every finite row against float64, stats too."""
    from kernelwright.ops.rms_norm import triton as fwd
    from kernelwright.ops.rms_norm.triton import norm_forward

    g = torch.Generator().manual_seed(12)
    scales = [1.0, 1e6, 1e-5, 3.0, 1e-30, 5e37, 0.0, 1.0, 2.0, 7.0, 1e-3, 1e4]
    n = len(scales)
    x = torch.randn(n, cols, generator=g) * torch.tensor(scales)[:, None]
    x[3] += 4.0  # a mean past the spread (larger ones: the interpreter's sequential fold of tl.reduce shows)
    x[7, 5] = float("inf")
    fast_rows, slow_rows = [0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7]
    w, b = torch.randn(cols, generator=g), torch.randn(cols, generator=g)
    r = torch.randn(n, cols, generator=g) * torch.tensor(scales)[:, None] if kind == "add_rms" else None
    v = x + r if r is not None else x
    out = {}
    for fast in (False, True):
        monkeypatch.setattr(fwd, "FUSED_FAST", fast)
        y = torch.full_like(x, float("nan"))
        stats = (torch.full((n,), float("nan")), torch.full((n,), float("nan"))) if kind == "layer" else (
            torch.full((n,), float("nan")),)
        norm_forward("fused", x, w, 1e-5, y=y, bias=b if kind == "layer" else None, residual=r,
                     h=torch.empty_like(x) if r is not None else None, stats=stats)
        out[fast] = (y, stats)
    (y0, s0), (y1, s1) = out[False], out[True]
    # fast rows: the same up to the order of the sums (the interpreter folds tl.reduce sequentially: a mean of 100
    # over 250 columns moves by ~1e-5 relative)
    torch.testing.assert_close(y1[fast_rows], y0[fast_rows], rtol=2e-5, atol=1e-5)
    for a, c in zip(s1, s0, strict=True):
        torch.testing.assert_close(a[fast_rows], c[fast_rows], rtol=2e-5, atol=1e-5)
        assert torch.equal(a[slow_rows].nan_to_num(7.0), c[slow_rows].nan_to_num(7.0))
    assert torch.equal(y1[slow_rows].nan_to_num(7.0), y0[slow_rows].nan_to_num(7.0))
    finite = [i for i in range(n) if i != 7]
    want = ref_layer(x, w, b) if kind == "layer" else ref_rms(v, w, 1e-5)
    close(y1[finite], want[finite])


@pytest.mark.skipif(not runtime.interpreting(), reason="CPU interpreter test")
@pytest.mark.parametrize("cols", [250, 1000])  # 8 rows a program (plain and scaled mixed), or 2
@pytest.mark.parametrize("kind", ["rms", "add_rms"])
def test_fused_sum_first_matches_the_scaled_statistics(kind, cols, monkeypatch):
    """FUSED_SUM_FIRST (an experiment switch, torch.compile's single unscaled sum): rows whose sum of squares is
    finite and at least 2^-60 match the scaled path up to rounding; the others (tiny, huge, zero, Inf) take the
    scaled path's bits; every finite row against float64, the saved rstd too. Layer norm is left alone."""
    _sum_first_check(kind, cols, monkeypatch, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("cols", [1000, 8192])
@pytest.mark.parametrize("kind", ["rms", "add_rms"])
def test_fused_sum_first_on_gpu(kind, cols, monkeypatch):
    _sum_first_check(kind, cols, monkeypatch, "cuda")


def _sum_first_check(kind, cols, monkeypatch, device):
    from kernelwright.ops.rms_norm import triton as fwd
    from kernelwright.ops.rms_norm.triton import norm_forward

    g = torch.Generator().manual_seed(13)
    scales = [1.0, 1e6, 1e-5, 3.0, 1e-30, 5e37, 0.0, 1.0, 1e18, 7.0, 1e-3, 1e4]
    n = len(scales)
    sc = torch.tensor(scales, device="cpu")[:, None]  # (drawn on the CPU: GPU runs default to CUDA tensors)
    x = torch.randn(n, cols, generator=g, device="cpu") * sc
    x[7, 5] = float("inf")
    plain, scaled = [0, 1, 2, 3, 9, 10, 11], [4, 5, 6, 7, 8]  # 1e18: squares past fp32's range
    w = torch.randn(cols, generator=g, device="cpu")
    r = torch.randn(n, cols, generator=g, device="cpu") * sc if kind == "add_rms" else None
    x, w, r = x.to(device), w.to(device), r.to(device) if r is not None else None
    v = x + r if r is not None else x
    monkeypatch.setattr(fwd, "FUSED_FAST", False)
    out = {}
    for first in (False, True):
        monkeypatch.setattr(fwd, "FUSED_SUM_FIRST", first)
        y, rstd = torch.full_like(x, float("nan")), torch.full((n,), float("nan"), device=device)
        norm_forward("fused", x, w, 1e-5, y=y, residual=r, h=torch.empty_like(x) if r is not None else None,
                     stats=(rstd,))
        out[first] = (y, rstd)
    (y0, s0), (y1, s1) = out[False], out[True]
    torch.testing.assert_close(y1[plain], y0[plain], rtol=2e-6, atol=1e-6)
    torch.testing.assert_close(s1[plain], s0[plain], rtol=2e-6, atol=0)
    assert torch.equal(y1[scaled].nan_to_num(7.0), y0[scaled].nan_to_num(7.0))
    assert torch.equal(s1[scaled].nan_to_num(7.0), s0[scaled].nan_to_num(7.0))
    finite = [i for i in range(n) if i != 7]
    close(y1[finite], ref_rms(v, w, 1e-5)[finite])
    rstd64 = torch.rsqrt(v.double()[finite].pow(2).mean(-1) + 1e-5)
    torch.testing.assert_close(s1[finite].double(), rstd64, rtol=1e-5, atol=0)


@pytest.mark.parametrize("stats", ["fast", "sum_first", "scaled"])
@pytest.mark.parametrize("cols", [1000, 4096])
def test_fused_reload_gives_the_held_rows_bits(stats, cols, monkeypatch):
    """FUSED_RELOAD (an experiment switch, torch.compile's second read of x from L2): rms_norm's output and saved
    rstd bit for bit the default's under each statistic path, rows of every scale (tiny, huge, zero, Inf) and the
    offset weight; float64 on the finite rows. add_rms_norm and layer norm do not take it (their output is
    unchanged with the switch on)."""
    _reload_check(stats, cols, monkeypatch, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("stats", ["fast", "sum_first"])
@pytest.mark.parametrize("cols", [1000, 8192])
def test_fused_reload_on_gpu(stats, cols, monkeypatch):
    _reload_check(stats, cols, monkeypatch, "cuda")


def _reload_check(stats, cols, monkeypatch, device):
    from kernelwright.ops.rms_norm import triton as fwd
    from kernelwright.ops.rms_norm.triton import norm_forward

    # made on the CPU (the generator's device) whatever the default device, then moved
    g = torch.Generator().manual_seed(17)
    scales = [1.0, 1e6, 1e-5, 3.0, 1e-30, 5e37, 0.0, 1.0, 1e18, 7.0]
    n = len(scales)
    x = torch.randn(n, cols, generator=g, device="cpu") * torch.tensor(scales, device="cpu")[:, None]
    x[7, 5] = float("inf")
    w = torch.randn(cols, generator=g, device="cpu")
    b = torch.randn(cols, generator=g, device="cpu")
    r = torch.randn(n, cols, generator=g, device="cpu")
    x, w, b, r = (t.to(device) for t in (x, w, b, r))
    monkeypatch.setattr(fwd, "FUSED_FAST", stats == "fast")
    monkeypatch.setattr(fwd, "FUSED_SUM_FIRST", stats == "sum_first")
    out = {}
    for reload in (False, True):
        monkeypatch.setattr(fwd, "FUSED_RELOAD", reload)
        for offset in (False, True):
            y, rstd = torch.full_like(x, float("nan")), torch.full((n,), float("nan"), device=device)
            norm_forward("fused", x, w, 1e-5, y=y, stats=(rstd,), offset=offset)
            out[reload, "rms", offset] = (y, rstd)
        y = torch.full_like(x, float("nan"))
        norm_forward("fused", x, w, 1e-5, y=y, residual=r, h=torch.empty_like(x))
        out[reload, "add_rms"] = (y,)
        y = torch.full_like(x, float("nan"))
        norm_forward("fused", x, w, 1e-5, bias=b, y=y)
        out[reload, "layer"] = (y,)
    for key in [k[1:] for k in out if k[0]]:
        for held, again in zip(out[(False, *key)], out[(True, *key)], strict=True):
            assert torch.equal(held.nan_to_num(7.0), again.nan_to_num(7.0)), key
    finite = [i for i in range(n) if i != 7]
    y, rstd = out[True, "rms", False]
    close(y[finite], ref_rms(x, w, 1e-5)[finite])
    rstd64 = torch.rsqrt(x.double()[finite].pow(2).mean(-1) + 1e-5)
    torch.testing.assert_close(rstd[finite].double(), rstd64, rtol=1e-5, atol=0)
    y, _ = out[True, "rms", True]
    close(y[finite], ref_rms(x, 1 + w, 1e-5)[finite])


@pytest.mark.skipif(not runtime.interpreting(), reason="CPU interpreter test")
@pytest.mark.parametrize("chunk", [None, 64])  # one chunk a row (the interpreter's), or four exchanging
@pytest.mark.parametrize("kind", ["rms", "layer", "add_rms"])
def test_fast_chunk_statistics_match_the_scaled_ones(kind, chunk, monkeypatch):
    """FAST_STATS (an experiment switch): rows whose largest magnitude is within the fast path's range give the
    scaled computation's result up to the order of the sums; rows outside it (tiny, huge, zero, Inf) take the
    scaled path itself, bit for bit; every row against float64."""
    from kernelwright.ops.rms_norm import triton as fwd
    from kernelwright.ops.rms_norm.triton import norm_forward

    cols = 250
    g = torch.Generator().manual_seed(11)
    base = torch.randn(8, cols, generator=g)
    scales = [1.0, 1e6, 1e-5, 3.0, 1e-30, 5e37, 0.0, 1.0]  # in range x4; tiny, huge, zero out of range; + Inf
    x = base * torch.tensor(scales)[:, None]
    x[3, :64] *= 2.0**40  # one chunk far larger than the rest: out of range in that chunk only
    x[3] += 100.0
    x[7, 5] = float("inf")
    fast_rows, slow_rows = [0, 1, 2], [4, 5, 6, 7]
    w, b = torch.randn(cols, generator=g), torch.randn(cols, generator=g)
    r = torch.randn(8, cols, generator=g) * torch.tensor(scales)[:, None] if kind == "add_rms" else None
    v = x + r if r is not None else x
    out = {}
    for fast in (False, True):
        monkeypatch.setattr(fwd, "FAST_STATS", fast)
        y = torch.full_like(x, float("nan"))
        stats = (torch.empty(8), torch.empty(8)) if kind == "layer" else (torch.empty(8),)
        words = _forward_words(v, chunk, kind == "layer") if chunk else None
        norm_forward("split", x, w, 1e-5, y=y, bias=b if kind == "layer" else None, residual=r,
                     h=torch.empty_like(x) if r is not None else None, stats=stats, split_chunk=chunk, slots=words,
                     groups=2 if chunk else None)
        out[fast] = (y, stats)
    (y0, s0), (y1, s1) = out[False], out[True]
    torch.testing.assert_close(y1[fast_rows], y0[fast_rows], rtol=2e-6, atol=1e-6)
    torch.testing.assert_close(s1[-1][fast_rows], s0[-1][fast_rows], rtol=2e-6, atol=0)
    assert torch.equal(y1[slow_rows].nan_to_num(7.0), y0[slow_rows].nan_to_num(7.0))
    assert torch.equal(s1[-1][slow_rows].nan_to_num(7.0), s0[-1][slow_rows].nan_to_num(7.0))
    finite = [0, 1, 2, 3, 4, 5, 6]
    want = ref_layer(x, w, b) if kind == "layer" else ref_rms(v, w, 1e-5)
    close(y1[finite], want[finite])
    if kind == "rms" and chunk is None:
        # the range guard is what keeps the fast path exact: widened to every exponent, the huge row's unscaled
        # squares overflow (and the fast path is seen to be taken)
        import triton.language as tl

        monkeypatch.setattr(fwd, "FAST_HI", tl.constexpr(126))
        y = torch.full_like(x, float("nan"))
        norm_forward("split", x, w, 1e-5, y=y)
        assert torch.equal(y[fast_rows], y1[fast_rows]) and not torch.allclose(y[5], y0[5])


@pytest.mark.skipif(not runtime.interpreting(), reason="CPU interpreter test")
def test_split_one_pass_m2_only_where_few_bits_cancel(monkeypatch):
    """SPLIT_ONE_PASS (an experiment switch): layer norm's chunk M2 as Q - S mean from the one reduction where at most
    4 bits cancel (rstd within 1e-5 of the two-reduction fast path's, and other bits on some rows: the path is
    taken), the centred sum bit for bit where more cancel (a large mean, a constant row) or the row is out of the
    fast range; every row against float64."""
    from kernelwright.ops.rms_norm import triton as fwd
    from kernelwright.ops.rms_norm.triton import norm_forward

    cols = 250
    g = torch.Generator().manual_seed(5)
    base = torch.randn(8, cols, generator=g)
    x = torch.stack([base[0], base[1] * 3 + 1, base[2] * 2 + 7, base[3] * 1e6, base[4] + 1000, torch.full((cols,), 2.5),
                     base[6] * 1e-30, base[7] * 2 + 8.5]).bfloat16()
    one_pass, centred = [0, 1, 2, 3], [4, 5, 6, 7]  # mean 0, 1/3, 3.5 sd, scaled; 1000 sd, constant, tiny, 4.25 sd
    w, b = torch.randn(cols, generator=g).bfloat16(), torch.randn(cols, generator=g).bfloat16()
    monkeypatch.setattr(fwd, "FAST_STATS", True)
    out = {}
    for on in (False, True):
        monkeypatch.setattr(fwd, "SPLIT_ONE_PASS", on)
        for dtype in (torch.bfloat16, torch.float32):
            y, stats = torch.full_like(x, float("nan"), dtype=dtype), (torch.empty(8), torch.empty(8))
            norm_forward("split", x.to(dtype), w.to(dtype), 1e-5, y=y, bias=b.to(dtype), stats=stats)
            out[on, dtype] = (y, stats[1])
    (y0, r0), (y1, r1) = out[False, torch.bfloat16], out[True, torch.bfloat16]
    torch.testing.assert_close(r1[one_pass], r0[one_pass], rtol=1e-5, atol=0)
    assert not torch.equal(r1[one_pass], r0[one_pass]), "no row took the one-pass M2"
    assert torch.equal(r1[centred], r0[centred]) and torch.equal(y1[centred], y0[centred])
    close(y1, ref_layer(x, w, b))
    for a, c in zip(out[False, torch.float32], out[True, torch.float32], strict=True):
        assert torch.equal(a, c)  # fp32 rows keep the centred sum (the switch is for 16-bit rows)


@pytest.mark.skipif(not runtime.interpreting(), reason="CPU interpreter test")
def test_split_layer_norm_exchange_at_extreme_magnitudes():
    """The layer norm exchange word carries unscaled (mean, std / 4): rows near fp32's largest values, tiny rows,
    a large common offset, a zero row, a row whose chunks differ by 2^60 in scale, all merged exactly enough."""
    from kernelwright.ops.rms_norm.triton import norm_forward

    cols, chunk = 200, 64
    g = torch.Generator().manual_seed(7)
    base = torch.randn(6, cols, generator=g)
    x = torch.stack([base[0] * 5e37, base[1] * 1e-30, 1000 + base[2], torch.zeros(cols), base[4], base[5]])
    x[4, :chunk] *= 2.0**60  # one chunk far larger than the others
    x[5, ::7] = 3e38 * torch.sign(base[5, ::7])  # the largest magnitudes next to ordinary ones
    w, b = torch.randn(cols, generator=g), torch.randn(cols, generator=g)
    y, y_one = torch.full_like(x, float("nan")), torch.full_like(x, float("nan"))
    stats = (torch.empty(6), torch.empty(6))
    norm_forward("split", x, w, 1e-5, y=y, bias=b, stats=stats, split_chunk=chunk, slots=_forward_words(x, chunk, True),
                 groups=2)
    norm_forward("fused", x, w, 1e-5, y=y_one, bias=b)  # the whole row in one program: fp32's own error
    assert torch.isfinite(y).all()
    ref = ref_layer(x, w, b)
    err, err_one = (y.double() - ref).abs().amax(-1), (y_one.double() - ref).abs().amax(-1)
    # the offset row (1000 + N(0, 1)) loses ~1e-4 to fp32 in any rung; elsewhere both are near fp32's epsilon
    assert (err <= 4 * err_one + 1e-6).all(), (err, err_one)
    torch.testing.assert_close(stats[0].double(), x.double().mean(-1), rtol=1e-5, atol=1e-30)


@pytest.mark.skipif(not runtime.interpreting(), reason="CPU interpreter test")
@pytest.mark.parametrize("groups,hold,paired", [(1, False, False), (2, False, False), (2, True, False),
                                                (2, True, True)])
@pytest.mark.parametrize("kind", ["rms", "layer", "add_rms"])
def test_split_backward_exchange_with_several_chunks(kind, groups, hold, paired, monkeypatch):
    from kernelwright.ops.rms_norm_bwd import triton as bwd
    from kernelwright.ops.rms_norm_bwd.triton import norm_backward

    if paired and kind != "layer":
        pytest.skip("PAIRED_SUMS acts on layer norm's two row sums only")
    monkeypatch.setattr(bwd, "WEIGHT_HOLD", hold)
    monkeypatch.setattr(bwd, "PAIRED_SUMS", paired)  # the two row sums in one tl.reduce (an experiment switch)
    monkeypatch.setattr(bwd, "WEIGHT_HOLD_FROM", 0)  # at any width here

    rows, cols, chunk = 3, 200, 64
    x, w, dy = torch.randn(rows, cols), torch.randn(cols), torch.randn(rows, cols)
    dh = torch.randn(rows, cols) if kind == "add_rms" else None
    center = kind == "layer"
    eps = 1e-5 if center else 1e-6  # the references' defaults
    mean = x.mean(-1) if center else torch.zeros(rows)
    rstd = torch.rsqrt((x - mean[:, None]).pow(2).mean(-1) + eps)
    xhat, g = (x - mean[:, None]) * rstd[:, None], dy * w
    n = -(-cols // chunk)
    slots = torch.empty(rows, n, dtype=torch.int64)
    for c in range(n):
        cs = slice(c * chunk, (c + 1) * chunk)
        hi = _bits(g[:, cs].sum(-1)) if center else torch.full((rows,), 0x3F800000, dtype=torch.int64)
        slots[:, c] = (hi << 32) | _bits((xhat[:, cs] * g[:, cs]).sum(-1))
    dx, dw, db = torch.full_like(x, float("nan")), torch.full_like(w, float("nan")), torch.full_like(w, float("nan"))
    norm_backward("split", x, w, dy, rstd, dx=dx, dw=dw, mean=mean if center else None, db=db if center else None,
                  dh=dh, split_chunk=chunk, slots=slots, groups=groups)
    if center:
        want = _grads64(ref_layer, x, w, torch.zeros(cols), dys=[dy])
    else:
        want = _grads64(ref_rms, x, w, dys=[dy])
    exp_dx = want[0] + (dh.double() if dh is not None else 0)
    torch.testing.assert_close(dx.double(), exp_dx, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(dw.double(), want[1], rtol=1e-4, atol=1e-4)
    if center:
        torch.testing.assert_close(db.double(), dy.double().sum(0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("per_tile,paired", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("kind", ["rms", "layer", "add_rms"])
def test_fused_backward_weight_gradient_per_tile_or_after_the_loop(kind, per_tile, paired, monkeypatch):
    # FUSED_DW_PER_TILE (an experiment switch): dweight and dbias summed over each tile's rows at once, or kept as
    # [rows, columns] accumulators and summed after the loop; several tiles a program, a ragged last tile.
    # PAIRED_SUMS (another): layer norm's two row sums in one two-operand tl.reduce
    from kernelwright.ops.rms_norm_bwd import triton as bwd
    from kernelwright.ops.rms_norm_bwd.triton import norm_backward

    if paired and kind != "layer":
        pytest.skip("PAIRED_SUMS acts on layer norm's two row sums only")
    monkeypatch.setattr(bwd, "FUSED_DW_PER_TILE", per_tile)
    monkeypatch.setattr(bwd, "PAIRED_SUMS", paired)
    dev = runtime.current_device()
    rows, cols = 117, 160  # 16-row tiles at this width: 8 tiles over the interpreter's 3 programs
    x, w, dy = (torch.randn(*s, device=dev) for s in ((rows, cols), (cols,), (rows, cols)))
    dh = torch.randn(rows, cols, device=dev) if kind == "add_rms" else None
    center = kind == "layer"
    eps = 1e-5 if center else 1e-6
    mean = x.mean(-1) if center else None
    rstd = torch.rsqrt((x - (mean[:, None] if center else 0)).pow(2).mean(-1) + eps)
    dx, dw, db = (torch.full_like(t, float("nan")) for t in (x, w, w))
    norm_backward("fused", x, w, dy, rstd, dx=dx, dw=dw, mean=mean, db=db if center else None, dh=dh)
    x, w, dy = x.cpu(), w.cpu(), dy.cpu()
    want = _grads64(ref_layer, x, w, torch.zeros(cols), dys=[dy]) if center else _grads64(ref_rms, x, w, dys=[dy])
    exp_dx = want[0] + (dh.cpu().double() if dh is not None else 0)
    torch.testing.assert_close(dx.cpu().double(), exp_dx, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(dw.cpu().double(), want[1], rtol=1e-4, atol=1e-4)
    if center:
        torch.testing.assert_close(db.cpu().double(), dy.double().sum(0), rtol=1e-5, atol=1e-5)


# --- the compiled (GPU) path, without a GPU: the interpreter accepts code the compiler rejects ---------------------
_BF16 = "*bf16"


@pytest.mark.parametrize("kernel", ["fwd_fused", "fwd_fused_narrow", "fwd_split", "fwd_split_wide",
                                    "fwd_split_wide_layer", "bwd_fused", "bwd_fused_narrow", "bwd_split",
                                    "bwd_split_wide", "bwd_fused_narrow_paired", "bwd_split_wide_paired",
                                    "fwd_split_wide_fast", "fwd_split_wide_layer_fast", "fwd_fused_early",
                                    "fwd_fused_layer", "fwd_fused_sumfirst", "fwd_split_wide_layer_onepass",
                                    "fwd_fused_reload"])
def test_kernels_compile_for_sm90_without_spilling_much(kernel, monkeypatch):
    from kernelwright.harness.inspect import compile_triton, disassemble, read_cubin
    from kernelwright.ops.rms_norm import triton as fwd
    from kernelwright.ops.rms_norm_bwd import triton as bwd

    ints = {n: "i32" for n in ("n_rows", "n_cols", "x_stride", "res_stride", "y_stride", "h_stride", "dy_stride",
                               "dh_stride", "dx_stride")}
    if kernel.startswith("fwd"):
        sig = dict(x_ptr=_BF16, res_ptr=_BF16, w_ptr=_BF16, b_ptr=_BF16, y_ptr=_BF16, h_ptr=_BF16, mean_ptr="*fp32",
                   rstd_ptr="*fp32", eps="fp32")
        flags = dict(CENTER=True, RESIDUAL=True, STORE_H=True, OFFSET=True, SAVE_STATS=True)
        if kernel.endswith("layer"):  # layer norm as the library launches it: no residual, a register cap
            flags.update(RESIDUAL=False, STORE_H=False)
    else:
        sig = dict(x_ptr=_BF16, w_ptr=_BF16, dy_ptr=_BF16, dh_ptr=_BF16, mean_ptr="*fp32", rstd_ptr="*fp32",
                   dx_ptr=_BF16, dw_ptr="*fp32", db_ptr="*fp32")
        flags = dict(CENTER=True, DH=True, OFFSET=True)
    paired = kernel.endswith("_paired")  # PAIRED_SUMS (layer norm's two row sums in one reduction)
    fast = kernel.endswith("_fast")  # FAST_STATS (the split forward's chunk statistics, one reduction fewer)
    early = kernel.endswith("_early")  # FUSED_BIAS_EARLY (the fused forward's bias loaded with the weight)
    sum_first = kernel.endswith("_sumfirst")  # FUSED_SUM_FIRST (add_rms_norm: one unscaled sum, no centring)
    one_pass = kernel.endswith("_onepass")  # SPLIT_ONE_PASS (layer norm's M2 from the same reduction)
    reload = kernel.endswith("_reload")  # FUSED_RELOAD (rms_norm: x read again from L2 for the output)
    fast = fast or one_pass
    if sum_first:
        flags.update(CENTER=False)
    if reload:  # as the library launches it: rms_norm's rows only, 16384 x 8192's tile
        flags.update(CENTER=False, RESIDUAL=False, STORE_H=False)
    kernel = kernel.removesuffix("_paired").removesuffix("_fast").removesuffix("_early").removesuffix("_sumfirst")
    kernel = kernel.removesuffix("_onepass").removesuffix("_reload")
    if kernel.startswith("fwd_fused"):
        width = 1024 if kernel.endswith("narrow") else 8192 if reload else 4096
        rows, block, warps = fwd.fused_tile(width, center=kernel.endswith("layer"))
        fn, cx = fwd._norm_fwd_fused_kernel, dict(BLOCK_R=rows, BLOCK=block)
    elif kernel.startswith("bwd_fused"):
        block, rows, warps = bwd.fused_bwd_config(1024 if kernel.endswith("narrow") else 4096, dh=True)
        fn, cx = bwd._norm_bwd_fused_kernel, dict(BLOCK_R=rows, BLOCK=block, PREFETCH=True,
                                                  DW_PER_TILE=bwd.FUSED_DW_PER_TILE)
    else:  # the configurations at 16384 columns (one chunk) and at 262144 (the wide one, with its cache hints)
        mod = fwd if kernel.startswith("fwd") else bwd
        fn = fwd._norm_fwd_split_kernel if kernel.startswith("fwd") else bwd._norm_bwd_split_kernel
        width = 262144 if "wide" in kernel else 16384
        with monkeypatch.context() as m:  # the GPU's configuration, not the interpreter's one chunk a row
            m.setattr("kernelwright.runtime.interpreting", lambda: False)
            chunk, warps, hints = mod.split_config(width)
        n = width // chunk
        cx = dict(N_CHUNKS=n, CHUNKS_POW2=n, CHUNK=chunk, EVICT=hints[0], STORE_CACHE=hints[1],
                  W_EVICT=fwd.WEIGHT_EVICT, W_HOLD=mod.WEIGHT_HOLD and width >= getattr(mod, "WEIGHT_HOLD_FROM", 0))
        sig["slot_ptr"] = "*i64"
    if "PAIRED_SUMS" in fn.arg_names:
        cx["PAIRED_SUMS"] = paired
    if "FAST" in fn.arg_names:
        cx["FAST"] = fast
    if "ONE_PASS" in fn.arg_names:
        cx["ONE_PASS"] = one_pass
    if "BIAS_EARLY" in fn.arg_names:
        cx["BIAS_EARLY"] = early
    if "SUM_FIRST" in fn.arg_names:
        cx["SUM_FIRST"] = sum_first
    if "RELOAD" in fn.arg_names:
        cx["RELOAD"] = reload
    names = set(fn.arg_names) - set(sig) - set(flags) - set(cx)
    # as the JIT compiles them at launch: pointers, the row length and the row strides divisible by 16
    aligned = [n for n, t in sig.items() if t.startswith("*")] + [n for n in names if n != "n_rows"]
    cap = fwd.WIDE_LAYER_MAXNREG if kernel.startswith("fwd_split") and kernel.endswith("layer") else None
    art = compile_triton(fn, {**sig, **{n: ints[n] for n in names}}, {**flags, **cx}, num_warps=warps,
                         aligned=aligned, maxnreg=cap)
    res = read_cubin(art.cubin, art.kernel)
    assert res.registers * 32 * warps <= 65536  # one program fits an SM
    assert cap is None or res.registers <= cap
    assert res.stack_bytes <= 512, f"{res.stack_bytes} bytes of spills"
    sass, _, _ = disassemble(art.cubin, art.kernel)
    if sass is not None:  # cuobjdump found: no bf16 value (of a row or of the weight) is loaded on its own
        narrow = sorted({op for op in (line.split()[0] for line in sass if line.strip())
                         if op.startswith("LDG") and "16" in op.split(".")[-1] and not op.endswith("128")})
        assert not narrow, f"16-bit global loads {narrow}: a stride the compiler cannot see is 1?"
        if reload:  # x's second read is there (evict_first), not merged into the first by the compiler
            ops = [line.split()[0] for line in sass if line.strip()]
            assert ops.count("LDG.E.EF.128") >= 1 and ops.count("LDG.E.EL.128") >= 2, sorted(set(ops))


# --- modules ------------------------------------------------------------------------------------------------------
def test_rms_norm_module_loads_a_llama_state_dict_and_trains():
    m = knn.RMSNorm(64, eps=1e-5)
    assert set(m.state_dict()) == {"weight"} and torch.equal(m.weight, torch.ones(64))
    w = torch.randn(64)
    m.load_state_dict({"weight": w})
    assert m.variance_epsilon == 1e-5
    x = torch.randn(2, 5, 64, requires_grad=True)
    y = m(x)
    close(y, ref_rms(x.detach(), w, 1e-5))
    y.sum().backward()
    assert m.weight.grad is not None and x.grad is not None
    gemma = knn.RMSNorm(64, offset=True)
    assert torch.equal(gemma.weight, torch.zeros(64))
    close(gemma(x.detach()), ref_rms(x.detach(), torch.zeros(64), offset=True))
    # a float32 weight serves bfloat16 activations
    assert m(x.detach().bfloat16()).dtype == torch.bfloat16


@pytest.mark.parametrize(("shape", "affine", "bias"), [(48, True, True), ((4, 12), True, True), (48, True, False),
                                                       (48, False, True)])
def test_layer_norm_module_matches_torch(shape, affine, bias):
    ours = knn.LayerNorm(shape, eps=1e-5, elementwise_affine=affine, bias=bias)
    theirs = torch.nn.LayerNorm(shape, eps=1e-5, elementwise_affine=affine, bias=bias)
    with torch.no_grad():
        for p in theirs.parameters():
            p.normal_()
    assert set(ours.state_dict()) == set(theirs.state_dict())
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(3, 4, 12) if isinstance(shape, tuple) else torch.randn(3, 4, 48)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya, yb = ours(xa), theirs(xb)
    torch.testing.assert_close(ya, yb, rtol=2e-5, atol=2e-5)
    ya.square().sum().backward()
    yb.square().sum().backward()
    torch.testing.assert_close(xa.grad, xb.grad, rtol=1e-4, atol=1e-4)
    for pa, pb in zip(ours.parameters(), theirs.parameters(), strict=True):
        torch.testing.assert_close(pa.grad, pb.grad, rtol=1e-4, atol=1e-4)


# --- peers (run on the GPU by kw bench; their plumbing checked here with eager forwards) ---------------------------
@pytest.mark.parametrize("kind", ["rms_bwd", "layer_bwd", "add_rms_bwd"])
def test_backward_peers_compute_the_gradients(kind):
    fam = {"rms_bwd": "rms_norm_bwd", "layer_bwd": "layer_norm_bwd", "add_rms_bwd": "add_rms_norm_bwd"}[kind]
    from kernelwright.harness.inputs import generator
    from kernelwright.harness.verify import compare_outputs, error_scale, reference64
    from kernelwright.registry import get_family

    family = get_family(fam)
    eager = {"rms_bwd": nc.eager_rms_norm, "layer_bwd": nc.eager_layer_norm,
             "add_rms_bwd": nc.eager_add_rms_norm}[kind]
    run = nc.grad_peer(eager, kind)
    gen, _ = generator(runtime.current_device(), 7)
    case = family.make_case((4, 33), torch.float32, runtime.current_device(), gen, offset=kind != "layer_bwd") \
        if kind != "layer_bwd" else family.make_case((4, 33), torch.float32, runtime.current_device(), gen)
    for _ in range(2):  # the second call reuses the kept forward graph
        got = run(*case.args, **case.kwargs)
        cmp = compare_outputs(family, got, reference64(family, case), error_scale(family, case), torch.float32)
        assert cmp.ok, cmp.reason


def test_liger_peer_reports_itself_unavailable_without_liger_or_gpu():
    from kernelwright.errors import Unavailable
    from kernelwright.registry import get_family

    for name in ("rms_norm", "layer_norm", "add_rms_norm", "rms_norm_bwd"):
        liger = [p for p in get_family(name).peers if p.name == "liger"][0]
        try:
            liger.make()
        except Unavailable as e:
            assert "liger" in str(e)


# --- errors -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda: ops.rms_norm(torch.randn(3, 4), torch.randn(5)), "weight: expected shape (4,)"),
        (lambda: ops.rms_norm(torch.randn(3, 4), torch.randn(4, dtype=torch.float16)), "weight: expected dtype "
                                                                                       "float32 like x"),
        (lambda: ops.rms_norm(torch.arange(4), torch.randn(4)), "x: expected dtype float32, float16"),
        (lambda: ops.rms_norm(torch.tensor(1.0), torch.randn(1)), "x: expected a tensor with at least one"),
        (lambda: ops.rms_norm([1.0], torch.randn(1)), "x: expected a torch.Tensor"),
        (lambda: ops.rms_norm(torch.randn(3, 4), torch.randn(4), eps=-1.0), "eps: expected a finite number >= 0"),
        (lambda: ops.rms_norm(torch.randn(3, 4), torch.randn(4), eps=True), "eps: expected a finite number"),
        (lambda: ops.rms_norm(torch.randn(3, 4), torch.randn(4), offset=1), "offset: expected a bool"),
        (lambda: ops.rms_norm(torch.randn(3, 4), torch.randn(4), variant=3), "variant: expected a rung name"),
        (lambda: ops.rms_norm(torch.randn(3, 4), torch.randn(4), variant="bogus"),
         "variant: family 'rms_norm' has no rung 'bogus'"),
        (lambda: ops.rms_norm(torch.randn(2, 40000), torch.randn(40000), variant="fused"), "exceeds 32768"),
        (lambda: ops.layer_norm(torch.randn(3, 4), torch.randn(4), torch.randn(3)), "bias: expected shape (4,)"),
        (lambda: ops.layer_norm(torch.randn(3, 4), torch.randn(4), torch.randn(4).double()), "bias: expected dtype"),
        (lambda: ops.layer_norm(torch.randn(3, 4, dtype=torch.float64), torch.randn(4), torch.randn(4)),
         "x: expected dtype float32"),
        (lambda: ops.layer_norm(torch.randn(3, 4), torch.randn(4), torch.randn(4), variant="chunky"),
         "has no rung 'chunky'"),
        (lambda: ops.add_rms_norm(torch.randn(3, 4), torch.randn(4, 3), torch.randn(4)), "residual: expected shape"),
        (lambda: ops.add_rms_norm(torch.randn(3, 4), torch.randn(3, 4).half(), torch.randn(4)),
         "residual: expected dtype float32 like x"),
        (lambda: ops.add_rms_norm(torch.randn(3, 4), torch.randn(3, 4), torch.randn(4), variant="chunked"),
         "has no rung 'chunked'"),
        (lambda: rms_norm_backward(torch.randn(3, 4), torch.randn(3, 4), torch.randn(4), torch.randn(3).double()),
         "rstd: expected a float32 tensor of shape (3,)"),
        (lambda: rms_norm_backward(torch.randn(3, 5), torch.randn(3, 4), torch.randn(4), torch.randn(3)),
         "dy: expected shape (3, 4)"),
        (lambda: knn.RMSNorm(0), "hidden_size: expected an int >= 1"),
        (lambda: knn.LayerNorm((4, 0)), "normalized_shape: expected an int or a tuple"),
        (lambda: knn.LayerNorm(8)(torch.randn(3, 4)), "x: expected trailing dims (8,)"),
    ],
)
def test_bad_input_names_the_argument(call, needle):
    with pytest.raises(UsageError) as e:
        call()
    assert needle in str(e.value)


# --- GPU only: the split exchange with real partners, many rows per program ------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("family", ["rms_norm", "layer_norm", "add_rms_norm", "rms_norm_bwd", "layer_norm_bwd",
                                    "add_rms_norm_bwd"])
def test_split_rungs_on_gpu_with_many_rows(family):
    from kernelwright.harness.verify import verify
    from kernelwright.registry import get_family

    fam = get_family(family)
    results = verify(fam, [fam.rung("split")], [torch.bfloat16, torch.float32], device="cuda",
                     shapes=[((4000, 20000), {}), ((300, 262144), {}), ((2, 3, 65537), {})])
    bad = [r for r in results if not r.ok]
    assert not bad, "\n".join(f"{r.shape} {r.layout} {r.dist}: {r.reason}" for r in bad)


def test_fused_fast_default_follows_the_measured_choice(monkeypatch):
    """FUSED_FAST None: the fused forward's fast statistics on the GPU (run 75: never slower in a pair), off under
    the interpreter (its sequential tl.reduce); True / False force it either way."""
    from kernelwright.ops.rms_norm import triton as fwd

    monkeypatch.setattr(fwd, "FUSED_FAST", None)
    monkeypatch.setattr(fwd.runtime, "interpreting", lambda: True)
    assert fwd.fused_fast() is False
    monkeypatch.setattr(fwd.runtime, "interpreting", lambda: False)
    assert fwd.fused_fast() is True
    monkeypatch.setattr(fwd, "FUSED_FAST", False)
    assert fwd.fused_fast() is False


def test_fast_stats_default_follows_the_measured_choice(monkeypatch):
    """FAST_STATS None: the split forward's fast statistics where H200 runs 41-42 measured them faster (layer norm up
    to 65536 columns, rms beyond, never with a residual); True / False force it either way."""
    from kernelwright.ops.rms_norm import triton as fwd
    from kernelwright.ops.rms_norm_bwd import triton as bwd

    monkeypatch.setattr(fwd, "FAST_STATS", None)
    monkeypatch.setattr(bwd, "PAIRED_SUMS", None)
    # under the interpreter both are off unless forced (its tl.reduce folds sequentially: fp32 error grows with n)
    monkeypatch.setattr(fwd.runtime, "interpreting", lambda: True)
    assert not any(fwd.fast_stats(c, False, n) for c in (True, False) for n in (16384, 65536, 262144))
    assert bwd.paired_sums() is False
    monkeypatch.setattr(fwd.runtime, "interpreting", lambda: False)
    assert bwd.paired_sums() is True
    assert [fwd.fast_stats(True, False, n) for n in (16384, 65536, 262144)] == [True, True, False]
    assert [fwd.fast_stats(False, False, n) for n in (16384, 65536, 262144)] == [False, False, True]
    assert not any(fwd.fast_stats(False, True, n) for n in (16384, 65536, 262144))
    for forced in (True, False):
        monkeypatch.setattr(fwd, "FAST_STATS", forced)
        assert all(fwd.fast_stats(c, r, 65536) is forced for c in (True, False) for r in (True, False))
        monkeypatch.setattr(bwd, "PAIRED_SUMS", forced)
        assert bwd.paired_sums() is forced


@pytest.mark.gpu
@pytest.mark.skipif(not runtime.is_hopper(), reason="needs a Hopper GPU (run with KW_DEVICE=cuda on an H100/H200)")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("cols", [1024, 8192, 16384, 65536, 262144])
def test_public_ops_through_the_choice_forward_and_backward_on_hopper(dtype, cols):
    # variant=None takes the CUDA cluster rungs at these widths (sessions 15-16, nc.cluster_leads and
    # nc.bwd_cluster_leads): the public ops' forward, the statistics it saves for the backward, and the gradients,
    # against float64 with the families' own tolerances and error scales; rows that do not start on 16 bytes keep
    # the Triton rungs
    from kernelwright.harness.verify import compare

    rows = 48
    x = (torch.randn(2, rows // 2, cols, device="cuda") * 2 + 1).to(dtype)
    w, b = torch.randn(cols, device="cuda").to(dtype), torch.randn(cols, device="cuda").to(dtype)
    dy = torch.randn(2, rows // 2, cols, device="cuda").to(dtype)
    # (rms_norm: to 65536 in 16-bit types, to 262144 in bf16 since session 25)
    rms_cluster = 8192 <= cols <= {torch.bfloat16: 262144, torch.float32: 16384}.get(dtype, 65536)
    assert (nc.pick("rms_norm", None, x, {"eps": 1e-6}).name == "cluster") is rms_cluster
    assert (nc.pick("layer_norm", None, x, {"eps": 1e-5}).name == "cluster") is (8192 <= cols <= 16384)
    bf16 = dtype == torch.bfloat16
    assert (nc.pick("rms_norm_bwd", None, x, {"eps": 1e-6}).name == "cluster") is bf16
    assert (nc.pick("layer_norm_bwd", None, x, {"eps": 1e-5}).name == "cluster") is bf16
    assert (nc.pick("add_rms_norm_bwd", None, x, {"eps": 1e-6}).name == "cluster") is bf16
    unaligned = torch.randn(rows, cols + 1, device="cuda").to(dtype)[:, 1:]
    assert nc.pick("rms_norm", None, unaligned, {"eps": 1e-6}).name != "cluster"
    x64, w64, b64, dy64 = (t.double() for t in (x, w, b, dy))
    fwd_tol, bwd_tol = nc.FORWARD_TOLERANCES[dtype], nc.BACKWARD_TOLERANCES[dtype]

    def check(got, want, tol, scale, what):
        cmp = compare(got, want, tol, scale)
        assert cmp.ok, f"{what} {cols} {dtype}: {cmp.reason}"

    for offset in (False, True):
        xr, wr = x.detach().requires_grad_(), w.detach().requires_grad_()
        y = ops.rms_norm(xr, wr, offset=offset)
        check(y, ref_rms(x64, w64, offset=offset), fwd_tol, None, f"rms y offset={offset}")
        torch.autograd.backward(y, dy)
        want = _grads64(lambda a, c, o=offset: ref_rms(a, c, offset=o), x, w, dys=[dy])
        scales = nc.error_scale_for("rms_bwd")(x64, w64, dy64, eps=1e-6, offset=offset)
        check(xr.grad, want[0], bwd_tol, scales[0], f"rms dx offset={offset}")
        check(wr.grad, want[1], bwd_tol, scales[1], f"rms dw offset={offset}")
    xr, wr, br = (t.detach().requires_grad_() for t in (x, w, b))
    y = ops.layer_norm(xr, wr, br)
    check(y, ref_layer(x64, w64, b64), fwd_tol, nc.error_scale_for("layer")(x64, w64, b64, eps=1e-5), "layer y")
    torch.autograd.backward(y, dy)
    want = _grads64(ref_layer, x, w, b, dys=[dy])
    scales = nc.error_scale_for("layer_bwd")(x64, w64, dy64, eps=1e-5)
    for got, exp, scale, what in zip((xr.grad, wr.grad, br.grad), want, scales, ("dx", "dw", "db"), strict=True):
        check(got, exp, bwd_tol, scale, f"layer {what}")


def test_fused_forward_tiles_follow_the_measured_rules():
    from kernelwright.ops.rms_norm import triton as fwd

    assert fwd.fused_tile(1024) == (2, 1024, 4)  # the narrow rule: 2048-value tiles over 4 warps
    assert fwd.fused_tile(4096, center=True) == (1, 4096, 4) and fwd.fused_tile(4096) == (1, 4096, 8)
    # layer norm's 16-bit 1024-column rows in grids of 65536 rows or more: one warp a row (runs 89-90)
    assert fwd.fused_tile(1024, center=True, elt=2, rows=65536) == (2, 1024, 2)
    assert fwd.fused_tile(1000, center=True, elt=2, rows=100000) == (2, 1024, 2)
    assert fwd.fused_tile(1024, center=True, elt=2, rows=16384) == (2, 1024, 4)  # fewer rows: it lost there
    assert fwd.fused_tile(1024, center=False, rows=65536) == (2, 1024, 4)  # rms / add_rms keep the rule
    assert fwd.fused_tile(1024, center=True, elt=4, rows=65536) == (2, 1024, 4)  # fp32: not timed
    assert fwd.fused_tile(512, center=True, elt=2, rows=65536) == (4, 512, 4)
