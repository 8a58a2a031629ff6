"""Honest: a Triton elementwise kernel (fused multiply-add), run by the interpreter on CPU."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _axpy_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * 2.0 + y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        x, y = x.contiguous(), y.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        _axpy_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        return out
