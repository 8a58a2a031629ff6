"""Experiment: an H200 stand-in on a smaller-bandwidth card. The issue's targets are H200 numbers, and most sessions
are lent H100s, whose copy ceiling (3.00 TB/s) sits under every target (3.6). What separates a kernel's rate on the
two cards at wide rows is how much memory traffic one SM keeps in flight: the H200 gives each of its 132 SMs ~32 GB/s
of HBM (4.25 TB/s), the H100 ~23. So take SMs away on the H100 until each remaining SM has the H200's share: a
resident "occupier" kernel holds N SMs whole (all of their shared memory and registers, one spinning thread each)
while the kernel under test runs on the rest; with 132 - N SMs at ~32 GB/s each the H100's HBM is no longer what
binds, and the per-SM rate says what the kernel's own latency and issue allow. GPU only:

    KW_DEVICE=cuda python benchmarks/experiments/sm_proxy.py [--blocked 0,33,44,66] [--sizes 4096x65536,1024x262144]

Output: per case, blocked SMs, TB/s, GB/s per active SM (and the SM clock read after it), and "x132": that rate
times 132 (what the kernel would move
on a card with 132 such SMs and no HBM limit). The stand-in is checked, not assumed: the same cases have H200 rows
(runs 86-87; layer norm's cluster rung with FAST_STATS off is session 21's kernel), which x132 should reproduce at
some N before it is used to predict anything. Rungs whose programs wait on each other (split's persistent grid) are
sized to the SMs left (``persistent_groups`` scaled); a case that does not finish in 10 s has the occupier released
(its SMs freed, so nothing stays hung) and is reported as such. Every output is checked against float64 first.
JSON to $OUT/sm_proxy.json.

Not for cache hints: with H200 run 54's softmax cluster kernel, ``softmax.cuda.HINTS`` read -1.6% / -0.3% here
(H100 run 109, 48 SMs held) where the H200 lost 7% / 7.6% (benchmarks/journal/norms.md, session 33).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

from kernelwright.backends.nvrtc import CompileOptions, CudaKernel
from kernelwright.harness import telemetry
from kernelwright.ops.layer_norm import cuda as ln
from kernelwright.ops.rms_norm import cuda as rms
from kernelwright.ops.rms_norm import triton as tri
from kernelwright.ops.softmax import cuda as smx

OUT = os.environ.get("OUT", "/tmp")

# One CTA an SM (all of its shared memory), 1024 threads at 64 registers (the whole register file): no other CTA fits
# beside it. Thread 0 records the SM, counts itself in, and spins until the host raises the flag; the 60 values read
# before the spin (volatile reads stay in order) and used after it keep the registers allocated.
OCCUPY = r"""
extern "C" __global__ void __launch_bounds__(1024, 1) occupy(volatile int* flag, int* ready, int* smid) {
    extern __shared__ int pad[];
    float v[60];
#pragma unroll
    for (int i = 0; i < 60; ++i) v[i] = __int_as_float(flag[1] + i * (int)threadIdx.x);
    if (threadIdx.x == 0) {
        unsigned sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        smid[blockIdx.x] = (int)sm;
        atomicAdd(ready, 1);
        while (flag[0] == 0) __nanosleep(1000);
    }
    __syncthreads();
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 60; ++i) s += v[i] * v[(i + 7) % 60];
    pad[threadIdx.x] = __float_as_int(s);
    __syncthreads();
    if (pad[(threadIdx.x + 1) % 1024] == 0x7f7f7f7f) ready[1] = 1;
}
"""


class Occupier:
    """Holds ``n`` SMs while in a ``with`` block (on its own stream); ``release()`` frees them early."""

    def __init__(self, n: int, cluster: int = 1):
        if n % cluster:
            raise ValueError(f"Occupier: n={n} SMs is not a whole number of clusters of {cluster}")
        self.n, self.cluster = n, cluster
        self.kernel = CudaKernel(OCCUPY, "occupy", CompileOptions(), what="sm_proxy occupier")
        self.flag = torch.zeros(2, dtype=torch.int32, device="cuda")
        self.one = torch.ones(1, dtype=torch.int32).pin_memory()  # copied in by DMA: releasing takes no SM
        self.ready = torch.zeros(2, dtype=torch.int32, device="cuda")
        self.smid = torch.full((max(n, 1),), -1, dtype=torch.int32, device="cuda")
        self.stream = torch.cuda.Stream()
        self.side = torch.cuda.Stream()
        self.smem = torch.cuda.get_device_properties(0).shared_memory_per_block_optin

    def __enter__(self):
        if self.n:
            with torch.cuda.stream(self.stream):
                self.kernel.launch((self.n,), (1024,), (self.flag, self.ready, self.smid), shared_mem=self.smem,
                                   cluster=self.cluster if self.cluster > 1 else 0)
            deadline = time.time() + 5
            with torch.cuda.stream(self.side):
                while int(self.ready[0].item()) < self.n:
                    if time.time() > deadline:
                        self.release()
                        raise RuntimeError(f"occupier: {int(self.ready[0].item())} of {self.n} CTAs resident")
                    time.sleep(0.001)
        return self

    def release(self):
        # a host-to-device copy (the copy engine), not a kernel: a fill kernel could queue behind a launch that
        # waits for the occupier's SMs (run 96 hung that way: clusters of 4 with no GPC left to place them)
        with torch.cuda.stream(self.side):
            self.flag[:1].copy_(self.one, non_blocking=True)
        self.stream.synchronize()

    def __exit__(self, *exc):
        if self.n:
            self.release()
            torch.cuda.synchronize()
            self.smid_list = sorted(self.smid.tolist())
            self.flag.zero_()
            self.ready.zero_()
            torch.cuda.synchronize()
        return False


def time_launches(fn, occ: Occupier, reps: int = 5, inner: int = 8) -> tuple[float, bool]:
    """Median microseconds a call of ``fn`` over ``reps`` event-timed batches of ``inner`` calls, on a stream of
    its own (no device-wide synchronization while the occupier spins). Returns (us, finished)."""
    stream = torch.cuda.Stream()
    times = []
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(inner):
                fn()
            b.record()
            deadline = time.time() + 10
            while not b.query():
                if time.time() > deadline:
                    occ.release()
                    b.synchronize()
                    return float("nan"), False
                time.sleep(0.0005)
            times.append(a.elapsed_time(b) * 1e3 / inner)
    return statistics.median(times), True


def check(y: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    err = (y.double() - ref).abs().max().item()
    scale = ref.abs().max().item()
    if not err <= 2e-2 * max(scale, 1.0):
        raise AssertionError(f"{what}: max error {err} against scale {scale}")


def cases(rows: int, cols: int):
    """(name, fn(y), float64 reference) for the rungs at this size, bf16."""
    g = torch.Generator(device="cpu").manual_seed(rows + cols)
    x = torch.randn(rows, cols, generator=g).to(torch.bfloat16).cuda()
    w = (1 + 0.1 * torch.randn(cols, generator=g)).to(torch.bfloat16).cuda()
    b = (0.1 * torch.randn(cols, generator=g)).to(torch.bfloat16).cuda()

    def layer_ref():
        x64 = x.double()
        mean = x64.mean(-1, keepdim=True)
        return (x64 - mean) / torch.sqrt(x64.var(-1, unbiased=False, keepdim=True) + 1e-5) * w.double() + b.double()

    def rms_ref():
        x64 = x.double()
        return x64 / torch.sqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()

    def fast(on: bool):
        def run(y):
            ln.FAST_STATS = on  # the kernels are keyed by their defines: takes effect at once
            ln.layer_norm_cluster(x, w, b, out=y)
        return run

    if cols <= 16384:  # where the fused rung and torch.compile's kernel compete (H200 run 86: 4.02 against 4.17)
        compiled = torch.compile(lambda x, w: torch.nn.functional.rms_norm(x, (cols,), w, 1e-6))
        return x, [
            ("copy", lambda y: y.copy_(x), lambda: x.double()),
            ("rms fused", lambda y: tri.norm_forward("fused", x, w, 1e-6, y=y), rms_ref),
            ("rms cluster", lambda y: rms.rms_norm_cluster(x, w, out=y), rms_ref),
            ("rms torch.compile", lambda y: compiled(x, w), rms_ref),
        ]
    return x, [
        ("copy", lambda y: y.copy_(x), lambda: x.double()),
        ("rms cluster", lambda y: rms.rms_norm_cluster(x, w, out=y), rms_ref),
        ("rms split", lambda y: tri.norm_forward("split", x, w, 1e-6, y=y), rms_ref),
        ("layer cluster", fast(True), layer_ref),
        ("layer cluster FAST_STATS=0", fast(False), layer_ref),
        ("layer split", lambda y: tri.norm_forward("split", x, w, 1e-5, y=y, bias=b), layer_ref),
        ("softmax cluster", lambda y: smx.softmax_cluster(x, out=y),
         lambda: torch.softmax(x.double(), -1)),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocked", default="0,33,44,66", help="SM counts to hold, comma-separated")
    ap.add_argument("--sizes", default="4096x65536,1024x262144")
    ap.add_argument("--only", default="", help="case names to keep (substring match, comma-separated)")
    ap.add_argument("--json", default=os.path.join(OUT, "sm_proxy.json"), help="where the rows go")
    ap.add_argument("--set", action="append", default=[], metavar="module.NAME=VALUE",
                    help="a library switch to flip first (as switch_bench.py takes them; repeatable)")
    ap.add_argument("--cluster", type=int, default=1,
                    help="the occupier's CTAs in clusters of this size (16: whole GPCs, so the rungs' own clusters "
                         "still find GPCs to themselves); --blocked counts SMs, a multiple of it")
    args = ap.parse_args()
    from switch_bench import apply  # this folder's: module.NAME=VALUE, checked and echoed

    for assignment in args.set:
        apply(assignment)
    blocked = [int(n) for n in args.blocked.split(",")]
    n_sms = torch.cuda.get_device_properties(0).multi_processor_count
    if max(blocked) >= n_sms:
        raise SystemExit(f"--blocked: at most {n_sms - 1} SMs on this card, got {max(blocked)}")
    facts = {"device": torch.cuda.get_device_name(), "sms": n_sms, "torch": torch.__version__,
             "occupier_cluster": args.cluster, "switches": args.set}
    print(facts, flush=True)
    plain_groups = tri.persistent_groups
    active = {"n": n_sms}

    def scaled_groups(*a, **k):  # split's persistent grid sized to the SMs the occupier leaves
        return max(1, plain_groups(*a, **k) * active["n"] // n_sms)

    tri.persistent_groups = scaled_groups
    rows_out = []
    t0 = time.time()
    keep = [s for s in args.only.split(",") if s]
    for size in args.sizes.split(","):
        r, c = (int(v) for v in size.split("x"))
        x, todo = cases(r, c)
        todo = [t for t in todo if not keep or any(k in t[0] for k in keep)]
        nbytes = 2 * x.numel() * x.element_size()
        y = torch.empty_like(x)
        for name, fn, ref in todo:  # correctness first, on the whole GPU
            y.fill_(float("nan"))
            got = fn(y)
            torch.cuda.synchronize()
            check(y if got is None else got, ref(), f"{name} {size}")
        torch.cuda.empty_cache()
        for n in blocked:
            active["n"] = n_sms - n
            occ = Occupier(n, args.cluster)
            with occ:
                got = []
                for name, fn, _ in todo:  # after a case that did not finish the occupier is gone: stop the round
                    got.append((name, *time_launches(lambda f=fn, out=y: f(out), occ), telemetry.read()))
                    if not got[-1][2]:
                        break
            for name, us, done, tel in got:
                gbs = nbytes / us / 1e3 / (n_sms - n) if done else float("nan")
                row = {"case": name, "size": size, "blocked": n, "active": n_sms - n, "us": us, "finished": done,
                       "seconds": round(time.time() - t0, 1), "sm_clock_mhz": tel.get("sm_clock_mhz"),
                       "power_w": tel.get("power_w"),
                       "TBps": nbytes / us / 1e6 if done else None, "GBps_per_sm": gbs, "x132": gbs * 132 / 1e3,
                       "occupied_sms": getattr(occ, "smid_list", [])[:200]}
                rows_out.append(row)
                print(f"{name:28s} {size:12s} blocked {n:3d}  {row['TBps'] or float('nan'):5.2f} TB/s  "
                      f"{gbs:6.1f} GB/s/SM  x132 {row['x132']:5.2f}  at {row['seconds']:.0f} s, "
                      f"{row['sm_clock_mhz']} MHz after"
                      f"{'' if done else '  (did not finish: occupier released)'}",
                      flush=True)
        ln.FAST_STATS = True
        del x, y
        torch.cuda.empty_cache()
    tri.persistent_groups = plain_groups
    with open(args.json, "w") as f:
        json.dump({"facts": facts, "rows": rows_out}, f, indent=1)
    print("\ncase                         size         " + "  ".join(f"x132@{n:<3d}" for n in blocked))
    for size in args.sizes.split(","):
        names = dict.fromkeys(r["case"] for r in rows_out if r["size"] == size)
        for name in names:
            vals = {r["blocked"]: r["x132"] for r in rows_out if r["size"] == size and r["case"] == name}
            print(f"{name:28s} {size:12s} " + "  ".join(f"{vals.get(n, float('nan')):8.2f}" for n in blocked))


if __name__ == "__main__":
    main()
