"""Cross-check kernelwright's timer against NVIDIA nvbench (the cuda-bench package) on the same kernels and
inputs, in one process. Prints a table; writes JSON to $OUT (or /tmp). GPU only.

    KW_DEVICE=cuda python benchmarks/nvbench_crosscheck.py
"""

import json
import os
import sys

import cuda.bench as bench
import torch

import kernelwright
from kernelwright.harness.timing import time_fn

assert kernelwright.runtime.current_device() == "cuda", "needs a CUDA GPU"
out_dir = os.environ.get("OUT", "/tmp")
x = torch.randn(32768, 4096, device="cuda", dtype=torch.bfloat16)
y = torch.empty_like(x)
a = torch.randn(2**28, device="cuda")
b = torch.randn(2**28, device="cuda")
c = torch.empty_like(a)
CASES = {
    "softmax_fused_bf16_32768x4096": (lambda: kernelwright.ops.softmax(x, variant="fused", out=y), 2 * x.numel() * 2),
    "torch_softmax_bf16_32768x4096": (lambda: torch.softmax(x, -1), 2 * x.numel() * 2),
    "vector_add_triton_fp32_2^28": (
        lambda: kernelwright.ops.vector_add(a, b, variant="triton", out=c), 3 * a.numel() * 4),
}
for fn, _ in CASES.values():  # compile outside both timers
    fn()
torch.cuda.synchronize()
ours = {name: time_fn(fn).median_ms for name, (fn, _) in CASES.items()}


@bench.register()
@bench.axis.string("Case", list(CASES))
def kernels(state: bench.State):
    fn, nbytes = CASES[state.get_string("Case")]
    state.add_global_memory_reads(nbytes // 2)
    state.add_global_memory_writes(nbytes // 2)
    stream = torch.cuda.ExternalStream(state.get_stream().addressof())

    def launch(_launch: bench.Launch):
        with torch.cuda.stream(stream):
            fn()

    state.exec(launch)


bench.run_all_benchmarks(sys.argv[:1] + ["--json", f"{out_dir}/nvbench.json", "--md", f"{out_dir}/nvbench.md"])
theirs = {}
with open(f"{out_dir}/nvbench.json") as fh:
    data = json.load(fh)
for st in data["benchmarks"][0]["states"]:
    case = next(ax["value"] for ax in st["axis_values"] if ax["name"] == "Case")
    for s in st["summaries"]:
        if s["tag"] == "nv/cold/time/gpu/median":  # seconds
            theirs[case] = 1e3 * float(next(d["value"] for d in s["data"] if d["name"] == "value"))
rows = [{"case": k, "kernelwright_median_ms": ours[k], "nvbench_cold_median_ms": theirs.get(k),
         "ratio": ours[k] / theirs[k] if theirs.get(k) else None} for k in CASES]
with open(f"{out_dir}/timer_crosscheck.json", "w") as fh:
    json.dump(rows, fh, indent=2)
print(f"{'case':<34} {'kernelwright ms':>16} {'nvbench cold median ms':>23} {'ratio':>7}")
for r in rows:
    print(f"{r['case']:<34} {r['kernelwright_median_ms']:>16.4f} {r['nvbench_cold_median_ms'] or float('nan'):>23.4f} "
          f"{r['ratio'] or float('nan'):>7.3f}")
