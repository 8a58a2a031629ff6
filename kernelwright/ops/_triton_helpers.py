"""@triton.jit helpers shared by every family's Triton rungs."""


import triton
import triton.language as tl

from kernelwright import runtime

# Triton 3.6's CPU interpreter converts fp32 -> bf16 by truncation (round toward zero) and ignores
# fp_downcast_rounding; the GPU rounds to nearest even. Seen here: 1.006 -> 1.0 in the interpreter, 1.0078 on
# torch. Without this, CPU bf16 outputs carry up to 1 ulp of bias that no GPU run has.
_EMULATE_BF16_RNE: tl.constexpr = tl.constexpr(runtime.interpreting())


@triton.jit
def to_output(v, dtype: tl.constexpr):
    """``v`` (fp32) converted to the output dtype, rounding to nearest even on every backend."""
    if _EMULATE_BF16_RNE and dtype == tl.bfloat16:
        bits = v.to(tl.uint32, bitcast=True)
        bits = bits + 0x7FFF + ((bits >> 16) & 1)  # round half to even at bit 16; truncation then is exact
        v = (bits & 0xFFFF0000).to(tl.float32, bitcast=True)
    return v.to(dtype)


def register_cap(cap: int | None) -> dict:
    """Triton's ``maxnreg`` launch option for a register cap a thread (None or 0: the compiler's choice), as
    keyword arguments for a launch or ``warmup``; none under the CPU interpreter, which has no registers."""
    return {"maxnreg": cap} if cap and not runtime.interpreting() else {}


__all__ = ["register_cap", "to_output"]
