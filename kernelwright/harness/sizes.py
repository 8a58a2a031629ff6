"""Size specs on the command line: ``268435456``, ``2^28``, ``64k``, ``32768x4096``, ranges ``512..8192``."""

from __future__ import annotations

import math

from kernelwright.errors import UsageError

_SUFFIX = {"k": 2**10, "m": 2**20, "g": 2**30}


def parse_int(text: str, what: str = "size") -> int:
    t = text.strip().lower()
    try:
        if "^" in t:
            base, exp = t.split("^")
            v = int(base) ** int(exp)
        elif t and t[-1] in _SUFFIX:
            v = int(t[:-1]) * _SUFFIX[t[-1]]
        else:
            v = int(t)
    except ValueError:
        raise UsageError(f"{what}: cannot read {text!r} as a count (examples: 4096, 2^28, 64k)") from None
    if v < 0:
        raise UsageError(f"{what}: expected a count >= 0, got {text!r}")
    return v


def parse_dims(text: str, ndim: int | None = None, what: str = "size") -> tuple[int, ...]:
    dims = tuple(parse_int(p, what) for p in text.lower().split("x"))
    if ndim is not None and len(dims) != ndim:
        raise UsageError(f"{what}: expected {ndim} dimension(s) like {'x'.join(['4096'] * ndim)}, got {text!r}")
    return dims


def format_dims(size: tuple[int, ...]) -> str:
    return "x".join(_fmt(d) for d in size)


def _fmt(n: int) -> str:
    if n >= 2**20 and n & (n - 1) == 0:
        return f"2^{int(math.log2(n))}"
    return str(n)
