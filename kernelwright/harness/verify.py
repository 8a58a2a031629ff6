"""Correctness: every rung against its family's reference, in float64, on fresh inputs it cannot predict.

A check fails when the output differs from the float64 reference beyond the dtype's :class:`Tolerance`, when
an element was left unwritten (outputs start as NaN), when NaN/Inf appears where the reference (rounded to the
output dtype) has none, when two runs on the same input disagree (a race), or when the inputs changed.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

import torch

from kernelwright import tune
from kernelwright.harness.inputs import DISTRIBUTIONS, LAYOUTS, dtype_name, generator, poisoned_like
from kernelwright.registry import Case, Family, Rung, Tolerance


@dataclass
class Comparison:
    ok: bool
    max_abs: float
    rel_norm: float
    reason: str = ""


@dataclass
class CheckResult:
    family: str
    rung: str
    dtype: str
    shape: str
    layout: str
    dist: str
    seed: int
    ok: bool
    max_abs: float
    rel_norm: float
    reason: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def compare(out: torch.Tensor, ref64: torch.Tensor, tol: Tolerance, scale: torch.Tensor | None = None) -> Comparison:
    """Compare ``out`` with a float64 reference. Non-finite values must match the reference rounded to
    ``out.dtype`` position by position (an fp16 sum that overflows is right to be Inf)."""
    if tuple(out.shape) != tuple(ref64.shape):
        return Comparison(False, math.inf, math.inf, f"shape {tuple(out.shape)} != expected {tuple(ref64.shape)}")
    if out.numel() == 0:
        return Comparison(True, 0.0, 0.0)
    o = out.double()
    expected = ref64.to(out.dtype).double()
    o_fin, e_fin = torch.isfinite(o), torch.isfinite(expected)
    if not torch.equal(o_fin, e_fin):
        wrong = o_fin != e_fin
        first = wrong.nonzero()[0].tolist()
        nan_where_finite = bool((torch.isnan(o) & e_fin).any())
        what = "NaN (unwritten or invalid)" if nan_where_finite else "finite/non-finite mismatch"
        return Comparison(False, math.inf, math.inf, f"{int(wrong.sum())} element(s) {what}, first at {first}")
    if not same_values(o[~o_fin], expected[~e_fin]):
        return Comparison(False, math.inf, math.inf, "non-finite values differ from the reference")
    o, r = o[o_fin], ref64[o_fin].double()
    if o.numel() == 0:
        return Comparison(True, 0.0, 0.0)
    diff = (o - r).abs()
    max_abs = float(diff.max())
    denom = float(torch.linalg.vector_norm(r))
    rel = float(torch.linalg.vector_norm(o - r)) / denom if denom > 0 else float(torch.linalg.vector_norm(o - r))
    allowed = tol.atol + tol.rtol * r.abs()
    if scale is not None and tol.acc:
        allowed = allowed + tol.acc * scale.double()[o_fin]
    over = diff > allowed
    if bool(over.any()):
        i = int(over.nonzero()[0, 0])
        return Comparison(
            False, max_abs, rel,
            f"{int(over.sum())} element(s) beyond atol={tol.atol:g} rtol={tol.rtol:g}; "
            f"e.g. got {float(o[i]):.6g}, expected {float(r[i]):.6g}",
        )
    # No kernel can beat rounding its exact answer to the output dtype (fp16 outputs in the subnormal range
    # lose relative precision): the norm bound is never tighter than twice that rounding error.
    e = expected[o_fin]
    floor = float(torch.linalg.vector_norm(e - r)) / denom if denom > 0 else 0.0
    limit = max(tol.norm, 2 * floor)
    if scale is not None and tol.acc:
        # nor tighter than the accumulated rounding the elementwise bound allows: where the result cancels (a
        # norm backward's dx at one column: rstd * w * dy * eps / (x^2 + eps) for RMS, exactly 0 for layer norm),
        # its norm is far below its terms' (relative to the result's norm, or absolute where that is 0, as rel is)
        acc_norm = tol.acc * float(torch.linalg.vector_norm(scale.double()[o_fin]))
        limit = max(limit, acc_norm / denom if denom > 0 else acc_norm)
    if rel > limit:
        return Comparison(False, max_abs, rel, f"relative norm error {rel:.3g} > {limit:.3g}")
    return Comparison(True, max_abs, rel)


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise-equal values, NaN equal to NaN."""
    return torch.equal(torch.isnan(a), torch.isnan(b)) and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))


def _upcast(case: Case) -> tuple:
    return tuple(a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in case.args)


def reference64(family: Family, case: Case) -> torch.Tensor:
    return family.reference(*_upcast(case), **case.kwargs)


def error_scale(family: Family, case: Case) -> torch.Tensor | None:
    """The family's per-element error scale for ``case`` (float64), or ``None`` (see :class:`Tolerance`)."""
    return family.error_scale(*_upcast(case), **case.kwargs) if family.error_scale else None


def _tensors(args: tuple) -> list[torch.Tensor]:
    return [a for a in args if isinstance(a, torch.Tensor)]


def new_outputs(family: Family, case: Case, dtype: torch.dtype, device):
    """Poisoned output buffer(s) for ``case``: one tensor, or a tuple when the family has several outputs."""
    shapes, dtypes = output_spec(family, case, dtype)
    outs = tuple(poisoned_like(s, d, device) for s, d in zip(shapes, dtypes, strict=True))
    return outs if family.multi_output else outs[0]


def output_spec(family: Family, case: Case, dtype: torch.dtype) -> tuple[list, list]:
    """(shapes, dtypes) of the outputs, as lists even for one output."""
    shapes = family.out_shape(case)
    shapes = list(shapes) if family.multi_output else [shapes]
    dtypes = family.out_dtype(case, dtype) if family.out_dtype else dtype
    dtypes = list(dtypes) if isinstance(dtypes, (list, tuple)) else [dtypes] * len(shapes)
    return shapes, dtypes


