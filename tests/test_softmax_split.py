"""The split rung's multi-chunk path on CPU.

The interpreter runs programs one after another, so a program waiting for a later partner would wait forever;
the public rung therefore uses one chunk a row there. Here the slots are pre-published with each chunk's
(max, sum) computed by torch, so every program finds its partners' words and the exchange, unpacking, combine
and chunk indexing of the GPU path run for real. A program republishes its own slot from its own numbers first,
so a packing bug in the kernel reaches the programs that read that slot later and fails the comparison.
"""

import pytest
import torch

from kernelwright import runtime
from kernelwright.ops.softmax import triton as sm

pytestmark = pytest.mark.skipif(not runtime.interpreting(), reason="CPU interpreter test")


def _word(m: torch.Tensor, s: torch.Tensor) -> int:
    mb = int(m.view(torch.int32))
    sb = int(s.view(torch.int32)) & 0xFFFFFFFF
    return (mb << 32) | sb


@pytest.mark.parametrize("groups", [None, 1, 2], ids=["row-per-group", "one-group", "two-groups"])
@pytest.mark.parametrize(("rows", "cols", "chunk"), [(3, 300, 128), (2, 257, 64), (5, 64, 32), (4, 300, 512)])
def test_split_kernel_combines_chunks(rows, cols, chunk, groups):
    # groups < rows: each program walks several rows, carrying the next row's partials and prefetch
    groups = min(groups or rows, rows)
    x = torch.randn(rows, cols) * 3
    n_chunks = -(-cols // chunk)
    slots = torch.empty(rows, n_chunks, dtype=torch.int64)
    for r in range(rows):
        for c in range(n_chunks):
            seg = x[r, c * chunk:(c + 1) * chunk]
            m = seg.max()
            slots[r, c] = _word(m, torch.exp(seg - m).sum())
    y = torch.full_like(x, float("nan"))
    sm._softmax_split_kernel[(groups * n_chunks,)](
        x, y, slots, rows, cols, x.stride(0), y.stride(0),
        N_CHUNKS=n_chunks, CHUNKS_POW2=1 << (n_chunks - 1).bit_length(), CHUNK=chunk)
    torch.testing.assert_close(y, torch.softmax(x.double(), -1).float(), rtol=2e-5, atol=1e-7)
