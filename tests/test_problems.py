"""The problem set (problems/): every file is a valid, fit, deterministic KernelBench problem that runs on CPU at
1/64 scale in fp32; the scaling rule keeps shapes valid."""

import math
import re

import pytest
import torch

from kernelwright.errors import UsageError
from kernelwright.eval.problemset import (
    PROBLEMS_DIR,
    discover,
    load_problem,
    scale_value,
    scaled_constants,
    size_constants,
    unfit_reason,
    zero_caught,
)

PROBLEMS = discover()
SCALE = 1 / 64  # the test's CPU size; the evaluator may pick others
IDS = [f"{p.parent.name}/{p.stem}" for p in PROBLEMS]


def test_the_set_spans_levels_and_dtypes():
    assert len(PROBLEMS) >= 30
    levels = {p.parent.name for p in PROBLEMS}
    assert levels == {"level1", "level2", "level3"}
    for p in PROBLEMS:
        assert re.fullmatch(r"\d\d_[a-z0-9_]+\.py", p.name), p.name
    dtypes = {load_problem(p).module.DTYPE for p in PROBLEMS}
    assert {torch.float32, torch.bfloat16, torch.float16} <= dtypes


def test_readme_lists_every_problem():
    readme = (PROBLEMS_DIR / "README.md").read_text()
    for p in PROBLEMS:
        assert f"`{p.parent.name}/{p.name}`" in readme, p


@pytest.mark.parametrize("path", PROBLEMS, ids=IDS)
def test_problem(path):
    base = size_constants(path.read_text())
    assert base, "no UPPER_CASE int size constants to scale"
    doc = load_problem(path).module.__doc__ or ""
    assert "kernelwright famil" in doc, "the docstring names the family that serves it"
    native = load_problem(path, scale=SCALE)
    assert isinstance(native.module.DTYPE, torch.dtype)
    for x in native.inputs():
        assert isinstance(x, torch.Tensor) and x.device.type == "cpu"
        if x.is_floating_point():
            assert x.dtype == native.module.DTYPE, "floating inputs are created in DTYPE"

    p = load_problem(path, scale=SCALE, dtype=torch.float32)
    assert p.constants == scaled_constants(path.read_text(), SCALE)
    assert all(v <= max(base[k], 8) for k, v in p.constants.items())
    out = p.run(seed=0)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    assert torch.isfinite(out).all()
    assert unfit_reason(out) is None, unfit_reason(out)
    # deterministic: a fresh load with the same seed gives the same bits; another seed does not
    assert torch.equal(out, load_problem(path, scale=SCALE, dtype=torch.float32).run(seed=0))
    assert not torch.equal(out, p.run(seed=1))


@pytest.mark.parametrize("path", [p for p in PROBLEMS if p.parent.name != "level1"][:6],
                         ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_other_scales_stay_valid(path):
    """A shape-specialisation check rescales by odd factors; divisibility must survive (GQA ratio, even dims)."""
    for factor in (3 / 128, 5 / 256):
        out = load_problem(path, scale=factor, dtype=torch.float32).run()
        assert torch.isfinite(out).all()


# where fitness depends on a row's width (softmax, cross-entropy, attention over keys), check it at the real width
# with the batch-like dims cut instead of at 1/64 scale
WIDTH_SENSITIVE = ("softmax", "cross_entropy", "attention")
FEW_ROWS = {"BATCH": 1, "TOKENS": 8, "ROWS": 8, "HEADS": 1, "KV_HEADS": 1, "HIDDEN": 256}  # HIDDEN: an lm head's input


@pytest.mark.parametrize("path", [p for p in PROBLEMS if any(w in p.stem for w in WIDTH_SENSITIVE)],
                         ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_fit_at_full_width(path):
    base = size_constants(path.read_text())
    p = load_problem(path, constants={k: min(v, FEW_ROWS[k]) for k, v in base.items() if k in FEW_ROWS})
    out = p.run()
    assert out.dtype in (p.module.DTYPE, torch.float32)
    assert unfit_reason(out) is None, unfit_reason(out)


def test_scale_value_rule():
    assert scale_value(4096, 1 / 64) == 64
    assert scale_value(128, 1 / 64) == 8      # floor 8
    assert scale_value(4, 1 / 64) == 4        # below the floor: unchanged
    assert scale_value(1, 1 / 64) == 1
    assert scale_value(14336, 1 / 64) == 224
    assert scale_value(128256, 1 / 64) == 2000
    assert scale_value(4096, 2) == 8192
    for v in (6, 12, 100, 128, 4096, 14336, 50257):
        for f in (0.01, 0.3, 3 / 128, 0.75, 1.5):
            s = scale_value(v, f)
            assert s % math.gcd(v, 8) == 0 and s >= min(v, 8)
    with pytest.raises(UsageError):
        scale_value(8, 0)


def test_load_problem_overrides(tmp_path):
    src = (
        "import torch\nimport torch.nn as nn\n\nROWS = 100\nCOLS = 4096\nFLAG = True\nEPS = 1e-5\n"
        "DTYPE = torch.bfloat16\nWIDE = COLS * 2\n\n\nclass Model(nn.Module):\n"
        "    def forward(self, x):\n        return x * 2\n\n\n"
        "def get_inputs():\n    return [torch.randn(ROWS, WIDE, dtype=DTYPE)]\n\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    assert size_constants(src) == {"ROWS": 100, "COLS": 4096}
    p = load_problem(src, constants={"ROWS": 3, "COLS": 5}, dtype="fp32")
    (x,) = p.inputs()
    assert x.shape == (3, 10) and x.dtype == torch.float32  # WIDE follows COLS; DTYPE replaced
    assert p.base_constants == {"ROWS": 100, "COLS": 4096} and p.constants == {"ROWS": 3, "COLS": 5}
    with pytest.raises(UsageError, match="no size constant"):
        load_problem(src, constants={"NOPE": 1})
    f = tmp_path / "05_thing.py"
    f.write_text(src)
    assert load_problem(str(f), scale=1 / 64).name == "05_thing"
    with pytest.raises(UsageError, match="defines no Model"):
        load_problem("import torch\ndef get_inputs():\n    return []\n")


def test_fitness_flags_near_zero_and_constant_outputs():
    assert unfit_reason(torch.randn(64, 64)) is None
    assert "all-zero" in unfit_reason(torch.softmax(torch.randn(16, 65536), -1))  # the classic unfit softmax
    assert "constant" in unfit_reason(torch.full((8, 8), 3.0))
    assert "non-finite" in unfit_reason(torch.tensor([1.0, float("nan")]))
    assert unfit_reason((torch.randn(64, 64), torch.randn(2))) is not None
    assert zero_caught(torch.relu(torch.randn(64, 64))) == 1.0
