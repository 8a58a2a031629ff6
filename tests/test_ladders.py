"""Every rung of every family against its float64 reference on the family's fuzz shapes, every dtype,
every layout and distribution (fresh random values each run)."""

import pytest
import torch

from kernelwright.harness.verify import verify
from kernelwright.registry import FAMILY_MODULES, get_family

CASES = [(f, r.name) for f in FAMILY_MODULES for r in get_family(f).rungs]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize(("family", "rung"), CASES, ids=[f"{f}-{r}" for f, r in CASES])
def test_rung_matches_reference(family, rung, dtype, device):
    fam = get_family(family)
    r = fam.rung(rung)
    if r.unavailable_reason():
        pytest.skip(r.unavailable_reason())
    if r.dtypes is not None and dtype not in r.dtypes:
        pytest.skip(f"{rung} takes {r.dtypes} only")
    results = verify(fam, [fam.rung(rung)], [dtype], device=device)
    assert results, "no trial ran"
    bad = [r for r in results if not r.ok]
    assert not bad, "\n".join(f"{r.shape} {r.layout} {r.dist} seed={r.seed}: {r.reason}" for r in bad)
    # each layout and distribution was exercised
    assert {r.layout for r in results} == {"contiguous", "strided", "transposed"}
    assert {r.dist for r in results} == {"normal", "uniform", "heavy", "large"}
