"""rope backward in Triton: the forward's kernels with the transposed rotation, (s1, s2) -> (-s2, -s1), applied
to the incoming gradients (dq_out, dk_out) -> (dq, dk). Same traffic and rungs as the forward
(see :mod:`kernelwright.ops.rope.triton`)."""

from __future__ import annotations

from kernelwright.ops.rope.triton import run_rows, run_token


def rope_bwd_naive(dq_out, dk_out, cos, sin, positions=None, *, out, interleaved=False, qk_layout="bhsd"):
    return run_rows(dq_out, dk_out, cos, sin, positions, out, interleaved, qk_layout, backward=True, naive=True)


def rope_bwd_fused(dq_out, dk_out, cos, sin, positions=None, *, out, interleaved=False, qk_layout="bhsd"):
    return run_rows(dq_out, dk_out, cos, sin, positions, out, interleaved, qk_layout, backward=True, naive=False)


def rope_bwd_token(dq_out, dk_out, cos, sin, positions=None, *, out, interleaved=False, qk_layout="bhsd"):
    return run_token(dq_out, dk_out, cos, sin, positions, out, interleaved, qk_layout, backward=True)
