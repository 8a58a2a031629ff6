"""A gate for event timing: nvbench's blocking kernel, released by the host, occupying the whole GPU.

A fixed spin (``torch.cuda._sleep``) queued before the start event hides the host's launch code only when that
code is shorter than the spin. A module whose forward launches many kernels from Python, or a process whose host
is slower, outlasts any fixed spin, and then the GPU's idle time lands between the start and end events. The gate
removes the guess: a kernel spins on a flag in pinned host memory, the host queues the start event, the timed
call and the end event behind it, and only then sets the flag. Everything timed is already queued when the GPU
starts on it, however long the host took to queue it.

Unlike nvbench's one-thread kernel, the gate takes every block slot of every SM (one program polls the host flag
and passes the release on through device memory; the others poll that), meant to keep work the timed call queues
on *another* stream from running under the gate. That is not guaranteed: on the H200 a one-block kernel queued on
a side stream right after the gate still ran under it (runs 15 and 19), presumably dispatched before the gate's
blocks had filled every SM. The evaluator does not rely on it: it synchronises the whole device before the end
of timing and checks each timed call's outputs (``tests/test_eval.py``'s side-stream test).

Generations only grow, and a gate passes once the flag holds its generation *or a later one*: a host that queues
several gated calls before the GPU reaches the first (``kw bench`` queues batches of samples) has opened them all,
and each passes as soon as the GPU gets to it. (After 2^31 - 1 closes the generation wraps to 1 and that one gate
passes at once.)

The spin is bounded (``max_spins`` reads of the flag, a few hundred milliseconds): a timed call that waits on
the GPU itself (``.item()``, ``synchronize()``) would otherwise wait on a gate that only it could open. A gate
that ran out of spins says so (:meth:`HostGate.timed_out`), and the caller times that callable without a gate.

Usage::

    gate = HostGate()
    gate.close()          # queue the blocking kernel
    start.record(); fn(); end.record()
    gate.open()           # release it: the GPU now runs fn back to back
    torch.cuda.synchronize()
    assert not gate.timed_out()
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

MAX_SPINS = 200_000
"""Reads of the host flag before the gate gives up (each crosses the PCIe bus: ~1 us, so ~0.2 s)."""


WARPS = 1
BLOCKS_PER_SM = 32
"""Resident thread blocks an SM holds at most (32 on sm_80 and sm_90, fewer on smaller chips): the gate launches
that many one-warp programs per SM, so every block slot is taken and no other kernel's block can be scheduled
(filling warp slots is not enough: a kernel whose registers allow fewer blocks than the warps would leaves room,
which the H200 showed in run 15)."""


@triton.jit(do_not_specialize=["gen"])
def _blocking_kernel(host_flag_ptr, release_ptr, spins_ptr, gen, max_spins):
    # volatile loads go to memory every time: program 0 sees the host's store to the pinned flag, the others see
    # program 0's store of the release; a load of memory another agent writes must not be cached in registers/L1
    n = 0
    if tl.program_id(0) == 0:
        flag = tl.load(host_flag_ptr, volatile=True)
        while (flag < gen) & (n < max_spins):
            flag = tl.load(host_flag_ptr, volatile=True)
            n += 1
        tl.store(release_ptr, gen)
        tl.store(spins_ptr, n)
    else:
        released = tl.load(release_ptr, volatile=True)
        while (released < gen) & (n < 8 * max_spins):  # device-memory reads are faster than the host flag's
            released = tl.load(release_ptr, volatile=True)
            n += 1


def programs_to_fill(sms: int, blocks_per_sm: int = BLOCKS_PER_SM) -> int:
    """Programs that take every block slot of ``sms`` SMs (on a chip with fewer slots the rest wait their turn,
    which keeps the slots full as well)."""
    if sms < 1 or blocks_per_sm < 1:
        raise ValueError(f"sms and blocks_per_sm must be >= 1, got {sms} and {blocks_per_sm}")
    return sms * blocks_per_sm


class HostGate:
    """One blocking kernel at a time on the current stream, opened by the host (see the module docstring).

    ``programs`` one-warp programs take every block slot of every SM."""

    def __init__(self, max_spins: int = MAX_SPINS):
        if not isinstance(max_spins, int) or max_spins < 1:
            raise ValueError(f"max_spins must be an int >= 1, got {max_spins!r}")
        if not torch.cuda.is_available():
            raise RuntimeError("HostGate needs a CUDA device: on CPU the host clock times calls directly")
        self.max_spins = max_spins
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        self.programs = programs_to_fill(props.multi_processor_count)
        self._flag = torch.zeros(1, dtype=torch.int32, pin_memory=True)
        self._flag_np = self._flag.numpy()  # a store through numpy: ~100 ns, no torch dispatch on the open path
        self._release = torch.zeros(1, dtype=torch.int32, device="cuda")
        self._spins = torch.full((1,), -1, dtype=torch.int32, device="cuda")
        self._gen = 0
        self.closed = False

    def close(self) -> None:
        """Queue the blocking kernel on the current stream; work queued after it waits for :meth:`open`."""
        if self.closed:
            raise RuntimeError("the gate is already closed: open it before closing it again")
        self._gen = self._gen % (2**31 - 1) + 1  # a new generation: the flag and the release still hold the last
        self.closed = True
        _blocking_kernel[(self.programs,)](self._flag, self._release, self._spins, self._gen, self.max_spins,
                                           num_warps=WARPS)

    def open(self) -> None:
        """Release the blocking kernel (the host's store; the GPU sees it at its next read of the flag)."""
        self._flag_np[0] = self._gen
        self.closed = False

    def spins(self) -> int:
        """Reads of the flag the last blocking kernel made before it ended (synchronizes the device)."""
        return int(self._spins.item())

    def timed_out(self) -> bool:
        """True when the last blocking kernel gave up waiting: the timed call itself waited on the GPU."""
        return self.spins() >= self.max_spins


def gate_for(call) -> HostGate | None:
    """A gate to time ``call()`` behind, or None when it cannot be used: no gate can be built here (then a
    warning says why) or ``call`` waits on the GPU itself (``.item()``, ``synchronize()``: a gated trial call ran
    out of spins). Makes two gated trial calls."""
    import warnings

    try:
        gate = HostGate()
        gate.close()  # compiles the blocking kernel
        gate.open()
        torch.cuda.synchronize()
    except Exception as e:  # a Triton that cannot build it: the caller's fixed spin, as before
        warnings.warn(f"the host gate is not available ({type(e).__name__}: {e}); timing behind a fixed spin",
                      stacklevel=2)
        return None
    for _ in range(2):
        gate.close()
        try:
            call()
        finally:
            gate.open()
        torch.cuda.synchronize()
        if gate.timed_out():
            return None
    return gate
