"""layer_norm backward in Triton: the shared backward kernels of ``kernelwright/ops/rms_norm_bwd/triton.py`` with
``CENTER`` on (the mean-of-g term in dx, and dbias partials next to dweight's). Rungs: ``naive``, ``fused``,
``split``."""

from __future__ import annotations

from kernelwright.ops.rms_norm_bwd.triton import norm_backward


def _rung(name: str):
    def run(x, weight, dy, mean, rstd, eps=1e-5, *, out):
        dx, dw, db = out
        norm_backward(name, x, weight, dy, rstd, dx=dx, dw=dw, mean=mean, db=db)
        return out

    run.__name__ = f"layer_norm_bwd_{name}"
    run.__doc__ = f"layer_norm backward, rung ``{name}``: ``out`` = (dx, dweight, dbias)."
    return run


layer_norm_bwd_naive = _rung("naive")
layer_norm_bwd_fused = _rung("fused")
layer_norm_bwd_split = _rung("split")
