"""swiglu, rope and cross_entropy as users call them: values and gradients against float64 torch, layouts, the
modules, in-place paths, torch.compile, and every error path. (Each rung against its reference on fuzzed shapes
is in test_ladders.py.)"""

import pytest
import torch
import torch.nn.functional as F

from kernelwright import nn as kwnn
from kernelwright import ops, runtime
from kernelwright.errors import UsageError
from kernelwright.ops.cross_entropy import triton as ce_triton
from kernelwright.ops.rope.reference import rope as rope_reference


@pytest.fixture(autouse=True)
def _tensors_on_the_test_device():
    torch.set_default_device(runtime.current_device())
    yield
    torch.set_default_device("cpu")


def _close(got, want, rtol=2e-5, atol=1e-6):
    torch.testing.assert_close(got.double(), want.double(), rtol=rtol, atol=atol)


def _leaf64(t):
    return t.detach().double().requires_grad_()


# --- swiglu ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", ["naive", "fused", "vectorized", None])
def test_swiglu_values_and_gradients(variant):
    gate = torch.randn(3, 5, 70, requires_grad=True)
    up = torch.randn(3, 5, 70, requires_grad=True)
    y = ops.swiglu(gate, up, variant=variant)
    dy = torch.randn_like(y)
    y.backward(dy)
    g64, u64 = _leaf64(gate), _leaf64(up)
    y64 = F.silu(g64) * u64
    y64.backward(dy.double())
    _close(y, y64)
    _close(gate.grad, g64.grad)
    _close(up.grad, u64.grad)


def test_swiglu_reads_the_halves_of_a_projection_in_place():
    # gate and up as the two halves of one [T, 2I] tensor: row stride 2I, unit column stride
    x = torch.randn(6, 2 * 48)
    gate, up = x[:, :48], x[:, 48:]
    _close(ops.swiglu(gate, up, variant="vectorized"), F.silu(gate.double()) * up.double())
    xt = torch.randn(48, 6).t()  # transposed: column stride 6
    _close(ops.swiglu(xt, xt), F.silu(xt.double()) * xt.double())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_swiglu_extreme_gates_stay_finite(dtype):
    gate = torch.tensor([1e4, -1e4, 3e4, -3e4, 0.0], dtype=dtype)
    up = torch.ones(5, dtype=dtype)
    y = ops.swiglu(gate, up)
    assert torch.isfinite(y).all()
    _close(y, F.silu(gate.double()) * up.double(), rtol=2**-7, atol=0)


def test_silu_and_mul_module_gate_is_the_first_half():
    x = torch.randn(2, 3, 2 * 40, requires_grad=True)
    y = kwnn.SiluAndMul()(x)
    dy = torch.randn_like(y)
    y.backward(dy)
    x64 = _leaf64(x)
    y64 = F.silu(x64[..., :40]) * x64[..., 40:]
    y64.backward(dy.double())
    assert y.shape == (2, 3, 40)
    _close(y, y64)
    _close(x.grad, x64.grad)


def test_swiglu_empty_and_scalar():
    assert ops.swiglu(torch.empty(0, 7), torch.empty(0, 7)).shape == (0, 7)
    _close(ops.swiglu(torch.tensor(2.0), torch.tensor(3.0)), F.silu(torch.tensor(2.0).double()) * 3)


def test_swiglu_under_torch_compile():
    gate = torch.randn(4, 24, requires_grad=True)
    up = torch.randn(4, 24)
    f = torch.compile(lambda g, u: (ops.swiglu(g, u) * 2).sum(), backend="aot_eager", fullgraph=True)
    f(gate, up).backward()
    g64 = _leaf64(gate)
    (F.silu(g64) * up.double() * 2).sum().backward()
    _close(gate.grad, g64.grad)


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda: ops.swiglu(torch.randn(3), torch.randn(4)), "up: expected shape (3,)"),
        (lambda: ops.swiglu(torch.randn(3), torch.randn(3, dtype=torch.float16)), "up: expected dtype float32"),
        (lambda: ops.swiglu(torch.arange(3), torch.arange(3)), "gate: expected dtype"),
        (lambda: ops.swiglu(torch.randn(3), torch.randn(3), variant="best"), "variant: family 'swiglu' has no rung"),
        (lambda: ops.swiglu(torch.randn(3, requires_grad=True), torch.randn(3), out=torch.empty(3)), "out: not"),
        (lambda: kwnn.silu_and_mul(torch.randn(3, 5)), "x: expected a last dim of even size"),
    ],
)
def test_swiglu_bad_input_names_the_argument(call, needle):
    with pytest.raises(UsageError) as e:
        call()
    assert needle in str(e.value)


