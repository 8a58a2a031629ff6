"""GPU clocks, temperature, power and throttle reasons through NVML, read around a timed run.

Without NVML (no ``pynvml``, or a CPU run) every read returns ``{}`` and nothing is flagged.
"""

from __future__ import annotations

from functools import cache

# Reasons that mean the chip ran slower than it would have: thermal and power limits and hardware slowdown.
# (Idle, application-clock and sync-boost reasons are not slowdowns of a running kernel.)
_SLOWDOWN_BITS = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
}


@cache
def _handle():
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception:
        return None


def read() -> dict:
    h = _handle()
    if h is None:
        return {}
    import pynvml

    out = {}
    for key, f in (
        ("sm_clock_mhz", lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
        ("sm_clock_max_mhz", lambda: pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)),
        ("mem_clock_mhz", lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)),
        ("temp_c", lambda: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)),
        ("power_w", lambda: pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0),
        ("throttle_bits", lambda: pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h)),
    ):
        try:
            out[key] = f()
        except Exception:
            pass
    return out


def slowdown_reasons(bits: int | None) -> list[str]:
    if not bits:
        return []
    return [name for bit, name in _SLOWDOWN_BITS.items() if bits & bit]


def around(before: dict, after: dict) -> dict:
    """Summarize reads taken before and just after a timed run; ``throttled`` is True when the chip reported a
    thermal/power slowdown right after the run."""
    if not before and not after:
        return {}
    reasons = slowdown_reasons(after.get("throttle_bits"))
    return {
        "sm_clock_before_mhz": before.get("sm_clock_mhz"),
        "sm_clock_after_mhz": after.get("sm_clock_mhz"),
        "sm_clock_max_mhz": after.get("sm_clock_max_mhz"),
        "temp_before_c": before.get("temp_c"),
        "temp_after_c": after.get("temp_c"),
        "power_after_w": after.get("power_w"),
        "slowdown_reasons": reasons,
        "throttled": bool(reasons),
    }
