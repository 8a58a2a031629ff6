"""Peers that many families share: torch.compile of the family's eager function, optional libraries."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

from kernelwright import runtime
from kernelwright.errors import Unavailable
from kernelwright.registry import Peer


def eager(fn: Callable, name: str = "torch", note: str = "torch eager") -> Peer:
    return Peer(name, lambda: fn, note)


def torch_compile(fn: Callable, name: str = "torch.compile") -> Peer:
    def make():
        if runtime.current_device() != "cuda":
            raise Unavailable(f"{name}: compared on CUDA only (its CPU code is not a GPU kernel)")
        import torch
        import torch._dynamo

        # one static graph per shape and dtype; past the default limit of 8 dynamo silently runs eager code
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 1024)
        torch._dynamo.config.accumulated_recompile_limit = max(
            torch._dynamo.config.accumulated_recompile_limit, 4096)
        return torch.compile(fn, dynamic=False)

    return Peer(name, make, "torch.compile(mode=default) of the eager function")


def optional_library(name: str, module: str, build: Callable[[], Callable]) -> Peer:
    """A peer from a library that may not be installed (Liger, ...), CUDA only."""

    def make():
        if importlib.util.find_spec(module) is None:
            raise Unavailable(f"{name}: package {module!r} is not installed")
        if runtime.current_device() != "cuda":
            raise Unavailable(f"{name}: needs a CUDA GPU")
        return build()

    return Peer(name, make, f"from {module}")
