"""Is a candidate's output right? Against the float64 reference, and never much worse than eager PyTorch.

Every output is compared with the reference Model run in float64 (``ref``), and the reference Model's own
eager output in the problem's dtype (``eager``) sets how much error that dtype's honest arithmetic makes on
these very inputs. With ``r = ref``, ``e = eager``, ``o`` the candidate and the output dtype's
:class:`EvalTolerance` ``(rtol, atol, norm, k)``:

* shape and dtype must equal eager's (an fp32 problem answered in bf16 is a precision downgrade);
* non-finite values must sit where ``r`` rounded to the dtype (or ``e``) has them, with the same values;
* element by element: ``|o - r| <= rtol |r| + atol rms(r) + k max(max|e - r|, c_max)``;
* in norm: ``||o - r|| / ||r|| <= max(norm, 4 ||round(r) - r|| / ||r||, k ||e - r|| / ||r||, k c_rel)``.

``c`` (:class:`Conditioning`) is how far the float64 answer moves when every floating input and parameter is
perturbed by its dtype's epsilon: the error a backward-stable kernel may make on these inputs even where eager's
algorithm happens to be more exact. On input sets magnified beyond what ``get_inputs()`` draws (``heavy``,
``large``), which are there to catch overflow and shortcuts rather than to measure precision, the floors grow
with the magnification up to 5e-2 (:func:`tolerance_for`): ``exp(x - logsumexp(x))`` loses ``eps |x|`` on
logits of size 1e3 where ``softmax`` loses nothing.

So a candidate may be ``k`` times (8) less exact than eager or than the problem's conditioning, or within the
dtype's floor, whichever is looser: an fp32 kernel that sums in another order passes, one that computes in bf16
or TF32 (errors near 1e-3, eager's and the conditioning's near 1e-7) does not. Integer and bool outputs must
equal eager's (or the float64 reference's) exactly.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch


@dataclass(frozen=True)
class EvalTolerance:
    rtol: float
    """per element, relative to ``|ref|`` (about twice the dtype's rounding for fp16/bf16)"""
    atol: float
    """per element, relative to the RMS of the reference (scale-free, so magnified inputs keep their meaning)"""
    norm: float
    """relative norm error that always passes"""
    eager_factor: float = 8.0
    """``k``: how many times eager's own error a candidate may make"""


TOLERANCES: dict[torch.dtype, EvalTolerance] = {
    torch.float64: EvalTolerance(rtol=1e-12, atol=1e-12, norm=1e-12),
    torch.float32: EvalTolerance(rtol=1e-5, atol=1e-5, norm=1e-5),
    torch.float16: EvalTolerance(rtol=2e-3, atol=1e-3, norm=1e-3),
    torch.bfloat16: EvalTolerance(rtol=1.6e-2, atol=8e-3, norm=8e-3),
}


MAGNIFIED_CAP = 5e-2
"""the loosest relative tolerance a magnified input set is judged with"""


def tolerance_for(dtype: torch.dtype, magnification: float = 1.0) -> EvalTolerance:
    """The dtype's tolerance; on inputs magnified ``magnification`` times (RMS, against ``get_inputs()``'s own),
    rtol, atol and the norm floor grow as much, up to :data:`MAGNIFIED_CAP`: errors that scale with the inputs'
    magnitude (``exp(x - logsumexp(x))`` on logits of 1e3) may scale with it there, while NaN, overflow,
    saturation or a wrong formula still fail."""
    tol = TOLERANCES.get(dtype, TOLERANCES[torch.float32])
    if magnification <= 1.0:
        return tol
    grow = lambda v: max(v, min(v * magnification, MAGNIFIED_CAP))
    return EvalTolerance(grow(tol.rtol), grow(tol.atol), grow(tol.norm), tol.eager_factor)


@dataclass
class Judgement:
    ok: bool
    kind: str
    """``ok``, ``spec`` (shape/dtype), ``exact`` (integer output), ``nonfinite``, ``elementwise`` or ``norm``"""
    reason: str = ""
    max_abs: float = 0.0
    rel_err: float = 0.0
    eager_rel_err: float = 0.0
    limit: float = 0.0
    nan_where_finite: int = 0
    """elements that are NaN where the reference is finite"""

    def to_dict(self) -> dict:
        return asdict(self)


def error_scales(ref: torch.Tensor, eager: torch.Tensor) -> tuple[float, float, float]:
    """(RMS of the reference, eager's max abs error, eager's relative norm error), over elements where both are
    finite; float64 tensors of one shape."""
    fin = torch.isfinite(ref) & torch.isfinite(eager)
    r, e = (ref, eager) if bool(fin.all()) else (ref[fin], eager[fin])  # no masked copies in the common case
    if r.numel() == 0:
        return 0.0, 0.0, 0.0
    rms = float(torch.sqrt(torch.mean(r * r)))
    d = (e - r).abs()
    denom = float(torch.linalg.vector_norm(r))
    rel = float(torch.linalg.vector_norm(d)) / denom if denom > 0 else float(torch.linalg.vector_norm(d))
    return rms, float(d.max()), rel


@dataclass(frozen=True)
class Conditioning:
    """How much the float64 answer moves when every floating input and parameter is perturbed by its dtype's
    epsilon (relative, random signs): the error any backward-stable kernel may make on these inputs, however
    exact eager happens to be. ``max_abs`` per element, ``rel`` in norm."""

    max_abs: float = 0.0
    rel: float = 0.0


def conditioning(ref: torch.Tensor, perturbed: torch.Tensor) -> Conditioning:
    r, p = ref.double(), perturbed.double()
    fin = torch.isfinite(r) & torch.isfinite(p)
    if not bool(fin.any()):
        return Conditioning()
    d = (p[fin] - r[fin]).abs()
    denom = float(torch.linalg.vector_norm(r[fin]))
    return Conditioning(float(d.max()), float(torch.linalg.vector_norm(d)) / denom if denom > 0 else 0.0)


def allowed(ref: torch.Tensor, eager: torch.Tensor, tol: EvalTolerance,
            cond: Conditioning | None = None) -> torch.Tensor:
    """Per-element bound ``rtol |r| + atol rms(r) + k max(max|e - r|, cond.max_abs)`` (float64; inf where ``r``
    is not finite)."""
    ref, eager = ref.double(), eager.double()
    rms, max_e, _ = error_scales(ref, eager)
    bound = tol.rtol * ref.abs() + (tol.atol * rms + tol.eager_factor * max(max_e, (cond or Conditioning()).max_abs))
    return torch.where(torch.isfinite(ref), bound, torch.full_like(bound, math.inf))


def _same_nonfinite(o: torch.Tensor, x: torch.Tensor) -> bool:
    fo, fx = torch.isfinite(o), torch.isfinite(x)
    if not torch.equal(fo, fx):
        return False
    a, b = o[~fo], x[~fx]
    return torch.equal(torch.isnan(a), torch.isnan(b)) and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))


