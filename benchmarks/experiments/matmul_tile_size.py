"""Experiment: the shared-memory rung's tile size (8, 16, 32) at 1024^3 and 4096^3 fp32, with the naive and
coalesced rungs for scale. Each config is checked against the float64 reference before it is timed.
GPU only:
    KW_DEVICE=cuda python benchmarks/experiments/matmul_tile_size.py   # JSON to $OUT/tile_size.json

Why a size wins shows in `kw inspect matmul --variant cuda_smem` (registers, shared memory, occupancy) and in
the arithmetic: a TILE x TILE tile loads 2*TILE*TILE floats per TILE*TILE*TILE multiply-adds, so shared-memory
traffic per FMA falls as 2/TILE, while TILE^2 threads per block caps residency (1024 threads at 32).
"""

import json
import os

import torch

import kernelwright
from kernelwright.harness.inputs import generator, poisoned_like
from kernelwright.harness.timing import time_fn
from kernelwright.harness.verify import compare, error_scale, reference64
from kernelwright.ops.matmul import cuda
from kernelwright.registry import get_family

assert kernelwright.runtime.current_device() == "cuda"
fam = get_family("matmul")
rows = []
for size in [(1024, 1024, 1024), (4096, 4096, 4096)]:
    gen, _ = generator("cuda")
    case = fam.make_case(size, torch.float32, "cuda", gen)
    ref, scale = reference64(fam, case), error_scale(fam, case)
    a, b = case.args
    variants = [("cuda_naive", None), ("cuda_coalesced", None)] + [("cuda_smem", t) for t in (8, 16, 32)]
    for name, tile in variants:
        fn = getattr(cuda, name)
        kw = {} if tile is None else {"tile": tile}
        out = poisoned_like(size[:2], torch.float32, "cuda")
        fn(a, b, out=out, **kw)
        ok = compare(out, ref, fam.tolerances[torch.float32], scale).ok
        t = time_fn(lambda f=fn, x=a, y=b, o=out, k=kw: f(x, y, out=o, **k)) if ok else None
        tflops = 2 * size[0] * size[1] * size[2] / (t.median_ms * 1e-3) / 1e12 if t else None
        rows.append({"size": list(size), "rung": name, "tile": tile, "ok": ok,
                     "median_ms": t.median_ms if t else None, "iqr_ms": t.iqr_ms if t else None, "tflops": tflops})
        print(f"{'x'.join(map(str, size)):<16} {name:<15} tile {tile or '-':>3}  ok {ok}  "
              f"{(t.median_ms if t else float('nan')):9.3f} ms  {tflops or 0:7.2f} TFLOP/s", flush=True)
    del case, ref, scale
with open(os.path.join(os.environ.get("OUT", "/tmp"), "tile_size.json"), "w") as fh:
    json.dump(rows, fh, indent=2)
