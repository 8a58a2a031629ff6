"""add_rms_norm backward in Triton: the shared backward kernels of ``kernelwright/ops/rms_norm_bwd/triton.py``
with ``DH`` on. The forward returned h = x + residual, which the next layer keeps anyway, so the backward reads h
(one tensor) rather than x and residual (two), and adds the gradient dh that reaches h directly to the one through
the norm: dx = dresidual = rms_norm_bwd(h, dy) + dh, one output. Rungs: ``naive``, ``fused``, ``split``."""

from __future__ import annotations

from kernelwright.ops.rms_norm_bwd.triton import norm_backward


def _rung(name: str):
    def run(h, weight, dy, dh, rstd, eps=1e-6, offset=False, *, out):
        dx, dw = out
        norm_backward(name, h, weight, dy, rstd, dx=dx, dw=dw, dh=dh, offset=offset)
        return out

    run.__name__ = f"add_rms_norm_bwd_{name}"
    run.__doc__ = f"add_rms_norm backward, rung ``{name}``: ``out`` = (dx (= dresidual), dweight)."
    return run


add_rms_norm_bwd_naive = _rung("naive")
add_rms_norm_bwd_fused = _rung("fused")
add_rms_norm_bwd_split = _rung("split")