# --- rope ------------------------------------------------------------------------------------------------------------
def _hf_tables(positions, d, dtype=torch.float32):
    inv = 10000.0 ** (-torch.arange(0, d, 2).double() / d)
    freqs = positions.double()[..., None] * inv
    emb = torch.cat((freqs, freqs), -1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _hf_apply(q, k, cos, sin, unsqueeze_dim=1):
    # transformers' apply_rotary_pos_emb, written out
    def rotate_half(x):
        x1, x2 = x.chunk(2, -1)
        return torch.cat((-x2, x1), -1)

    if cos.dim() == 2:  # [S, D]: one batch for all
        cos, sin = cos[None], sin[None]
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


@pytest.mark.parametrize("variant", ["naive", "fused", "token", None])
@pytest.mark.parametrize("cos_batch", [1, 2], ids=["cos-batch-1", "cos-per-batch"])
def test_rope_matches_hugging_face(variant, cos_batch):
    b, h, kh, s, d = 2, 4, 2, 7, 16
    q, k = torch.randn(b, h, s, d), torch.randn(b, kh, s, d)
    cos, sin = _hf_tables(torch.arange(s).expand(cos_batch, s) + torch.arange(cos_batch)[:, None] * 3, d)
    qo, ko = ops.rope(q, k, cos, sin, variant=variant)
    q64, k64 = _hf_apply(q.double(), k.double(), cos.double(), sin.double())
    _close(qo, q64)
    _close(ko, k64)
    # the patch helper, in both of transformers' layouts
    for unsqueeze_dim in (1, 2):
        qq, kk = (q, k) if unsqueeze_dim == 1 else (q.transpose(1, 2), k.transpose(1, 2))
        got = kwnn.apply_rotary_pos_emb(qq, kk, cos, sin, unsqueeze_dim=unsqueeze_dim)
        want = _hf_apply(qq.double(), kk.double(), cos.double(), sin.double(), unsqueeze_dim)
        _close(got[0], want[0])
        _close(got[1], want[1])


@pytest.mark.parametrize("interleaved", [False, True], ids=["half-split", "interleaved"])
@pytest.mark.parametrize("width", ["full", "half"])
@pytest.mark.parametrize("pos_shape", [None, "seq", "batch-seq"])
def test_rope_layouts_tables_and_positions(interleaved, width, pos_shape):
    # independent angles for every element (c1 != c2) catch a kernel that reads one slot for both
    b, s, h, kh, d, t = 2, 5, 3, 1, 12, 9
    q, k = torch.randn(b, s, h, d), torch.randn(b, s, kh, d)
    cd = d if width == "full" else d // 2
    if pos_shape is None:
        cos, sin, positions = torch.randn(b, s + 2, cd), torch.randn(b, s + 2, cd), None  # S' > S: rows 0..S-1
    else:
        cos, sin = torch.randn(t, cd), torch.randn(t, cd)
        positions = torch.randint(0, t, (s,) if pos_shape == "seq" else (b, s))
    qo, ko = ops.rope(q, k, cos, sin, positions, interleaved, qk_layout="bshd")
    q64, k64 = rope_reference(q.double(), k.double(), cos.double(), sin.double(), positions, interleaved, "bshd")
    _close(qo, q64)
    _close(ko, k64)


def test_rope_gradients_and_inplace_through_views():
    b, s, h, kh, d = 2, 6, 4, 2, 8
    cos, sin = _hf_tables(torch.arange(s), d)
    x = torch.randn(b, s, h * d, requires_grad=True)
    kv = torch.randn(b, s, kh * d, requires_grad=True)
    # q and k as transformers makes them: a projection viewed and transposed to [B, H, S, D]
    q = (x * 1).view(b, s, h, d).transpose(1, 2)
    k = (kv * 1).view(b, s, kh, d).transpose(1, 2)
    qo, ko = ops.rope(q, k, cos, sin, inplace=True)
    assert qo is q and ko is k
    dq, dk = torch.randn_like(qo), torch.randn_like(ko)
    torch.autograd.backward((qo, ko), (dq, dk))
    x64, kv64 = _leaf64(x), _leaf64(kv)
    q64, k64 = _hf_apply(x64.view(b, s, h, d).transpose(1, 2), kv64.view(b, s, kh, d).transpose(1, 2),
                         cos.double(), sin.double())
    torch.autograd.backward((q64, k64), (dq.double(), dk.double()))
    _close(qo, q64)
    _close(x.grad, x64.grad)
    _close(kv.grad, kv64.grad)


def test_rope_inplace_without_grad_writes_q_and_k():
    q, k = torch.randn(1, 2, 3, 8), torch.randn(1, 1, 3, 8)
    cos, sin = _hf_tables(torch.arange(3), 8)
    want = _hf_apply(q.double(), k.double(), cos.double(), sin.double())
    qo, ko = ops.rope(q, k, cos, sin, inplace=True)
    assert qo is q and ko is k
    _close(q, want[0])
    _close(k, want[1])


def test_rotary_embedding_module_with_positions():
    rot = kwnn.RotaryEmbedding(head_dim=16, max_positions=32)
    q, k = torch.randn(2, 4, 5, 16), torch.randn(2, 2, 5, 16)
    positions = torch.tensor([[3, 4, 5, 6, 7], [0, 1, 2, 30, 31]])
    qo, ko = rot(q, k, positions)
    cos, sin = _hf_tables(positions, 16)  # [B, S, D], what transformers would gather
    want = _hf_apply(q.double(), k.double(), cos.double(), sin.double())
    _close(qo, want[0])
    _close(ko, want[1])


def test_rope_under_torch_compile():
    q = torch.randn(1, 2, 4, 8, requires_grad=True)
    k = torch.randn(1, 1, 4, 8)
    cos, sin = _hf_tables(torch.arange(4), 8)
    f = torch.compile(lambda q, k: sum(t.square().sum() for t in ops.rope(q, k, cos, sin)), backend="aot_eager",
                      fullgraph=True)
    f(q, k).backward()
    q64 = _leaf64(q)
    sum(t.square().sum() for t in _hf_apply(q64, k.double(), cos.double(), sin.double())).backward()
    _close(q.grad, q64.grad)


def _qkcs(d=8, s=4, dtype=torch.float32):
    cos, sin = _hf_tables(torch.arange(s), d, dtype)
    return torch.randn(2, 3, s, d, dtype=dtype), torch.randn(2, 1, s, d, dtype=dtype), cos, sin


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda q, k, c, s: ops.rope(q, k, torch.randn(9, 8), torch.randn(9, 8), torch.tensor([0, 3, 9, 1])),
         "cos: 9 rows (and sin), shorter than the positions"),
        (lambda q, k, c, s: ops.rope(q, k, c[:3], s[:3]), "cos: 3 rows (and sin), shorter than the sequence"),
        (lambda q, k, c, s: ops.rope(q, k, c[..., :6], s[..., :6]), "cos: expected [..., rows, D]"),
        (lambda q, k, c, s: ops.rope(q, k.half(), c, s), "k: expected float32"),
        (lambda q, k, c, s: ops.rope(q, k[..., :6], c, s), "k: expected the batch dims"),
        (lambda q, k, c, s: ops.rope(q.bfloat16(), k.bfloat16(), c.half(), s.half()), "cos: expected dtype bfloat16"),
        (lambda q, k, c, s: ops.rope(q, k, c, s.half()), "sin: expected float32 of shape (4, 8)"),
        (lambda q, k, c, s: ops.rope(q, k, c, s, torch.arange(4.0)), "positions: expected an int32 or int64"),
        (lambda q, k, c, s: ops.rope(q, k, c, s, torch.arange(5)), "positions: expected [..., S] with S = 4"),
        (lambda q, k, c, s: ops.rope(q[..., :7], k[..., :7], c[..., :7], s[..., :7]), "q: expected an even head"),
        (lambda q, k, c, s: ops.rope(q, k, c, s, qk_layout="sbhd"), "qk_layout: expected one of bhsd, bshd"),
        (lambda q, k, c, s: ops.rope(q[0, 0], k[0, 0], c, s), "q: expected [..., H, S, D]"),
        (lambda q, k, c, s: ops.rope(q, k, torch.randn(3, 4, 8), torch.randn(3, 4, 8)), "cos: batch dims (3,)"),
        (lambda q, k, c, s: kwnn.apply_rotary_pos_emb(q, k, c, s, unsqueeze_dim=0), "unsqueeze_dim: expected 1"),
    ],
)
def test_rope_bad_input_names_the_argument(call, needle):
    with pytest.raises(UsageError) as e:
        call(*_qkcs())
    assert needle in str(e.value)


