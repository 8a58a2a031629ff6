"""The activation family's public op: errors, autograd, custom op; its kw optimize site. The rungs themselves
are checked against float64 on fuzzed shapes by tests/test_ladders.py."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import kernelwright.ops as ops
from kernelwright.errors import UsageError
from kernelwright.ops.activation.reference import KINDS, activation

EAGER = {"silu": F.silu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "relu": F.relu}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("variant", [None, "fused", "wide"])
def test_matches_torch_at_extremes_and_keeps_nan(kind, variant, device):
    x = torch.tensor([0.0, -0.0, 1e-30, -1e-30, 3.0, -3.0, 60.0, -60.0, 1e30, -1e30, float("inf"), float("-inf"),
                      float("nan")], device=device)
    y = ops.activation(x, kind, variant=variant)
    ref = activation(x.double(), kind).float()
    assert torch.equal(y.isnan(), ref.isnan()), (y, ref)
    finite = ~ref.isnan()
    torch.testing.assert_close(y[finite], ref[finite], rtol=2e-5, atol=1e-30)


@pytest.mark.parametrize("kind", KINDS)
def test_gradient_is_torchs(kind, device):
    x = torch.randn(5, 77, dtype=torch.float64, device=device).float().requires_grad_()
    xr = x.detach().clone().requires_grad_()
    dy = torch.randn(5, 77, device=device)
    ops.activation(x, kind).backward(dy)
    EAGER[kind](xr).backward(dy)
    torch.testing.assert_close(x.grad, xr.grad)


def test_non_contiguous_input_and_out_buffer(device):
    x = torch.randn(64, 48, device=device).t() * 4
    out = torch.full((48, 64), float("nan"), device=device)
    assert ops.activation(x, "gelu", out=out) is out
    torch.testing.assert_close(out, activation(x.double(), "gelu").float(), rtol=2e-5, atol=1e-30)


def test_gelu_keeps_its_digits_far_in_the_negative_tail(device):
    # 0.5 x (1 + erf(x / sqrt 2)) in fp32 is 0 or a few ulps of 1 from x ~ -5.5 down: all digits lost
    x = -torch.linspace(3, 13, 101, device=device)
    y = ops.activation(x, "gelu")
    ref = activation(x.double(), "gelu")
    assert (y < 0).all()
    assert ((y.double() - ref).abs() / ref.abs()).max() < 2e-5


def test_bad_input_names_the_argument():
    x = torch.randn(4, 8)
    with pytest.raises(UsageError, match="kind"):
        ops.activation(x, "swish")
    with pytest.raises(UsageError, match="x"):
        ops.activation(torch.arange(4), "relu")
    with pytest.raises(UsageError, match="variant"):
        ops.activation(x, "relu", variant="nope")
    with pytest.raises(UsageError, match="out"):
        ops.activation(x.requires_grad_(), "relu", out=torch.empty(4, 8))


def test_custom_op_is_registered_with_a_fake():
    x = torch.randn(3, 5)
    torch.library.opcheck(torch.ops.kernelwright.activation, (x, "silu", None))


def test_optimize_finds_standalone_activations_but_not_swiglu_parts():
    import torch.fx as fx

    from kernelwright.search.patterns import FUSED, find_sites

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.act = nn.GELU(approximate="tanh")

        def forward(self, x, g, u):
            return self.act(x) + F.silu(x).relu() + F.silu(g) * u

    m = M()
    gm = fx.symbolic_trace(m)
    sites = find_sites(m, gm.graph)
    kinds = sorted(s.args[1] for s in sites if s.kind == "activation")
    # the tanh-gelu module, the silu and the relu of the middle term, and silu(g), which the swiglu site also
    # covers: overlapping sites are resolved by preference, fusions first
    assert kinds == ["gelu_tanh", "relu", "silu", "silu"]
    assert sum(s.kind == "swiglu" for s in sites) == 1
    assert FUSED.index("swiglu") < FUSED.index("activation")
