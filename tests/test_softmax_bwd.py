"""softmax's backward: ``kernelwright.ops.softmax`` is differentiable (every forward rung, any dim and layout,
torch.compile), its no-grad behaviour is unchanged, and the split rung's multi-chunk exchange runs on CPU.
(Each softmax_bwd rung against its reference on fuzzed shapes is in test_ladders.py.)"""

import pytest
import torch

from kernelwright import ops, runtime
from kernelwright.errors import UsageError
from kernelwright.ops.softmax_bwd import triton as sb


@pytest.fixture(autouse=True)
def _tensors_on_the_test_device():
    torch.set_default_device(runtime.current_device())
    yield
    torch.set_default_device("cpu")


def _grads(x, dim, dy, **kw):
    xl = x.detach().clone().requires_grad_()
    y = ops.softmax(xl, dim=dim, **kw)
    y.backward(dy)
    x64 = x.detach().double().requires_grad_()
    y64 = torch.softmax(x64, dim)
    y64.backward(dy.double())
    return y, xl.grad, y64, x64.grad


@pytest.mark.parametrize("variant", ["multipass", "fused", "online", "split", None])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_gradient_matches_float64(variant, dim):
    x = (torch.randn(5, 4, 33) * 3).transpose(0, 2)  # non-contiguous [33, 4, 5]
    dy = torch.randn(x.shape)
    y, dx, y64, dx64 = _grads(x, dim, dy, variant=variant)
    assert y.grad_fn is not None
    torch.testing.assert_close(y.double(), y64, rtol=2e-5, atol=1e-7)
    torch.testing.assert_close(dx.double(), dx64, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_softmax_gradient_low_precision_wide_row(dtype):
    # 40000 columns: past the fused rungs, forward and backward both take a wide rung
    x = torch.randn(2, 40000).to(dtype)
    dy = torch.randn(2, 40000).to(dtype)
    _, dx, _, dx64 = _grads(x, -1, dy)
    rtol = 2**-7 if dtype == torch.bfloat16 else 2**-10
    # dx = y (dy - sum): the forward's y is rounded to the dtype before the backward sees it, as in torch
    torch.testing.assert_close(dx.double(), dx64, rtol=4 * rtol, atol=1e-6)


def test_softmax_without_grad_is_unchanged():
    x = torch.randn(4, 10)
    y = ops.softmax(x)
    assert y.grad_fn is None and not y.requires_grad
    xg = x.clone().requires_grad_()
    with torch.no_grad():
        assert ops.softmax(xg).grad_fn is None
    out = torch.empty(4, 10)
    assert ops.softmax(x, out=out) is out


def test_softmax_out_with_grad_is_refused():
    with pytest.raises(UsageError, match="out: not supported when x requires grad"):
        ops.softmax(torch.randn(3, 4, requires_grad=True), out=torch.empty(3, 4))


def test_softmax_under_torch_compile():
    x = torch.randn(6, 20, requires_grad=True)
    w = torch.randn(20)
    f = torch.compile(lambda t: (ops.softmax(t * 2, dim=-1) * w).sum(), backend="aot_eager", fullgraph=True)
    f(x).backward()
    x64 = x.detach().double().requires_grad_()
    (torch.softmax(x64 * 2, -1) * w.double()).sum().backward()
    torch.testing.assert_close(x.grad.double(), x64.grad, rtol=2e-5, atol=1e-6)


def _word(part: torch.Tensor) -> int:
    return int(part.view(torch.int32)) & 0xFFFFFFFF


@pytest.mark.skipif(not runtime.interpreting(), reason="CPU interpreter test")
@pytest.mark.parametrize("groups", [None, 1, 2], ids=["row-per-group", "one-group", "two-groups"])
@pytest.mark.parametrize(("rows", "cols", "chunk"), [(3, 300, 128), (2, 257, 64), (5, 64, 32)])
def test_split_kernel_combines_partial_dot_products(rows, cols, chunk, groups):
    # The interpreter runs programs one after another, so the public rung uses one chunk a row there. Here the
    # slots hold each chunk's partial sum(y * dy) computed by torch before the launch, so every program finds its
    # partners' words and the unpacking, combine and chunk indexing of the GPU path run for real; a program
    # republishes its own slot from its own numbers first, so a packing bug reaches the later readers.
    groups = min(groups or rows, rows)
    y = torch.softmax(torch.randn(rows, cols), -1)
    dy = torch.randn(rows, cols)
    n_chunks = -(-cols // chunk)
    slots = torch.empty(rows, n_chunks, dtype=torch.int64)
    for r in range(rows):
        for c in range(n_chunks):
            seg = slice(c * chunk, (c + 1) * chunk)
            slots[r, c] = _word((y[r, seg] * dy[r, seg]).sum())
    dx = torch.full_like(y, float("nan"))
    sb._sbwd_split_kernel[(groups * n_chunks,)](
        y, dy, dx, slots, rows, cols, y.stride(0), dy.stride(0), dx.stride(0),
        N_CHUNKS=n_chunks, CHUNKS_POW2=1 << (n_chunks - 1).bit_length(), CHUNK=chunk)
    y64, dy64 = y.double(), dy.double()
    torch.testing.assert_close(dx.double(), y64 * (dy64 - (y64 * dy64).sum(-1, keepdim=True)), rtol=2e-5,
                               atol=1e-6)