# --- cross_entropy ---------------------------------------------------------------------------------------------------
def _ce_case(n=9, v=300, scale=3.0):
    logits = torch.randn(n, v) * scale
    target = torch.randint(0, v, (n,))
    target[1] = -100
    return logits, target


@pytest.mark.parametrize("variant", ["naive", "online", "persistent", "split"])
@pytest.mark.parametrize(("reduction", "smoothing"), [("mean", 0.0), ("mean", 0.1), ("sum", 0.0), ("none", 0.2)])
def test_cross_entropy_matches_torch_forward_and_backward(variant, reduction, smoothing):
    logits, target = _ce_case()
    x = logits.clone().requires_grad_()
    loss = ops.cross_entropy(x * 1, target, label_smoothing=smoothing, reduction=reduction, variant=variant)
    x64 = _leaf64(logits)
    loss64 = F.cross_entropy(x64, target, label_smoothing=smoothing, reduction=reduction)
    dloss = torch.rand_like(loss64) + 0.5  # not 1: the backward's scaling runs
    loss.backward(dloss.float())
    loss64.backward(dloss)
    assert loss.dtype == torch.float32
    _close(loss, loss64)
    _close(x.grad, x64.grad)


@pytest.mark.parametrize("variant", ["naive", "online", "persistent", "split"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_all_rows_ignored_gives_zero_not_nan(variant, reduction):
    x = torch.randn(4, 50, requires_grad=True)
    loss = ops.cross_entropy(x * 1, torch.full((4,), -100), reduction=reduction, variant=variant)
    loss.sum().backward()
    assert torch.equal(loss, torch.zeros_like(loss))
    assert torch.equal(x.grad, torch.zeros_like(x))


def test_cross_entropy_bf16_wide_vocabulary_matches_torch():
    logits, target = _ce_case(n=3, v=70000, scale=4.0)
    x = logits.bfloat16().requires_grad_()
    loss = ops.cross_entropy(x * 1, target)
    loss.backward()
    x64 = _leaf64(x)
    F.cross_entropy(x64, target).backward()
    _close(loss, F.cross_entropy(x.detach().double(), target), rtol=1e-5, atol=1e-6)
    _close(x.grad, x64.grad, rtol=2**-7, atol=1e-6)


def test_cross_entropy_overwrite_logits_is_where_the_gradient_goes():
    logits, target = _ce_case()
    x = logits.clone().requires_grad_()
    h = x * 1  # the logits tensor the loss sees (a non-leaf, as an lm_head's output)
    h.retain_grad()
    ops.cross_entropy(h, target).backward()
    x64 = _leaf64(logits)
    F.cross_entropy(x64, target).backward()
    _close(h.detach(), x64.grad)  # the logits' storage now holds the gradient ...
    _close(x.grad, x64.grad)      # ... which autograd passes on
    kept = logits.clone().requires_grad_()
    ops.cross_entropy(kept * 1, target, overwrite_logits=False).backward()
    _close(kept.grad, x64.grad)
    y = logits.clone()
    with torch.no_grad():
        ops.cross_entropy(y, target)
    assert torch.equal(y, logits), "without autograd the logits are only read"


def test_cross_entropy_overwrite_is_caught_when_the_logits_were_saved():
    # exp saves its output for its backward: overwriting it must fail loudly, not corrupt the gradient
    logits, target = _ce_case()
    h = logits.clone().requires_grad_().exp()
    loss = ops.cross_entropy(h, target)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_cross_entropy_scale_kernel_skips_a_unit_gradient():
    g = torch.randn(3, 10)
    before = g.clone()
    ce_triton.scale_rows_(g, torch.tensor(1.0))
    assert torch.equal(g, before)
    ce_triton.scale_rows_(g, torch.tensor([1.0, 2.0, 0.5]))
    _close(g, before * torch.tensor([1.0, 2.0, 0.5])[:, None])


def test_cross_entropy_under_torch_compile():
    logits, target = _ce_case(n=5, v=40)
    x = logits.clone().requires_grad_()
    f = torch.compile(lambda a: ops.cross_entropy(a * 2, target), backend="aot_eager", fullgraph=True)
    f(x).backward()
    x64 = _leaf64(logits)
    F.cross_entropy(x64 * 2, target).backward()
    _close(x.grad, x64.grad)


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda x, t: ops.cross_entropy(x, torch.tensor([0, 1, 2, 300, 4, 5, 6, 7, 8])), "target: expected class"),
        (lambda x, t: ops.cross_entropy(x, torch.tensor([0, -1, 2, 3, 4, 5, 6, 7, 8])), "got -1 at row 1"),
        (lambda x, t: ops.cross_entropy(x, t.float()), "target: expected an int64"),
        (lambda x, t: ops.cross_entropy(x, t[:4]), "target: expected shape (9,)"),
        (lambda x, t: ops.cross_entropy(x[None], t), "logits: expected [N, V]"),
        (lambda x, t: ops.cross_entropy(x.long(), t), "logits: expected dtype"),
        (lambda x, t: ops.cross_entropy(x, t, reduction="avg"), "reduction: expected one of mean, sum, none"),
        (lambda x, t: ops.cross_entropy(x, t, label_smoothing=1.5), "label_smoothing: expected a float in [0, 1]"),
        (lambda x, t: ops.cross_entropy(x, t, ignore_index=-1.0), "ignore_index: expected an int"),
        (lambda x, t: ops.cross_entropy(x[:, :0], t), "logits: expected at least one class"),
    ],
)
def test_cross_entropy_bad_input_names_the_argument(call, needle):
    with pytest.raises(UsageError) as e:
        call(*_ce_case())
    assert needle in str(e.value)


