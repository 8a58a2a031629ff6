"""Experiment: is the norm cluster rungs' forward at wide rows bound by L2 bandwidth (the per-column weight and
bias read again from L2 for every row)? GPU only:

    KW_DEVICE=cuda python benchmarks/experiments/norm_l2_probe.py   # JSON to $OUT/norm_l2_probe.json

1. L2 read bandwidth: a Triton kernel whose programs each read one 64 KB block of a buffer that L2 holds (4-32 MB,
   read 2 GB in all), against the same kernel over a 4 GB buffer read once (HBM).
2. The cluster rungs at 4096 x 65536 and 1024 x 262144 (bf16): layer norm with its own bias, and with the bias the
   same tensor as the weight (the second per-column vector then hits in L1 behind the first: half the L2 reads a
   row); rms_norm and softmax's rung at the same shapes (one and zero per-column vectors). If L2 binds, layer norm
   with b = w runs near rms_norm's rate. Every output is checked against float64 before it is timed.
"""

from __future__ import annotations

import json
import os

import torch
import triton
import triton.language as tl

from kernelwright.harness.timing import TimerConfig, time_fn
from kernelwright.ops.layer_norm import cuda as ln
from kernelwright.ops.rms_norm import cuda as rms
from kernelwright.ops.softmax import cuda as smx

OUT = os.environ.get("OUT", "/tmp")
CFG = TimerConfig(max_seconds=0.5)


@triton.jit
def _read_blocks(buf, out, n_blocks, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = (pid % n_blocks).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + pid, tl.sum(tl.load(buf + offs).to(tl.float32)))


def read_bandwidth(buffer_bytes: int, total_bytes: int, block: int = 16384) -> dict:
    buf = torch.randn(buffer_bytes // 4, device="cuda")
    n_blocks = buf.numel() // block
    grid = max(n_blocks, total_bytes // (block * 4))
    out = torch.empty(grid, device="cuda")
    fn = lambda: _read_blocks[(grid,)](buf, out, n_blocks, BLOCK=block, num_warps=8)  # noqa: E731
    fn()
    expect = buf.view(n_blocks, block).double().sum(1)
    got = out[:n_blocks].double()
    assert torch.allclose(got, expect, rtol=1e-4, atol=1e-2), "read kernel wrong"
    t = time_fn(fn, TimerConfig(max_seconds=0.5, flush_l2=buffer_bytes > 2**30))
    return {"buffer_MB": buffer_bytes / 2**20, "read_GB": grid * block * 4 / 1e9, "ms": t.median_ms,
            "TBps": grid * block * 4 / t.median_ms / 1e9}


def check(y: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    err = (y.double() - ref).abs().max().item()
    scale = ref.abs().max().item()
    if not err <= 2e-2 * max(scale, 1.0):
        raise AssertionError(f"{what}: max error {err} against scale {scale}")


def norms(rows: int, cols: int) -> list[dict]:
    g = torch.Generator(device="cuda").manual_seed(rows + cols)
    x = torch.randn(rows, cols, device="cuda", generator=g).to(torch.bfloat16)
    w = (1 + 0.1 * torch.randn(cols, device="cuda", generator=g)).to(torch.bfloat16)
    b = (0.1 * torch.randn(cols, device="cuda", generator=g)).to(torch.bfloat16)
    nbytes = 2 * x.numel() * x.element_size()
    x64 = x.double()
    res = []

    def run(name, fn, ref):
        y = torch.full_like(x, float("nan"))
        fn(y)
        torch.cuda.synchronize()
        check(y, ref, f"{name} {rows}x{cols}")
        t = time_fn(lambda: fn(y), CFG)
        res.append({"case": name, "size": f"{rows}x{cols}", "ms": t.median_ms, "TBps": nbytes / t.median_ms / 1e9})
        print(f"{name:24s} {rows}x{cols:<8d} {res[-1]['TBps']:.2f} TB/s", flush=True)

    mean = x64.mean(-1, keepdim=True)
    xhat = (x64 - mean) / torch.sqrt(x64.var(-1, unbiased=False, keepdim=True) + 1e-5)
    run("layer_norm w, b", lambda y: ln.layer_norm_cluster(x, w, b, out=y), xhat * w.double() + b.double())
    run("layer_norm w, b = w", lambda y: ln.layer_norm_cluster(x, w, w, out=y), xhat * w.double() + w.double())
    ln.ONE_PASS_MEAN = True  # the kernels are keyed by their defines: the switch takes effect at once
    try:
        run("layer_norm 1pass w, b", lambda y: ln.layer_norm_cluster(x, w, b, out=y), xhat * w.double() + b.double())
        run("layer_norm 1pass b = w", lambda y: ln.layer_norm_cluster(x, w, w, out=y), xhat * w.double() + w.double())
    finally:
        ln.ONE_PASS_MEAN = False
    del xhat
    xr = x64 / torch.sqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6)
    run("rms_norm w", lambda y: rms.rms_norm_cluster(x, w, out=y), xr * w.double())
    del xr
    run("softmax", lambda y: smx.softmax_cluster(x, out=y), torch.softmax(x64, -1))
    return res


def main() -> None:
    facts = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}
    l2 = []
    for mb in (4, 16, 32):
        l2.append(read_bandwidth(mb * 2**20, 2 * 2**30))
        print(f"read {mb:4d} MB buffer x{l2[-1]['read_GB'] / (mb * 2**20 / 1e9):.0f}: {l2[-1]['TBps']:.2f} TB/s",
              flush=True)
    l2.append(read_bandwidth(4 * 2**30, 4 * 2**30))
    print(f"read 4 GB once (HBM): {l2[-1]['TBps']:.2f} TB/s", flush=True)
    rows = norms(4096, 65536) + norms(1024, 262144)
    with open(os.path.join(OUT, "norm_l2_probe.json"), "w") as f:
        json.dump({"facts": facts, "read": l2, "norms": rows}, f, indent=1)


if __name__ == "__main__":
    main()
