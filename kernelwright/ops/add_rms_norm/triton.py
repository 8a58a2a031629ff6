"""add_rms_norm in Triton: the shared row-normalisation kernels of ``kernelwright/ops/rms_norm/triton.py`` with
``RESIDUAL`` on: h = x + residual is formed in fp32 registers, stored once in the output dtype, and normalised
as it is (unrounded). Rungs as there: ``naive`` (an add kernel writing fp32 h, then the naive RMS kernels),
``fused`` and ``split``; no ``chunked`` rung, whose second pass would read two tensors again (``split`` covers
wide rows at the minimum traffic)."""

from __future__ import annotations

from kernelwright.ops.rms_norm.triton import norm_forward


def _rung(name: str):
    def run(x, residual, weight, eps=1e-6, offset=False, *, out, stats=None):
        y, h = out
        norm_forward(name, x, weight, eps, y=y, residual=residual, h=h, offset=offset, stats=stats)
        return out

    run.__name__ = f"add_rms_norm_{name}"
    run.__doc__ = f"add_rms_norm, rung ``{name}``: ``out`` = (rms_norm(x + residual), x + residual)."
    return run


add_rms_norm_naive = _rung("naive")
add_rms_norm_fused = _rung("fused")
add_rms_norm_split = _rung("split")
