"""GPU-only checks (KW_DEVICE=cuda): what the interpreter cannot show."""

import pytest
import torch

from kernelwright.harness.inputs import generator
from kernelwright.harness.verify import check_case
from kernelwright.registry import get_family

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("shape", [(3, 65536 + 3), (257, 8192 * 5 + 1), (64, 262144)])
def test_split_rung_many_chunks(shape, dtype):
    # on the GPU a row spans several cooperating programs; the interpreter only ever runs one chunk a row
    fam = get_family("softmax")
    fn = fam.rung("split").load()
    for dist in ("normal", "heavy", "large"):
        gen, seed = generator("cuda")
        case = fam.make_case(shape, dtype, "cuda", gen, dist=dist)
        for _ in range(3):  # races show as a result that moves between runs
            cmp = check_case(fam, fn, case, dtype)
            assert cmp.ok, f"{shape} {dist} seed={seed}: {cmp.reason}"


@pytest.mark.parametrize("family", ["vector_add", "softmax"])
def test_every_rung_on_its_gpu_sweep(family):
    fam = get_family(family)
    for size in fam.sweep("cuda")[:2]:
        for rung in fam.rungs:
            if rung.limit and rung.limit(size, {}):
                continue
            gen, seed = generator("cuda")
            case = fam.make_case(size, torch.bfloat16, "cuda", gen)
            cmp = check_case(fam, rung.load(), case, torch.bfloat16)
            assert cmp.ok, f"{rung.name} {size} seed={seed}: {cmp.reason}"


def test_graph_and_event_timers_agree_on_a_medium_kernel():
    from kernelwright.harness.timing import TimerConfig, time_fn

    x = torch.randn(2**24, device="cuda")
    y = torch.empty_like(x)
    ev = time_fn(lambda: y.copy_(x), TimerConfig(graph="off", flush_l2=False))
    gr = time_fn(lambda: y.copy_(x), TimerConfig(graph="on"))
    assert gr.mode == "cuda-graph-warm-l2" and ev.mode == "cuda-events"  # no rotated input sets given
    assert abs(gr.median_ms / ev.median_ms - 1) < 0.25, (gr.median_ms, ev.median_ms)


def test_host_launch_overhead_is_not_timed():
    """A launcher that spends 40 us on the host before launching must time like the bare launch (the event pair
    waits behind the blocking kernel), or Python-launched kernels would look slower than C++-launched ones."""
    import time

    from kernelwright.harness.timing import TimerConfig, time_fn

    x = torch.randn(2**16, device="cuda")
    y = torch.empty_like(x)

    def slow_host():
        t = time.perf_counter()
        while time.perf_counter() - t < 40e-6:
            pass
        y.copy_(x)

    bare = time_fn(lambda: y.copy_(x), TimerConfig(graph="off"))
    slow = time_fn(slow_host, TimerConfig(graph="off"))
    assert slow.median_ms < 1.5 * bare.median_ms + 0.003, (slow.median_ms, bare.median_ms)
