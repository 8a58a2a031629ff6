"""layer_norm in Triton: the shared row-normalisation kernels of ``kernelwright/ops/rms_norm/triton.py`` with
``CENTER`` on (subtract the row mean, scale by the rstd of the centred values, add the bias). Rungs as there:
``naive``, ``fused``, ``chunked``, ``split``."""

from __future__ import annotations

from kernelwright.ops.rms_norm.triton import norm_forward


def _rung(name: str):
    def run(x, weight, bias, eps=1e-5, *, out, stats=None):
        norm_forward(name, x, weight, eps, y=out, bias=bias, stats=stats)
        return out

    run.__name__ = f"layer_norm_{name}"
    run.__doc__ = f"layer_norm, rung ``{name}``: ``out`` = (x - mean) / sqrt(var + eps) * w + b over the last dim."
    return run


layer_norm_naive = _rung("naive")
layer_norm_fused = _rung("fused")
layer_norm_chunked = _rung("chunked")
layer_norm_split = _rung("split")
