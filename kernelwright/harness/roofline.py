"""The device's measured ceilings, and where a timed kernel sits under them.

Ceilings are measured, not copied from a datasheet: a large device-to-device copy (bytes read plus bytes written
over time) and a large dense matmul per dtype through torch (cuBLAS on CUDA). They are cached in a JSON file
keyed by device name and driver; ``kw roofline --remeasure`` measures again.

A kernel with ``flops`` and minimum ``bytes`` cannot run faster than
``bound = max(flops / peak_flops, bytes / peak_bandwidth)``; ``% of roofline`` is ``bound / measured``.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from kernelwright.harness.timing import TimerConfig, time_fn


@dataclass
class Ceilings:
    device: str
    driver: str
    kind: str
    copy_tbps: float
    """device-to-device copy, bytes read + written, TB/s (1e12)"""
    matmul_tflops: dict[str, float]
    """dense matmul rate per dtype name (``fp32`` with TF32 off, ``tf32``, ``fp16``, ``bf16``), TFLOP/s"""
    measured_at: str
    method: str

    def peak_flops(self, unit: str, dtype_name: str) -> float:
        """FLOP/s ceiling: ``vector`` work runs on CUDA cores (the fp32 SGEMM rate stands for it),
        ``tensor`` work at the dtype's matmul rate."""
        key = "fp32" if unit == "vector" else dtype_name
        return self.matmul_tflops.get(key, self.matmul_tflops["fp32"]) * 1e12

    def bound_seconds(self, flops: float, nbytes: float, unit: str, dtype_name: str) -> tuple[float, str]:
        t_compute = flops / self.peak_flops(unit, dtype_name)
        t_memory = nbytes / (self.copy_tbps * 1e12)
        return (t_memory, "memory") if t_memory >= t_compute else (t_compute, "compute")

    def to_dict(self) -> dict:
        return asdict(self)


def cache_path() -> Path:
    base = os.environ.get("KW_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "kernelwright")
    return Path(base) / "roofline.json"


def _key(facts: dict) -> str:
    return f"{facts['device']}|{facts['driver']}"


def load_cached() -> Ceilings | None:
    from kernelwright.runtime import device_facts

    path = cache_path()
    try:
        data = json.loads(path.read_text())
        entry = data[_key(device_facts())]
        return Ceilings(**entry)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def get_ceilings(remeasure: bool = False) -> Ceilings:
    """Cached ceilings for this device and driver, measured now if missing."""
    if not remeasure:
        cached = load_cached()
        if cached is not None:
            return cached
    c = measure()
    _save(c)
    return c


def _save(c: Ceilings) -> None:
    path = cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    data[f"{c.device}|{c.driver}"] = c.to_dict()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(path)


def _copy_tbps(n: int, dev: str, cfg: TimerConfig) -> float:
    src = torch.randint(0, 255, (n,), dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    t = time_fn(lambda: dst.copy_(src), cfg, dev)
    return 2 * n / (t.median_ms * 1e-3) / 1e12


def measure() -> Ceilings:
    from kernelwright.runtime import current_device, device_facts

    facts = device_facts()
    dev = current_device()
    cfg = TimerConfig(max_seconds=3.0, graph="off")
    if dev == "cuda":
        n_copy, sizes = 2**30, {"fp32": 4096, "tf32": 8192, "fp16": 8192, "bf16": 8192}
    else:
        n_copy, sizes = 2**26, {"fp32": 512}
    copy_tbps = _copy_tbps(n_copy, dev, cfg)
    rates = {}
    prev_tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        for name, n in sizes.items():
            dtype = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[name]
            torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
            a = torch.randn(n, n, device=dev, dtype=dtype)
            b = torch.randn(n, n, device=dev, dtype=dtype)
            t = time_fn(lambda a=a, b=b: torch.mm(a, b), cfg, dev)
            rates[name] = 2 * n**3 / (t.median_ms * 1e-3) / 1e12
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev_tf32
    method = (
        f"copy: {n_copy} bytes device-to-device, read+write counted; matmul: torch.mm on random square "
        f"inputs {sizes}; medians of the kernelwright timer"
        + (" (L2 flushed per sample)" if dev == "cuda" else " (host clock)")
    )
    return Ceilings(
        device=facts["device"], driver=facts["driver"], kind=facts["kind"], copy_tbps=copy_tbps,
        matmul_tflops=rates, measured_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), method=method,
    )
