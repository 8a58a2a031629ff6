"""rope backward reference: the vector-Jacobian product of the forward reference, by autograd in float64.

The kernels apply the transposed rotation (by -theta when both elements of a pair share an angle); deriving the
reference through autograd instead checks that transposition rather than repeating it. Inputs: dq_out, dk_out
(gradients of the rotated q and k), cos, sin, positions; outputs dq, dk. Memory as the forward.
"""

import torch

from kernelwright.ops.rope.reference import rope


def rope_bwd(dq_out, dk_out, cos, sin, positions=None, interleaved=False, qk_layout="bhsd"):
    with torch.enable_grad():
        q = torch.zeros_like(dq_out, requires_grad=True)
        k = torch.zeros_like(dk_out, requires_grad=True)
        qo, ko = rope(q, k, cos.detach(), sin.detach(), positions, interleaved, qk_layout)
        return torch.autograd.grad((qo, ko), (q, k), (dq_out, dk_out))
