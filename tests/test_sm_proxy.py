"""benchmarks/experiments/sm_proxy.py, the H200 stand-in on an H100 (an occupier kernel holds N SMs whole while the
kernel under test runs on the rest): what can be checked without a GPU."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

EXPERIMENTS = Path(__file__).resolve().parents[1] / "benchmarks" / "experiments"


def _sm_proxy():
    sys.path.insert(0, str(EXPERIMENTS))  # it imports switch_bench from its own folder
    try:
        spec = importlib.util.spec_from_file_location("sm_proxy", EXPERIMENTS / "sm_proxy.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(EXPERIMENTS))
    return module


def test_the_occupier_takes_an_sms_whole_register_file():
    """64 registers a thread at 1024 threads is all 65536 of an SM's registers (sm_90): with all of its shared memory
    asked for at launch as well, no CTA of the kernel under test fits beside an occupier CTA, so each one holds its
    SM alone. With fewer registers a narrow kernel's CTAs could share the SM and the stand-in would measure
    nothing."""
    pytest.importorskip("cuda.core", reason="cuda-core (NVRTC) not installed")
    from kernelwright.backends.nvrtc import CompileOptions, CudaKernel
    from kernelwright.harness.inspect import read_cubin

    sp = _sm_proxy()
    res = read_cubin(CudaKernel(sp.OCCUPY, "occupy", CompileOptions()).cubin, "occupy")
    assert res.sm == 90
    assert res.registers * 1024 == 65536, res.registers


def test_the_occupier_refuses_a_count_that_is_not_whole_clusters():
    sp = _sm_proxy()
    with pytest.raises(ValueError, match="n=40 SMs is not a whole number of clusters of 16"):
        sp.Occupier(40, 16)