def _as_tuple(x) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def compare_outputs(family: Family, outs, refs, scales, dtype: torch.dtype) -> Comparison:
    """:func:`compare` for every output (each against the tolerance of its own dtype); the first failure, else
    the worst errors."""
    outs, refs = _as_tuple(outs), _as_tuple(refs)
    scales = _as_tuple(scales) if scales is not None else (None,) * len(refs)
    if len(outs) != len(refs):
        return Comparison(False, math.inf, math.inf, f"{len(outs)} output(s), expected {len(refs)}")
    worst = Comparison(True, 0.0, 0.0)
    for i, (o, r, sc) in enumerate(zip(outs, refs, scales, strict=True)):
        tol = family.tolerances.get(o.dtype, family.tolerances[dtype])
        c = compare(o, r, tol, sc)
        if not c.ok:
            return dataclasses.replace(c, reason=(f"output {i}: " if len(outs) > 1 else "") + c.reason)
        worst = Comparison(True, max(worst.max_abs, c.max_abs), max(worst.rel_norm, c.rel_norm))
    return worst


def check_case(family: Family, fn: Callable, case: Case, dtype: torch.dtype, *, takes_out: bool = True) -> Comparison:
    """Run ``fn`` twice on ``case`` into poisoned outputs and judge it; see the module docstring."""
    snapshots = [t.clone() for t in _tensors(case.args)]
    ref = reference64(family, case)
    device = next((t.device for t in snapshots), "cpu")
    _, want_dtypes = output_spec(family, case, dtype)
    outs = []
    for _ in range(2):
        if takes_out:
            out = new_outputs(family, case, dtype, device)
            ret = fn(*case.args, out=out, **case.kwargs)
            if ret is not None and not all(a is b for a, b in zip(_as_tuple(ret), _as_tuple(out), strict=False)):
                return Comparison(False, math.inf, math.inf, "returned a tensor other than the out= buffer")
        else:
            out = fn(*case.args, **case.kwargs)
        for before, after in zip(snapshots, _tensors(case.args), strict=True):
            if not same_values(before, after):
                return Comparison(False, math.inf, math.inf, "an input changed during the call")
        outs.append(_as_tuple(out))
    for i, (o, want) in enumerate(zip(outs[0], want_dtypes, strict=False)):
        if o.dtype != want:
            return Comparison(False, math.inf, math.inf, f"output {i} dtype {o.dtype} != {want}")
    for o0, o1 in zip(outs[0], outs[1], strict=True):
        if not same_values(o0, o1):
            n = int((o0 != o1).sum())
            return Comparison(False, math.inf, math.inf, f"two runs on the same input differ in {n} element(s): a race")
    return compare_outputs(family, outs[0], ref, error_scale(family, case), dtype)


def verify(
    family: Family,
    rungs: Iterable[Rung] | None = None,
    dtypes: Iterable[torch.dtype] | None = None,
    *,
    device: str = "cpu",
    distributions: Iterable[str] = DISTRIBUTIONS,
    layouts: Iterable[str] = LAYOUTS,
    shapes: list[tuple[tuple[int, ...], dict]] | None = None,
    seed: int | None = None,
    on_result: Callable[[CheckResult], None] | None = None,
) -> list[CheckResult]:
    """Check rungs of ``family`` on its fuzz shapes, every layout and distribution, fresh values each trial.

    To keep the trial count linear, each shape is tried with one layout and one distribution, cycling through
    both lists, so every layout and distribution is covered once there are more shapes than either list.
    Unavailable rungs are skipped (the CLI lists them with their reason). Returns one result per trial.
    """
    with tune.suspended():
        return _verify(family, rungs, dtypes, device, distributions, layouts, shapes, seed, on_result)


def _verify(family, rungs, dtypes, device, distributions, layouts, shapes, seed, on_result) -> list[CheckResult]:
    rungs = [r for r in (rungs or family.rungs) if not r.unavailable_reason()]
    dtypes = list(dtypes or family.dtypes)
    shapes = shapes if shapes is not None else family.fuzz()
    dists, lays = list(distributions), list(layouts)
    results = []
    trial = 0
    for rung in rungs:
        fn = rung.load()
        for dtype in dtypes:
            for size, kwargs in shapes:
                if rung.refusal(size, kwargs, dtype):
                    continue
                dist, layout = dists[trial % len(dists)], lays[(trial // len(dists)) % len(lays)]
                trial += 1
                gen, s = generator("cpu", None if seed is None else seed + trial)
                case = family.make_case(size, dtype, "cpu", gen, dist=dist, layout=layout, **kwargs)
                case = _to_device(case, device)
                cmp = check_case(family, fn, case, dtype)
                res = CheckResult(
                    family.name, rung.name, dtype_name(dtype), case.label or family.format_size(size),
                    layout, dist, s, cmp.ok, cmp.max_abs, cmp.rel_norm, cmp.reason,
                )
                results.append(res)
                if on_result:
                    on_result(res)
    return results


def _to_device(case: Case, device: str) -> Case:
    if device == "cpu":
        return case
    from kernelwright.harness.inputs import with_layout

    args = []
    for a in case.args:
        if isinstance(a, torch.Tensor):
            layout = "contiguous" if a.is_contiguous() else ("strided" if a.stride(-1) != 1 else "transposed")
            dense = a.contiguous().to(device)
            args.append(with_layout(dense, layout))
        else:
            args.append(a)
    return Case(case.size, tuple(args), case.kwargs, case.label)
