"""The verifier must catch each kind of broken kernel; a check that cannot fail is worthless."""

import math

import torch

from kernelwright.harness.inputs import generator, random_values, with_layout
from kernelwright.harness.verify import check_case, compare
from kernelwright.registry import Tolerance, get_family

FAM = get_family("vector_add")
TOL = FAM.tolerances[torch.float32]


def _case(n=1000, dtype=torch.float32, dist="normal"):
    gen, _ = generator("cpu")
    return FAM.make_case((n,), dtype, "cpu", gen, dist=dist)


def good(x, y, *, out):
    return torch.add(x, y, out=out)


def test_good_kernel_passes():
    assert check_case(FAM, good, _case(), torch.float32).ok


def test_unwritten_element_fails():
    def skips_last(x, y, *, out):
        out[:-1] = x[:-1] + y[:-1]
        return out

    cmp = check_case(FAM, skips_last, _case(), torch.float32)
    assert not cmp.ok and "NaN" in cmp.reason


def test_wrong_value_fails():
    def off_by_a_bit(x, y, *, out):
        torch.add(x, y, out=out)
        out[7] += 1e-3
        return out

    cmp = check_case(FAM, off_by_a_bit, _case(), torch.float32)
    assert not cmp.ok and "beyond" in cmp.reason


def test_race_is_caught():
    calls = {"n": 0}

    def moving(x, y, *, out):
        calls["n"] += 1
        torch.add(x, y, out=out)
        out[3] += 1e-7 * calls["n"]  # within tolerance, but not the same twice
        return out

    cmp = check_case(FAM, moving, _case(), torch.float32)
    assert not cmp.ok and "race" in cmp.reason


def test_input_mutation_is_caught():
    def clobbers(x, y, *, out):
        torch.add(x, y, out=out)
        x.zero_()
        return out

    cmp = check_case(FAM, clobbers, _case(), torch.float32)
    assert not cmp.ok and "input changed" in cmp.reason


def test_nan_where_reference_is_finite_fails_and_matching_inf_passes():
    ref = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    assert not compare(torch.tensor([1.0, float("nan"), 3.0]), ref, TOL).ok
    # an fp16 sum that overflows is right to be inf: the reference rounded to fp16 is inf there
    big = torch.tensor([60000.0, 60000.0], dtype=torch.float64) * 2
    out = big.to(torch.float16)
    assert compare(out, big, Tolerance(1e-5, 1e-3, 1e-3)).ok
    assert not compare(torch.tensor([60000.0, 1.0], dtype=torch.float16), big, Tolerance(1e-5, 1e-3, 1e-3)).ok


def test_compare_reports_errors():
    ref = torch.ones(4, dtype=torch.float64)
    cmp = compare(torch.tensor([1.0, 1.0, 1.0, 1.5]), ref, TOL)
    assert not cmp.ok and math.isclose(cmp.max_abs, 0.5)
    assert compare(torch.ones(3), ref, TOL).reason.startswith("shape")


def test_distributions_and_layouts():
    gen, _ = generator("cpu", 0)
    for dist in ("normal", "uniform", "heavy", "large"):
        v = random_values((4096,), torch.float16, "cpu", gen, dist)
        assert torch.isfinite(v).all() and v.abs().sum() > 0
    big = random_values((4096,), torch.float32, "cpu", gen, "large")
    assert big.abs().median() > 100
    t = torch.randn(3, 5)
    for layout in ("strided", "transposed"):
        v = with_layout(t, layout)
        assert not v.is_contiguous() and torch.equal(v, t)


def test_fresh_values_each_trial():
    a, b = _case(), _case()
    assert not torch.equal(a.args[0], b.args[0])


def test_multi_output_family_checks_every_output():
    import dataclasses

    two = dataclasses.replace(
        FAM, name="sum_and_product", reference=lambda x, y: (x + y, x * y), multi_output=True,
        out_shape=lambda case: [tuple(case.args[0].shape)] * 2,
        out_dtype=lambda case, dtype: [dtype, torch.float32])

    def both(x, y, *, out):
        s, p = out
        torch.add(x, y, out=s)
        p.copy_(x.float() * y.float())
        return out

    def forgets_second(x, y, *, out):
        torch.add(x, y, out=out[0])
        return out

    def wrong_dtype_second(x, y, *, out):
        return (torch.add(x, y, out=out[0]), (x * y).half())

    case = _case(dtype=torch.bfloat16)
    assert check_case(two, both, case, torch.bfloat16).ok
    cmp = check_case(two, forgets_second, case, torch.bfloat16)
    assert not cmp.ok and cmp.reason.startswith("output 1:") and "NaN" in cmp.reason
    assert not check_case(two, wrong_dtype_second, case, torch.bfloat16).ok


def test_the_norm_bound_counts_the_error_scale_where_the_result_cancels():
    # a result that cancels (a norm backward's dx at one column): terms of size ~1, result ~1e-7 or exactly 0.
    # Rounding errors of the terms' size pass with their error scale and fail without it; an error beyond the
    # scale fails either way.
    tol = Tolerance(atol=1e-9, rtol=2e-5, norm=1e-5, acc=1e-5)
    scale = torch.full((64,), 2.0, dtype=torch.float64)
    noise = torch.linspace(-1, 1, 64, dtype=torch.float64) * 1e-6  # within acc * scale = 2e-5 elementwise
    for ref in (torch.full((64,), 1e-7, dtype=torch.float64), torch.zeros(64, dtype=torch.float64)):
        out = (ref + noise).float()
        assert compare(out, ref, tol, scale).ok
        assert not compare(out, ref, tol).ok  # no scale: relative to a tiny (or zero) result
        assert not compare((ref + noise * 100).float(), ref, tol, scale).ok  # past the scale elementwise