# --- all four ops in one torch.compile graph with the default backend (inductor) --------------------------------------
def test_inductor_compiles_a_block_using_every_op():
    x = torch.randn(4, 16, requires_grad=True)
    target = torch.randint(0, 8, (4,))
    cos, sin = _hf_tables(torch.arange(4), 8)

    def block(x):
        a = ops.swiglu(x[:, :8], x[:, 8:])                     # [4, 8]
        q, k = ops.rope(a.view(1, 1, 4, 8), a.view(1, 1, 4, 8) * 2, cos, sin)
        p = ops.softmax(q.view(4, 8) + k.view(4, 8), dim=-1)
        return ops.cross_entropy(p * 3, target)

    loss = torch.compile(block)(x)
    loss.backward()
    x64 = _leaf64(x)
    a = F.silu(x64[:, :8]) * x64[:, 8:]
    q, k = _hf_apply(a.view(1, 1, 4, 8), a.view(1, 1, 4, 8) * 2, cos.double(), sin.double())
    ref = F.cross_entropy(torch.softmax(q.view(4, 8) + k.view(4, 8), -1) * 3, target)
    ref.backward()
    _close(loss, ref)
    _close(x.grad, x64.grad)


# --- GPU: the memory target at a size the test suite can afford -------------------------------------------------------
@pytest.mark.gpu
def test_cross_entropy_extra_memory_under_ten_percent_of_the_logits():
    # full size (8192 x 128k) in benchmarks/experiments/cross_entropy_memory.py
    n, v = 2048, 128256
    logits = torch.randn(n, v, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    target = torch.randint(0, v, (n,), device="cuda")
    h = logits * 1  # the logits tensor of a model (a non-leaf)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    ops.cross_entropy(h, target).backward()
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - base
    # the backward of `* 1` (autograd's) makes logits.grad: one logits-sized buffer that is not ours
    assert extra - logits.numel() * logits.element_size() <= 0.10 * logits.numel() * logits.element_size()