def judge(out: torch.Tensor, ref: torch.Tensor, eager: torch.Tensor, tol: EvalTolerance | None = None,
          cond: Conditioning | None = None, magnification: float = 1.0) -> Judgement:
    """Judge one output tensor (see the module docstring). All three on the same device; any dtypes."""
    if tuple(out.shape) != tuple(eager.shape):
        return Judgement(False, "spec", f"shape {tuple(out.shape)}, expected {tuple(eager.shape)}", math.inf, math.inf)
    if out.dtype != eager.dtype:
        return Judgement(False, "spec", f"dtype {str(out.dtype).removeprefix('torch.')}, expected "
                                        f"{str(eager.dtype).removeprefix('torch.')}", math.inf, math.inf)
    if not out.is_floating_point():
        if torch.equal(out, eager) or torch.equal(out, ref.to(out.dtype)):
            return Judgement(True, "ok")
        n = int((out != eager).sum())
        return Judgement(False, "exact", f"{n} of {out.numel()} element(s) differ from the reference "
                                         f"(integer output must match exactly)", math.inf, math.inf)
    if out.numel() == 0:
        return Judgement(True, "ok")
    tol = tol or tolerance_for(out.dtype, magnification)
    o, r, e = out.double(), ref.double(), eager.double()
    x = ref.to(out.dtype).double()  # the exact answer rounded to the output dtype
    if not (_same_nonfinite(o, x) or _same_nonfinite(o, e)):
        fin_x = torch.isfinite(x) | torch.isfinite(e)
        nan_bad = int((torch.isnan(o) & fin_x).sum())
        wrong = torch.isfinite(o) != torch.isfinite(x)
        first = wrong.nonzero()[0].tolist() if bool(wrong.any()) else None
        what = f"{nan_bad} NaN where the reference is finite" if nan_bad else \
            f"{int(wrong.sum())} element(s) finite/non-finite unlike the reference"
        return Judgement(False, "nonfinite", what + (f", first at {first}" if first is not None else ""),
                         math.inf, math.inf, nan_where_finite=nan_bad)
    rms, max_e, eager_rel = error_scales(r, e)
    cond = cond or Conditioning()
    mask = torch.isfinite(o) & torch.isfinite(r)
    every = bool(mask.all())
    om, rm = (o.reshape(-1), r.reshape(-1)) if every else (o[mask], r[mask])
    if om.numel() == 0:
        return Judgement(True, "ok")
    diff = (om - rm).abs()
    max_abs = float(diff.max())
    denom = float(torch.linalg.vector_norm(rm))
    rel = float(torch.linalg.vector_norm(diff)) / denom if denom > 0 else float(torch.linalg.vector_norm(diff))
    bound = tol.rtol * rm.abs() + (tol.atol * rms + tol.eager_factor * max(max_e, cond.max_abs))
    over = diff > bound
    if bool(over.any()):
        i = int(over.nonzero()[0, 0])
        return Judgement(False, "elementwise",
                         f"{int(over.sum())} of {om.numel()} element(s) beyond the bound; e.g. got {float(om[i]):.6g}, "
                         f"expected {float(rm[i]):.6g} (allowed error {float(bound[i]):.3g})",
                         max_abs, rel, eager_rel)
    xm = x.reshape(-1) if every else x[mask]
    rounding = float(torch.linalg.vector_norm(xm - rm)) / denom if denom > 0 else 0.0
    limit = max(tol.norm, 4 * rounding, tol.eager_factor * max(eager_rel, cond.rel))
    if rel > limit:
        return Judgement(False, "norm", f"relative error {rel:.3g} > limit {limit:.3g} (eager's own error "
                                        f"{eager_rel:.3g})", max_abs, rel, eager_rel, limit)
    return Judgement(True, "ok", "", max_abs, rel, eager_rel, limit)


