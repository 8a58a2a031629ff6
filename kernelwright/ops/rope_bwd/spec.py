"""rope_bwd: the backward family of rope ((dq_out, dk_out, cos, sin, positions) -> (dq, dk)); inputs, sizes and
tolerances as the forward's."""

from __future__ import annotations

import dataclasses

from kernelwright.ops import _peers
from kernelwright.ops.rope import spec as fwd
from kernelwright.ops.rope_bwd.reference import rope_bwd
from kernelwright.registry import Rung

_T = "kernelwright.ops.rope_bwd.triton"

RUNGS = (
    Rung("naive", "triton", f"{_T}:rope_bwd_naive",
         "The forward's three-kernel eager emulation with the transposed rotation (sin negated and its pair "
         "halves swapped). Predicted: ~20-25% of the token rung, as in the forward."),
    Rung("fused", "triton", f"{_T}:rope_bwd_fused",
         "One kernel per gradient, 16 rows a program. Predicted: as the forward's fused rung."),
    Rung("token", "triton", f"{_T}:rope_bwd_token",
         "One kernel for dq and dk, one program per token, angles loaded once. Predicted: as the forward's "
         "token rung (the same bytes: read dq_out, dk_out, write dq, dk)."),
)


def _torch_rope_bwd(dq_out, dk_out, cos, sin, positions=None, interleaved=False, qk_layout="bhsd"):
    # eager autograd of Hugging Face's formula is the rotation by -theta: the forward with sin negated
    return fwd._torch_rope(dq_out, dk_out, cos, -sin, positions, interleaved, qk_layout)


FAMILY = dataclasses.replace(
    fwd.FAMILY,
    name="rope_bwd",
    summary="rope backward: the transposed rotation of the gradients of q and k",
    reference=rope_bwd,
    rungs=RUNGS,
    peers=(_peers.eager(_torch_rope_bwd), _peers.torch_compile(_torch_rope_bwd)),
)
