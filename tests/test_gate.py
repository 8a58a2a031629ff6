"""The host-released blocking kernel (kernelwright.harness.gate): its logic on the interpreter, its effect on
the H200 (the host's launch time stays out of an event pair; a side stream cannot run under the gate)."""

import time

import pytest
import torch

from kernelwright.harness import gate


def _run(host_flag: int, gen: int, max_spins: int, programs: int = 3) -> tuple[int, int]:
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    flag = torch.tensor([host_flag], dtype=torch.int32, device=dev)
    release = torch.tensor([gen - 1], dtype=torch.int32, device=dev)
    spins = torch.full((1,), -1, dtype=torch.int32, device=dev)
    gate._blocking_kernel[(programs,)](flag, release, spins, gen, max_spins)
    return int(spins.item()), int(release.item())


def test_an_open_gate_passes_at_once_and_releases_the_other_programs():
    spins, release = _run(host_flag=7, gen=7, max_spins=50)
    assert spins == 0
    assert release == 7  # the generation program 0 handed on; the other programs stopped on it


def test_a_gate_nobody_opens_gives_up_after_max_spins():
    spins, release = _run(host_flag=6, gen=7, max_spins=5)  # the host flag still holds the last generation
    assert spins == 5
    assert release == 7  # released on the timeout too: nothing waits forever


@pytest.mark.parametrize("sms, per_sm, want", [(132, 32, 4224), (108, 32, 3456), (4, 16, 64)])
def test_programs_take_every_block_slot(sms, per_sm, want):
    assert gate.programs_to_fill(sms, per_sm) == want
    with pytest.raises(ValueError, match="sms"):
        gate.programs_to_fill(0, per_sm)


def test_bad_max_spins_is_refused():
    with pytest.raises(ValueError, match="max_spins"):
        gate.HostGate(max_spins=0)


@pytest.mark.gpu
def test_gpu_host_time_stays_out_of_the_sample():
    g = gate.HostGate()
    x = torch.randn(1 << 20, device="cuda")
    for _ in range(3):  # compile
        g.close()
        x.mul(2)
        g.open()
        torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    g.close()
    s.record()
    for _ in range(5):
        time.sleep(0.002)  # a host that takes 10 ms to queue five small kernels
        x.mul(2)
    e.record()
    g.open()
    torch.cuda.synchronize()
    assert not g.timed_out()
    assert s.elapsed_time(e) < 1.0, f"{s.elapsed_time(e):.3f} ms: host time leaked into the gated span"


@pytest.mark.gpu
def test_gpu_a_gate_that_is_never_opened_times_out():
    g = gate.HostGate(max_spins=1000)
    g.close()
    torch.cuda.synchronize()  # a timed call that waits on the GPU itself: the gate must give up, not hang
    g.open()
    assert g.timed_out()


@pytest.mark.gpu
@pytest.mark.xfail(reason="a side-stream kernel queued right after the gate ran under it on the H200 (runs 15 and "
                          "19); the evaluator relies on device-wide synchronisation instead", strict=False)
def test_gpu_a_side_stream_cannot_run_under_the_gate():
    g = gate.HostGate()
    g.close()
    g.open()
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    done = torch.cuda.Event()
    g.close()
    with torch.cuda.stream(side):  # queued on another stream while the gate holds the current one
        torch.cuda._sleep(1000)
        done.record()
    time.sleep(0.01)
    ran_under_gate = done.query()
    g.open()
    torch.cuda.synchronize()
    assert not ran_under_gate, "a side stream's kernel ran while the gate held the GPU"


def test_a_gate_the_host_opened_for_a_later_generation_passes_at_once():
    # kw bench queues batches: by the time the GPU reaches gate 7 the host may have opened 8 and 9 already
    spins, release = _run(host_flag=9, gen=7, max_spins=50)
    assert spins == 0 and release == 7


@pytest.mark.gpu
def test_gpu_the_timer_keeps_a_slow_host_out_of_its_samples():
    # a call whose host code takes ~0.4 ms to queue two ~10 us kernels (as a Python op with several launches and
    # some bookkeeping does): the fixed ~0.1 ms spin lets the host time into the samples, the gate does not
    from kernelwright.harness import timing

    x = torch.randn(1 << 22, device="cuda")

    def slow_host():
        t0 = time.perf_counter()
        x.mul(2)
        while time.perf_counter() - t0 < 4e-4:
            pass
        x.add(1)

    cfg = dict(max_seconds=0.3, graph="off", flush_l2=False)
    gated = timing.time_fn(slow_host, timing.TimerConfig(**cfg), "cuda")
    spun = timing.time_fn(slow_host, timing.TimerConfig(**cfg, gate=False), "cuda")
    assert gated.hold == "gate" and spun.hold == "spin"
    assert gated.host_us > 350, gated.host_us
    assert gated.median_ms < 0.15, f"gated {gated.median_ms:.3f} ms: host time in the samples"
    assert spun.median_ms > 0.25, f"spin {spun.median_ms:.3f} ms: expected the host's 0.4 ms to show"