def judge_all(outs: list[torch.Tensor], refs: list[torch.Tensor], eagers: list[torch.Tensor],
              conds: list[Conditioning] | None = None, magnification: float = 1.0) -> Judgement:
    """:func:`judge` every output; the first failure (its reason prefixed by the output's index when there are
    several), else the worst errors."""
    if len(outs) != len(eagers):
        return Judgement(False, "spec", f"{len(outs)} output(s), expected {len(eagers)}", math.inf, math.inf)
    worst = Judgement(True, "ok")
    conds = conds or [None] * len(outs)
    for i, (o, r, e, c) in enumerate(zip(outs, refs, eagers, conds, strict=True)):
        j = judge(o, r, e, cond=c, magnification=magnification)
        if not j.ok:
            if len(outs) > 1:
                j.reason = f"output {i}: {j.reason}"
            return j
        worst = Judgement(True, "ok", "", max(worst.max_abs, j.max_abs), max(worst.rel_err, j.rel_err),
                          max(worst.eager_rel_err, j.eager_rel_err), max(worst.limit, j.limit))
    return worst


def judge_samples(samples: torch.Tensor, stats: dict, ref: dict) -> str | None:
    """Check one timed call from what the worker measured on its output: ``samples`` (float64 values at the
    reference's secret sample positions), ``stats`` (``nonfinite`` count, float64 ``sum`` over finite elements),
    against ``ref`` (``values``, ``allowed``, ``finite`` and ``care`` at those positions, the finite ``sum``,
    ``sum_allowed`` and accepted ``nonfinite`` counts, from the reference worker). Returns why it fails, or
    ``None``.

    Passing every element of :func:`judge`'s bound implies passing this, so an honest output never fails it;
    an output left stale, cached from other inputs or skipped fails it unless it is wrong in fewer elements than
    one in a few thousand.
    """
    values, allowed_at, finite_at, care = ref["values"], ref["allowed"], ref["finite"], ref["care"]
    s_fin = torch.isfinite(samples)
    if not torch.equal(s_fin[care], finite_at[care]):
        n = int((s_fin != finite_at)[care].sum())
        return f"{n} sampled element(s) non-finite unlike the reference"
    bad = ((samples - values).abs() > allowed_at) & s_fin & finite_at
    if bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        return (f"{int(bad.sum())} of {samples.numel()} sampled element(s) wrong; e.g. got {float(samples[i]):.6g}, "
                f"expected {float(values[i]):.6g}")
    if stats["nonfinite"] not in ref["nonfinite"]:
        return f"{stats['nonfinite']} non-finite element(s), expected {ref['nonfinite'][0]}"
    if ref["sum"] is not None:
        slack = ref["sum_allowed"] + 1e-9 * ref["sum_abs"]
        if abs(stats["sum"] - ref["sum"]) > slack:
            return f"sum of the output {stats['sum']:.6g}, expected {ref['sum']:.6g} +- {slack:.3g}"
    return None


def unwritten_elements(first: torch.Tensor, second: torch.Tensor, ref: torch.Tensor, huge: torch.Tensor) -> int:
    """Elements a kernel left unwritten, seen from two runs into memory poisoned differently (NaN bytes, then
    ``huge``, the finite value of the second poison): NaN in the first run where the reference is finite and not
    NaN in the second, or exactly ``huge`` in the second where the reference is not."""
    if not first.is_floating_point() or first.shape != second.shape or first.shape != ref.shape:
        return 0
    x = ref.to(first.dtype)
    nan_first = torch.isnan(first) & torch.isfinite(x) & ~torch.isnan(second)
    poisoned_second = (second == huge.to(second.dtype)) & (x != huge.to(x.dtype))
    return int(nan_first.sum()) + int(poisoned_second.sum())
